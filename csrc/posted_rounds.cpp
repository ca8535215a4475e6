// The rounds of a posted-price design over the choices its book holds (posted_book.hpp):
// HeldChoices.paying, tiers.py's _buy, _stepped_down and _walk, congestion.py's round, the bills and
// the order, in their orders. Whether a request bids is its multiplier x weight > 0, which held.py's
// shortcuts (`Holding.all_bid`, a bidder at multiplier 0) only skip computing.
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "posted_book.hpp"
#include "request_slots.hpp"

namespace posted {

using request_slots::plain_int;

namespace {

constexpr double INF = std::numeric_limits<double>::infinity();
constexpr double MARGIN = 1.0 - 1.0 / double(1 << 26);  // tiers._MARGIN
constexpr int NONE = INT_MIN;                           // a request not stepped down this round

// tiers.best_tier over the first `tiers` tiers.
int best_tier(double bid, int64_t length, const int64_t* ahead, const double* prices, int tiers, double seconds,
              double budget) {
    int best = -1;
    double best_cost = INF;
    for (int k = 0; k < tiers; ++k) {
        if (prices[k] * double(length) > budget) break;  // prices increase: no dearer tier is covered either
        const double cost = bid * double(ahead[k]) * seconds + prices[k] * double(length);
        if (cost < best_cost) best = k, best_cost = cost;
    }
    return best;
}

void set_item(nb::dict& d, nb::handle key, nb::handle value) {
    if (PyDict_SetItem(d.ptr(), key.ptr(), value.ptr()) != 0) throw nb::python_error();
}

}  // namespace

// HeldChoices.paying: each holding's multiplier and each held request's class (-1: it bids 0)
// this round, and the paying ones per choice.
std::vector<int64_t> Book::paying(Round& r) {
    std::vector<int64_t> counts(size_t(choices_), 0);
    for (int32_t h = hfirst_; h >= 0; h = holdings_[size_t(h)].next) {
        Holding& b = holdings_[size_t(h)];
        b.m = r.market ? r.alpha[size_t(b.bidder)] : 1.0;
        for (int32_t s = b.first; s >= 0; s = slots_[size_t(s)].mnext) {
            Slot& x = slots_[size_t(s)];
            x.cls = b.m * weight(x) > 0 ? x.rank : -1;
            if (x.cls >= 0) ++counts[size_t(x.cls)];
        }
    }
    return counts;
}

// A new request held with choice `k`, its bid `bid`: its class this round, and its holding's multiplier.
void Book::hold_new(const Round& r, const Fresh& f, int k, double bid) {
    hold(f, k);
    Slot& x = slots_[size_t(last_)];
    if (x.holding >= 0) holdings_[size_t(x.holding)].m = r.market ? r.alpha[size_t(f.bidder)] : 1.0;
    x.cls = x.rank >= 0 && bid > 0 ? x.rank : -1;
}

// ServiceTiers._buy: returns the paying requests waiting in tiers >= k, for each k, after them.
std::vector<int64_t> Book::buy_tiers(Round& r, std::vector<int64_t> counts) {
    const int tiers = choices_;
    std::vector<int64_t> ahead(size_t(tiers), 0);
    for (int j = 0; j < tiers; ++j)
        for (int i = j; i < tiers; ++i) ahead[size_t(j)] += counts[size_t(i)];
    for (const Fresh& f : r.fresh) {
        const double b = r.market ? r.alpha[size_t(f.bidder)] * f.urgency : f.bid;
        int k = -1;
        if (b > 0) {
            const double budget = r.budgets ? r.left[size_t(f.bidder)] : INF;
            k = best_tier(b, f.length, ahead.data(), prices_.data(), tiers, seconds_, budget);
        }
        if (k >= 0) {
            for (int j = 0; j <= k; ++j) ++ahead[size_t(j)];
        } else {  // bid 0, or no tier covered: the cheapest, unpaid while it is not covered
            k = 0;
        }
        hold_new(r, f, k, b);
    }
    return ahead;
}

// The queue's positions in the order inside a tier: the queue's, or the longest cached prefix
// first (a stable sort, as `sorted(..., reverse=True)` keeps equal keys in order).
std::vector<int32_t> Book::inside(const Round& r, nb::handle lens) const {
    std::vector<int32_t> order(r.queue.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
    if (!lens.is_none()) {
        std::vector<int64_t> len(order.size());
        for (size_t i = 0; i < len.size(); ++i) plain_int(PyList_GET_ITEM(lens.ptr(), Py_ssize_t(i)), len[i]);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return len[size_t(a)] > len[size_t(b)]; });
    }
    return order;
}

