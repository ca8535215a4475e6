// What the market's and the pacers' compiled code (market_books.cpp, market_round.cpp,
// market_pacers.cpp) reads from Python objects, as the Python code reads it, and the arrays it
// makes: a value Python would treat otherwise (not an exact float or int, a bidder out of range)
// throws `Unsupported`, and the caller declines the input.
#pragma once

#include <nanobind/nanobind.h>

#include <structmember.h>
#if PY_VERSION_HEX < 0x030B0000
#include <longintrepr.h>  // PyLongObject's digits, which Python.h includes from 3.11
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "address_table.hpp"
#include "py_calls.hpp"

namespace market_fields {

namespace nb = nanobind;

// What the Python code would compute differently, or raise on: the caller answers None.
struct Unsupported {};

// A Python float or int as the double Python's arithmetic would use.
inline double as_double(PyObject *value) {
    if (PyFloat_CheckExact(value)) return PyFloat_AS_DOUBLE(value);
    if (!PyLong_CheckExact(value)) throw Unsupported{};
    double x = PyLong_AsDouble(value);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        throw Unsupported{};
    }
    return x;
}

// A Python float's double: where the Python code subtracts or multiplies ints, it does so exactly.
inline double as_float(PyObject *value) {
    if (!PyFloat_CheckExact(value)) throw Unsupported{};
    return PyFloat_AS_DOUBLE(value);
}

inline int64_t as_int(PyObject *value) {
    if (!PyLong_CheckExact(value)) throw Unsupported{};
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact(reinterpret_cast<PyLongObject *>(value)))
        return PyUnstable_Long_CompactValue(reinterpret_cast<PyLongObject *>(value));
#else
    // An int of at most one digit (a bidder, an id), read as CPython's own compact-int path reads it.
    Py_ssize_t digits = Py_SIZE(value);
    if (digits == 0) return 0;
    if (digits == 1 || digits == -1)
        return digits * static_cast<int64_t>(reinterpret_cast<PyLongObject *>(value)->ob_digit[0]);
#endif
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        throw Unsupported{};
    }
    return x;
}

// Whether `type` is as it was when its version tag was `version` (0: never tagged, so unknown).
inline bool unchanged(PyTypeObject *type, unsigned int version) {
#ifdef Py_TPFLAGS_VALID_VERSION_TAG
    if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) return false;
#endif
    return version != 0 && type->tp_version_tag == version;
}

// One attribute of the objects read at one place (the requests' `urgency`, the records' `finish`),
// read as CPython's specialized interpreter reads a __slots__ field: at its offset in the object,
// once the object's type is seen to hold it as a slot, and while that type is unchanged (its
// version tag). Anything else goes through getattr, which would cost several times the loop's work.
class Field {
public:
    explicit Field(const char *name) : name_(PyUnicode_InternFromString(name)) {
        if (!name_) throw nb::python_error();
    }
    Field(const Field &) = delete;
    Field &operator=(const Field &) = delete;
    ~Field() { Py_DECREF(name_); }

    double as_double_of(PyObject *obj) { return read(obj, as_double); }
    int64_t as_int_of(PyObject *obj) { return read(obj, as_int); }
    double as_float_of(PyObject *obj) { return read(obj, as_float); }
    // Whether the last read was in place (a slot), not through getattr, which may run Python code.
    bool in_place() const { return offset_ >= 0; }
    bool is_none_of(PyObject *obj) {
        return read(obj, [](PyObject *value) { return value == Py_None; });
    }
    // The object `obj`'s slot holds (borrowed), where its type holds the field as a slot; null
    // where it does not, or where the slot is unset.
    PyObject *slot_of(PyObject *obj) {
        Py_ssize_t offset = offset_in(Py_TYPE(obj));
        return offset >= 0 ? *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(obj) + offset) : nullptr;
    }
    // The offset of the slot in which `type` holds the field, or -1 where it does not (getattr).
    Py_ssize_t offset_in(PyTypeObject *type) {
        if (type != type_ || !unchanged(type_, version_)) learn(type);
        return offset_;
    }

private:
    template <class Convert>
    auto read(PyObject *obj, Convert convert) -> decltype(convert(obj)) {
        if (PyObject *value = slot_of(obj)) return convert(value);
        if (in_place()) throw Unsupported{};  // an unset slot: Python raises AttributeError
        nb::object value = nb::steal(PyObject_GetAttr(obj, name_));
        if (!value.is_valid()) {  // Python's code raises its own error
            PyErr_Clear();
            throw Unsupported{};
        }
        return convert(value.ptr());
    }

    // Where `type` keeps the field: the offset of its slot, else -1 (getattr).
    void learn(PyTypeObject *type) {
        type_ = type;
        offset_ = -1;
        nb::object descr = nb::steal(PyObject_GetAttr(reinterpret_cast<PyObject *>(type), name_));
        version_ = type->tp_version_tag;  // tagged by that lookup, where the type can be
        if (!descr.is_valid()) {
            PyErr_Clear();
            return;
        }
        if (Py_IS_TYPE(descr.ptr(), &PyMemberDescr_Type) && type->tp_getattro == PyObject_GenericGetAttr) {
            auto *member = reinterpret_cast<PyMemberDescrObject *>(descr.ptr());
            if (member->d_member->type == T_OBJECT_EX && PyType_IsSubtype(type, PyDescr_TYPE(member)))
                offset_ = member->d_member->offset;
        }
    }

    PyObject *name_;
    PyTypeObject *type_ = nullptr;
    unsigned int version_ = 0;
    Py_ssize_t offset_ = -1;
};

