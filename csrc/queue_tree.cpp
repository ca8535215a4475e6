// The queue's radix tree built from scratch: mechanism/queue_tree.build_queue_tree without a memo
// (a stable sort by the prompts' bytes, then the same walk over the open nodes, the same lists in
// the same order), and completion_times over it (docs/design.md section 8).
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "py_sum.hpp"
#include "queue_tree.hpp"
#include "request_slots.hpp"

namespace nb = nanobind;

using auction_core::Prompt;
using auction_core::PySum;
using auction_core::ScratchTree;

bool auction_core::read_prompt(PyTypeObject* ndarray_type, PyObject* o, Prompt& out) {
    return auction_core::with_native_tokens(ndarray_type, o, [&out](const Py_buffer& view) {
        out.n = size_t(view.shape[0]);
        out.readonly = view.readonly != 0;
        if (view.strides[0] == Py_ssize_t(sizeof(int64_t))) {
            out.ptr = static_cast<const int64_t*>(view.buf);
        } else {  // tobytes() reads a strided array in order, as this copy does
            out.copy.resize(out.n);
            const char* at = static_cast<const char*>(view.buf);
            for (size_t i = 0; i < out.n; ++i)
                out.copy[i] = *reinterpret_cast<const int64_t*>(at + Py_ssize_t(i) * view.strides[0]);
            out.ptr = out.copy.data();
        }
    });
}

// The first token at or after `from` where two prompts differ (or the shorter one's end): whole
// blocks are compared by memcmp, which runs vectorised, as prompts share long prefixes.
size_t auction_core::mismatch(const Prompt& a, const Prompt& b, size_t from) {
    constexpr size_t block = 64;
    const size_t m = std::min(a.n, b.n);
    size_t i = from;
    while (i + block <= m && std::memcmp(a.ptr + i, b.ptr + i, block * sizeof(int64_t)) == 0) i += block;
    while (i < m && a.ptr[i] == b.ptr[i]) ++i;
    return i;
}

// Whether `a` comes no later than `b` in Python's bytes order of their buffers (memcmp over the
// shorter, then the shorter first), given that they agree on their first `from` tokens; and
// their common prefix. The first token that differs decides by its bytes in memory order.
std::pair<bool, size_t> auction_core::bytes_order(const Prompt& a, const Prompt& b, size_t from) {
    const size_t i = mismatch(a, b, from);
    if (i == std::min(a.n, b.n)) return {a.n <= b.n, i};
    return {std::memcmp(a.ptr + i, b.ptr + i, sizeof(int64_t)) < 0, i};
}

// A stable merge sort of the prompts `idx[lo, hi)` by their bytes that also gives each one's
// common prefix with the one before it (`lcp`, 0 for the first), comparing a pair only past the
// prefix both share with the last one placed (Ng and Kakehi's merge by longest common prefixes):
// sorted prompts sharing most of their tokens are compared about once each, not at every level.
// A stable sort has one result, so it is sorted()'s; `tmp_*` are scratch of the same size.
void auction_core::lcp_sort(const std::vector<Prompt>& p, size_t* idx, size_t* lcp, size_t lo, size_t hi,
                            size_t* tmp_idx, size_t* tmp_lcp) {
    if (hi - lo < 2) {
        lcp[lo] = 0;
        return;
    }
    const size_t mid = lo + (hi - lo) / 2;
    lcp_sort(p, idx, lcp, lo, mid, tmp_idx, tmp_lcp);
    lcp_sort(p, idx, lcp, mid, hi, tmp_idx, tmp_lcp);
    // ha, hb: the common prefix of each run's head with the last one placed
    size_t i = lo, j = mid, k = lo, ha = 0, hb = 0;
    while (i < mid && j < hi) {
        bool left = ha > hb;
        if (ha == hb) {
            const auto [first, shared] = bytes_order(p[idx[i]], p[idx[j]], ha);
            left = first;
            (left ? hb : ha) = shared;
        }
        if (left) {
            tmp_idx[k] = idx[i], tmp_lcp[k++] = ha;
            if (++i < mid) ha = lcp[i];
        } else {
            tmp_idx[k] = idx[j], tmp_lcp[k++] = hb;
            if (++j < hi) hb = lcp[j];
        }
    }
    for (size_t first = k; i < mid; ++i, ++k) tmp_idx[k] = idx[i], tmp_lcp[k] = k == first ? ha : lcp[i];
    for (size_t first = k; j < hi; ++j, ++k) tmp_idx[k] = idx[j], tmp_lcp[k] = k == first ? hb : lcp[j];
    std::copy(tmp_idx + lo, tmp_idx + hi, idx + lo);
    std::copy(tmp_lcp + lo, tmp_lcp + hi, lcp + lo);
}

