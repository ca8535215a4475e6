// The compiled radix cache's tree operations: radix_cache.py's RadixCache, line for line
// (radix_cache.hpp says why).
#include "radix_cache.hpp"
#include "py_calls.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace radix {

// --- Children: a Python dict's order, with lookups by hash once there are many ---

namespace {

// A key's first token (every key holds a whole page, 8 bytes or more): compared before the whole
// key, it tells most children apart without a call to compare bytes.
uint64_t first_token(std::string_view key) {
    uint64_t token;
    std::memcpy(&token, key.data(), sizeof token);
    return token;
}

}  // namespace

std::size_t Children::FirstTokenHash::operator()(const Key &key) const {
    return std::size_t((first_token(key) ^ (first_token(key) >> 29)) * 0x9E3779B97F4A7C15ull);
}

std::size_t Children::find(std::string_view key) const {
    if (entries_.size() <= kLinear) {
        const uint64_t token = first_token(key);
        for (std::size_t i = 0; i < entries_.size(); ++i) {
            const Key &at = entries_[i].first;
            if (!entries_[i].second || first_token(at) != token) continue;
            // A key of one token (page_size 1) is its first token: nothing more to compare.
            if (at.size() == sizeof token ? key.size() == sizeof token : at == key) return i;
        }
        return entries_.size();
    }
    auto it = index_.find(Key(key));
    return it == index_.end() ? entries_.size() : it->second;
}

const NodePtr *Children::get(std::string_view key) const {
    std::size_t i = find(key);
    return i == entries_.size() ? nullptr : &entries_[i].second;
}

void Children::set(const Key &key, NodePtr child) {
    std::size_t i = find(key);
    if (i != entries_.size()) {
        entries_[i].second = std::move(child);
        return;
    }
    entries_.emplace_back(key, std::move(child));
    ++live_;
    if (entries_.size() == kLinear + 1) {
        for (std::size_t j = 0; j < entries_.size(); ++j)
            if (entries_[j].second) index_[entries_[j].first] = j;
    } else if (entries_.size() > kLinear + 1) {
        index_[key] = entries_.size() - 1;
    }
}

void Children::erase(const Key &key) {
    std::size_t i = find(key);
    if (i == entries_.size()) return;
    entries_[i].second.reset();
    if (entries_.size() > kLinear) index_.erase(key);
    --live_;
    if (live_ == 0 || entries_.size() > 2 * live_ + kLinear) compact();
}

void Children::compact() {
    std::vector<std::pair<Key, NodePtr>> kept;
    kept.reserve(live_);
    for (auto &entry : entries_)
        if (entry.second) kept.push_back(std::move(entry));
    entries_ = std::move(kept);
    index_.clear();
    if (entries_.size() > kLinear)
        for (std::size_t j = 0; j < entries_.size(); ++j) index_[entries_[j].first] = j;
}

void Children::clear() {
    entries_.clear();
    index_.clear();
    live_ = 0;
}

Edge Edge::copy_of(const int64_t *data, std::size_t size) {
    auto *owned = new std::vector<int64_t>(data, data + size);
    nb::capsule owner(owned, [](void *p) noexcept { delete static_cast<std::vector<int64_t> *>(p); });
    return Edge(std::move(owner), owned->data(), size);
}

// --- the tree ---

RadixCache::RadixCache(int64_t page_size, nb::object on_evict, bool by_priority)
    : page_size(page_size), on_evict(std::move(on_evict)), by_priority(by_priority) {
    reset();
}

RadixCache::~RadixCache() { detach_tree(); }

void RadixCache::detach_tree() {
    // Parent and child pointers own each other: unlinked, the tree goes with the cache (as
    // RadixCache.__del__ does in Python); a node held elsewhere outlives it detached, and reads as
    // evicted, so that no operation given it follows its missing parent.
    if (!root) return;
    std::vector<NodePtr> stack{root};
    while (!stack.empty()) {
        NodePtr node = std::move(stack.back());
        stack.pop_back();
        node->children.for_each([&](const Key &, const NodePtr &child) { stack.push_back(child); });
        node->children.clear();
        node->parent.reset();
        node->alive = false;
    }
}

void RadixCache::reset() {
    detach_tree();
    root = std::make_shared<Node>();
    root->value = nb::none();
    root->lock_ref = 1;
    evictable_size = protected_size = node_count = tick = 0;
    has_values = false;
    reset_order();
    ++log_epoch;
    log.clear();
}

