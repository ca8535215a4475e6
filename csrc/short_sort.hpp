// std::stable_sort's order without its buffer: the ranges a round sorts (a node's blocks, a bidder's
// leaving blocks) are short, and an insertion sort of them allocates nothing. Both are stable, so
// the order is the one the comparison defines, whichever sorts.
#pragma once

#include <algorithm>
#include <iterator>
#include <utility>

namespace auction_core {

template <class It, class Less>
void stable_sort_short(It first, It last, Less less) {
    if (last - first > 32) {
        std::stable_sort(first, last, less);
        return;
    }
    for (It i = first; i != last; ++i) {
        auto x = std::move(*i);
        It j = i;
        for (; j != first && less(x, *std::prev(j)); --j) *j = std::move(*std::prev(j));
        *j = std::move(x);
    }
}

}  // namespace auction_core
