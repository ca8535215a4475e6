// The VCG payments of a round decided over the skeleton (radix_auction.RadixTreeAuction.payments and
// _cost_without, smith.index_node and interaction_after_change, factored.FactoredAllocation.own_cost),
// with the Python code's operations in its order.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "payments.hpp"
#include "py_sum.hpp"
#include "short_sort.hpp"

namespace auction_core {

namespace {

// smith.NodeIndex: prefix sums over a node's blocks in their order.
struct NodeIndex {
    std::vector<SortKey> keys;
    std::vector<double> cum_p, cum_s;
};

struct Leaving {
    int64_t rank;
    double s, p;
};

struct Entering {
    SortKey key;
    double s, p;
};

// A changed child coming back to its parent: (child, S, P, F) without the bidder.
struct Changed {
    int64_t child;
    double s, p, f;
};

bool entering_less(const Entering& a, const Entering& b) {
    if (!key_equal(a.key, b.key)) return key_less(a.key, b.key);
    if (a.s != b.s) return a.s < b.s;
    return a.p < b.p;
}

size_t bisect_keys(const std::vector<SortKey>& keys, const SortKey& key) {
    return size_t(std::lower_bound(keys.begin(), keys.end(), key, key_less) - keys.begin());
}

// A bidder's top blocks, (parent node, block), grouped by parent node in the order the nodes were met.
using Tops = std::vector<std::pair<int64_t, int64_t>>;

struct BidderTop {
    int64_t bidder;  // its index among the round's bidders
    std::pair<int64_t, int64_t> top;
};

}  // namespace

struct PricingScratch {
    std::vector<int64_t> bidders, owner, pos, affected, ranks;
    std::vector<BidderTop> tops;
    Tops mine;
    std::vector<NodeIndex> indexes;
    std::vector<double> start, cum_xp, cum_xs;
    std::vector<char> seen, covered;
    std::vector<std::pair<int64_t, Changed>> entering;
    std::vector<Changed> back;
    std::vector<Leaving> gone;
    std::vector<Entering> coming;
};

std::shared_ptr<PricingScratch> new_pricing_scratch() { return std::make_shared<PricingScratch>(); }

namespace {

// The optimal cost without one bidder, piece by piece, its lists in a PricingScratch (each cleared
// where it is filled).
class Pricing {
public:
    Pricing(const Factored& a, bool compensated, PricingScratch& scratch)
        : a_(a), compensated_(compensated), nn_(a.parent.size()), pos_(scratch.pos), indexes_(scratch.indexes),
          start_(scratch.start), covered_(scratch.covered), affected_(scratch.affected), seen_(scratch.seen),
          entering_(scratch.entering), back_(scratch.back), gone_(scratch.gone), coming_(scratch.coming),
          ranks_(scratch.ranks), cum_xp_(scratch.cum_xp), cum_xs_(scratch.cum_xs) {
        pos_.assign(a.s.size(), 0);
        if (indexes_.size() < nn_) indexes_.resize(nn_);
        for (size_t v = 0; v < nn_; ++v) {  // none built yet
            indexes_[v].keys.clear();
            indexes_[v].cum_p.clear();
            indexes_[v].cum_s.clear();
        }
        start_.clear();
    }

    // radix_auction._cost_without, given the bidder's top blocks (`leaving`, as _cost_without takes them).
    double cost_without(const Tops& leaving) {
        find_affected(leaving);  // children before parents
        // The changed children coming back to each affected node, (node, child): few, searched.
        entering_.clear();
        for (int64_t v : affected_) {
            const NodeIndex& index = index_of(v);
            const auto at_v = [v](const auto& top) { return top.first == v; };
            const auto out = std::find_if(leaving.begin(), leaving.end(), at_v);  // v's group, if any
            const auto out_end = std::find_if_not(out, leaving.end(), at_v);
            back_.clear();
            for (const auto& [u, changed] : entering_)
                if (u == v) back_.push_back(changed);
            gone_.clear();
            coming_.clear();
            for (auto b = out; b != out_end; ++b) gone_.push_back({pos_[b->second], a_.s[b->second], a_.p[b->second]});
            for (const Changed& c : back_) {
                gone_.push_back({pos_[c.child], a_.s[c.child], a_.p[c.child]});
                coming_.push_back({block_key(c.s, c.p, a_.tie[c.child]), c.s, c.p});
            }
            const double inter = interaction_after_change(a_.g[v], index);
            double internal = a_.sum_f[v] - sum_of(a_.f, out, out_end);
            for (const Changed& c : back_) internal += c.f - a_.f[c.child];
            if (v == 0) return internal + inter;
            double bid_sum = index.cum_s.back() - sum_of(a_.s, out, out_end);
            double work = index.cum_p.back() - sum_of(a_.p, out, out_end);
            for (const Changed& c : back_) {
                bid_sum += c.s - a_.s[c.child];
                work += c.p - a_.p[c.child];
            }
            const double e = a_.edge_work[v];
            entering_.push_back({a_.parent[v], {v, bid_sum, e + work, e * bid_sum + internal + inter}});
        }
        throw std::logic_error("the root is an ancestor of every removed block");
    }

