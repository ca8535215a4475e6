"""Admission orders without money (FCFS, the cache-aware ones, the priority orders that read the
bids), and what keeps the waiting requests' prefixes warm; the interface is `auction_gym.policy`,
the auctions are in `auction_gym.mechanism`, the posted-price designs in `auction_gym.pricing`."""

from typing import Any

from . import base
from .base import Decision, admission_order, fcfs_key, make_scheduler, scheduler_names
from .dfs_weight import DFSWeight
from .fcfs import FCFS
from .klpm import KLPM
from .lpm import LPM
from .waiting import WaitingPrefixes

__all__ = [
    "DFSWeight", "Decision", "FCFS", "KLPM", "LPM", "WaitingPrefixes", "admission_order", "fcfs_key",
    "make_scheduler", "scheduler_names",
]


def __getattr__(name: str) -> Any:
    return base.__getattr__(name)  # the deprecated names (`Scheduler`, `Auction`), each warning once
