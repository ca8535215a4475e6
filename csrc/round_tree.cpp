// A round's changes to the queue tree found in one call (incremental_tree.IncrementalQueueTree.update
// and _follow, compiled_tree.CompiledQueueTree's slots): the same checks in the same order, so a bad
// input raises what the Python tree raises, and nothing changes before every check has passed.
#include "round_tree.hpp"

#include <nanobind/ndarray.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>
#include <unordered_set>

namespace nb = nanobind;

namespace auction_core {

namespace {

using TokenArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::device::cpu>;

[[noreturn]] void raise(PyObject* type, const char* message) {
    PyErr_SetString(type, message);
    throw nb::python_error();
}

[[noreturn]] void raised() { throw nb::python_error(); }

// The items of a list or tuple (or any sequence, made one), borrowed while `fast` lives.
struct Items {
    nb::object fast;
    PyObject** item = nullptr;
    Py_ssize_t n = 0;

    explicit Items(nb::handle seq) {
        fast = nb::steal(PySequence_Fast(seq.ptr(), "expected a sequence"));
        if (!fast.is_valid()) raised();
        item = PySequence_Fast_ITEMS(fast.ptr());
        n = PySequence_Fast_GET_SIZE(fast.ptr());
    }
    PyObject* operator[](Py_ssize_t i) const { return item[i]; }
};

// A Request's field, by a name interned once (a lookup per request of the queue each round).
enum Field { ID, BIDDER, BID, TOKENS };

nb::object attr(PyObject* o, Field field) {
    static PyObject* const names[] = {PyUnicode_InternFromString("id"), PyUnicode_InternFromString("bidder"),
                                      PyUnicode_InternFromString("bid"), PyUnicode_InternFromString("tokens")};
    nb::object v = nb::steal(PyObject_GetAttr(o, names[field]));
    if (!v.is_valid()) raised();
    return v;
}

// An int (or an object with __index__) as int64; `fits` false when it is beyond int64.
int64_t as_int64(PyObject* o, bool* fits = nullptr) {
    nb::object index = nb::steal(PyNumber_Index(o));
    if (!index.is_valid()) raised();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (v == -1 && PyErr_Occurred()) raised();
    if (overflow) {
        if (fits == nullptr) raise(PyExc_OverflowError, "Python int too large to convert to C long long");
        *fits = false;
        return 0;
    }
    if (fits) *fits = true;
    return v;
}

// incremental_tree._checked_bid: float(bid), ValueError unless finite and >= 0.
double checked_bid(PyObject* bid, PyObject* rid) {
    double b;
    if (PyFloat_Check(bid)) {
        b = PyFloat_AS_DOUBLE(bid);
    } else {
        nb::object f = nb::steal(PyNumber_Float(bid));
        if (!f.is_valid()) raised();
        b = PyFloat_AS_DOUBLE(f.ptr());
    }
    if (!(0.0 <= b && b < std::numeric_limits<double>::infinity())) {
        PyErr_Format(PyExc_ValueError, "request %S: bid must be finite and >= 0, got %R", rid, bid);
        raised();
    }
    return b;
}

// Python's `old != new` for a kept float bid and the round's bid.
bool bid_differs(double old, PyObject* bid) {
    if (PyFloat_Check(bid)) return old != PyFloat_AS_DOUBLE(bid);
    nb::object kept = nb::steal(PyFloat_FromDouble(old));
    const int ne = PyObject_RichCompareBool(kept.ptr(), bid, Py_NE);
    if (ne < 0) raised();
    return ne;
}

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

// A 1-d int64 numpy array's data as the buffer protocol gives it, read without a DLPack export
// (which costs more than the rest of a request's joining the tree); false (nothing raised) for
// any other object, which nanobind's conversion then takes.
struct Int64Vector {
    const int64_t* data = nullptr;
    Py_ssize_t n = 0, stride = 0;  // stride in bytes
    bool writeable = false;
};

bool int64_vector(PyTypeObject* ndarray_type, nb::handle o, Int64Vector& out) {
    if (Py_TYPE(o.ptr()) != ndarray_type) return false;
    Py_buffer view;
    if (PyObject_GetBuffer(o.ptr(), &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        return false;
    }
    const char* f = view.format;
    const bool int64 = view.ndim == 1 && view.itemsize == 8 && f != nullptr && f[0] != 0 && f[1] == 0 &&
                       (f[0] == 'l' || f[0] == 'q');
    if (int64) out = Int64Vector{static_cast<const int64_t*>(view.buf), view.shape[0], view.strides[0], !view.readonly};
    PyBuffer_Release(&view);
    return int64;
}

// The tokens of a request's prompt `array` (`v` its data when an int64 vector, else null): a view
// of a read-only array, kept alive by a reference (released with the GIL held: the tree changes and
// is freed only in calls from Python); a copy of another.
std::shared_ptr<const Tokens> prompt(nb::handle array, bool writeable, const Int64Vector* vector) {
    auto t = std::make_shared<Tokens>();
    if (vector != nullptr) {
        const Int64Vector& v = *vector;
        t->n = size_t(v.n);
        if (!writeable && v.stride == Py_ssize_t(sizeof(int64_t))) {
            t->ptr = v.data;
            t->owner = std::shared_ptr<const void>(array.inc_ref().ptr(), [](const void* o) {
                Py_DECREF(static_cast<PyObject*>(const_cast<void*>(o)));
            });
            return t;
        }
        t->copy.resize(t->n);
        const char* at = reinterpret_cast<const char*>(v.data);
        for (size_t i = 0; i < t->n; ++i) t->copy[i] = *reinterpret_cast<const int64_t*>(at + Py_ssize_t(i) * v.stride);
        t->ptr = t->copy.data();
        return t;
    }
    TokenArray a = nb::cast<TokenArray>(array);  // converted, so copied
    t->n = a.shape(0);
    auto view = a.view();
    t->copy.resize(t->n);
    for (size_t i = 0; i < t->n; ++i) t->copy[i] = view(i);
    t->ptr = t->copy.data();
    return t;
}

int64_t cached_length(nb::handle length_of, PyObject* request) {
    nb::object c = nb::steal(PyObject_GetItem(length_of.ptr(), request));
    if (!c.is_valid()) raised();
    return as_int64(c.ptr());
}

// The requests of the queue the tree does not hold, with their bids and cached lengths (0 when not
// costed); AssertionError unless they are the requests reported as joined.
struct Arrivals {
    std::vector<PyObject*> requests, bids;
    std::vector<int64_t> lens;
};

Arrivals arrivals(const Items& queue, const Items& bid, const std::vector<int32_t>& known, const Items& joins,
                  nb::handle length_of, bool costed) {
    Arrivals fresh;
    for (Py_ssize_t i = 0; i < queue.n; ++i)
        if (known[i] < 0) {
            fresh.requests.push_back(queue[i]);
            fresh.bids.push_back(bid[i]);
        }
    const std::unordered_set<PyObject*> reported(joins.item, joins.item + joins.n),
        found(fresh.requests.begin(), fresh.requests.end());
    if (reported != found) raise(PyExc_AssertionError, "the requests reported as joined are not the queue's new ones");
    for (PyObject* r : fresh.requests) fresh.lens.push_back(costed ? cached_length(length_of, r) : 0);
    return fresh;
}

}  // namespace

RoundTree::RoundTree(double request_work, bool costed, bool cache_ties, nb::object validate)
    : tree_(request_work, costed, cache_ties), costed_(costed), validate_(std::move(validate)),
      ndarray_type_((PyTypeObject*)nb::module_::import_("numpy").attr("ndarray").ptr()) {}

int32_t RoundTree::slot(PyObject* request) const {
    auto it = slot_of_.find(request);
    return it == slot_of_.end() ? -1 : it->second;
}

nb::object RoundTree::plain(const std::vector<PyObject*>& fresh) const {
    nb::list tokens;
    std::unordered_set<int64_t> seen;
    for (PyObject* r : fresh) {
        nb::object bid = attr(r, BID), rid = attr(r, ID), t = attr(r, TOKENS);
        if (!PyFloat_Check(bid.ptr()) || !(0.0 <= PyFloat_AS_DOUBLE(bid.ptr()) &&
                                            PyFloat_AS_DOUBLE(bid.ptr()) < std::numeric_limits<double>::infinity()))
            return nb::object();
        if (!PyLong_CheckExact(rid.ptr()) || Py_TYPE(t.ptr()) != ndarray_type_) return nb::object();
        int overflow = 0;
        const long long id = PyLong_AsLongLongAndOverflow(rid.ptr(), &overflow);
        if (overflow || !seen.insert(id).second) return nb::object();
        Int64Vector v;
        if (!int64_vector(ndarray_type_, t, v) || v.n == 0) return nb::object();
        tokens.append(t);
    }
    return tokens;
}

RoundTree::Fresh RoundTree::new_block(PyObject* request, nb::handle tokens, double bid, int64_t cached) {
    nb::object rid = attr(request, ID);
    bool fits = true;
    const int64_t id = as_int64(rid.ptr(), &fits);
    if (!fits) {
        PyErr_Format(PyExc_ValueError, "request %S: the compiled core holds request ids within int64", rid.ptr());
        raised();
    }
    // A prompt that could change in place is placed again every round (without a delta).
    Int64Vector v;
    const bool vector = int64_vector(ndarray_type_, tokens, v);
    const bool writeable = vector ? v.writeable : nb::cast<bool>(tokens.attr("flags").attr("writeable"));
    nb::object source = writeable ? nb::none() : attr(request, TOKENS);
    const int64_t owner = as_int64(attr(request, BIDDER).ptr());
    return Fresh{nb::borrow(request), source,
                 Joining{-1, id, owner, prompt(tokens, writeable, vector ? &v : nullptr), bid, cached}};
}

std::vector<RoundTree::Fresh> RoundTree::fresh_blocks(const std::vector<PyObject*>& fresh,
                                                      const std::vector<PyObject*>& bids,
                                                      const std::vector<int64_t>& lens,
                                                      const std::vector<int32_t>& gone) {
    nb::object tokens = plain(fresh);
    if (!tokens.is_valid()) {  // the reference's check names the culprit, or converts the prompts
        nb::list asked;
        for (PyObject* r : fresh) asked.append(nb::handle(r));
        tokens = validate_(asked)[0];
    }
    std::vector<Fresh> added;
    added.reserve(fresh.size());
    for (size_t k = 0; k < fresh.size(); ++k) {
        nb::object rid = attr(fresh[k], ID);
        bool fits = true;
        const int64_t id = as_int64(rid.ptr(), &fits);
        auto holder = fits ? by_rid_.find(id) : by_rid_.end();
        if (holder != by_rid_.end() && std::find(gone.begin(), gone.end(), holder->second) == gone.end()) {
            PyErr_Format(PyExc_ValueError, "request %S: duplicate request id in the queue", rid.ptr());
            raised();
        }
        const double b = checked_bid(bids[k], rid.ptr());
        nb::object t = tokens[k];
        added.push_back(new_block(fresh[k], t, b, lens[k]));
    }
    return added;
}

void RoundTree::follow(nb::handle requests, nb::handle bids, nb::handle joined, nb::handle left,
                       nb::handle rematched, nb::handle length_of) {
    const Items queue(requests), bid(bids), joins(joined), leaves(left), again(rematched);
    std::vector<int32_t> gone;
    for (Py_ssize_t k = 0; k < leaves.n; ++k) {
        gone.push_back(slot(leaves[k]));
        if (gone.back() < 0) raise(PyExc_AssertionError, "a request reported as left is not in the tree");
    }
    if (Py_ssize_t(slot_of_.size()) - leaves.n + joins.n != queue.n)
        raise(PyExc_AssertionError, "the queue's changes do not lead from the tree's queue to this one");
    if (bid.n != queue.n) raise(PyExc_ValueError, "one bid per request in the queue");
    std::vector<int32_t> known(queue.n);
    for (Py_ssize_t i = 0; i < queue.n; ++i) known[i] = slot(queue[i]);
    std::vector<Fresh> added;
    if (joins.n) {
        const Arrivals fresh = arrivals(queue, bid, known, joins, length_of, costed_);
        added = fresh_blocks(fresh.requests, fresh.bids, fresh.lens, gone);
    }
    std::vector<std::pair<int32_t, double>> rebid;
    for (Py_ssize_t i = 0; i < queue.n; ++i) {
        const int32_t s = known[i];
        if (s >= 0 && bid_differs(held_[s].bid, bid[i]))
            rebid.emplace_back(s, checked_bid(bid[i], attr(queue[i], ID).ptr()));
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
    std::vector<PyObject*> fresh, fresh_bids;
    std::vector<int64_t> fresh_lens;
    for (Py_ssize_t i = 0; i < queue.n; ++i) {
        known[i] = slot(queue[i]);
        if (known[i] < 0) {
            fresh.push_back(queue[i]);
            fresh_bids.push_back(bid[i]);
            fresh_lens.push_back(length ? as_int64((*length)[i]) : 0);
        }
    }
    for (int32_t s = 0; s < int32_t(held_.size()); ++s)
        if (held_[s].request.is_valid() && !present.count(held_[s].request.ptr())) gone.push_back(s);
    std::vector<Fresh> added = fresh.empty() ? std::vector<Fresh>() : fresh_blocks(fresh, fresh_bids, fresh_lens, gone);
    std::vector<int32_t> stale;  // its prompt was replaced (or may change in place): placed again
    std::vector<std::tuple<int32_t, double, int64_t>> changed;
    for (Py_ssize_t i = 0; i < queue.n; ++i) {
        const int32_t s = known[i];
        if (s < 0) continue;
        const Held& h = held_[s];
        if (h.source.ptr() != attr(queue[i], TOKENS).ptr()) stale.push_back(s);
        PyObject* c = length ? (*length)[i] : nullptr;
        if (bid_differs(h.bid, bid[i]) || (c && length_differs(h.cached, c)))
            changed.emplace_back(s, checked_bid(bid[i], attr(queue[i], ID).ptr()), c ? as_int64(c) : 0);
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
        added.push_back(new_block(h.request.ptr(), replaced[k], h.bid, h.cached));
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
        int32_t s;
        if (free_.empty()) {
            s = int32_t(held_.size());
            held_.emplace_back();
        } else {
            s = free_.back();
            free_.pop_back();
        }
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
    return round;
}

}  // namespace auction_core
