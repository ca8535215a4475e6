"""Speed benchmarks: the one registry of them (BENCHES), and the table each returns.

Each benchmark is a module here, run alone as `python -m experiments.bench.<name>` (which prints
its figures in detail and asserts nothing), with a function `table(quick: bool) -> Table`: its
figures at the page's sizes (`quick`: small ones, seconds). `radix-auction bench` runs the
registered ones and writes the documentation's benchmarks page from their tables; its choices,
the page's sections and their order come from BENCHES. Importing this package imports no
benchmark (some need Ray or torch): an entry names its function as "module:attr".
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Callable

from auction_gym.registry import resolve


@dataclass(frozen=True)
class Table:
    """A benchmark's figures: a Markdown table (`columns`, `rows` of formatted cells) and `notes`,
    lines under it (a figure that is not a row, a target met or not)."""

    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = ["| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines + ([""] + [f"- {note}" for note in self.notes] if self.notes else []))


@dataclass(frozen=True)
class Bench:
    """One benchmark: `name` (its module under experiments.bench and its name on the command line),
    `title` (its section's heading), `measures` (what it measures, a sentence or two), `target`
    ("module:attr" of its `table(quick) -> Table`), `requires` (modules it needs that the
    project does not always install; missing: the bench is skipped with a line saying so) and
    `times_commands` (whether its table also takes `commands` and `full`: the whole commands that
    `radix-auction bench --commands` names)."""

    name: str
    title: str
    measures: str
    target: str
    requires: tuple[str, ...] = ()
    times_commands: bool = False

    def missing(self) -> tuple[str, ...]:
        """The modules of `requires` that are not installed."""
        return tuple(m for m in self.requires if importlib.util.find_spec(m) is None)

    def table_function(self) -> Callable[[bool], Table]:
        return resolve(self.target)


BENCHES: tuple[Bench, ...] = (
    Bench("env", "The environment's step",
          "RadixAuction-v0's time per step alone (random actions, resets included), SB3 PPO's time per step "
          "(MlpPolicy, CPU, one torch thread, the env included) learning on the same env, the env's time inside "
          "PPO's run, and the floor: the same env under FCFS, which runs no auction. Target: the env at most 25% "
          "of PPO's step.", "experiments.bench.env:table"),
    Bench("engine", "The engine",
          "The Mooncake conversation trace replayed through the simulated engine, per scheduler (wall time, "
          "requests per wall second, hit rate, latency, the longest queue), then RadixCache match + insert "
          "throughput on the trace's prompts.", "experiments.bench.engine:table"),
    Bench("waiting", "The waiting requests' cached prefixes",
          "`WaitingPrefixes.refresh` per admission round on a long queue of Mooncake requests (two admitted and "
          "two arriving a round), comparing the queue with the last one or told what changed, and per round "
          "with nothing changed.", "experiments.bench.waiting:table"),
    Bench("mechanism", "The auctions",
          "The radix-tree auction on agentic queues of 16 bidders: allocation alone, allocation plus every VCG "
          "payment, and the naive payments that re-run the allocation once per bidder, with their ratios to the "
          "allocation (target: payments at most 3x the allocation at 1,000 requests).",
          "experiments.bench.mechanism:table"),
    Bench("core_allocator", "The allocator on each core",
          "The radix auction's allocator on the Python and the compiled core: RadixAuction-v2's wall time with random "
          "actions, and the allocator alone per round (the rounds of that run and of the Mooncake sample's engine "
          "replay, recorded and replayed on each core), split into the tree's update and its read-out.",
          "experiments.bench.core_allocator:table"),
    Bench("auction_round", "A radix-auction round on each core",
          "One admission round of RadixAuction-v1's radix auction as the engine and the market ask it (`admit`, "
          "and `charges` for a round the market charged): the rounds of a run with random actions recorded once "
          "and replayed on a fresh auction of each core, rounds per second; and the env's steps per second.",
          "experiments.bench.auction_round:table"),
    Bench("paired_reward", "The paired reward",
          "RadixAuction-v1's steps per second with reward \"cost\" (one market) and \"paired\" (the learner's "
          "market and the reference's shadow), in blocks played in turn.", "experiments.bench.paired_reward:table"),
    Bench("cluster", "A cluster's simulation speed",
          "The Mooncake trace through one engine and through N replicas behind a router (the same requests), "
          "per admission policy: wall and CPU seconds and N replicas' time over one's, runs alternated.",
          "experiments.bench.cluster:table"),
    Bench("threads", "Torch threads for training",
          "SB3 PPO steps per second with 1 and 2 torch threads, alone and with a busy process of its own beside "
          "it (the load average says what else the machine ran).", "experiments.bench.threads:table"),
    Bench("rllib", "RLlib against SB3",
          "Environment steps per second of RLlib PPO with 0, 1 and 2 env runners against SB3 PPO in one "
          "process, on compare's default scenario and PPO settings: sampling alone and whole training "
          "iterations.", "experiments.bench.rllib:table", requires=("ray",)),
    Bench("instructions", "Instructions per step",
          "Instructions per step counted by callgrind (a count a busy machine does not move): RadixAuction-v0 and "
          "RadixAuction-v2 with seeded random actions, and the Mooncake sample replayed through the radix auction's "
          "engine, each over a few hundred steps after a warm-up (valgrind runs about 50x slower).",
          "experiments.bench.instructions:table"),
    Bench("core_speed", "The compiled core",
          "RadixAuction-v2's steps per wall second with random actions on each core of the simulator (Python and "
          "compiled, `auction_gym.core`), runs played in turn, and RadixCache match + insert throughput on the "
          "Mooncake prompts per core, with the compiled core's ratios to the Python one.",
          "experiments.bench.core_speed:table"),
    Bench("cores", "The two cores side by side",
          "Each figure on the Python and the compiled core from one run, the cores in turn: one env's steps per "
          "second (random actions, resets included) on RadixAuction-v0, v1 and v2 and on v0's market serving the "
          "shared-prefix workload and the Mooncake slice; RadixAuction-v1 in batches of 8 and 64, per env; the env's "
          "share of SB3 PPO's step on v1; and, with `--commands`, whole commands' wall times and whether the two "
          "cores wrote the same CSV files.", "experiments.bench.cores:table",
          requires=("auction_gym._core",), times_commands=True),
    Bench("queue", "Batches against the queue's length",
          "The same RadixAuction-v1 episodes played by one env after another, as one MarketBatch of 64, and by the "
          "same 64 envs each stepped 10 rounds in a row before the next, at an arrival rate the engine keeps up with "
          "and at one it does not: CPU time per env step in the first and the last quarter of the episodes, beside "
          "the mean number of requests waiting.", "experiments.bench.queue:table"),
    Bench("shards", "A batch spread over processes",
          "The same RadixAuction-v1 episodes as the cores benchmark's batch of 64, played as one MarketBatch in one "
          "process and as two processes of a MarketBatch of 32 each, started together: env steps per second in wall "
          "time, against the Python core's one env after another (the batch target's denominator).",
          "experiments.bench.shards:table"),
    Bench("misses", "Cache misses of a batch",
          "The same RadixAuction-v1 episodes played by one env after another and as one MarketBatch of 64, all "
          "envs alive both ways, counted by callgrind on a simulated cache hierarchy (counts a busy machine does "
          "not move): instructions, first-level and last-level data misses per env step. The last-level misses "
          "that the batch adds are the part of its cost that comes from each market's state going cold between "
          "its steps (valgrind runs about 50x slower).", "experiments.bench.misses:table"),
    Bench("torch_engine", "The torch engine",
          "The torch engine's kernels (tiny model, one thread on the CPU): prefill with 90% of the prompt cached "
          "against none cached, prefill tokens per second, decode steps of a batch.",
          "experiments.bench.torch_engine:table", requires=("torch",)),
    Bench("workload", "Generating the workloads",
          "Requests generated per second by RadixAuction-v1's episode streams, the agentic workload's defaults and "
          "the shared-prefix workload, each read to its end; the start of a v1 episode's stream; and "
          "RadixAuction-v1's steps per second with zero actions and its reset's milliseconds.",
          "experiments.bench.workload:table"),
)


COMMANDS = ("reproduce", "markets", "compare", "tests")
"""The whole commands a bench that times commands (`Bench.times_commands`) may be asked to run: the
`radix-auction` commands of those names at small sizes, and the default test run."""


def bench_names() -> tuple[str, ...]:
    """Every registered benchmark, in the page's order."""
    return tuple(b.name for b in BENCHES)


def get_bench(name: str) -> Bench:
    """The entry of `name`; ValueError listing the valid ones for another."""
    for bench in BENCHES:
        if bench.name == name:
            return bench
    raise ValueError(f"unknown bench {name!r}; valid: {', '.join(bench_names())}")
