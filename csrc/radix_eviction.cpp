// The compiled radix cache's eviction order: radix_eviction.py's EvictionOrder, line for line, with
// heapq's algorithms, so both heaps hold the same entries in the same places as Python's lists.
#include "heapq.hpp"
#include "radix_cache.hpp"

#include <algorithm>
#include <tuple>

namespace radix {

namespace {

bool less(const Entry &a, const Entry &b) {
    return std::tie(a.priority, a.time, a.serial) < std::tie(b.priority, b.time, b.serial);
}

}  // namespace

void heap_push(std::vector<Entry> &heap, Entry entry) { heapq::heappush(heap, std::move(entry), less); }

Entry heap_pop(std::vector<Entry> &heap) { return heapq::heappop(heap, less); }

void RadixCache::reset_order() {
    round_start = 0;
    serial = 0;
    heap.clear();
    wait_heap.clear();
    waited_touched.clear();
}

void RadixCache::new_round() {
    round_start = tick + 1;
    tick = round_start + kRoundTicks;
    std::vector<NodePtr> touched;
    touched.swap(waited_touched);
    for (const NodePtr &node : touched)
        if (node->alive && node->wait >= 0 && node->children.empty() && !node->lock_ref) push(node);
}

void RadixCache::stamp_in_round(const NodePtr &node, int64_t rank) {
    int64_t stamp = round_start + rank;
    if (node != root && node->alive && stamp > node->last_access) touch(node, stamp);
}

void RadixCache::set_wait(const NodePtr &node, int64_t wait) {
    if (node == root || !node->alive) return;
    if (node->wait >= 0) node->last_access = std::max(node->last_access, round_start + node->wait);
    node->wait = wait;
    if (node->children.empty() && !node->lock_ref) push(node);
}

void RadixCache::touch(const NodePtr &node, int64_t at) {
    if (node == root) return;
    node->last_access = at;
    if (node->children.empty() && node->lock_ref == 0 && (node->wait < 0 || at > round_start + node->wait))
        push(node);
}

void RadixCache::push(const NodePtr &node) {
    ++serial;
    std::vector<Entry> *target = &heap;
    int64_t time = node->last_access;
    if (node->wait >= 0) {
        if (node->last_access > round_start + node->wait) {
            waited_touched.push_back(node);
        } else {
            target = &wait_heap;
            time = node->wait;
        }
    }
    heap_push(*target, Entry{by_priority ? node->priority : 0, time, serial, node});
}

bool RadixCache::current(const Entry &entry, bool waiting) const {
    const Node &n = *entry.node;
    if (!n.alive || !n.children.empty() || n.lock_ref || waits_in_round(n) != waiting) return false;
    int64_t time = waiting ? n.wait : n.last_access;
    return entry.time == time && entry.priority == (by_priority ? n.priority : 0);
}

std::pair<NodePtr, int64_t> RadixCache::pop_oldest() {
    const int64_t start = round_start;
    while (!heap.empty()) {
        const Entry &top = heap[0];
        const Node &n = *top.node;
        if (n.alive && n.children.empty() && !n.lock_ref && top.time == n.last_access &&
            (n.wait < 0 || top.time > start + n.wait))
            break;
        heap_pop(heap);
    }
    while (!wait_heap.empty()) {
        const Entry &top = wait_heap[0];
        const Node &n = *top.node;
        if (n.alive && n.children.empty() && !n.lock_ref && n.wait == top.time && n.last_access <= start + top.time)
            break;
        heap_pop(wait_heap);  // a waited-on node touched this round is in waited_touched
    }
    if (!wait_heap.empty() && (heap.empty() || start + wait_heap[0].time < heap[0].time)) {
        Entry entry = heap_pop(wait_heap);
        return {std::move(entry.node), start + entry.time};
    }
    if (!heap.empty()) {
        Entry entry = heap_pop(heap);
        return {std::move(entry.node), entry.time};
    }
    return {nullptr, 0};
}

std::pair<NodePtr, int64_t> RadixCache::pop_lowest_priority() {
    while (!heap.empty() && !current(heap[0], false)) heap_pop(heap);
    while (!wait_heap.empty() && !current(wait_heap[0], true)) heap_pop(wait_heap);
    if (!wait_heap.empty()) {
        const Entry &top = wait_heap[0];
        int64_t time = round_start + top.time;
        if (heap.empty() || std::tie(top.priority, time) < std::tie(heap[0].priority, heap[0].time)) {
            Entry entry = heap_pop(wait_heap);
            return {std::move(entry.node), time};
        }
    }
    if (!heap.empty()) {
        Entry entry = heap_pop(heap);
        int64_t time = entry.node->last_access;
        return {std::move(entry.node), time};
    }
    return {nullptr, 0};
}

void RadixCache::rebuild_heap() {
    heap.clear();
    wait_heap.clear();
    std::vector<NodePtr> touched;
    for (const NodePtr &node : nodes()) {
        if (!node->children.empty() || node->lock_ref != 0) continue;
        ++serial;
        bool waits = waits_in_round(*node);
        int64_t time = waits ? node->wait : node->last_access;
        (waits ? wait_heap : heap).push_back(Entry{by_priority ? node->priority : 0, time, serial, node});
        if (node->wait >= 0 && !waits) touched.push_back(node);
    }
    for (auto *h : {&heap, &wait_heap})  // heapq.heapify
        heapq::heapify(*h, less);
    waited_touched = std::move(touched);
}

}  // namespace radix
