// Python binding of the radix auction's queue tree (RoundTree, round_tree.cpp) and the rounds decided over it
// (auction_gym/mechanism/compiled_tree.py wraps them).
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include <algorithm>

#include "bindings.hpp"
#include "incremental_tree.hpp"
#include "payments.hpp"
#include "py_sum.hpp"
#include "round_tree.hpp"

namespace nb = nanobind;
using namespace auction_core;

namespace {

// A tie value as a Python int (it may need more than 64 bits).
nb::object py_tie(Tie t) {
    if (t >= Tie(INT64_MIN) && t <= Tie(INT64_MAX)) return nb::steal(PyLong_FromLongLong((long long)t));
    nb::object hi = nb::steal(PyLong_FromLongLong((long long)(t >> 64)));
    nb::object lo = nb::steal(PyLong_FromUnsignedLongLong((unsigned long long)(t & ~(unsigned long long)0)));
    nb::object shift = nb::steal(PyLong_FromLong(64));
    nb::object high = nb::steal(PyNumber_Lshift(hi.ptr(), shift.ptr()));
    if (!high.is_valid()) throw nb::python_error();
    nb::object sum = nb::steal(PyNumber_Add(high.ptr(), lo.ptr()));
    if (!sum.is_valid()) throw nb::python_error();
    return sum;
}

nb::list py_ties(const std::vector<Tie>& ties) {
    nb::list out;
    for (Tie t : ties) out.append(py_tie(t));
    return out;
}

nb::list py_keys(const std::vector<SortKey>& keys) {
    nb::list out;
    for (const SortKey& k : keys) out.append(nb::make_tuple(k.zero_work_last, k.ratio, py_tie(k.tie)));
    return out;
}

nb::tuple fields(const FactoredRound& round) {
    const Factored& a = round.a;
    return nb::make_tuple(a.parent, a.children, a.attached, a.edge_work, a.leaf_node, a.leaf_owner, a.s, a.p, a.f,
                          py_ties(a.tie), py_keys(a.key), a.sorted_blocks, a.g, a.sum_f, a.leaf_order);
}

std::vector<double> payments(const FactoredRound& round, const std::vector<int64_t>& priced) {
    // Python's sum() adds floats with compensation from 3.12 on; the module is built for one version.
    return vcg_payments(round.a, priced, auction_core::PY_SUM_COMPENSATED, *round.pricing);
}

// AuctionRound.charges of a round market_round decided: bidder i, with per_bidder[i] of its requests
// admitted out of queued[i], pays its VCG payment (clipped as RadixTreeAuction.payments clips,
// `rounding` of the round's cost) x a_i / q_i x seconds_per_unit; those paying 0 left out.
nb::dict charges(const FactoredRound& round, const std::vector<int64_t>& per_bidder, double seconds_per_unit,
                 double rounding) {
    const std::vector<int64_t>& owners = round.a.leaf_owner;
    std::vector<int64_t> priced;
    for (size_t i = 0; i < per_bidder.size(); ++i)
        if (per_bidder[i] && std::find(owners.begin(), owners.end(), int64_t(i)) != owners.end())
            priced.push_back(int64_t(i));
    nb::dict due;
    const bool lone = std::all_of(owners.begin(), owners.end(), [&](int64_t o) { return o == owners[0]; });
    if (lone || priced.empty()) return due;  // a lone bidder delays nobody else
    const std::vector<double> pay = payments(round, priced);
    const double floor = -rounding * std::max(round.a.f[0], 1.0);
    for (size_t k = 0; k < priced.size(); ++k) {
        double p = pay[k];
        const int64_t i = priced[k];
        if (p < 0) {
            if (p < floor) {
                nb::object shown = nb::steal(PyFloat_FromDouble(p));
                PyErr_Format(PyExc_AssertionError, "negative VCG payment %R for bidder %lld", shown.ptr(), (long long)i);
                throw nb::python_error();
            }
            p = 0.0;
        }
        if (p == 0.0) continue;
        // q_i as AuctionRound.charges counts it; 0 only for a bidder changed since it joined the tree
        const int64_t queued = size_t(i) < round.queued.size() ? round.queued[i] : 0;
        if (queued == 0) {
            PyErr_SetString(PyExc_ZeroDivisionError, "float division by zero");
            throw nb::python_error();
        }
        due[nb::int_(i)] = p * double(per_bidder[i]) / double(queued) * seconds_per_unit;
    }
    return due;
}

nb::list bids(const FactoredRound& round) {
    nb::list out = nb::steal<nb::list>(PyList_New(Py_ssize_t(round.bids.size())));
    if (!out.is_valid()) throw nb::python_error();
    for (size_t k = 0; k < round.bids.size(); ++k) {
        PyObject* b = PyFloat_FromDouble(round.bids[k]);
        if (b == nullptr) throw nb::python_error();
        PyList_SET_ITEM(out.ptr(), Py_ssize_t(k), b);
    }
    return out;
}

nb::list node_stats(const RoundTree& tree) {
    nb::list out;
    for (const auto& st : tree.tree().node_stats())
        out.append(nb::make_tuple(st.depth, st.s, st.p, py_tie(st.tie), nb::cast(st.attached)));
    return out;
}

}  // namespace

