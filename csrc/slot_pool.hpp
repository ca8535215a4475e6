// Slots reused by index: the compiled structures keep their elements in a vector and the indices
// of those let go in a free list, so an index stays valid while its element lives.
#pragma once

#include <cstdint>
#include <vector>

// The index of a slot for a new element of `pool`: the last one `free` names (taken off it, its
// old element left for the caller to overwrite), or a new default element at the end.
template <class T> int32_t take_slot(std::vector<T>& pool, std::vector<int32_t>& free) {
    if (free.empty()) {
        pool.emplace_back();
        return int32_t(pool.size() - 1);
    }
    const int32_t s = free.back();
    free.pop_back();
    return s;
}
