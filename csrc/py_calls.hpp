// Python attribute names, method calls and token arrays as the compiled core's hot loops read
// them: a name made from a C string at each lookup is a fresh string to hash and compare, a method
// called through `attr` a bound method made and dropped, and a nanobind ndarray cast allocates.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <cstring>

namespace pycall {

namespace nb = nanobind;

// `s` as an interned Python string, which attribute lookups compare by identity.
inline nb::str interned(const char *s) { return nb::steal<nb::str>(PyUnicode_InternFromString(s)); }

// `self.name(arg)`, without a bound method made for the call.
inline nb::object call_method(nb::handle self, nb::handle name, nb::handle arg) {
    PyObject *args[2] = {self.ptr(), arg.ptr()};
    PyObject *out = PyObject_VectorcallMethod(name.ptr(), args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
    if (!out) throw nb::python_error();
    return nb::steal(out);
}

// The leading fields of a numpy array (numpy's `PyArrayObject_fields`): compiled extensions read
// them in place through numpy's own accessors (PyArray_DATA, PyArray_NDIM, PyArray_FLAGS, ...), so
// numpy keeps their layout from release to release. Read here, for an exact `numpy.ndarray`, where
// the buffer protocol or an attribute lookup would cost several times the read itself.
struct ArrayHead {
    PyObject_HEAD
    char *data;
    int nd;
    Py_ssize_t *dimensions, *strides;
    PyObject *base, *descr;
    int flags;
};

// ArrayHead's `flags` bit of a writeable array (NPY_ARRAY_WRITEABLE, numpy's ndarraytypes.h, part
// of its ABI).
constexpr int ARRAY_WRITEABLE = 0x0400;

// numpy's attribute `name` (its `ndarray`, `empty`, ...), or its dtype of that name where `dtype`;
// never freed: they may outlive the interpreter's teardown of numpy.
inline PyObject *numpy_attr(const char *name, bool dtype = false) {
    nb::module_ numpy = nb::module_::import_("numpy");
    return (dtype ? numpy.attr("dtype")(name) : numpy.attr(name)).release().ptr();
}

// `obj` as an exact `numpy.ndarray` (not a subclass, which may redefine what is read), else null.
inline const ArrayHead *ndarray_head(PyObject *obj) {
    static PyObject *ndarray = numpy_attr("ndarray");
    return Py_TYPE(obj) == reinterpret_cast<PyTypeObject *>(ndarray) ? reinterpret_cast<const ArrayHead *>(obj)
                                                                      : nullptr;
}

// Whether the caller may change `array` (numpy's `flags.writeable`, which is NPY_ARRAY_WRITEABLE
// of its flags for an exact ndarray, read there in place; else read by interned names): a
// structure that keeps a view of a prompt asks it of every array it is given.
inline bool writeable(nb::handle array) {
    if (const ArrayHead *head = ndarray_head(array.ptr())) return (head->flags & ARRAY_WRITEABLE) != 0;
    static const nb::str *flags = new nb::str(interned("flags"));  // never freed, as the core's
    static const nb::str *name = new nb::str(interned("writeable"));  // other interned names
    return nb::cast<bool>(array.attr(*flags).attr(*name));
}

// The data of `array` where it is a 1-D contiguous buffer of native int64 (a numpy token array, as
// requests hold them): read in place where it is an exact ndarray of numpy's own int64 dtype (every
// array numpy makes of int64), else through the buffer protocol; null for any other, which the
// caller's nanobind cast reads (a subset of what that cast takes, read at the same address);
// `size`, where given, is set to its length. The data lives as long as `array`.
inline const int64_t *int64_buffer(nb::handle array, int64_t *size = nullptr) {
    static PyObject *int64 = numpy_attr("int64", true);
    if (const ArrayHead *head = ndarray_head(array.ptr()); head && head->descr == int64 && head->nd == 1) {
        if (head->dimensions[0] > 1 && head->strides[0] != 8) return nullptr;
        if (size) *size = int64_t(head->dimensions[0]);
        return reinterpret_cast<const int64_t *>(head->data);
    }
    Py_buffer view;
    if (PyObject_GetBuffer(array.ptr(), &view, PyBUF_STRIDES | PyBUF_FORMAT) != 0) {
        PyErr_Clear();
        return nullptr;
    }
    bool native = view.format && (std::strcmp(view.format, "l") == 0 || std::strcmp(view.format, "q") == 0);
    bool fits = native && view.ndim == 1 && view.itemsize == 8 && (view.shape[0] <= 1 || view.strides[0] == 8);
    const int64_t *data = fits ? static_cast<const int64_t *>(view.buf) : nullptr;
    if (fits && size) *size = int64_t(view.shape[0]);
    PyBuffer_Release(&view);
    return data;
}

}  // namespace pycall
