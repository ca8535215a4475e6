// The compiled waiting prefixes: waiting_prefixes.py's WaitingPrefixes, line for line
// (waiting_prefixes.hpp says why).
#include "waiting_prefixes.hpp"

#include <algorithm>
#include <vector>

#include "arrival_order.hpp"
#include "slot_fill.hpp"

namespace radix {

namespace {

constexpr std::size_t kKeptDeltas = 64;  // waiting_prefixes._KEPT_DELTAS

nb::handle queue_delta() {
    static const nb::object *cls = new nb::object(nb::module_::import_("auction_gym.policy").attr("QueueDelta"));
    return *cls;  // never freed, as the cache's Python objects
}

// QueueDelta(joined, left, rematched, length_of), one a round, made slot by slot (slot_fill.hpp).
nb::object new_delta(nb::handle joined, nb::handle left, nb::handle rematched, nb::handle length_of) {
    static auto *maker = new pyslots::SlotMaker<4>(queue_delta(), {"joined", "left", "rematched", "length_of"});
    nb::object delta = maker->make({joined, left, rematched, length_of});  // (never freed, as the class)
    return delta.is_valid() ? delta : queue_delta()(joined, left, rematched, length_of);
}

}  // namespace

WaitingPrefixes::WaitingPrefixes()
    : cache_object(nb::none()), lengths_queue(nb::none()), lengths_out(nb::none()), refreshed(nb::none()) {
    reset();
}

void WaitingPrefixes::reset() {
    matcher = PrefixMatcher(true, true, false);
    next_rank = 0;
    ranked.clear();
    ranks_at.clear();
    deltas.clear();
}

void WaitingPrefixes::release() {
    reset();
    matcher.release();
    cache_object = lengths_queue = lengths_out = refreshed = nb::none();
    cache = nullptr;
    has_version = false;
}

nb::object WaitingPrefixes::refresh(nb::handle waiting, nb::handle cache_arg, nb::handle changes) {
    RadixCache *c = compiled_cache(cache_arg, "WaitingPrefixes");
    if (!cache_object.is(cache_arg)) {
        cache_object = nb::borrow(cache_arg);
        cache = c;
        reset();
        changes = nb::none();  // relative to a queue the new matcher never saw
        known_from = serial + 1;  // the new matcher's first changes are from nothing
    }
    matcher.match_queue(waiting, cache_arg, changes);
    ++serial;
    deltas.push_back(nb::make_tuple(matcher.joined, matcher.left, matcher.rematched));
    if (deltas.size() > kKeptDeltas) deltas.pop_front();
    lengths_queue = lengths_out = nb::none();
    refreshed = nb::borrow(waiting);
    // Unmark first, while the cache's round is still the one in which these were last stamped.
    for (nb::handle rid : matcher.dropped) {
        int64_t id = nb::cast<int64_t>(rid);
        unmark(id);
        if (!matcher.requests.contains(rid)) ranked.erase(id);
    }
    c->new_round();
    nb::list unranked;
    for (nb::handle rid : matcher.added)
        if (!ranked.count(nb::cast<int64_t>(rid))) unranked.append(matcher.requests[rid]);
    if (nb::len(unranked)) {
        std::vector<int64_t> ids;  // read by by_arrival, or empty where Python sorted
        nb::list order = by_arrival(unranked, ids);
        for (std::size_t i = 0; i < order.size(); ++i) ranked[ids.empty() ? id_of(order[i]) : ids[i]].rank = next_rank++;
    }
    for (nb::handle rid : matcher.added) {
        int64_t id = nb::cast<int64_t>(rid);
        mark(id, matcher.node_of(id));
    }
    for (auto [rid, lower] : matcher.splits)  // SGLang stamps the edge at that request's turn
        c->stamp_in_round(nb::cast<NodePtr>(lower), ranked.at(nb::cast<int64_t>(rid)).rank);
    has_version = true;
    version_epoch = c->log_epoch;
    version_pos = c->log.size();
    return delta_since(serial - 1);
}

nb::object WaitingPrefixes::lengths(nb::handle queue, nb::handle cache_arg) {
    nb::dict &requests = matcher.requests;
    if (!cache_object.is(cache_arg) || !has_version || cache->log_epoch != version_epoch ||
        cache->log.size() != version_pos || nb::len(queue) != nb::len(requests))
        return nb::none();
    if (lengths_queue.is(queue)) return lengths_out;
    // Another list is checked request by request (they compare by identity); the engine asks for
    // the one it refreshed, which saves that pass.
    if (!queue.is(refreshed))
        for (nb::handle r : queue) {
            PyObject *got = PyDict_GetItemWithError(requests.ptr(), r.attr(id_name()).ptr());
            if (got != r.ptr()) {
                if (!got && PyErr_Occurred()) throw nb::python_error();
                return nb::none();
            }
        }
    nb::list out;
    for (nb::handle r : queue) out.append(matcher.length_of[r]);
    lengths_queue = nb::borrow(queue);
    lengths_out = out;
    return out;
}

nb::object WaitingPrefixes::delta(std::size_t k) const {
    nb::handle joined = deltas[k][0], left = deltas[k][1], rematched = deltas[k][2];
    return new_delta(joined, nb::list(left), rematched, matcher.length_of);
}

nb::object WaitingPrefixes::delta_since(int64_t since) const {
    int64_t behind = serial - since;
    if (since < known_from || behind < 0 || behind > static_cast<int64_t>(deltas.size())) return nb::none();
    if (behind == 0) return new_delta(nb::list(), nb::list(), nb::list(), matcher.length_of);
    if (behind == 1) return delta(deltas.size() - 1);
    nb::list kept;
    for (std::size_t k = deltas.size() - behind; k < deltas.size(); ++k) kept.append(delta(k));
    return queue_delta().attr("combine")(kept);
}

NodePtr WaitingPrefixes::start(nb::handle request, int64_t limit) const {
    nb::object rid = request.attr(id_name());
    PyObject *got = PyDict_GetItemWithError(matcher.requests.ptr(), rid.ptr());
    if (got != request.ptr()) {
        if (!got && PyErr_Occurred()) throw nb::python_error();
        return nullptr;
    }
    NodePtr node = matcher.node_of(nb::cast<int64_t>(rid));
    while (node->depth > limit) {
        if (!node->parent) throw nb::value_error("start: the refreshed cache was reset since");
        node = node->parent;
    }
    return node;
}

nb::dict WaitingPrefixes::ranks() const {
    nb::dict out;
    for (const auto &[rid, r] : ranked) out[nb::int_(rid)] = r.rank;
    return out;
}

void WaitingPrefixes::mark(int64_t rid, const NodePtr &node) {
    if (node == cache->root) return;  // nothing cached: nothing to keep warm
    Ranked &waiter = ranked.at(rid);
    waiter.node = node;
    int64_t r = waiter.rank;
    std::vector<int64_t> &ranks = ranks_at[node.get()];
    auto at = std::lower_bound(ranks.begin(), ranks.end(), r);
    if (at == ranks.end() || *at != r) ranks.insert(at, r);
    if (r > node->wait) cache->set_wait(node, r);
}

void WaitingPrefixes::unmark(int64_t rid) {
    auto it = ranked.find(rid);
    if (it == ranked.end() || !it->second.node) return;
    NodePtr node = std::move(it->second.node);  // leaves it null: unmarked
    int64_t r = it->second.rank;
    auto ranks = ranks_at.find(node.get());
    auto at = std::lower_bound(ranks->second.begin(), ranks->second.end(), r);
    if (at != ranks->second.end() && *at == r) ranks->second.erase(at);
    if (ranks->second.empty()) {
        ranks_at.erase(ranks);
        cache->set_wait(node, -1);
    } else if (r == node->wait) {  // the latest one left: only then
        cache->set_wait(node, ranks->second.back());
    }
}

}  // namespace radix
