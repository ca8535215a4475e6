"""Serving engines: the shared `ServingEngine`, the simulated `SimEngine`; the PyTorch one lives in
`gpu_backend` and has the same interface."""

from .config import RESERVATIONS, EngineConfig
from .cost_model import CostModel
from .records import Metrics, RequestRecord, rejections, summarize
from .serving_engine import ServingEngine, synthetic_output
from .sim_engine import SimEngine
from .state import Admission, Iteration, Running

__all__ = [
    "RESERVATIONS", "Admission", "CostModel", "EngineConfig", "Iteration", "Metrics", "RequestRecord", "Running",
    "ServingEngine", "SimEngine", "rejections", "summarize", "synthetic_output",
]
