// The compiled radix cache: auction_gym/radix_cache.py (RadixCache, TreeNode) and its eviction order
// (radix_eviction.py, EvictionOrder) operation for operation, so that every result, every node's
// fields, the heaps' entries and their serial numbers are the Python reference's
// (docs/design.md section 8). The module docstrings there state the semantics; this file follows
// their code, name for name.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace radix {

namespace nb = nanobind;

struct Node;
using NodePtr = std::shared_ptr<Node>;
// A child's key: the bytes of its edge's first page of int64 tokens (Python's `_key` is the token
// itself for page_size 1, the page's `tobytes()` otherwise: the bindings convert).
using Key = std::string;

// A node's children in insertion order, as a Python dict keeps them: the order of `nodes()` and
// `sequences()`, and so of the serial numbers a heap rebuild hands out, depends on it.
class Children {
public:
    const NodePtr *get(std::string_view key) const;  // null when absent
    void set(const Key &key, NodePtr child);  // replaces in place, or appends
    void erase(const Key &key);
    void clear();
    bool empty() const { return live_ == 0; }
    std::size_t size() const { return live_; }
    template <class F> void for_each(F &&f) const {
        for (const auto &[key, child] : entries_)
            if (child) f(key, child);
    }

private:
    static constexpr std::size_t kLinear = 8;  // scanned below this many entries, indexed above
    std::size_t find(std::string_view key) const;  // entries_.size() when absent
    void compact();
    std::vector<std::pair<Key, NodePtr>> entries_;  // erased ones hold a null child
    // A key's hash, its first token mixed: cheaper than hashing its bytes, and as spread.
    struct FirstTokenHash {
        std::size_t operator()(const Key &key) const;
    };
    std::unordered_map<Key, std::size_t, FirstTokenHash> index_;  // key -> position, when entries_ is long
    std::size_t live_ = 0;
};

// An edge's tokens: a slice of an array the edge keeps alive (the caller's read-only token array,
// of which Python's cache keeps a view too, or the cache's own copy of a writable one), so that
// neither an insert nor a split copies tokens.
class Edge {
public:
    Edge() = default;
    Edge(nb::object owner, const int64_t *data, std::size_t size)
        : owner_(std::move(owner)), data_(data), size_(size) {}
    static Edge copy_of(const int64_t *data, std::size_t size);
    std::size_t size() const { return size_; }
    const int64_t *data() const { return data_; }
    const int64_t *begin() const { return data_; }
    const int64_t *end() const { return data_ + size_; }
    int64_t operator[](std::size_t i) const { return data_[i]; }
    Edge prefix(std::size_t m) const { return Edge(owner_, data_, m); }
    Edge suffix(std::size_t m) const { return Edge(owner_, data_ + m, size_ - m); }

private:
    nb::object owner_;
    const int64_t *data_ = nullptr;
    std::size_t size_ = 0;
};

struct Node {
    Edge key;
    nb::object value;  // None, or the per-token values (a numpy array, sliced as Python slices it)
    NodePtr parent;
    int64_t depth = 0;
    Children children;
    int64_t lock_ref = 0;
    int64_t last_access = 0;
    int64_t wait = -1;
    bool alive = true;
    int64_t priority = 0;
};

// A heap entry: (key, serial, node) with the key (priority, time) under priority eviction and
// (0, time) under LRU, which orders as Python's bare time does.
struct Entry {
    int64_t priority;
    int64_t time;
    int64_t serial;
    NodePtr node;
};

struct Tokens {  // a read-only view of a 1-D int64 token array, `array`
    const int64_t *data;
    int64_t size;
    nb::handle array;
    // Where the caller made `array` itself and never changes it (the engine's made-up replies): the
    // cache keeps a view without asking whether it is writeable.
    bool unchanging = false;
};

constexpr int64_t kRoundTicks = int64_t(1) << 32;  // radix_eviction.ROUND_TICKS
constexpr std::size_t kLogLimit = std::size_t(1) << 16;

class RadixCache {
public:
    RadixCache(int64_t page_size, nb::object on_evict, bool by_priority);
    ~RadixCache();

    void reset();
    std::pair<int64_t, NodePtr> match_prefix(Tokens tokens, const NodePtr &start);
    nb::object path_values(const NodePtr &node) const;
    int64_t prefix_len(Tokens tokens);
    std::pair<int64_t, NodePtr> peek(Tokens tokens, const NodePtr &start, bool split);
    std::pair<int64_t, NodePtr> insert(Tokens tokens, nb::handle value, const NodePtr &start, int64_t offset,
                                       int64_t priority);
    void raise_priority(const NodePtr &node, int64_t priority);
    void lock(const NodePtr &node) { lock_up_to(node, root); }
    void move_lock(const NodePtr &old_node, const NodePtr &new_node);
    void unlock(NodePtr node);
    int64_t evict(int64_t num_tokens);
    std::vector<NodePtr> nodes() const;
    std::vector<std::vector<int64_t>> sequences() const;
    Key key_at(const int64_t *tokens) const { return Key(key_view(tokens)); }
    // The same bytes read in place, for a lookup.
    std::string_view key_view(const int64_t *tokens) const {
        return std::string_view(reinterpret_cast<const char *>(tokens), 8 * std::size_t(page_size));
    }

    // radix_eviction.EvictionOrder
    void new_round();
    void stamp_in_round(const NodePtr &node, int64_t rank);
    void set_wait(const NodePtr &node, int64_t wait);

    int64_t page_size;
    nb::object on_evict;
    // The one Python object it holds, which may hold it back (`on_evict`, say a bound method of its
    // owner): the garbage collector sees it as it sees a Python cache's (gc_slots.hpp).
    template <class F> void for_each_object(F &&f) const { f(on_evict); }
    void release() { on_evict = nb::none(); }
    bool by_priority;
    NodePtr root;
    int64_t evictable_size = 0, protected_size = 0, node_count = 0, tick = 0;
    bool has_values = false;
    int64_t log_epoch = 0;
    std::vector<std::pair<NodePtr, std::optional<Key>>> log;
    int64_t round_start = 0, serial = 0;
    std::vector<Entry> heap, wait_heap;  // binary min-heaps, laid out as heapq lays out a list
    std::vector<NodePtr> waited_touched;

private:
    std::pair<int64_t, NodePtr> walk(Tokens tokens, bool split, const NodePtr &start, int64_t stamp,
                                     int64_t offset);
    NodePtr split_edge(NodePtr child, int64_t m, int64_t stamp);  // by value: the parent's slot changes
    bool lock_up_to(NodePtr node, const NodePtr &stop);
    void changed(const NodePtr &node, std::optional<Key> key);
    void detach_tree();

    void reset_order();
    void touch(const NodePtr &node, int64_t tick);
    void push(const NodePtr &node);
    bool waits_in_round(const Node &node) const { return node.wait >= 0 && node.last_access <= round_start + node.wait; }
    std::pair<NodePtr, int64_t> pop_oldest();
    std::pair<NodePtr, int64_t> pop_lowest_priority();
    bool current(const Entry &entry, bool waiting) const;
    void rebuild_heap();
};

void heap_push(std::vector<Entry> &heap, Entry entry);
Entry heap_pop(std::vector<Entry> &heap);

}  // namespace radix
