"""A cluster of serving-engine replicas behind a router (`ClusterEngine`), and the routers that
deployed systems use (`ROUTERS`: round robin, least load, power of two, prefix hash, SGLang's
cache-aware gateway, Dynamo's KV-overlap router, and an oracle upper bound)."""

from .engine import ClusterEngine
from .metrics import load_imbalance
from .routers import ROUTERS, Router, load, make_router, register_router, router_names

__all__ = ["ROUTERS", "ClusterEngine", "Router", "load", "load_imbalance", "make_router", "register_router", "router_names"]
