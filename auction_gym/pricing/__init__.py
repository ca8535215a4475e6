"""Posted-price markets (docs/design.md section 3): the provider posts prices per token, a bidder's
request buys what its best response says, and the round charges the prices of what it admitted.
`ServiceTiers` ("tiers", "tiers_lpm": fixed-price service tiers, as API providers sell priority
today) and `CongestionPricing` ("congestion": one priority price that follows load, as EIP-1559's
base fee does). Each decides a `PostedRound`, which the market charges like an auction's round."""

from .congestion import CongestionPricing
from .posted_round import PostedRound
from .tiers import ServiceTiers

__all__ = ["CongestionPricing", "PostedRound", "ServiceTiers"]
