// The compiled engine's table of waiting requests by their objects (engine.hpp's RequestTable):
// linear probing over a power-of-two table at most half full.
#include <algorithm>

#include "engine.hpp"

namespace engine {

const ReqPtr *RequestTable::find(PyObject *o) const {
    if (slots.empty()) return nullptr;
    for (std::size_t i = home(o);; i = (i + 1) & (slots.size() - 1)) {
        if (slots[i].key == o) return &slots[i].r;
        if (!slots[i].key) return nullptr;
    }
}

void RequestTable::insert(PyObject *o, const ReqPtr &r) {
    if (2 * (count + 1) > slots.size()) grow();
    std::size_t i = home(o);
    while (slots[i].key && slots[i].key != o) i = (i + 1) & (slots.size() - 1);
    if (!slots[i].key) ++count;
    slots[i] = Slot{o, r};
    ++edits;
}

// Removal by shifting back the entries after it that probed past it, so no slot is ever a tombstone.
void RequestTable::erase(PyObject *o) {
    if (slots.empty()) return;
    const std::size_t mask = slots.size() - 1;
    std::size_t i = home(o);
    while (slots[i].key != o) {
        if (!slots[i].key) return;
        i = (i + 1) & mask;
    }
    for (std::size_t j = (i + 1) & mask; slots[j].key; j = (j + 1) & mask) {
        std::size_t h = home(slots[j].key);
        if (((j - h) & mask) >= ((j - i) & mask)) {  // its home is at or before the gap: it moves there
            slots[i] = std::move(slots[j]);
            i = j;
        }
    }
    slots[i] = Slot{};
    --count;
    ++edits;
}

void RequestTable::grow() {
    std::vector<Slot> old(std::max<std::size_t>(16, 2 * slots.size()));
    old.swap(slots);
    count = 0;
    for (Slot &slot : old)
        if (slot.key) insert(slot.key, slot.r);
}

}  // namespace engine