    // factored.FactoredAllocation.own_cost: F_B + S_B x start_B over the bidder's leaves.
    double own_cost(int64_t bidder) {
        if (start_.empty()) leaf_starts();
        PySum total(compensated_);
        for (size_t k = 0; k < a_.leaf_owner.size(); ++k)
            if (a_.leaf_owner[k] == bidder) total.add(a_.f[nn_ + k] + a_.s[nn_ + k] * start_[k]);
        return total.value();
    }

private:
    const Factored& a_;
    bool compensated_;
    size_t nn_;
    std::vector<int64_t>& pos_;
    std::vector<NodeIndex>& indexes_;  // a node's, built when first read (cum_p empty until then)
    std::vector<double>& start_;
    std::vector<char>& covered_;
    std::vector<int64_t>& affected_;
    std::vector<char>& seen_;
    std::vector<std::pair<int64_t, Changed>>& entering_;
    std::vector<Changed>& back_;
    std::vector<Leaving>& gone_;
    std::vector<Entering>& coming_;
    std::vector<int64_t>& ranks_;
    std::vector<double>& cum_xp_;
    std::vector<double>& cum_xs_;

    // The nodes whose cost changes without the bidder: each top's node and its ancestors.
    void find_affected(const Tops& leaving) {
        affected_.clear();
        const int64_t first = leaving.empty() ? -1 : leaving.front().first;
        const auto at_first = [first](const auto& top) { return top.first == first; };
        if (first >= 0 && std::all_of(leaving.begin(), leaving.end(), at_first)) {  // one node's group
            for (int64_t v = first; v >= 0; v = a_.parent[v]) affected_.push_back(v);
            return;
        }
        seen_.assign(nn_, 0);
        for (const auto& top : leaving)
            for (int64_t v = top.first; v >= 0 && !seen_[v]; v = a_.parent[v]) seen_[v] = 1;
        for (int64_t v = int64_t(nn_) - 1; v >= 0; --v)
            if (seen_[v]) affected_.push_back(v);
    }

    // smith.interaction_after_change: `g` after gone_ leave the node of `index` and coming_ join it.
    double interaction_after_change(double g, const NodeIndex& index) {
        stable_sort_short(gone_.begin(), gone_.end(), [](const Leaving& a, const Leaving& b) {
            if (a.rank != b.rank) return a.rank < b.rank;
            if (a.s != b.s) return a.s < b.s;
            return a.p < b.p;
        });
        const double s_total = index.cum_s.back();
        ranks_.clear();
        cum_xp_.assign(1, 0.0);
        cum_xs_.assign(1, 0.0);
        double strip = 0.0;
        for (const Leaving& x : gone_) {
            strip += x.s * index.cum_p[x.rank] + x.p * (s_total - index.cum_s[x.rank + 1]) - x.s * cum_xp_.back();
            ranks_.push_back(x.rank);
            cum_xp_.push_back(cum_xp_.back() + x.p);
            cum_xs_.push_back(cum_xs_.back() + x.s);
        }
        g -= strip;
        double before_y = 0.0;
        stable_sort_short(coming_.begin(), coming_.end(), entering_less);
        for (const Entering& y : coming_) {
            const size_t at = bisect_keys(index.keys, y.key);
            const size_t j = size_t(std::lower_bound(ranks_.begin(), ranks_.end(), int64_t(at)) - ranks_.begin());
            const double p_before = index.cum_p[at] - cum_xp_[j] + before_y;
            const double s_after = (s_total - index.cum_s[at]) - (cum_xs_.back() - cum_xs_[j]);
            g += y.s * p_before + y.p * s_after;
            before_y += y.p;
        }
        return g;
    }