// ServiceTiers._walk for one bidder's requests `walked` (queue positions in the inside order):
// writes the tier of each whose tier its budget `left` steps down into `stepped` (by slot).
void Book::walk(const Round& r, const std::vector<int32_t>& walked, const std::vector<int64_t>& ahead, double left,
                std::vector<int>& stepped) const {
    const size_t n = walked.size();
    std::vector<int> paying(n), tiers(n);
    std::vector<std::vector<size_t>> turns(static_cast<size_t>(choices_));  // each tier's requests, walked in its turn
    for (size_t i = 0; i < n; ++i) {
        paying[i] = tiers[i] = slots_[size_t(r.at[size_t(walked[i])])].cls;
        if (paying[i] >= 0) turns[size_t(paying[i])].push_back(i);
    }
    for (int k = choices_ - 1; k >= 0; --k) {
        std::vector<size_t>& turn = turns[size_t(k)];
        std::sort(turn.begin(), turn.end());  // those stepped down merge in the inside order
        for (size_t i : turn) {
            const Slot& x = slots_[size_t(r.at[size_t(walked[i])])];
            const double due = prices_[size_t(k)] * double(x.length);
            if (due <= left) {
                left -= due;
                continue;
            }
            const int j = best_tier(bid(r, x), x.length, ahead.data(), prices_.data(), k, seconds_, left);
            tiers[i] = j;
            if (j >= 0) turns[size_t(j)].push_back(i);
        }
    }
    for (size_t i = 0; i < n; ++i)
        if (tiers[i] != paying[i]) stepped[size_t(r.at[size_t(walked[i])])] = tiers[i];
}

// ServiceTiers._stepped_down: marks the holdings whose budget left covers none of their bills
// (`out`) and writes the stepped-down tiers (`stepped`).
void Book::step_down(Round& r, const std::vector<int32_t>& order, const std::vector<int64_t>& ahead,
                     std::vector<char>& out, std::vector<int>& stepped) {
    std::vector<int32_t> walking;
    for (int32_t h = hfirst_; h >= 0; h = holdings_[size_t(h)].next) {
        const Holding& b = holdings_[size_t(h)];
        if (b.m == 0) continue;  // none of its requests bids: nothing billed
        const double left = r.left[size_t(b.bidder)];
        double total = 0.0;
        for (int k = 0; k < choices_; ++k) total += prices_[size_t(k)] * double(b.tokens[size_t(k)]);
        if (total <= left * MARGIN && total < INF) continue;
        if (prices_[0] * double(b.shortest) > left) {
            out[size_t(h)] = 1;  // each paying request fails its turn, and best_tier then finds no tier
            continue;
        }
        walking.push_back(h);
    }
    if (walking.empty()) return;
    std::vector<std::vector<int32_t>> walked(holdings_.size());
    for (int32_t pos : order) {
        const Slot& x = slots_[size_t(r.at[size_t(pos)])];
        if (x.rank >= 0) walked[size_t(x.holding)].push_back(pos);
    }
    for (int32_t h : walking) walk(r, walked[size_t(h)], ahead, r.left[size_t(holdings_[size_t(h)].bidder)], stepped);
}

// The queue by class, high to low, each in the inside order `order` (a stable sort by class).
nb::list Book::ordered(const Round& r, const std::vector<int32_t>& order) const {
    std::vector<size_t> start(size_t(choices_) + 2, 0);  // class c at index choices_ - 1 - c
    for (int32_t pos : order) ++start[size_t(choices_ - slots_[size_t(r.at[size_t(pos)])].cls)];
    for (size_t c = 1; c < start.size(); ++c) start[c] += start[c - 1];
    nb::list out = nb::steal<nb::list>(PyList_New(Py_ssize_t(order.size())));
    if (!out.is_valid()) throw nb::python_error();
    for (int32_t pos : order) {
        const size_t at = start[size_t(choices_ - 1 - slots_[size_t(r.at[size_t(pos)])].cls)]++;
        PyObject* request = r.queue[size_t(pos)];
        Py_INCREF(request);
        PyList_SET_ITEM(out.ptr(), Py_ssize_t(at), request);
    }
    return out;
}

