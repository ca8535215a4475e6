"""Routers in front of a cluster of serving engines: which replica a new request goes to.

Every router answers `route(request, replicas, now) -> index`. It is called once per request, at
its arrival time, and may read the replicas' state (queues, running batches, caches: what a
deployed router learns from its workers' load reports and KV events) but never changes it.
`ROUTERS` is the one registry (name -> class) from which the CLI's choices and the docs derive.

Load, wherever a router uses it, is a replica's in-flight requests: running + waiting + routed
but not yet let in (`load`), what SGLang's gateway and Dynamo count per worker.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from typing import Protocol, Sequence

import numpy as np

from .._checks import check_count, check_number
from ..engine import ServingEngine
from ..radix_cache import RadixCache
from ..request import Request


class Router(Protocol):
    """Chooses a replica for each arriving request."""

    name: str

    def route(self, request: Request, replicas: Sequence[ServingEngine], now: float) -> int: ...


def load(engine: ServingEngine) -> int:
    """In-flight requests of a replica: running + waiting + routed there but not let in yet."""
    return len(engine.running) + len(engine.waiting) + engine.arrivals.pending


def replica_count(replicas: Sequence[ServingEngine]) -> int:
    """How many `replicas` a router chooses from; ValueError for none, where there is no choice
    (every router's `route` asks it first)."""
    n = len(replicas)
    if n == 0:
        raise ValueError("a router needs at least one replica to route to, got none")
    return n


def least_loaded(replicas: Sequence[ServingEngine]) -> int:
    """The replica with the fewest in-flight requests (ties: the lowest index)."""
    loads = [load(e) for e in replicas]
    return loads.index(min(loads))


class RoundRobin:
    """Replica 0, 1, ..., N-1, 0, ...: the default of SGLang's gateway (`--policy round_robin`)
    and of Dynamo's frontend (`--router-mode round-robin`). Blind to load and cache."""

    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def route(self, request: Request, replicas: Sequence[ServingEngine], now: float) -> int:
        k = self._next % replica_count(replicas)
        self._next = k + 1
        return k


class LeastLoad:
    """The replica with the fewest in-flight requests (ties: the lowest index); a deterministic
    join-the-shortest-queue, blind to the cache."""

    name = "least_load"

    def route(self, request: Request, replicas: Sequence[ServingEngine], now: float) -> int:
        replica_count(replicas)
        return least_loaded(replicas)


class PowerOfTwo:
    """Power of two choices (SGLang's gateway `--policy power_of_two`): two distinct replicas
    drawn at random, the less loaded one wins (ties: the first drawn).

    Args:
        seed: of the draws, so a run is reproducible.
    """

    name = "power_of_two"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)

    def route(self, request: Request, replicas: Sequence[ServingEngine], now: float) -> int:
        if replica_count(replicas) == 1:
            return 0
        a, b = (int(i) for i in self._rng.choice(len(replicas), size=2, replace=False))
        return b if load(replicas[b]) < load(replicas[a]) else a


class PrefixHash:
    """Consistent hashing of the prompt's first block onto a ring of replicas (SGLang's gateway
    `prefix_hash`/`consistent_hashing` family): requests that open alike land on one replica,
    whatever the load; adding a replica moves about 1/N of the keys.

    Args:
        prefix_tokens: tokens hashed (16: SGLang's gateway default `--block-size`, one KV page
            of its radix tree; the gateway's own prefix-hash defaults were not checked).
        virtual_nodes: points per replica on the ring (160, the ketama convention), which evens
            out the share of keys each replica gets.
    """

    name = "prefix_hash"

    def __init__(self, prefix_tokens: int = 16, virtual_nodes: int = 160) -> None:
        self.prefix_tokens = check_count("prefix_tokens", prefix_tokens)
        self.virtual_nodes = check_count("virtual_nodes", virtual_nodes)
        self._ring: tuple[list[int], list[int]] | None = None

    @staticmethod
    def _hash(data: bytes) -> int:
        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")

    def _build(self, n: int) -> tuple[list[int], list[int]]:
        points = sorted((self._hash(f"{k}#{v}".encode()), k) for k in range(n) for v in range(self.virtual_nodes))
        return [p for p, _ in points], [k for _, k in points]

    def route(self, request: Request, replicas: Sequence[ServingEngine], now: float) -> int:
        n = replica_count(replicas)
        if self._ring is None or len(set(self._ring[1])) != n:
            self._ring = self._build(n)
        keys, owners = self._ring
        head = np.asarray(request.tokens[: self.prefix_tokens], dtype=np.int64)
        i = bisect.bisect(keys, self._hash(head.tobytes()))
        return owners[i % len(keys)]


