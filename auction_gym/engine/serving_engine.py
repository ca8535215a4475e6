"""A continuous-batching serving engine with a radix prefix cache (DESIGN.md section 4).

`ServingEngine` holds what every engine shares: arrivals, the waiting queue, admission in the
scheduler's order, KV memory, the radix cache, per-request records. How an iteration executes, and
so how long it takes, is left to subclasses: `SimEngine` takes times from a cost model,
`gpu_backend.TorchEngine` runs a model and measures them. The market and the environments only use
this interface, so they do not know which engine they drive.

Each `step()` is one iteration, as in SGLang's scheduler loop:

1. Requests whose arrival time has come join the waiting queue (one that could never fit,
   prompt + output > kv_capacity_tokens, is rejected with a reason instead).
2. If the queue is not empty, the scheduler orders it and a prefill batch is admitted in that order:
   each request matches its longest cached prefix (at most prompt - 1 tokens, so the last prompt
   token is always computed, as in SGLang), locks it, and reserves its uncached prompt tokens and its
   whole output; least-recently-used unlocked leaves are evicted to make room. Admission stops at the
   first request that does not fit in memory, would push the batch past `max_prefill_tokens` (the
   first request of a batch is exempt, as in SGLang without chunked prefill), or past
   `max_running_requests`. A request that would compute an uncached prefix that a request
   already in the batch computes is held for the next batch instead (SGLang's in-batch prefix
   sharing, `in_batch.py`; `EngineConfig.in_batch_prefix_caching`), and admission goes on with
   the next request in the order. At the end of the prefill the prompts are inserted into the
   cache and stay locked while their requests run; each admitted request has its first token.
3. Otherwise the running batch decodes one step, or, where the engine can (the simulated one),
   every step up to the next event at once (a request finishing, or an arrival that may be
   admitted): nothing changes in between, so the result is the same as stepping one at a time.
4. A finished request inserts prompt + output into the cache and unlocks its path.

Memory invariant: cache.total_size + reserved <= kv_capacity_tokens, where `reserved` holds each
running request's output and the prompt tokens the cache does not hold for it (a partial last page).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..radix_cache import RadixCache, TreeNode
from ..request import Request
from ..scheduler.base import Scheduler, fcfs_key, make_scheduler
from .cost_model import CostModel
from .in_batch import BatchPrefixes
from .records import Metrics, RequestRecord, summarize


@dataclass(frozen=True)
class EngineConfig:
    """Capacity limits of the engine. Defaults: one H100 80GB serving Llama-3-8B (cost_model.py):
    80 GB x 0.88 static memory fraction - 16 GB weights = ~54 GB of KV at 128 KiB per token."""

    kv_capacity_tokens: int = 400_000
    max_prefill_tokens: int = 16_384
    max_running_requests: int = 256
    page_size: int = 1
    cost_model: CostModel = field(default_factory=CostModel)
    in_batch_prefix_caching: bool = True
    """SGLang's in-batch prefix sharing (`in_batch.py`): a request that would compute a prefix
    another request of the same prefill batch computes waits for the next batch. False: off."""
    in_batch_check_threshold: int = 32
    """Only requests with at most this many cached prompt tokens are checked (SGLang: 32)."""
    in_batch_deprioritize_threshold: int = 32
    """A checked request sharing at least this many uncached tokens with the batch waits (SGLang: 32)."""

    def __post_init__(self) -> None:
        for name in ("kv_capacity_tokens", "max_prefill_tokens", "max_running_requests", "page_size",
                     "in_batch_check_threshold", "in_batch_deprioritize_threshold"):
            v = getattr(self, name)
            least = 0 if name == "in_batch_check_threshold" else 1
            if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or v < least:
                raise ValueError(f"{name} must be an int >= {least}, got {v!r}")
        if not isinstance(self.in_batch_prefix_caching, bool):
            raise ValueError(f"in_batch_prefix_caching must be a bool, got {self.in_batch_prefix_caching!r}")
        cm = self.cost_model
        if cm.decode_base + cm.decode_per_request <= 0 or cm.prefill_base + cm.prefill_per_token <= 0:
            raise ValueError("cost model must give every iteration a positive duration")


@dataclass(slots=True)
class Iteration:
    """One engine iteration; a `decode` iteration may cover several identical steps."""

    kind: str
    """"prefill", "decode" or "idle" (nothing to do until the next arrival)."""
    start: float
    end: float
    queue_len: int
    """Waiting requests when the iteration started (after arrivals were let in)."""
    admitted: list[int] = field(default_factory=list)
    finished: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    steps: int = 1


@dataclass(slots=True, eq=False)
class Admission:
    """A request admitted to a prefill batch, with the cached prefix it matched (locked)."""

    request: Request
    node: TreeNode
    cached: int
    """Prompt tokens already in the cache (the matched prefix), not computed."""


@dataclass(slots=True, eq=False)
class Running:
    """A request in the running batch."""

    request: Request
    record: RequestRecord
    node: TreeNode
    """End of the request's prompt in the cache, locked while it runs."""
    done_at: int
    """Value of the engine's decode-step counter at which the last output token is out."""
    private: int
    """Prompt tokens held outside the cache (a partial last page), reserved with the output."""


