"""Workloads: synthetic agentic traffic, Mooncake trace replay, and the urgency classes they share."""

from .agentic import AgenticConfig, agentic_workload, iter_agentic
from .classes import (
    BACKGROUND,
    CLASSES,
    DEFAULT_CLASS_MIX,
    INTERACTIVE,
    URGENT,
    RequestClass,
    draw_request_params,
    get_class,
)
from .mooncake import expand_blocks, iter_mooncake, load_mooncake

__all__ = [
    "BACKGROUND",
    "CLASSES",
    "DEFAULT_CLASS_MIX",
    "INTERACTIVE",
    "URGENT",
    "AgenticConfig",
    "RequestClass",
    "agentic_workload",
    "draw_request_params",
    "expand_blocks",
    "get_class",
    "iter_agentic",
    "iter_mooncake",
    "load_mooncake",
]
