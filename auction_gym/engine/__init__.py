"""Serving engines. The simulated one lives here; the PyTorch one in `gpu_backend` has the same interface."""

from .cost_model import CostModel
from .records import Metrics, RequestRecord, summarize
from .sim_engine import EngineConfig, Iteration, SimEngine

__all__ = ["CostModel", "EngineConfig", "Iteration", "Metrics", "RequestRecord", "SimEngine", "summarize"]
