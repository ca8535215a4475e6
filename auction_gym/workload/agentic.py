"""Synthetic agentic traffic: bursty, stateful, prefix-sharing requests from several bidders.

Each bidder (tenant) owns a system prompt and a tool block and sends episodes of four shapes
(multi-turn sessions, parallel fan-out calls, speculative rollouts, short urgent calls), so the
radix tree branches by bidder, tools, episode and branch; arrivals are open-loop Poisson with
bursts and an optional load wave. A seed fixes the workload, drawn in chunks as it is read. The
shapes and draws in full: docs/environment.md, "Workloads".
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import Any, Iterator, Mapping

import numpy as np

from .._checks import check_int, check_number, is_int_typed
from ..request import Request, read_only, unchecked_many
from .classes import CLASSES, ClassMix, checked_class_mix, checked_max_new_tokens, class_laws, normalize_mix
from .compiled import compiled_module, compiled_twin

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
    wave_amplitude: float = 0.0
    """Relative amplitude A of a smooth load curve, in [0, 1): the rate is multiplied by
    1 - A cos(2 pi t / wave_period), lowest at t = 0 and highest at half the period, a known
    daily-like curve that congestion follows on a time scale long against request latency
    (`wave_shape`); 0 = no curve. Its long-run mean multiplier is 1."""
    wave_period: float = 60.0
    """Period of the load curve (s)."""
    wave_offset: float = 0.0
    """Time of the load curve's first trough (s): the multiplier is 1 - A cos(2 pi (t - offset) / P)."""
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
    max_new_tokens: int | None = None
    """Every request's `Request.max_new_tokens` (tokens); None = its class's `output_max`. An
    int must be >= every class's `output_max`, the longest output a class draws."""

    def validate(self) -> None:
        """Raise ValueError for an inconsistent configuration."""
        check_ints(self, {"num_bidders": 1, "vocab_size": 2, "system_prompt_len": 1, "tool_defs_len": 1,
                          "context_len": 1, "branch_len": 1, "max_session_turns": 1, "rollouts": 1})
        if self.num_requests is not None:
            check_ints(self, {"num_requests": 0})
        # An infinite rate or heterogeneity draws every episode start at time 0 and never ends.
        check_finite(self, {"rate": 0.0, "bidder_heterogeneity": 0.0, "wave_offset": -math.inf,
                            "user_turn_len": 1.0, "urgent_query_len": 1.0, "session_turns": 1.0})
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")
        if self.num_requests is None and not self.duration > 0:
            raise ValueError(f"duration must be > 0, got {self.duration}")
        check_bursts(self)
        if not (0.0 <= self.wave_amplitude < 1.0 and self.wave_period > 0):
            raise ValueError(f"wave_amplitude must be in [0, 1) and wave_period > 0, got "
                             f"{self.wave_amplitude!r} and {self.wave_period!r}")
        normalize_mix(self.shape_mix, "shape_mix")
        if unknown := set(self.shape_mix) - set(SHAPES):
            raise ValueError(f"unknown shapes {sorted(unknown)} in shape_mix; known: {SHAPES}")
        checked_class_mix(self.session_class_mix, "session_class_mix")
        if not self.think_time >= 0:
            raise ValueError(f"think_time must be >= 0, got {self.think_time!r}")
        if not (len(self.fanout_width) == 2 and all(is_int_typed(w) for w in self.fanout_width)
                and 1 <= self.fanout_width[0] <= self.fanout_width[1]):
            raise ValueError(f"fanout_width must be (lo, hi), ints with 1 <= lo <= hi, got {self.fanout_width!r}")
        checked_max_new_tokens(self.max_new_tokens, max(c.output_max for c in CLASSES.values()),
                               "the longest output a class draws", "each class's output_max")


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


def check_ints(cfg: object, least: Mapping[str, int]) -> None:
    """Raise ValueError naming the first field of `cfg` (any workload configuration) in `least`
    that is not an int object (`is_int_typed`) >= its least."""
    for name, low in least.items():
        check_int(name, getattr(cfg, name), low)


