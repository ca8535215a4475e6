// Python binding of the radix auction's queue tree (auction_gym/mechanism/compiled_tree.py wraps it).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"
#include "incremental_tree.hpp"
#include "payments.hpp"

namespace nb = nanobind;
using namespace auction_core;

namespace {

using TokenArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::device::cpu>;

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

std::shared_ptr<const Tokens> copy_tokens(nb::handle array) {
    TokenArray a = nb::cast<TokenArray>(array);
    const size_t n = a.shape(0);
    if (a.stride(0) == 1) return std::make_shared<Tokens>(a.data(), a.data() + n);
    auto v = a.view();
    auto t = std::make_shared<Tokens>(n);
    for (size_t i = 0; i < n; ++i) (*t)[i] = v(i);
    return t;
}

void apply(QueueTree& tree, const std::vector<int32_t>& gone, const std::vector<int32_t>& slots,
           const std::vector<int64_t>& rids, const std::vector<int64_t>& owners, nb::list tokens,
           const std::vector<double>& bids, const std::vector<int64_t>& cached,
           const std::vector<int32_t>& rebid_slots, const std::vector<double>& rebid_bids,
           const std::vector<int64_t>& rebid_cached) {
    const size_t n = slots.size();
    if (rids.size() != n || owners.size() != n || tokens.size() != n || bids.size() != n || cached.size() != n ||
        rebid_bids.size() != rebid_slots.size() || rebid_cached.size() != rebid_slots.size())
        throw nb::value_error("apply: lists of different lengths");
    std::vector<Joining> joined;
    joined.reserve(n);
    for (size_t i = 0; i < n; ++i) joined.push_back({slots[i], rids[i], owners[i], copy_tokens(tokens[i]), bids[i], cached[i]});
    std::vector<Rebid> rebid;
    rebid.reserve(rebid_slots.size());
    for (size_t i = 0; i < rebid_slots.size(); ++i) rebid.push_back({rebid_slots[i], rebid_bids[i], rebid_cached[i]});
    tree.apply(gone, joined, rebid);
}

// A round decided over the skeleton, kept to price it.
struct FactoredRound {
    Factored a;
};

nb::tuple fields(const FactoredRound& round) {
    const Factored& a = round.a;
    return nb::make_tuple(a.parent, a.children, a.attached, a.edge_work, a.leaf_node, a.leaf_owner, a.s, a.p, a.f,
                          py_ties(a.tie), py_keys(a.key), a.sorted_blocks, a.g, a.sum_f, a.leaf_order, a.admission);
}

std::vector<double> payments(const FactoredRound& round, const std::vector<int64_t>& priced) {
    // Python's sum() adds floats with compensation from 3.12 on; the module is built for one version.
    return vcg_payments(round.a, priced, PY_VERSION_HEX >= 0x030C0000);
}

nb::list node_stats(const QueueTree& tree) {
    nb::list out;
    for (const auto& st : tree.node_stats())
        out.append(nb::make_tuple(st.depth, st.s, st.p, py_tie(st.tie), nb::cast(st.attached)));
    return out;
}

}  // namespace

void bind_allocator(nb::module_& m) {
    nb::class_<FactoredRound>(m, "FactoredRound", "A round decided over the queue tree's skeleton.")
        .def("fields", &fields, "factored.FactoredAllocation's fields, the admission as slots.")
        .def("payments", &payments,
             "The VCG payments of `priced` (bidders in the round) before the rounding clip, in their order.");
    nb::class_<QueueTree>(m, "QueueTree",
                          "The radix auction's queue tree kept across rounds (mechanism/incremental_tree.py), "
                          "requests held by slot.")
        .def(nb::init<double, bool, bool>(), nb::arg("request_work"), nb::arg("costed"), nb::arg("cache_ties"))
        .def("apply", &apply,
             "The requests in slots `gone` leave; those in `slots` join (ids, bidders, int64 tokens, bids, cached "
             "lengths); those in `rebid_slots` take new bids and cached lengths; then the tree is re-costed.")
        .def("order", &QueueTree::order, "The slots in the depth-first Smith order.")
        .def("factored", [](QueueTree& tree, const std::vector<double>& alpha) {
                 return FactoredRound{tree.factored(alpha)};
             }, "The round over the skeleton with multipliers `alpha`.")
        .def("node_stats", &node_stats, "(depth, S, P, tie, request ids attached) of every node below the root.");
}
