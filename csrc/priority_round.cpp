// SGLang's priority order and qos_lpm's over a round's queue in one call (scheduler/priority.py's
// `SGLangPriority._levels` and the stable sorts of `decide_round`), for plain inputs: each level
// round(levels_per_decade x log10(bid)), the same libm log10 and the same round half to even.
#include <nanobind/nanobind.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "bindings.hpp"
#include "request_slots.hpp"

namespace nb = nanobind;

namespace {

using namespace request_slots;

// Each request's bid of `queue` (a tuple) as policy.round_bids makes it, where the requests and the multipliers are
// plain (exact floats, multipliers finite and >= 0, int bidders in range); false otherwise.
bool queue_bids(nb::handle queue, nb::handle multipliers, std::vector<double>& bids) {
    const Fields& f = fields();
    std::vector<double> alpha;
    const bool market = !multipliers.is_none();
    if (f.type == nullptr || (market && !plain_floats(multipliers, alpha))) return false;
    for (double a : alpha)
        if (!(0.0 <= a && a < std::numeric_limits<double>::infinity())) return false;  // round_bids refuses it
    const Py_ssize_t n = PyTuple_GET_SIZE(queue.ptr());
    bids.resize(size_t(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* r = PyTuple_GET_ITEM(queue.ptr(), i);
        if (Py_TYPE(r) != f.type) return false;
        PyObject* weight = at_offset(r, market ? f.urgency : f.bid);
        if (weight == nullptr || !PyFloat_CheckExact(weight)) return false;
        double bid = PyFloat_AS_DOUBLE(weight);
        if (market) {
            int64_t b;
            if (!plain_int(at_offset(r, f.bidder), b) || b < 0 || size_t(b) >= alpha.size()) return false;
            bid = alpha[size_t(b)] * bid;
        }
        bids[size_t(i)] = bid;
    }
    return true;
}

// (order, levels) of SGLangPriority's round (`lens` None) or QoSLPM's (`lens` the cached prefix
// lengths), or None, nothing raised, for inputs that are not plain (a bid whose level overflows,
// or a negative bid, among them), which the Python code decides or refuses.
nb::object priority_round(nb::handle requests, nb::handle multipliers, nb::handle max_priority, nb::handle lens,
                          int64_t levels_per_decade, int64_t lowest) {
    if (!PyList_CheckExact(requests.ptr())) return nb::none();
    // The queue as a tuple of this call's own: an allocation may run the garbage collector's code.
    nb::object queue = nb::steal(PyList_AsTuple(requests.ptr()));
    if (!queue.is_valid()) throw nb::python_error();
    std::vector<double> bids;
    if (!queue_bids(queue, multipliers, bids)) return nb::none();
    const size_t n = bids.size();
    int64_t top = 0;
    if (!max_priority.is_none() && !plain_int(max_priority.ptr(), top)) return nb::none();
    std::vector<int64_t> level(n), cached;
    if (!lens.is_none()) {
        if (!PyList_CheckExact(lens.ptr()) || size_t(PyList_GET_SIZE(lens.ptr())) != n) return nb::none();
        cached.resize(n);
        for (size_t i = 0; i < n; ++i)
            if (!plain_int(PyList_GET_ITEM(lens.ptr(), Py_ssize_t(i)), cached[i])) return nb::none();
    }
    for (size_t i = 0; i < n; ++i) {
        if (bids[i] <= 0) {
            if (bids[i] < 0) return nb::none();  // priority_level refuses it: Python names the request
            level[i] = lowest;
        } else {
            const double scaled = double(levels_per_decade) * std::log10(bids[i]);
            if (!std::isfinite(scaled)) return nb::none();  // round() raises OverflowError
            const int64_t rounded = int64_t(std::nearbyint(scaled));  // half to even, as round() does
            level[i] = rounded > lowest ? rounded : lowest;
        }
        if (!max_priority.is_none() && !(level[i] < top)) level[i] = top;
    }
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    if (cached.empty()) {
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return level[a] > level[b]; });
    } else {
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return level[a] != level[b] ? level[a] > level[b] : cached[a] > cached[b];
        });
    }
    nb::list ordered = nb::steal<nb::list>(PyList_New(Py_ssize_t(n))), levels = nb::steal<nb::list>(PyList_New(Py_ssize_t(n)));
    if (!ordered.is_valid() || !levels.is_valid()) throw nb::python_error();
    for (size_t i = 0; i < n; ++i) {
        PyObject* r = PyTuple_GET_ITEM(queue.ptr(), Py_ssize_t(order[i]));
        Py_INCREF(r);
        PyList_SET_ITEM(ordered.ptr(), Py_ssize_t(i), r);
        PyObject* l = PyLong_FromLongLong(level[i]);
        if (l == nullptr) throw nb::python_error();
        PyList_SET_ITEM(levels.ptr(), Py_ssize_t(i), l);
    }
    return nb::make_tuple(ordered, levels);
}

}  // namespace

void bind_priority_round(nb::module_& m) {
    m.def("priority_round", &priority_round, nb::arg("queue"), nb::arg("multipliers").none(),
          nb::arg("max_priority").none(), nb::arg("lens").none(), nb::arg("levels_per_decade"), nb::arg("lowest"),
          "SGLangPriority's round (lens None) or QoSLPM's: (order, levels), or None for inputs not plain.");
}