def check_finite(cfg: object, least: Mapping[str, float]) -> None:
    """Raise ValueError naming the first field of `cfg` (any workload configuration) in `least`
    that is not a finite number (`check_number`) >= its least."""
    for name, low in least.items():
        check_number(name, getattr(cfg, name), low, finite=True)


def check_bursts(cfg) -> None:
    """Raise ValueError for inconsistent burst settings of `cfg`, any workload configuration with
    `burst_period`, `burst_duration` and `burst_factor` (a NaN would turn bursts off unseen, an
    infinite factor draw every arrival at time 0 without end)."""
    if not (cfg.burst_period >= 0 and cfg.burst_duration >= 0 and 0 < cfg.burst_factor < math.inf):
        raise ValueError("burst_period and burst_duration must be >= 0 and burst_factor finite and > 0, got "
                         f"{cfg.burst_period!r}, {cfg.burst_duration!r} and {cfg.burst_factor!r}")
    if cfg.burst_period > 0 and cfg.burst_duration > cfg.burst_period:
        raise ValueError("burst_duration must not exceed burst_period")


def has_bursts(cfg) -> bool:
    """Whether `cfg`, any workload configuration with `burst_period` and `burst_duration`, has
    burst windows."""
    return cfg.burst_period > 0 and cfg.burst_duration > 0


def in_burst(t: np.ndarray | float, cfg) -> np.ndarray | bool:
    """Whether time(s) `t` fall inside a burst window of `cfg` (always False without bursts); `cfg`
    is any workload configuration with `burst_period` and `burst_duration`."""
    if not has_bursts(cfg):
        return np.zeros(np.shape(t), dtype=bool) if np.ndim(t) else False
    return np.mod(t, cfg.burst_period) < cfg.burst_duration


def wave_shape(t: np.ndarray | float, cfg: AgenticConfig) -> np.ndarray | float:
    """The load curve's rate multiplier at time(s) `t`: 1 - A cos(2 pi (t - offset) / P), 1 without
    a curve."""
    if cfg.wave_amplitude <= 0:
        return np.ones(np.shape(t)) if np.ndim(t) else 1.0
    return 1.0 - cfg.wave_amplitude * np.cos(2.0 * np.pi * (np.asarray(t) - cfg.wave_offset) / cfg.wave_period)


