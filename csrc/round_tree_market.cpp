// A market's round over the queue tree in one call (RoundTree::market_round, round_tree.hpp): what
// policy.round_bids, WaitingRound.prefix_lens, TreeAllocator.allocate and CompiledQueueTree.factored
// do in Python, for the plain inputs only, so the bids are the same float products bit for bit, and
// the round's Python values made as radix_auction.RadixTreeAuction.admit returns them; likewise a
// market's round of one request (RoundTree::lone_round).
#include "round_tree.hpp"

#include <structmember.h>

#include "py_calls.hpp"
#include "slot_fill.hpp"

#include <cmath>
#include <limits>

namespace nb = nanobind;

namespace auction_core {

namespace {

// A field of the queue's requests, read as PyObject_GetAttr reads it: for the class of the first
// request, when that resolves the name to an object slot (Request is a slots dataclass), straight
// from the slot; otherwise by name. Unset (no error) when it cannot be read: the Python path then
// raises the error.
struct Field {
    PyObject* name;
    PyTypeObject* type = nullptr;
    Py_ssize_t offset = -1;

    Field(PyObject* name, PyTypeObject* t) : name(name), type(t) {
        PyObject* d = t->tp_getattro == PyObject_GenericGetAttr ? _PyType_Lookup(t, name) : nullptr;
        if (d != nullptr && Py_TYPE(d) == &PyMemberDescr_Type) {
            const PyMemberDef* m = reinterpret_cast<PyMemberDescrObject*>(d)->d_member;
            if (m->type == T_OBJECT_EX && !(m->flags & READ_RESTRICTED)) offset = m->offset;
        }
    }
    // Whether a request of `type` has it read from its slot, running no Python code.
    bool in_slot() const { return offset >= 0; }
    nb::object of(PyObject* o) const {
        if (offset >= 0 && Py_TYPE(o) == type) {
            PyObject* v = *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(o) + offset);
            return v == nullptr ? nb::object() : nb::borrow(v);
        }
        nb::object v = nb::steal(PyObject_GetAttr(o, name));
        if (!v.is_valid()) PyErr_Clear();
        return v;
    }
};

bool plain_multiplier(PyObject* a) {
    return PyFloat_CheckExact(a) && 0.0 <= PyFloat_AS_DOUBLE(a) &&
           PyFloat_AS_DOUBLE(a) < std::numeric_limits<double>::infinity();
}

// What a round reads over its queue: each request's urgency and bid, its cached length (a new
// reference), and each bidder's requests.
struct Reading {
    std::vector<double> urgency, bids;
    std::vector<PyObject*> lens;
    std::vector<int64_t> queued;
    ~Reading() {
        for (PyObject* o : lens) Py_DECREF(o);
    }
};

// The list of the new references in `items`, which it steals.
nb::list steal_list(std::vector<PyObject*>& items) {
    nb::list out = nb::steal<nb::list>(PyList_New(Py_ssize_t(items.size())));
    for (size_t k = 0; k < items.size(); ++k) PyList_SET_ITEM(out.ptr(), Py_ssize_t(k), items[k]);
    items.clear();
    return out;
}

// mapping[key] as a new reference (null, an error set or not, where Python raises): a dict's item
// found without the generic subscript.
PyObject* looked_up(PyObject* mapping, PyObject* key) {
    if (!PyDict_CheckExact(mapping)) return PyObject_GetItem(mapping, key);
    PyObject* value = PyDict_GetItemWithError(mapping, key);
    Py_XINCREF(value);
    return value;
}

// `error` as the exception being handled (`sys.exception()`) while it lives, as in an except block,
// so an error raised meanwhile has it for its context; then the one handled before.
class HandledWhile {
public:
    explicit HandledWhile(const nb::python_error& error) {
        PyErr_GetExcInfo(&type_, &value_, &traceback_);
        PyErr_SetExcInfo(error.type().inc_ref().ptr(), error.value().inc_ref().ptr(), error.traceback().release().ptr());
    }
    ~HandledWhile() { PyErr_SetExcInfo(type_, value_, traceback_); }
    HandledWhile(const HandledWhile&) = delete;
    HandledWhile& operator=(const HandledWhile&) = delete;

private:
    PyObject *type_, *value_, *traceback_;
};

// False (nothing raised) at the first input that is not plain.
bool read_queue(PyObject* const* queue, Py_ssize_t n, const std::vector<double>& alpha, nb::handle lens_of,
                Reading& out) {
    static PyObject* const bidder_name = PyUnicode_InternFromString("bidder");
    static PyObject* const urgency_name = PyUnicode_InternFromString("urgency");
    out.queued.assign(alpha.size(), 0);
    if (n == 0) return true;
    out.urgency.reserve(size_t(n));
    out.bids.reserve(size_t(n));
    out.lens.reserve(lens_of.is_valid() ? size_t(n) : 0);
    const Field bidder_of(bidder_name, Py_TYPE(queue[0])), urgency_of(urgency_name, Py_TYPE(queue[0]));
    for (Py_ssize_t i = 0; i < n; ++i) {
        nb::object bidder = bidder_of.of(queue[i]), urgency = urgency_of.of(queue[i]);
        if (!bidder.is_valid() || !urgency.is_valid() || !PyLong_CheckExact(bidder.ptr()) ||
            !PyFloat_CheckExact(urgency.ptr()))
            return false;
        const long b = PyLong_AsLong(bidder.ptr());
        if (b < 0 || size_t(b) >= alpha.size()) {
            PyErr_Clear();
            return false;
        }
        if (lens_of.is_valid()) {
            PyObject* c = looked_up(lens_of.ptr(), queue[i]);
            if (c == nullptr) {
                PyErr_Clear();
                return false;
            }
            out.lens.push_back(c);
        }
        ++out.queued[b];
        const double u = PyFloat_AS_DOUBLE(urgency.ptr());
        const double bid = alpha[b] * u;
        // The layers refuse it, naming the request: TreeAllocator.allocate a product that overflows,
        // the tree a bad urgency.
        if (!(0.0 <= bid && bid < std::numeric_limits<double>::infinity())) return false;
        out.bids.push_back(bid);
        out.urgency.push_back(u);
    }
    return true;
}

using pycall::interned;

// `object.__new__(cls)` with `setattr(obj, names[k], values[k])` in order: how radix_auction.py's
// rounds set what they hold where the class is not made slot by slot.
template <std::size_t N>
nb::object set_on_new(nb::handle cls, const std::array<nb::object, N>& names,
                      const std::array<nb::handle, N>& values) {
    PyTypeObject* type = reinterpret_cast<PyTypeObject*>(cls.ptr());
    static PyObject* const no_args = PyTuple_New(0);
    nb::object obj = type->tp_new == PyBaseObject_Type.tp_new
                         ? nb::steal(PyBaseObject_Type.tp_new(type, no_args, nullptr))
                         : nb::handle(reinterpret_cast<PyObject*>(&PyBaseObject_Type)).attr("__new__")(cls);
    if (!obj.is_valid()) throw nb::python_error();
    for (std::size_t k = 0; k < N; ++k)
        if (PyObject_SetAttr(obj.ptr(), names[k].ptr(), values[k].ptr()) < 0) throw nb::python_error();
    return obj;
}

// A slots class's instance made slot by slot where its slots are plain and it sets attributes as
// `object` does (slot_fill.hpp), by `set_on_new` otherwise; the slots not named left unset.
template <std::size_t N>
class DecisionMaker {
public:
    DecisionMaker(nb::handle cls, const std::array<const char*, N>& names)
        : slots_(cls, names, typename pyslots::SlotMaker<N>::Some{}) {}
    nb::object operator()(const std::array<nb::handle, N>& values) {
        nb::object made;
        if (reinterpret_cast<PyTypeObject*>(slots_.cls().ptr())->tp_setattro == PyObject_GenericSetAttr)
            made = slots_.make(values);
        return made.is_valid() ? made : set_on_new(slots_.cls(), slots_.names(), values);
    }

private:
    pyslots::SlotMaker<N> slots_;
};

// The Python values of a round decided in one call, as RadixTreeAuction.admit returns them: (the
// admission order, a new list; the decision), the decision's `pricing` left for the auction to set
// (docs/engine.md section 8). The classes are the modules' own, found on first use.
class RoundObjects {
public:
    RoundObjects()
        : rounds_(nb::module_::import_("auction_gym.mechanism.radix_auction")),
          compiled_(rounds_.attr("CompiledRound")),
          lone_(rounds_.attr("LoneRound"),
                {"requests", "bids", "prefix_lens", "allocation", "_outcome_cache", "_queued"}),
          factored_(nb::module_::import_("auction_gym.mechanism.factored").attr("FactoredAllocation")),
          ordered_(nb::module_::import_("auction_gym.mechanism.allocator").attr("OrderedRound")) {}

