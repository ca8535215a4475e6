"""Calibrating the simulated engine's cost model against the torch engine: what `radix-auction
calibrate` runs and `radix-auction fidelity` fits with.

Profiles prefill batches over a grid of (requests, cached tokens, new tokens) and decode steps over
a grid of (batch, context), each timed the way `TorchEngine` times its iterations (same code path,
on the same clock, `gpu_backend.timer`; after a warm-up, the fastest of `repeats` runs, which
filters out interference from other processes, or their median), then fits

    prefill  t = a + b * new_tokens + c * attention     (attention = sum_i new_i (cached_i + new_i / 2))
    decode   t = d + e * batch + f * context + g * min(batch, k)

by non-negative least squares on relative error (each point weighted by 1 / its measured time, so
small and large iterations count alike); the knee k is the one of `KNEES` (or none: g = 0) whose
fit has the least error. A random `holdout` share of the points is left out of the fit; the
printed error is the absolute percent error on those held-out points (median and p90), and that
of the decode fit without a knee (the linear form, for comparison).
The coefficients go to a JSON file that `CostModel.from_json` (and so `EngineConfig`) loads.

torch and gpu_backend are imported when a calibration runs, not with this module, so the command
line can offer `calibrate` without loading them.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from auction_gym._checks import check_count
from auction_gym.engine import CostModel

from ..errors import UsageError

if TYPE_CHECKING:
    from gpu_backend import KVPool, Transformer
    from gpu_backend.timer import DeviceTimer


@dataclass(frozen=True)
class Sample:
    """One measured iteration: features x (1, size, quadratic term) and seconds t: for prefill
    (1, new tokens, attention), for decode (1, batch, context)."""

    kind: str
    x: tuple[float, float, float]
    t: float


KNEES = (2, 3, 4, 6, 8, 12, 16)
"""Candidate decode knees (`CostModel.decode_knee`, requests) a fit tries besides none."""
_FIELDS = {"prefill": ("prefill_base", "prefill_per_token", "prefill_per_attention"),
           "decode": ("decode_base", "decode_per_request", "decode_per_context_token", "decode_per_request_to_knee")}
"""The `CostModel` coefficient of each column of `_columns`, per kind."""


def nnls(a: np.ndarray, b: np.ndarray, required: tuple[int, ...] = ()) -> np.ndarray:
    """Non-negative least squares min ||a x - b||, x >= 0, exactly, by trying every support
    (a has few columns: 2**k small least-squares problems); only supports holding the `required`
    columns (their coefficients may still come out 0)."""
    best, best_err = np.zeros(a.shape[1]), np.inf if required else float(np.sum(b * b))
    for k in range(1, a.shape[1] + 1):
        for support in itertools.combinations(range(a.shape[1]), k):
            if not set(required) <= set(support):
                continue
            cols = list(support)
            sol = np.linalg.lstsq(a[:, cols], b, rcond=None)[0]
            if (sol < 0).any():
                continue
            err = float(np.sum((a[:, cols] @ sol - b) ** 2))
            if err < best_err:
                best, best_err = np.zeros(a.shape[1]), err
                best[cols] = sol
    return best


def _columns(samples: list[Sample], knee: float) -> np.ndarray:
    """The samples' features, with min(batch, knee) appended if `knee` (decode samples only)."""
    x = np.array([s.x for s in samples])
    return np.column_stack([x, np.minimum(x[:, 1], knee)]) if knee else x


def _fit_columns(x: np.ndarray, t: np.ndarray, relative: bool, required: tuple[int, ...]) -> tuple[np.ndarray, float]:
    """NNLS coefficients of t ~ x . coef and their squared (relative, if `relative`) error."""
    a, b = (x / t[:, None], np.ones(len(t))) if relative else (x, t)
    coef = nnls(a, b, required)
    return coef, float(np.sum((a @ coef - b) ** 2))


def fit_cost_model(samples: list[Sample], name: str, *, relative: bool = True, required: tuple[int, ...] = (),
                   knees: tuple[float, ...] = KNEES) -> CostModel:
    """A `CostModel` fitted to prefill and decode `samples` by non-negative least squares, on
    relative error (each point weighted by 1 / its seconds) or, if not `relative`, on seconds;
    `required` columns (0: the base cost) are always in the support. The decode knee is the one of
    `knees` (or none) whose fit has the least error; `knees=()` fits the linear form. ValueError
    unless `checked_samples` takes the samples."""
    checked_samples(samples)
    coef: dict[str, float] = {}
    prefill = [s for s in samples if s.kind == "prefill"]
    coef |= zip(_FIELDS["prefill"], _fit_columns(_columns(prefill, 0), np.array([s.t for s in prefill]),
                                                 relative, required)[0])
    decode = [s for s in samples if s.kind == "decode"]
    t = np.array([s.t for s in decode])
    fits = {knee: _fit_columns(_columns(decode, knee), t, relative, required) for knee in (0, *knees)}
    knee = min(fits, key=lambda k: fits[k][1])
    coef |= zip(_FIELDS["decode"], fits[knee][0])
    return CostModel(**{k: float(v) for k, v in coef.items()}, decode_knee=float(knee), name=name)