class _Generator:
    """Draws the workload `CHUNK` candidate episode starts at a time, each kind of draw for the
    whole chunk in one call, so a request costs a few microseconds of Python rather than a dozen
    small numpy calls; `chunk` returns the requests of the accepted episodes as drafts.

    Token arrays are read-only (so `Request` takes them without a copy): a session is one array
    whose turns are prefixes of it, a fan-out's prompts rows of one matrix.
    """

    CHUNK = 32

    def __init__(self, cfg: AgenticConfig, seed: int) -> None:
        self.cfg = cfg
        self.rng = rng = np.random.default_rng(seed)
        # Per-bidder fixed prefixes: system prompt, and system prompt + tool definitions.
        b = cfg.num_bidders
        systems = self.tokens(b * cfg.system_prompt_len).reshape(b, -1)
        with_tools = np.concatenate([systems, self.tokens(b * cfg.tool_defs_len).reshape(b, -1)], 1)
        self.systems, self.with_tools = list(read_only(systems)), list(read_only(with_tools))
        session_classes, session_class_p = normalize_mix(cfg.session_class_mix, "session_class_mix")
        self.session_classes = ClassMix(session_classes)
        self.session_class_cdf = np.cumsum(session_class_p)
        self.shape_names, shape_p = normalize_mix(cfg.shape_mix, "shape_mix")
        if cfg.bidder_heterogeneity > 0:
            # Shapes of probability 0 stay at 0 (Dirichlet parameters must be positive).
            pos = shape_p > 0
            bidder_mix = np.zeros((b, len(self.shape_names)))
            bidder_mix[:, pos] = rng.dirichlet(cfg.bidder_heterogeneity * shape_p[pos], b)
        else:
            bidder_mix = np.full((b, len(shape_p)), shape_p)
        self.bidder_cdf = np.cumsum(bidder_mix, axis=1)
        sizes = _expected_episode_sizes(cfg)
        mean_size = float((bidder_mix @ np.array([sizes[s] for s in self.shape_names])).sum() / b)  # their mean
        # Poisson episode starts by thinning a process at the peak rate.
        self.bursty = has_bursts(cfg)
        self.peak = (max(1.0, cfg.burst_factor) if cfg.burst_period > 0 else 1.0) * (1.0 + cfg.wave_amplitude)
        self.gap_scale = mean_size / (cfg.rate * self.peak)
        self.t = 0.0
        self.horizon = np.inf if cfg.num_requests is not None else cfg.duration
        """The workload's end: no request arrives at or after it."""
        self.cap = {name: c.output_max if cfg.max_new_tokens is None else int(cfg.max_new_tokens)
                    for name, c in CLASSES.items()}
        """Each class's max_new_tokens (AgenticConfig.max_new_tokens), as Python ints."""

    def tokens(self, n: int) -> np.ndarray:
        return self.rng.integers(0, self.cfg.vocab_size, n, dtype=np.int64)

    def lengths(self, mean: int, n: int) -> np.ndarray:
        """n Poisson(mean) lengths, at least 1."""
        return np.maximum(self.rng.poisson(mean, n), 1)

    def chunk(self) -> list[tuple]:
        """The requests of the next `CHUNK` candidate episodes that arrive before `horizon`, in the
        order they are drawn, as drafts (arrival, bidder, prompt, reply, kind, urgency, value,
        output_len, max_new_tokens); after it, `self.t` is the last candidate start, before which no
        later chunk has a request."""
        cfg, rng, n, horizon = self.cfg, self.rng, self.CHUNK, self.horizon
        starts = self.t + rng.exponential(self.gap_scale, n).cumsum()
        self.t = float(starts[-1])
        # 1.0 * x is x: without bursts the rate is the wave's multiplier alone (or 1).
        rate = np.where(in_burst(starts, cfg), cfg.burst_factor, 1.0) if self.bursty else None
        if cfg.wave_amplitude > 0:
            rate = wave_shape(starts, cfg) if rate is None else rate * wave_shape(starts, cfg)
        accepted = rng.random(n) * self.peak < (1.0 if rate is None else rate)
        if horizon < np.inf:
            accepted &= starts < horizon
        bidders = rng.integers(cfg.num_bidders, size=n)
        u = rng.random(n)
        shapes = np.minimum((u[:, None] >= self.bidder_cdf[bidders]).sum(axis=1), len(self.shape_names) - 1)
        drafts: list[tuple] = []
        for k, shape in enumerate(self.shape_names):
            sel = np.flatnonzero(accepted & (shapes == k))
            if sel.size:
                draw = self.sessions if shape == "session" else self.urgent if shape == "urgent" else self.branches
                drafts += draw(starts[sel].tolist(), bidders[sel].tolist(), shape)
        return drafts

    def urgent(self, starts: list[float], bidders: list[int], shape: str) -> list[tuple]:
        n = len(starts)
        w, v, out = CLASSES["urgent"].sample(self.rng, n)
        ends = self.lengths(self.cfg.urgent_query_len, n).cumsum().tolist()
        query, systems, cap = self.tokens(ends[-1]), self.systems, self.cap["urgent"]
        return [
            (t, b, read_only(np.concatenate((systems[b], query[a:e]))), None, "urgent", wi, vi, oi, cap)
            for t, b, a, e, wi, vi, oi in zip(starts, bidders, [0] + ends[:-1], ends, w.tolist(), v.tolist(),
                                               out.tolist())
        ]

    def sessions(self, starts: list[float], bidders: list[int], shape: str) -> list[tuple]:
        cfg, rng, n, classes = self.cfg, self.rng, len(starts), self.session_classes
        which = np.minimum(np.searchsorted(self.session_class_cdf, rng.random(n), side="right"),
                           len(classes.names) - 1)
        turns = np.minimum(rng.geometric(1.0 / cfg.session_turns, n), cfg.max_session_turns)
        m = int(turns.sum())
        w, v, out = classes.from_normals(np.repeat(which, turns), rng.standard_normal((3, m)))
        gaps = rng.exponential(cfg.think_time, m).tolist() if cfg.think_time > 0 else [0.0] * m
        # Each turn adds its user message then its reply; a session's turns are consecutive draws.
        # Python lists of the whole chunk, read by index (hot path: every session).
        drawn = (self.lengths(cfg.user_turn_len, m) + out).cumsum().tolist()  # tokens drawn up to each turn's end
        tokens = self.tokens(drawn[-1])
        outs, w, v = out.tolist(), w.tolist(), v.tolist()
        drafts, first, offset, horizon = [], 0, 0, self.horizon
        append = drafts.append
        for t, b, c, count in zip(starts, bidders, which.tolist(), turns.tolist()):
            prefix, stop = self.with_tools[b], first + count
            session = read_only(np.concatenate((prefix, tokens[offset:drawn[stop - 1]])))
            kind, base = classes.names[c], prefix.size - offset  # turn j's reply ends at base + drawn[j]
            cap = self.cap[kind]
            for j in range(first, stop):
                if j > first:  # turn k arrives an exponential think time after turn k-1 arrives
                    t += gaps[j]
                    if t >= horizon:  # drawn all the same, so that later draws stay where they are
                        break
                o, end = outs[j], base + drawn[j]
                append((t, b, session[:end - o], session[end - o:end], kind, w[j], v[j], o, cap))
            first, offset = stop, drawn[stop - 1]
        return drafts

    def branches(self, starts: list[float], bidders: list[int], shape: str) -> list[tuple]:
        cfg, rng, n = self.cfg, self.rng, len(starts)
        kind = "interactive" if shape == "fanout" else "background"
        lo, hi = cfg.fanout_width
        widths = (rng.integers(lo, hi + 1, n) if shape == "fanout" else np.full(n, cfg.rollouts)).tolist()
        w, v, out = (x.tolist() for x in CLASSES[kind].sample(rng, sum(widths)))
        ctx, branch, cap = cfg.context_len, cfg.branch_len, self.cap[kind]
        tokens = self.tokens(sum(ctx + width * branch for width in widths))
        drafts, first, offset = [], 0, 0
        for t, b, width in zip(starts, bidders, widths):
            # One row per branch: sys + tools, the shared context, then the branch's own suffix.
            prefix = self.with_tools[b]
            own = tokens[offset:offset + ctx + width * branch]
            prompts = np.empty((width, prefix.size + ctx + branch), dtype=np.int64)
            prompts[:, :prefix.size] = prefix
            prompts[:, prefix.size:prefix.size + ctx] = own[:ctx]
            prompts[:, prefix.size + ctx:] = own[ctx:].reshape(width, branch)
            drafts += [(t, b, p, None, kind, w[first + j], v[first + j], out[first + j], cap)
                       for j, p in enumerate(read_only(prompts))]
            first, offset = first + width, offset + own.size
        return drafts


