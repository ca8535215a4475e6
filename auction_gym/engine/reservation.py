"""What an admission budgets: memory set aside for output not generated yet, SGLang's estimate
(`EngineConfig.reservation`), and SGLang's memory check and per-round page charges
(`AdmissionRules`).

A server does not know how long a reply will be, only the client's cap `max_new_tokens`. SGLang
(`schedule_policy.PrefillAdder`, `NewTokenRatioTracker`) admits a request when the free plus
evictable memory, less what running requests may still need, holds its uncached prompt,
min(cap - generated, clip) and a page, strictly (`AdmissionRules.fits`). A running request is
assumed to need only `ratio` x min(cap - generated, clip) more: the ratio starts at
`init_new_token_ratio`, falls by a fixed amount every decode step down to its floor, is
re-estimated after a retraction, and returns to init when the engine idles. Decode tokens are allocated as they are produced; when they run out,
the engine retracts (serving_engine.py).

`FutureOutput.offset(step)` is that running-requests term. Every running request's remaining cap
falls by one per decode step, so the sum is kept in closed form (O(1) per query and per request
added or removed) rather than summed over the batch at every admission round:
remaining_i(step) = key_i - step with key_i = cap_i - generated_i + admitted_step_i; the clip
min(., clip) only binds for requests whose remaining cap exceeds it, which wait in a heap until
they fall under it.
"""

from __future__ import annotations

import heapq

from ..request import Request
from .config import EngineConfig


class AdmissionRules:
    """The arithmetic of one admission, SGLang 0.5.23's (`schedule_policy.PrefillAdder`,
    `PrefillBudget`) under the "sglang" reservation: the output a request is budgeted for, the
    memory check, what an admission charges the rest of its round, and where a chunk ends.
    Functions of the engine's `EngineConfig` alone; the engine keeps the room they are checked
    against."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.sglang = config.reservation == "sglang"
        """Budget max_new_tokens (SGLang), not the true output length ("oracle")."""
        self.clip = config.clip_max_new_tokens

    def cap(self, r: Request) -> int:
        """The request's output cap as the engine budgets it: max_new_tokens, clipped to
        `EngineConfig.output_room` as SGLang clips it (never below the true output, which
        `EngineConfig.rejection` ensures). The methods below take it as `cap`: the engine computes
        it once per admission, not once per term."""
        return min(r.max_new_tokens, self.config.output_room(r.prompt_len))

    def output_need(self, r: Request, generated: int, cap: int) -> int:
        """Tokens of output a request is budgeted for at admission: under "sglang" its remaining
        cap, clipped; under "oracle" the output it will actually produce."""
        if self.sglang:
            return min(cap - generated, self.clip)
        return r.output_len - generated

    def round_output(self, r: Request, generated: int, cap: int) -> int:
        """Output tokens an admission charges the rest of its round (and promises until it runs):
        under "sglang" min(max_new_tokens, clip) even for a resumed request, as SGLang's
        `add_one_req` charges it (its check uses the remaining cap, `output_need`)."""
        if self.sglang:
            return min(cap, self.clip)
        return r.output_len - generated

    def chunked_output(self, r: Request, generated: int, cap: int) -> int:
        """The part of a chunked request's round output promised with its last chunk, not its
        first: under "sglang" all of it, as SGLang's `_select_prefill_admission` budgets a chunk no
        output (`max_new_tokens = 0` while `is_chunked`) and `add_chunked_req` min(max_new_tokens,
        clip) with the last; its first chunk's check still counts the output (`output_need`)."""
        return self.round_output(r, generated, cap) if self.sglang else 0

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
