"""Admission-order policies without money; the auctions in `auction_gym.mechanism` share the interface."""

from .base import Scheduler, fcfs_key, make_scheduler, register_scheduler, scheduler_names
from .dfs_weight import DFSWeight
from .fcfs import FCFS
from .klpm import KLPM
from .lpm import LPM
from .waiting import WaitingPrefixes

__all__ = [
    "DFSWeight", "FCFS", "KLPM", "LPM", "Scheduler", "WaitingPrefixes", "fcfs_key", "make_scheduler",
    "register_scheduler", "scheduler_names",
]
