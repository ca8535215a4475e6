// Strict priority's round (mechanism/strict_priority.py) in C++: an engine's round's bids and
// cached lengths, the queue's checks as validation.validate_requests' fast path makes them, the
// strict order, and the closed-form payments over the compiled queue tree, with the Python code's
// operations in its order (docs/design.md section 8). Each returns None, having changed nothing, for an input it does not
// take as it is; the Python code then handles it and raises its own errors.
#include <nanobind/nanobind.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "bindings.hpp"
#include "py_sum.hpp"
#include "queue_tree.hpp"
#include "request_slots.hpp"

namespace nb = nanobind;
using auction_core::PySum;
using auction_core::ScratchTree;
using request_slots::at_offset;
using request_slots::plain_int;

namespace {

// A list or tuple's items (any other sequence copied into a list); invalid, the error cleared,
// for an object that is not a sequence.
nb::object items_of(nb::handle seq) {
    nb::object fast = nb::steal(PySequence_Fast(seq.ptr(), "a sequence"));
    if (!fast.is_valid()) PyErr_Clear();
    return fast;
}

// A request's field: a plain Request's slot read in place, any other object's by its interned
// name; invalid, the error cleared, where reading it raises (or the slot is unset).
nb::object field(PyObject* request, PyObject* name, Py_ssize_t request_slots::Fields::*slot) {
    const request_slots::Fields& f = request_slots::fields();
    if (Py_TYPE(request) == f.type) return nb::borrow(request_slots::at_offset(request, f.*slot));
    nb::object v = nb::steal(PyObject_GetAttr(request, name));
    if (!v.is_valid()) PyErr_Clear();
    return v;
}

bool exact_int(PyObject* o, int64_t& out) {
    if (o == nullptr || !PyLong_CheckExact(o)) return false;
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    out = int64_t(v);
    return overflow == 0;
}

// An exact float that is not NaN (which Python's tuple comparisons order their own way).
bool exact_float(PyObject* o, double& out) {
    if (o == nullptr || !PyFloat_CheckExact(o)) return false;
    out = PyFloat_AS_DOUBLE(o);
    return !std::isnan(out);
}

// Whether `o` is a non-empty 1-d numpy array of native int64: TOKEN_DTYPE, as the fast path checks.
bool token_array(PyObject* o) {
    static PyTypeObject* const ndarray_type =
        (PyTypeObject*)nb::object(nb::module_::import_("numpy").attr("ndarray")).release().ptr();
    return auction_core::with_native_tokens(ndarray_type, o, [](const Py_buffer&) {});
}

// validate_requests(requests) for a queue its fast path takes as it is (bids exact floats, ids
// exact ints within int64, none twice, prompts non-empty native int64 arrays): (tokens, bids).
nb::object plain_requests(nb::handle requests) {
    static PyObject* const id_name = PyUnicode_InternFromString("id");
    static PyObject* const bid_name = PyUnicode_InternFromString("bid");
    static PyObject* const tokens_name = PyUnicode_InternFromString("tokens");
    nb::object seq = items_of(requests);
    if (!seq.is_valid()) return nb::none();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
    nb::list tokens, bids;
    std::vector<int64_t> ids(static_cast<size_t>(n), 0);
    for (Py_ssize_t k = 0; k < n; ++k) {
        nb::object bid = field(items[k], bid_name, &request_slots::Fields::bid),
                   t = field(items[k], tokens_name, &request_slots::Fields::tokens),
                   rid = field(items[k], id_name, &request_slots::Fields::id);
        double b = 0.0;
        if (!exact_float(bid.ptr(), b) || !(0.0 <= b && b < std::numeric_limits<double>::infinity()) ||
            !exact_int(rid.ptr(), ids[size_t(k)]) || !t.is_valid() || !token_array(t.ptr()))
            return nb::none();
        tokens.append(t);
        bids.append(bid);
    }
    std::sort(ids.begin(), ids.end());
    if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) return nb::none();  // Python names it
    return nb::make_tuple(tokens, bids);
}

