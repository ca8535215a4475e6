"""Gymnasium and PettingZoo environments over the market."""

from .parallel_env import RadixAuctionParallelEnv, parallel_env
from .radix_auction_env import RadixAuctionEnv

__all__ = ["RadixAuctionEnv", "RadixAuctionParallelEnv", "parallel_env"]
