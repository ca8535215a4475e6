// The compiled builder's memo of the prompts' sorted order (queue_tree.hpp's PromptMemo): a queue
// that changes little from round to round keeps most prompts' ranks and most neighbours' common
// prefixes, so only new prompts are placed (by binary search) and only new neighbours compared.
#include <algorithm>
#include <utility>

#include "queue_tree.hpp"

namespace nb = nanobind;

namespace auction_core {

void PromptMemo::sort(PyObject* const* items, const std::vector<Prompt>& p, std::vector<size_t>& ranked,
                      std::vector<size_t>& lcp) {
    const size_t n = p.size();
    std::vector<size_t> fresh;
    ranked = ranked_known(items, p, fresh);
    if (2 * fresh.size() > n) {  // mostly new: sort from scratch
        std::vector<size_t> tmp_idx(n), tmp_lcp(n);
        ranked.resize(n);
        for (size_t i = 0; i < n; ++i) ranked[i] = i;
        lcp.assign(n, 0);
        lcp_sort(p, ranked.data(), lcp.data(), 0, n, tmp_idx.data(), tmp_lcp.data());
        remember(items, p, ranked, lcp);
        return;
    }
    for (size_t i : fresh) {  // after its equals: ties are put in index order below
        auto at = std::upper_bound(ranked.begin(), ranked.end(), i,
                                   [&](size_t a, size_t b) { return !bytes_order(p[b], p[a], 0).first; });
        ranked.insert(at, i);
    }
    lcp.assign(n, 0);
    for (size_t k = 1; k < n; ++k) {
        const size_t a = ranked[k - 1], b = ranked[k];
        auto was = p[a].readonly && p[b].readonly ? entries.find(items[a]) : entries.end();
        lcp[k] = was != entries.end() && was->second.successor == items[b] ? was->second.lcp : mismatch(p[a], p[b], 0);
    }
    // Equal prompts are adjacent; a stable sort leaves them in index order.
    for (size_t s = 0; s < n;) {
        size_t e = s + 1;
        while (e < n && lcp[e] == p[ranked[e]].n && p[ranked[e - 1]].n == p[ranked[e]].n) ++e;
        std::sort(ranked.begin() + std::ptrdiff_t(s), ranked.begin() + std::ptrdiff_t(e));
        s = e;
    }
    remember(items, p, ranked, lcp);
}

// The indices of the prompts remembered, still read-only, in their last order (which their bytes
// keep); the others' indices into `fresh`.
std::vector<size_t> PromptMemo::ranked_known(PyObject* const* items, const std::vector<Prompt>& p,
                                             std::vector<size_t>& fresh) const {
    std::vector<std::pair<size_t, size_t>> known;  // (last rank, index)
    for (size_t i = 0; i < p.size(); ++i) {
        auto was = p[i].readonly ? entries.find(items[i]) : entries.end();
        if (was == entries.end())
            fresh.push_back(i);
        else
            known.emplace_back(was->second.rank, i);
    }
    std::sort(known.begin(), known.end());
    std::vector<size_t> out;
    out.reserve(p.size());
    for (const auto& [rank, i] : known) out.push_back(i);
    return out;
}

// Keep this order's read-only arrays (and only them: the rest are dropped) for the next round,
// updating the entries in place: most of a round's prompts were the last round's.
void PromptMemo::remember(PyObject* const* items, const std::vector<Prompt>& p, const std::vector<size_t>& ranked,
                          const std::vector<size_t>& lcp) {
    ++sorts;
    for (size_t k = 0; k < ranked.size(); ++k) {
        const size_t i = ranked[k];
        if (!p[i].readonly) continue;
        auto [at, fresh] = entries.try_emplace(items[i]);
        Entry& e = at->second;
        if (fresh) e.array = nb::borrow(items[i]);  // a held array keeps its id, so a kept entry is its own
        e.rank = k;
        const bool next = k + 1 < ranked.size() && p[ranked[k + 1]].readonly;
        e.successor = next ? items[ranked[k + 1]] : nullptr;
        e.lcp = next ? lcp[k + 1] : 0;
        e.sort = sorts;
    }
    // The dropped arrays are released once the map is whole again.
    std::vector<nb::object> dropped;
    for (auto it = entries.begin(); it != entries.end();) {
        if (it->second.sort == sorts) {
            ++it;
            continue;
        }
        dropped.push_back(std::move(it->second.array));
        it = entries.erase(it);
    }
}

}  // namespace auction_core