namespace {

// queue_tree._Open: a node on the rightmost root path whose subtree is not complete.
struct Open {
    int64_t depth;
    std::vector<int64_t> children, attached;
    int64_t reach = 0;
    explicit Open(int64_t d) : depth(d) {}
};

// queue_tree._Closed: the nodes numbered as they close, the root last.
struct Closed {
    ScratchTree t;
    bool costed;

    void close(Open& node, Open& above) {
        const int64_t v = int64_t(t.parent.size());
        for (int64_t c : node.children) t.parent[size_t(c)] = v;
        for (int64_t q : node.attached) t.req_node[size_t(q)] = v;
        t.parent.push_back(-1);
        t.depth.push_back(node.depth);
        t.children.push_back(std::move(node.children));
        t.attached.push_back(std::move(node.attached));
        above.children.push_back(v);
        if (!costed) {
            t.edge_work.push_back(0.0);
            return;
        }
        const int64_t reach = node.reach, d = node.depth;
        int64_t lo = above.depth;
        if (reach > above.reach) above.reach = reach;
        if (reach > lo) lo = reach;
        t.edge_work.push_back(d > lo ? double(d - lo) : 0.0);
    }

    // _Closed.tree: the pre-order numbering, node k becoming V-1-k.
    ScratchTree tree() && {
        const int64_t last = int64_t(t.parent.size()) - 1;
        ScratchTree out;
        out.parent.push_back(-1);
        for (int64_t k = last - 1; k >= 0; --k) out.parent.push_back(last - t.parent[size_t(k)]);
        out.depth.assign(t.depth.rbegin(), t.depth.rend());
        for (auto kids = t.children.rbegin(); kids != t.children.rend(); ++kids) {
            for (int64_t& c : *kids) c = last - c;
            out.children.push_back(std::move(*kids));
        }
        out.attached.assign(std::make_move_iterator(t.attached.rbegin()), std::make_move_iterator(t.attached.rend()));
        out.edge_work.assign(t.edge_work.rbegin(), t.edge_work.rend());
        out.req_node = std::move(t.req_node);
        for (int64_t& v : out.req_node) v = last - v;
        out.req_work = std::move(t.req_work);
        return out;
    }
};

// build_queue_tree's walk, over the prompts' sorted order and common prefixes (`memo`'s, where
// given, for the arrays `items`); `cached` empty: no edge work.
ScratchTree build(const std::vector<Prompt>& prompts, const std::vector<int64_t>& cached,
                  auction_core::PromptMemo* memo, PyObject* const* items) {
    const size_t n = prompts.size();
    std::vector<size_t> ranked(n), lcp(n);
    if (memo != nullptr) {
        memo->sort(items, prompts, ranked, lcp);
    } else {
        std::vector<size_t> tmp_idx(n), tmp_lcp(n);
        std::iota(ranked.begin(), ranked.end(), size_t(0));
        auction_core::lcp_sort(prompts, ranked.data(), lcp.data(), 0, n, tmp_idx.data(), tmp_lcp.data());
    }
    // shared[k]: common prefix of the k-th prompt with the one before (0 for the first, -1 after the last)
    std::vector<int64_t> shared(lcp.begin(), lcp.end());
    shared.push_back(-1);
    const bool costed = !cached.empty();
    Closed closed{ScratchTree{}, costed};
    closed.t.req_node.assign(n, 0);
    std::vector<double> req_work(n, 0.0);
    std::vector<Open> stack;
    stack.emplace_back(-1);
    stack.emplace_back(0);
    for (size_t k = 0; k <= n; ++k) {
        const int64_t sk = shared[k];
        while (stack.back().depth > sk) {  // close the open nodes deeper than the shared prefix
            Open node = std::move(stack.back());
            stack.pop_back();
            if (stack.back().depth < sk) stack.emplace_back(sk);  // the shared prefix ends inside its edge
            closed.close(node, stack.back());
        }
        if (k == n) break;
        const size_t r = ranked[k];
        const int64_t at = std::max(sk, shared[k + 1]);
        if (stack.back().depth < at) stack.emplace_back(at);
        Open& top = stack.back();
        top.attached.push_back(int64_t(r));
        if (costed) {
            const int64_t length = int64_t(prompts[r].n), c = cached[r];
            if (c > top.reach) top.reach = c;
            const int64_t lo = at > c ? at : c;
            req_work[r] = length > lo ? double(length - lo) : 0.0;
        }
    }
    closed.t.req_work = std::move(req_work);
    return std::move(closed).tree();
}

// The cached lengths of `lens` when each is an int (or bool) in [0, 2^63); false for anything else
// (an int subclass may compare its own way).
bool read_lens(nb::handle lens, size_t n, std::vector<int64_t>& out) {
    nb::object seq = nb::steal(PySequence_Fast(lens.ptr(), "cached lengths"));
    if (!seq.is_valid()) {
        PyErr_Clear();
        return false;
    }
    if (size_t(PySequence_Fast_GET_SIZE(seq.ptr())) != n) return false;
    PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
    out.resize(n);
    for (size_t i = 0; i < n; ++i) {
        if (!PyLong_CheckExact(items[i]) && !PyBool_Check(items[i])) return false;
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(items[i], &overflow);
        if (overflow != 0 || v < 0) return false;
        out[i] = int64_t(v);
    }
    return true;
}

// build_queue_tree(tokens, prefix_lens) for two requests or more, the order kept in `memo` where
// given; None for inputs it does not take as they are (a prompt not a non-empty native int64
// numpy array, a cached length not an int in [0, 2^63), a length count unlike the prompts'),
// which the Python builder handles.
nb::object build_queue_tree(nb::handle tokens, nb::handle prefix_lens, auction_core::PromptMemo* memo) {
    // numpy.ndarray, held for the interpreter's life
    static PyTypeObject* const ndarray_type =
        (PyTypeObject*)nb::object(nb::module_::import_("numpy").attr("ndarray")).release().ptr();
    nb::object seq = nb::steal(PySequence_Fast(tokens.ptr(), "tokens"));
    if (!seq.is_valid()) {
        PyErr_Clear();
        return nb::none();
    }
    const size_t n = size_t(PySequence_Fast_GET_SIZE(seq.ptr()));
    if (n < 2) return nb::none();
    PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
    std::vector<Prompt> prompts(n);
    for (size_t i = 0; i < n; ++i)
        if (!auction_core::read_prompt(ndarray_type, items[i], prompts[i])) return nb::none();
    std::vector<int64_t> cached;
    if (!prefix_lens.is_none() && !read_lens(prefix_lens, n, cached)) return nb::none();
    return nb::cast(build(prompts, cached, memo, items));
}

}  // namespace