// It walks down by the tree's own pointers, taking a reference only to the node it returns.
std::pair<int64_t, NodePtr> RadixCache::walk(Tokens tokens, bool split, const NodePtr &start, int64_t stamp,
                                             int64_t offset) {
    int64_t n = offset + tokens.size;
    n -= n % page_size;  // whole pages only
    const NodePtr *node = start ? &start : &root;
    while (!(*node)->alive) {
        if (!(*node)->parent) throw std::invalid_argument("start: a node detached from its cache");
        node = &(*node)->parent;
    }
    int64_t pos = (*node)->depth;
    int64_t i = pos - offset;  // where the token at depth `pos` is in `tokens`
    while (pos < n) {
        const int64_t *head = tokens.data + i;
        const NodePtr *found = (*node)->children.get(key_view(head));
        if (!found) break;
        const Edge &key = (*found)->key;
        const int64_t size = static_cast<int64_t>(key.size());
        int64_t m = std::min(size, n - pos);
        // An edge cut from the very array the tokens are read from (a session's turns are views of
        // one array, which the tree keeps views of) matches without reading it.
        if (head != key.data() && std::memcmp(head, key.data(), 8 * m) != 0) {
            int64_t j = 0;
            while (head[j] == key[j]) ++j;
            m = j;
        }
        if (m == size) {
            node = found;
            pos += m;
            i += m;
            continue;
        }
        // The match ends inside this edge (at least its first page matched, by its key).
        m -= m % page_size;
        pos += m;
        if (split) return {pos, split_edge(*found, m, stamp)};
        break;
    }
    return {pos, *node};
}

std::pair<int64_t, NodePtr> RadixCache::match_prefix(Tokens tokens, const NodePtr &start) {
    int64_t now = ++tick;
    auto result = walk(tokens, true, start, now, 0);
    touch(result.second, now);
    return result;
}

nb::object RadixCache::path_values(const NodePtr &node) const {
    if (!has_values) return nb::none();
    nb::list values;
    for (Node *at = node.get(); at && at != root.get(); at = at->parent.get())
        if (!at->value.is_none()) values.append(at->value);
    if (values.size() == 0) return nb::none();
    values.reverse();
    return nb::module_::import_("numpy").attr("concatenate")(values);
}

int64_t RadixCache::prefix_len(Tokens tokens) { return walk(tokens, false, nullptr, 0, 0).first; }

std::pair<int64_t, NodePtr> RadixCache::peek(Tokens tokens, const NodePtr &start, bool split) {
    return walk(tokens, split, start, tick, 0);
}

std::pair<int64_t, NodePtr> RadixCache::insert(Tokens tokens, nb::handle value, const NodePtr &start,
                                               int64_t offset, int64_t priority) {
    int64_t n = offset + tokens.size;
    n -= n % page_size;
    int64_t now = ++tick;
    auto [cached, node] = walk(tokens, true, start, now, offset);
    if (cached < n) {
        auto leaf = std::make_shared<Node>();
        const int64_t *from = tokens.data + (cached - offset);
        // The caller may change a writable array: the tree keeps its own copy of those tokens.
        if (!tokens.unchanging && pycall::writeable(tokens.array))
            leaf->key = Edge::copy_of(from, n - cached);
        else
            leaf->key = Edge(nb::borrow(tokens.array), from, n - cached);
        if (value.is_none()) {
            leaf->value = nb::none();
        } else {
            leaf->value = nb::module_::import_("numpy").attr("asarray")(
                value[nb::slice(cached - offset, n - offset)]);
            has_values = true;
        }
        leaf->parent = node;
        leaf->depth = node->depth + n - cached;
        leaf->priority = priority;
        Key child_key = key_at(from);
        node->children.set(child_key, leaf);
        changed(node, child_key);
        ++node_count;
        evictable_size += static_cast<int64_t>(leaf->key.size());
        node = std::move(leaf);
        // SGLang creates the leaf after stamping the path it walked (and split): the leaf is later.
        now = ++tick;
    } else if (priority > node->priority) {
        raise_priority(node, priority);
    }
    touch(node, now);
    return {cached, node};
}

void RadixCache::raise_priority(const NodePtr &node, int64_t priority) {
    if (node == root || priority <= node->priority) return;
    node->priority = priority;
    if (node->children.empty() && !node->lock_ref && node->alive) push(node);  // no entry for an evicted node
}

