"""The admission policies a market can run, by name: the one registry of mechanisms.

Each entry names a policy, where its class lives and what it does. Everything else derives from
it: `make_scheduler` (the one factory of admission policies) and `scheduler_names`, `MECHANISMS`
and `AUCTIONS` (`auction_gym.market.config`, live views), which of them charge and which are auctions (what
each class declares, `AdmissionPolicy.charges` and `is_auction`: an auction is built with the
market's cost model and charged VCG payments), the
mechanism rows of `RadixAuctionEnv`'s docstring, and the policies of `radix-auction demo` and
`reproduce --every-mechanism`. Registration order is table order: the no-money baselines (FCFS, then the cache-aware
ones, then the priority orders), the posted-price designs, then the auctions. To add one, see
docs/extending.md section 7 (7.1, a mechanism).

Targets are "module:attr" strings imported on first use, so this module imports none of the
policies (each imports the interface, `auction_gym.policy`, as this module does).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

from .policy import AdmissionPolicy


def resolve(target: str | Any) -> Any:
    """The object a registry entry names: "module:attr" imported on first use, anything else as given."""
    return _imported(target) if isinstance(target, str) else target


@functools.cache
def _imported(target: str) -> Any:
    """The object "module:attr" names, imported once: `make_scheduler` resolves its entry's class
    on every call (twice), and a module, once imported, keeps its attributes."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class MechanismEntry:
    """One admission policy: `name` (what configs and the command line say), `target` (its class
    or factory, as "module:attr" or the object itself; called with the policy's keyword
    arguments) and `summary` (one line: what it does and whether it charges)."""

    name: str
    target: str | Callable[..., AdmissionPolicy]
    summary: str
    in_batch: bool = False
    """For a policy written to the older protocol, which declares no `in_batch`: whether SGLang's
    in-batch prefix check reorders its queue. An `AdmissionPolicy` declares it on its class."""

    def factory(self) -> Callable[..., AdmissionPolicy]:
        """The class or factory (imported now if `target` is a string)."""
        return resolve(self.target)

    @property
    def charges(self) -> bool:
        """Whether its rounds charge money (its class's `charges`)."""
        return bool(AdmissionPolicy.declared(self.factory(), "charges"))

    @property
    def is_auction(self) -> bool:
        """Whether it is an auction (its class's `is_auction`): takes a cost model, charges VCG payments."""
        return bool(AdmissionPolicy.declared(self.factory(), "is_auction"))


_ENTRIES: dict[str, MechanismEntry] = {}


def register_mechanism(entry: MechanismEntry) -> MechanismEntry:
    """Add `entry` at the end of the table; a name already taken raises ValueError."""
    if entry.name in _ENTRIES:
        raise ValueError(f"mechanism name {entry.name!r} is already registered")
    if "/" in entry.name:  # `reproduce` names a policy under another cost model "name/model"
        raise ValueError(f"a mechanism name may not contain '/', got {entry.name!r}")
    _ENTRIES[entry.name] = entry
    return entry


def mechanism_names() -> tuple[str, ...]:
    """Every registered policy, in table order."""
    return tuple(_ENTRIES)


def auction_names() -> tuple[str, ...]:
    """The registered policies that are auctions (charge payments), in table order."""
    return tuple(name for name, entry in _ENTRIES.items() if entry.is_auction)


def get_mechanism(name: str) -> MechanismEntry:
    """The entry of `name`; an unknown name raises ValueError listing the valid ones."""
    entry = find_mechanism(name)
    if entry is None:
        raise ValueError(f"unknown mechanism {name!r}; valid: {', '.join(_ENTRIES)}")
    return entry


def find_mechanism(name: str) -> MechanismEntry | None:
    """The entry of `name`, None for a name not registered."""
    return _ENTRIES.get(name)


def scheduler_names() -> list[str]:
    """Every registered policy name, sorted."""
    return sorted(_ENTRIES)


def make_scheduler(
    name: str, cost_model: str | None = None, request_overhead: float | None = None,
    tie_break: str | None = None, **kwargs: Any,
) -> AdmissionPolicy:
    """The policy registered under `name`, built with `kwargs`: the one factory of admission
    policies. `cost_model`, `request_overhead` and `tie_break` (docs/design.md section 3) go to an
    auction, and are dropped for a policy without money, which has no completion-time model, so a
    market builds any policy with its own settings; None leaves the auction's default. An unknown
    name lists the valid ones."""
    try:
        entry = get_mechanism(name)
    except ValueError:
        raise ValueError(f"unknown scheduler {name!r}; valid names: {', '.join(scheduler_names())}") from None
    if entry.is_auction:
        given = {"cost_model": cost_model, "request_overhead": request_overhead, "tie_break": tie_break}
        kwargs = {**{k: v for k, v in given.items() if v is not None}, **kwargs}
    return AdmissionPolicy.adopt(entry.factory()(**kwargs), entry.in_batch)