def synthetic_output(request: Request) -> np.ndarray:
    """Reply tokens for a request whose workload does not know them: ids from 2**40 up, which no
    prompt uses, and distinct per request, so a made-up reply never matches anything."""
    start = 2**40 + (request.id << 24)
    return np.arange(start, start + request.output_len, dtype=np.int64)


class ServingEngine:
    """Scheduling, memory and cache of a serving engine; subclasses execute the iterations.

    Subclasses implement `_execute_prefill` and `_execute_decode`, and may override how prompts and
    finished requests enter the cache (`_cache_prompt`, `_cache_finished`), e.g. to attach KV slots.

    Args:
        scheduler: a `Scheduler` or the name of one (`auction_gym.scheduler.scheduler_names()`).
        config: capacity limits and cost model.
    """

    def __init__(self, scheduler: Scheduler | str = "fcfs", config: EngineConfig | None = None) -> None:
        self.scheduler = make_scheduler(scheduler) if isinstance(scheduler, str) else scheduler
        self.config = config or EngineConfig()
        self.cost = self.config.cost_model
        self.cache = RadixCache(page_size=self.config.page_size)
        self.now = 0.0
        self.waiting: list[Request] = []
        self.running: list[Running] = []
        # Decode bookkeeping in O(log n) per event: every running request gains one token per
        # step, so a global step counter, a heap of completion steps and the summed context
        # replace per-request counters.
        self._steps = 0
        self._finishing: list[tuple[int, int, Running]] = []
        self._context = 0
        self.records: dict[int, RequestRecord] = {}
        self.reserved = 0
        self._pending: list[tuple[float, int, Request]] = []
        self._source: Iterator[Request] | None = None
        self._lookahead: Request | None = None

    @property
    def used_tokens(self) -> int:
        return self.cache.total_size + self.reserved

    def submit(self, requests: Request | Iterable[Request]) -> None:
        """Queue requests for arrival at their `arrival` time.

        A list (any Sequence) is taken at once, in any order. Any other iterable is read lazily as
        the clock reaches each arrival, so a long trace is never held in memory whole; it must be
        sorted by arrival.
        """
        if isinstance(requests, Request):
            requests = [requests]
        if isinstance(requests, Sequence):
            for r in requests:
                self._add_record(r)
                heapq.heappush(self._pending, (r.arrival, r.id, r))
            return
        if self._source is not None:
            raise RuntimeError("a lazily read workload is already being replayed")
        self._source = iter(requests)
        self._advance_source()

    def run(self, requests: Iterable[Request] | None = None, until: float = math.inf) -> Metrics:
        """Submit `requests` (if any) and step until nothing is left or the clock passes `until`."""
        if requests is not None:
            self.submit(requests)
        while self.now < until and self.step() is not None:
            pass
        return self.metrics()

    def metrics(self) -> Metrics:
        return summarize(list(self.records.values()))

    def step(self) -> Iteration | None:
        """Run one iteration; None when no request is waiting, running or still to arrive."""
        rejected = self._let_in_arrivals()
        start, queue_len = self.now, len(self.waiting)
        if self.waiting:
            admitted = self._prefill()
            if admitted:
                ids = [run.request.id for run in admitted]
                return Iteration("prefill", start, self.now, queue_len, ids, self._retire(self._pop_finished()), rejected)
        if self.running:
            steps, finished = self._decode()
            return Iteration("decode", start, self.now, queue_len, [], finished, rejected, steps)
        nxt = self._next_arrival()
        if math.isinf(nxt):
            return None if not rejected else Iteration("idle", start, start, queue_len, rejected=rejected)
        self.now = max(self.now, nxt)
        return Iteration("idle", start, self.now, queue_len, rejected=rejected)

    def _add_record(self, r: Request) -> None:
        if r.id in self.records:
            raise ValueError(f"request {r.id}: duplicate request id")
        self.records[r.id] = RequestRecord.of(r)

    def _advance_source(self) -> None:
        prev = self._lookahead
        self._lookahead = next(self._source, None)
        if self._lookahead is None:
            self._source = None
            return
        if prev is not None and self._lookahead.arrival < prev.arrival:
            raise ValueError(
                f"request {self._lookahead.id}: lazily read workloads must be sorted by arrival "
                f"({self._lookahead.arrival} after {prev.arrival})"
            )
        self._add_record(self._lookahead)

    def _next_arrival(self) -> float:
        t = self._pending[0][0] if self._pending else math.inf
        if self._lookahead is not None:
            t = min(t, self._lookahead.arrival)
        return t

    def _let_in_arrivals(self) -> list[int]:
        # Everything let in now arrived after everything already waiting, so appending the new
        # arrivals in FCFS order keeps the whole queue in FCFS order, as schedulers expect.
        rejected, arrived = [], []
        capacity = self.config.kv_capacity_tokens
        while self._next_arrival() <= self.now:
            if self._pending and self._pending[0][0] <= self.now:
                r = heapq.heappop(self._pending)[2]
            else:
                r = self._lookahead
                self._advance_source()
            need = r.prompt_len + r.output_len
            if need > capacity:
                self.records[r.id].rejected = (
                    f"prompt + output = {need} tokens exceeds kv_capacity_tokens = {capacity}"
                )
                rejected.append(r.id)
            else:
                arrived.append(r)
        if arrived:  # most iterations let in nothing
            self.waiting.extend(sorted(arrived, key=fcfs_key))
        return rejected

    def _admission_possible(self) -> bool:
        """False when no waiting request could be admitted whatever the order, so the scheduler
        (an auction over the whole queue) need not run: the running batch is full, or memory
        left plus all evictable cache cannot hold the smallest possible need (1 prompt token +
        the output) of any waiting request."""
        if len(self.running) >= self.config.max_running_requests:
            return False
        room = self.config.kv_capacity_tokens - self.used_tokens + self.cache.evictable_size
        # The first request usually fits, which settles it without the scan for the smallest.
        return room > self.waiting[0].output_len or room >= 1 + min(r.output_len for r in self.waiting)

    def _prefill(self) -> list[Running]:
        if not self._admission_possible():
            return []
        order = self.scheduler.order(self.waiting, self.cache)
        if len(order) != len(self.waiting):
            raise RuntimeError(f"scheduler {self.scheduler.name!r} returned {len(order)} of {len(self.waiting)} requests")
        cfg, cache = self.config, self.cache
        free = cfg.kv_capacity_tokens - self.used_tokens
        batch: list[Admission] = []
        new_total = 0
        sharing = (
            BatchPrefixes(cfg.in_batch_check_threshold, cfg.in_batch_deprioritize_threshold, cfg.page_size)
            if cfg.in_batch_prefix_caching else None
        )
        for r in order:
            if len(self.running) + len(batch) >= cfg.max_running_requests:
                break
            prompt = r.tokens[:-1]
            match = cache.match_prefix(prompt)
            if sharing is not None and sharing.holds(prompt, match.length):
                continue  # its prefix is being computed in this batch: it hits the cache in the next
            new = r.prompt_len - match.length
            if batch and new_total + new > cfg.max_prefill_tokens:
                break
            need = new + r.output_len
            cache.lock(match.last_node)
            if need > free:
                free += cache.evict(need - free)
            if need > free:
                cache.unlock(match.last_node)
                break
            free -= need
            new_total += new
            batch.append(Admission(r, match.last_node, match.length))
            if sharing is not None:
                sharing.add(prompt)
        if not batch:
            return []
        start = self.now
        self.now += self._execute_prefill(batch)
        admitted = []
        for adm in batch:
            r, rec = adm.request, self.records[adm.request.id]
            rec.admit, rec.first_token = start, self.now
            rec.cached_tokens, rec.computed_tokens = adm.cached, r.prompt_len - adm.cached
            node = self._cache_prompt(adm)
            cache.lock(node)
            cache.unlock(adm.node)
            private = r.prompt_len - node.depth
            self.reserved += r.output_len + private
            run = Running(r, rec, node, done_at=self._steps + r.output_len - 1, private=private)
            heapq.heappush(self._finishing, (run.done_at, r.id, run))
            self._context += r.prompt_len + 1
            admitted.append(run)
        if len(batch) == 1:
            self.waiting.remove(batch[0].request)  # by identity: Request has no value equality
        else:
            taken = {adm.request.id for adm in batch}
            self.waiting = [r for r in self.waiting if r.id not in taken]
        self.running.extend(admitted)
        return admitted

    def _decode(self) -> tuple[int, list[int]]:
        steps, seconds = self._execute_decode()
        self.now += seconds
        self._steps += steps
        self._context += steps * len(self.running)
        return steps, self._retire(self._pop_finished())

    def _steps_to_next_finish(self) -> int:
        """Decode steps until the first running request has all its output."""
        return self._finishing[0][0] - self._steps

    def _pop_finished(self) -> list[Running]:
        done = []
        while self._finishing and self._finishing[0][0] <= self._steps:
            done.append(heapq.heappop(self._finishing)[2])
        return done

    def _retire(self, done: list[Running]) -> list[int]:
        if not done:
            return []
        for run in done:
            r = run.request
            # The reservation is released before the insert that fills it, so the insert fits.
            self.reserved -= r.output_len + run.private
            self._context -= r.prompt_len + r.output_len
            self._cache_finished(run)
            self.cache.unlock(run.node)
            run.record.finish = self.now
            self.running.remove(run)  # by identity: Running has no value equality
        return [run.request.id for run in done]

    # Execution: what subclasses define.

    def _execute_prefill(self, batch: list[Admission]) -> float:
        """Compute the uncached prompt tokens of `batch`; return the seconds it took."""
        raise NotImplementedError

    def _execute_decode(self) -> tuple[int, float]:
        """Run decode steps of the running batch (at least one, at most `_steps_to_next_finish()`);
        return (steps, seconds)."""
        raise NotImplementedError

    def _cache_prompt(self, adm: Admission) -> TreeNode:
        """Insert a prompt whose prefill just ended; return its end node (locked while it runs)."""
        return self.cache.insert(adm.request.tokens, start=adm.node).last_node

    def _cache_finished(self, run: Running) -> None:
        """Insert a finished request's prompt + output into the cache."""
        r = run.request
        output = r.output_tokens if r.output_tokens is not None else synthetic_output(r)
        self.cache.insert(np.concatenate([r.tokens, output]), start=run.node)
