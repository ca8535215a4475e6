// What RoundTree reads of a request and of a round's inputs (round_tree.cpp, round_tree_checks.cpp):
// a request's fields, ints and bids read and refused as incremental_tree.py reads and refuses them.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>

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

}  // namespace auction_core::round_inputs