// The positions sorted by (-bid, -cached, arrival, id), stable, as allocate's sorted() orders them.
std::vector<size_t> strict_sort(const std::vector<double>& bid, const std::vector<int64_t>& cached,
                                const std::vector<double>& arrival, const std::vector<int64_t>& id) {
    std::vector<size_t> order(bid.size());
    std::iota(order.begin(), order.end(), size_t(0));
    // -x < -y is x > y, for the floats (no NaN) and the ints alike, so nothing is negated
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (bid[a] != bid[b]) return bid[a] > bid[b];
        if (cached[a] != cached[b]) return cached[a] > cached[b];
        if (arrival[a] != arrival[b]) return arrival[a] < arrival[b];
        return id[a] < id[b];
    });
    return order;
}

// StrictPriorityAuction.allocate's order: sorted(range(n), key=(-bid, -cached_first, arrival, id)),
// stable; (order, rank). Bids and arrivals exact floats, not NaN; cached lengths and ids exact ints.
nb::object strict_order(nb::handle requests, nb::handle bids, nb::handle cached_first) {
    static PyObject* const id_name = PyUnicode_InternFromString("id");
    static PyObject* const arrival_name = PyUnicode_InternFromString("arrival");
    nb::object rs = items_of(requests), bs = items_of(bids), cs = items_of(cached_first);
    if (!rs.is_valid() || !bs.is_valid() || !cs.is_valid()) return nb::none();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(rs.ptr());
    if (PySequence_Fast_GET_SIZE(bs.ptr()) != n || PySequence_Fast_GET_SIZE(cs.ptr()) != n) return nb::none();
    const size_t count = size_t(n);
    std::vector<double> bid(count), arrival(count);
    std::vector<int64_t> cached(count), id(count);
    for (Py_ssize_t k = 0; k < n; ++k) {
        const size_t i = size_t(k);
        PyObject* r = PySequence_Fast_ITEMS(rs.ptr())[k];
        nb::object at = field(r, arrival_name, &request_slots::Fields::arrival),
                   rid = field(r, id_name, &request_slots::Fields::id);
        if (!exact_float(PySequence_Fast_ITEMS(bs.ptr())[k], bid[i]) ||
            !exact_int(PySequence_Fast_ITEMS(cs.ptr())[k], cached[i]) || !exact_float(at.ptr(), arrival[i]) ||
            !exact_int(rid.ptr(), id[i]))
            return nb::none();
    }
    const std::vector<size_t> order = strict_sort(bid, cached, arrival, id);
    std::vector<size_t> rank(count);
    for (size_t k = 0; k < order.size(); ++k) rank[order[k]] = k;
    return nb::make_tuple(nb::cast(order), nb::cast(rank));
}

// A list of `n` empty places, made before the round's fields are read: a list's allocation may run
// the garbage collector, and so Python code, which reading the fields must not meet.
nb::list new_list(size_t n) {
    nb::list out = nb::steal<nb::list>(PyList_New(Py_ssize_t(n)));
    if (!out.is_valid()) throw nb::python_error();
    return out;
}

// Sets `out`'s `n` places to `make(i)`'s new references (ints and borrowed objects: no collection).
template <class Make>
void fill(nb::list& out, size_t n, Make&& make) {
    for (size_t i = 0; i < n; ++i) {
        PyObject* item = make(i);
        if (item == nullptr) throw nb::python_error();
        PyList_SET_ITEM(out.ptr(), Py_ssize_t(i), item);
    }
}

// The queue as a tuple of the call's own, so that no request it reads is freed meanwhile; null
// for a queue that is not a list of requests of exactly the class whose slots are read in place.
nb::object plain_queue(nb::handle requests) {
    if (request_slots::fields().type == nullptr || !PyList_CheckExact(requests.ptr())) return nb::object();
    nb::object queue = nb::steal(PyList_AsTuple(requests.ptr()));
    if (!queue.is_valid()) throw nb::python_error();
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(queue.ptr()); ++i)
        if (Py_TYPE(PyTuple_GET_ITEM(queue.ptr(), i)) != request_slots::fields().type) return nb::object();
    return queue;
}

// Request `r`'s bid in the round as policy.round_bids makes it (`alpha` its multipliers, else its
// own `bid`); false where a field is not plain, a bidder is out of range or the bid is NaN.
bool round_bid(PyObject* r, const std::vector<double>* alpha, double& bid) {
    const request_slots::Fields& f = request_slots::fields();
    if (alpha == nullptr) return exact_float(at_offset(r, f.bid), bid);
    PyObject* urgency = at_offset(r, f.urgency);
    int64_t b = 0;
    if (urgency == nullptr || !PyFloat_CheckExact(urgency) || !plain_int(at_offset(r, f.bidder), b) || b < 0 ||
        size_t(b) >= alpha->size())
        return false;
    bid = (*alpha)[size_t(b)] * PyFloat_AS_DOUBLE(urgency);
    return !std::isnan(bid);  // Python's sort orders NaN its own way
}

