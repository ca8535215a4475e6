// The longest-prefix orders of a round in C++ (docs/design.md section 8): LPM's (scheduler/lpm.py,
// a stable sort of the queue by cached length, longest first) and k-LPM's (scheduler/klpm.py,
// KLPM.order_round's cycle: the queue by arrival, its longest-prefix picks by the same stable sort,
// one oldest pick then k - 1 longest picks). None, having changed nothing, for an input it does not
// take as it is; the Python code then runs.
#include <nanobind/nanobind.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

#include "arrival_order.hpp"
#include "bindings.hpp"
#include "request_slots.hpp"

namespace nb = nanobind;

namespace {

bool exact_int(PyObject* o, int64_t& out) {
    if (o == nullptr || !PyLong_CheckExact(o)) return false;
    int overflow = 0;
    out = int64_t(PyLong_AsLongLongAndOverflow(o, &overflow));
    return overflow == 0;
}

// The queue's requests by arrival as `sorted(queue, key=fcfs_key)` orders them (stable;
// `radix::plain_arrival_key`, arrival_order.hpp), with each one's match length, match[r.id][0] of
// the matcher's dict; false where a request's key is not read in C++ or its length is not an exact
// int (or not there: Python raises).
bool by_arrival(PyObject* const* queue, size_t n, PyObject* match, std::vector<PyObject*>& ordered,
                std::vector<int64_t>& length) {
    std::vector<std::pair<radix::ArrivalKey, size_t>> keyed(n);
    std::vector<int64_t> matched(n);
    for (size_t i = 0; i < n; ++i) {
        PyObject* r = queue[i];
        if (!radix::plain_arrival_key(r, keyed[i].first)) return false;
        keyed[i].second = i;
        PyObject* rid = request_slots::at_offset(r, request_slots::fields().id);
        PyObject* entry = PyDict_GetItemWithError(match, rid);  // borrowed
        if (entry == nullptr || !PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) < 1 ||
            !exact_int(PyTuple_GET_ITEM(entry, 0), matched[i])) {
            PyErr_Clear();
            return false;
        }
    }
    // The engine's queue is in joining order, mostly arrival order already: a pass, before a sort.
    auto earlier = [](const auto& a, const auto& b) { return a.first < b.first; };
    if (!std::is_sorted(keyed.begin(), keyed.end(), earlier)) std::stable_sort(keyed.begin(), keyed.end(), earlier);
    ordered.resize(n);
    length.resize(n);
    for (size_t k = 0; k < n; ++k) {
        ordered[k] = queue[keyed[k].second];
        length[k] = matched[keyed[k].second];
    }
    return true;
}

// The positions of `length` sorted by -length, stable: ties keep their order. A queue LPM sorted
// in place last round mostly is already (`is_sorted`, a pass, before a sort).
std::vector<size_t> longest_first(const std::vector<int64_t>& length) {
    std::vector<size_t> by_match(length.size());
    std::iota(by_match.begin(), by_match.end(), size_t(0));
    if (!std::is_sorted(length.begin(), length.end(), std::greater<int64_t>()))
        std::stable_sort(by_match.begin(), by_match.end(), [&](size_t a, size_t b) { return length[a] > length[b]; });
    return by_match;
}

// `items` in the order of the positions `order`, as a new list.
nb::list in_order(PyObject* const* items, const std::vector<size_t>& order) {
    nb::list out = nb::steal<nb::list>(PyList_New(Py_ssize_t(order.size())));
    if (!out.is_valid()) throw nb::python_error();
    for (size_t k = 0; k < order.size(); ++k) PyList_SET_ITEM(out.ptr(), Py_ssize_t(k), Py_NewRef(items[order[k]]));
    return out;
}

// LPM.order_round's order of `queue` given the engine's `length_of` (request -> cached length).
nb::object lpm_order(nb::handle queue, nb::handle length_of) {
    if (!PyList_CheckExact(queue.ptr()) || !PyDict_CheckExact(length_of.ptr())) return nb::none();
    const size_t n = size_t(PyList_GET_SIZE(queue.ptr()));
    PyObject* const* items = PySequence_Fast_ITEMS(queue.ptr());
    std::vector<int64_t> length(n);
    for (size_t i = 0; i < n; ++i) {
        PyObject* v = PyDict_GetItemWithError(length_of.ptr(), items[i]);  // borrowed
        if (v == nullptr || !exact_int(v, length[i])) {
            PyErr_Clear();
            return nb::none();
        }
    }
    return in_order(items, longest_first(length));
}

// KLPM.order_round's order of `queue` (a list; its FCFS order made here) given the matcher's
// `match` (request id -> (length, node)), the cycle's `phase` and `k`.
nb::object klpm_order(nb::handle queue_in, nb::handle match, nb::handle phase_in, nb::handle k_in) {
    int64_t phase = 0, k = 0;
    if (!PyList_CheckExact(queue_in.ptr()) || !PyDict_CheckExact(match.ptr()) || !exact_int(phase_in.ptr(), phase) ||
        !exact_int(k_in.ptr(), k) || k < 1 || phase < 0 || phase >= k)
        return nb::none();
    // The queue as a tuple of this call's own: no request it orders is freed meanwhile.
    nb::object held = nb::steal(PyList_AsTuple(queue_in.ptr()));
    if (!held.is_valid()) throw nb::python_error();
    const size_t n = size_t(PyTuple_GET_SIZE(held.ptr()));
    std::vector<PyObject*> queue;
    std::vector<int64_t> length;
    if (!by_arrival(PySequence_Fast_ITEMS(held.ptr()), n, match.ptr(), queue, length)) return nb::none();
    const std::vector<size_t> by_match = longest_first(length);  // ties by arrival
    nb::list out = nb::steal<nb::list>(PyList_New(Py_ssize_t(n)));
    if (!out.is_valid()) throw nb::python_error();
    std::vector<char> taken(n, 0);
    size_t oldest = 0, longest = 0;
    for (size_t step = 0; step < n; ++step) {
        size_t pick;
        if (phase == 0) {
            while (taken[oldest]) ++oldest;
            pick = oldest;
        } else {
            while (taken[by_match[longest]]) ++longest;
            pick = by_match[longest];
        }
        PyList_SET_ITEM(out.ptr(), Py_ssize_t(step), Py_NewRef(queue[pick]));
        taken[pick] = 1;
        phase = (phase + 1) % k;
    }
    return out;
}

}  // namespace

void bind_lpm_orders(nb::module_& m) {
    m.def("lpm_order", &lpm_order, nb::arg("queue"), nb::arg("length_of"),
          "LPM.order_round's order of the queue, or None for inputs it does not take.");
    m.def("klpm_order", &klpm_order, nb::arg("queue"), nb::arg("match"), nb::arg("phase"), nb::arg("k"),
          "KLPM.order_round's order of the queue, or None for inputs it does not take.");
}