class CacheAware:
    """SGLang's model gateway `cache_aware` policy: an approximate radix tree per worker of the
    prompts routed to it (the gateway never sees the workers' caches), with LRU eviction.

    For each request: if the load is imbalanced, (max - min) > balance_abs_threshold and max >
    balance_rel_threshold x min, it goes to the least-loaded worker. Otherwise it goes to the
    worker whose tree matches the longest prefix, if that match covers more than cache_threshold
    of the prompt, else to the least-loaded worker. The chosen worker's tree then holds the prompt.
    Every eviction_interval seconds, trees larger than max_tree_tokens are evicted down to it,
    least recently routed first. `last_decision` says which branch the last call took
    ("imbalanced", "cache" or "low_match").

    Defaults: SGLang model gateway (sgl-model-gateway / smg) docs, "Cache-Aware Routing" and
    "Load Balancing": cache threshold 0.3, balance thresholds 64 and 1.5, eviction every 120 s,
    max tree size 2**26 (nodes there, tokens here; in these simulations it never binds, so the
    tree only forgets by eviction when max_tree_tokens is set lower, e.g. to the KV capacity).
    """

    name = "cache_aware"

    def __init__(self, cache_threshold: float = 0.3, balance_abs_threshold: int = 64,
                 balance_rel_threshold: float = 1.5, max_tree_tokens: int = 2**26,
                 eviction_interval: float = 120.0) -> None:
        self.cache_threshold = check_number("cache_threshold", cache_threshold, 0, 1)
        self.balance_abs_threshold = check_count("balance_abs_threshold", balance_abs_threshold, 0)
        self.balance_rel_threshold = check_number("balance_rel_threshold", balance_rel_threshold, 1)
        self.max_tree_tokens = check_count("max_tree_tokens", max_tree_tokens)
        self.eviction_interval = check_number("eviction_interval", eviction_interval, 0, above=True, unit="(s)")
        self.trees: list[RadixCache] = []
        self.last_decision = ""
        self._last_eviction = 0.0

    def route(self, request: Request, replicas: Sequence[ServingEngine], now: float) -> int:
        if len(self.trees) != replica_count(replicas):
            self.trees = [RadixCache() for _ in replicas]
        self._evict(now)
        loads = [load(e) for e in replicas]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.balance_abs_threshold and hi > self.balance_rel_threshold * lo:
            k, self.last_decision = loads.index(lo), "imbalanced"
        else:
            matched = [tree.prefix_len(request.tokens) for tree in self.trees]
            best = max(range(len(replicas)), key=lambda i: (matched[i], -loads[i], -i))
            if matched[best] > self.cache_threshold * request.prompt_len:
                k, self.last_decision = best, "cache"
            else:
                k, self.last_decision = loads.index(lo), "low_match"
        self.trees[k].insert(request.tokens)
        return k

    def _evict(self, now: float) -> None:
        if now - self._last_eviction < self.eviction_interval:
            return
        self._last_eviction = now
        for tree in self.trees:
            if tree.total_size > self.max_tree_tokens:
                tree.evict(tree.total_size - self.max_tree_tokens)


