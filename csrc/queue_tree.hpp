// The queue's radix tree built from scratch (queue_tree.cpp), its prompts' order kept from round
// to round where the caller keeps a PromptMemo (queue_tree_memo.cpp); strict priority's payments
// read the tree in place (strict_priority.cpp).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <unordered_map>
#include <utility>
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

// A prompt's tokens: a view of a contiguous array, or a copy of a strided one; `readonly` as its
// buffer says, which is what a memo may keep.
struct Prompt {
    const int64_t* ptr = nullptr;
    size_t n = 0;
    std::vector<int64_t> copy;
    bool readonly = false;
};

// The tokens of `o` when it is a non-empty 1-d numpy array of native int64 (what
// validate_requests returns); false for anything else, which the Python builder takes. The
// array's buffer is released at once: the caller's sequence holds the array, and no Python code
// runs while the tree is built.
bool read_prompt(PyTypeObject* ndarray_type, PyObject* o, Prompt& out);

// The first token at or after `from` where two prompts differ (or the shorter one's end).
size_t mismatch(const Prompt& a, const Prompt& b, size_t from);

// Whether `a` comes no later than `b` in Python's bytes order of their buffers, given that they
// agree on their first `from` tokens; and their common prefix.
std::pair<bool, size_t> bytes_order(const Prompt& a, const Prompt& b, size_t from);

// A stable sort of the prompts `idx[lo, hi)` by their bytes, with each one's common prefix with the
// one before it (`lcp`, 0 for the first); `tmp_*` are scratch of the same size.
void lcp_sort(const std::vector<Prompt>& p, size_t* idx, size_t* lcp, size_t lo, size_t hi, size_t* tmp_idx,
              size_t* tmp_lcp);

// queue_tree.TokenMemo in C++: the prompts' sorted order and each one's common prefix with its
// sorted successor, kept from one round to the next for read-only arrays (held, so their ids stay
// theirs). `sort` gives exactly lcp_sort's result (equal prompts by index), reading only new
// prompts and new neighbours.
class PromptMemo {
public:
    void sort(PyObject* const* items, const std::vector<Prompt>& p, std::vector<size_t>& ranked,
              std::vector<size_t>& lcp);

private:
    struct Entry {
        nanobind::object array;
        size_t rank = 0;
        PyObject* successor = nullptr;  // the array after it in the last order; null: unknown
        size_t lcp = 0;                 // its common prefix with `successor`
        uint64_t sort = 0;              // the last sort whose order held it
    };
    std::vector<size_t> ranked_known(PyObject* const* items, const std::vector<Prompt>& p,
                                     std::vector<size_t>& fresh) const;
    void remember(PyObject* const* items, const std::vector<Prompt>& p, const std::vector<size_t>& ranked,
                  const std::vector<size_t>& lcp);
    std::unordered_map<PyObject*, Entry> entries;
    uint64_t sorts = 0;
};

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
    nanobind::object weighted_cost(nanobind::handle order, double request_work, nanobind::handle weights) const;
    nanobind::object weighted_costs(nanobind::handle queue, nanobind::handle orders, double request_work,
                                    nanobind::handle weights) const;
    bool completion_into(nanobind::handle order, double request_work, std::vector<double>& done) const;
    void completion_of(const std::vector<size_t>& rs, double request_work, std::vector<double>& done) const;
};

}  // namespace auction_core