// completion_times(tree, order, request_work) over this tree into `done`; false when `order` holds
// something other than ints indexing both the requests and `order` itself (Python's errors then).
bool ScratchTree::completion_into(nb::handle order, double request_work, std::vector<double>& done) const {
    nb::object seq = nb::steal(PySequence_Fast(order.ptr(), "order"));
    if (!seq.is_valid()) {
        PyErr_Clear();
        return false;
    }
    const size_t m = size_t(PySequence_Fast_GET_SIZE(seq.ptr()));
    PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
    std::vector<size_t> rs(m);
    for (size_t k = 0; k < m; ++k) {
        if (!PyLong_Check(items[k])) return false;
        int overflow = 0;
        const long long r = PyLong_AsLongLongAndOverflow(items[k], &overflow);
        if (overflow != 0 || r < 0 || size_t(r) >= m || size_t(r) >= req_work.size()) return false;
        rs[k] = size_t(r);
    }
    completion_of(rs, request_work, done);
    return true;
}

// completion_times of the request indices `rs` (each below both their count and the requests').
void ScratchTree::completion_of(const std::vector<size_t>& rs, double request_work, std::vector<double>& done) const {
    done.assign(rs.size(), 0.0);
    double clock = 0.0;
    const auto nonzero = [](double w) { return w != 0.0; };
    if (std::none_of(edge_work.begin(), edge_work.end(), nonzero) &&
        std::none_of(req_work.begin(), req_work.end(), nonzero)) {  // no edge work: skip the walks
        for (size_t r : rs) {
            clock += request_work;
            done[r] = clock;
        }
        return;
    }
    std::vector<char> covered(parent.size(), 0);
    covered[0] = 1;
    for (size_t r : rs) {
        clock += req_work[r];
        size_t v = size_t(req_node[r]);
        while (!covered[v]) {
            covered[v] = 1;
            clock += edge_work[v];
            v = size_t(parent[v]);
        }
        clock += request_work;
        done[r] = clock;
    }
}

nb::object ScratchTree::completion_times(nb::handle order, double request_work) const {
    std::vector<double> done;
    return completion_into(order, request_work, done) ? nb::cast(done) : nb::none();
}

