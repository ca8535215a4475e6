"""Radix Auction Gym: priority auctions over LLM inference that respect the KV cache."""

from . import mechanism  # registers the auctions as schedulers "radix_vcg" and "strict_vcg"
from .engine import CostModel, EngineConfig, Iteration, Metrics, RequestRecord, SimEngine
from .radix_cache import MatchResult, RadixCache, TreeNode
from .request import Request
from .scheduler import make_scheduler, scheduler_names

__all__ = [
    "CostModel", "EngineConfig", "Iteration", "MatchResult", "Metrics", "RadixCache", "Request",
    "RequestRecord", "SimEngine", "TreeNode", "make_scheduler", "scheduler_names",
]