def agentic_workload(config: AgenticConfig | None = None, seed: int = 0) -> list[Request]:
    """The agentic workload `iter_agentic` streams, as a list sorted by arrival (ids 0..n-1); the same
    for the same (config, seed)."""
    return list(iter_agentic(config, seed))


def iter_agentic(config: AgenticConfig | None = None, seed: int = 0) -> Iterator[Request]:
    """`agentic_workload` as a stream: the same requests, drawn only as far as they are read.

    Drawn in chunks of consecutive episode starts, so an engine that reads it lazily
    (`ServingEngine.submit`) draws the traffic little beyond its clock.
    """
    cfg = config if config is not None else AgenticConfig()
    cfg.validate()
    return _stream(cfg, seed)


def agentic_stream(num_bidders: int, seed: int, **fields: Any) -> Iterator[Request]:
    """`iter_agentic` of AgenticConfig(num_bidders=num_bidders, **fields): the workload registry's
    call (`auction_gym.workload.registry`)."""
    return iter_agentic(AgenticConfig(num_bidders=num_bidders, **fields), seed)


def _chunks(cfg: AgenticConfig, seed: int) -> _Generator:
    """The generator of `seed`'s chunks: `_Generator`, or after its first draws its compiled twin
    (`compiled.compiled_twin`), which draws the same chunks."""
    gen = _Generator(cfg, seed)
    wave = partial(wave_shape, cfg=cfg) if cfg.wave_amplitude > 0 else None
    return compiled_twin(gen, lambda module: module.AgenticChunks(
        gen, wave, {name: class_laws(c) for name, c in CLASSES.items()}, class_laws(gen.session_classes)))


