// Reading the queue tree: its depth-first order (incremental_tree.queue_order), the zero-bid order
// (factored.zero_bid_order) and the round over its skeleton (factored.factored_allocation with
// smith.tree_stats and smith.depth_first), each float computed as the Python code computes it.
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "incremental_tree.hpp"
#include "short_sort.hpp"

namespace auction_core {

void QueueTree::append_flat(const Block* b, std::vector<int32_t>& out) const {
    if (!b->is_node) {
        out.push_back(static_cast<const Req*>(b)->slot);
        return;
    }
    auto& path = flat_walk_;
    path.assign(1, {static_cast<const Node*>(b), 0});
    while (!path.empty()) {
        auto& [v, i] = path.back();
        if (i == v->blocks.size()) {
            path.pop_back();
            continue;
        }
        const Block* c = v->blocks[i++];
        if (c->is_node)
            path.emplace_back(static_cast<const Node*>(c), 0);
        else
            out.push_back(static_cast<const Req*>(c)->slot);
    }
}

std::vector<int32_t> QueueTree::order() const {
    std::vector<int32_t> out;
    append_flat(root_, out);
    return out;
}

void QueueTree::append_zero(Block* b, std::vector<int32_t>& out) {
    // With every bid 0 each key's ratio is 0: zero-work blocks first, then by tie, at every node.
    if (!b->is_node) {
        out.push_back(static_cast<Req*>(b)->slot);
        return;
    }
    auto& path = zero_walk_;
    path.assign(1, {static_cast<Node*>(b), 0});
    while (!path.empty()) {
        auto& [v, i] = path.back();
        if (!v->zero_valid) {
            v->zero_sorted.reserve(v->blocks.capacity());  // grown as the blocks grow, not by one
            v->zero_sorted = v->blocks;
            stable_sort_short(v->zero_sorted.begin(), v->zero_sorted.end(), [](const Block* x, const Block* y) {
                const bool xw = x->p != 0, yw = y->p != 0;
                return xw != yw ? yw : x->tie < y->tie;
            });
            v->zero_valid = true;
        }
        if (i == v->zero_sorted.size()) {
            path.pop_back();
            continue;
        }
        Block* c = v->zero_sorted[i++];
        if (c->is_node)
            path.emplace_back(static_cast<Node*>(c), 0);
        else
            out.push_back(static_cast<Req*>(c)->slot);
    }
}

namespace {

// smith.tree_stats over the skeleton whose leaves' entries are filled in.
void tree_stats(Factored& a) {
    const size_t nn = a.parent.size();
    for (size_t v = nn; v-- > 0;) {
        std::vector<int64_t> blocks;
        blocks.reserve(a.children[v].size() + a.attached[v].size());
        blocks.assign(a.children[v].begin(), a.children[v].end());
        for (int64_t r : a.attached[v]) blocks.push_back(int64_t(nn) + r);
        if (blocks.empty()) throw std::invalid_argument("a skeleton node without blocks (an empty queue)");
        stable_sort_short(blocks.begin(), blocks.end(),
                         [&a](int64_t x, int64_t y) { return key_less(a.key[x], a.key[y]); });
        double work = 0.0, inter = 0.0, bid_sum = 0.0, internal = 0.0;
        Tie tie = a.tie[blocks.front()];
        for (int64_t b : blocks) {
            const double sb = a.s[b];
            inter += sb * work;
            work += a.p[b];
            bid_sum += sb;
            internal += a.f[b];
            if (a.tie[b] < tie) tie = a.tie[b];
        }
        const double e = a.edge_work[v];
        a.s[v] = bid_sum;
        a.p[v] = e + work;
        a.f[v] = e * bid_sum + internal + inter;
        a.tie[v] = tie;
        a.key[v] = block_key(a.s[v], a.p[v], tie);
        a.sorted_blocks[v] = std::move(blocks);
        a.g[v] = inter;
        a.sum_f[v] = internal;
    }
}

// smith.depth_first: the leaves in the order that visits each node's sorted blocks from the root;
// `path` is scratch.
std::vector<int64_t> depth_first(const Factored& a, std::vector<std::pair<int64_t, size_t>>& path) {
    const int64_t nn = int64_t(a.parent.size());
    std::vector<int64_t> order;
    order.reserve(a.leaf_owner.size());
    path.assign(1, {0, 0});
    while (!path.empty()) {
        auto& [v, i] = path.back();
        const auto& blocks = a.sorted_blocks[v];
        if (i == blocks.size()) {
            path.pop_back();
            continue;
        }
        const int64_t b = blocks[i++];
        if (b < nn)
            path.emplace_back(b, 0);
        else
            order.push_back(b - nn);
    }
    return order;
}

}  // namespace

// factored._skeleton: the nodes holding more than one bidder (`a`'s tree, each node's children and
// attached leaves) and, in leaves_, the block of each leaf.
void QueueTree::skeleton(Factored& a) {
    a.parent = {-1};
    a.children = {{}};
    a.attached = {{}};
    a.edge_work = {0.0};
    leaves_.clear();
    skeleton_.assign(1, {root_, 0});
    while (!skeleton_.empty()) {
        auto [v, k] = skeleton_.back();
        skeleton_.pop_back();
        const auto mixed =
            std::count_if(v->blocks.begin(), v->blocks.end(), [](const Block* b) { return !b->has_owner; });
        a.children[k].reserve(size_t(mixed));
        a.attached[k].reserve(v->blocks.size() - size_t(mixed));
        for (Block* b : v->blocks) {
            if (!b->has_owner) {  // a node holding more than one bidder
                const int64_t c = int64_t(a.parent.size());
                a.parent.push_back(k);
                a.children.emplace_back();
                a.attached.emplace_back();
                a.edge_work.push_back(static_cast<Node*>(b)->edge);
                a.children[k].push_back(c);
                skeleton_.emplace_back(static_cast<const Node*>(b), c);
            } else {
                a.attached[k].push_back(int64_t(leaves_.size()));
                leaves_.push_back(b);
            }
        }
    }
    a.leaf_node.resize(leaves_.size());
    for (size_t k = 0; k < a.attached.size(); ++k)
        for (int64_t leaf : a.attached[k]) a.leaf_node[leaf] = int64_t(k);
}

Factored QueueTree::factored(const std::vector<double>& alpha) {
    Factored a;
    skeleton(a);
    const size_t nn = a.parent.size(), total = nn + leaves_.size();
    a.s.assign(total, 0.0);
    a.p.assign(total, 0.0);
    a.f.assign(total, 0.0);
    a.tie.assign(total, 0);
    a.key.assign(total, SortKey{});
    a.leaf_owner.reserve(leaves_.size());
    scale_.clear();
    for (size_t k = 0; k < leaves_.size(); ++k) {
        const Block* b = leaves_[k];
        int64_t o = b->owner;
        if (o < 0) o += int64_t(alpha.size());  // a Python sequence's index
        if (o < 0 || o >= int64_t(alpha.size())) throw std::out_of_range("multiplier index out of range");
        const double x = alpha[o];
        scale_.push_back(x);
        a.leaf_owner.push_back(b->owner);
        a.s[nn + k] = x * b->s;
        a.p[nn + k] = b->p;
        a.f[nn + k] = x * b->f;
        a.tie[nn + k] = b->tie;
        a.key[nn + k] = block_key(a.s[nn + k], b->p, b->tie);
    }
    a.sorted_blocks.assign(nn, {});
    a.g.assign(nn, 0.0);
    a.sum_f.assign(nn, 0.0);
    tree_stats(a);
    a.leaf_order = depth_first(a, leaf_walk_);
    a.admission.reserve(reqs_.size());  // the slots, at least the requests held
    for (int64_t k : a.leaf_order) {
        if (scale_[k] > 0)
            append_flat(leaves_[k], a.admission);
        else
            append_zero(leaves_[k], a.admission);
    }
    return a;
}

}  // namespace auction_core
