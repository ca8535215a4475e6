// The checks of the requests that join the queue tree and the blocks made of them
// (incremental_tree.IncrementalQueueTree._fresh_blocks and _new_block, validation.validate_requests'
// fast path), and the reading of a request's fields, ints and bids they and round_tree.cpp share.
#include <nanobind/ndarray.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "py_calls.hpp"
#include "round_tree.hpp"
#include "round_tree_inputs.hpp"

namespace nb = nanobind;

namespace auction_core {

namespace round_inputs {

[[noreturn]] void raise(PyObject* type, const char* message) {
    PyErr_SetString(type, message);
    throw nb::python_error();
}

[[noreturn]] void raised() { throw nb::python_error(); }

nb::object attr(PyObject* o, Field field) {
    static PyObject* const names[] = {PyUnicode_InternFromString("id"), PyUnicode_InternFromString("bidder"),
                                      PyUnicode_InternFromString("bid"), PyUnicode_InternFromString("tokens")};
    nb::object v = nb::steal(PyObject_GetAttr(o, names[field]));
    if (!v.is_valid()) raised();
    return v;
}

int64_t as_int64(PyObject* o, bool* fits) {
    nb::object index = nb::steal(PyNumber_Index(o));
    if (!index.is_valid()) raised();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    if (v == -1 && PyErr_Occurred()) raised();
    if (overflow) {
        if (fits == nullptr) raise(PyExc_OverflowError, "Python int too large to convert to C long long");
        *fits = false;
        return 0;
    }
    if (fits) *fits = true;
    return v;
}

double checked_bid(PyObject* bid, PyObject* rid) {
    double b;
    if (PyFloat_Check(bid)) {
        b = PyFloat_AS_DOUBLE(bid);
    } else {
        nb::object f = nb::steal(PyNumber_Float(bid));
        if (!f.is_valid()) raised();
        b = PyFloat_AS_DOUBLE(f.ptr());
    }
    if (!(0.0 <= b && b < std::numeric_limits<double>::infinity())) {
        PyErr_Format(PyExc_ValueError, "request %S: bid must be finite and >= 0, got %R", rid, bid);
        raised();
    }
    return b;
}

}  // namespace round_inputs

using namespace round_inputs;

namespace {

using TokenArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::device::cpu>;

using pycall::Int64View;

// An exact ndarray's data as `pycall::int64_view` reads it, without a DLPack export (which costs
// more than the rest of a request's joining the tree); false (nothing raised) for any other object,
// which nanobind's conversion then takes.
bool int64_vector(PyTypeObject* ndarray_type, nb::handle o, Int64View& out) {
    return Py_TYPE(o.ptr()) == ndarray_type && pycall::int64_view(o, out);
}

// The tokens of a request's prompt `array` (`v` its data when an int64 vector, else null): a view
// of a read-only array, kept alive by a reference (released with the GIL held: the tree changes and
// is freed only in calls from Python); a copy of another.
std::shared_ptr<const Tokens> prompt(nb::handle array, bool writeable, const Int64View* vector) {
    auto t = std::make_shared<Tokens>();
    if (vector != nullptr) {
        const Int64View& v = *vector;
        t->n = size_t(v.n);
        if (!writeable && v.stride == Py_ssize_t(sizeof(int64_t))) {
            t->ptr = v.data;
            t->owner = std::shared_ptr<const void>(array.inc_ref().ptr(), [](const void* o) {
                Py_DECREF(static_cast<PyObject*>(const_cast<void*>(o)));
            });
            return t;
        }
        t->copy.resize(t->n);
        const char* at = reinterpret_cast<const char*>(v.data);
        for (size_t i = 0; i < t->n; ++i) t->copy[i] = *reinterpret_cast<const int64_t*>(at + Py_ssize_t(i) * v.stride);
        t->ptr = t->copy.data();
        return t;
    }
    TokenArray a = nb::cast<TokenArray>(array);  // converted, so copied
    t->n = a.shape(0);
    auto view = a.view();
    t->copy.resize(t->n);
    for (size_t i = 0; i < t->n; ++i) t->copy[i] = view(i);
    t->ptr = t->copy.data();
    return t;
}

}  // namespace

nb::object RoundTree::plain(const std::vector<PyObject*>& fresh) const {
    nb::list tokens;
    std::vector<int64_t> seen;  // sorted: a round has few requests that join, so no hash set to allocate
    seen.reserve(fresh.size());
    for (PyObject* r : fresh) {
        nb::object bid = attr(r, BID), rid = attr(r, ID), t = attr(r, TOKENS);
        if (!PyFloat_Check(bid.ptr()) || !(0.0 <= PyFloat_AS_DOUBLE(bid.ptr()) &&
                                            PyFloat_AS_DOUBLE(bid.ptr()) < std::numeric_limits<double>::infinity()))
            return nb::object();
        if (!PyLong_CheckExact(rid.ptr()) || Py_TYPE(t.ptr()) != ndarray_type_) return nb::object();
        int overflow = 0;
        const long long id = PyLong_AsLongLongAndOverflow(rid.ptr(), &overflow);
        const auto at = std::lower_bound(seen.begin(), seen.end(), id);
        if (overflow || (at != seen.end() && *at == id)) return nb::object();
        seen.insert(at, id);
        Int64View v;
        if (!int64_vector(ndarray_type_, t, v) || v.n == 0) return nb::object();
        tokens.append(t);
    }
    return tokens;
}

RoundTree::Fresh RoundTree::new_block(PyObject* request, nb::handle rid, nb::handle tokens, double bid, int64_t cached,
                                      bool tokens_read) {
    bool fits = true;
    const int64_t id = as_int64(rid.ptr(), &fits);
    if (!fits) {
        PyErr_Format(PyExc_ValueError, "request %S: the compiled core holds request ids within int64", rid.ptr());
        raised();
    }
    // A prompt that could change in place is placed again every round (without a delta).
    Int64View v;
    const bool vector = int64_vector(ndarray_type_, tokens, v);
    const bool writeable = vector ? v.writeable : pycall::writeable(tokens);
    nb::object source = writeable ? nb::none() : tokens_read ? nb::borrow(tokens) : attr(request, TOKENS);
    const int64_t owner = as_int64(attr(request, BIDDER).ptr());
    return Fresh{nb::borrow(request), source,
                 Joining{-1, id, owner, prompt(tokens, writeable, vector ? &v : nullptr), bid, cached}};
}

std::vector<RoundTree::Fresh> RoundTree::fresh_blocks(const std::vector<PyObject*>& fresh, const QueueBids& bid,
                                                      const std::vector<Py_ssize_t>& at,
                                                      const std::vector<int64_t>& lens,
                                                      const std::vector<int32_t>& gone) {
    nb::object tokens = plain(fresh);
    const bool read = tokens.is_valid();  // the requests' own arrays, as plain read them
    if (!read) {  // the reference's check names the culprit, or converts the prompts
        nb::list asked;
        for (PyObject* r : fresh) asked.append(nb::handle(r));
        tokens = validate_(asked)[0];
    }
    std::vector<Fresh> added;
    added.reserve(fresh.size());
    for (size_t k = 0; k < fresh.size(); ++k) {
        nb::object rid = attr(fresh[k], ID);
        bool fits = true;
        const int64_t id = as_int64(rid.ptr(), &fits);
        auto holder = fits ? by_rid_.find(id) : by_rid_.end();
        if (holder != by_rid_.end() && std::find(gone.begin(), gone.end(), holder->second) == gone.end()) {
            PyErr_Format(PyExc_ValueError, "request %S: duplicate request id in the queue", rid.ptr());
            raised();
        }
        const double b = bid.checked(at[k], rid.ptr());
        nb::object t = tokens[k];
        added.push_back(new_block(fresh[k], rid, t, b, lens[k], read));
    }
    return added;
}

}  // namespace auction_core
