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

#include "py_calls.hpp"
#include "waiting_prefixes.hpp"

namespace radix {

struct ArrivalKey {
    double arrival;
    int64_t id;
    bool operator<(const ArrivalKey &o) const { return arrival < o.arrival || (arrival == o.arrival && id < o.id); }
};

// `r`'s fcfs_key into `out` where it is read in C++ (above); false, with no Python error set, otherwise.
inline bool plain_arrival_key(PyObject *r, ArrivalKey &out) {
    // Never freed, as the cache's Python objects.
    static PyObject *const request = nb::object(nb::module_::import_("auction_gym.request").attr("Request")).release().ptr();
    static PyObject *const arrival = pycall::interned("arrival").release().ptr();
    if (Py_TYPE(r) != reinterpret_cast<PyTypeObject *>(request)) return false;
    nb::object a = nb::steal(PyObject_GetAttr(r, arrival)), rid = nb::steal(PyObject_GetAttr(r, id_name().ptr()));
    if (!a || !rid || !PyFloat_CheckExact(a.ptr()) || !PyLong_CheckExact(rid.ptr())) {
        PyErr_Clear();
        return false;
    }
    int overflow = 0;
    out.arrival = PyFloat_AS_DOUBLE(a.ptr());
    out.id = PyLong_AsLongLongAndOverflow(rid.ptr(), &overflow);
    return !overflow && !std::isnan(out.arrival);
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
