"""Synthetic agentic traffic: bursty, stateful, prefix-sharing requests from several bidders.

Each bidder (tenant) owns a system prompt and a tool-definition block. Its traffic is a stream of
*episodes*, each of one shape:

| shape     | requests                              | prompt                              | class       |
|-----------|---------------------------------------|-------------------------------------|-------------|
| `session` | turns 1..K, K ~ Geometric(mean        | turn 1: sys + tools + user msg;     | per session |
|           | `session_turns`), capped at           | turn k: turn k-1's prompt + turn    | (mix)       |
|           | `max_session_turns`                   | k-1's reply + user msg              |             |
| `fanout`  | W parallel tool calls, W uniform in   | sys + tools + context + own suffix  | interactive |
|           | `fanout_width` (inclusive)            |                                     |             |
| `rollout` | `rollouts` speculative branches       | sys + tools + context + own suffix  | background  |
| `urgent`  | 1 short call                          | sys + short query (no tools)        | urgent      |

So the radix tree of a workload branches at the root (bidders), after the system prompt (tools vs
urgent queries), after the tools (episodes), and after a fan-out/rollout context (branches); session
turns form chains whose prompts end at inner nodes.

A session turn's reply is fixed in advance (`Request.output_tokens`) and quoted verbatim by the next
turn, so the engine's cache holds exactly what the next turn reuses. Turn k arrives an exponential
think time after turn k-1 *arrives* (the workload is open-loop: it does not know latencies). Fan-out
and rollout branches arrive together, at the episode's start.

Arrivals: episodes start as a Poisson process whose rate is chosen so that requests arrive at `rate`
per second on average outside bursts; every `burst_period` seconds a burst of `burst_duration` seconds
(at the start of each period) multiplies the episode rate by `burst_factor`. An episode's bidder is
uniform over bidders; its shape is drawn from that bidder's shape mix, which is Dirichlet around
`shape_mix` (so tenants differ: some send mostly urgent calls, some mostly rollouts).

Urgency, value and output length of each request come from its class (`classes.py`); bid = urgency
(truthful reports; the market applies bid multipliers). With the default configuration about 62% of
requests are interactive, 30% background and 8% urgent.

Everything is drawn from `numpy.random.default_rng(seed)`, so a seed fixes the workload.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Iterator

import numpy as np

from ..request import Request
from .classes import CLASSES, normalize_mix

SHAPES = ("session", "fanout", "rollout", "urgent")


@dataclass
class AgenticConfig:
    """Parameters of `agentic_workload`. Lengths are in tokens, times in seconds.

    Size: when `num_requests` is set it governs (the workload is the first `num_requests` requests by
    arrival) and `duration` is ignored; otherwise the workload is every request arriving in
    [0, `duration`).
    """

    num_bidders: int = 8
    rate: float = 20.0
    """Mean request arrival rate over all bidders outside bursts (requests/s); with bursts the long-run
    mean is rate * (1 + (burst_factor - 1) * burst_duration / burst_period)."""
    duration: float = 60.0
    num_requests: int | None = None
    burst_period: float = 0.0
    """Seconds between burst starts; 0 = no bursts."""
    burst_factor: float = 4.0
    """Multiplier of the arrival rate during a burst."""
    burst_duration: float = 5.0
    """Length of each burst (s), at the start of each period; <= burst_period."""
    vocab_size: int = 32000
    system_prompt_len: int = 256
    tool_defs_len: int = 768
    user_turn_len: int = 32
    """Mean length of a session's user message (Poisson, >= 1)."""
    urgent_query_len: int = 24
    """Mean length of an urgent call's query (Poisson, >= 1)."""
    context_len: int = 512
    """Task context shared by the branches of a fan-out or rollout episode."""
    branch_len: int = 32
    """Suffix that distinguishes one fan-out/rollout branch."""
    shape_mix: dict[str, float] = field(
        default_factory=lambda: {"session": 0.45, "fanout": 0.2, "rollout": 0.1, "urgent": 0.25}
    )
    """Episode shape probabilities (see the module table)."""
    bidder_heterogeneity: float = 10.0
    """Dirichlet concentration of each bidder's shape mix around `shape_mix`; 0 = all bidders equal.
    Smaller values make bidders more different."""
    session_class_mix: dict[str, float] = field(
        default_factory=lambda: {"interactive": 0.85, "background": 0.15}
    )
    """Class of a session (all its turns); fan-out is interactive, rollouts background, urgent urgent."""
    session_turns: float = 4.0
    """Mean number of turns of a session (geometric before the cap)."""
    max_session_turns: int = 12
    think_time: float = 5.0
    """Mean time between a session's turns (exponential, s)."""
    fanout_width: tuple[int, int] = (2, 6)
    rollouts: int = 8

    def validate(self) -> None:
        """Raise ValueError for an inconsistent configuration."""
        if self.num_bidders < 1 or self.vocab_size < 2:
            raise ValueError("num_bidders must be >= 1 and vocab_size >= 2")
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")
        if self.num_requests is None and not self.duration > 0:
            raise ValueError(f"duration must be > 0, got {self.duration}")
        if self.num_requests is not None and self.num_requests < 0:
            raise ValueError(f"num_requests must be >= 0, got {self.num_requests}")
        if self.burst_period < 0 or self.burst_duration < 0 or self.burst_factor <= 0:
            raise ValueError("burst_period and burst_duration must be >= 0 and burst_factor > 0")
        if self.burst_period > 0 and self.burst_duration > self.burst_period:
            raise ValueError("burst_duration must not exceed burst_period")
        if min(self.system_prompt_len, self.tool_defs_len, self.context_len, self.branch_len) < 1:
            raise ValueError("system_prompt_len, tool_defs_len, context_len, branch_len must be >= 1")
        if self.user_turn_len < 1 or self.urgent_query_len < 1:
            raise ValueError("user_turn_len and urgent_query_len must be >= 1")
        if unknown := set(self.shape_mix) - set(SHAPES):
            raise ValueError(f"unknown shapes {sorted(unknown)} in shape_mix; known: {SHAPES}")
        if unknown := set(self.session_class_mix) - set(CLASSES):
            raise ValueError(f"unknown classes {sorted(unknown)} in session_class_mix")
        if self.bidder_heterogeneity < 0:
            raise ValueError("bidder_heterogeneity must be >= 0")
        if not (self.session_turns >= 1 and self.max_session_turns >= 1 and self.think_time >= 0):
            raise ValueError("session_turns and max_session_turns must be >= 1, think_time >= 0")
        lo, hi = self.fanout_width
        if not 1 <= lo <= hi or self.rollouts < 1:
            raise ValueError("fanout_width must be (lo, hi) with 1 <= lo <= hi; rollouts >= 1")