class KvOverlap:
    """NVIDIA Dynamo's KV router (`--router-mode kv`): for each worker, cost = overlap_weight x
    prefill blocks it would compute (prompt blocks - blocks of the prompt it has cached) +
    decode blocks it would hold (its active blocks + the prompt's); the lowest cost wins at
    temperature 0 (ties: the lowest index), else a worker is drawn with probability softmax(-cost /
    (temperature x max cost)). The cached blocks are read from the worker's actual cache, as
    Dynamo's indexer learns them from KV events; active tokens are the running requests' context
    plus the waiting prompts (Dynamo counts every request it routed until it completes).

    Defaults: Dynamo docs, "KV Router" / "Configuration and Tuning": `--kv-overlap-score-weight`
    1.0, `--router-temperature` 0.0; `--kv-cache-block-size` is backend-specific, 16 here (vLLM's
    default block size).
    """

    name = "kv_overlap"

    def __init__(self, overlap_weight: float = 1.0, temperature: float = 0.0, block_size: int = 16,
                 seed: int = 0) -> None:
        # A weight of inf makes a replica's cost inf x 0 = NaN where it caches the whole prompt.
        self.overlap_weight = check_number("overlap_weight", overlap_weight, 0, finite=True)
        self.temperature = check_number("temperature", temperature, 0)
        self.block_size = check_count("block_size", block_size)
        self._rng = np.random.default_rng(seed)

    def costs(self, request: Request, replicas: Sequence[ServingEngine]) -> list[float]:
        """Each replica's cost for the request, in blocks."""
        bs = self.block_size
        blocks = math.ceil(request.prompt_len / bs)
        out = []
        for e in replicas:
            overlap = e.cache.prefix_len(request.tokens) // bs
            active = e.active_tokens + sum(r.prompt_len for r in e.arrivals.pending_requests())
            out.append(self.overlap_weight * (blocks - overlap) + math.ceil(active / bs) + blocks)
        return out

    def route(self, request: Request, replicas: Sequence[ServingEngine], now: float) -> int:
        replica_count(replicas)
        costs = self.costs(request, replicas)
        if self.temperature == 0:
            return costs.index(min(costs))
        scaled = -np.array(costs) / (self.temperature * max(max(costs), 1.0))
        p = np.exp(scaled - scaled.max())
        return int(self._rng.choice(len(costs), p=p / p.sum()))


class OraclePrefix:
    """The replica holding the longest actual cached prefix of the prompt, ignoring load (ties:
    the less loaded, then the lowest index). An upper bound on what routing can do for the hit
    rate, not a deployable router: no gateway reads every worker's cache exactly and for free."""

    name = "oracle_prefix"

    def route(self, request: Request, replicas: Sequence[ServingEngine], now: float) -> int:
        replica_count(replicas)
        keyed = [(e.cache.prefix_len(request.tokens), -load(e), -i) for i, e in enumerate(replicas)]
        return -max(keyed)[2]


ROUTERS: dict[str, type] = {
    cls.name: cls for cls in (RoundRobin, LeastLoad, PowerOfTwo, PrefixHash, CacheAware, KvOverlap, OraclePrefix)
}
"""Every router by name, in the order tables list them."""


def router_names() -> list[str]:
    return list(ROUTERS)


def register_router(cls: type) -> type:
    """Add a router class (its `name`, and `route` as the `Router` protocol says) at the end of
    `ROUTERS`; usable as a class decorator. ValueError when the name is taken or `route` is missing."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"a router needs a class attribute `name`, got {name!r} on {cls!r}")
    if not callable(getattr(cls, "route", None)):
        raise ValueError(f"router {name!r} has no route(request, replicas, now) method")
    if name in ROUTERS:
        raise ValueError(f"router name {name!r} is already registered")
    ROUTERS[name] = cls
    return cls


def make_router(name: str, **kwargs) -> Router:
    """Build the router registered under `name`; an unknown name lists the valid ones."""
    if name not in ROUTERS:
        raise ValueError(f"unknown router {name!r}; valid: {', '.join(ROUTERS)}")
    return ROUTERS[name](**kwargs)
