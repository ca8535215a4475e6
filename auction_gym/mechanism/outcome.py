"""The result of one auction round."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AuctionOutcome:
    """Order, payments and welfare of one round (docs/design.md section 3).

    Units: the cost model's completion units; welfare and payments are money per unit (the market
    multiplies by seconds_per_unit).

    Attributes:
        order: request ids, first = admitted first.
        payments: bidder -> VCG payment (>= 0), for every bidder with a request in the round.
        welfare: W(order) = -sum_r bid_r * C_r under the reported bids.
        completion: request id -> completion time C_r in the chosen order.
    """

    order: list[int] = field(default_factory=list)
    payments: dict[int, float] = field(default_factory=dict)
    welfare: float = 0.0
    completion: dict[int, float] = field(default_factory=dict)
