// The radix auction's queue tree kept across rounds (auction_gym/mechanism/incremental_tree.py),
// and the round decided over its skeleton (mechanism/factored.py). Every float is computed with the
// Python code's operations in its order, so the results are the same bit for bit.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

namespace auction_core {

// smith.tie_value: request id - cached x 2^64; 128 bits hold it exactly (|id| < 2^63).
using Tie = __int128;

// A prompt's tokens, read-only: a view of a read-only array that `owner` keeps alive (as the Python
// tree holds the array itself), or `copy`, of an array that could change in place.
struct Tokens {
    const int64_t* ptr = nullptr;
    size_t n = 0;
    std::vector<int64_t> copy;
    std::shared_ptr<const void> owner;
    const int64_t* data() const { return ptr; }
    size_t size() const { return n; }
    int64_t operator[](size_t i) const { return ptr[i]; }
};

// smith.SortKey, (0, 0.0, tie) or (1, -S/P, tie), compared as Python compares the tuples.
struct SortKey {
    int zero_work_last = 0;
    double ratio = 0.0;
    Tie tie = 0;
};

inline bool key_less(const SortKey& a, const SortKey& b) {
    if (a.zero_work_last != b.zero_work_last) return a.zero_work_last < b.zero_work_last;
    if (a.ratio != b.ratio) return a.ratio < b.ratio;
    return a.tie < b.tie;
}

inline bool key_equal(const SortKey& a, const SortKey& b) {
    return a.zero_work_last == b.zero_work_last && a.ratio == b.ratio && a.tie == b.tie;
}

inline SortKey block_key(double s, double p, Tie tie) {
    if (p == 0) return SortKey{0, 0.0, tie};
    return SortKey{1, -s / p, tie};
}

inline Tie tie_value(int64_t request_id, int64_t cached, bool cache_first) {
    if (cache_first && cached) return Tie(request_id) - (Tie(cached) << 64);
    return Tie(request_id);
}

struct Node;

// incremental_tree.QueueBlock: a request's block or a node, as its parent lists it.
struct Block {
    virtual ~Block() = default;
    double s = 0.0, p = 0.0, f = 0.0;
    Tie tie = 0;
    SortKey key;
    bool listed = false;
    SortKey listed_key;
    int64_t reach = 0;
    bool has_owner = false;  // false: more than one bidder (Python's owner None)
    int64_t owner = 0;
    bool is_node = false;
};

struct Req : Block {
    int32_t slot = -1;
    int64_t rid = 0;
    std::shared_ptr<const Tokens> tokens;
    double bid = 0.0;
    int64_t cached = 0;
    Node* node = nullptr;
    bool changed = false;  // in the round's blocks to re-cost
};

struct Node : Block {
    int64_t depth = 0;
    std::shared_ptr<const Tokens> tokens;  // its first `depth` tokens are the node's prefix
    Node* parent = nullptr;
    std::unordered_map<int64_t, Block*> next;
    std::vector<Req*> ends;
    bool alive = true;
    std::vector<Block*> blocks;  // listed, by key
    double edge = 0.0;
    uint64_t mark = 0;
    bool zero_valid = false;
    std::vector<Block*> zero_sorted;  // blocks in zero-bid order (factored.zero_bid_order)

    void list_block(Block* b);
    void unlist_block(Block* b);
};

// factored.FactoredAllocation's content, request slots in place of requests.
struct Factored {
    std::vector<int64_t> parent;
    std::vector<std::vector<int64_t>> children, attached;
    std::vector<double> edge_work;
    std::vector<int64_t> leaf_node, leaf_owner;
    std::vector<double> s, p, f;
    std::vector<Tie> tie;
    std::vector<SortKey> key;
    std::vector<std::vector<int64_t>> sorted_blocks;
    std::vector<double> g, sum_f;
    std::vector<int64_t> leaf_order;
    std::vector<int32_t> admission;
};

// A request joining the tree.
struct Joining {
    int32_t slot;
    int64_t rid, owner;
    std::shared_ptr<const Tokens> tokens;
    double bid;
    int64_t cached;
};

// A request's new bid and cached length.
struct Rebid {
    int32_t slot;
    double bid;
    int64_t cached;
};

class QueueTree {
public:
    QueueTree(double request_work, bool costed, bool cache_ties);
    ~QueueTree();
    QueueTree(const QueueTree&) = delete;
    QueueTree& operator=(const QueueTree&) = delete;

    // incremental_tree.IncrementalQueueTree._place: the requests in `gone` leave, `joined` join,
    // `rebid` change; then the touched blocks and nodes are re-costed.
    void apply(const std::vector<int32_t>& gone, const std::vector<Joining>& joined,
               const std::vector<Rebid>& rebid);
    // incremental_tree.queue_order: the slots in the depth-first Smith order.
    std::vector<int32_t> order() const;
    // factored.factored_allocation over the skeleton, `alpha` per bidder.
    Factored factored(const std::vector<double>& alpha);
    // (depth, S, P, tie, request ids attached) of every node below the root (for tests).
    struct NodeStats {
        int64_t depth;
        double s, p;
        Tie tie;
        std::vector<int64_t> attached;
    };
    std::vector<NodeStats> node_stats() const;

private:
    double request_work_;
    bool costed_, cache_ties_;
    Node* root_;
    std::vector<std::unique_ptr<Req>> reqs_;  // by slot
    std::vector<Req*> changed_;
    std::vector<Node*> marked_;
    std::vector<std::unique_ptr<Block>> graveyard_;  // freed once the round is re-costed
    uint64_t epoch_ = 0;
    // Scratch kept between rounds (cleared, its capacity kept), so that a round allocates little more
    // than the Factored it hands back; each holds at most the tree's nodes or blocks.
    std::vector<Node*> restat_path_;                           // recompute's nodes to re-cost
    std::vector<std::pair<const Node*, int64_t>> skeleton_;    // factored's walk: node, skeleton index
    std::vector<Block*> leaves_;                               // factored's leaves, in walk order
    std::vector<double> scale_;                                // each leaf's multiplier
    std::vector<std::pair<int64_t, size_t>> leaf_walk_;        // depth_first's path over the skeleton
    std::vector<std::pair<Node*, size_t>> zero_walk_;          // append_zero's path
    mutable std::vector<std::pair<const Node*, size_t>> flat_walk_;  // append_flat's path (order() is const)

    void insert(Req* e);
    void remove(Req* e);
    void attach(Req* e, Node* v);
    void recompute();
    void restat(Node* v);
    void recost(Req* e);
    void mark_changed(Req* e);
    void append_flat(const Block* b, std::vector<int32_t>& out) const;
    void append_zero(Block* b, std::vector<int32_t>& out);
    void skeleton(Factored& a);
};

}  // namespace auction_core