void bind_allocator(nb::module_& m) {
    nb::class_<FactoredRound>(m, "FactoredRound", "A round decided over the queue tree's skeleton.")
        .def("fields", &fields, "factored.FactoredAllocation's fields from `tree` to `leaf_order`.")
        .def_ro("admission", &FactoredRound::admission, "The requests in the order decided.")
        .def_prop_ro("cost", [](const FactoredRound& r) { return r.a.f[0]; }, "F of the root, in money.")
        .def_prop_ro("leaf_owner", [](const FactoredRound& r) { return r.a.leaf_owner; }, "The bidder of each leaf.")
        .def_prop_ro("bids", &bids, "Each request's bid in a round market_round decided (a new list).")
        .def("same_bids", [](const FactoredRound& r, const FactoredRound& other) { return r.bids == other.bids; },
             nb::arg("other"), "Whether two rounds market_round decided bid alike, as == of their bids' lists.")
        .def_ro("prefix_lens", &FactoredRound::lens,
                "Each request's cached length in a round market_round decided (None when not costed).")
        .def("payments", &payments,
             "The VCG payments of `priced` (bidders in the round) before the rounding clip, in their order.")
        .def("charges", &charges, nb::arg("per_bidder"), nb::arg("seconds_per_unit"), nb::arg("rounding"),
             "AuctionRound.charges of a round decided by RoundTree.market_round.");
    nb::class_<RoundTree>(m, "RoundTree",
                          "The radix auction's queue tree kept across rounds (mechanism/incremental_tree.py), "
                          "the requests held by slot.")
        .def(nb::init<double, bool, bool, nb::object>(), nb::arg("request_work"), nb::arg("costed"),
             nb::arg("cache_ties"), nb::arg("validate"))
        .def("update", &RoundTree::update, nb::arg("requests"), nb::arg("bids"), nb::arg("lens").none(),
             "IncrementalQueueTree.update without a delta: the queue compared with the tree's.")
        .def("follow", &RoundTree::follow, nb::arg("requests"), nb::arg("bids"), nb::arg("joined"), nb::arg("left"),
             nb::arg("rematched"), nb::arg("length_of"),
             "IncrementalQueueTree._follow: the queue brought from the tree's by its reported changes.")
        .def("market_round", &RoundTree::market_round, nb::arg("requests"), nb::arg("multipliers"),
             nb::arg("delta"), nb::arg("lens_of").none(),
             "A market's round in one call, following the queue's changes `delta` (a QueueDelta): its "
             "FactoredRound, or None for inputs not plain.")
        .def("lone_round", &RoundTree::lone_round, nb::arg("requests"), nb::arg("multipliers"),
             nb::arg("lens_of").none(),
             "A market's round of one request: ([bid], [cached length]) of plain inputs, or None.")
        .def("order", &RoundTree::order, "The requests in the depth-first Smith order.")
        .def("factored", &RoundTree::factored, "The round over the skeleton with multipliers `alpha`.")
        .def("node_stats", &node_stats, "(depth, S, P, tie, request ids attached) of every node below the root.");
}
