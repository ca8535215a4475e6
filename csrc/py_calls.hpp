// Python attribute names, method calls and token arrays as the compiled core's hot loops read
// them: a name made from a C string at each lookup is a fresh string to hash and compare, a method
// called through `attr` a bound method made and dropped, and a nanobind ndarray cast allocates.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>

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

// A 1-D array of native int64 as `int64_view` reads it: its data (alive as long as the array), its
// length, its stride in bytes and whether it is writeable.
struct Int64View {
    const int64_t *data = nullptr;
    Py_ssize_t n = 0, stride = 0;
    bool writeable = false;
};

// `array` where it is a 1-D array of native int64 (a numpy token array, as requests hold them),
// read without a DLPack export: in place through its leading fields where it is an exact ndarray of
// numpy's own int64 dtype (every array numpy makes of int64), its stride as the buffer protocol
// reports it (8 where it holds at most one token, whatever its stride; docs/engine.md section 8);
// else through the buffer protocol. False, nothing raised, for any other object.
inline bool int64_view(nb::handle array, Int64View &out) {
    static PyObject *int64 = numpy_attr("int64", true);
    if (const ArrayHead *head = ndarray_head(array.ptr()); head && head->descr == int64) {
        if (head->nd != 1) return false;
        const Py_ssize_t n = head->dimensions[0];
        out = Int64View{reinterpret_cast<const int64_t *>(head->data), n,
                        n > 1 ? head->strides[0] : Py_ssize_t(sizeof(int64_t)), (head->flags & ARRAY_WRITEABLE) != 0};
        return true;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(array.ptr(), &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        return false;
    }
    const char *f = view.format;
    const bool native = view.ndim == 1 && view.itemsize == 8 && f != nullptr && f[0] != 0 && f[1] == 0 &&
                        (f[0] == 'l' || f[0] == 'q');
    if (native) out = Int64View{static_cast<const int64_t *>(view.buf), view.shape[0], view.strides[0], !view.readonly};
    PyBuffer_Release(&view);
    return native;
}

// The data of `array` where `int64_view` reads it and it is contiguous; null for any other, which
// the caller's nanobind cast reads (a subset of what that cast takes, read at the same address);
// `size`, where given, is set to its length. The data lives as long as `array`.
inline const int64_t *int64_buffer(nb::handle array, int64_t *size = nullptr) {
    Int64View v;
    if (!int64_view(array, v) || (v.n > 1 && v.stride != Py_ssize_t(sizeof(int64_t)))) return nullptr;
    if (size) *size = int64_t(v.n);
    return v.data;
}

}  // namespace pycall
