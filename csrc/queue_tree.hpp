// The queue's radix tree built from scratch (queue_tree.cpp), which strict priority's payments
// read in place (strict_priority.cpp).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <vector>

namespace auction_core {

// Whether a buffer is a non-empty 1-d array of native int64 (TOKEN_DTYPE): a prompt the compiled
// builders read in place; the Python code takes anything else.
inline bool native_tokens(const Py_buffer& view) {
    const char* f = view.format;
    return view.ndim == 1 && view.itemsize == 8 && f != nullptr && f[0] != 0 && f[1] == 0 &&
           (f[0] == 'l' || f[0] == 'q') && view.shape[0] > 0;
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