def _expected_episode_sizes(cfg: AgenticConfig) -> dict[str, float]:
    # E[min(G, cap)] for G ~ Geometric(p) on {1, 2, ...}: sum_{k<cap} (1-p)^k.
    p = 1.0 / cfg.session_turns
    session = (1.0 - (1.0 - p) ** cfg.max_session_turns) / p
    return {
        "session": session,
        "fanout": (cfg.fanout_width[0] + cfg.fanout_width[1]) / 2.0,
        "rollout": float(cfg.rollouts),
        "urgent": 1.0,
    }


def in_burst(t: np.ndarray | float, cfg: AgenticConfig) -> np.ndarray | bool:
    """Whether time(s) `t` fall inside a burst window of `cfg` (always False without bursts)."""
    if cfg.burst_period <= 0 or cfg.burst_duration <= 0:
        return np.zeros(np.shape(t), dtype=bool) if np.ndim(t) else False
    return np.mod(t, cfg.burst_period) < cfg.burst_duration


class _Generator:
    """Draws episodes into per-request drafts; `flush` gives them their class parameters.

    Token arrays are made read-only (so `Request` takes them without a copy), and one `tokens` call
    draws what several consecutive ones would (the same stream): a session's turns are prefixes of
    one array, and a fan-out's prompts rows of one matrix.
    """

    def __init__(self, cfg: AgenticConfig, seed: int) -> None:
        self.cfg = cfg
        self.rng = np.random.default_rng(seed)
        # Per-bidder fixed prefixes: system prompt, and system prompt + tool definitions.
        b = cfg.num_bidders
        systems = self.tokens(b * cfg.system_prompt_len).reshape(b, -1)
        with_tools = np.concatenate([systems, self.tokens(b * cfg.tool_defs_len).reshape(b, -1)], 1)
        self.systems, self.with_tools = list(systems), list(with_tools)
        self.session_classes, session_class_p = normalize_mix(cfg.session_class_mix,
                                                              "session_class_mix")
        # What `rng.choice(p=session_class_p)` compares its one uniform draw with.
        cdf = np.cumsum(session_class_p)
        self.session_class_cdf = (cdf / cdf[-1]).tolist()
        # Drafts drawn since the last flush: (arrival, bidder, prompt, reply, kind), and per class
        # the standard normals behind their urgency, value and output length.
        self.drafts: list[tuple[float, int, np.ndarray, np.ndarray | None, str]] = []
        self.normals: dict[str, list[np.ndarray]] = {name: [] for name in CLASSES}
        self.drawn = 0

    def tokens(self, n: int) -> np.ndarray:
        return self.rng.integers(0, self.cfg.vocab_size, n, dtype=np.int64)

    def poisson_len(self, mean: int) -> int:
        return max(1, int(self.rng.poisson(mean)))

    def add(self, bidder: int, kind: str, prompts: list[np.ndarray], arrivals: list[float],
            replies: list[np.ndarray | None] | None = None) -> None:
        """Record requests of one class (their urgency/value/output_len come from a `draw` call)."""
        replies = replies if replies is not None else [None] * len(prompts)
        self.drafts += [(t, bidder, p, reply, kind) for t, p, reply in zip(arrivals, prompts, replies)]

    def draw(self, kind: str, n: int) -> np.ndarray:
        """Draw the standard normals behind n requests' (urgency, value, output_len) of class `kind`
        (as `CLASSES[kind].sample` would) and return them; `flush` turns them into values."""
        z = self.rng.standard_normal((3, n))
        self.normals[kind].append(z)
        return z

    def flush(self) -> list[tuple]:
        """The drafts since the last flush as (arrival, generation index, bidder, prompt, reply, kind,
        urgency, value, output_len), their parameters computed class by class in one go."""
        kinds = [d[4] for d in self.drafts]
        n = len(kinds)
        urgency, value = np.empty(n), np.empty(n)
        output_len = np.empty(n, dtype=np.int64)
        kind_arr = np.array(kinds)
        for name, normals in self.normals.items():
            if normals:
                of_class = kind_arr == name
                urgency[of_class], value[of_class], output_len[of_class] = CLASSES[name].from_normals(
                    np.concatenate(normals, axis=1))
                normals.clear()
        out = [(t, self.drawn + i, b, p, reply, kind, w, v, o) for i, ((t, b, p, reply, kind), w, v, o)
               in enumerate(zip(self.drafts, urgency.tolist(), value.tolist(), output_len.tolist()))]
        self.drawn += n
        self.drafts = []
        return out

    def episode(self, shape: str, bidder: int, t: float) -> None:
        cfg, rng = self.cfg, self.rng
        if shape == "urgent":
            self.draw("urgent", 1)
            query = self.tokens(self.poisson_len(cfg.urgent_query_len))
            self.add(bidder, "urgent", [_frozen(np.concatenate([self.systems[bidder], query]))], [t])
        elif shape == "session":
            kind = self.session_classes[bisect_right(self.session_class_cdf, rng.random())]
            turns = min(int(rng.geometric(1.0 / cfg.session_turns)), cfg.max_session_turns)
            out_lens = CLASSES[kind].output_lens(self.draw(kind, turns)[2]).tolist()
            gaps = rng.exponential(cfg.think_time, turns - 1).tolist() if cfg.think_time > 0 else (
                [0.0] * (turns - 1))
            arrivals = [t + gap_sum for gap_sum in accumulate(gaps, initial=0.0)]
            # Turn k's prompt is turn k-1's prompt + its reply + a user message, so the whole session
            # is one array: prefix, then (user message, reply) per turn, each drawn by one call.
            chunks, spans = [self.with_tools[bidder]], []
            end = chunks[0].size
            for out_len in out_lens:
                user_len = self.poisson_len(cfg.user_turn_len)
                chunks.append(self.tokens(user_len + out_len))
                spans.append((end + user_len, end + user_len + out_len))
                end += user_len + out_len
            session = _frozen(np.concatenate(chunks))
            # The next turn quotes exactly this reply, so its cached KV is reusable.
            self.add(bidder, kind, [session[:a] for a, _ in spans], arrivals,
                     [session[a:b] for a, b in spans])
        else:
            kind = "interactive" if shape == "fanout" else "background"
            lo, hi = cfg.fanout_width
            width = int(rng.integers(lo, hi + 1)) if shape == "fanout" else cfg.rollouts
            self.draw(kind, width)
            # One row per branch: sys + tools, the shared context, then the branch's own suffix.
            prefix, ctx = self.with_tools[bidder].size, cfg.context_len
            own = self.tokens(ctx + width * cfg.branch_len)
            prompts = np.empty((width, prefix + ctx + cfg.branch_len), dtype=np.int64)
            prompts[:, :prefix] = self.with_tools[bidder]
            prompts[:, prefix:prefix + ctx] = own[:ctx]
            prompts[:, prefix + ctx:] = own[ctx:].reshape(width, cfg.branch_len)
            self.add(bidder, kind, list(_frozen(prompts)), [t] * width)