def _stream(cfg: AgenticConfig, seed: int) -> Iterator[Request]:
    """`seed`'s requests as the core active now streams them: on the compiled core the compiled
    stream (`_workload.AgenticStream`: the drafts merged and the requests made in C++, no Python
    code run per request), which reads `_requests` where the Python generator draws; elsewhere
    `_requests`, the reference. Either draws nothing until it is first read."""
    module = compiled_module()
    return _requests(cfg, seed) if module is None else module.AgenticStream(partial(_started, cfg, seed))


def _started(cfg: AgenticConfig, seed: int) -> tuple[Any, int | None] | Iterator[Request]:
    """What the compiled stream reads, made at its first read: the compiled chunks and the request
    limit, or `_requests` where the Python generator draws (or the limit is not a plain int)."""
    gen = _chunks(cfg, seed)
    if type(gen) is _Generator or not (cfg.num_requests is None or type(cfg.num_requests) is int):
        return _requests(cfg, seed, gen)
    return gen, cfg.num_requests


def _requests(cfg: AgenticConfig, seed: int, gen: Any = None) -> Iterator[Request]:
    """The stream in Python, the reference: the requests of `gen`'s chunks (by default `_chunks(cfg,
    seed)`, made at the first read) in order of arrival, as far as they are read."""
    if gen is None:
        gen = _chunks(cfg, seed)
    many = unchecked_many()
    limit = cfg.num_requests if cfg.num_requests is not None else np.inf
    # Drafts not yet yielded, sorted by arrival, equal arrivals in the order drawn (a session's turns
    # and a fan-out's branches in generation order when they arrive together): the order of the
    # whole workload. One stable sort per chunk, in C, of a sorted run plus the chunk (drawn after
    # it), rather than a heap push and pop per request.
    ready: list[tuple] = []
    emitted = 0
    while emitted < limit:
        ready += gen.chunk()
        ready.sort(key=_ARRIVAL)
        # No later chunk has a request before gen.t.
        k = min(bisect.bisect_left(ready, min(gen.t, gen.horizon), key=_ARRIVAL), limit - emitted)
        if k:
            t, bidder, prompt, reply, kind, w, v, out, cap = zip(*ready[:k])
            del ready[:k]
            # Every field is in checked form by construction (read-only int64 arrays, Python numbers).
            yield from many(
                first_id=emitted, bidder=bidder, tokens=prompt, bid=w, output_len=out, arrival=t, value=v,
                urgency=w, output_tokens=reply, kind=kind, max_new_tokens=cap)
            emitted += k
        if gen.t >= gen.horizon:
            break


_ARRIVAL = itemgetter(0)
"""A draft's arrival (`_Generator.chunk`)."""
