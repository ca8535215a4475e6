"""Workloads: synthetic agentic traffic, SGLang's generated-shared-prefix benchmark, Mooncake trace
replay, the urgency classes they share, and the registry that names them (`registry.py`)."""

from .agentic import AgenticConfig, agentic_stream, agentic_workload, iter_agentic
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
from .mooncake import MOONCAKE_MAX_NEW_TOKENS, SAMPLE_TRACE, expand_blocks, iter_mooncake, load_mooncake
from .registry import (
    WorkloadEntry,
    get_workload,
    register_workload,
    workload_names,
)
from .shared_prefix import SharedPrefixConfig, iter_shared_prefix, shared_prefix_stream, shared_prefix_workload

__all__ = [
    "BACKGROUND",
    "CLASSES",
    "DEFAULT_CLASS_MIX",
    "INTERACTIVE",
    "MOONCAKE_MAX_NEW_TOKENS",
    "SAMPLE_TRACE",
    "URGENT",
    "AgenticConfig",
    "RequestClass",
    "SharedPrefixConfig",
    "WorkloadEntry",
    "agentic_stream",
    "agentic_workload",
    "draw_request_params",
    "expand_blocks",
    "get_class",
    "get_workload",
    "iter_agentic",
    "iter_mooncake",
    "iter_shared_prefix",
    "load_mooncake",
    "register_workload",
    "shared_prefix_stream",
    "shared_prefix_workload",
    "workload_names",
]