    // radix_auction.CompiledRound holding the factored.FactoredAllocation of `round` (the allocation's
    // `request_work` left for the auction to set, its other fields read from `round` on first use).
    nb::object market(nb::handle queue, nb::handle lens, nb::handle round, nb::handle admission) {
        nb::object allocation = set_on_new(factored_, factored_names_, {queue, lens, round, admission});
        return decided(admission, set_on_new(compiled_, compiled_names_,
                                             {queue, lens, allocation, nb::none(), nb::none()}));
    }

    // radix_auction.LoneRound of the one request in `requests`, holding its allocation.OrderedRound.
    nb::object lone(nb::handle requests, nb::handle bids, nb::handle lens) {
        nb::object admission = copied(requests);
        nb::object allocation = set_on_new(ordered_, ordered_names_, {requests, bids, lens, admission, nb::none()});
        return decided(admission, lone_({requests, bids, lens, allocation, nb::none(), nb::none()}));
    }

private:
    static nb::object copied(nb::handle list) {
        nb::object copy = nb::steal(PyList_GetSlice(list.ptr(), 0, PY_SSIZE_T_MAX));
        if (!copy.is_valid()) throw nb::python_error();
        return copy;
    }
    static nb::object decided(nb::handle admission, nb::handle decision) {
        return nb::make_tuple(copied(admission), decision);
    }