// Fields of the objects read at one place (a held request's id, bidder and urgency) read together
// where the object's type holds them all as slots: at their offsets, the type checked once for all
// of them, as `Field` checks it for one.
template <size_t N>
class SlotGroup {
public:
    explicit SlotGroup(std::array<Field *, N> fields) : fields_(fields) {}

    // `obj`'s slots of the fields (borrowed; null where unset) into `values`; false where its type
    // does not hold them all as slots.
    bool read(PyObject *obj, PyObject *(&values)[N]) {
        PyTypeObject *type = Py_TYPE(obj);
        if (type != type_ || !unchanged(type_, version_)) learn(type);
        if (!in_place_) return false;
        for (size_t i = 0; i < N; ++i)
            values[i] = *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(obj) + offsets_[i]);
        return true;
    }

private:
    void learn(PyTypeObject *type) {
        type_ = type;
        in_place_ = true;
        for (size_t i = 0; i < N; ++i) {
            offsets_[i] = fields_[i]->offset_in(type);
            in_place_ = in_place_ && offsets_[i] >= 0;
        }
        version_ = type->tp_version_tag;  // tagged by the fields' lookups, where the type can be
    }

    std::array<Field *, N> fields_;
    PyTypeObject *type_ = nullptr;
    unsigned int version_ = 0;
    bool in_place_ = false;
    Py_ssize_t offsets_[N] = {};
};

inline size_t index_of(int64_t bidder, size_t n) {
    if (bidder < 0 || static_cast<uint64_t>(bidder) >= n) throw Unsupported{};  // Python would wrap or raise
    return static_cast<size_t>(bidder);
}

using pycall::ArrayHead;
using pycall::ndarray_head;
using pycall::numpy_attr;
using pycall::AddressTable;

// The `n` numbers of a list as Python's arithmetic reads them, or of a float64 numpy array as its
// `tolist()` gives them, into `out` (whose capacity the caller keeps from call to call): in place
// where the array's dtype is numpy's own float64 (every array numpy makes of floats), else through
// the buffer protocol.
inline void doubles(nb::handle values, size_t n, std::vector<double> &out) {
    static PyObject *float64 = numpy_attr("float64", true);
    out.resize(n);
    PyObject *obj = values.ptr();
    if (PyList_CheckExact(obj)) {
        if (static_cast<size_t>(PyList_GET_SIZE(obj)) != n) throw Unsupported{};
        for (size_t i = 0; i < n; ++i) out[i] = as_double(PyList_GET_ITEM(obj, static_cast<Py_ssize_t>(i)));
        return;
    }
    const ArrayHead *array = ndarray_head(obj);
    if (!array) throw Unsupported{};
    if (array->descr == float64 && array->nd == 1) {
        if (static_cast<size_t>(array->dimensions[0]) != n) throw Unsupported{};
        for (size_t i = 0; i < n; ++i)
            std::memcpy(&out[i], array->data + static_cast<Py_ssize_t>(i) * array->strides[0], 8);
        return;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_FORMAT | PyBUF_STRIDES) != 0) {
        PyErr_Clear();
        throw Unsupported{};
    }
    bool float64_view = view.ndim == 1 && static_cast<size_t>(view.shape[0]) == n && view.itemsize == 8 &&
                        view.format &&
                        (std::string_view(view.format) == "d" || std::string_view(view.format) == "<d" ||
                         std::string_view(view.format) == "=d");
    if (float64_view) {
        const char *data = static_cast<const char *>(view.buf);
        for (size_t i = 0; i < n; ++i) std::memcpy(&out[i], data + static_cast<Py_ssize_t>(i) * view.strides[0], 8);
    }
    PyBuffer_Release(&view);
    if (!float64_view) throw Unsupported{};
}

// A new numpy array of `shape` and `dtype` (a numpy dtype, or None: float64) holding `values`
// (of the dtype's C type), made by numpy.empty as numpy.array makes one of a list: its own data,
// C-contiguous and writeable, written in place. A few times cheaper than an array handed over
// through nanobind.
template <class T>
nb::object array_of(const std::vector<T> &values, nb::handle shape, nb::handle dtype = nb::none()) {
    static PyObject *empty = numpy_attr("empty");
    PyObject *args[2] = {shape.ptr(), dtype.ptr()};
    nb::object out = nb::steal(PyObject_Vectorcall(empty, args, 2, nullptr));
    if (!out.is_valid()) throw nb::python_error();
    const ArrayHead *array = reinterpret_cast<const ArrayHead *>(out.ptr());
    Py_ssize_t size = 1;
    for (int d = 0; d < array->nd; ++d) size *= array->dimensions[d];
    if (static_cast<size_t>(size) != values.size())
        throw nb::value_error("array_of: the array's size is not the values'");
    std::copy(values.begin(), values.end(), reinterpret_cast<T *>(array->data));
    return out;
}

inline nb::object array_of(const std::vector<double> &values) {
    return array_of(values, nb::int_(static_cast<Py_ssize_t>(values.size())));
}

}  // namespace market_fields
