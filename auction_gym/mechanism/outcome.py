"""The result of one auction round."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AuctionOutcome:
    """Order, payments and welfare of one round (docs/design.md section 3), in the cost model's
    completion units (the market multiplies by seconds_per_unit): `order`, request ids, first
    admitted first; `payments`, bidder -> VCG payment (>= 0) for every bidder in the round;
    `welfare`, -sum_r bid_r x C_r under the reported bids; `completion`, request id -> C_r."""

    order: list[int] = field(default_factory=list)
    payments: dict[int, float] = field(default_factory=dict)
    welfare: float = 0.0
    completion: dict[int, float] = field(default_factory=dict)
