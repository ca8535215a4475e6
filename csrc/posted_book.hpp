// The choices a posted-price design's waiting requests hold (auction_gym/pricing/held.py's
// HeldChoices) and a round of each design over them in one call (tiers.py's ServiceTiers,
// congestion.py's CongestionPricing), for plain inputs (docs/design.md section 8): the same orders
// and bills, every double computed with the same operations in the same order.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace posted {

namespace nb = nanobind;

// A request about to be held, its fields read and checked (exact ints and floats, int64 tokens).
struct Fresh {
    PyObject* request;
    PyObject* id_obj;
    PyObject* bidder_obj;
    int64_t id, bidder, length;
    double urgency, bid;
};

// A bill: (bidder, amount), a new tuple.
nb::object bill(PyObject* bidder, double amount);

class Book {
public:
    // `prices`: each choice's price per prompt token when fixed (tiers), empty otherwise.
    Book(int choices, std::vector<double> prices, double seconds);

    // ServiceTiers.decide_round after its multipliers' check: (order, bills), or None, with
    // nothing changed, for inputs that are not plain (then `held` hands the state to Python).
    // `joined`, `left`: the round's changes (None: not given); `lens`: the prefix lengths (lpm), or None.
    nb::object tiers_round(nb::handle queue, nb::handle joined, nb::handle left, nb::handle cache,
                           nb::handle multipliers, nb::handle remaining, nb::handle lens);
    // CongestionPricing.decide_round at `price`, but the price's move: (order, bills, bought), or None.
    nb::object congestion_round(nb::handle queue, nb::handle joined, nb::handle left, nb::handle cache,
                                nb::handle multipliers, double price);
    // (request, choice, urgency, bid, bidder, prompt_len) of each held request in HeldChoices.request's
    // order, its fields as read when it joined (held.py), whether bids were the requests' own,
    // and the engine's cache of the last round: what HeldChoices needs to go on.
    nb::tuple held() const;

    template <class F> void for_each_object(F f) const {
        f(cache_);
        for (const Slot& s : slots_) f(s.request), f(s.id_obj), f(s.bidder_obj), f(s.bill);
        for (const Holding& h : holdings_) f(h.bidder_obj);
    }
    void release();

private:
    struct Slot {  // one held request
        nb::object request, id_obj, bidder_obj, bill;  // bill: (bidder, price x length), fixed prices only
        int64_t id = 0, bidder = 0, length = 0;
        double urgency = 0.0, bid = 0.0;
        int choice = 0, rank = -1;  // rank: its choice if it weighs > 0, else -1
        int cls = -1;               // its class in the round being decided
        int32_t prev = -1, next = -1, mprev = -1, mnext = -1;  // the held order; its bidder's members'
        int32_t holding = -1;
    };
    struct Holding {  // held.py's Holding: one bidder's held requests that weigh > 0
        nb::object bidder_obj;
        int64_t bidder = 0;
        std::vector<int64_t> count, tokens;
        int64_t shortest = INT64_MAX;
        int32_t first = -1, last = -1, size = 0, prev = -1, next = -1;
        double m = 0.0;  // its multiplier in the round being decided
    };
    // What a round reads before it changes anything.
    struct Round {
        std::vector<PyObject*> queue;
        std::vector<int32_t> at;  // each queue position's slot (-1: not held yet)
        std::vector<double> alpha, left;
        bool market = false, budgets = false, follows = false;
        std::vector<int32_t> gone;                   // held slots that leave
        std::vector<std::pair<int32_t, Fresh>> swap;  // another object under a held id, in queue order
        std::vector<Fresh> fresh;                     // the new ones, in order
        std::vector<int32_t> fresh_at;                // their queue positions (-1: not in the queue)
        nb::object keep;                              // the queue, joined and left, kept alive
    };

    int choices_;
    std::vector<double> prices_;
    double seconds_;
    bool replay_ = false;
    nb::object cache_ = nb::none();
    std::vector<Slot> slots_;
    std::vector<int32_t> free_slots_;
    int32_t first_ = -1, last_ = -1, size_ = 0;
    std::unordered_map<int64_t, int32_t> by_id_;
    std::unordered_map<PyObject*, int32_t> by_obj_;
    std::vector<Holding> holdings_;
    std::vector<int32_t> free_holdings_;
    int32_t hfirst_ = -1, hlast_ = -1;
    std::unordered_map<int64_t, int32_t> holding_of_;

    bool read(Round& r, nb::handle queue, nb::handle joined, nb::handle left, nb::handle cache,
              nb::handle multipliers, nb::handle remaining);
    int leads_to(Round& r, nb::handle joined, nb::handle left) const;
    bool compared(Round& r) const;
    bool in_range(const Round& r, int64_t bidder) const;
    void follow(Round& r, nb::handle cache, bool replay);
    void hold(const Fresh& f, int k);
    void hold_new(const Round& r, const Fresh& f, int k, double bid);
    int drop(int32_t s);
    double weight(const Slot& s) const { return replay_ ? s.bid : s.urgency; }
    double bid(const Round& r, const Slot& s) const { return r.market ? r.alpha[size_t(s.bidder)] * s.urgency : s.bid; }
    std::vector<int64_t> paying(Round& r);
    std::vector<int64_t> buy_tiers(Round& r, std::vector<int64_t> counts);
    std::vector<int32_t> inside(const Round& r, nb::handle lens) const;
    void step_down(Round& r, const std::vector<int32_t>& order, const std::vector<int64_t>& ahead,
                   std::vector<char>& out, std::vector<int>& stepped);
    void walk(const Round& r, const std::vector<int32_t>& walked, const std::vector<int64_t>& ahead, double left,
              std::vector<int>& stepped) const;
    nb::list ordered(const Round& r, const std::vector<int32_t>& order) const;
};

}  // namespace posted
