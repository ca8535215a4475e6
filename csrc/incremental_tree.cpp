// The queue tree's updates: incremental_tree.py's _insert, _remove, _recompute and _restat, with the
// same tree, the same sorted lists and the same floats (additions in the same order).
#include "incremental_tree.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace auction_core {

namespace {

const Tokens& tokens_of(const Block* b) {
    return b->is_node ? *static_cast<const Node*>(b)->tokens : *static_cast<const Req*>(b)->tokens;
}

void relist(Block* b, Node* parent) {
    if (!b->listed || !key_equal(b->listed_key, b->key)) {
        if (b->listed) parent->unlist_block(b);
        parent->list_block(b);
    }
}

// The first index in [from, to) where the token arrays differ (`to` if none): memcmp over chunks
// (vectorised in libc), then token by token inside the chunk that differs.
int64_t common_prefix_end(const int64_t* a, const int64_t* b, int64_t from, int64_t to) {
    constexpr int64_t chunk = 64;
    while (from + chunk <= to && std::memcmp(a + from, b + from, chunk * sizeof(int64_t)) == 0) from += chunk;
    while (from < to && a[from] == b[from]) ++from;
    return from;
}

std::vector<Block*>::iterator bisect_left(std::vector<Block*>& blocks, const SortKey& key) {
    return std::lower_bound(blocks.begin(), blocks.end(), key,
                            [](const Block* b, const SortKey& k) { return key_less(b->listed_key, k); });
}

}  // namespace

void Node::list_block(Block* b) {
    b->listed_key = b->key;
    blocks.insert(bisect_left(blocks, b->key), b);
    b->listed = true;
}

void Node::unlist_block(Block* b) {
    auto it = bisect_left(blocks, b->listed_key);
    if (it == blocks.end() || *it != b) throw std::logic_error("a block listed under another key");
    blocks.erase(it);
    b->listed = false;
}

QueueTree::QueueTree(double request_work, bool costed, bool cache_ties)
    : request_work_(request_work), costed_(costed), cache_ties_(cache_ties), root_(new Node) {
    root_->is_node = true;
    root_->tokens = std::make_shared<const Tokens>();
}

QueueTree::~QueueTree() {
    std::vector<Node*> stack{root_};
    while (!stack.empty()) {
        Node* v = stack.back();
        stack.pop_back();
        for (auto& kv : v->next)
            if (kv.second->is_node) stack.push_back(static_cast<Node*>(kv.second));
        delete v;
    }
}

void QueueTree::apply(const std::vector<int32_t>& gone, const std::vector<Joining>& joined,
                      const std::vector<Rebid>& rebid) {
    for (int32_t slot : gone) {
        if (slot < 0 || size_t(slot) >= reqs_.size() || !reqs_[slot]) throw std::out_of_range("no request in slot");
        remove(reqs_[slot].get());
        graveyard_.push_back(std::move(reqs_[slot]));
    }
    for (const Joining& j : joined) {
        if (j.slot < 0) throw std::out_of_range("negative slot");
        if (size_t(j.slot) >= reqs_.size()) reqs_.resize(size_t(j.slot) + 1);
        if (reqs_[j.slot]) throw std::logic_error("slot already held");
        auto e = std::make_unique<Req>();
        e->slot = j.slot;
        e->rid = j.rid;
        e->tie = Tie(j.rid);
        e->has_owner = true;
        e->owner = j.owner;
        e->tokens = j.tokens;
        e->bid = j.bid;
        e->cached = e->reach = j.cached;
        insert(e.get());
        reqs_[j.slot] = std::move(e);
    }
    for (const Rebid& r : rebid) {
        if (r.slot < 0 || size_t(r.slot) >= reqs_.size() || !reqs_[r.slot]) throw std::out_of_range("no request in slot");
        Req* e = reqs_[r.slot].get();
        e->bid = r.bid;
        e->cached = e->reach = r.cached;
        mark_changed(e);
    }
    recompute();
}

void QueueTree::mark_changed(Req* e) {
    if (!e->changed) {
        e->changed = true;
        changed_.push_back(e);
    }
}

void QueueTree::attach(Req* e, Node* v) {
    e->node = v;
    const Tokens& t = *e->tokens;
    if (int64_t(t.size()) == v->depth)
        v->ends.push_back(e);
    else
        v->next[t[v->depth]] = e;
    mark_changed(e);
}

void QueueTree::insert(Req* e) {
    const Tokens& t = *e->tokens;
    const int64_t n = int64_t(t.size());
    Node* v = root_;
    while (true) {
        const int64_t d = v->depth;
        Block* b = nullptr;
        if (n != d) {
            auto it = v->next.find(t[d]);
            if (it != v->next.end()) b = it->second;
        }
        if (b == nullptr) {
            attach(e, v);
            return;
        }
        const Tokens& other = tokens_of(b);
        const int64_t other_len = b->is_node ? static_cast<Node*>(b)->depth : int64_t(other.size());
        const int64_t shared = common_prefix_end(t.data(), other.data(), d, std::min(n, other_len));
        if (b->is_node && shared == static_cast<Node*>(b)->depth) {
            v = static_cast<Node*>(b);
            continue;
        }
        Node* u = new Node;  // the shared prefix ends inside b's edge
        u->is_node = true;
        u->depth = shared;
        u->tokens = e->tokens;
        u->parent = v;
        v->next[t[d]] = u;
        if (b->listed) v->unlist_block(b);
        if (b->is_node) {
            Node* bn = static_cast<Node*>(b);
            bn->parent = u;
            u->next[other[shared]] = bn;
            marked_.push_back(bn);
        } else {
            attach(static_cast<Req*>(b), u);
        }
        attach(e, u);
        return;
    }
}

