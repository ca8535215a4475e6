"""Admission orders without money (FCFS, the cache-aware ones, the priority orders that read the
bids); the interface is `auction_gym.policy`, the auctions are in `auction_gym.mechanism`, the
posted-price designs in `auction_gym.pricing`. What keeps the waiting requests' prefixes warm is
the cache's (`auction_gym.waiting_prefixes`); its name here is an alias that warns once."""

from typing import Any

from .._deprecation import deprecated_aliases
from . import base
from .base import Decision, admission_order, fcfs_key, make_scheduler, scheduler_names
from .dfs_weight import DFSWeight
from .fcfs import FCFS
from .klpm import KLPM
from .lpm import LPM

__all__ = [
    "DFSWeight", "Decision", "FCFS", "KLPM", "LPM", "admission_order", "fcfs_key",
    "make_scheduler", "scheduler_names",
]


def _waiting_prefixes() -> type:
    from ..waiting_prefixes import WaitingPrefixes

    return WaitingPrefixes


_moved = deprecated_aliases(__name__, {"WaitingPrefixes": ("auction_gym.waiting_prefixes.WaitingPrefixes",
                                                           _waiting_prefixes)})


def __getattr__(name: str) -> Any:
    # The deprecated names, each warning once: `Scheduler` and `Auction` (base.py), and what moved.
    return _moved(name) if name == "WaitingPrefixes" else base.__getattr__(name)