namespace {

// sum(map(mul, weights, done)) as the interpreter adds, or false where `weights` is not a list of
// floats, one per completion time.
bool weighted_sum(nb::handle weights, const std::vector<double>& done, double& out) {
    if (!PyList_CheckExact(weights.ptr()) || size_t(PyList_GET_SIZE(weights.ptr())) != done.size()) return false;
    PySum total;
    for (size_t r = 0; r < done.size(); ++r) {
        PyObject* w = PyList_GET_ITEM(weights.ptr(), Py_ssize_t(r));
        if (!PyFloat_CheckExact(w)) return false;
        total.add(PyFloat_AS_DOUBLE(w) * done[r]);
    }
    out = total.value();
    return true;
}

}  // namespace

// weighted_cost(tree, order, request_work, weights): sum(map(mul, weights, done)) as the interpreter
// adds; None where completion_times takes no `order` or `weights` is not a list of floats, one per
// request (the Python code then).
nb::object ScratchTree::weighted_cost(nb::handle order, double request_work, nb::handle weights) const {
    std::vector<double> done;
    double cost = 0.0;
    if (!completion_into(order, request_work, done) || !weighted_sum(weights, done, cost)) return nb::none();
    return nb::float_(cost);
}

// queue_tree.weighted_costs: weighted_cost of each of `orders`, lists of `queue`'s requests named
// by the objects themselves (a request's place its last in `queue`, as the Python dict keeps it);
// None where a request is not a plain Request (whose dict key is its identity, as here), an order
// holds one not in `queue` or is not a list, or weighted_cost takes no such order or weights.
nb::object ScratchTree::weighted_costs(nb::handle queue, nb::handle orders, double request_work,
                                       nb::handle weights) const {
    const PyTypeObject* plain = request_slots::fields().type;
    if (plain == nullptr || !PyList_CheckExact(queue.ptr()) || !PyList_CheckExact(orders.ptr())) return nb::none();
    const size_t n = size_t(PyList_GET_SIZE(queue.ptr()));
    std::unordered_map<PyObject*, size_t> place;
    for (size_t i = 0; i < n; ++i) {
        PyObject* r = PyList_GET_ITEM(queue.ptr(), Py_ssize_t(i));
        if (Py_TYPE(r) != plain) return nb::none();
        place[r] = i;
    }
    nb::list out;
    std::vector<size_t> rs;
    std::vector<double> done;
    for (nb::handle order : orders) {
        if (!PyList_CheckExact(order.ptr())) return nb::none();
        const size_t m = size_t(PyList_GET_SIZE(order.ptr()));
        rs.resize(m);
        for (size_t k = 0; k < m; ++k) {
            auto at = place.find(PyList_GET_ITEM(order.ptr(), Py_ssize_t(k)));
            if (at == place.end() || at->second >= m || at->second >= req_work.size()) return nb::none();
            rs[k] = at->second;
        }
        completion_of(rs, request_work, done);
        double cost = 0.0;
        if (!weighted_sum(weights, done, cost)) return nb::none();
        out.append(cost);
    }
    return out;
}

void bind_queue_tree(nb::module_& m) {
    nb::class_<ScratchTree>(m, "ScratchTree", "A queue's radix tree built from scratch (mechanism/queue_tree.py).")
        .def("lists", &ScratchTree::lists,
             "(parent, depth, children, attached, edge_work, req_node, req_work): QueueTree's lists.")
        .def("completion_times", &ScratchTree::completion_times, nb::arg("order"), nb::arg("request_work"),
             "queue_tree.completion_times over this tree, or None for an order it does not take.")
        .def("weighted_cost", &ScratchTree::weighted_cost, nb::arg("order"), nb::arg("request_work"),
             nb::arg("weights"), "queue_tree.weighted_cost over this tree, or None for inputs it does not take.")
        .def("weighted_costs", &ScratchTree::weighted_costs, nb::arg("queue"), nb::arg("orders"),
             nb::arg("request_work"), nb::arg("weights"),
             "queue_tree.weighted_costs over this tree, or None for inputs it does not take.");
    nb::class_<auction_core::PromptMemo>(m, "PromptMemo",
                                         "queue_tree.TokenMemo of the compiled builder: copies start empty.")
        .def(nb::init<>())
        .def("__getstate__", [](const auction_core::PromptMemo&) { return nb::make_tuple(); })
        .def("__setstate__", [](auction_core::PromptMemo& memo, const nb::tuple&) { new (&memo) auction_core::PromptMemo(); });
    m.def("build_queue_tree", &build_queue_tree, nb::arg("tokens"), nb::arg("prefix_lens").none(),
          nb::arg("memo").none() = nb::none(),
          "queue_tree.build_queue_tree, its order kept in a PromptMemo where given, or None for inputs it does not take.");
}