def checked_samples(samples: list[Sample]) -> None:
    """ValueError unless every sample is of a known kind, with three finite features and finite
    seconds > 0 (a relative fit divides by them), and each kind has one at least: a kind without
    samples fitted no coefficient and kept the default model's, as if measured."""
    for s in samples:
        if s.kind not in _FIELDS or len(s.x) != 3 or not np.isfinite(s.x).all() or not 0 < s.t < np.inf:
            raise ValueError(f"a sample must be a {' or '.join(_FIELDS)} iteration with three finite features "
                             f"and finite seconds > 0, got {s}")
    if missing := [kind for kind in _FIELDS if not any(s.kind == kind for s in samples)]:
        raise ValueError(f"no {' or '.join(missing)} samples to fit (got {len(samples)} samples): a fit needs both kinds")


def fit(samples: list[Sample], knees: tuple[float, ...] = KNEES) -> CostModel:
    """`fit_cost_model` on relative error (calibration's fit; the name says so)."""
    return fit_cost_model(samples, "fitted", knees=knees)


def predicted(cost: CostModel, sample: Sample) -> float:
    """Seconds `cost` charges for the iteration `sample` measured."""
    _, size, work = sample.x
    return cost.prefill_time(size, work) if sample.kind == "prefill" else cost.decode_time(size, work)


def ape(samples: list[Sample], cost: CostModel) -> np.ndarray:
    """Absolute percent error of `cost`'s times for `samples`."""
    t = np.array([s.t for s in samples])
    return 100 * np.abs(np.array([predicted(cost, s) for s in samples]) - t) / t


STATISTICS = {"min": np.min, "median": np.median}


def _timed(timer: DeviceTimer, fn: Callable[[], object], repeats: int, statistic: str) -> float:
    fn()  # warm-up (allocator, kernels)
    times = []
    for _ in range(repeats):
        with timer as tm:
            fn()
        times.append(tm.seconds)
    return float(STATISTICS[statistic](times))


def profile(
    model: Transformer, pool: KVPool, *, rng: np.random.Generator, repeats: int, max_prefill: int, max_context: int,
    statistic: str = "min", progress: bool = True, clock: str | None = None,
) -> list[Sample]:
    """Measure prefill and decode iterations over the grid (see module docstring) on `clock` (a
    `gpu_backend.timer.CLOCKS` name; None: the default, as `TorchEngine`'s), with a progress bar over
    the grid's points unless `progress` is False."""
    from tqdm.auto import tqdm

    from gpu_backend.timer import DEFAULT_CLOCK, DeviceTimer
    from gpu_backend.torch_engine import run_decode, run_prefill

    vocab, timer, samples = model.cfg.vocab_size, DeviceTimer(model.device, clock or DEFAULT_CLOCK), []
    limit = min(model.cfg.max_context, max_context)
    news = [n for n in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if n <= max_prefill]
    prefills = [(r, c, n) for r, c, n in itertools.product((1, 2, 3, 4), (0, 128, 512, 1024, 2048, 4096), news)
                if c + n <= limit and r * n <= max_prefill]
    decodes = [(b, ctx) for b, ctx in itertools.product((1, 2, 3, 4, 6, 8, 12, 16, 24, 32),
                                                        (64, 128, 256, 512, 1024, 2048, 4096))
               if ctx * 1.25 + 1 <= limit and b * ctx * 1.25 <= pool.num_free - b]
    bar = tqdm(total=len(prefills) + len(decodes), desc="calibrate", unit="point", disable=not progress)
    for requests, cached, new in prefills:
        # Per-request sizes jitter around the grid point, as real batches are not uniform.
        c = [int(cached * rng.uniform(0.75, 1.25)) for _ in range(requests)]
        n = [max(1, int(new * rng.uniform(0.75, 1.25))) for _ in range(requests)]
        c = [min(ci, limit - ni) for ci, ni in zip(c, n)]
        cached_slots = [pool.alloc(ci) for ci in c]
        new_slots = [pool.alloc(ni) for ni in n]
        tokens = [rng.integers(0, vocab, ni) for ni in n]
        t = _timed(timer, lambda: run_prefill(model, pool, cached_slots, new_slots, tokens), repeats, statistic)
        attention = sum(ni * (ci + ni / 2) for ci, ni in zip(c, n))
        samples.append(Sample("prefill", (1.0, float(sum(n)), float(attention)), t))
        for s in cached_slots + new_slots:
            pool.free(s)
        bar.update()
    for batch, ctx in decodes:
        lens = [int(ctx * rng.uniform(0.75, 1.25)) for _ in range(batch)]
        context = [pool.alloc(n) for n in lens]
        new = pool.alloc(batch)
        tokens = rng.integers(0, vocab, batch)
        t = _timed(timer, lambda: run_decode(model, pool, context, new, tokens), repeats, statistic)
        samples.append(Sample("decode", (1.0, float(batch), float(sum(lens) + batch)), t))
        for s in context + [new]:
            pool.free(s)
        bar.update()
    bar.close()
    return samples


