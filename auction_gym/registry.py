"""The admission policies a market can run, by name: the one registry of mechanisms.

Each entry names a policy, where its class lives and what it does. Everything else derives from
it: `make_scheduler` and `scheduler_names` (`auction_gym.scheduler`), `MECHANISMS` and `AUCTIONS`
(`auction_gym.market.config`), which of them charge (an entry whose class is an
`AuctionMechanism` is an auction: built with the market's cost model, charged VCG payments), the
mechanism rows of `RadixAuctionEnv`'s docstring, and the policies of `radix-auction demo` and
`reproduce`. Registration order is table order: the no-money baselines (FCFS, then the cache-aware
ones, then the priority orders), the posted-price designs, then the auctions. To add one, see the README's "Extending" section.

Targets are "module:attr" strings imported on first use, so this module imports neither the
schedulers nor the auctions (both import the scheduler interface, which reads this registry).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .scheduler.base import Scheduler


def resolve(target: str | Any) -> Any:
    """The object a registry entry names: "module:attr" imported now, anything else as given."""
    if not isinstance(target, str):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class MechanismEntry:
    """One admission policy: `name` (what configs and the command line say), `target` (its class
    or factory, as "module:attr" or the object itself; called with the policy's keyword
    arguments) and `summary` (one line: what it does and whether it charges)."""

    name: str
    target: str | Callable[..., Scheduler]
    summary: str
    in_batch: bool = False
    """Whether SGLang's in-batch prefix check reorders its queue (`auction_gym.engine.in_batch`):
    SGLang's cache-aware sorts use it (`lpm`), its `fcfs` (with or without priorities) and
    `dfs-weight` do not; a policy SGLang does not have says which it is like."""

    def factory(self) -> Callable[..., Scheduler]:
        """The class or factory (imported now if `target` is a string)."""
        return resolve(self.target)

    @property
    def charges(self) -> bool:
        """Whether its rounds charge money: an auction (VCG payments) or a posted-price design
        (its class's `charges = True`)."""
        return self.is_auction or bool(getattr(self.factory(), "charges", False))

    @property
    def is_auction(self) -> bool:
        """Whether it is an `AuctionMechanism`: takes a cost model and charges VCG payments."""
        from .mechanism.base import AuctionMechanism

        factory = self.factory()
        return isinstance(factory, type) and issubclass(factory, AuctionMechanism)


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
    """The entry of `name`, None for a name not registered (a lookup the engine makes every round)."""
    return _ENTRIES.get(name)


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
    MechanismEntry("lpm", "auction_gym.scheduler.lpm:LPM", "longest cached prefix first (SGLang's lpm); no payments",
                   in_batch=True),
    MechanismEntry("klpm", "auction_gym.scheduler.klpm:KLPM",
                   "k-LPM: the oldest request, then k - 1 longest-prefix picks; no payments", in_batch=True),
    MechanismEntry("dfs_weight", "auction_gym.scheduler.dfs_weight:DFSWeight",
                   "SGLang's dfs-weight: subtrees by request count; no payments"),
    MechanismEntry("lpm_aging", "auction_gym.scheduler.lpm_aging:LPMAging",
                   "LPM with anti-starvation aging (as proposed to SGLang); no payments", in_batch=True),
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
                   "the radix-tree auction (depth-first orders of the queue's radix tree); VCG payments", in_batch=True),
):
    register_mechanism(_entry)
