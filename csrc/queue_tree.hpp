// The queue's radix tree built from scratch (queue_tree.cpp), which strict priority's payments
// read in place (strict_priority.cpp).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <vector>

namespace auction_core {

// Whether `o` is a numpy array (`ndarray_type`, exactly) whose buffer is non-empty, 1-d and of
// native int64 (TOKEN_DTYPE): a prompt the compiled code reads in place; the Python code takes
// anything else. Where it is, `read(view)` reads the buffer before it is released.
template <typename Read>
bool with_native_tokens(PyTypeObject* ndarray_type, PyObject* o, Read&& read) {
    if (Py_TYPE(o) != ndarray_type) return false;
    Py_buffer view;
    if (PyObject_GetBuffer(o, &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        return false;
    }
    const char* f = view.format;
    const bool native = view.ndim == 1 && view.itemsize == 8 && f != nullptr && f[0] != 0 && f[1] == 0 &&
                        (f[0] == 'l' || f[0] == 'q') && view.shape[0] > 0;
    if (native) read(view);
    PyBuffer_Release(&view);
    return native;
}

// The tree of a queue, its lists as queue_tree.QueueTree's.
struct ScratchTree {
    std::vector<int64_t> parent, depth;
    std::vector<std::vector<int64_t>> children, attached;
    std::vector<double> edge_work;
    std::vector<int64_t> req_node;
    std::vector<double> req_work;

    nanobind::tuple lists() const {
        return nanobind::make_tuple(parent, depth, children, attached, edge_work, req_node, req_work);
    }
    nanobind::object completion_times(nanobind::handle order, double request_work) const;
};

}  // namespace auction_core
