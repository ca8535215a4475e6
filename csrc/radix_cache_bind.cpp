// The compiled radix cache's Python face: the API of auction_gym/radix_cache.py's RadixCache and
// TreeNode, with its argument handling (token_view), its result types (MatchResult, InsertResult)
// and its check (radix_integrity.check_integrity, which reads the heaps through `_heap` and
// friends). Nodes cross as shared pointers: nanobind hands back the same Python object for a node
// while one is alive, so nodes compare and hash by identity as Python's do.
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>

#include "bindings.hpp"
#include "gc_slots.hpp"
#include "py_calls.hpp"
#include "radix_cache.hpp"
#include "token_array.hpp"

namespace nb = nanobind;
using radix::Key;
using radix::Node;
using radix::NodePtr;
using radix::RadixCache;

namespace {

using TokenArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// The Python objects the cache calls, looked up once (after auction_gym.radix_cache has loaded).
struct Python {
    nb::object match_result, insert_result, token_view, contiguous, check_integrity, round_ticks, is_int;
};

const Python &python() {
    static const Python *py = [] {
        nb::module_ cache = nb::module_::import_("auction_gym.radix_cache");
        return new Python{cache.attr("MatchResult"), cache.attr("InsertResult"),
                          nb::module_::import_("auction_gym.request").attr("token_view"),
                          nb::module_::import_("numpy").attr("ascontiguousarray"),
                          nb::module_::import_("auction_gym.radix_integrity").attr("check_integrity"),
                          cache.attr("ROUND_TICKS"), nb::module_::import_("auction_gym._checks").attr("is_int")};
    }();  // never freed: it may outlive the interpreter's teardown of the modules it holds
    return *py;
}

// An instance of the named tuple `type` (MatchResult, InsertResult) made as tuple.__new__ makes
// one, without the Python-level __new__ call, which would cost more than the match itself.
nb::object named_tuple(nb::handle type, std::initializer_list<nb::handle> items) {
    auto *cls = reinterpret_cast<PyTypeObject *>(type.ptr());
    PyObject *out = cls->tp_alloc(cls, static_cast<Py_ssize_t>(items.size()));
    if (!out) throw nb::python_error();
    Py_ssize_t i = 0;
    for (nb::handle item : items) PyTuple_SET_ITEM(out, i++, item.inc_ref().ptr());
    return nb::steal(out);
}

// Tokens as the Python cache reads them (`token_view`), held while the view is used: a native
// int64 buffer (a request's prompt) read in place through the buffer protocol, anything else
// through nanobind's cast (which allocates) or the conversion.
struct TokensArg {
    nb::object object;
    TokenArray array;
    const int64_t *data = nullptr;
    int64_t size = 0;
    radix::Tokens view() const { return {data, size, object}; }
};

TokensArg tokens_of(nb::handle tokens) {
    TokensArg arg{nb::borrow(tokens), {}};
    if ((arg.data = pycall::int64_buffer(tokens, &arg.size))) return arg;
    if (!nb::try_cast(tokens, arg.array, false)) {
        arg.object = python().contiguous(python().token_view(tokens));
        arg.array = nb::cast<TokenArray>(arg.object, false);
    }
    arg.data = arg.array.data();
    arg.size = static_cast<int64_t>(arg.array.shape(0));
    return arg;
}

// Python's `_key`: the token itself for page_size 1 (a key of one token's bytes), else the bytes.
nb::object key_object(const Key &key) {
    if (key.size() == sizeof(int64_t)) {
        int64_t token;
        std::memcpy(&token, key.data(), sizeof token);
        return nb::int_(token);
    }
    return nb::bytes(key.data(), key.size());
}

nb::object entry_key(const radix::Entry &entry, bool by_priority) {
    if (by_priority) return nb::make_tuple(entry.priority, entry.time);
    return nb::int_(entry.time);
}

nb::list heap_list(const std::vector<radix::Entry> &heap, bool by_priority) {
    nb::list out;
    for (const auto &entry : heap) out.append(nb::make_tuple(entry_key(entry, by_priority), entry.serial, entry.node));
    return out;
}

nb::object insert_result(RadixCache &c, nb::handle tokens, nb::handle value, const NodePtr &start, int64_t offset,
                         int64_t priority) {
    TokensArg arg = tokens_of(tokens);
    if (!value.is_none() && static_cast<int64_t>(nb::len(value)) < arg.view().size)
        throw nb::value_error(("value has " + std::to_string(nb::len(value)) + " entries for " +
                               std::to_string(arg.view().size) + " tokens").c_str());
    auto [cached, node] = c.insert(arg.view(), value, start, offset, priority);
    return named_tuple(python().insert_result, {nb::int_(cached), nb::cast(node)});
}

// A prefix length of a prompt of `size` tokens as `insert_prefixes` takes it: an integer
// (`_checks.is_int`: numpy's ints and integral floats too, bools not) in 0..size; -1 otherwise.
int64_t prefix_length(nb::handle length, int64_t size) {
    nb::object value = nb::borrow(length);
    if (!PyLong_CheckExact(length.ptr())) {
        const int integer = PyObject_IsTrue(python().is_int(length).ptr());  // numpy's bool for a numpy float
        if (integer < 0) throw nb::python_error();
        if (!integer) return -1;
        value = nb::steal(PyNumber_Long(length.ptr()));
        if (!value.is_valid()) throw nb::python_error();
    }
    int overflow = 0;
    const long long n = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (n == -1 && PyErr_Occurred()) throw nb::python_error();
    return overflow || n < 0 || n > size ? -1 : n;
}

// radix_cache.RadixCache.insert_prefixes: each prompt's prefix inserted as `insert` inserts its
// slice, with the same checks in the same order, without a slice or a result made per prompt.
void insert_prefixes(RadixCache &c, nb::handle tokens, nb::handle lengths) {
    const size_t n = nb::len(tokens);
    if (nb::len(lengths) != n)
        throw nb::value_error((std::to_string(nb::len(lengths)) + " lengths for " + std::to_string(n) +
                               " token arrays").c_str());
    for (size_t i = 0; i < n; ++i) {
        nb::object t = tokens[i], given = lengths[i];
        const int64_t size = static_cast<int64_t>(nb::len(t));
        const int64_t length = prefix_length(given, size);
        if (length < 0)
            throw nb::value_error(("a prefix of " + nb::cast<std::string>(nb::repr(given)) + " tokens of " +
                                   std::to_string(size)).c_str());
        if (length == 0) continue;
        TokensArg arg = tokens_of(t);
        radix::Tokens view = arg.view();
        view.size = length;
        c.insert(view, nb::none(), nullptr, 0, 0);
    }
}

// radix_cache.RadixCache.peek_prefixes: `peek` of each prompt in order, its result as `peek`
// returns it, in one call (a queue snapshot's matches, in `reproduce`).
nb::list peek_prefixes(RadixCache &c, nb::handle tokens, bool split) {
    nb::list out;
    for (nb::handle t : tokens) {
        TokensArg arg = tokens_of(t);
        out.append(nb::cast(c.peek(arg.view(), nullptr, split)));
    }
    return out;
}

void bind_node(nb::module_ &m) {
    nb::class_<Node>(m, "TreeNode", "A node of the compiled radix cache (radix_cache.TreeNode's fields, read-only).")
        .def_prop_ro("key", [](const Node &n) { return array_of({n.key.begin(), n.key.end()}); })
        .def_prop_ro("value", [](const Node &n) { return n.value; })
        .def_prop_ro("parent", [](const Node &n) { return n.parent; })
        .def_prop_ro("children", [](const Node &n) {
            nb::dict out;
            n.children.for_each([&](const Key &key, const NodePtr &child) { out[key_object(key)] = nb::cast(child); });
            return out;
        })
        .def_ro("depth", &Node::depth)
        .def_ro("lock_ref", &Node::lock_ref)
        .def_ro("last_access", &Node::last_access)
        .def_ro("wait", &Node::wait)
        .def_ro("alive", &Node::alive)
        .def_ro("priority", &Node::priority)
        .def_prop_ro("key_bytes", [](const Node &) { return nb::none(); })
        .def("__len__", [](const Node &n) { return n.key.size(); })
        .def("__repr__", [](const Node &n) {
            return "TreeNode(depth=" + std::to_string(n.depth) + ", edge=" + std::to_string(n.key.size()) +
                   ", lock_ref=" + std::to_string(n.lock_ref) + ", last_access=" + std::to_string(n.last_access) +
                   ", wait=" + std::to_string(n.wait) + ", priority=" + std::to_string(n.priority) +
                   ", alive=" + (n.alive ? "True" : "False") + ")";
        });
}

// What reads the tree: matches, the version and its log of changes, child keys.
void bind_matching(nb::class_<RadixCache> &cls) {
    cls
        .def("match_prefix",
             [](RadixCache &c, nb::handle tokens, const NodePtr &start) {
                 TokensArg arg = tokens_of(tokens);
                 auto [length, node] = c.match_prefix(arg.view(), start);
                 return named_tuple(python().match_result, {nb::int_(length), nb::cast(node), c.path_values(node)});
             },
             nb::arg("tokens"), nb::arg("start").none() = nb::none())
        .def("prefix_len", [](RadixCache &c, nb::handle tokens) { return c.prefix_len(tokens_of(tokens).view()); },
             nb::arg("tokens"))
        .def("prefix_lens",
             [](RadixCache &c, nb::handle prompts) {
                 nb::list out;
                 for (nb::handle tokens : prompts) out.append(c.prefix_len(tokens_of(tokens).view()));
                 return out;
             },
             nb::arg("prompts"))
        .def("peek",
             [](RadixCache &c, nb::handle tokens, const NodePtr &start, bool split) {
                 TokensArg arg = tokens_of(tokens);
                 return c.peek(arg.view(), start, split);
             },
             nb::arg("tokens"), nb::arg("start").none() = nb::none(), nb::arg("split") = false)
        .def_prop_ro("version", [](const RadixCache &c) { return nb::make_tuple(c.log_epoch, c.log.size()); })
        .def("changes_since",
             [](const RadixCache &c, nb::handle cursor) {
                 nb::object now = nb::make_tuple(c.log_epoch, c.log.size());
                 // The cursor read as the Python cache reads it: its epoch compared by Python's !=,
                 // then the log sliced from its position as a list slices (from the end where it
                 // is negative, clamped beyond), TypeError where it is not an index.
                 if (cursor.is_none() || nb::object(cursor[0]).not_equal(nb::int_(c.log_epoch)))
                     return nb::make_tuple(now, nb::none());
                 nb::object from = cursor[1];
                 nb::object slice = nb::steal(PySlice_New(from.ptr(), nullptr, nullptr));
                 Py_ssize_t start = 0, stop = 0, step = 1;
                 if (!slice.is_valid() || PySlice_Unpack(slice.ptr(), &start, &stop, &step) < 0)
                     throw nb::python_error();
                 PySlice_AdjustIndices(Py_ssize_t(c.log.size()), &start, &stop, step);
                 nb::list changes;
                 for (size_t i = size_t(start); i < size_t(stop); ++i) {
                     const auto &[node, key] = c.log[i];
                     changes.append(nb::make_tuple(node, key ? key_object(*key) : nb::none()));
                 }
                 return nb::make_tuple(now, changes);
             },
             nb::arg("cursor").none())
        .def("edge_key",
             [](const RadixCache &c, nb::handle tokens, int64_t pos) -> nb::object {
                 if (pos < 0) throw nb::value_error(("pos must be >= 0, got " + std::to_string(pos)).c_str());
                 TokensArg arg = tokens_of(tokens);
                 if (pos > arg.view().size - c.page_size) return nb::none();
                 return key_object(c.key_at(arg.view().data + pos));
             },
             nb::arg("tokens"), nb::arg("pos"))
        .def("_key",
             [](const RadixCache &c, nb::handle tokens, int64_t pos) {
                 TokensArg arg = tokens_of(tokens);
                 // A key is read whole: a page past either end would be read from outside the array.
                 if (pos < 0 || pos > arg.view().size - c.page_size)
                     throw nb::index_error(("no whole page at " + std::to_string(pos)).c_str());
                 return key_object(c.key_at(arg.view().data + pos));
             });
}

// What changes the tree and its eviction order.
void bind_changes(nb::class_<RadixCache> &cls) {
    cls
        .def("insert",
             [](RadixCache &c, nb::handle tokens, nb::handle value, const NodePtr &start, int64_t priority) {
                 return insert_result(c, tokens, value, start, 0, priority);
             },
             nb::arg("tokens"), nb::arg("value").none() = nb::none(), nb::arg("start").none() = nb::none(),
             nb::arg("priority") = 0)
        .def("extend",
             [](RadixCache &c, const NodePtr &node, nb::handle tokens, nb::handle value, int64_t priority) {
                 if (!node->alive) throw nb::value_error("extend from an evicted node");
                 return insert_result(c, tokens, value, node, node->depth, priority);
             },
             nb::arg("node"), nb::arg("tokens"), nb::arg("value").none() = nb::none(), nb::arg("priority") = 0)
        .def("insert_prefixes", &insert_prefixes, nb::arg("tokens"), nb::arg("lengths"))
        .def("peek_prefixes", &peek_prefixes, nb::arg("tokens"), nb::arg("split") = false)
        .def("raise_priority", &RadixCache::raise_priority, nb::arg("node"), nb::arg("priority"))
        .def("lock", &RadixCache::lock, nb::arg("node"))
        .def("move_lock", &RadixCache::move_lock, nb::arg("old"), nb::arg("new"))
        .def("unlock", &RadixCache::unlock, nb::arg("node"))
        .def("evict",
             [](RadixCache &c, int64_t num_tokens) {
                 // Refused here, not in RadixCache::evict: the engine's own calls pass a shortfall it checked is > 0.
                 if (num_tokens < 0)
                     throw nb::value_error(("num_tokens must be >= 0, got " + std::to_string(num_tokens)).c_str());
                 return c.evict(num_tokens);
             },
             nb::arg("num_tokens"))
        .def("new_round", &RadixCache::new_round)
        .def("stamp_in_round", &RadixCache::stamp_in_round, nb::arg("node"), nb::arg("rank"))
        .def("set_wait", &RadixCache::set_wait, nb::arg("node"), nb::arg("wait"));
}

// The whole tree and the heaps, for tests and check().
void bind_inspection(nb::class_<RadixCache> &cls) {
    cls
        .def("nodes", [](const RadixCache &c) { return nb::iter(nb::cast(c.nodes())); })
        .def("sequences",
             [](const RadixCache &c) {
                 nb::list out;
                 for (auto &tokens : c.sequences()) out.append(array_of(std::move(tokens)));
                 return nb::iter(out);
             })
        .def("check", [](nb::handle self) { python().check_integrity(self, python().round_ticks); })
        .def_prop_ro("_heap", [](const RadixCache &c) { return heap_list(c.heap, c.by_priority); })
        .def_prop_ro("_wait_heap", [](const RadixCache &c) { return heap_list(c.wait_heap, c.by_priority); })
        .def_prop_ro("_waited_touched", [](const RadixCache &c) { return nb::cast(c.waited_touched); })
        .def_ro("_round_start", &RadixCache::round_start)
        .def_ro("_tick", &RadixCache::tick)
        .def("__repr__", [](const RadixCache &c) {
            return "RadixCache(nodes=" + std::to_string(c.node_count) + ", evictable=" +
                   std::to_string(c.evictable_size) + ", protected=" + std::to_string(c.protected_size) +
                   ", page_size=" + std::to_string(c.page_size) + ")";
        });
}

void bind_cache(nb::module_ &m) {
    nb::class_<RadixCache> cls(m, "RadixCache", "The compiled radix cache (radix_cache.RadixCache's API and results).",
                               nb::type_slots(gc_slots<RadixCache>), nb::is_weak_referenceable());
    cls.def("__init__",
             [](RadixCache *self, int64_t page_size, nb::object on_evict, const std::string &policy) {
                 new (self) RadixCache(page_size, std::move(on_evict), policy == "priority");
             },
             nb::arg("page_size"), nb::arg("on_evict").none(), nb::arg("eviction_policy"))
        .def_ro("page_size", &RadixCache::page_size)
        .def_rw("on_evict", &RadixCache::on_evict, nb::arg("on_evict").none())
        .def_prop_ro("eviction_policy", [](const RadixCache &c) { return c.by_priority ? "priority" : "lru"; })
        .def_ro("root", &RadixCache::root)
        .def_ro("evictable_size", &RadixCache::evictable_size)
        .def_ro("protected_size", &RadixCache::protected_size)
        .def_ro("node_count", &RadixCache::node_count)
        .def_prop_ro("total_size", [](const RadixCache &c) { return c.evictable_size + c.protected_size; })
        .def("reset", &RadixCache::reset);
    bind_matching(cls);
    bind_changes(cls);
    bind_inspection(cls);
}

}  // namespace

void bind_radix_cache(nb::module_ &m) {
    bind_node(m);
    bind_cache(m);
}