class AuctionClasses(Mapping):
    """A live view {auction name: its class} of the registry (`AUCTIONS`): an auction registered
    later is in it too, so the market charges it."""

    def __getitem__(self, name: str) -> type:
        if name not in auction_names():
            raise KeyError(name)
        return _ENTRIES[name].factory()

    def __iter__(self) -> Iterator[str]:
        return iter(auction_names())

    def __len__(self) -> int:
        return len(auction_names())


class Names(Sequence):
    """A live view of a registry's names, `names()` read at each use (`MECHANISMS`, `WORKLOADS`):
    a name registered later is in it too, so the commands that check against it accept it."""

    def __init__(self, names: Callable[[], Sequence[str]]) -> None:
        self._names = names

    def __getitem__(self, index: Any) -> Any:
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return repr(tuple(self._names()))


MECHANISM_TABLE = "{mechanism_table}"
"""The line of a docstring that `with_mechanism_table` replaces by a row per registered policy."""


def with_mechanism_table(doc: str | None) -> str | None:
    """`doc` with its MECHANISM_TABLE line replaced by markdown rows `| name | summary |` of every
    registered policy, indented as that line (None stays None: python -OO strips docstrings)."""
    return with_table(doc, MECHANISM_TABLE, [(e.name, e.summary) for e in _ENTRIES.values()])


def with_table(doc: str | None, placeholder: str, rows: list[tuple[str, str]]) -> str | None:
    """`doc` with its `placeholder` line replaced by markdown rows `| name | summary |`, indented
    as that line (None stays None: python -OO strips docstrings)."""
    if doc is None:
        return None
    for line in doc.splitlines():
        if line.strip() == placeholder:
            indent = line[: len(line) - len(line.lstrip())]
            return doc.replace(line, "\n".join(f"{indent}| {name:<16} | {summary} |" for name, summary in rows))
    raise ValueError(f"no {placeholder} line in the docstring")


for _entry in (
    MechanismEntry("fcfs", "auction_gym.scheduler.fcfs:FCFS", "first come, first served; no payments"),
    MechanismEntry("lpm", "auction_gym.scheduler.lpm:LPM", "longest cached prefix first (SGLang's lpm); no payments"),
    MechanismEntry("klpm", "auction_gym.scheduler.klpm:KLPM",
                   "k-LPM: the oldest request, then k - 1 longest-prefix picks; no payments"),
    MechanismEntry("dfs_weight", "auction_gym.scheduler.dfs_weight:DFSWeight",
                   "SGLang's dfs-weight: subtrees by request count; no payments"),
    MechanismEntry("lpm_aging", "auction_gym.scheduler.lpm_aging:LPMAging",
                   "LPM with anti-starvation aging (as proposed to SGLang); no payments"),
    MechanismEntry("dlpm", "auction_gym.scheduler.dlpm:DLPM",
                   "fair share: deficit round robin per bidder over LPM's order (DLPM); no payments"),
    MechanismEntry("sglang_priority", "auction_gym.scheduler.priority:SGLangPriority",
                   "SGLang's priority scheduling: priority from the bid, FCFS inside; no payments"),
    MechanismEntry("qos_lpm", "auction_gym.scheduler.priority:QoSLPM",
                   "priority from the bid, then longest cached prefix, then arrival; no payments"),
    MechanismEntry("tiers", "auction_gym.pricing.tiers:ServiceTiers",
                   "posted-price service tiers (flex, standard, priority), FCFS inside; price x tokens"),
    MechanismEntry("tiers_lpm", "auction_gym.pricing.tiers:TiersLPM",
                   "posted-price service tiers, longest cached prefix first inside; price x tokens"),
    MechanismEntry("congestion", "auction_gym.pricing.congestion:CongestionPricing",
                   "a priority price that follows load (EIP-1559's rule); price x tokens"),
    MechanismEntry("strict_vcg", "auction_gym.mechanism.strict_priority:StrictPriorityAuction",
                   "strict priority by bid; VCG payments"),
    MechanismEntry("radix_vcg", "auction_gym.mechanism.radix_auction:RadixTreeAuction",
                   "the radix-tree auction (depth-first orders of the queue's radix tree); VCG payments"),
):
    register_mechanism(_entry)
