"""SGLang's "generated-shared-prefix" benchmark (`bench_serving --dataset-name generated-shared-prefix`)
with Poisson arrivals and the gym's bidders, urgencies and values.

Groups of prompts that share a system prompt, shuffled, with `bench_serving`'s parameter names and
defaults: the benchmark SGLang itself uses for prefix caching. The gym adds arrivals (Poisson,
optional bursts), a bidder per group and a class per request. Deterministic in (config, seed),
drawn in chunks as the stream is read. In full: docs/environment.md, "Workloads".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from ..request import Request, read_only, unchecked_many
from .agentic import check_bursts, check_ints, has_bursts, in_burst
from .classes import DEFAULT_CLASS_MIX, ClassMix, checked_class_mix, checked_max_new_tokens, class_laws
from .compiled import compiled_twin

CHUNK = 256
"""Requests drawn at a time (a fixed size, so the stream does not depend on how far it is read)."""


@dataclass
class SharedPrefixConfig:
    """Parameters of `shared_prefix_workload`; lengths in tokens, times in seconds, rates per second.

    The workload has num_groups x prompts_per_group requests (1,024 by default).
    """

    num_groups: int = 64
    prompts_per_group: int = 16
    system_prompt_len: int = 2048
    question_len: int = 128
    output_len: int = 256
    range_ratio: float = 1.0
    """Lengths are drawn uniformly from [max(int(full x range_ratio), 1), full]; 1 = fixed."""
    rate: float = 8.0
    """Mean arrival rate outside bursts (requests/s)."""
    burst_period: float = 0.0
    """Seconds between burst starts; 0 = no bursts."""
    burst_factor: float = 4.0
    """Multiplier of the arrival rate during a burst."""
    burst_duration: float = 5.0
    """Length of each burst (s), at the start of each period; <= burst_period."""
    num_bidders: int = 8
    vocab_size: int = 32000
    class_mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_CLASS_MIX))
    """Probabilities of the urgency classes (`classes.py`), drawn per request."""
    max_new_tokens: int | None = None
    """Every request's `Request.max_new_tokens` (tokens); None = its own output length, as
    `bench_serving` sends it. An int must be >= `output_len`, the longest output."""

    @property
    def num_requests(self) -> int:
        return self.num_groups * self.prompts_per_group

    def validate(self) -> None:
        """Raise ValueError for an inconsistent configuration."""
        check_ints(self, {"num_groups": 1, "prompts_per_group": 1, "system_prompt_len": 1, "question_len": 1,
                          "output_len": 1, "num_bidders": 1, "vocab_size": 2})
        if not 0 < self.range_ratio <= 1:
            raise ValueError(f"range_ratio must be in (0, 1], got {self.range_ratio}")
        if not 0 < self.rate < np.inf:
            raise ValueError(f"rate must be finite and > 0, got {self.rate}")
        check_bursts(self)
        checked_class_mix(self.class_mix)
        checked_max_new_tokens(self.max_new_tokens, self.output_len, "output_len, the longest output",
                               "each request's output length")


def _lengths(rng: np.random.Generator, full: int, ratio: float, n: int) -> np.ndarray:
    """n lengths uniform in [max(int(full x ratio), 1), full] (SGLang's `compute_random_lens`)."""
    if ratio >= 1:
        return np.full(n, full, dtype=np.int64)
    return rng.integers(max(int(full * ratio), 1), full + 1, n)


def shared_prefix_workload(config: SharedPrefixConfig | None = None, seed: int = 0) -> list[Request]:
    """SGLang's generated-shared-prefix workload as a list sorted by arrival (see the module docstring)."""
    return list(iter_shared_prefix(config, seed))


def iter_shared_prefix(config: SharedPrefixConfig | None = None, seed: int = 0) -> Iterator[Request]:
    """`shared_prefix_workload` as a stream: the same requests, drawn only as far as they are read."""
    cfg = config if config is not None else SharedPrefixConfig()
    cfg.validate()
    return _stream(cfg, seed)


def shared_prefix_stream(num_bidders: int, seed: int, **fields: Any) -> Iterator[Request]:
    """`iter_shared_prefix` of SharedPrefixConfig(num_bidders=num_bidders, **fields): the workload
    registry's call (`auction_gym.workload.registry`)."""
    return iter_shared_prefix(SharedPrefixConfig(num_bidders=num_bidders, **fields), seed)


class _Chunks:
    """Draws the workload `CHUNK` candidate arrivals at a time, each kind of draw for the whole chunk
    in one call; `chunk` returns the next accepted requests' fields."""

    def __init__(self, cfg: SharedPrefixConfig, seed: int) -> None:
        self.cfg = cfg
        self.rng = rng = np.random.default_rng(seed)
        groups = cfg.num_groups
        system_lens = _lengths(rng, cfg.system_prompt_len, cfg.range_ratio, groups)
        self.systems = [rng.integers(0, cfg.vocab_size, int(k), dtype=np.int64) for k in system_lens]
        """Each group's system prompt."""
        self.group_of = rng.permutation(np.repeat(np.arange(groups), cfg.prompts_per_group)).tolist()
        """Each request's group, by id."""
        self.names, p = checked_class_mix(cfg.class_mix)
        self.cdf, self.classes = np.cumsum(p), ClassMix(self.names)
        self.bursty = has_bursts(cfg)
        """Whether the arrival rate has burst windows (`in_burst` asks again; the compiled twin reads it)."""
        self.peak = max(1.0, cfg.burst_factor) if cfg.burst_period > 0 else 1.0
        self.gap_scale = 1.0 / (cfg.rate * self.peak)
        self.t = 0.0

    def chunk(self, emitted: int) -> tuple[list, ...]:
        """The fields of the requests from id `emitted` on that the next chunk accepts (none, or up
        to the workload's last): arrivals, bidders, prompts (read-only), output lengths, urgencies,
        values, kinds."""
        cfg, rng = self.cfg, self.rng
        # Arrivals by thinning a Poisson process at the peak rate; the other draws are per request.
        starts = self.t + np.cumsum(rng.exponential(self.gap_scale, CHUNK))
        self.t = float(starts[-1])
        keep = rng.random(CHUNK) * self.peak < np.where(in_burst(starts, cfg), cfg.burst_factor, 1.0)
        arrivals = starts[keep].tolist()[: cfg.num_requests - emitted]
        m = len(arrivals)
        if m == 0:
            return ([],) * 7
        q_lens = _lengths(rng, cfg.question_len, cfg.range_ratio, m)
        outs = _lengths(rng, cfg.output_len, cfg.range_ratio, m).tolist()
        questions = rng.integers(0, cfg.vocab_size, int(q_lens.sum()), dtype=np.int64)
        which = np.minimum(np.searchsorted(self.cdf, rng.random(m), side="right"), len(self.names) - 1)
        w, v, _ = self.classes.from_normals(which, rng.standard_normal((3, m)))
        ends = q_lens.cumsum().tolist()
        own = self.group_of[emitted:emitted + m]
        prompts = [read_only(np.concatenate((self.systems[g], questions[a:e])))
                   for g, a, e in zip(own, [0] + ends[:-1], ends)]
        return (arrivals, [g % cfg.num_bidders for g in own], prompts, outs, w.tolist(), v.tolist(),
                [self.names[c] for c in which.tolist()])


def _chunks(cfg: SharedPrefixConfig, seed: int) -> _Chunks:
    """The drawer of `seed`'s chunks: `_Chunks`, or after its first draws its compiled twin
    (`compiled.compiled_twin`), which draws the same chunks."""
    gen = _Chunks(cfg, seed)
    return compiled_twin(gen, lambda module: module.SharedPrefixChunks(gen, class_laws(gen.classes)))


def _stream(cfg: SharedPrefixConfig, seed: int) -> Iterator[Request]:
    gen = _chunks(cfg, seed)
    many = unchecked_many()
    emitted = 0
    while emitted < cfg.num_requests:
        arrivals, bidders, prompts, outs, w, v, kinds = gen.chunk(emitted)
        m = len(arrivals)
        # Every field is in checked form by construction (read-only int64 arrays, Python numbers).
        yield from many(
            first_id=emitted, bidder=bidders, tokens=prompts, bid=w, output_len=outs, arrival=arrivals, value=v,
            urgency=w, output_tokens=[None] * m, kind=kinds,
            max_new_tokens=outs if cfg.max_new_tokens is None else [int(cfg.max_new_tokens)] * m)
        emitted += m