void RadixCache::move_lock(const NodePtr &old_node, const NodePtr &new_node) {
    if (!lock_up_to(new_node, old_node)) unlock(old_node);
}

bool RadixCache::lock_up_to(NodePtr node, const NodePtr &stop) {
    while (node != stop) {
        if (node == root) return false;
        if (!node->parent) throw std::invalid_argument("lock of a node detached from its cache");
        if (node->lock_ref == 0) {
            int64_t size = static_cast<int64_t>(node->key.size());
            evictable_size -= size;
            protected_size += size;
        }
        ++node->lock_ref;
        node = node->parent;
    }
    return true;
}

void RadixCache::unlock(NodePtr node) {
    while (node != root) {
        if (!node->parent) throw std::invalid_argument("unlock of a node detached from its cache");
        if (node->lock_ref <= 0) throw std::runtime_error("unlock of a node that is not locked");
        if (--node->lock_ref == 0) {
            int64_t size = static_cast<int64_t>(node->key.size());
            evictable_size += size;
            protected_size -= size;
            if (node->children.empty()) push(node);
        }
        node = node->parent;
    }
}

int64_t RadixCache::evict(int64_t num_tokens) {
    int64_t freed = 0;
    if (static_cast<int64_t>(heap.size() + wait_heap.size()) > 2 * node_count + 64) rebuild_heap();
    while (freed < num_tokens) {
        auto [node, stamp] = by_priority ? pop_lowest_priority() : pop_oldest();
        if (!node) break;
        NodePtr parent = node->parent;
        Key key = key_at(node->key.data());
        parent->children.erase(key);
        node->alive = false;
        changed(node, std::nullopt);
        changed(parent, key);
        --node_count;
        int64_t size = static_cast<int64_t>(node->key.size());
        evictable_size -= size;
        freed += size;
        if (!node->value.is_none() && !on_evict.is_none()) on_evict(node->value);
        parent->last_access = std::max(parent->last_access, stamp);
        if (node->priority > parent->priority) parent->priority = node->priority;
        if (parent != root && parent->children.empty() && parent->lock_ref == 0) push(parent);
    }
    return freed;
}

std::vector<NodePtr> RadixCache::nodes() const {
    std::vector<NodePtr> out, stack;
    root->children.for_each([&](const Key &, const NodePtr &child) { stack.push_back(child); });
    while (!stack.empty()) {
        NodePtr node = std::move(stack.back());
        stack.pop_back();
        node->children.for_each([&](const Key &, const NodePtr &child) { stack.push_back(child); });
        out.push_back(std::move(node));
    }
    return out;
}

std::vector<std::vector<int64_t>> RadixCache::sequences() const {
    std::vector<std::vector<int64_t>> out;
    std::vector<std::pair<NodePtr, std::vector<int64_t>>> stack{{root, {}}};
    while (!stack.empty()) {
        auto [node, keys] = std::move(stack.back());
        stack.pop_back();
        keys.insert(keys.end(), node->key.begin(), node->key.end());
        if (node->children.empty() && node != root) out.push_back(keys);
        node->children.for_each([&](const Key &, const NodePtr &child) { stack.emplace_back(child, keys); });
    }
    return out;
}

NodePtr RadixCache::split_edge(NodePtr child, int64_t m, int64_t stamp) {
    NodePtr parent = child->parent;
    stamp = std::max(stamp, child->last_access);
    auto upper = std::make_shared<Node>();
    upper->key = child->key.prefix(m);
    if (child->value.is_none()) {
        upper->value = nb::none();
    } else {
        upper->value = child->value[nb::slice(nb::none(), nb::int_(m), nb::none())];
        child->value = child->value[nb::slice(nb::int_(m), nb::none(), nb::none())];
    }
    upper->parent = parent;
    upper->depth = child->depth - static_cast<int64_t>(child->key.size()) + m;
    upper->lock_ref = child->lock_ref;
    upper->last_access = stamp;
    upper->priority = child->priority;
    Key key = key_at(child->key.data());
    parent->children.set(key, upper);
    child->key = child->key.suffix(m);
    child->parent = upper;
    upper->children.set(key_at(child->key.data()), child);
    if (stamp != child->last_access) touch(child, stamp);
    changed(parent, key);
    ++node_count;
    return upper;
}

void RadixCache::changed(const NodePtr &node, std::optional<Key> key) {
    if (log.size() >= kLogLimit) {
        ++log_epoch;
        log.clear();
    }
    log.emplace_back(node, std::move(key));
}

}  // namespace radix
