"""Auctions over the waiting queue (docs/design.md section 3): the radix-tree auction, which maximises
welfare over depth-first orders of the queue's radix tree, and the strict priority auction; both
charge VCG payments and are schedulers ("radix_vcg", "strict_vcg") the engine can run."""

from .base import AuctionRound
from .outcome import AuctionOutcome
from .radix_auction import RadixTreeAuction
from .strict_priority import StrictPriorityAuction

__all__ = ["AuctionOutcome", "AuctionRound", "RadixTreeAuction", "StrictPriorityAuction"]
