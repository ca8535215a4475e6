// The slots of auction_gym.request.Request read in place, and a round's plain numbers, for the
// compiled rounds that read a queue's requests (posted_book.cpp, priority_round.cpp,
// strict_priority.cpp, lpm_orders.cpp, arrival_order.hpp): a request of exactly that class has its fields read at
// their offsets, which runs no Python code.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <vector>

namespace request_slots {

// The object slots of auction_gym.request.Request that a round reads, read in place for a request
// of exactly that class (reading them runs no Python code); type null where one is not a slot, as
// looked up again whenever the class has changed since (its version tag).
struct Fields {
    PyTypeObject* type = nullptr;
    Py_ssize_t id = -1, bidder = -1, bid = -1, urgency = -1, tokens = -1, arrival = -1;
    // The other fields an engine's arrivals read, each -1 alone where it is not a slot (the type
    // stays set: the rounds do not read them).
    Py_ssize_t output_len = -1, value = -1, output_tokens = -1, max_new_tokens = -1;
};

const Fields& fields();

// The object in the slot at `offset` of `o` (null where it is unset), borrowed.
inline PyObject* at_offset(PyObject* o, Py_ssize_t offset) {
    return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(o) + offset);
}

// An exact int within int64 (false for any other object, an error cleared).
bool plain_int(PyObject* o, int64_t& out);

// A list or tuple of exact floats as doubles (false for anything else).
bool plain_floats(nanobind::handle o, std::vector<double>& out);

}  // namespace request_slots
