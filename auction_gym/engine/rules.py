"""The rules a `ServingEngine` follows, as one strategy object built from its `EngineConfig`:
SGLang's (`SGLangRules`, `reservation="sglang"`) or the exact ones (`OracleRules`, "oracle").

Both share SGLang's memory check and per-round page charges, and what keeps the waiting requests'
prefixes warm (`WaitingPrefixes`, stamped once per admission round). They differ in the output a
request is budgeted for and when its memory is taken:

- SGLang's (`schedule_policy.PrefillAdder`, `NewTokenRatioTracker`): a server knows only the
  client's cap `max_new_tokens`. A request is admitted when the free plus evictable memory, less
  what running requests may still need, holds its uncached prompt, min(cap - generated, clip) and
  a page, strictly (`EngineRules.fits`). A running request is assumed to need only `ratio` x
  min(cap - generated, clip) more: the ratio starts at `init_new_token_ratio`, falls by a fixed
  amount every decode step down to its floor, is re-estimated after a retraction, and returns to
  init when the engine idles. Decode tokens are allocated as they are produced, evicting as they
  go; when a step does not fit, the engine retracts (serving_engine.py).
- The exact ones: the true output is reserved in full at admission, so decode takes no memory and
  nothing is ever retracted (the engine knows what a server cannot).

`FutureOutput.offset(step)` is SGLang's running-requests term. Every running request's remaining
cap falls by one per decode step, so the sum is kept in closed form (O(1) per query and per
request added or removed) rather than summed over the batch at every admission round:
remaining_i(step) = key_i - step with key_i = cap_i - generated_i + admitted_step_i; the clip
min(., clip) only binds for requests whose remaining cap exceeds it, which wait in a heap until
they fall under it.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from ..request import Request
from ..waiting_prefixes import WaitingPrefixes

if TYPE_CHECKING:
    from .config import EngineConfig
    from .state import Running


class EngineRules:
    """What an engine budgets, checks and allocates, SGLang 0.5.23's arithmetic
    (`schedule_policy.PrefillAdder`, `PrefillBudget`) where both rule sets share it; a subclass
    says where they differ (the module docstring). Functions of the `EngineConfig`, and the state
    those rules keep (SGLang's ratio, the waiting marks); the engine keeps the room they are
    checked against and calls them where it applies a rule."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.clip = config.clip_max_new_tokens
        self.waiting_prefixes = WaitingPrefixes()
        """Keeps what waits warm in the cache's LRU order, every policy, every round (SGLang's rule)."""

    def cap(self, r: Request) -> int:
        """The output cap as the engine budgets it: max_new_tokens clipped to `EngineConfig.output_room`,
        as SGLang clips it; computed once per admission and passed to the methods below as `cap`."""
        return min(r.max_new_tokens, self.config.output_room(r.prompt_len))

    def smallest_need(self, r: Request, generated: int, cap: int) -> int:
        """The least a waiting request that has emitted `generated` output tokens could be admitted
        with: 1 token + its output reservation."""
        return 1 + self.output_need(r, generated, cap)

    def fits(self, need: int, room: float) -> bool:
        """SGLang's memory check (`PrefillAdder.add_one_req`, `PrefillBudget.check_prefill`): a
        request needing `need` tokens (uncached prompt + output reservation) goes in only if that
        plus a page is strictly below the room."""
        return need + self.config.page_size < room

    def round_charge(self, tokens: int) -> int:
        """What an admission of `tokens` prefill tokens takes from the rest of its round beyond
        them and its output: the last page rounded up and a page, as SGLang's `PrefillBudget.reserve`
        charges every admitted request and chunk (`_update_prefill_budget`)."""
        return self.config.paged(tokens) - tokens + self.config.page_size

    def chunk_end(self, length: int, cached: int, budget: int) -> int:
        """Where a prefill of tokens[cached:length] stops with `budget` tokens: the end, or a page
        boundary for a chunk (which the cache then holds whole)."""
        if length - cached <= budget:
            return length
        end = cached + budget
        return end - end % self.config.page_size

    # Where the rule sets differ: each subclass defines every method below.

    def output_need(self, r: Request, generated: int, cap: int) -> int:
        """Tokens of output a request is budgeted for at admission (its memory check)."""
        raise NotImplementedError

    def round_output(self, r: Request, generated: int, cap: int) -> int:
        """Output tokens an admission charges the rest of its round (and promises until it runs)."""
        raise NotImplementedError

    def chunked_output(self, r: Request, generated: int, cap: int) -> int:
        """The part of a chunked request's round output promised with its last chunk, not its first."""
        raise NotImplementedError

    def held(self, output: int) -> int:
        """Of an admission's `output_need`, the tokens allocated at once, held until it leaves."""
        raise NotImplementedError

    def room(self, base: float, step: int) -> float:
        """The admission room at decode step `step`, from `base` (free + evictable - promised)."""
        raise NotImplementedError

    def gives_back(self, left: int) -> float:
        """What preempting a running request with `left` tokens of `output_need` returns to the room."""
        raise NotImplementedError

    def joined(self, r: Request, generated: int, cap: int, emitted: int, step: int) -> int:
        """`r` joins the running batch at decode step `step`; returns the output its admission
        promised, which the running batch now counts."""
        raise NotImplementedError

    def left(self, run: Running, produced: int, step: int) -> int:
        """`run` leaves the running batch at decode step `step` (finished, or retracted); returns
        the decode tokens it holds outside the cache, those of the steps before `produced`."""
        raise NotImplementedError

    def decode_tokens(self, running: int) -> int:
        """Tokens of memory one decode step of `running` requests allocates (and evicts for)."""
        raise NotImplementedError

    def decode_limit(self, steps: int, running: int, free: int, blocked: int | None, base: float, step: int) -> int:
        """Most of `steps` decode steps that may run at once: while memory lasts and until an
        admission blocked on memory (`blocked` tokens; None: none can run) would fit the room,
        `base` its free + evictable - promised at decode step `step`."""
        raise NotImplementedError

    def decoded(self, steps: int) -> None:
        """`steps` decode steps ran without a retraction."""
        raise NotImplementedError

    def retracted(self, emitted: int, caps: int, running: int) -> None:
        """Retractions for memory left `running` requests that have emitted `emitted` tokens of `caps`."""
        raise NotImplementedError

    def idled(self) -> None:
        """The engine had nothing to run."""
        raise NotImplementedError

    @property
    def new_token_ratio(self) -> float:
        """The share of their remaining cap that running requests are assumed to need."""
        raise NotImplementedError


class SGLangRules(EngineRules):
    """SGLang's: the clipped cap is budgeted, running requests' remaining caps are counted at the
    adaptive new-token ratio, decode tokens are allocated as produced (module docstring)."""

    def __init__(self, config: EngineConfig) -> None:
        super().__init__(config)
        self.future = FutureOutput(config)

    def output_need(self, r: Request, generated: int, cap: int) -> int:
        return min(cap - generated, self.clip)  # the remaining cap, clipped

    def round_output(self, r: Request, generated: int, cap: int) -> int:
        # min(max_new_tokens, clip) even for a resumed request, as SGLang's `add_one_req` charges it
        # (its check uses the remaining cap, `output_need`).
        return min(cap, self.clip)

    def chunked_output(self, r: Request, generated: int, cap: int) -> int:
        # All of it: SGLang's `_select_prefill_admission` budgets a chunk no output
        # (`max_new_tokens = 0` while `is_chunked`) and `add_chunked_req` min(max_new_tokens, clip)
        # with the last; its first chunk's check still counts the output (`output_need`).
        return self.round_output(r, generated, cap)

    def held(self, output: int) -> int:
        return 0  # decode tokens are allocated as they are produced

    def room(self, base: float, step: int) -> float:
        return base - self.future.offset_after(step, 0)

    def gives_back(self, left: int) -> float:
        # SGLang's `_get_running_request_total_token_offset`: the remaining cap times the ratio.
        return self.future.ratio * left

    def joined(self, r: Request, generated: int, cap: int, emitted: int, step: int) -> int:
        self.future.add(r.id, cap - emitted, step)
        return self.round_output(r, generated, cap)

    def left(self, run: Running, produced: int, step: int) -> int:
        self.future.remove(run.request.id, step)
        return produced - run.first_step

    def decode_tokens(self, running: int) -> int:
        return running

    def decode_limit(self, steps: int, running: int, free: int, blocked: int | None, base: float, step: int) -> int:
        steps = min(steps, free // running)
        return steps if blocked is None else self._steps_until_fits(blocked, steps, running, base, step)

    def _steps_until_fits(self, need: int, limit: int, running: int, base: float, step: int) -> int:
        """Fewest decode steps (1..limit) after which a reservation of `need` tokens fits the
        admission room, as the ratio decays and decode tokens are allocated; `limit` if never.
        Exact unless a cap above `clip_max_new_tokens` falls under it meanwhile (then earlier)."""
        f = self.future
        for t in range(1, limit + 1):
            if self.fits(need, base - running * t - f.offset_after(step, t)):
                return t
            if f.ratio - t * f.decay <= f.floor:
                return limit  # from here the room only shrinks, by running x (1 - floor) a step
        return limit

    def decoded(self, steps: int) -> None:
        self.future.decayed(steps)

    def retracted(self, emitted: int, caps: int, running: int) -> None:
        # SGLang re-estimates the ratio as if every request left runs `retract_decode_steps` more.
        self.future.ratio = min(1.0, (emitted + self.config.retract_decode_steps * running) / (caps + 1))

    def idled(self) -> None:
        self.future.ratio = self.future.init  # SGLang resets the ratio when it idles

    @property
    def new_token_ratio(self) -> float:
        return self.future.ratio


class OracleRules(EngineRules):
    """The exact ones: the output a request will produce is budgeted and allocated at admission,
    so decode takes no memory and nothing is retracted for it (module docstring)."""

    def output_need(self, r: Request, generated: int, cap: int) -> int:
        return r.output_len - generated

    def round_output(self, r: Request, generated: int, cap: int) -> int:
        return r.output_len - generated

    def chunked_output(self, r: Request, generated: int, cap: int) -> int:
        return 0  # held from the first chunk on

    def held(self, output: int) -> int:
        return output

    def room(self, base: float, step: int) -> float:
        return base  # running requests hold their output already

    def gives_back(self, left: int) -> float:
        return left

    def joined(self, r: Request, generated: int, cap: int, emitted: int, step: int) -> int:
        return 0  # its output is held, not promised

    def left(self, run: Running, produced: int, step: int) -> int:
        return 0  # its output is in `held`

    def decode_tokens(self, running: int) -> int:
        return 0

    def decode_limit(self, steps: int, running: int, free: int, blocked: int | None, base: float, step: int) -> int:
        return steps  # decode changes neither memory nor the room

    def decoded(self, steps: int) -> None:
        pass  # nothing is estimated

    def retracted(self, emitted: int, caps: int, running: int) -> None:
        pass  # nothing is estimated

    def idled(self) -> None:
        pass  # nothing is estimated

    @property
    def new_token_ratio(self) -> float:
        return self.config.init_new_token_ratio  # never adapted: running requests hold their output


RULES: dict[str, type[EngineRules]] = {"sglang": SGLangRules, "oracle": OracleRules}
"""Each rule set by the name `EngineConfig.reservation` gives it."""


def rules_for(config: EngineConfig) -> EngineRules:
    """The rule set `config` selects (`EngineConfig.reservation`), built from it."""
    return RULES[config.reservation](config)


class FutureOutput:
    """The running requests' remaining output caps, and the ratio that scales them."""

    def __init__(self, config: EngineConfig) -> None:
        self.clip = config.clip_max_new_tokens
        self.init, self.floor = config.init_new_token_ratio, config.min_new_token_ratio
        self.decay = (self.init - self.floor) / config.new_token_ratio_decay_steps
        self.ratio = self.init
        self._sum = 0  # sum of key_i over requests whose remaining cap is below the clip
        self._count = 0
        self._clipped: list[tuple[int, int]] = []  # (key_i - clip, request id): not yet below
        self._where: dict[int, tuple[int, bool]] = {}  # request id -> (key_i, clipped)

    def add(self, rid: int, remaining: int, step: int) -> None:
        """A request joins the running batch at decode step `step` with `remaining` tokens of its cap left."""
        key = remaining + step
        clipped = remaining > self.clip
        self._where[rid] = (key, clipped)
        if clipped:
            heapq.heappush(self._clipped, (key - self.clip, rid))
        else:
            self._sum += key
            self._count += 1

    def remove(self, rid: int, step: int) -> None:
        """A request leaves the running batch (finished or retracted)."""
        self._settle(step)
        key, clipped = self._where.pop(rid)
        if clipped:  # rare (a cap above the clip): rebuild rather than keep tombstones
            self._clipped = [e for e in self._clipped if e[1] != rid]
            heapq.heapify(self._clipped)
        else:
            self._sum -= key
            self._count -= 1

    def offset(self, step: int) -> float:
        """Tokens the running requests are assumed to still need, at decode step `step`."""
        return self.offset_after(step, 0)

    def offset_after(self, step: int, t: int) -> float:
        """`offset(step + t)` once `t` more decode steps run without a retraction (the ratio
        decayed); exact unless a clipped cap falls under the clip meanwhile (then an over-estimate)."""
        if self._clipped:
            self._settle(step)
        ratio = max(self.ratio - t * self.decay, self.floor)
        return ratio * (self._sum - self._count * (step + t) + self.clip * len(self._clipped))

    def decayed(self, steps: int) -> None:
        """`steps` decode steps ran without a retraction."""
        self.ratio = max(self.ratio - steps * self.decay, self.floor)

    def _settle(self, step: int) -> None:
        while self._clipped and self._clipped[0][0] <= step:
            rid = heapq.heappop(self._clipped)[1]
            key, _ = self._where[rid]
            self._where[rid] = (key, False)
            self._sum += key
            self._count += 1