// A round's queue as plain Requests (`plain_queue`), where its `multipliers` (None, or a list of
// exact floats, copied to `alpha`) and `length_of` (None, or the engine's dict) are plain too, every
// multiplier finite and >= 0 (else round_bids raises, in the Python code the compiled calls leave
// it to); an invalid object for any other round.
nb::object plain_round(nb::handle requests, nb::handle multipliers, nb::handle length_of, std::vector<double>& alpha) {
    if ((!length_of.is_none() && !PyDict_CheckExact(length_of.ptr())) ||
        (!multipliers.is_none() && !request_slots::plain_floats(multipliers, alpha)))
        return nb::object();
    for (double a : alpha)
        if (!(0.0 <= a && a < std::numeric_limits<double>::infinity())) return nb::object();
    return plain_queue(requests);
}

// StrictPriorityAuction's round inputs as decide_round reads them, for a queue (a list) of plain
// Requests, `multipliers` a list of exact floats (None: each request bids its own `bid`) and
// `length_of` the engine's dict of cached lengths (None under "unit"): (bids, lens), lens None
// without `length_of`; None for any other input, which the Python code reads or refuses.
nb::object strict_bids(nb::handle requests, nb::handle multipliers, nb::handle length_of) {
    const bool costed = !length_of.is_none();
    std::vector<double> alpha;
    nb::object queue = plain_round(requests, multipliers, length_of, alpha);
    if (!queue.is_valid()) return nb::none();
    const size_t n = size_t(PyTuple_GET_SIZE(queue.ptr()));
    nb::list bids = new_list(n), lens = costed ? new_list(n) : nb::list();
    for (size_t i = 0; i < n; ++i) {
        PyObject* r = PyTuple_GET_ITEM(queue.ptr(), Py_ssize_t(i));
        double bid = 0.0;
        if (!round_bid(r, multipliers.is_none() ? nullptr : &alpha, bid)) return nb::none();
        PyObject* b = PyFloat_FromDouble(bid);
        if (b == nullptr) throw nb::python_error();
        PyList_SET_ITEM(bids.ptr(), Py_ssize_t(i), b);
        if (!costed) continue;
        PyObject* cached = PyDict_GetItemWithError(length_of.ptr(), r);  // borrowed
        int64_t length = 0;
        if (cached == nullptr || !plain_int(cached, length)) {
            PyErr_Clear();
            return nb::none();
        }
        PyList_SET_ITEM(lens.ptr(), Py_ssize_t(i), Py_NewRef(cached));
    }
    return nb::make_tuple(bids, costed ? nb::object(lens) : nb::none());
}

// Request `r`'s checks as validate_requests' fast path makes them, and its sort keys; false where
// one fails or a field is not plain.
bool strict_keys(PyObject* r, int64_t& id, double& arrival) {
    const request_slots::Fields& f = request_slots::fields();
    PyObject* prompt = at_offset(r, f.tokens);
    double own = 0.0;
    return exact_float(at_offset(r, f.bid), own) && own >= 0.0 && own < std::numeric_limits<double>::infinity() &&
           plain_int(at_offset(r, f.id), id) && exact_float(at_offset(r, f.arrival), arrival) && prompt != nullptr &&
           token_array(prompt);
}

