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

double interaction_after_change(double g, const NodeIndex& index, std::vector<Leaving> leaving,
                                std::vector<Entering> entering) {
    stable_sort_short(leaving.begin(), leaving.end(), [](const Leaving& a, const Leaving& b) {
        if (a.rank != b.rank) return a.rank < b.rank;
        if (a.s != b.s) return a.s < b.s;
        return a.p < b.p;
    });
    const double s_total = index.cum_s.back();
    std::vector<int64_t> ranks;
    std::vector<double> cum_xp{0.0}, cum_xs{0.0};
    double strip = 0.0;
    for (const Leaving& x : leaving) {
        strip += x.s * index.cum_p[x.rank] + x.p * (s_total - index.cum_s[x.rank + 1]) - x.s * cum_xp.back();
        ranks.push_back(x.rank);
        cum_xp.push_back(cum_xp.back() + x.p);
        cum_xs.push_back(cum_xs.back() + x.s);
    }
    g -= strip;
    double before_y = 0.0;
    stable_sort_short(entering.begin(), entering.end(), entering_less);
    for (const Entering& y : entering) {
        const size_t at = bisect_keys(index.keys, y.key);
        const size_t j = size_t(std::lower_bound(ranks.begin(), ranks.end(), int64_t(at)) - ranks.begin());
        const double p_before = index.cum_p[at] - cum_xp[j] + before_y;
        const double s_after = (s_total - index.cum_s[at]) - (cum_xs.back() - cum_xs[j]);
        g += y.s * p_before + y.p * s_after;
        before_y += y.p;
    }
    return g;
}

class Pricing {
public:
    Pricing(const Factored& a, bool compensated)
        : a_(a), compensated_(compensated), nn_(a.parent.size()), pos_(a.s.size(), 0), indexes_(nn_) {}

