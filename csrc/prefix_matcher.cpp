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

PrefixMatcher::PrefixMatcher(bool split, bool whole_prompt)
    : split(split), whole_prompt(whole_prompt), left(nb::steal(PySet_New(nullptr))),
      cache_object(nb::none()), objs(nb::steal(PySet_New(nullptr))) {}

nb::dict PrefixMatcher::update(nb::handle queue, nb::handle cache_arg, nb::handle changes) {
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
    std::unordered_set<int64_t> gone;
    for (nb::handle r : left_objs) gone.insert(id_of(r));
    // sorted: splits and ties deterministic (an empty one has nothing to sort)
    std::vector<int64_t> fresh_ids;
    nb::list fresh = size_of(joined_objs) ? by_arrival(joined_objs, fresh_ids) : nb::list();
    std::vector<int64_t> stale;
    if (known) {
        for (int64_t rid : affected(from))
            if (!gone.count(rid)) stale.push_back(rid);
    } else {
        for (const auto &entry : held)
            if (!gone.count(entry.first)) stale.push_back(entry.first);
    }
    std::sort(stale.begin(), stale.end());
    std::vector<int64_t> drop(gone.begin(), gone.end());
    drop.insert(drop.end(), stale.begin(), stale.end());
    std::sort(drop.begin(), drop.end());
    dropped = nb::list();
    std::unordered_map<int64_t, NodePtr> starts;
    for (int64_t rid : drop) {
        dropped.append(rid);
        starts[rid] = forget(rid);
    }
    for (int64_t rid : gone) del_item(requests, nb::int_(rid));
    for (int64_t rid : stale) peek(requests[nb::int_(rid)], known ? starts[rid] : nullptr);
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
    return match;
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
        auto by_key = hanging.find(node.get());
        if (by_key == hanging.end()) continue;
        if (!key) {
            for (const auto &entry : by_key->second) out.insert(out.end(), entry.second.begin(), entry.second.end());
        } else if (auto rids = by_key->second.find(*key); rids != by_key->second.end()) {
            out.insert(out.end(), rids->second.begin(), rids->second.end());
        }
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
    match[nb::int_(rid)] = nb::make_tuple(length, node);
    length_of[request] = length;
    std::vector<int64_t> &rids = hanging[node.get()][next];
    if (std::find(rids.begin(), rids.end(), rid) == rids.end()) rids.push_back(rid);
    held[rid] = Held{std::move(node), std::move(next), length};
}

NodePtr PrefixMatcher::forget(int64_t rid) {
    auto it = held.find(rid);
    if (it == held.end()) throw nb::key_error(std::to_string(rid).c_str());  // as the reference's pop
    Held was = std::move(it->second);
    held.erase(it);
    nb::int_ key(rid);
    del_item(match, key);
    del_item(length_of, requests[key]);
    auto by_key = hanging.find(was.node.get());
    auto rids = by_key->second.find(was.next);
    std::vector<int64_t> &ids = rids->second;
    if (auto at = std::find(ids.begin(), ids.end(), rid); at != ids.end()) {
        *at = ids.back();
        ids.pop_back();
    }
    if (ids.empty()) {
        by_key->second.erase(rids);
        if (by_key->second.empty()) hanging.erase(by_key);
    }
    return std::move(was.node);
}

}  // namespace radix
