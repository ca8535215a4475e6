// Requests in `request.fcfs_key` order, (arrival, id), read in C++ where Python's comparison of the
// keys is known: Requests of exactly that class whose arrival is a float other than NaN and id an
// int within 64 bits compare as two doubles then two int64s do. Any other request leaves the order
// to Python's own sort, so either way the result is the reference's `sorted(..., key=fcfs_key)`.
#pragma once

#include <nanobind/nanobind.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "request_slots.hpp"
#include "waiting_prefixes.hpp"

namespace radix {

struct ArrivalKey {
    double arrival;
    int64_t id;
    bool operator<(const ArrivalKey &o) const { return arrival < o.arrival || (arrival == o.arrival && id < o.id); }
};

// `r`'s fcfs_key into `out` where it is read in C++ (above), its fields read at their slots;
// false, with no Python error set, otherwise.
inline bool plain_arrival_key(PyObject *r, ArrivalKey &out) {
    const request_slots::Fields &f = request_slots::fields();
    if (f.type == nullptr || Py_TYPE(r) != f.type) return false;
    PyObject *arrival = request_slots::at_offset(r, f.arrival);
    if (arrival == nullptr || !PyFloat_CheckExact(arrival) || std::isnan(PyFloat_AS_DOUBLE(arrival)) ||
        !request_slots::plain_int(request_slots::at_offset(r, f.id), out.id))
        return false;
    out.arrival = PyFloat_AS_DOUBLE(arrival);
    return true;
}

// `requests` (any iterable) as a list in fcfs_key order, stably sorted as Python's sort is; `ids`
// gets their ids in that order where they were read here, and is left empty where Python sorted.
inline nb::list by_arrival(nb::handle requests, std::vector<int64_t> &ids) {
    nb::list items = nb::steal<nb::list>(PySequence_List(requests.ptr()));
    if (!items) throw nb::python_error();
    const Py_ssize_t n = PyList_GET_SIZE(items.ptr());
    std::vector<std::pair<ArrivalKey, Py_ssize_t>> keyed(std::size_t(n), {{0, 0}, 0});
    bool sorted = true;
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (!plain_arrival_key(PyList_GET_ITEM(items.ptr(), i), keyed[i].first)) {
            ids.clear();
            return nb::borrow<nb::list>(sorted_by_arrival(items));
        }
        keyed[i].second = i;
        sorted = sorted && (i == 0 || !(keyed[i].first < keyed[i - 1].first));
    }
    if (!sorted)
        std::stable_sort(keyed.begin(), keyed.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    ids.resize(std::size_t(n));
    nb::list out = sorted ? items : nb::list();
    for (Py_ssize_t i = 0; i < n; ++i) {
        ids[std::size_t(i)] = keyed[i].first.id;
        if (!sorted) out.append(nb::handle(PyList_GET_ITEM(items.ptr(), keyed[i].second)));
    }
    return out;
}

}  // namespace radix
