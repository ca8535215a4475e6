"""Benchmark: one radix-auction admission round as the engine asks it, on each core.

    python -m experiments.bench.auction_round [--env RadixAuction-v1] [--steps 3000] [--warmup 300] [--repeats 3]

In one process, the cores in turn (`core_speed.in_turn`), medians of `--repeats`:

- the round alone: the `WaitingRound`s an env's engine passed its radix auction in `--warmup` +
  `--steps` steps with seeded random actions, recorded once (queue, multipliers, budgets left,
  changes and cached lengths copied) and replayed on a fresh auction of each core as the engine
  and the market ask it: `admit`, then for a round the market charged, `charges` with the
  recorded arguments (rounds per second, and microseconds per round);
- the env: its steps per second with the same actions (`core_speed.steps_per_second`).

Both cores decide the same rounds bit for bit (tests/test_core_allocator.py), so the replays do
the same work.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Callable

import gymnasium as gym

import auction_gym  # noqa: F401  (registers the environments)
from auction_gym import core
from auction_gym.mechanism.base import AuctionRound
from auction_gym.mechanism.radix_auction import CompiledRound, LoneRound, RadixTreeAuction
from auction_gym.policy import WaitingRound

from . import Table
from .core_speed import available, in_turn, steps_per_second


@dataclass
class Recorded:
    """The auctions (class and settings; an env's reset makes a new one) and their rounds: each
    round's auction (numbered as first seen) and `WaitingRound` arguments (the cache left out: a
    round with its cached lengths never reads it), and the `charges` calls the market made on each
    round's decision."""

    auctions: list[tuple[type, tuple]]
    rounds: list[tuple]
    charged: dict[int, list[tuple]]


def record(env_id: str, steps: int, seed: int = 0) -> Recorded:
    """The rounds the engine of `env_id` (a radix auction's env) passed its auction in `steps`
    random-action steps, recorded at the methods the engine and the market call."""
    recorder = _Recorder()
    env = gym.make(env_id)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    with _patched([(RadixTreeAuction, "admit", recorder.admitting), (AuctionRound, "charges", recorder.charging),
                   (CompiledRound, "charges", recorder.charging), (LoneRound, "charges", recorder.charging)]):
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
    return recorder.recorded


@contextmanager
def _patched(patches: list[tuple[type, str, Callable]]):
    """Each (class, name, wrap) of `patches`: the class's method `name` replaced by `wrap` of it
    while the block runs, the class's own restored after."""
    kept = [(cls, name, cls.__dict__[name]) for cls, name, _ in patches]
    for cls, name, wrap in patches:
        setattr(cls, name, wrap(getattr(cls, name)))
    try:
        yield
    finally:
        for cls, name, method in kept:
            setattr(cls, name, method)


class _Recorder:
    """What `record` keeps of the calls to the methods it wraps."""

    def __init__(self) -> None:
        self.recorded = Recorded([], [], {})
        self.number: dict[int, int] = {}  # an auction's number, by its id
        self.of_decision: dict[int, int] = {}  # the round a decision was made in, by its id
        self.inside: list[bool] = []  # a recorded call made from another (a fast path falling back) is not one more

    def admitting(self, admit: Callable) -> Callable:
        def admit_recorded(auction, round_):
            if self.inside:
                return admit(auction, round_)
            self._keep(auction, round_)
            with self._within():
                order, decision = admit(auction, round_)
            self.of_decision[id(decision)] = len(self.recorded.rounds) - 1
            return order, decision
        return admit_recorded

    def charging(self, charges: Callable) -> Callable:
        def charges_recorded(decision, admitted, per_bidder, seconds_per_unit):
            if not self.inside:
                self.recorded.charged.setdefault(self.of_decision[id(decision)], []).append(
                    (list(admitted), list(per_bidder), seconds_per_unit))
            with self._within():
                return charges(decision, admitted, per_bidder, seconds_per_unit)
        return charges_recorded

    def _keep(self, auction: RadixTreeAuction, round_: WaitingRound) -> None:
        """`round_` of `auction` recorded: the auction numbered when first seen, the round's
        changes and cached lengths copied (the engine changes its own in place)."""
        recorded = self.recorded
        if id(auction) not in self.number:
            self.number[id(auction)] = len(recorded.auctions)
            recorded.auctions.append((type(auction), (auction.cost_model, auction.request_overhead, auction.tie_break)))
        changes = round_.changes
        kept = None if changes is None else replace(changes, length_of=dict(changes.length_of))
        lens = dict(zip(round_.queue, round_.prefix_lens))
        recorded.rounds.append((self.number[id(auction)], list(round_.queue), _copy(round_.multipliers),
                                _copy(round_.remaining), kept, lens))

    @contextmanager
    def _within(self):
        self.inside.append(True)
        try:
            yield
        finally:
            self.inside.pop()


