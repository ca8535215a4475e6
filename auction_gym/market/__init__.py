"""The market: workload, engine and mechanism, with bidders who pay under budgets."""

from .config import BACKENDS, MECHANISMS, WORKLOADS, MarketConfig
from .market import Market, RoundReport
from .observation import Obs

__all__ = ["BACKENDS", "MECHANISMS", "WORKLOADS", "Market", "MarketConfig", "Obs", "RoundReport"]
