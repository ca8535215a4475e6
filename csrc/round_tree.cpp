// A round's changes to the queue tree found in one call (incremental_tree.IncrementalQueueTree.update
// and _follow, compiled_tree.CompiledQueueTree's slots): the same checks in the same order, so a bad
// input raises what the Python tree raises, and nothing changes before every check has passed. The
// checks of the requests that join: round_tree_checks.cpp.
#include "round_tree.hpp"

#include <algorithm>
#include <memory>
#include <tuple>
#include <unordered_set>

#include "round_tree_inputs.hpp"
#include "slot_pool.hpp"

namespace nb = nanobind;

namespace auction_core {

using namespace round_inputs;

namespace {

// The items of a sequence, in a list or tuple this call holds alone. A caller's list is copied (its
// items' references with it): reading a round calls back into Python (a bid's __float__, a mapping's
// __getitem__, the check of the prompts), which could change that list and free the items read from
// it. A tuple cannot change, and any other sequence is made a new list.
struct Items {
    nb::object fast;
    PyObject** item = nullptr;
    Py_ssize_t n = 0;

    // `owned`: a list the caller made and holds alone, which nothing else changes: read in place.
    explicit Items(nb::handle seq, bool owned = false) {
        fast = owned ? nb::borrow(seq)
                     : nb::steal(PyList_Check(seq.ptr()) ? PyList_GetSlice(seq.ptr(), 0, PY_SSIZE_T_MAX)
                                                         : PySequence_Fast(seq.ptr(), "expected a sequence"));
        if (!fast.is_valid()) raised();
        item = PySequence_Fast_ITEMS(fast.ptr());
        n = PySequence_Fast_GET_SIZE(fast.ptr());
    }
    PyObject* operator[](Py_ssize_t i) const { return item[i]; }
};


// Python's `old != new` for a kept cached length and the round's.
bool length_differs(int64_t old, PyObject* length) {
    if (PyLong_CheckExact(length)) {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(length, &overflow);
        return overflow || v != old;
    }
    nb::object kept = nb::steal(PyLong_FromLongLong(old));
    const int ne = PyObject_RichCompareBool(kept.ptr(), length, Py_NE);
    if (ne < 0) raised();
    return ne;
}

int64_t cached_length(nb::handle length_of, PyObject* request) {
    nb::object c = nb::steal(PyObject_GetItem(length_of.ptr(), request));
    if (!c.is_valid()) raised();
    return as_int64(c.ptr());
}

// The requests of the queue the tree does not hold, with their positions in it and cached lengths
// (0 when not costed); AssertionError unless they are the requests reported as joined.
struct Arrivals {
    std::vector<PyObject*> requests;
    std::vector<Py_ssize_t> at;
    std::vector<int64_t> lens;
};

Arrivals arrivals(const Items& queue, const std::vector<int32_t>& known, const Items& joins, nb::handle length_of,
                  bool costed) {
    Arrivals fresh;
    for (Py_ssize_t i = 0; i < queue.n; ++i)
        if (known[i] < 0) {
            fresh.requests.push_back(queue[i]);
            fresh.at.push_back(i);
        }
    // As sets (a round has few): sorted, without repeats.
    std::vector<PyObject*> reported(joins.item, joins.item + joins.n), found(fresh.requests);
    for (auto* v : {&reported, &found}) {
        std::sort(v->begin(), v->end());
        v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    if (reported != found) raise(PyExc_AssertionError, "the requests reported as joined are not the queue's new ones");
    for (PyObject* r : fresh.requests) fresh.lens.push_back(costed ? cached_length(length_of, r) : 0);
    return fresh;
}

}  // namespace

bool QueueBids::differs(Py_ssize_t i, double old) const {
    if (read_ != nullptr) return old != read_[i];
    PyObject* bid = given_[i];
    if (PyFloat_Check(bid)) return old != PyFloat_AS_DOUBLE(bid);
    nb::object kept = nb::steal(PyFloat_FromDouble(old));
    const int ne = PyObject_RichCompareBool(kept.ptr(), bid, Py_NE);
    if (ne < 0) raised();
    return ne;
}

double QueueBids::checked(Py_ssize_t i, PyObject* rid) const {
    if (read_ == nullptr) return checked_bid(given_[i], rid);
    nb::object bid = nb::steal(PyFloat_FromDouble(read_[i]));
    return checked_bid(bid.ptr(), rid);
}

RoundTree::RoundTree(double request_work, bool costed, bool cache_ties, nb::object validate)
    : tree_(request_work, costed, cache_ties), costed_(costed), validate_(std::move(validate)),
      ndarray_type_((PyTypeObject*)nb::module_::import_("numpy").attr("ndarray").ptr()) {}

int32_t RoundTree::slot(PyObject* request) const {
    auto it = slot_of_.find(request);
    return it == slot_of_.end() ? -1 : it->second;
}

void RoundTree::follow(nb::handle requests, nb::handle bids, nb::handle joined, nb::handle left,
                       nb::handle rematched, nb::handle length_of) {
    const Items bid(bids);
    follow_bids(requests, QueueBids(bid.item, bid.n), joined, left, rematched, length_of);
}

void RoundTree::follow_bids(nb::handle requests, const QueueBids& bid, nb::handle joined, nb::handle left,
                       nb::handle rematched, nb::handle length_of, bool owned) {
    const Items queue(requests, owned), joins(joined), leaves(left), again(rematched);
    std::vector<int32_t> gone;
    for (Py_ssize_t k = 0; k < leaves.n; ++k) {
        gone.push_back(slot(leaves[k]));
        if (gone.back() < 0) raise(PyExc_AssertionError, "a request reported as left is not in the tree");
    }
    if (Py_ssize_t(slot_of_.size()) - leaves.n + joins.n != queue.n)
        raise(PyExc_AssertionError, "the queue's changes do not lead from the tree's queue to this one");
    if (bid.size() != queue.n) raise(PyExc_ValueError, "one bid per request in the queue");
    std::vector<int32_t> known(queue.n);
    for (Py_ssize_t i = 0; i < queue.n; ++i) known[i] = slot(queue[i]);
    std::vector<Fresh> added;
    if (joins.n) {
        const Arrivals fresh = arrivals(queue, known, joins, length_of, costed_);
        added = fresh_blocks(fresh.requests, bid, fresh.at, fresh.lens, gone);
    }
    std::vector<std::pair<int32_t, double>> rebid;
    for (Py_ssize_t i = 0; i < queue.n; ++i) {
        const int32_t s = known[i];
        if (s >= 0 && bid.differs(i, held_[s].bid)) rebid.emplace_back(s, bid.checked(i, attr(queue[i], ID).ptr()));
    }
    std::vector<std::pair<int32_t, int64_t>> recached;
    for (Py_ssize_t k = 0; costed_ && k < again.n; ++k) {
        const int32_t s = slot(again[k]);
        if (s < 0) {
            PyErr_SetObject(PyExc_KeyError, again[k]);
            raised();
        }
        recached.emplace_back(s, cached_length(length_of, again[k]));
    }
    std::vector<int32_t> changed;
    for (auto [s, b] : rebid) {
        held_[s].bid = b;
        changed.push_back(s);
    }
    for (auto [s, c] : recached)
        if (c != held_[s].cached) {
            held_[s].cached = c;
            changed.push_back(s);
        }
    place(gone, added, changed);
}

void RoundTree::update(nb::handle requests, nb::handle bids, nb::handle lens) {
    const Items queue(requests), bid(bids);
    const Items* length = nullptr;
    std::unique_ptr<Items> given;
    if (costed_) {
        given = std::make_unique<Items>(lens);
        length = given.get();
    }
    if (bid.n != queue.n || (length && length->n != queue.n))
        raise(PyExc_ValueError, "one bid and one cached length per request in the queue");
    const std::unordered_set<PyObject*> present(queue.item, queue.item + queue.n);
    if (Py_ssize_t(present.size()) != queue.n) raise(PyExc_ValueError, "the same request twice in the queue");
    std::vector<int32_t> known(queue.n), gone;
    std::vector<PyObject*> fresh;
    std::vector<Py_ssize_t> fresh_at;
    std::vector<int64_t> fresh_lens;
    for (Py_ssize_t i = 0; i < queue.n; ++i) {
        known[i] = slot(queue[i]);
        if (known[i] < 0) {
            fresh.push_back(queue[i]);
            fresh_at.push_back(i);
            fresh_lens.push_back(length ? as_int64((*length)[i]) : 0);
        }
    }
    for (int32_t s = 0; s < int32_t(held_.size()); ++s)
        if (held_[s].request.is_valid() && !present.count(held_[s].request.ptr())) gone.push_back(s);
    const QueueBids bids_given(bid.item, bid.n);
    std::vector<Fresh> added =
        fresh.empty() ? std::vector<Fresh>() : fresh_blocks(fresh, bids_given, fresh_at, fresh_lens, gone);
    std::vector<int32_t> stale;  // its prompt was replaced (or may change in place): placed again
    std::vector<std::tuple<int32_t, double, int64_t>> changed;
    for (Py_ssize_t i = 0; i < queue.n; ++i) {
        const int32_t s = known[i];
        if (s < 0) continue;
        const Held& h = held_[s];
        if (h.source.ptr() != attr(queue[i], TOKENS).ptr()) stale.push_back(s);
        PyObject* c = length ? (*length)[i] : nullptr;
        if (bids_given.differs(i, h.bid) || (c && length_differs(h.cached, c)))
            changed.emplace_back(s, bids_given.checked(i, attr(queue[i], ID).ptr()), c ? as_int64(c) : 0);
    }
    std::vector<nb::object> replaced;
    for (int32_t s : stale) {
        nb::list one;
        one.append(held_[s].request);
        nb::object checked = validate_(one)[0];
        replaced.push_back(checked[0]);
    }
    std::vector<int32_t> rebid;
    for (auto [s, b, c] : changed) {
        held_[s].bid = b;
        held_[s].cached = c;
        rebid.push_back(s);
    }
    for (size_t k = 0; k < stale.size(); ++k) {
        const Held& h = held_[stale[k]];
        added.push_back(new_block(h.request.ptr(), attr(h.request.ptr(), ID), replaced[k], h.bid, h.cached));
        gone.push_back(stale[k]);
    }
    place(gone, added, rebid);
}

void RoundTree::place(const std::vector<int32_t>& gone, std::vector<Fresh>& added, const std::vector<int32_t>& rebid) {
    for (int32_t s : gone) {
        slot_of_.erase(held_[s].request.ptr());
        by_rid_.erase(held_[s].rid);
        held_[s] = Held{};
        free_.push_back(s);
    }
    std::vector<Rebid> rebids;  // of the requests that stay
    for (int32_t s : rebid)
        if (held_[s].request.is_valid()) rebids.push_back({s, held_[s].bid, held_[s].cached});
    std::vector<Joining> joins;
    joins.reserve(added.size());
    for (Fresh& f : added) {
        const int32_t s = take_slot(held_, free_);
        f.joining.slot = s;
        held_[s] = Held{f.request, f.source, f.joining.rid, f.joining.bid, f.joining.cached};
        slot_of_[f.request.ptr()] = s;
        by_rid_[f.joining.rid] = s;
        joins.push_back(std::move(f.joining));
    }
    tree_.apply(gone, joins, rebids);
}

nb::list RoundTree::requests(const std::vector<int32_t>& slots) const {
    nb::list out = nb::steal<nb::list>(PyList_New(Py_ssize_t(slots.size())));
    for (size_t k = 0; k < slots.size(); ++k) {
        PyObject* r = held_[slots[k]].request.ptr();
        Py_INCREF(r);
        PyList_SET_ITEM(out.ptr(), Py_ssize_t(k), r);
    }
    return out;
}

nb::list RoundTree::order() const { return requests(tree_.order()); }

FactoredRound RoundTree::factored(const std::vector<double>& alpha) {
    FactoredRound round{tree_.factored(alpha), {}};
    round.admission = requests(round.a.admission);
    round.pricing = pricing_;
    return round;
}

}  // namespace auction_core
