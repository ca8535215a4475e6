// What the garbage collector sees of a compiled object that holds Python objects: a type `T` with
// `for_each_object(f)` (each object it holds) and `release()` (let go of those that may hold it
// back, as a Python object's tp_clear does) gets tp_traverse and tp_clear from `gc_slots<T>`.
#pragma once

#include <nanobind/nanobind.h>

template <class T> int gc_traverse(PyObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    if (!nanobind::inst_ready(self)) return 0;
    int out = 0;
    nanobind::inst_ptr<T>(self)->for_each_object([&](nanobind::handle o) {
        if (!out && o.ptr()) out = visit(o.ptr(), arg);
    });
    return out;
}

template <class T> int gc_clear(PyObject *self) {
    if (!nanobind::inst_ready(self)) return 0;  // not constructed: nothing held
    nanobind::inst_ptr<T>(self)->release();
    return 0;
}

template <class T> PyType_Slot gc_slots[] = {{Py_tp_traverse, reinterpret_cast<void *>(gc_traverse<T>)},
                                             {Py_tp_clear, reinterpret_cast<void *>(gc_clear<T>)},
                                             {0, nullptr}};
