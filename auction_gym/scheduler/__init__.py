"""Admission-order policies without money, and the interfaces the engine calls (a `Scheduler`'s
`order`, an `Auction`'s `decide`); the auctions are in `auction_gym.mechanism`."""

from .base import Auction, Decision, Scheduler, admission_order, fcfs_key, make_scheduler, scheduler_names
from .dfs_weight import DFSWeight
from .fcfs import FCFS
from .klpm import KLPM
from .lpm import LPM
from .waiting import WaitingPrefixes

__all__ = [
    "Auction", "DFSWeight", "Decision", "FCFS", "KLPM", "LPM", "Scheduler", "WaitingPrefixes", "admission_order",
    "fcfs_key", "make_scheduler", "scheduler_names",
]
