// The VCG payments of a round decided over the queue tree's skeleton (payments.cpp).
#pragma once

#include <memory>
#include <vector>

#include "incremental_tree.hpp"

namespace auction_core {

// Each of `priced` (bidders with a request in the round)'s payment before the rounding clip:
// (cost of the others in the chosen order) - (optimal cost without it). `compensated`: sums as
// Python 3.12's sum() adds (radix_auction.RadixTreeAuction.payments).
// `scratch`: the lists it fills while it prices, kept by the caller between rounds (each cleared where it
// is filled, its capacity kept), so that a round's pricing allocates little more than its result.
struct PricingScratch;
std::shared_ptr<PricingScratch> new_pricing_scratch();
std::vector<double> vcg_payments(const Factored& a, const std::vector<int64_t>& priced, bool compensated,
                                 PricingScratch& scratch);

}  // namespace auction_core