// StrictPriorityAuction.allocate's checks, order and lists over `queue` (a tuple of plain Requests)
// with the round's `bid`s and `cached` lengths (zeros unless ties go by them): (order, rank, tokens,
// admission); None where a check fails.
nb::object allocation_of(nb::handle queue, const std::vector<double>& bid, const std::vector<int64_t>& cached) {
    const size_t n = size_t(PyTuple_GET_SIZE(queue.ptr()));
    std::vector<double> arrival(n);
    std::vector<int64_t> id(n);
    nb::list tokens = new_list(n), order_out = new_list(n), rank_out = new_list(n), admission = new_list(n);
    for (size_t i = 0; i < n; ++i) {
        PyObject* r = PyTuple_GET_ITEM(queue.ptr(), Py_ssize_t(i));
        if (std::isnan(bid[i]) || !strict_keys(r, id[i], arrival[i])) return nb::none();
        PyList_SET_ITEM(tokens.ptr(), Py_ssize_t(i), Py_NewRef(at_offset(r, request_slots::fields().tokens)));
    }
    std::vector<int64_t> ids(id);
    std::sort(ids.begin(), ids.end());
    if (std::adjacent_find(ids.begin(), ids.end()) != ids.end()) return nb::none();  // Python names it
    const std::vector<size_t> order = strict_sort(bid, cached, arrival, id);
    std::vector<size_t> rank(n);
    for (size_t k = 0; k < n; ++k) rank[order[k]] = k;
    fill(order_out, n, [&](size_t k) { return PyLong_FromSize_t(order[k]); });
    fill(rank_out, n, [&](size_t r) { return PyLong_FromSize_t(rank[r]); });
    fill(admission, n, [&](size_t k) { return Py_NewRef(PyTuple_GET_ITEM(queue.ptr(), Py_ssize_t(order[k]))); });
    return nb::make_tuple(order_out, rank_out, tokens, admission);
}

// StrictPriorityAuction.allocate of a queue of plain Requests with the round's `bids` (exact
// floats) and `lens` (exact ints; None under "unit"): (order, rank, tokens, admission); None,
// nothing changed, where a check fails or an input is not plain, for Python to raise its errors.
nb::object strict_allocation(nb::handle requests, nb::handle bids, nb::handle lens, bool cache_ties) {
    nb::object queue = plain_queue(requests);
    if (!queue.is_valid()) return nb::none();
    const size_t n = size_t(PyTuple_GET_SIZE(queue.ptr()));
    std::vector<double> bid;
    std::vector<int64_t> cached(n, 0);
    if (!request_slots::plain_floats(bids, bid) || bid.size() != n) return nb::none();
    if (!lens.is_none()) {
        if (!PyList_CheckExact(lens.ptr()) || size_t(PyList_GET_SIZE(lens.ptr())) != n) return nb::none();
        for (size_t i = 0; i < n && cache_ties; ++i)
            if (!plain_int(PyList_GET_ITEM(lens.ptr(), Py_ssize_t(i)), cached[i])) return nb::none();
    }
    return allocation_of(queue, bid, cached);
}

// A round's inputs read as strict_bids reads them: the bids, and under "tokens" the cached lengths
// (the dict's own ints, held) and their values.
struct RoundInputs {
    std::vector<double> bid;
    std::vector<nb::object> lens;
    std::vector<int64_t> cached;
};

// Whether `read`, over `queue`, are the `last` round's inputs (AuctionMechanism._last) as
// `_unchanged` compares them, list by list and item by item in its order: 1 the same, 0 not, -1
// where the comparison would take Python (an item not of the plain types, another container).
int same_as_last(nb::handle queue, const RoundInputs& read, bool costed, nb::handle last) {
    if (last.is_none()) return 0;
    if (!PyTuple_CheckExact(last.ptr()) || PyTuple_GET_SIZE(last.ptr()) != 4) return -1;
    PyObject *requests = PyTuple_GET_ITEM(last.ptr(), 0), *bids = PyTuple_GET_ITEM(last.ptr(), 1),
             *lens = PyTuple_GET_ITEM(last.ptr(), 2);
    const Py_ssize_t n = PyTuple_GET_SIZE(queue.ptr());
    if (!PyList_CheckExact(requests)) return -1;
    if (PyList_GET_SIZE(requests) != n) return 0;
    if (!PyList_CheckExact(bids) || PyList_GET_SIZE(bids) != n) return -1;
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* b = PyList_GET_ITEM(bids, i);
        if (!PyFloat_CheckExact(b)) return -1;
        if (PyFloat_AS_DOUBLE(b) != read.bid[size_t(i)]) return 0;
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* r = PyList_GET_ITEM(requests, i);
        if (r == PyTuple_GET_ITEM(queue.ptr(), i)) continue;
        return Py_TYPE(r) == request_slots::fields().type ? 0 : -1;  // a Request equals itself only
    }
    if (!costed) return lens == Py_None ? 1 : -1;
    if (!PyList_CheckExact(lens) || PyList_GET_SIZE(lens) != n) return -1;
    for (Py_ssize_t i = 0; i < n; ++i) {
        int64_t c = 0;
        if (!plain_int(PyList_GET_ITEM(lens, i), c)) return -1;
        if (c != read.cached[size_t(i)]) return 0;
    }
    return 1;
}

