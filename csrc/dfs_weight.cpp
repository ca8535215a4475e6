// DFS-weight's admission order of a round (scheduler/dfs_weight.py, DFSWeight.order_round) in C++,
// over the compiled cache's nodes: each request hung on the node its match ends at, every node's
// weight (waiting requests in its subtree), and the depth-first walk, children by descending
// weight, ties in the cache's order of the node's children (docs/design.md section 8). None, having
// changed nothing, for an input it does not take as it is; the Python code then runs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "radix_cache.hpp"
#include "request_slots.hpp"

namespace nb = nanobind;
using radix::Node;
using radix::NodePtr;

namespace {

// What the walk reads of a node the queue's matches reach.
struct Reached {
    int64_t weight = 0;
    std::vector<const Node*> children;  // reached below it, in the order first reached
    std::vector<PyObject*> hanging;     // its requests, in the queue's order
};

// The node request `r`'s match ends at, match[r.id][1]; null where that is not a compiled node.
// A plain Request's id is read at its slot; the node is held by the match, so no reference is taken.
const Node* match_node(PyObject* r, PyObject* match) {
    static PyObject* const id_name = PyUnicode_InternFromString("id");
    const request_slots::Fields& f = request_slots::fields();
    nb::object rid = Py_TYPE(r) == f.type ? nb::borrow(request_slots::at_offset(r, f.id))
                                          : nb::steal(PyObject_GetAttr(r, id_name));
    if (!rid.is_valid()) {
        PyErr_Clear();
        return nullptr;
    }
    PyObject* entry = PyDict_GetItemWithError(match, rid.ptr());  // borrowed
    if (entry == nullptr || !PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) < 2) {
        PyErr_Clear();
        return nullptr;
    }
    const Node* node = nullptr;
    if (!nb::try_cast<const Node*>(nb::handle(PyTuple_GET_ITEM(entry, 1)), node)) return nullptr;
    return node;
}

// The queue's nodes and their ancestors with weights and reached children, as the Python loop
// over `hanging` (nodes in the order first matched) builds them; false for a node not compiled.
bool reach(PyObject* const* queue, size_t n, PyObject* match, std::unordered_map<const Node*, Reached>& reached) {
    std::vector<const Node*> ends;  // the match nodes, in the order first matched
    for (size_t i = 0; i < n; ++i) {
        const Node* node = match_node(queue[i], match);
        if (node == nullptr) return false;
        auto [at, fresh] = reached.try_emplace(node);
        if (fresh) ends.push_back(node);
        at->second.hanging.push_back(queue[i]);
    }
    for (const Node* end : ends) {
        const int64_t count = int64_t(reached[end].hanging.size());
        const Node* child = nullptr;
        bool child_is_new = false;
        for (const Node* node = end; node != nullptr; node = node->parent.get()) {
            Reached& here = reached[node];
            if (child_is_new) here.children.push_back(child);
            const bool is_new = here.weight == 0;  // every node the loop reaches has a request below
            here.weight += count;
            child = node;
            child_is_new = is_new;
        }
    }
    return true;
}

// DFSWeight.order_round's order of `queue` given the split matcher's `match` (request id ->
// (length, node)) and the cache's `root`.
nb::object dfs_order(nb::handle queue, nb::handle match, nb::handle root) {
    NodePtr root_node;
    if (!PyList_CheckExact(queue.ptr()) || !PyDict_CheckExact(match.ptr()) || !nb::try_cast<NodePtr>(root, root_node))
        return nb::none();
    const size_t n = size_t(PyList_GET_SIZE(queue.ptr()));
    std::unordered_map<const Node*, Reached> reached;
    if (!reach(PySequence_Fast_ITEMS(queue.ptr()), n, match.ptr(), reached)) return nb::none();
    nb::list out;
    std::vector<std::pair<const Node*, bool>> stack{{root_node.get(), false}};
    while (!stack.empty()) {
        const auto [node, expanded] = stack.back();
        stack.pop_back();
        auto at = reached.find(node);
        if (expanded) {
            if (at != reached.end())
                for (PyObject* r : at->second.hanging) out.append(nb::handle(r));
            continue;
        }
        stack.emplace_back(node, true);
        if (at == reached.end()) continue;
        std::vector<const Node*> kids = at->second.children;
        if (kids.size() > 1) {  // SGLang: a stable sort of the node's children, in the cache's dict order
            std::unordered_map<const Node*, size_t> place;
            node->children.for_each([&](const radix::Key&, const NodePtr& c) { place.emplace(c.get(), place.size()); });
            for (const Node* c : kids)
                if (place.find(c) == place.end()) return nb::none();  // Python raises KeyError
            std::sort(kids.begin(), kids.end(), [&](const Node* a, const Node* b) {
                const int64_t wa = reached[a].weight, wb = reached[b].weight;
                return wa != wb ? wa > wb : place[a] < place[b];
            });
        }
        for (auto c = kids.rbegin(); c != kids.rend(); ++c) stack.emplace_back(*c, false);
    }
    return out;
}

}  // namespace

void bind_dfs_weight(nb::module_& m) {
    m.def("dfs_order", &dfs_order, nb::arg("queue"), nb::arg("match"), nb::arg("root"),
          "DFSWeight.order_round's order of the queue, or None for inputs it does not take.");
}