def _copy(values):
    return None if values is None else list(values)


def replay(on: str, recorded: Recorded) -> float:
    """Seconds of the recorded rounds (and their charges) replayed on a fresh auction of core `on`."""
    with core.use(on):
        auctions = [kind(*settings) for kind, settings in recorded.auctions]
    rounds = [(auctions[a], WaitingRound(q, None, m, b, c, lens)) for a, q, m, b, c, lens in recorded.rounds]
    charged = recorded.charged
    gc.collect()
    gc.freeze()  # the recording is no garbage: collections skip it, as an engine's have no such heap
    try:
        start = time.perf_counter()
        for k, (auction, round_) in enumerate(rounds):
            _, decision = auction.admit(round_)
            for args in charged.get(k, ()):
                decision.charges(*args)
        return time.perf_counter() - start
    finally:
        gc.unfreeze()


def measure(env_id: str, steps: int, warmup: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per core: rounds per second and microseconds per round of the recorded rounds, and the env's
    steps per second, medians of `repeats`; under "rounds", how many and how many charged."""
    cores = available()
    recorded = record(env_id, warmup + steps)
    n = len(recorded.rounds)
    round_s = in_turn(lambda on: replay(on, recorded), repeats, cores)
    env_sps = in_turn(lambda on: steps_per_second(on, warmup, steps, env_id), repeats, cores)
    out = {on: {"rounds_per_s": n / statistics.median(round_s[on]),
                "round_us": statistics.median(round_s[on]) / n * 1e6,
                "env_steps_per_s": statistics.median(env_sps[on])} for on in cores}
    out["rounds"] = {"rounds": n, "charged": len(recorded.charged)}
    return out


def table(quick: bool) -> Table:
    """RadixAuction-v1's rounds and steps: 3,000 steps after 300, median of 3 (quick: 300 after 30, one run)."""
    steps, warmup, repeats = (300, 30, 1) if quick else (3000, 300, 3)
    m = measure("RadixAuction-v1", steps, warmup, repeats)
    cores = [c for c in core.CORES if c in m]
    both = len(cores) == 2
    rows = []
    for label, key, fmt, per_second in (
        ("a round (admit, and charges when charged), rounds per s", "rounds_per_s", "{:,.0f}", True),
        ("a round, us", "round_us", "{:.1f}", False),
        ("RadixAuction-v1, steps per s", "env_steps_per_s", "{:,.0f}", True),
    ):
        py, cc = (m[c][key] for c in core.CORES) if both else (m[cores[0]][key], None)
        speedup = [f"{cc / py if per_second else py / cc:.2f}x"] if both else []
        rows.append((label, *(fmt.format(m[c][key]) for c in cores), *speedup))
    notes = [f"{steps:,} steps after {warmup} warm-up, median of {repeats}; the cores in turn in one process.",
             f"Rounds replayed: {m['rounds']['rounds']:,}, of which the market charged {m['rounds']['charged']:,}."]
    return Table(("figure", *cores, *(["compiled's speed-up"] if both else [])), rows, notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="RadixAuction-v1")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    m = measure(args.env, args.steps, args.warmup, args.repeats)
    for on in (c for c in core.CORES if c in m):
        print(f"{on:>9}  rounds/s {m[on]['rounds_per_s']:9.0f}  us/round {m[on]['round_us']:7.1f}  "
              f"{args.env} steps/s {m[on]['env_steps_per_s']:8.0f}")
    print(f"{m['rounds']['rounds']} rounds replayed, {m['rounds']['charged']} charged")


if __name__ == "__main__":
    main()