// StrictPriorityAuction's round in one call, for plain inputs (strict_bids' and strict_allocation's)
// whose checks pass: True where they are the `last` round's (`_unchanged`), else (bids, lens, order,
// rank, tokens, admission), lens None without `length_of`; None for anything else, nothing changed,
// which the two calls and the Python code then take.
nb::object strict_round(nb::handle requests, nb::handle multipliers, nb::handle length_of, bool cache_ties,
                        nb::handle last) {
    const bool costed = !length_of.is_none();
    std::vector<double> alpha;
    nb::object queue = plain_round(requests, multipliers, length_of, alpha);
    if (!queue.is_valid()) return nb::none();
    const size_t n = size_t(PyTuple_GET_SIZE(queue.ptr()));
    RoundInputs read{std::vector<double>(n), {}, std::vector<int64_t>(n, 0)};
    for (size_t i = 0; i < n; ++i) {
        PyObject* r = PyTuple_GET_ITEM(queue.ptr(), Py_ssize_t(i));
        if (!round_bid(r, multipliers.is_none() ? nullptr : &alpha, read.bid[i])) return nb::none();
        if (!costed) continue;
        PyObject* cached = PyDict_GetItemWithError(length_of.ptr(), r);  // borrowed, then held
        if (cached == nullptr || !plain_int(cached, read.cached[i])) {
            PyErr_Clear();
            return nb::none();
        }
        read.lens.push_back(nb::borrow(cached));
    }
    const int same = same_as_last(queue, read, costed, last);
    if (same < 0) return nb::none();
    if (same) return nb::bool_(true);
    nb::list bids = new_list(n);
    fill(bids, n, [&](size_t i) { return PyFloat_FromDouble(read.bid[i]); });
    nb::object lens = nb::none();
    if (costed) {
        nb::list held = new_list(n);
        fill(held, n, [&](size_t i) { return Py_NewRef(read.lens[i].ptr()); });
        lens = held;
    }
    const std::vector<int64_t> ties = cache_ties && costed ? read.cached : std::vector<int64_t>(n, 0);
    nb::object decided = allocation_of(queue, read.bid, ties);
    if (decided.is_none()) return nb::none();
    nb::tuple made = nb::borrow<nb::tuple>(decided);
    return nb::make_tuple(bids, lens, made[0], made[1], made[2], made[3]);
}

// What the closed form reads of a round: each request's bidder (numbered by first appearance in
// the order) and bid, the order and ranks.
struct StrictRound {
    size_t n = 0;
    std::vector<double> bid;
    std::vector<size_t> order, rank, who;
    std::vector<int64_t> bidders;  // the bidders, by first appearance in the order

    bool read(nb::handle requests, nb::handle bids, nb::handle order_seq);
};

bool StrictRound::read(nb::handle requests, nb::handle bids, nb::handle order_seq) {
    static PyObject* const bidder_name = PyUnicode_InternFromString("bidder");
    nb::object rs = items_of(requests), bs = items_of(bids), os = items_of(order_seq);
    if (!rs.is_valid() || !bs.is_valid() || !os.is_valid()) return false;
    n = size_t(PySequence_Fast_GET_SIZE(rs.ptr()));
    if (size_t(PySequence_Fast_GET_SIZE(bs.ptr())) != n || size_t(PySequence_Fast_GET_SIZE(os.ptr())) != n)
        return false;
    std::vector<int64_t> owner(n);
    bid.resize(n);
    rank.assign(n, n);
    for (size_t i = 0; i < n; ++i) {
        nb::object b = field(PySequence_Fast_ITEMS(rs.ptr())[i], bidder_name, &request_slots::Fields::bidder);
        if (!exact_int(b.ptr(), owner[i]) || !exact_float(PySequence_Fast_ITEMS(bs.ptr())[i], bid[i])) return false;
    }
    order.resize(n);
    for (size_t k = 0; k < n; ++k) {  // a permutation of the positions, else Python's errors
        int64_t r = 0;
        if (!exact_int(PySequence_Fast_ITEMS(os.ptr())[k], r) || r < 0 || size_t(r) >= n || rank[size_t(r)] != n)
            return false;
        order[k] = size_t(r);
        rank[size_t(r)] = k;
    }
    std::unordered_map<int64_t, size_t> number;
    who.resize(n);
    for (size_t r : order) {
        auto [at, fresh] = number.emplace(owner[r], bidders.size());
        if (fresh) bidders.push_back(owner[r]);
        who[r] = at->second;
    }
    return true;
}

