"""Radix Auction Gym: priority auctions over LLM inference that respect the KV cache."""

import importlib
from typing import TYPE_CHECKING, Any

import gymnasium

from . import mechanism  # noqa: F401  (registers the auctions as schedulers "radix_vcg", "strict_vcg")
from .action import ACTION_TYPES, to_action, to_multiplier
from .engine import CostModel, EngineConfig, Iteration, Metrics, RequestRecord, SimEngine
from .market import Market, MarketConfig, Obs
from .radix_cache import MatchResult, RadixCache, TreeNode
from .request import Request
from .scenarios import V1_KWARGS, V2_KWARGS
from .scheduler import make_scheduler, scheduler_names

if TYPE_CHECKING:
    from .envs import RadixAuctionEnv, RadixAuctionParallelEnv, parallel_env
    from .envs.batch import MarketBatch
    from .envs.vector import RadixAuctionVectorEnv, make_vec

_ENVS = {
    "RadixAuctionEnv": "envs.radix_auction_env", "RadixAuctionParallelEnv": "envs.parallel_env",
    "parallel_env": "envs.parallel_env", "MarketBatch": "envs.batch", "RadixAuctionVectorEnv": "envs.vector",
    "make_vec": "envs.vector",
}
"""The environments, imported on first use (PEP 562): a command that only runs markets (`reproduce`,
`markets`) starts without PettingZoo and the env modules."""


def __getattr__(name: str) -> Any:
    if name in _ENVS:
        return getattr(importlib.import_module(f".{_ENVS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_ENVS})


# Gymnasium 1.x has no plugin discovery: registering on import makes gym.make("RadixAuction-v0")
# work after `import auction_gym`, and gym.make("auction_gym:RadixAuction-v0") imports it first.
# v1 and v2 are v0's class with V1_KWARGS and V2_KWARGS as defaults (gym.make copies them, and keywords
# given override them). gym.make_vec builds the batched vector env (`auction_gym.envs.vector`).
for _id, _kwargs in (("RadixAuction-v0", {}), ("RadixAuction-v1", V1_KWARGS), ("RadixAuction-v2", V2_KWARGS)):
    if _id not in gymnasium.registry:
        gymnasium.register(id=_id, entry_point="auction_gym.envs:RadixAuctionEnv",
                           vector_entry_point="auction_gym.envs.vector:vector_env", kwargs=_kwargs)

__all__ = [
    "ACTION_TYPES", "CostModel", "EngineConfig", "Iteration", "Market", "MarketBatch", "MarketConfig", "MatchResult",
    "Metrics", "Obs", "RadixAuctionEnv", "RadixAuctionParallelEnv", "RadixAuctionVectorEnv", "RadixCache", "Request",
    "RequestRecord", "SimEngine", "TreeNode", "make_scheduler", "make_vec", "parallel_env", "scheduler_names",
    "to_action", "to_multiplier",
]