def calibrate(
    out: str | Path,
    preset: str = "tiny",
    device: str | None = None,
    dtype: str | None = None,
    *,
    seed: int = 0,
    repeats: int = 5,
    holdout: float = 0.25,
    max_prefill: int = 4096,
    max_context: int = 8192,
    pool_tokens: int = 140_000,
    statistic: str = "min",
    progress: bool = True,
    clock: str | None = None,
) -> dict:
    """Profile `preset` on `device`, fit the cost model, write it to `out`; returns a summary
    (coefficients, held-out errors in percent, point counts, wall time), which is also printed.
    ValueError for a bad `repeats`, `holdout` or `statistic`, before the model is built and profiled."""
    repeats = check_count("repeats", repeats)
    if not 0 <= holdout < 1:  # a share of 1 holds every point out: nothing left to fit
        raise ValueError(f"holdout must be a share in [0, 1), got {holdout!r}")
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    import time

    from gpu_backend import KVPool, build_model, default_device, model_dtype

    device = device or default_device()
    torch_dtype = model_dtype(dtype, device)
    model = build_model(preset, device=device, dtype=torch_dtype, seed=seed)
    cfg = model.cfg
    pool = KVPool(pool_tokens, cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, device=device, dtype=torch_dtype)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    samples = profile(model, pool, rng=rng, repeats=repeats, max_prefill=max_prefill, max_context=max_context,
                      statistic=statistic, progress=progress, clock=clock)
    held = rng.random(len(samples)) < holdout
    for kind in ("prefill", "decode"):  # at least one held-out point of each kind
        held[rng.choice([i for i, s in enumerate(samples) if s.kind == kind])] = True
    train = [s for s, h in zip(samples, held) if not h]
    test = {kind: [s for s, h in zip(samples, held) if h and s.kind == kind] for kind in ("prefill", "decode")}
    name = f"{preset}-{str(torch_dtype).removeprefix('torch.')}/{_device_name(device)} (calibrated)"
    cost = replace(fit(train), name=name)
    cost.to_json(out)
    errors = {kind: ape(pts, cost) for kind, pts in test.items()}
    linear = ape(test["decode"], fit(train, knees=()))
    summary = {"out": str(out), "cost_model": asdict(cost), **_errors(samples, errors),
               "decode_linear_median_ape_pct": float(np.median(linear)),
               "decode_linear_p90_ape_pct": float(np.percentile(linear, 90)),
               "wall_s": round(time.perf_counter() - start, 1)}
    print(json.dumps(summary, indent=2))
    return summary


def _errors(samples: list[Sample], errors: dict[str, np.ndarray]) -> dict:
    """Point counts and held-out errors (percent, median and p90) per kind and over both."""
    both = np.concatenate([errors["prefill"], errors["decode"]])
    return {
        "points": {k: sum(s.kind == k for s in samples) for k in ("prefill", "decode")},
        "held_out": {k: len(v) for k, v in errors.items()},
        "median_ape_pct": {**{k: float(np.median(v)) for k, v in errors.items()}, "all": float(np.median(both))},
        "p90_ape_pct": {
            **{k: float(np.percentile(v, 90)) for k, v in errors.items()}, "all": float(np.percentile(both, 90))
        },
    }


def _device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device)).replace(" ", "-").lower()
    return "cpu"


def checked_device(device: str | None) -> None:
    """UsageError unless `device` (--device; None: the default) is a torch device this machine has:
    torch itself says so only when the first model is built, with a traceback."""
    import torch

    if device is None:
        return
    try:
        chosen = torch.device(device)
    except RuntimeError:
        raise UsageError(f"--device {device!r} is not a torch device; e.g. cpu, cuda, cuda:1") from None
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if chosen.type == "cuda" and (chosen.index or 0) >= found:
        raise UsageError(f"--device {device}: this machine has {found} CUDA device(s) that torch can use")


def checked_clock(clock: str | None, threads: int, device: str | None) -> str:
    """The `--clock` option's clock (None: the default), or UsageError if it is unknown or, being
    the CPU-time clock on a CPU, is asked to time more than one torch thread."""
    from gpu_backend import default_device
    from gpu_backend.timer import CLOCKS, DEFAULT_CLOCK

    clock = clock or DEFAULT_CLOCK
    if clock not in CLOCKS:
        raise UsageError(f"unknown --clock {clock!r}; valid: {', '.join(CLOCKS)}")
    if clock == "cpu" and threads != 1 and (device or default_device()).startswith("cpu"):
        raise UsageError("--clock cpu counts one thread's CPU time: use --threads 1, or --clock wall")
    return clock