// _first_requests: per node, (rank a of its first request, that request's bidder, rank c of its
// first request of another bidder, n if none); false for a node without requests (Python raises).
struct First {
    size_t a, i, c;
};

bool first_requests(const ScratchTree& tree, const StrictRound& q, std::vector<First>& first) {
    const size_t nodes = tree.parent.size();
    first.assign(nodes, First{q.n, q.n, q.n});
    for (size_t v = nodes; v-- > 0;) {
        // The node's items, its requests' then its children's, read in place: the first of least rank...
        bool any = false;
        First head{};
        auto each = [&](auto&& visit) {
            for (int64_t r : tree.attached[v]) visit(First{q.rank[size_t(r)], q.who[size_t(r)], q.n});
            for (int64_t c : tree.children[v]) visit(first[size_t(c)]);
        };
        each([&](const First& t) {
            if (!any || t.a < head.a) head = t;
            any = true;
        });
        if (!any) return false;
        // ...and the least rank of another bidder's first request
        size_t c = std::numeric_limits<size_t>::max();
        each([&](const First& t) { c = std::min(c, t.i != head.i ? t.a : t.c); });
        first[v] = First{head.a, head.i, c};
    }
    return true;
}

// StrictPriorityAuction.payments' closed form before the rounding clip: (bidders, payments), the
// bidders by first appearance in the order; `tree` None under "unit". `overhead`: request_work.
// Returns false where it does not take the inputs; `pay` is per bidder of `q.bidders`.
bool closed_form(const ScratchTree* tree, nb::handle requests, nb::handle bids, nb::handle order, double overhead,
                 StrictRound& q, std::vector<double>& pay) {
    if (!q.read(requests, bids, order) || (tree != nullptr && tree->req_work.size() != q.n)) return false;
    const size_t n = q.n, m = q.bidders.size();
    std::vector<double> total(n + 1, 0.0);  // bids at ranks < k
    for (size_t k = 0; k < n; ++k) total[k + 1] = total[k] + q.bid[q.order[k]];
    std::vector<std::vector<size_t>> ranks(m);
    std::vector<std::vector<double>> cum(m, std::vector<double>{0.0});
    std::vector<size_t> place(n);
    for (size_t k = 0; k < n; ++k) {
        const size_t r = q.order[k], i = q.who[r];
        place[r] = ranks[i].size();
        ranks[i].push_back(k);
        cum[i].push_back(cum[i].back() + q.bid[r]);
    }
    std::vector<std::vector<double>> after(m);
    pay.assign(m, 0.0);
    for (size_t i = 0; i < m; ++i) {
        const std::vector<size_t>& ks = ranks[i];
        PySum tails;
        for (size_t j = 0; j < ks.size(); ++j) {
            after[i].push_back((total[n] - total[ks[j] + 1]) - (cum[i][ks.size()] - cum[i][j + 1]));
            tails.add(after[i].back());
        }
        pay[i] = overhead * tails.value();
    }
    if (tree != nullptr) {
        std::vector<First> first;
        if (!first_requests(*tree, q, first)) return false;
        for (size_t v = 0; v < first.size(); ++v) {
            const double e = tree->edge_work[v];
            if (!(e > 0)) continue;
            const auto [a, i, c] = first[v];
            const std::vector<size_t>& ks = ranks[i];
            const size_t hi = size_t(std::lower_bound(ks.begin(), ks.end(), c) - ks.begin());
            const size_t lo = size_t(std::lower_bound(ks.begin(), ks.end(), a + 1) - ks.begin());
            const double own = cum[i][hi] - cum[i][lo];
            pay[i] += e * ((total[c] - total[a + 1]) - own);
        }
        for (size_t r = 0; r < n; ++r) {  // own edges: nobody else reaches them
            const double e = tree->req_work[r];
            if (e > 0) pay[q.who[r]] += e * after[q.who[r]][place[r]];
        }
    }
    return true;
}