void QueueTree::remove(Req* e) {
    e->changed = false;
    Node* v = e->node;
    const Tokens& t = *e->tokens;
    if (int64_t(t.size()) == v->depth)
        v->ends.erase(std::find(v->ends.begin(), v->ends.end(), e));
    else
        v->next.erase(t[v->depth]);
    if (e->listed) v->unlist_block(e);
    marked_.push_back(v);
    Node* up = v->parent;
    if (up == nullptr || v->ends.size() + v->next.size() > 1) return;
    Block* last = v->ends.empty() ? v->next.begin()->second : static_cast<Block*>(v->ends.front());
    up->next[(*v->tokens)[up->depth]] = last;
    v->alive = false;
    if (v->listed) up->unlist_block(v);
    last->listed = false;  // listed in `up` when recomputed (which is marked as its parent)
    if (last->is_node) {
        static_cast<Node*>(last)->parent = up;
        marked_.push_back(static_cast<Node*>(last));
    } else {
        static_cast<Req*>(last)->node = up;
        mark_changed(static_cast<Req*>(last));
    }
    graveyard_.emplace_back(v);
}

void QueueTree::recost(Req* e) {
    const Node* v = e->node;
    const int64_t n = int64_t(e->tokens->size());
    const double b = e->bid;
    const int64_t lo = v->depth > e->cached ? v->depth : e->cached;
    const double w = costed_ && n > lo ? double(n - lo) : 0.0;
    e->s = b;
    e->p = w + request_work_;
    e->f = w * b + b * request_work_;
    e->tie = tie_value(e->rid, e->cached, cache_ties_);
    e->key = block_key(b, e->p, e->tie);
}

void QueueTree::recompute() {
    for (Req* e : changed_) {
        if (!e->changed) continue;  // left the tree since
        e->changed = false;
        recost(e);
        relist(e, e->node);
        marked_.push_back(e->node);
    }
    ++epoch_;
    std::vector<Node*>& path = restat_path_;
    path.clear();
    for (Node* v : marked_) {
        while (v != nullptr && v->alive && v->mark != epoch_) {
            v->mark = epoch_;
            path.push_back(v);
            v = v->parent;
        }
    }
    std::sort(path.begin(), path.end(), [](const Node* a, const Node* b) { return a->depth > b->depth; });
    for (Node* v : path) restat(v);
    changed_.clear();
    marked_.clear();
    graveyard_.clear();
}

void QueueTree::restat(Node* v) {
    Node* up = v->parent;
    if (up == nullptr) return;
    const Block* first = v->blocks.front();
    bool has_owner = first->has_owner;
    const int64_t owner = first->owner;
    Tie tie = first->tie;
    int64_t reach = 0;
    double work = 0.0, bid_sum = 0.0, inter = 0.0, internal = 0.0;
    for (const Block* b : v->blocks) {
        const double s = b->s;
        inter += s * work;
        work += b->p;
        bid_sum += s;
        internal += b->f;
        if (b->reach > reach) reach = b->reach;
        if (b->tie < tie) tie = b->tie;
        if (has_owner && (!b->has_owner || b->owner != owner)) has_owner = false;
    }
    v->has_owner = has_owner;
    v->owner = owner;
    v->zero_valid = false;
    v->reach = reach;
    const int64_t lo = up->depth > reach ? up->depth : reach;
    const double e = costed_ && v->depth > lo ? double(v->depth - lo) : 0.0;
    v->edge = e;
    v->s = bid_sum;
    v->p = e + work;
    v->f = e * bid_sum + internal + inter;
    v->tie = tie;
    v->key = block_key(bid_sum, v->p, tie);
    relist(v, up);
}

std::vector<QueueTree::NodeStats> QueueTree::node_stats() const {
    std::vector<NodeStats> out;
    std::vector<const Node*> stack{root_};
    while (!stack.empty()) {
        const Node* v = stack.back();
        stack.pop_back();
        if (v != root_) {
            NodeStats st{v->depth, v->s, v->p, v->tie, {}};
            for (const Req* r : v->ends) st.attached.push_back(r->rid);
            for (auto& kv : v->next)
                if (!kv.second->is_node) st.attached.push_back(static_cast<const Req*>(kv.second)->rid);
            std::sort(st.attached.begin(), st.attached.end());
            out.push_back(std::move(st));
        }
        for (auto& kv : v->next)
            if (kv.second->is_node) stack.push_back(static_cast<const Node*>(kv.second));
    }
    return out;
}

}  // namespace auction_core
