// The queue tree as the radix auction's allocator drives it (mechanism/compiled_tree.py): the
// requests held by slot, and a round's changes found and applied in one call, with the checks of
// incremental_tree.IncrementalQueueTree.update in its order (docs/design.md section 8).
#pragma once

#include <nanobind/nanobind.h>

#include <unordered_map>
#include <vector>

#include "incremental_tree.hpp"
#include "payments.hpp"
#include "round_tree_inputs.hpp"

namespace auction_core {

// A round decided over the skeleton, kept to price it: the allocation and its admission order
// as the requests the tree held when it was decided.
struct FactoredRound {
    Factored a;
    nanobind::list admission;
    // A round market_round decided: each bidder's requests in the queue, each request's bid (made a
    // Python list only when read) and the cached lengths (a list, or None when not costed).
    std::vector<int64_t> queued;
    std::vector<double> bids;
    nanobind::object lens = nanobind::none();
    std::shared_ptr<PricingScratch> pricing;  // its tree's, which every round of the tree shares
};

class RoundTree {
public:
    // `validate`: validation.validate_requests, which checks the requests that join and
    // returns their token arrays, as the Python tree calls it.
    RoundTree(double request_work, bool costed, bool cache_ties, nanobind::object validate);

    // IncrementalQueueTree.update without a delta: the queue compared with the tree's.
    void update(nanobind::handle requests, nanobind::handle bids, nanobind::handle lens);
    // IncrementalQueueTree._follow: the queue's reported changes (QueueDelta's lists and
    // length_of); only the bids are compared over the queue.
    void follow(nanobind::handle requests, nanobind::handle bids, nanobind::handle joined,
                nanobind::handle left, nanobind::handle rematched, nanobind::handle length_of);
    // A market's round in one call (radix_auction.RadixTreeAuction.admit on the compiled core):
    // the bids alpha[bidder] x urgency and the cached lengths (of `lens_of`) read over the queue,
    // the tree brought to it by its changes (`follow`, given the urgencies), the round decided over
    // the skeleton, and its Python values made as radix_auction.RadixTreeAuction.admit returns them
    // (round_tree_market.cpp: the order, a new list; a CompiledRound holding the queue, a new list,
    // and a FactoredAllocation of the FactoredRound, which holds the bids and lengths). None, with
    // nothing changed, when an input is not of the plain kinds (exact floats, int bidders in range,
    // a length for every request), which the Python layers handle and refuse with their own errors. `delta`: the
    // queue's changes (a QueueDelta, its lists and length_of read as `follow` takes them). A
    // TypeError or ValueError the round raises is named as CompiledQueueTree.update names it:
    // validate_requests(requests) raises its own where it finds the culprit.
    nanobind::object market_round(nanobind::handle requests, nanobind::handle multipliers, nanobind::handle delta,
                                  nanobind::handle lens_of);
    // What policy.round_bids, WaitingRound.prefix_lens, validation.validate_requests and check_bids
    // find for a market's round of one request (radix_auction.RadixTreeAuction._lone_round): when they
    // would take its inputs as they are, its Python values made as RadixTreeAuction.admit returns
    // them (the order; a LoneRound holding `requests`, [bid], [cached length] or None when not costed,
    // and an OrderedRound); None, nothing raised, otherwise.
    nanobind::object lone_round(nanobind::handle requests, nanobind::handle multipliers,
                                nanobind::handle lens_of) const;
    nanobind::list order() const;
    FactoredRound factored(const std::vector<double>& alpha);
    const QueueTree& tree() const { return tree_; }

private:
    // What is kept of a request in a slot: what `update` compares.
    struct Held {
        nanobind::object request;
        nanobind::object source;  // its tokens as given; None: writeable, placed again every round
        int64_t rid = 0;
        double bid = 0.0;
        int64_t cached = 0;
    };
    // A request about to join, checked, not yet given a slot.
    struct Fresh {
        nanobind::object request, source;
        Joining joining;
    };

    // market_round over `queue`, the list of the call's own.
    nanobind::object decide_market_round(nanobind::handle queue, const std::vector<double>& alpha,
                                         nanobind::handle joined, nanobind::handle left, nanobind::handle rematched,
                                         nanobind::handle length_of, nanobind::handle lens_of);

    QueueTree tree_;
    std::shared_ptr<PricingScratch> pricing_ = new_pricing_scratch();
    bool costed_;
    nanobind::object validate_;
    PyTypeObject* ndarray_type_;  // numpy.ndarray, which lives as long as the interpreter
    std::vector<Held> held_;  // by slot; request unset: a free slot
    std::vector<int32_t> free_;
    std::unordered_map<PyObject*, int32_t> slot_of_;  // by request identity
    std::unordered_map<int64_t, int32_t> by_rid_;

    int32_t slot(PyObject* request) const;
    // The prompts of `fresh` when validate_requests' fast path takes each request as it is (a
    // float bid finite and >= 0, an int id seen once, a non-empty int64 numpy array); else unset.
    nanobind::object plain(const std::vector<PyObject*>& fresh) const;
    // Blocks of the requests `fresh` that join, at positions `at` of the queue whose bids are `bid`.
    std::vector<Fresh> fresh_blocks(const std::vector<PyObject*>& fresh, const round_inputs::QueueBids& bid,
                                    const std::vector<Py_ssize_t>& at, const std::vector<int64_t>& lens,
                                    const std::vector<int32_t>& gone);
    // `follow` of the bids `bid`; `owned`: `requests` is a list this call made and holds alone,
    // read in place.
    void follow_bids(nanobind::handle requests, const round_inputs::QueueBids& bid, nanobind::handle joined,
                     nanobind::handle left, nanobind::handle rematched, nanobind::handle length_of,
                     bool owned = false);
    // The block of `request` (its id `rid`) with the checked prompt `tokens`; `tokens_read`: they are
    // the request's `tokens` as read this call, kept as its source without reading them again.
    Fresh new_block(PyObject* request, nanobind::handle rid, nanobind::handle tokens, double bid, int64_t cached,
                    bool tokens_read = false);
    void place(const std::vector<int32_t>& gone, std::vector<Fresh>& added, const std::vector<int32_t>& rebid);
    nanobind::list requests(const std::vector<int32_t>& slots) const;  // the requests in `slots`
};

}  // namespace auction_core
