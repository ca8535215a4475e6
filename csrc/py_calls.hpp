// Python attribute names and method calls as the compiled core's hot loops make them: a name made
// from a C string at each lookup is a fresh string to hash and compare, a method called through
// `attr` a bound method made and dropped.
#pragma once

#include <nanobind/nanobind.h>

namespace pycall {

namespace nb = nanobind;

// `s` as an interned Python string, which attribute lookups compare by identity.
inline nb::str interned(const char *s) { return nb::steal<nb::str>(PyUnicode_InternFromString(s)); }

// `self.name(arg)`, without a bound method made for the call.
inline nb::object call_method(nb::handle self, nb::handle name, nb::handle arg) {
    PyObject *args[2] = {self.ptr(), arg.ptr()};
    PyObject *out = PyObject_VectorcallMethod(name.ptr(), args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, nullptr);
    if (!out) throw nb::python_error();
    return nb::steal(out);
}

}  // namespace pycall