nb::object strict_payments(const ScratchTree* tree, nb::handle requests, nb::handle bids, nb::handle order,
                           double overhead) {
    StrictRound q;
    std::vector<double> pay;
    if (!closed_form(tree, requests, bids, order, overhead, q, pay)) return nb::none();
    return nb::make_tuple(nb::cast(q.bidders), nb::cast(pay));
}

// AuctionRound.charges of a strict priority round by the closed form (its payments clipped at 0):
// bidder i, with per_bidder[i] of its requests admitted out of the q_i it queued, is charged
// p_i x per_bidder[i] / q_i x seconds_per_unit, the same floating-point operations in the same
// order; a bidder whose payment is 0 left out. None where the closed form does not take the inputs,
// a payment is negative (`payments` checks it against the round's cost) or a count is not an int.
nb::object strict_charges(const ScratchTree* tree, nb::handle requests, nb::handle bids, nb::handle order,
                          double overhead, nb::handle per_bidder, nb::handle seconds_per_unit) {
    StrictRound q;
    std::vector<double> pay;
    nb::object counts = items_of(per_bidder);
    if (!counts.is_valid() || !PyFloat_CheckExact(seconds_per_unit.ptr()) ||
        !closed_form(tree, requests, bids, order, overhead, q, pay))
        return nb::none();
    const double unit = PyFloat_AS_DOUBLE(seconds_per_unit.ptr());
    std::unordered_map<int64_t, size_t> number;
    for (size_t k = 0; k < q.bidders.size(); ++k) {
        if (pay[k] < 0.0) return nb::none();
        number.emplace(q.bidders[k], k);
    }
    std::vector<size_t> queued(q.bidders.size(), 0);  // q_i, as AuctionRound.charges counts it
    for (size_t r = 0; r < q.n; ++r) ++queued[q.who[r]];
    const Py_ssize_t bidders = PySequence_Fast_GET_SIZE(counts.ptr());
    std::vector<std::pair<int64_t, double>> due;
    for (Py_ssize_t i = 0; i < bidders; ++i) {
        int64_t admitted = 0;
        if (!exact_int(PySequence_Fast_GET_ITEM(counts.ptr(), i), admitted)) return nb::none();
        const auto at = number.find(int64_t(i));
        if (admitted == 0 || at == number.end() || pay[at->second] == 0.0) continue;
        due.emplace_back(int64_t(i), pay[at->second] * double(admitted) / double(queued[at->second]) * unit);
    }
    nb::dict out;
    for (const auto& [i, charge] : due) out[nb::int_(i)] = nb::float_(charge);
    return out;
}

}  // namespace

void bind_strict_priority(nb::module_& m) {
    m.def("plain_requests", &plain_requests, nb::arg("requests"),
          "validate_requests(requests) for a queue its fast path takes as it is, else None.");
    m.def("strict_order", &strict_order, nb::arg("requests"), nb::arg("bids"), nb::arg("cached_first"),
          "Strict priority's (order, rank), or None for inputs it does not take.");
    m.def("strict_bids", &strict_bids, nb::arg("requests"), nb::arg("multipliers").none(), nb::arg("length_of").none(),
          "Strict priority's round inputs: (bids, lens), or None for inputs not plain.");
    m.def("strict_allocation", &strict_allocation, nb::arg("requests"), nb::arg("bids"), nb::arg("lens").none(),
          nb::arg("cache_ties"),
          "Strict priority's allocation: (order, rank, tokens, admission), or None for inputs it does not take.");
    m.def("strict_round", &strict_round, nb::arg("requests"), nb::arg("multipliers").none(),
          nb::arg("length_of").none(), nb::arg("cache_ties"), nb::arg("last").none(),
          "Strict priority's round in one call: True (the last round's inputs), (bids, lens, order, rank, "
          "tokens, admission), or None for inputs it does not take.");
    m.def("strict_charges", &strict_charges, nb::arg("tree").none(), nb::arg("requests"), nb::arg("bids"),
          nb::arg("order"), nb::arg("request_work"), nb::arg("per_bidder"), nb::arg("seconds_per_unit"),
          "Strict priority's charges of a round: {bidder: charge}, or None for inputs it does not take.");
    m.def("strict_payments", &strict_payments, nb::arg("tree").none(), nb::arg("requests"), nb::arg("bids"),
          nb::arg("order"), nb::arg("request_work"),
          "Strict priority's (bidders, payments) before the clip, or None for inputs it does not take.");
}