def _frozen(arr: np.ndarray) -> np.ndarray:
    """Mark `arr` read-only (so are views of it) and return it."""
    arr.flags.writeable = False
    return arr


_FLUSH_DRAFTS = 64
"""Drafts gathered before their parameters are computed (vectorized) and they become emittable: a
streamed workload draws at most about this many requests ahead of what its reader took."""


def agentic_workload(config: AgenticConfig | None = None, seed: int = 0) -> list[Request]:
    """Generate a synthetic agentic workload: requests sorted by arrival, ids 0..n-1.

    Deterministic in (config, seed): all randomness comes from `numpy.random.default_rng(seed)`.
    See the module docstring for the traffic model and `AgenticConfig` for the knobs.
    """
    return list(iter_agentic(config, seed))


def iter_agentic(config: AgenticConfig | None = None, seed: int = 0) -> Iterator[Request]:
    """`agentic_workload` as a stream: the same requests, drawn only as far as they are read.

    Episodes are drawn in order of their start, and an episode's requests arrive at or after its
    start, so every request arriving before the next episode's start is final: it is yielded then.
    An engine that reads the stream lazily (`ServingEngine.submit`) never draws the traffic beyond
    its clock, which is most of a market's reset time saved when episodes end early.
    """
    cfg = config if config is not None else AgenticConfig()
    cfg.validate()
    return _stream(cfg, seed)


