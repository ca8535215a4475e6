// The slots of auction_gym.request.Request and a round's plain numbers (request_slots.hpp).
#include "request_slots.hpp"

#include <structmember.h>

#include "py_calls.hpp"

namespace nb = nanobind;

namespace request_slots {

namespace {

Py_ssize_t slot_offset(PyTypeObject* t, const char* name) {
    nb::str key = pycall::interned(name);
    PyObject* d = t->tp_getattro == PyObject_GenericGetAttr ? _PyType_Lookup(t, key.ptr()) : nullptr;
    if (d == nullptr || Py_TYPE(d) != &PyMemberDescr_Type) return -1;
    const PyMemberDef* m = reinterpret_cast<PyMemberDescrObject*>(d)->d_member;
    return m->type == T_OBJECT_EX && !(m->flags & READ_RESTRICTED) ? m->offset : -1;
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
    bool unchanged = version != 0 && request->tp_version_tag == version;
#ifdef Py_TPFLAGS_VALID_VERSION_TAG
    unchanged = unchanged && PyType_HasFeature(request, Py_TPFLAGS_VALID_VERSION_TAG);
#endif
    if (unchanged) return *f;
    Fields out{request, slot_offset(request, "id"), slot_offset(request, "bidder"), slot_offset(request, "bid"),
               slot_offset(request, "urgency"), slot_offset(request, "tokens"), slot_offset(request, "arrival")};
    if (out.id < 0 || out.bidder < 0 || out.bid < 0 || out.urgency < 0 || out.tokens < 0 || out.arrival < 0)
        out.type = nullptr;
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

}  // namespace request_slots