nb::object Book::tiers_round(nb::handle queue, nb::handle joined, nb::handle left, nb::handle cache,
                             nb::handle multipliers, nb::handle remaining, nb::handle lens) {
    Round r;
    if (!read(r, queue, joined, left, cache, multipliers, remaining)) return nb::none();
    if (!lens.is_none()) {
        if (!PyList_CheckExact(lens.ptr()) || size_t(PyList_GET_SIZE(lens.ptr())) != r.queue.size()) return nb::none();
        int64_t v;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(lens.ptr()); ++i)
            if (!plain_int(PyList_GET_ITEM(lens.ptr(), i), v)) return nb::none();
    }
    follow(r, cache, !r.market);
    std::vector<int64_t> ahead = buy_tiers(r, paying(r));
    for (size_t i = 0; i < r.fresh.size(); ++i) r.at[size_t(r.fresh_at[i])] = by_obj_.at(r.fresh[i].request);
    for (size_t i = 0; i < r.at.size(); ++i)
        if (r.at[i] < 0) r.at[i] = by_obj_.at(r.queue[i]);  // another object under a held id
    const std::vector<int32_t> order = inside(r, lens);
    std::vector<char> out(holdings_.size(), 0);
    std::vector<int> stepped(slots_.size(), NONE);
    if (r.budgets) step_down(r, order, ahead, out, stepped);
    nb::dict bills;
    for (int32_t h = hfirst_; h >= 0; h = holdings_[size_t(h)].next) {
        const Holding& b = holdings_[size_t(h)];
        for (int32_t s = b.first; s >= 0; s = slots_[size_t(s)].mnext) {
            Slot& x = slots_[size_t(s)];
            if (out[size_t(h)]) {
                x.cls = -1;
                continue;
            }
            if (!(b.m * weight(x) > 0)) continue;
            const int k = stepped[size_t(s)];
            if (k == NONE) {
                set_item(bills, x.id_obj, x.bill);
            } else {
                x.cls = k;
                if (k >= 0) set_item(bills, x.id_obj, bill(x.bidder_obj.ptr(), prices_[size_t(k)] * double(x.length)));
            }
        }
    }
    return nb::make_tuple(ordered(r, order), bills);
}

nb::object Book::congestion_round(nb::handle queue, nb::handle joined, nb::handle left, nb::handle cache,
                                  nb::handle multipliers, double price) {
    Round r;
    if (!read(r, queue, joined, left, cache, multipliers, nb::none())) return nb::none();
    follow(r, cache, !r.market);
    const std::vector<int64_t> counts = paying(r);
    int64_t paid = counts[0] + counts[1], bought = counts[1];
    const double prices[2] = {0.0, price};
    for (const Fresh& f : r.fresh) {
        const double b = r.market ? r.alpha[size_t(f.bidder)] * f.urgency : f.bid;
        int64_t ahead[2] = {paid, bought};
        const bool chosen = b > 0 && best_tier(b, f.length, ahead, prices, 2, seconds_, INF) == 1;
        paid += b > 0;
        bought += chosen;
        hold_new(r, f, int(chosen), b);
    }
    for (size_t i = 0; i < r.fresh.size(); ++i) r.at[size_t(r.fresh_at[i])] = by_obj_.at(r.fresh[i].request);
    for (size_t i = 0; i < r.at.size(); ++i)
        if (r.at[i] < 0) r.at[i] = by_obj_.at(r.queue[i]);
    nb::dict bills;
    for (int32_t h = hfirst_; h >= 0; h = holdings_[size_t(h)].next) {
        const Holding& b = holdings_[size_t(h)];
        for (int32_t s = b.first; s >= 0; s = slots_[size_t(s)].mnext) {
            const Slot& x = slots_[size_t(s)];
            if (x.choice == 1 && b.m * weight(x) > 0)
                set_item(bills, x.id_obj, bill(b.bidder_obj.ptr(), price * double(x.length)));
        }
    }
    std::vector<int32_t> order(r.queue.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
    return nb::make_tuple(ordered(r, order), bills, bought);
}

}  // namespace posted