def _stream(cfg: AgenticConfig, seed: int) -> Iterator[Request]:
    gen = _Generator(cfg, seed)
    rng = gen.rng

    shape_names, shape_p = normalize_mix(cfg.shape_mix, "shape_mix")
    if cfg.bidder_heterogeneity > 0:
        # Shapes of probability 0 stay at 0 (Dirichlet parameters must be positive).
        pos = shape_p > 0
        bidder_mix = np.zeros((cfg.num_bidders, len(shape_names)))
        bidder_mix[:, pos] = rng.dirichlet(cfg.bidder_heterogeneity * shape_p[pos], cfg.num_bidders)
    else:
        bidder_mix = np.tile(shape_p, (cfg.num_bidders, 1))
    bidder_cdf = np.cumsum(bidder_mix, axis=1).tolist()

    sizes = _expected_episode_sizes(cfg)
    mean_size = float(np.mean(bidder_mix @ np.array([sizes[s] for s in shape_names])))
    episode_rate = cfg.rate / mean_size
    peak = max(1.0, cfg.burst_factor) if cfg.burst_period > 0 else 1.0
    bursts = cfg.burst_period > 0 and cfg.burst_duration > 0
    horizon = np.inf if cfg.num_requests is not None else cfg.duration
    limit = cfg.num_requests if cfg.num_requests is not None else np.inf
    gap_scale, last_shape = 1.0 / (episode_rate * peak), len(shape_names) - 1

    # Flushed drafts by (arrival, generation index): the stable order of the whole workload.
    ready: list[tuple] = []
    emitted = 0

    def emit_before(bound: float) -> Iterator[Request]:
        nonlocal emitted
        while ready and ready[0][0] < bound and emitted < limit:
            t, _, bidder, prompt, reply, kind, w, v, out = heapq.heappop(ready)
            yield Request(id=emitted, bidder=bidder, tokens=prompt, bid=w, output_len=out, arrival=t, value=v,
                          urgency=w, output_tokens=reply, kind=kind)
            emitted += 1

    # Start of the first episode whose drafts are not flushed yet: nothing in `ready` arriving
    # before it (and before the next start) can be overtaken by a request still to come.
    unflushed_from = np.inf
    t = 0.0
    while emitted < limit:
        # Poisson episode starts: thinning of a process at the peak rate.
        t += rng.exponential(gap_scale)
        if len(gen.drafts) >= _FLUSH_DRAFTS:
            for item in gen.flush():
                heapq.heappush(ready, item)
            unflushed_from = np.inf
        yield from emit_before(min(t, horizon, unflushed_from))
        if t >= horizon:
            break
        burst = bursts and t % cfg.burst_period < cfg.burst_duration  # in_burst(t, cfg)
        if rng.random() * peak >= (cfg.burst_factor if burst else 1.0):
            continue
        bidder = int(rng.integers(cfg.num_bidders))
        shape_idx = min(bisect_right(bidder_cdf[bidder], rng.random()), last_shape)
        unflushed_from = min(unflushed_from, t)
        gen.episode(shape_names[shape_idx], bidder, t)
    for item in gen.flush():
        heapq.heappush(ready, item)
    yield from emit_before(horizon)
