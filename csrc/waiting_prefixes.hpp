// The compiled prefix matcher and waiting prefixes: auction_gym/prefix_matcher.py (PrefixMatcher)
// and waiting_prefixes.py (WaitingPrefixes) operation for operation, on the compiled cache's nodes
// (docs/design.md section 8). The Python modules' docstrings state the semantics; this follows their
// code, name for name. What Python reads back (the match, `requests`, `length_of`, the lists of
// the last update) is kept in Python dicts and lists, changed in the Python reference's order, so
// that their iteration order is the reference's too; a match only C++ reads is kept in C++ alone
// (`keeps_match`, docs/engine.md section 8).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/shared_ptr.h>

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "radix_cache.hpp"

namespace radix {

// A child key the request follows out of its end node, or kNoKey when its tokens end there (Python's
// None): a real key always holds a whole page of int64 tokens.
inline const Key kNoKey;

class PrefixMatcher {
public:
    // keeps_match: whether `match` (`_match`) is kept as a Python dict request by request. The waiting
    // prefixes' own matcher keeps it in C++ only (`held`), as nothing reads it there round after round:
    // its `_match` stays empty and `update` builds the dict it returns.
    PrefixMatcher(bool split, bool whole_prompt, bool keeps_match = true);

    nb::dict update(nb::handle queue, nb::handle cache, nb::handle changes);
    void match_queue(nb::handle queue, nb::handle cache, nb::handle changes);  // `update` less its result
    const NodePtr &node_of(int64_t rid) const { return held.at(rid).node; }  // where its match ends
    int64_t length(int64_t rid) const { return held.at(rid).length; }      // its `length_of`
    // The Python objects it holds, for the garbage collector (a cache's `on_evict` may hold it
    // back): `release` lets go of them, as a Python object's tp_clear does.
    template <class F> void for_each_object(F &&f) const {
        for (nb::handle o : std::initializer_list<nb::handle>{match, requests, length_of, splits, dropped, added,
                                                              joined, rematched, left, cache_object, objs})
            f(o);
    }
    void release();

    bool split, whole_prompt, keeps_match;
    nb::dict match;  // request id -> (length, node)
    nb::dict requests, length_of, splits;
    nb::list dropped, added, joined, rematched;
    nb::object left;
    RadixCache *cache = nullptr;  // `cache_object`'s

private:
    struct Held {
        NodePtr node;
        int64_t length;
        uint64_t peeked;  // when it was matched: `match`'s order, a dict's insertion order
    };
    std::vector<int64_t> affected(std::size_t from) const;
    nb::dict match_of_held() const;
    void peek(nb::handle request, const NodePtr &start);
    NodePtr forget(int64_t rid);

    nb::object cache_object, objs;  // objs: the last queue's requests (a set)
    bool has_cursor = false;
    int64_t cursor_epoch = 0;
    std::size_t cursor_pos = 0;
    uint64_t peeks = 0;
    std::unordered_map<int64_t, Held> held;
    // The requests whose match ends at a node, each with the child key it follows out of it: a few a
    // node, in no order (affected() sorts what it reads), kept in one flat vector rather than a hash
    // map of sets by key, which a new match would allocate.
    struct Hanging {
        Key next;
        int64_t rid;
    };
    std::unordered_map<const Node *, std::vector<Hanging>> hanging;
};

class WaitingPrefixes {
public:
    WaitingPrefixes();

    nb::object refresh(nb::handle waiting, nb::handle cache, nb::handle changes);
    nb::object lengths(nb::handle queue, nb::handle cache);
    nb::object delta_since(int64_t serial) const;
    NodePtr start(nb::handle request, int64_t limit) const;
    nb::dict ranks() const;
    template <class F> void for_each_object(F &&f) const {
        matcher.for_each_object(f);
        for (nb::handle o : {cache_object, lengths_queue, lengths_out, refreshed}) f(o);
        for (const nb::object &delta : deltas) f(delta);
    }
    void release();

    PrefixMatcher matcher{true, true, false};  // its match read in C++ only (node_of, length)
    int64_t serial = 0;

private:
    void reset();
    void mark(int64_t rid, const NodePtr &node);
    void unmark(int64_t rid);
    nb::object delta(std::size_t k) const;

    nb::object cache_object, lengths_queue, lengths_out, refreshed;
    RadixCache *cache = nullptr;
    bool has_version = false;
    int64_t version_epoch = 0;
    std::size_t version_pos = 0;
    int64_t known_from = 0, next_rank = 0;
    struct Ranked {
        int64_t rank;
        NodePtr node;  // where it is marked, null where it is not
    };
    std::unordered_map<int64_t, Ranked> ranked;  // request id -> its rank and its mark, in one lookup
    // The ranks waiting at a node, ascending: a few each, kept in one small vector rather than a tree.
    std::unordered_map<const Node *, std::vector<int64_t>> ranks_at;
    std::deque<nb::object> deltas;  // (joined, left, rematched) tuples, the latest last
};

// "id", interned (py_calls.hpp), and a request's id read by it.
nb::handle id_name();
int64_t id_of(nb::handle request);

// `requests` sorted by `request.fcfs_key`, by Python's own sort (stable, as the reference sorts).
nb::object sorted_by_arrival(nb::handle requests);

// A compiled cache, or TypeError: the compiled matcher reads the compiled cache's nodes only.
RadixCache *compiled_cache(nb::handle cache, const char *who);

}  // namespace radix
