// A table of values keyed by the address of a live Python object (the engine's waiting requests,
// the market's held ones): linear probing over a power-of-two table at most half full.
#pragma once

#include <Python.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace pycall {

// Values keyed by the address of a live Python object: open addressing on the address, without a
// bucket's allocation or a division per lookup. An address is a key only while
// its object lives: a value must say itself whether it still describes the object found there.
template <class V>
class AddressTable {
public:
    V *find(PyObject *o) { return const_cast<V *>(std::as_const(*this).find(o)); }
    const V *find(PyObject *o) const {
        if (slots_.empty() || !o) return nullptr;
        for (size_t i = home(o);; i = (i + 1) & (slots_.size() - 1)) {
            if (slots_[i].key == o) return &slots_[i].value;
            if (!slots_[i].key) return nullptr;
        }
    }

    // `value` at `o`, replacing any there; where it lies until the next insert or erase.
    V &insert(PyObject *o, V value) {
        if (2 * (count_ + 1) > slots_.size()) grow();
        size_t i = home(o);
        while (slots_[i].key && slots_[i].key != o) i = (i + 1) & (slots_.size() - 1);
        if (!slots_[i].key) ++count_;
        slots_[i] = Slot{o, std::move(value)};
        return slots_[i].value;
    }

    // Removal by shifting back the entries after it that probed past it, so no slot is a tombstone;
    // whether `o` was there.
    bool erase(PyObject *o) {
        if (slots_.empty()) return false;
        const size_t mask = slots_.size() - 1;
        size_t i = home(o);
        while (slots_[i].key != o) {
            if (!slots_[i].key) return false;
            i = (i + 1) & mask;
        }
        for (size_t j = (i + 1) & mask; slots_[j].key; j = (j + 1) & mask) {
            size_t h = home(slots_[j].key);
            if (((j - h) & mask) >= ((j - i) & mask)) {  // its home is at or before the gap: it moves there
                slots_[i] = std::move(slots_[j]);
                i = j;
            }
        }
        slots_[i] = Slot{};
        --count_;
        return true;
    }

private:
    struct Slot {
        PyObject *key = nullptr;  // null: empty
        V value{};
    };
    size_t home(PyObject *o) const {
        return static_cast<size_t>((reinterpret_cast<uintptr_t>(o) >> 4) * 0x9E3779B97F4A7C15ull) & (slots_.size() - 1);
    }
    void grow() {
        std::vector<Slot> old(std::max<size_t>(16, 2 * slots_.size()));
        old.swap(slots_);
        count_ = 0;
        for (Slot &slot : old)
            if (slot.key) insert(slot.key, std::move(slot.value));
    }
    std::vector<Slot> slots_;
    size_t count_ = 0;
};

}  // namespace pycall
