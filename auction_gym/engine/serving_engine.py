"""A continuous-batching serving engine with a radix prefix cache (docs/design.md section 4).

`ServingEngine` holds what every engine shares: arrivals, the waiting queue, admission in the
scheduler's order, KV memory, the radix cache, per-request records. How an iteration executes, and
so how long it takes, is left to subclasses: `SimEngine` takes times from a cost model,
`gpu_backend.TorchEngine` runs a model and measures them, and the market drives either through this
interface. One `step()` is one iteration as in SGLang's scheduler loop (docs/engine.md, "One
iteration, step by step", has the rules and the memory invariant).
"""

from __future__ import annotations

import heapq
import math
from numbers import Real
from typing import Callable, Iterable, Sequence

import numpy as np

from .._checks import config_or_default
from ..policy import AdmissionPolicy, Decision, WaitingRound, unpack_admission
from ..radix_cache import MatchResult, RadixCache, TreeNode
from ..registry import make_scheduler
from ..request import Request
from ..scheduler.base import decision_priority
from ..waiting_prefixes import WaitingPrefixes
from .arrivals import Arrivals
from .config import EngineConfig
from .in_batch import behind, deprioritized
from .preemption import preemption_victims
from .queue import WaitingQueue
from .records import Metrics, RequestRecord, summarize
from .rules import EngineRules, rules_for
from .state import Admission, Iteration, Running


def synthetic_output(request: Request) -> np.ndarray:
    """Reply tokens for a request whose workload does not know them: ids from 2**40 up, which no
    prompt uses, and distinct per request, so a made-up reply never matches anything."""
    start = 2**40 + (request.id << 24)
    out = np.arange(start, start + request.output_len, dtype=np.int64)
    out.flags.writeable = False  # so the cache keeps it as it is, not a copy (`RadixCache.insert`)
    return out


def as_policy(scheduler: AdmissionPolicy | str) -> AdmissionPolicy:
    """An engine's admission policy: the one registered under the name, or the policy adopted."""
    return make_scheduler(scheduler) if isinstance(scheduler, str) else AdmissionPolicy.adopt(scheduler)


class Replay:
    """Submitting a workload and running it out, on top of `step()`: what every engine offers,
    one replica (`ServingEngine`) or many (`auction_gym.cluster.ClusterEngine`). Needs `arrivals`,
    `records`, the clock `now` and `step()`."""

    arrivals: Arrivals
    records: dict[int, RequestRecord]
    now: float

    def step(
        self, multipliers: Sequence[float] | None = None, remaining: Sequence[float] | None = None
    ) -> Iteration | None:
        raise NotImplementedError

    def submit(self, requests: Request | Iterable[Request]) -> None:
        """Queue requests for arrival at their `arrival` time: a Sequence at once, in any order (a
        non-Request or a repeated id refused before any is taken); any other iterable lazily as the
        clock reaches it (never held whole), so sorted by arrival, and checked only as it is read:
        an entry that is not a Request, a repeated id or an arrival out of order raises from the
        `step` (or `run`) whose clock reaches it, not here (`Arrivals.submit`)."""
        self.arrivals.submit(requests)

    def run(self, requests: Iterable[Request] | None = None, until: float = math.inf) -> Metrics:
        """Submit `requests` (if any) and step until nothing is left or the clock passes `until`
        (seconds; ValueError for NaN, which no clock passes, or a non-number)."""
        if not isinstance(until, Real) or math.isnan(until):  # checked before anything is submitted
            raise ValueError(f"until must be a time in seconds (inf: run to the end), got {until!r}")
        if requests is not None:
            self.submit(requests)
        while self.now < until and self.step() is not None:
            pass
        return self.metrics()

    def metrics(self) -> Metrics:
        return summarize(list(self.records.values()))


