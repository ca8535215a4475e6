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

// `items` (a list of plain requests, their keys read into `ids` already) stably sorted by fcfs_key into a
// new list, and `ids` with them.
inline nb::list sort_by_arrival(const nb::list &items, std::vector<int64_t> &ids) {
    const Py_ssize_t n = PyList_GET_SIZE(items.ptr());
    std::vector<std::pair<ArrivalKey, Py_ssize_t>> keyed(std::size_t(n), {{0, 0}, 0});
    for (Py_ssize_t i = 0; i < n; ++i) {
        plain_arrival_key(PyList_GET_ITEM(items.ptr(), i), keyed[i].first);
        keyed[i].second = i;
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
    nb::list out;
    for (Py_ssize_t i = 0; i < n; ++i) {
        ids[std::size_t(i)] = keyed[i].first.id;
        out.append(nb::handle(PyList_GET_ITEM(items.ptr(), keyed[i].second)));
    }
    return out;
}

// `requests` (any iterable) as a list in fcfs_key order, stably sorted as Python's sort is; `ids`
// gets their ids in that order where they were read here, and is left empty where Python sorted.
// Requests usually come in order already: then the list is made and its keys read, no more.
inline nb::list by_arrival(nb::handle requests, std::vector<int64_t> &ids) {
    nb::list items = nb::steal<nb::list>(PySequence_List(requests.ptr()));
    if (!items) throw nb::python_error();
    const Py_ssize_t n = PyList_GET_SIZE(items.ptr());
    ids.resize(std::size_t(n));
    ArrivalKey key{0, 0}, last{0, 0};
    bool sorted = true;
    for (Py_ssize_t i = 0; i < n; ++i) {
        if (!plain_arrival_key(PyList_GET_ITEM(items.ptr(), i), key)) {
            ids.clear();
            return nb::borrow<nb::list>(sorted_by_arrival(items));
        }
        ids[std::size_t(i)] = key.id;
        sorted = sorted && (i == 0 || !(key < last));
        last = key;
    }
    return sorted ? items : sort_by_arrival(items, ids);
}

}  // namespace radix
