// What RoundTree reads of a request and of a round's inputs (round_tree.cpp, round_tree_checks.cpp):
// a request's fields, ints and bids read and refused as incremental_tree.py reads and refuses them.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <vector>

namespace auction_core::round_inputs {

[[noreturn]] void raise(PyObject* type, const char* message);
[[noreturn]] void raised();  // the Python error set already

// A Request's field, by a name interned once (a lookup per request of the queue each round).
enum Field { ID, BIDDER, BID, TOKENS };
nanobind::object attr(PyObject* o, Field field);

// An int (or an object with __index__) as int64; `fits` false when it is beyond int64.
int64_t as_int64(PyObject* o, bool* fits = nullptr);

// incremental_tree._checked_bid: float(bid), ValueError unless finite and >= 0.
double checked_bid(PyObject* bid, PyObject* rid);

// The round's bid of each request of the queue, as the tree reads them: the objects given (any
// numbers, compared and converted as Python does), or exact floats read already as doubles (a
// market's round, RoundTree::market_round), which need no Python object each.
class QueueBids {
public:
    QueueBids(PyObject* const* given, Py_ssize_t n) : given_(given), n_(n) {}
    explicit QueueBids(const std::vector<double>& read) : read_(read.data()), n_(Py_ssize_t(read.size())) {}
    Py_ssize_t size() const { return n_; }
    // Python's `old != bid` for a kept float bid.
    bool differs(Py_ssize_t i, double old) const;
    // checked_bid of the bid at `i`.
    double checked(Py_ssize_t i, PyObject* rid) const;

private:
    PyObject* const* given_ = nullptr;
    const double* read_ = nullptr;
    Py_ssize_t n_;
};

}  // namespace auction_core::round_inputs