    // The optimal cost without one bidder, given its top blocks grouped by parent node (in the order
    // the nodes were met) as radix_auction._cost_without takes them.
    double cost_without(const std::vector<std::pair<int64_t, std::vector<int64_t>>>& leaving) {
        std::vector<int64_t> affected;  // children before parents
        if (leaving.size() == 1) {
            for (int64_t v = leaving.front().first; v >= 0; v = a_.parent[v]) affected.push_back(v);
        } else {
            std::vector<char> seen(nn_, 0);
            for (const auto& top : leaving)
                for (int64_t v = top.first; v >= 0 && !seen[v]; v = a_.parent[v]) seen[v] = 1;
            for (int64_t v = int64_t(nn_) - 1; v >= 0; --v)
                if (seen[v]) affected.push_back(v);
        }
        // The changed children coming back to each affected node (a round has few: a list, searched).
        std::vector<std::pair<int64_t, std::vector<Changed>>> entering;
        const auto entering_at = [&entering](int64_t v) -> std::vector<Changed>& {
            for (auto& [u, changed] : entering)
                if (u == v) return changed;
            return entering.emplace_back(v, std::vector<Changed>{}).second;
        };
        const std::vector<int64_t> none;
        for (int64_t v : affected) {
            const NodeIndex& index = index_of(v);
            const auto found =
                std::find_if(leaving.begin(), leaving.end(), [v](const auto& top) { return top.first == v; });
            const std::vector<int64_t>& out = found == leaving.end() ? none : found->second;
            const std::vector<Changed> back = std::move(entering_at(v));
            std::vector<Leaving> gone;
            for (int64_t b : out) gone.push_back({pos_[b], a_.s[b], a_.p[b]});
            std::vector<Entering> coming;
            for (const Changed& c : back) {
                gone.push_back({pos_[c.child], a_.s[c.child], a_.p[c.child]});
                coming.push_back({block_key(c.s, c.p, a_.tie[c.child]), c.s, c.p});
            }
            const double inter = interaction_after_change(a_.g[v], index, std::move(gone), std::move(coming));
            double internal = a_.sum_f[v] - sum_of(a_.f, out);
            for (const Changed& c : back) internal += c.f - a_.f[c.child];
            if (v == 0) return internal + inter;
            double bid_sum = index.cum_s.back() - sum_of(a_.s, out);
            double work = index.cum_p.back() - sum_of(a_.p, out);
            for (const Changed& c : back) {
                bid_sum += c.s - a_.s[c.child];
                work += c.p - a_.p[c.child];
            }
            const double e = a_.edge_work[v];
            entering_at(a_.parent[v]).push_back({v, bid_sum, e + work, e * bid_sum + internal + inter});
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
    std::vector<int64_t> pos_;
    std::vector<std::unique_ptr<NodeIndex>> indexes_;
    std::vector<double> start_;

    double sum_of(const std::vector<double>& x, const std::vector<int64_t>& blocks) const {
        PySum total(compensated_);
        for (int64_t b : blocks) total.add(x[b]);
        return total.value();
    }

    const NodeIndex& index_of(int64_t v) {
        if (!indexes_[v]) {
            auto index = std::make_unique<NodeIndex>();
            const auto& blocks = a_.sorted_blocks[v];
            index->cum_p.push_back(0.0);
            index->cum_s.push_back(0.0);
            for (size_t k = 0; k < blocks.size(); ++k) {
                const int64_t b = blocks[k];
                pos_[b] = int64_t(k);
                index->keys.push_back(a_.key[b]);
                index->cum_p.push_back(index->cum_p.back() + a_.p[b]);
                index->cum_s.push_back(index->cum_s.back() + a_.s[b]);
            }
            indexes_[v] = std::move(index);
        }
        return *indexes_[v];
    }

    void leaf_starts() {
        std::vector<char> covered(nn_, 0);
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

std::vector<double> vcg_payments(const Factored& a, const std::vector<int64_t>& priced, bool compensated) {
    // Per bidder, its top blocks grouped by parent node, in each node's sorted order.
    const size_t nn = a.parent.size();
    const int64_t mixed = -1;  // index into `bidders` of a block's owner; -1: more than one
    std::vector<int64_t> bidders;  // in order of first leaf; a round has few, so searched
    const auto index_of = [&bidders](int64_t bidder) {
        return int64_t(std::find(bidders.begin(), bidders.end(), bidder) - bidders.begin());
    };
    std::vector<int64_t> owner(a.s.size(), mixed);
    for (size_t k = 0; k < a.leaf_owner.size(); ++k) {
        const int64_t i = index_of(a.leaf_owner[k]);
        if (i == int64_t(bidders.size())) bidders.push_back(a.leaf_owner[k]);
        owner[nn + k] = i;
    }
    std::vector<std::vector<std::pair<int64_t, std::vector<int64_t>>>> tops(bidders.size());
    for (size_t v = nn; v-- > 0;) {
        const auto& blocks = a.sorted_blocks[v];
        bool one = true;
        for (int64_t b : blocks) one = one && owner[b] == owner[blocks.front()];
        if (one) {
            owner[v] = owner[blocks.front()];  // one bidder, or mixed for a lone mixed child
            continue;
        }
        for (int64_t b : blocks) {
            if (owner[b] == mixed) continue;
            auto& mine = tops[owner[b]];
            if (mine.empty() || mine.back().first != int64_t(v)) mine.emplace_back(int64_t(v), std::vector<int64_t>{});
            mine.back().second.push_back(b);
        }
    }
    Pricing pricing(a, compensated);
    const double cost = a.f[0];
    std::vector<double> out;
    for (int64_t bidder : priced) {
        const int64_t i = index_of(bidder);
        if (i == int64_t(bidders.size())) throw std::invalid_argument("a priced bidder without a request in the round");
        const double without = pricing.cost_without(tops[i]);
        out.push_back((cost - pricing.own_cost(bidder)) - without);
    }
    return out;
}

}  // namespace auction_core