class ServingEngine(Replay):
    """Scheduling, memory and cache of a serving engine; subclasses execute the iterations.

    Subclasses implement `_execute_prefill` and `_execute_decode`, and may override how sequences
    and finished requests enter the cache (`_cache_prompt`, `_cache_finished`), e.g. to attach KV
    slots, and what a retraction frees (`_release`).

    Args:
        scheduler: an `AdmissionPolicy` (`auction_gym.policy`), or the name of one
            (`auction_gym.scheduler_names()`).
        config: capacity limits, admission rules and cost model.
        rules: the rule set it follows (`rules.EngineRules`); None: the one `config.reservation`
            names (`rules.rules_for`).
    """

    def __init__(
        self, scheduler: AdmissionPolicy | str = "fcfs", config: EngineConfig | None = None,
        rules: EngineRules | None = None,
    ) -> None:
        self.scheduler = as_policy(scheduler)
        self.config = config_or_default("config", config, EngineConfig)
        self.cost = self.config.cost_model
        self.cache = RadixCache(page_size=self.config.page_size, eviction_policy=self.config.radix_eviction_policy)
        self.rules = rules or rules_for(self.config)
        """What an admission budgets and checks, and what decode allocates (rules.py)."""
        self.now = 0.0
        self.queue = WaitingQueue()
        self.running: list[Running] = []
        # Decode bookkeeping in O(log n) per event: every running request gains one token per
        # step, so a global step counter, a heap of completion steps and the summed context
        # replace per-request counters.
        self._steps = 0
        self._finishing: list[tuple[int, int, Running]] = []
        self._context = 0
        self.records: dict[int, RequestRecord] = {}
        self.reserved = 0
        self._chunked: Admission | None = None
        self._promised = 0
        """Tokens promised but not allocated: the rest of the chunked request's prompt, and the
        output reservations of the requests a prefill round admits whole or with their last chunk,
        until they join the running batch (a chunked request's output waits for its last chunk,
        as in SGLang)."""
        self._blocked: int | None = None
        """The reservation the last admission round failed on (None: it did not fail on memory)."""
        self._preemption_short = False
        """Whether the last admission round's preemption failed only for room (a running request's
        priority was low enough), so that it may succeed after any decode step."""
        self.arrivals = Arrivals(self.records)

    @property
    def waiting(self) -> list[Request]:
        """The waiting requests, first come, first served (read-only: the engine's `queue` owns them)."""
        return self.queue.requests

    def in_system(self) -> list[Request]:
        """Every request the engine holds and has not finished: waiting (retracted ones included),
        in a chunked prefill, or running. (A request that arrived during the last iteration joins
        the queue at the start of the next one, and is not here yet.)"""
        chunked = [self._chunked.request] if self._chunked is not None else []
        return [*self.queue.requests, *chunked, *(run.request for run in self.running)]

    @property
    def waiting_prefixes(self) -> WaitingPrefixes:
        """What keeps the waiting requests' prefixes warm (the rules', `EngineRules.waiting_prefixes`)."""
        return self.rules.waiting_prefixes

    @property
    def used_tokens(self) -> int:
        return self.cache.total_size + self.reserved

    @property
    def active_tokens(self) -> int:
        """Tokens of the requests in flight: the running ones' context (prompt + output so far)
        and the waiting ones' prompts (what a cluster's KV router counts as a worker's load)."""
        return self._context + sum(r.prompt_len for r in self.queue.requests)

    @property
    def new_token_ratio(self) -> float:
        """SGLang's adaptive share of their remaining cap that running requests are assumed to need."""
        return self.rules.new_token_ratio

    def step(
        self, multipliers: Sequence[float] | None = None, remaining: Sequence[float] | None = None
    ) -> Iteration | None:
        """Run one iteration; None when no request is waiting, running or still to arrive.
        `multipliers` (a market's, one per bidder) go to an auction's `decide`: request r bids
        multipliers[r.bidder] x urgency; without them (a replay) each request bids its own `bid`.
        `remaining` (a market's: each bidder's budget left, money) goes to a design that reads
        budgets (`WaitingRound.remaining`); None in a replay, where no budget binds."""
        rejected = self._let_in_arrivals()
        start, queue_len = self.now, len(self.queue.requests)
        preempted: list[int] = []  # reported by the iteration that runs, admitted or not
        if queue_len or self._chunked is not None:
            batch, decision, preempted = self._schedule_prefill(multipliers, remaining)
            if batch:
                admitted, resumed = self._run_prefill(batch)
                finished = self._retire(self._pop_finished())
                # Positional (steps, resumed, retracted, replica, decision, preempted): hot path, every iteration.
                return Iteration("prefill", start, self.now, queue_len, admitted, finished, rejected, 1, resumed, [],
                                 0, decision, preempted)
        if self.running:
            retracted = self._make_room()
            steps, finished = self._decode(retracted=bool(retracted))
            return Iteration("decode", start, self.now, queue_len, [], finished, rejected, steps, [], retracted,
                             0, None, preempted)
        self.rules.idled()
        nxt = self.arrivals.next_time()
        if math.isinf(nxt):
            if not rejected and not preempted:
                return None
            return Iteration("idle", start, start, queue_len, rejected=rejected, preempted=preempted)
        self.now = max(self.now, nxt)
        return Iteration("idle", start, self.now, queue_len, rejected=rejected, preempted=preempted)

    def _let_in_arrivals(self) -> list[int]:
        # Everything let in now arrived after everything already waiting: appended in FCFS order.
        rejected, arrived = [], []
        for r in self.arrivals.due(self.now):
            if (reason := self.config.rejection(r.prompt_len, r.output_len)) is not None:
                self.records[r.id].rejected = reason
                rejected.append(r.id)
            else:
                arrived.append(r)
        if arrived:  # most iterations let in nothing
            rules = self.rules
            self.queue.arrive(arrived, [rules.smallest_need(r, 0, rules.cap(r)) for r in arrived])
        return rejected

    # Admission (step 2).

    def _room(self) -> float:
        """Tokens a new admission may take: free + evictable, less what is promised to the
        chunked request in flight and what the rules count for the running requests' output."""
        return self.rules.room(self._free_and_evictable() - self._promised, self._steps)

    def _make_free(self, tokens: int) -> None:
        """Evict until `tokens` are free, or nothing evictable is left."""
        short = tokens - (self.config.kv_capacity_tokens - self.used_tokens)
        if short > 0:
            self.cache.evict(short)

    def _allocate(self, tokens: int) -> None:
        """Take `tokens` of KV memory outside the cache, evicting as needed; the caller has checked
        that they fit."""
        self._make_free(tokens)
        if self.used_tokens + tokens > self.config.kv_capacity_tokens:
            raise RuntimeError(f"allocation of {tokens} tokens does not fit: the admission check is wrong")
        self.reserved += tokens

    def _admission_possible(self, taken: int, charged: int) -> bool:
        """False when no waiting request could be admitted whatever the order, so the scheduler
        (an auction over the whole queue) need not run: the running batch is full, or the room,
        less the round's `charged` tokens, cannot hold the smallest possible need (1 token + its
        output reservation) of any request. With priority preemption a full batch does not settle
        it: SGLang then orders the queue and tries to preempt for its head."""
        if len(self.running) + taken >= self.config.max_running_requests:
            return self.config.priority_preemption
        room = self._room() - charged
        queue = self.queue
        if self.rules.fits(queue.need[queue.requests[0].id], room):  # the head usually fits, which settles it
            return True
        least = queue.smallest_need()
        if self.rules.fits(least, room):
            return True
        self._blocked = least
        return False

    def _schedule_prefill(
        self, multipliers: Sequence[float] | None, remaining: Sequence[float] | None
    ) -> tuple[list[Admission], Decision | None, list[int]]:
        """Choose this iteration's prefill batch and allocate its tokens: the chunked request in
        flight first, then requests in the scheduler's order. Returns the batch, the auction's
        decision (None when no auction was asked) and the ids of the running requests preempted
        for it."""
        self._blocked, self._preemption_short = None, False
        batch: list[Admission] = []
        budget, charged = self.config.prefill_budget, 0
        if self._chunked is not None:
            adm, self._chunked = self._chunked, None
            adm.cached, adm.first = adm.end, False
            adm.end = self.rules.chunk_end(len(adm.tokens), adm.cached, budget)
            self._promised -= adm.extend  # promised when it was admitted, allocated now
            if adm.last_chunk:
                self._promised += self.rules.chunked_output(adm.request, adm.generated, adm.cap)
            self._allocate(adm.extend)
            batch.append(adm)
            budget -= adm.extend
            charged = self.rules.round_charge(adm.extend)
        if budget > 0 and self.queue.requests and self._admission_possible(len(batch), charged):
            return batch, *self._admit_from_queue(batch, budget, charged, multipliers, remaining)
        return batch, None, []

    def _admit_from_queue(
        self, batch: list[Admission], budget: int, charged: int, multipliers: Sequence[float] | None,
        remaining: Sequence[float] | None,
    ) -> tuple[Decision | None, list[int]]:
        """Admit waiting requests in the scheduler's order while they fit; `charged`: what the
        round has taken beyond allocations and promises (`EngineRules.round_charge`). Returns
        the auction's decision (None for a policy without money) and the ids of the running
        requests preempted."""
        cfg = self.config
        order, decision = self._order(self.cache, multipliers, remaining)
        priority = decision_priority(decision if cfg.reads_priorities else None)  # read only if a rule needs them
        chunking, first = cfg.chunked_prefill_size is not None, len(batch)
        preempted: list[int] = []
        for r in order:
            if len(self.running) + len(batch) >= cfg.max_running_requests and not (
                cfg.priority_preemption and self._preempt_for(r, priority(r), charged, preempted)
            ):
                break
            fit = self._fit(r, budget, charged, chunking, bool(batch))
            if fit is None:
                break
            adm = self._take(r, *fit, priority)
            batch.append(adm)
            computed = adm.end - adm.cached
            budget -= computed
            charged += self.rules.round_charge(computed)
            if adm.end != len(adm.tokens):
                break  # the batch's budget is spent
        self.queue.remove([adm.request for adm in batch[first:]])
        return decision, preempted

    def _fit(
        self, r: Request, budget: int, charged: int, chunking: bool, later: bool
    ) -> tuple[np.ndarray, MatchResult, int, int, int] | None:
        """The check of admitting waiting request `r`: how far its prefill reaches within the batch's
        `budget` (`later`: not the batch's first) and whether its need fits the room less `charged`.
        Returns (tokens, prefix match, end, cap, output need) with the match locked; None stops
        admission (`_blocked` set when memory stopped it)."""
        cache, tokens = self.cache, self.queue.tokens(r)
        match = cache.match_prefix(tokens[:-1], start=self.rules.waiting_prefixes.start(r, len(tokens) - 1))
        extend = len(tokens) - match.length
        end = len(tokens)
        if chunking and extend > budget:
            end = self.rules.chunk_end(end, match.length, budget)
            if end <= match.length:
                return None
        elif not chunking and later and self.config.paged(extend) >= budget:
            return None  # only the first request may reach max_prefill_tokens (SGLang's `>=`, in pages)
        cap = self.rules.cap(r)
        output = self.rules.output_need(r, len(tokens) - r.prompt_len, cap)
        need = extend + output
        cache.lock(match.last_node)
        if not self.rules.fits(need, self._room() - charged):
            cache.unlock(match.last_node)
            self._blocked = need
            return None
        return tokens, match, end, cap, output

    def _take(
        self, r: Request, tokens: np.ndarray, match: MatchResult, end: int, cap: int, output: int,
        priority: Callable[[Request], int],
    ) -> Admission:
        """The act of admitting `r` as `_fit` checked it: allocate what this prefill computes and
        what the rules hold for its output, promise the rest."""
        generated = len(tokens) - r.prompt_len
        held = self.rules.held(output)
        self._allocate(end - match.length + held)
        output = self.rules.round_output(r, generated, cap) - held
        if end != len(tokens):
            output -= self.rules.chunked_output(r, generated, cap)
        self._promised += len(tokens) - end + output
        # Positional (first=True, held): hot path, every admission.
        return Admission(r, tokens, match.last_node, match.length, end, cap, generated, True, held,
                         priority(r), self.queue.joined[r.id])

    def _preempt_for(self, r: Request, priority: int, charged: int, preempted: list[int]) -> bool:
        """SGLang's `preempt_to_schedule` for waiting request `r` of `priority` met with the running
        batch full (preemption.py): preempt the running requests it outranks by more than the
        threshold, as many as its uncached prompt and min(max_new_tokens, clip) need, appending
        their ids to `preempted`. False when it preempts none (admission stops)."""
        tokens = self.queue.tokens(r)
        need = len(tokens) - self.cache.prefix_len(tokens[:-1])
        need += self.rules.round_output(r, len(tokens) - r.prompt_len, self.rules.cap(r))
        threshold = self.config.priority_preemption_threshold
        victims = preemption_victims(self.running, priority, threshold, need - (self._room() - charged),
                                     self._gives_back)
        if not victims:
            self._preemption_short = any(priority - run.priority > threshold for run in self.running)
            return False
        for run in victims:
            self._retract(run, len(self.running) - 1)
            run.record.preemptions += 1
            preempted.append(run.request.id)
        self._forget({run.request.id for run in victims})
        return True

    def _gives_back(self, run: Running) -> float:
        """What preempting `run` returns to the admission room as SGLang counts it
        (`_get_running_request_total_token_offset`): its remaining output cap, clipped, times the
        new-token ratio (under "oracle", the output it holds and has not produced)."""
        return self.rules.gives_back(self.rules.output_need(run.request, run.generated(self._steps), run.cap))

    def _order(
        self, cache: RadixCache, multipliers: Sequence[float] | None, remaining: Sequence[float] | None
    ) -> tuple[list[Request], Decision | None]:
        """The round's admission order of the waiting queue (what waits refreshed in the cache
        first, SGLang's in-batch rule applied after) and the auction's decision it came from
        (None for a policy without money, which is asked for an order alone)."""
        waiting, prefixes = self.queue.requests, self.rules.waiting_prefixes
        changes = prefixes.refresh(waiting, cache, self.queue.take_changes())
        round_ = WaitingRound(waiting, cache, multipliers, remaining, changes, prefixes.length_of)
        held = self._in_batch_deprioritized(round_)
        order, decision = unpack_admission(self.scheduler.admit(round_))
        if len(order) != len(waiting):
            raise RuntimeError(f"scheduler {self.scheduler.name!r} returned {len(order)} of {len(waiting)} requests")
        ordered = set(map(id, order))  # by identity, as the queue removes them
        if len(ordered) != len(waiting) or not ordered.issuperset(map(id, waiting)):
            raise RuntimeError(f"scheduler {self.scheduler.name!r} returned an order that is not a permutation "
                               "of the waiting queue")
        order = behind(order, waiting, held)
        if self.scheduler.sorts_in_place:
            self.queue.reorder(order)  # SGLang's list keeps this order for the next round
        return order, decision

    def _in_batch_deprioritized(self, round_: WaitingRound) -> set[int]:
        """Ids of the waiting requests SGLang's in-batch prefix check puts behind the others this
        round (`in_batch.py`): none when the config has the rule off or the policy declines it."""
        cfg, waiting = self.config, round_.queue
        if not cfg.in_batch_prefix_caching or not self.scheduler.in_batch_deprioritizes(len(waiting)):
            return set()
        cached = round_.prefix_lens
        threshold = cfg.in_batch_deprioritize_threshold
        return deprioritized(waiting, cached, lambda r: self.queue.head(r, threshold), cfg.in_batch_check_threshold)

    def _run_prefill(self, batch: list[Admission]) -> tuple[list[int], list[int]]:
        """Execute the batch; cache what it computed; start the requests whose prefill is complete.
        Returns the ids admitted anew and those resumed after a retraction."""
        start = self.now
        self.now += self._execute_prefill(batch)
        admitted, resumed = [], []
        for adm in batch:
            r, rec = adm.request, self.records[adm.request.id]
            if adm.first:
                (resumed if adm.generated else admitted).append(r.id)
                if not adm.generated:
                    rec.admit, rec.cached_tokens = start, adm.cached
            extend = adm.extend  # read once: a property
            rec.computed_tokens += extend
            node = self._cache_prompt(adm)
            self.cache.move_lock(adm.node, node)
            self.reserved -= extend - (adm.end - node.depth)  # in the cache now, bar a partial page
            if adm.last_chunk:
                if adm.generated:
                    self._protect_prompt(node, r, adm.priority)
                self._start_running(adm, node)
            else:
                adm.node, self._chunked = node, adm
        return admitted, resumed

    def _start_running(self, adm: Admission, node: TreeNode) -> None:
        r, rec = adm.request, self.records[adm.request.id]
        emitted, cap = adm.generated + 1, adm.cap
        # Positional (done_at, held, first_step, emitted, cap): hot path, every admission.
        run = Running(r, rec, node, self._steps + r.output_len - emitted, adm.end - node.depth + adm.held,
                      self._steps, emitted, cap, adm.priority, adm.joined)
        self._promised -= self.rules.joined(r, adm.generated, cap, emitted, self._steps)
        if not adm.generated:
            rec.first_token = self.now
        heapq.heappush(self._finishing, (run.done_at, r.id, run))
        self._context += len(adm.tokens) + 1
        self.running.append(run)

    # Decode and retraction (step 3).

    def _free_and_evictable(self) -> int:
        """Capacity less what is locked and what is allocated outside the cache."""
        return self.config.kv_capacity_tokens - self.cache.protected_size - self.reserved

    def _make_room(self) -> list[int]:
        """Retract running requests until the next decode step fits (SGLang's `retract_decode`):
        fewest output tokens first, then longest prompt; at least one, never the last. None under
        rules whose decode takes no memory."""
        step_tokens = self.rules.decode_tokens
        if self._free_and_evictable() >= step_tokens(len(self.running)):
            return []
        step = self._steps
        keep = sorted(self.running, key=lambda run: (run.generated(step), -run.request.prompt_len), reverse=True)
        retracted: list[int] = []
        while len(keep) > 1 and (not retracted or self._free_and_evictable() < step_tokens(len(keep))):
            run = keep.pop()
            self._retract(run, len(keep))
            retracted.append(run.request.id)
        if self._free_and_evictable() < step_tokens(len(keep)):
            raise RuntimeError("a lone running request does not fit: kv_capacity_tokens admission check is wrong")
        self._forget(set(retracted))
        self.rules.retracted(sum(run.generated(step) for run in keep), sum(run.cap for run in keep), len(keep))
        return retracted

    def _forget(self, gone: set[int]) -> None:
        """Drop the retracted requests `gone` (ids) from the heap of completion steps."""
        self._finishing = [e for e in self._finishing if e[1] not in gone]
        heapq.heapify(self._finishing)

    def _retract(self, run: Running, still_running: int) -> None:
        """Send `run` back to the waiting queue, freeing what it holds outside the cache: a
        retraction for memory (`_make_room`) or a priority preemption.
        `still_running`: the requests left in the batch, whose next steps SGLang frees room for at once."""
        r, step = run.request, self._steps
        generated = run.generated(step)
        self.reserved -= run.held + self.rules.left(run, step, step)
        self._context -= r.prompt_len + generated
        self._release(run, generated)
        self.cache.unlock(run.node)
        self.running.remove(run)  # by identity: Running has no value equality
        run.record.retractions += 1
        tokens = np.concatenate([r.tokens, self._output_tokens(r)[:generated]])
        self.queue.put_back(r, tokens, self.rules.smallest_need(r, generated, run.cap))
        self._make_free(still_running * self.config.retract_decode_steps)

    def _decode(self, retracted: bool) -> tuple[int, list[int]]:
        n = len(self.running)
        steps, seconds = self._execute_decode()
        # One eviction for every step's tokens: nothing touches the cache between steps, so it
        # evicts what a step-by-step one would (an engine that holds real memory, such as the
        # torch engine, frees each step's slots before running it).
        self._allocate(steps * self.rules.decode_tokens(n))
        # SGLang decays the ratio after every decode step but one that retracted (which set it).
        self.rules.decoded(steps - retracted)
        self.now += seconds
        self._steps += steps
        self._context += steps * n
        return steps, self._retire(self._pop_finished())

    def _decode_limit(self) -> int:
        """Most decode steps that may run at once: up to the first request to finish, and as the
        rules allow (`EngineRules.decode_limit`: under "sglang", while memory lasts and until the
        admission that failed on memory would fit)."""
        steps = self._finishing[0][0] - self._steps
        if self._preemption_short:
            return 1  # the room grows as the ratio decays: the preemption may pass after any step
        n, free = len(self.running), self._free_and_evictable()
        blocked = self._blocked if n < self.config.max_running_requests else None
        return self.rules.decode_limit(steps, n, free, blocked, free - self._promised, self._steps)

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
            # The memory is released before the insert that fills it, so the insert fits.
            self.reserved -= run.held + self.rules.left(run, run.done_at, self._steps)
            self._context -= r.prompt_len + r.output_len
            self._cache_finished(run)
            self._protect_prompt(run.node, r, run.priority)
            self.cache.unlock(run.node)
            run.record.finish = self.now
            self.running.remove(run)  # by identity: Running has no value equality
        return [run.request.id for run in done]

    # Execution: what subclasses define.

    def _execute_prefill(self, batch: list[Admission]) -> float:
        """Compute tokens[cached:end] of every admission in `batch`; return the seconds it took."""
        raise NotImplementedError

    def _execute_decode(self) -> tuple[int, float]:
        """Run decode steps of the running batch (at least one, at most `_decode_limit()`);
        return (steps, seconds). The engine accounts their tokens afterwards; one that holds real
        memory frees room for each step first (`_make_free`)."""
        raise NotImplementedError

    def _output_tokens(self, r: Request) -> np.ndarray:
        """The request's reply: the workload's, or a made-up one (`synthetic_output`)."""
        return r.output_tokens if r.output_tokens is not None else synthetic_output(r)

    def _cache_prompt(self, adm: Admission) -> TreeNode:
        """Insert what a prefill computed, tokens[:end], with the request's priority; return its end
        node (locked while it runs)."""
        return self.cache.insert(adm.tokens[: adm.end], start=adm.node, priority=adm.priority).last_node

    def _cache_finished(self, run: Running) -> None:
        """Insert a finished request's prompt + output, bar the last output token (never computed)."""
        r, node = run.request, run.node
        output = self._output_tokens(r)[:-1]
        # The cache holds the path to run.node (locked), so only what follows it is passed: the
        # output alone once the prompt is cached whole, with no copy of prompt + output made.
        skip = node.depth - r.prompt_len
        rest = output[skip:] if skip >= 0 else np.concatenate([r.tokens[node.depth:], output])
        self.cache.extend(node, rest, priority=run.priority)

    def _protect_prompt(self, node: TreeNode, r: Request, priority: int) -> None:
        """Under `priority` eviction, SGLang's insert of prompt + output at `priority` leaves the
        prompt (whole pages) at `priority` + 1, so the output goes first (`RadixCache._insert_cache`,
        `split_prompt`): here when the prompt ends on a node on `node`'s path."""
        if self.cache.eviction_policy != "priority":
            return
        end = r.prompt_len - r.prompt_len % self.config.page_size
        while node.depth > end:
            node = node.parent
        if node.depth == end:
            self.cache.raise_priority(node, priority + 1)

    def _release(self, run: Running, generated: int) -> None:
        """Free what a retracted request holds outside the cache (a subclass's KV slots)."""