    nb::module_ rounds_;
    nb::object compiled_;  // made by `set_on_new`: its `__getattr__` is a lookup of its own (slot_fill.hpp)
    DecisionMaker<6> lone_;
    nb::object factored_, ordered_;
    // What CompiledRound is given (its pricing and bids left unset), FactoredAllocation.of_compiled
    // and OrderedRound's __init__ set, in their order.
    std::array<nb::object, 5> compiled_names_{interned("requests"), interned("prefix_lens"), interned("allocation"),
                                              interned("_outcome_cache"), interned("_queued")};
    std::array<nb::object, 4> factored_names_{interned("requests"), interned("prefix_lens"), interned("compiled"),
                                              interned("admission")};
    std::array<nb::object, 5> ordered_names_{interned("requests"), interned("bids"), interned("prefix_lens"),
                                             interned("admission"), interned("full")};
};

RoundObjects& round_objects() {
    static RoundObjects* objects = new RoundObjects();  // never freed, as the classes it holds
    return *objects;
}

}  // namespace

nb::object RoundTree::lone_round(nb::handle requests, nb::handle multipliers, nb::handle lens_of) const {
    static PyObject* const bidder_name = PyUnicode_InternFromString("bidder");
    static PyObject* const urgency_name = PyUnicode_InternFromString("urgency");
    const auto sequence = [](nb::handle o) { return PyList_CheckExact(o.ptr()) || PyTuple_CheckExact(o.ptr()); };
    if (!PyList_CheckExact(requests.ptr()) || PyList_GET_SIZE(requests.ptr()) != 1 || !sequence(multipliers) ||
        lens_of.is_none())
        return nb::none();
    const Py_ssize_t bidders = PySequence_Fast_GET_SIZE(multipliers.ptr());
    for (Py_ssize_t i = 0; i < bidders; ++i)
        if (!plain_multiplier(PySequence_Fast_GET_ITEM(multipliers.ptr(), i))) return nb::none();
    nb::object request = nb::borrow(PyList_GET_ITEM(requests.ptr(), 0));
    const Field bidder_of(bidder_name, Py_TYPE(request.ptr())), urgency_of(urgency_name, Py_TYPE(request.ptr()));
    // The multipliers are read in place after the fields: Python code reading a field (a
    // subclass's property) could change them meanwhile, so such a request goes to Python.
    if (!bidder_of.in_slot() || !urgency_of.in_slot()) return nb::none();
    nb::object bidder = bidder_of.of(request.ptr()), urgency = urgency_of.of(request.ptr());
    if (!bidder.is_valid() || !urgency.is_valid() || !PyLong_CheckExact(bidder.ptr()) ||
        !PyFloat_CheckExact(urgency.ptr()))
        return nb::none();
    const long b = PyLong_AsLong(bidder.ptr());
    if (b < 0 || b >= bidders) {
        PyErr_Clear();
        return nb::none();
    }
    const double alpha = PyFloat_AS_DOUBLE(PySequence_Fast_GET_ITEM(multipliers.ptr(), b));
    const double bid = alpha * PyFloat_AS_DOUBLE(urgency.ptr());
    if (!(0.0 <= bid && bid < std::numeric_limits<double>::infinity())) return nb::none();  // check_bids refuses
    nb::object length = nb::steal(looked_up(lens_of.ptr(), request.ptr()));
    if (!length.is_valid()) {
        PyErr_Clear();
        return nb::none();
    }
    std::vector<PyObject*> one{request.ptr()};
    if (!plain(one).is_valid()) return nb::none();  // validate_requests checks it
    nb::list bids;
    bids.append(nb::float_(bid));
    nb::object lens = nb::none();  // "unit" reads no lengths (`decide_round`)
    if (costed_) {
        nb::list read;
        read.append(length);
        lens = read;
    }
    return round_objects().lone(requests, bids, lens);
}

