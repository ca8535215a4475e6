// The slots of auction_gym.request.Request and a round's plain numbers (request_slots.hpp).
#include "request_slots.hpp"

#include <nanobind/stl/string.h>

#include <array>
#include <string>

#include "py_calls.hpp"
#include "slot_fill.hpp"

namespace nb = nanobind;

namespace request_slots {

namespace {

Py_ssize_t slot_offset(PyTypeObject* t, const char* name) {
    nb::str key = pycall::interned(name);
    const PyMemberDescrObject* member = pyslots::plain_slot(t, key.ptr());
    return member ? member->d_member->offset : -1;
}

}  // namespace

const Fields& fields() {
    // Never freed: they may outlive the interpreter's teardown of the modules they hold.
    static PyTypeObject* const request = reinterpret_cast<PyTypeObject*>(
        nb::object(nb::module_::import_("auction_gym.request").attr("Request")).release().ptr());
    static Fields* const f = new Fields();
    static unsigned int version = 0;
    // The offsets hold while the class is unchanged (its version tag): a field made a property, or
    // replaced, after the import is read as Python reads it, or the call declines.
    if (pyslots::same_version(request, version)) return *f;
    Fields out{request, slot_offset(request, "id"), slot_offset(request, "bidder"), slot_offset(request, "bid"),
               slot_offset(request, "urgency"), slot_offset(request, "tokens"), slot_offset(request, "arrival")};
    if (out.id < 0 || out.bidder < 0 || out.bid < 0 || out.urgency < 0 || out.tokens < 0 || out.arrival < 0)
        out.type = nullptr;
    out.output_len = slot_offset(request, "output_len");
    out.value = slot_offset(request, "value");
    out.output_tokens = slot_offset(request, "output_tokens");
    out.max_new_tokens = slot_offset(request, "max_new_tokens");
    *f = out;
    version = request->tp_version_tag;  // tagged by the lookups, where the class can be
    return *f;
}

bool plain_int(PyObject* o, int64_t& out) {
    if (o == nullptr || !PyLong_CheckExact(o)) return false;
    int overflow = 0;
    out = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) return false;
    if (out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    return true;
}

bool plain_floats(nb::handle o, std::vector<double>& out) {
    if (!PyList_CheckExact(o.ptr()) && !PyTuple_CheckExact(o.ptr())) return false;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(o.ptr());
    out.resize(size_t(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* x = PySequence_Fast_GET_ITEM(o.ptr(), i);
        if (!PyFloat_CheckExact(x)) return false;
        out[size_t(i)] = PyFloat_AS_DOUBLE(x);
    }
    return true;
}

namespace {

constexpr std::size_t kColumns = 10;  // the fields after the id, in Request's order

// The sequence `o` as a list or tuple (false for another iterable, which Python's zip reads).
bool plain_sequence(PyObject* o) { return PyList_CheckExact(o) || PyTuple_CheckExact(o); }

// What makes a Request slot by slot: its slots in the order of its fields (the dataclass's
// `__slots__`), the order in which request.py passes the columns.
pyslots::SlotMaker<kColumns + 1>& request_maker() {
    static auto* maker = [] {  // never freed, as fields()'s class
        nb::object cls = nb::module_::import_("auction_gym.request").attr("Request");
        nb::tuple slots = nb::tuple(cls.attr("__slots__"));
        std::array<std::string, kColumns + 1> names;
        std::array<const char*, kColumns + 1> c_names{};
        for (std::size_t i = 0; i < names.size() && i < slots.size(); ++i) {
            names[i] = nb::cast<std::string>(slots[i]);
            c_names[i] = names[i].c_str();
        }
        return new pyslots::SlotMaker<kColumns + 1>(cls, c_names);
    }();
    return *maker;
}

// `Request._unchecked_many(first_id=first_id, <field>=column, ...)` for the class Request itself,
// `columns` those after the id in the order of its fields, lists or tuples of one length: the same
// requests holding the same objects, made slot by slot (slot_fill.hpp). None where it declines
// (another class, another iterable, unequal lengths, ids past int64, or a field no longer a plain
// slot), for the Python loop, which raises what it raises.
nb::object unchecked_requests(nb::handle cls, nb::handle first_id, nb::tuple columns) {
    pyslots::SlotMaker<kColumns + 1>& maker = request_maker();
    int64_t first = 0;
    if (!maker.makes(cls) || columns.size() != kColumns || !plain_int(first_id.ptr(), first)) return nb::none();
    std::array<PyObject*, kColumns> column{};
    for (std::size_t j = 0; j < kColumns; ++j) {
        column[j] = columns[j].ptr();
        if (!plain_sequence(column[j])) return nb::none();
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(column[1]);  // the ids run over the tokens
    for (PyObject* c : column)
        if (PySequence_Fast_GET_SIZE(c) != n) return nb::none();
    if (n > 0 && first > INT64_MAX - (n - 1)) return nb::none();
    nb::list made = nb::steal<nb::list>(PyList_New(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        nb::object id = nb::steal(PyLong_FromLongLong(first + i));
        if (!id.is_valid()) throw nb::python_error();
        std::array<nb::handle, kColumns + 1> values{id};
        for (std::size_t j = 0; j < kColumns; ++j) values[j + 1] = PySequence_Fast_GET_ITEM(column[j], i);
        nb::object request = maker.make(values);
        if (!request.is_valid()) return nb::none();
        PyList_SET_ITEM(made.ptr(), i, request.release().ptr());
    }
    return made;
}

}  // namespace

}  // namespace request_slots

void bind_request_slots(nb::module_& m) {
    m.def("unchecked_requests", &request_slots::unchecked_requests, nb::arg("cls"), nb::arg("first_id"),
          nb::arg("columns"),
          "Request._unchecked_many's requests made in one call, or None where it declines (request.py).");
}