    double sum_of(const std::vector<double>& x, Tops::const_iterator first, Tops::const_iterator last) const {
        PySum total(compensated_);
        for (; first != last; ++first) total.add(x[first->second]);
        return total.value();
    }

    const NodeIndex& index_of(int64_t v) {
        NodeIndex& index = indexes_[v];
        if (index.cum_p.empty()) {
            const auto& blocks = a_.sorted_blocks[v];
            index.keys.reserve(blocks.size());
            index.cum_p.reserve(blocks.size() + 1);
            index.cum_s.reserve(blocks.size() + 1);
            index.cum_p.push_back(0.0);
            index.cum_s.push_back(0.0);
            for (size_t k = 0; k < blocks.size(); ++k) {
                const int64_t b = blocks[k];
                pos_[b] = int64_t(k);
                index.keys.push_back(a_.key[b]);
                index.cum_p.push_back(index.cum_p.back() + a_.p[b]);
                index.cum_s.push_back(index.cum_s.back() + a_.s[b]);
            }
        }
        return index;
    }

    void leaf_starts() {
        std::vector<char>& covered = covered_;
        covered.assign(nn_, 0);
        covered[0] = 1;
        start_.assign(a_.leaf_owner.size(), 0.0);
        double clock = 0.0;
        for (int64_t k : a_.leaf_order) {
            for (int64_t v = a_.leaf_node[k]; !covered[v]; v = a_.parent[v]) {
                covered[v] = 1;
                clock += a_.edge_work[v];
            }
            start_[k] = clock;
            clock += a_.p[nn_ + k];
        }
    }
};

}  // namespace

std::vector<double> vcg_payments(const Factored& a, const std::vector<int64_t>& priced, bool compensated,
                                 PricingScratch& scratch) {
    // Per bidder, its top blocks grouped by parent node, in each node's sorted order.
    const size_t nn = a.parent.size();
    const int64_t mixed = -1;  // index into `bidders` of a block's owner; -1: more than one
    std::vector<int64_t>& bidders = scratch.bidders;  // in order of first leaf; a round has few, so searched
    bidders.clear();
    const auto index_of = [&bidders](int64_t bidder) {
        return int64_t(std::find(bidders.begin(), bidders.end(), bidder) - bidders.begin());
    };
    std::vector<int64_t>& owner = scratch.owner;
    owner.assign(a.s.size(), mixed);
    for (size_t k = 0; k < a.leaf_owner.size(); ++k) {
        const int64_t i = index_of(a.leaf_owner[k]);
        if (i == int64_t(bidders.size())) bidders.push_back(a.leaf_owner[k]);
        owner[nn + k] = i;
    }
    std::vector<BidderTop>& tops = scratch.tops;  // every bidder's, each bidder's in its order
    tops.clear();
    for (size_t v = nn; v-- > 0;) {
        const auto& blocks = a.sorted_blocks[v];
        bool one = true;
        for (int64_t b : blocks) one = one && owner[b] == owner[blocks.front()];
        if (one) {
            owner[v] = owner[blocks.front()];  // one bidder, or mixed for a lone mixed child
            continue;
        }
        for (int64_t b : blocks)
            if (owner[b] != mixed) tops.push_back({owner[b], {int64_t(v), b}});
    }
    Pricing pricing(a, compensated, scratch);
    const double cost = a.f[0];
    std::vector<double> out;
    out.reserve(priced.size());
    for (int64_t bidder : priced) {
        const int64_t i = index_of(bidder);
        if (i == int64_t(bidders.size())) throw std::invalid_argument("a priced bidder without a request in the round");
        scratch.mine.clear();
        for (const BidderTop& t : tops)
            if (t.bidder == i) scratch.mine.push_back(t.top);
        const double without = pricing.cost_without(scratch.mine);
        out.push_back((cost - pricing.own_cost(bidder)) - without);
    }
    return out;
}

}  // namespace auction_core