nb::object RoundTree::market_round(nb::handle requests, nb::handle multipliers, nb::handle delta,
                                   nb::handle lens_of) {
    static PyObject* const names[] = {PyUnicode_InternFromString("joined"), PyUnicode_InternFromString("left"),
                                      PyUnicode_InternFromString("rematched"), PyUnicode_InternFromString("length_of")};
    nb::object changes[4];
    for (int k = 0; k < 4; ++k)
        if (!(changes[k] = nb::steal(PyObject_GetAttr(delta.ptr(), names[k]))).is_valid()) throw nb::python_error();
    const auto sequence = [](nb::handle o) { return PyList_CheckExact(o.ptr()) || PyTuple_CheckExact(o.ptr()); };
    if (!PyList_CheckExact(requests.ptr()) || !sequence(multipliers)) return nb::none();
    std::vector<double> alpha(PySequence_Fast_GET_SIZE(multipliers.ptr()));
    for (size_t i = 0; i < alpha.size(); ++i) {
        PyObject* a = PySequence_Fast_GET_ITEM(multipliers.ptr(), Py_ssize_t(i));
        if (!plain_multiplier(a)) return nb::none();  // round_bids refuses it, or multiplies another type
        alpha[i] = PyFloat_AS_DOUBLE(a);
    }
    if (costed_ && lens_of.is_none()) return nb::none();  // the lengths are read from the cache
    // The queue as a list of this call's own, read and followed, then handed back as the round's
    // requests: reading it calls back into Python (a field by name, a mapping's __getitem__), which
    // could change the caller's list and free the requests read from it. Untracked by the collector
    // until the call ends, so no callback finds it (gc.get_objects) to change it.
    nb::object queue = nb::steal(PyList_GetSlice(requests.ptr(), 0, PY_SSIZE_T_MAX));
    if (!queue.is_valid()) throw nb::python_error();
    PyObject_GC_UnTrack(queue.ptr());
    struct Retrack {
        PyObject* list;
        ~Retrack() { PyObject_GC_Track(list); }
    } retrack{queue.ptr()};
    try {
        return decide_market_round(queue, alpha, changes[0], changes[1], changes[2], changes[3], lens_of);
    } catch (nb::python_error& e) {
        // CompiledQueueTree.update's `except (TypeError, ValueError): validate_requests(requests); raise`:
        // the culprit's error raised while the round's is handled, so its context is Python's.
        if (!e.matches(PyExc_TypeError) && !e.matches(PyExc_ValueError)) throw;
        HandledWhile handling(e);
        validate_(queue);
        throw;
    }
}

nb::object RoundTree::decide_market_round(nb::handle queue, const std::vector<double>& alpha, nb::handle joined,
                                          nb::handle left, nb::handle rematched, nb::handle length_of,
                                          nb::handle lens_of) {
    Reading read;
    if (!read_queue(PySequence_Fast_ITEMS(queue.ptr()), PyList_GET_SIZE(queue.ptr()), alpha,
                    costed_ ? lens_of : nb::handle(), read))
        return nb::none();
    nb::object lens = costed_ ? nb::object(steal_list(read.lens)) : nb::none();
    follow_bids(queue, round_inputs::QueueBids(read.urgency), joined, left, rematched, length_of, true);
    FactoredRound round = factored(alpha);
    round.queued = std::move(read.queued);
    round.bids = std::move(read.bids);
    round.lens = lens;
    nb::object admission = round.admission;
    nb::object decided = nb::cast(std::move(round), nb::rv_policy::move);
    return round_objects().market(queue, lens, decided, admission);
}

}  // namespace auction_core
