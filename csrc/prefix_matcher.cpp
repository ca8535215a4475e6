// The compiled prefix matcher: prefix_matcher.py's PrefixMatcher, line for line
// (waiting_prefixes.hpp says why).
#include <nanobind/ndarray.h>

#include <algorithm>

#include "arrival_order.hpp"
#include "py_calls.hpp"
#include "waiting_prefixes.hpp"

namespace radix {

namespace {

using TokenArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

struct Python {
    nb::object sorted, fcfs_key, token_view, contiguous;
    nb::str id, tokens, discard;  // interned: read for every request a round matches
};

const Python &python() {
    static const Python *py = [] {
        auto name = pycall::interned;
        return new Python{nb::module_::import_("builtins").attr("sorted"),
                          nb::module_::import_("auction_gym.request").attr("fcfs_key"),
                          nb::module_::import_("auction_gym.request").attr("token_view"),
                          nb::module_::import_("numpy").attr("ascontiguousarray"),
                          name("id"), name("tokens"), name("discard")};
    }();  // never freed: it may outlive the interpreter's teardown of the modules it holds
    return *py;
}

}  // namespace

nb::handle id_name() { return python().id; }

int64_t id_of(nb::handle request) { return nb::cast<int64_t>(request.attr(python().id)); }

namespace {

void del_item(nb::dict &dict, nb::handle key) {
    if (PyDict_DelItem(dict.ptr(), key.ptr()) != 0) throw nb::python_error();
}

}  // namespace

RadixCache *compiled_cache(nb::handle cache, const char *who) {
    RadixCache *out = nullptr;
    if (!nb::try_cast(cache, out, false) || out == nullptr)
        throw nb::type_error((std::string(who) + " of the compiled core reads the compiled RadixCache only, got " +
                              nb::type_name(cache.type()).c_str() +
                              ": build both on one core (auction_gym.core.use, AUCTION_GYM_CORE)")
                                 .c_str());
    return out;
}

nb::object sorted_by_arrival(nb::handle requests) {
    return python().sorted(requests, nb::arg("key") = python().fcfs_key);
}

std::size_t size_of(nb::handle requests) {
    Py_ssize_t n = PyObject_Length(requests.ptr());
    if (n < 0) throw nb::python_error();
    return std::size_t(n);
}

PrefixMatcher::PrefixMatcher(bool split, bool whole_prompt, bool keeps_match)
    : split(split), whole_prompt(whole_prompt), keeps_match(keeps_match), left(nb::steal(PySet_New(nullptr))),
      cache_object(nb::none()), objs(nb::steal(PySet_New(nullptr))) {}

nb::dict PrefixMatcher::update(nb::handle queue, nb::handle cache, nb::handle changes) {
    match_queue(queue, cache, changes);
    return keeps_match ? match : match_of_held();
}

// The match a matcher that keeps none in Python would have kept: each request once, in the order
// it was last matched (each match inserts its id anew, after the forget that removed it).
nb::dict PrefixMatcher::match_of_held() const {
    std::vector<const std::pair<const int64_t, Held> *> order;
    order.reserve(held.size());
    for (const auto &entry : held) order.push_back(&entry);
    std::sort(order.begin(), order.end(), [](auto *a, auto *b) { return a->second.peeked < b->second.peeked; });
    nb::dict out;
    for (const auto *entry : order)
        out[nb::int_(entry->first)] = nb::make_tuple(entry->second.length, entry->second.node);
    return out;
}

void PrefixMatcher::match_queue(nb::handle queue, nb::handle cache_arg, nb::handle changes) {
    RadixCache *c = compiled_cache(cache_arg, "PrefixMatcher");
    if (!cache_object.is(cache_arg)) {
        cache_object = nb::borrow(cache_arg);
        cache = c;
        has_cursor = false;
    }
    const bool known = has_cursor && cursor_epoch == c->log_epoch;  // `changed is not None`
    const std::size_t from = cursor_pos;
    has_cursor = true;
    cursor_epoch = c->log_epoch;
    cursor_pos = c->log.size();
    splits = nb::dict();
    nb::object joined_objs, left_objs;
    if (changes.is_none()) {
        nb::object now = nb::steal(PySet_New(queue.ptr()));
        if (!now) throw nb::python_error();
        left_objs = nb::steal(PyNumber_Subtract(objs.ptr(), now.ptr()));
        joined_objs = nb::steal(PyNumber_Subtract(now.ptr(), objs.ptr()));
        if (!left_objs || !joined_objs) throw nb::python_error();
        objs = now;
    } else {
        joined_objs = changes[0];
        left_objs = changes[1];
        objs = nb::steal(PyNumber_InPlaceSubtract(objs.ptr(), left_objs.ptr()));
        if (!objs) throw nb::python_error();
        for (nb::handle r : joined_objs)  // `objs.update(joined)`, without the method call
            if (PySet_Add(objs.ptr(), r.ptr()) != 0) throw nb::python_error();
    }
    std::vector<int64_t> gone;  // as a set: ascending, each once
    for (nb::handle r : left_objs) gone.push_back(id_of(r));
    std::sort(gone.begin(), gone.end());
    gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
    auto is_gone = [&](int64_t rid) { return std::binary_search(gone.begin(), gone.end(), rid); };
    // sorted: splits and ties deterministic (an empty one has nothing to sort)
    std::vector<int64_t> fresh_ids;
    nb::list fresh = size_of(joined_objs) ? by_arrival(joined_objs, fresh_ids) : nb::list();
    std::vector<int64_t> stale;
    if (known) {
        for (int64_t rid : affected(from))
            if (!is_gone(rid)) stale.push_back(rid);
    } else {
        for (const auto &entry : held)
            if (!is_gone(entry.first)) stale.push_back(entry.first);
    }
    std::sort(stale.begin(), stale.end());
    std::vector<int64_t> drop(gone.size() + stale.size());
    std::merge(gone.begin(), gone.end(), stale.begin(), stale.end(), drop.begin());
    dropped = nb::list();
    std::vector<NodePtr> starts;  // the stale ones' old nodes, in `stale`'s (ascending) order
    starts.reserve(stale.size());
    for (int64_t rid : drop) {
        dropped.append(rid);
        NodePtr node = forget(rid);
        if (!is_gone(rid)) starts.push_back(std::move(node));
    }
    for (int64_t rid : gone) del_item(requests, nb::int_(rid));
    for (std::size_t i = 0; i < stale.size(); ++i)
        peek(requests[nb::int_(stale[i])], known ? starts[i] : nullptr);
    joined = nb::list();
    left = left_objs;
    rematched = nb::list();
    added = nb::list();
    for (int64_t rid : stale) {
        rematched.append(requests[nb::int_(rid)]);
        added.append(rid);
    }
    for (std::size_t i = 0; i < fresh.size(); ++i) {
        nb::handle r = fresh[i];
        int64_t rid = fresh_ids.empty() ? id_of(r) : fresh_ids[i];
        if (held.count(rid)) {
            // A second object under an id that still waits (a caller's error, which the engine and
            // the auctions' checks reject): ignored until the first one leaves.
            pycall::call_method(objs, python().discard, r);
            continue;
        }
        requests[nb::int_(rid)] = r;
        peek(r, nullptr);
        added.append(rid);
        joined.append(r);
    }
}

void PrefixMatcher::release() {
    for (nb::handle dict : {match, requests, length_of, splits}) PyDict_Clear(dict.ptr());
    held.clear();
    hanging.clear();
    dropped = added = joined = rematched = nb::list();
    left = objs = nb::steal(PySet_New(nullptr));
    cache_object = nb::none();
    cache = nullptr;
    has_cursor = false;
}

std::vector<int64_t> PrefixMatcher::affected(std::size_t from) const {
    std::vector<int64_t> out;
    for (std::size_t i = from; i < cache->log.size(); ++i) {
        const auto &[node, key] = cache->log[i];
        auto at_node = hanging.find(node.get());
        if (at_node == hanging.end()) continue;
        for (const Hanging &h : at_node->second)
            if (!key || h.next == *key) out.push_back(h.rid);
    }
    std::sort(out.begin(), out.end());  // as a set: ascending, each once
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

void PrefixMatcher::peek(nb::handle request, const NodePtr &start) {
    nb::object tokens = request.attr(python().tokens);
    int64_t n = 0;
    const int64_t *data = pycall::int64_buffer(tokens, &n);
    TokenArray array;  // where read by the cast, alive while its data is read
    if (!data) {
        if (!nb::try_cast(tokens, array, false)) {
            tokens = python().contiguous(python().token_view(tokens));
            array = nb::cast<TokenArray>(tokens, false);
        }
        data = array.data();
        n = static_cast<int64_t>(array.shape(0));
    }
    Tokens view{data, whole_prompt ? n : std::max<int64_t>(n - 1, 0), tokens};
    const int64_t rid = id_of(request);
    const int64_t nodes = cache->node_count;  // a peek adds nodes only by splitting
    auto [length, node] = cache->peek(view, start, split);
    if (cache->node_count != nodes)  // the walk split an edge (at most one): node is the upper half
        node->children.for_each([&](const Key &, const NodePtr &lower) { splits[nb::int_(rid)] = nb::cast(lower); });
    Key next = node->depth + cache->page_size > view.size ? kNoKey : cache->key_at(view.data + node->depth);
    if (keeps_match) match[nb::int_(rid)] = nb::make_tuple(length, node);
    length_of[request] = length;
    hanging[node.get()].push_back(Hanging{std::move(next), rid});  // forgotten before: not there yet
    held[rid] = Held{std::move(node), length, peeks++};
}

NodePtr PrefixMatcher::forget(int64_t rid) {
    auto it = held.find(rid);
    if (it == held.end()) throw nb::key_error(std::to_string(rid).c_str());  // as the reference's pop
    Held was = std::move(it->second);
    held.erase(it);
    nb::int_ key(rid);
    if (keeps_match) del_item(match, key);
    del_item(length_of, requests[key]);
    auto at_node = hanging.find(was.node.get());
    std::vector<Hanging> &here = at_node->second;
    auto at = std::find_if(here.begin(), here.end(), [&](const Hanging &h) { return h.rid == rid; });
    *at = std::move(here.back());
    here.pop_back();
    if (here.empty()) hanging.erase(at_node);
    return std::move(was.node);
}

}  // namespace radix
