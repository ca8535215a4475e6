// Python's heapq on a vector: the same layout after the same operations, ordered by `less`, so a
// compiled heap pops ties as Python's list does (the engine's queues and the cache's eviction order).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace heapq {

template <class T, class Less> void sift_down(std::vector<T> &heap, std::size_t start, std::size_t pos, Less less) {
    T item = std::move(heap[pos]);
    while (pos > start) {
        std::size_t parent = (pos - 1) >> 1;
        if (!less(item, heap[parent])) break;
        heap[pos] = std::move(heap[parent]);
        pos = parent;
    }
    heap[pos] = std::move(item);
}

template <class T, class Less> void sift_up(std::vector<T> &heap, std::size_t pos, Less less) {
    std::size_t end = heap.size(), start = pos, child = 2 * pos + 1;
    T item = std::move(heap[pos]);
    while (child < end) {
        std::size_t right = child + 1;
        if (right < end && !less(heap[child], heap[right])) child = right;
        heap[pos] = std::move(heap[child]);
        pos = child;
        child = 2 * pos + 1;
    }
    heap[pos] = std::move(item);
    sift_down(heap, start, pos, less);
}

template <class T, class Less> void heappush(std::vector<T> &heap, T item, Less less) {
    heap.push_back(std::move(item));
    sift_down(heap, 0, heap.size() - 1, less);
}

template <class T, class Less> T heappop(std::vector<T> &heap, Less less) {
    T last = std::move(heap.back());
    heap.pop_back();
    if (heap.empty()) return last;
    T out = std::move(heap[0]);
    heap[0] = std::move(last);
    sift_up(heap, 0, less);
    return out;
}

template <class T, class Less> void heapify(std::vector<T> &heap, Less less) {
    for (std::size_t i = heap.size() / 2; i-- > 0;) sift_up(heap, i, less);
}

}  // namespace heapq
