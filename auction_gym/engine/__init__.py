"""Serving engines: the shared `ServingEngine`, the simulated `SimEngine`; the PyTorch one lives in
`gpu_backend` and has the same interface."""

from .cost_model import CostModel
from .records import Metrics, RequestRecord, rejections, summarize
from .serving_engine import Admission, EngineConfig, Iteration, Running, ServingEngine, synthetic_output
from .sim_engine import SimEngine

__all__ = [
    "Admission", "CostModel", "EngineConfig", "Iteration", "Metrics", "RequestRecord", "Running",
    "ServingEngine", "SimEngine", "rejections", "summarize", "synthetic_output",
]
