// The slots of a Python dataclass(slots=True), found on its class and filled in place.
//
// `SlotMaker` makes instances of such a class that the compiled core makes by the thousand (a
// request, its record, the queue's changes of a round) as `object.__new__` and `object.__setattr__`
// make them: the class's allocator, then each slot's member descriptor, in the order of the
// fields. That is what the dataclass's generated __init__ does, less the interpreter's frame and
// its name lookups, which cost a record or a delta more than what it holds (docs/design.md
// section 8).
#pragma once

#include <nanobind/nanobind.h>
#include <structmember.h>

#include <array>
#include <cstddef>

namespace pyslots {

namespace nb = nanobind;

// The member descriptor that `name` finds on `type` where it is a plain object slot (what
// `__slots__` makes), borrowed; null for anything else (a property, a class attribute, a
// restricted or typed member, a type with its own attribute lookup).
inline PyMemberDescrObject *plain_slot(PyTypeObject *type, PyObject *name) {
    PyObject *d = type->tp_getattro == PyObject_GenericGetAttr ? _PyType_Lookup(type, name) : nullptr;
    if (d == nullptr || Py_TYPE(d) != &PyMemberDescr_Type) return nullptr;
    auto *member = reinterpret_cast<PyMemberDescrObject *>(d);
    const PyMemberDef *m = member->d_member;
    return m->type == T_OBJECT_EX && !(m->flags & (READONLY | READ_RESTRICTED)) ? member : nullptr;
}

// Whether `type` is unchanged since it had the version tag `version` (0: never looked at): a class
// attribute set or deleted since gives it another tag, or none.
inline bool same_version(PyTypeObject *type, unsigned int version) {
    bool same = version != 0 && type->tp_version_tag == version;
#ifdef Py_TPFLAGS_VALID_VERSION_TAG
    same = same && PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG);
#endif
    return same;
}

template <std::size_t N>
class SlotMaker {
public:
    // Tag of the constructor whose names are some of the class's slots, its own or inherited: an
    // instance it makes leaves the others unset, for the caller to set.
    struct Some {};

    // `names`: the class's slots, every one (so none is left unset), in the order `make` takes
    // their values.
    SlotMaker(nb::handle cls, const std::array<const char *, N> &names) : SlotMaker(cls, names, Some{}) {
        whole_ = nb::len(nb::object(cls.attr("__slots__"))) == N;
    }

    SlotMaker(nb::handle cls, const std::array<const char *, N> &names, Some)
        : cls_(nb::borrow(cls)), type_(reinterpret_cast<PyTypeObject *>(cls.ptr())), whole_(true) {
        for (std::size_t i = 0; i < N; ++i) names_[i] = nb::steal(PyUnicode_InternFromString(names[i]));
    }

    // A new instance holding `values` (borrowed; each slot takes its own reference); a null object
    // where the class has other slots than the names, or one of them is not a plain slot (the class
    // changed since the import), for the caller to call the class instead.
    nb::object make(const std::array<nb::handle, N> &values) {
        if (!whole_ || (!same_version(type_, version_) && !look_up())) return nb::object();
        PyObject *obj = type_->tp_alloc(type_, 0);
        if (!obj) throw nb::python_error();
        nb::object out = nb::steal(obj);
        for (std::size_t i = 0; i < N; ++i) {
            if (PyMember_SetOne(reinterpret_cast<char *>(obj), members_[i], values[i].ptr()) < 0) {
                throw nb::python_error();
            }
        }
        return out;
    }

    // Whether it makes instances of `cls` (that class itself).
    bool makes(nb::handle cls) const { return cls.ptr() == cls_.ptr(); }

    // The class it makes instances of, and the names of the slots it sets (interned), in `make`'s order.
    nb::handle cls() const { return cls_; }
    const std::array<nb::object, N> &names() const { return names_; }

private:
    // The slots' members found again (after the class changed); false where one is not plain.
    bool look_up() {
        version_ = 0;
        for (std::size_t i = 0; i < N; ++i) {
            PyMemberDescrObject *member = plain_slot(type_, names_[i].ptr());
            if (member == nullptr) return false;
            members_[i] = member->d_member;
        }
        version_ = type_->tp_version_tag;  // tagged by the lookups, where the class can be
        return true;
    }

    nb::object cls_;
    PyTypeObject *type_;
    std::array<nb::object, N> names_;
    bool whole_;
    std::array<PyMemberDef *, N> members_{};  // in the class's own memory, which this holds
    unsigned int version_ = 0;
};

}  // namespace pyslots
