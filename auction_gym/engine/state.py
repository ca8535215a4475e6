"""What an engine iteration did, and the requests in flight: plain records the engine keeps."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..policy import Decision
from ..radix_cache import TreeNode
from ..request import Request
from .records import RequestRecord


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
    """Requests whose prefill began (their first chunk, or the whole prompt)."""
    finished: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    steps: int = 1
    resumed: list[int] = field(default_factory=list)
    """Retracted requests whose prefill began again (not admitted anew: no new charge)."""
    retracted: list[int] = field(default_factory=list)
    """Running requests sent back to the waiting queue to make room for this decode step."""
    replica: int = 0
    """Which replica of a cluster ran it (`auction_gym.cluster.ClusterEngine`); 0 for one engine."""
    decision: Decision | None = None
    """The round the policy decided for this prefill iteration's admissions (`decide`: an auction's
    `AuctionRound`, a posted-price design's or a priority order's `PostedRound`), which the market
    charges from; None for a policy that only orders, and for an iteration that asked no scheduler."""
    preempted: list[int] = field(default_factory=list)
    """Running requests this iteration's admission round sent back to the waiting queue for a waiting
    request of higher priority (`EngineConfig.priority_preemption`); where that round then admitted
    nothing (memory stopped the request), the decode or idle iteration that ran reports them."""


@dataclass(slots=True, eq=False)
class Admission:
    """A request in a prefill batch: which of its tokens this prefill computes.

    tokens[:cached] have KV already (the matched prefix, and earlier chunks), locked at `node`;
    this prefill computes tokens[cached:end]. end < len(tokens) for a chunk that is not the last.
    """

    request: Request
    tokens: np.ndarray
    """What the prefill builds KV for: the prompt, or after a retraction prompt + output so far."""
    node: TreeNode
    cached: int
    end: int
    cap: int
    """The output cap as the engine budgets it (`EngineRules.cap`)."""
    generated: int = 0
    """Output tokens emitted before (a retracted request's); the prefill emits one more."""
    first: bool = True
    """The first prefill iteration of this admission (later chunks continue it)."""
    held: int = 0
    """Tokens allocated outside the cache for the request's output at its first chunk (oracle
    reservation); released when it finishes."""
    priority: int = 0
    """Its priority in the round that admitted it (`Decision.priorities`; SGLang's `req.priority`)."""
    joined: int = 0
    """When it last joined the waiting queue (`WaitingQueue.joined`)."""

    @property
    def extend(self) -> int:
        """Tokens this prefill computes."""
        return self.end - self.cached

    @property
    def last_chunk(self) -> bool:
        return self.end == len(self.tokens)


@dataclass(slots=True, eq=False)
class Running:
    """A request in the running batch."""

    request: Request
    record: RequestRecord
    node: TreeNode
    """End of the request's sequence in the cache, locked while it runs."""
    done_at: int
    """Value of the engine's decode-step counter at which the last output token is out."""
    held: int
    """Tokens allocated outside the cache on admission: prompt tokens of a partial last page, and
    under the oracle reservation the whole output; released when it finishes."""
    first_step: int
    """Decode-step counter when it joined the batch."""
    emitted: int
    """Output tokens out when it joined the batch (the prefill's one, plus any from before a retraction)."""
    cap: int
    """max_new_tokens, clipped so that prompt + cap fits the KV pool (as SGLang clips it)."""
    priority: int = 0
    """Its priority in the round that admitted it (`Admission.priority`)."""
    joined: int = 0
    """When it last joined the waiting queue (`WaitingQueue.joined`)."""

    def generated(self, step: int) -> int:
        """Output tokens out at decode-step counter `step`."""
        return self.emitted + step - self.first_step
