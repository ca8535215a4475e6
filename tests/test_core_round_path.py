"""The radix auction's round in one compiled call (`RadixTreeAuction.admit` on the compiled core,
csrc/round_tree_market.cpp) against the layered path and the Python core: the same orders, bids,
cached lengths, costs and charges bit for bit over an env's recorded rounds; engaged only for the
built-in layers (a subclass's override is called); inputs the call does not take go through the
layers, which raise their own errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from auction_gym import Request, core
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.mechanism.base import AuctionRound
from auction_gym.mechanism.compiled_tree import CompiledQueueTree
from auction_gym.mechanism.incremental_tree import IncrementalQueueTree
from auction_gym.mechanism.radix_auction import _ROUND_LAYERS, CompiledRound, LoneRound
from auction_gym.policy import QueueDelta, WaitingRound
from auction_gym.radix_cache import RadixCache
from experiments.bench.auction_round import Recorded, record

pytestmark = pytest.mark.skipif(core.compiled_module() is None,
                                reason="the compiled core (auction_gym._core) is not built")

_recorded: dict[str, Recorded] = {}


def _rounds(env_id: str) -> Recorded:
    if env_id not in _recorded:
        _recorded[env_id] = record(env_id, 160)
    return _recorded[env_id]


def _replay(kind: type, on: str, recorded: Recorded, cost_model: str | None = None) -> tuple[list[tuple], list[AuctionRound]]:
    """What each recorded round decides and charges, replayed on fresh auctions of `kind` on core `on`
    (under `cost_model`, else the recorded one)."""
    with core.use(on):
        auctions = [kind(cost_model or model, *rest) for _, (model, *rest) in recorded.auctions]
    seen, decisions = [], []
    for k, (a, queue, multipliers, remaining, changes, lens) in enumerate(recorded.rounds):
        order, decision = auctions[a].admit(WaitingRound(queue, None, multipliers, remaining, changes, lens))
        charged = [{i: p.hex() for i, p in decision.charges(*args).items()} for args in recorded.charged.get(k, ())]
        cost = None if decision.allocation is None else decision.allocation.cost.hex()
        seen.append(([r.id for r in order], [b.hex() for b in decision.bids], decision.prefix_lens, cost, charged))
        decisions.append(decision)
    return seen, decisions


def _layered(name: str) -> type:
    """A RadixTreeAuction subclass overriding layer `name` with one that counts its calls."""
    calls = [0]
    if name == "pricing":
        def pricing(self):
            calls[0] += 1
            return RadixTreeAuction.pricing.fget(self)
        member: object = property(pricing)
    else:
        def member(self, *args, **kwargs):
            calls[0] += 1
            return getattr(RadixTreeAuction, name)(self, *args, **kwargs)
    return type(f"Over{name}", (RadixTreeAuction,), {name: member, "calls": calls})


@pytest.mark.parametrize("cost_model", [None, "unit"])
@pytest.mark.parametrize("env_id", ["RadixAuction-v1", "RadixAuction-v2"])
def test_one_call_rounds_match_the_layers_and_the_python_core(env_id, cost_model):
    recorded = _rounds(env_id)
    fast, decisions = _replay(RadixTreeAuction, "compiled", recorded, cost_model)
    engaged = sum(type(d) is CompiledRound for d in decisions)
    multi = sum(len(q) > 1 for _, q, *_ in recorded.rounds)
    assert engaged >= multi - 2 and engaged > 50  # all but a round without changes to follow
    assert any(args for args in recorded.charged.values())
    assert all((d.prefix_lens is None) == (cost_model == "unit") for d in decisions if d.allocation is not None)
    layered, decisions = _replay(_layered("_decide"), "compiled", recorded, cost_model)
    assert not any(type(d) is CompiledRound for d in decisions)
    assert fast == layered
    assert fast == _replay(RadixTreeAuction, "python", recorded, cost_model)[0]


@pytest.mark.parametrize("layer", [name for name in _ROUND_LAYERS if name != "decides"])
def test_an_overridden_layer_is_called(layer):
    recorded = _rounds("RadixAuction-v1")
    kind = _layered(layer)
    with core.use("compiled"):
        assert RadixTreeAuction()._compiled_rounds and not kind()._compiled_rounds
    seen, decisions = _replay(kind, "compiled", recorded)
    assert not any(type(d) is CompiledRound for d in decisions)
    assert kind.calls[0] > 0 or layer == "_skip"  # called for an empty queue or a round asked again only
    assert seen == _replay(RadixTreeAuction, "compiled", recorded)[0]


def test_the_python_core_has_no_compiled_rounds():
    with core.use("python"):
        assert not RadixTreeAuction()._compiled_rounds


def _market(kind: type = RadixTreeAuction) -> tuple[RadixTreeAuction, list[Request], QueueDelta, dict]:
    """An auction of `kind` following a first round of five requests of two bidders, that round's
    queue, no changes since, and its cached lengths."""
    rng = np.random.default_rng(0)
    queue = [Request(k, k % 2, rng.integers(0, 3, 4).tolist(), urgency=float(k + 1)) for k in range(5)]
    lens = {r: 0 for r in queue}
    with core.use("compiled"):
        auction = kind(tie_break="request_id")
    first = QueueDelta(list(queue), [], [], lens)
    auction.admit(WaitingRound(queue, None, [1.0, 0.5], None, first, lens))
    return auction, queue, QueueDelta([], [], [], lens), lens


def _outcome(call) -> tuple:
    try:
        order, decision = call()
    except (IndexError, KeyError, TypeError, ValueError) as error:
        return type(error), str(error)
    return [r.id for r in order], [repr(b) for b in decision.bids], type(decision)


@pytest.mark.parametrize("case", ["numpy", "int_alpha", "int_urgency", "nan", "negative", "tuple", "bidder",
                                  "length", "no_lengths"])
def test_inputs_the_call_does_not_take_go_through_the_layers(case):
    """The layered path raises or decides as the Python core does, and the tree follows on alike."""
    outcomes = []
    for kind in (RadixTreeAuction, _layered("_decide")):
        auction, queue, delta, lens = _market(kind)
        alpha: object = [1.0, 0.5]
        length_of: object = lens
        if case == "numpy":
            alpha = np.array([1.0, 0.5])
        elif case == "int_alpha":
            alpha = [1, 2]
        elif case == "int_urgency":
            queue[1].urgency = 3
        elif case in ("nan", "negative"):
            alpha = [1.0, math.nan if case == "nan" else -1.0]
        elif case == "tuple":
            alpha = (2.0, 0.5)
        elif case == "bidder":
            queue[2].bidder = 5
        elif case == "length":
            length_of = {r: 0 for r in queue[1:]}
        else:
            length_of = None
        round_ = WaitingRound(queue, RadixCache(), alpha, None, delta, length_of)
        outcomes.append(_outcome(lambda: auction.admit(round_)))
        queue[1].urgency, queue[2].bidder = 2.0, 0
        outcomes.append(_outcome(lambda: auction.admit(WaitingRound(queue[:4], None, [0.5, 1.0], None,
                                                                    QueueDelta([], [queue[4]], [], lens), lens))))
    fast, layered = outcomes[:2], outcomes[2:]
    assert [o[:2] for o in fast] == [o[:2] for o in layered]
    assert fast[1][2] is CompiledRound  # the round after: the tree followed on


def test_the_call_refuses_a_bad_prompt_as_the_layers_do():
    auction, queue, _, lens = _market()
    bad = Request(99, 0, [1, 2], urgency=1.0)
    bad.tokens = np.zeros(0, dtype=np.int64)
    lens = {**lens, bad: 0}
    with pytest.raises(ValueError, match="request 99: empty token sequence"):
        auction.admit(WaitingRound(queue + [bad], None, [1.0, 0.5], None, QueueDelta([bad], [], [], lens), lens))
    order, decision = auction.admit(WaitingRound(queue, None, [1.0, 0.5], None, None, lens))
    assert sorted(r.id for r in order) == [0, 1, 2, 3, 4] and type(decision) is AuctionRound


def test_charges_with_counts_that_are_not_ints_are_the_rules():
    auction, queue, delta, lens = _market()
    _, decision = auction.admit(WaitingRound(queue, None, [0.5, 1.0], None, delta, lens))
    assert type(decision) is CompiledRound
    exact = decision.charges([0, 1], [1, 1], 0.25)
    assert exact and decision.charges([0, 1], [1.0, 1.0], 0.25) == exact
    assert AuctionRound.charges(decision, [0, 1], [1, 1], 0.25) == exact


@pytest.mark.parametrize("follow", [False, True])
def test_prompts_of_every_layout_join_alike(follow):
    """Prompts read through the buffer protocol or converted: a read-only or writeable int64 array,
    a strided view, another byte order, another int type, a list; both trees hold them alike."""
    base = np.arange(12, dtype=np.int64) % 3
    writeable = base[:5].copy()
    prompts = [np.asarray(base[:4]), writeable, base[::2], base[1:6].astype(">i8"), base[:3].astype(np.int32),
               [0, 1, 2, 0], np.ascontiguousarray(base[2:9])]
    prompts[0].flags.writeable = False
    queue = [Request(k, k % 2, [0], urgency=float(k + 1)) for k in range(len(prompts))]
    for r, p in zip(queue, prompts):
        r.tokens = p
    lens = {r: 0 for r in queue}
    trees = [IncrementalQueueTree(1.0, True, True), CompiledQueueTree(1.0, True, True)]
    urgencies = [r.urgency for r in queue]
    for tree in trees:
        if follow:
            tree.update([], [], [])
            tree.update(queue, urgencies, [0] * len(queue), QueueDelta(list(queue), [], [], lens))
        else:
            tree.update(queue, urgencies, [0] * len(queue))
    writeable[0] = 2  # placed again next round, as the Python tree does
    for tree in trees:
        tree.update(queue, urgencies, [0] * len(queue))
    assert [r.id for r in trees[1].order()] == [r.id for r in trees[0].order()]
    assert trees[1].node_stats() == trees[0].node_stats()


def test_the_unit_cost_model_rounds_are_compiled_too():
    with core.use("compiled"):
        unit, tokens = RadixTreeAuction("unit"), RadixTreeAuction("tokens")
    assert unit._compiled_rounds and tokens._compiled_rounds


class _EmptyingLengths(dict):
    """Cached lengths whose first lookup empties the queue the round is reading."""

    def __init__(self, lens: dict, queue: list) -> None:
        super().__init__(lens)
        self.queue = queue

    def __getitem__(self, request):
        self.queue.clear()
        return super().__getitem__(request)


def test_a_queue_emptied_by_a_callback_is_read_as_it_was_given_in_one_call():
    """The one-call round reads the queue as it was when the call began, whatever a lookup of its
    cached lengths does to the caller's list meanwhile."""
    decided = []
    for emptying in (False, True):
        tree = CompiledQueueTree(1.0, costed=True)
        queue = [Request(k, k % 2, [1, 2, k % 3, k], urgency=float(k + 1)) for k in range(5)]
        lens = {r: k % 2 for k, r in enumerate(queue)}
        lens_of = _EmptyingLengths(lens, queue) if emptying else lens
        order, decision = tree.market_round(queue, [1.0, 0.5], QueueDelta(list(lens), [], [], lens), lens_of)
        round_, prefix_lens = decision.allocation.compiled, decision.prefix_lens
        assert prefix_lens is round_.prefix_lens and decision.allocation.requests is decision.requests
        decided.append((round_.bids, prefix_lens, [r.id for r in decision.requests], [r.id for r in order]))
        assert len(queue) == (0 if emptying else 5)
    assert decided[1] == decided[0]


def _lone_and_again(kind: type, on: str, kinds: list[type] | None = None, cost_model: str = "tokens") -> list[tuple]:
    """What a market's rounds of one request decide, charge or raise on an auction of `kind` (core
    `on`) that followed a round of five, with a round of two after them that follows the changes the
    lone rounds kept; and whether a round asked again with the same inputs reused the allocation.
    The type of each decision is appended to `kinds`."""
    rng = np.random.default_rng(1)
    queue = [Request(k, k % 2, rng.integers(0, 3, 4).tolist(), urgency=float(k + 1)) for k in range(5)]
    lens = {r: k % 3 for k, r in enumerate(queue)}
    with core.use(on):
        auction = kind(cost_model, tie_break="request_id")
    auction.admit(WaitingRound(queue, None, [1.0, 0.5], None, QueueDelta(list(queue), [], [], lens), lens))
    empty = Request(9, 0, [1], urgency=1.0)
    empty.tokens = np.zeros(0, dtype=np.int64)
    rounds = [
        ([queue[3]], [0.5, 2.0], QueueDelta([], [queue[k] for k in (0, 1, 2, 4)], [], lens), lens),
        ([queue[3]], [0.5, 2.0], QueueDelta([], [], [], lens), lens),  # asked again: reused
        ([queue[3]], [0.5, 3.0], QueueDelta([], [], [], lens), lens),
        ([queue[3]], [0.5, math.nan], QueueDelta([], [], [], lens), lens),
        ([queue[3]], [0.5, -1.0], QueueDelta([], [], [], lens), lens),
        ([queue[3]], [0.5, 2.0], QueueDelta([], [], [], {}), {}),
        ([queue[3]], [0.5, 2.0], None, lens),
        ([queue[3]], np.array([0.5, 3.0]), QueueDelta([], [], [], lens), lens),  # taken by the checks
        ([empty], [0.5, 2.0], QueueDelta([empty], [queue[3]], [], {empty: 0}), {empty: 0}),
        ([queue[3], queue[0]], [1.0, 0.5], QueueDelta([queue[0]], [empty], [], lens), lens),
        ([queue[2]], [1.0, 0.5], QueueDelta([queue[2]], [queue[3], queue[0]], [], lens), lens),
        ([queue[2], queue[1]], [1.0, 0.5], QueueDelta([queue[1]], [], [], lens), lens),
    ]
    seen, last = [], None
    for waiting, alpha, delta, length_of in rounds:
        try:
            order, decision = auction.admit(WaitingRound(waiting, None, alpha, None, delta, length_of))
        except (KeyError, ValueError) as error:
            seen.append((type(error), str(error)))
            continue
        if kinds is not None:
            kinds.append(type(decision))
        charged = decision.charges([r.id for r in order[:1]], [1, 1], 0.25)
        reused = last is not None and decision.allocation is last.allocation
        seen.append(([r.id for r in order], [b.hex() for b in decision.bids], decision.prefix_lens,
                     {i: p.hex() for i, p in charged.items()}, reused))
        last = decision
    return seen


@pytest.mark.parametrize("cost_model", ["tokens", "unit"])
def test_lone_rounds_match_the_layers_and_the_python_core(cost_model):
    """A market's round of one request decided without the layers: the same orders, bids, cached
    lengths, charges (none), errors and reuse as the layers and the Python core, and the tree
    follows on from the changes it kept. "unit" reads no lengths, so a round without them is decided."""
    kinds: list[type] = []
    fast = _lone_and_again(RadixTreeAuction, "compiled", kinds, cost_model)
    assert fast == _lone_and_again(_layered("_decide"), "compiled", None, cost_model)
    assert fast == _lone_and_again(RadixTreeAuction, "python", None, cost_model)
    lengthless = list if cost_model == "unit" else type
    assert [type(s[0]) for s in fast] == [list, list, list, type, type, lengthless, list, list, type, list, list, list]
    assert [s[4] for s in fast if type(s[0]) is list][:2] == [False, True]
    assert fast[-1][3]  # the round of two after the lone rounds charges
    assert LoneRound in kinds and CompiledRound in kinds


@pytest.mark.parametrize("layer", [name for name in _ROUND_LAYERS if name != "decides"])
def test_an_overridden_layer_decides_the_lone_rounds(layer):
    kinds: list[type] = []
    assert _lone_and_again(_layered(layer), "compiled", kinds) == _lone_and_again(RadixTreeAuction, "compiled")
    assert kinds and not {LoneRound, CompiledRound} & set(kinds)


def test_lone_and_one_call_rounds_are_engaged():
    auction, queue, delta, lens = _market()
    _, lone = auction.admit(WaitingRound(queue[:1], None, [1.0, 0.5], None,
                                         QueueDelta([], queue[1:], [], lens), lens))
    assert type(lone) is LoneRound and lone.charges([0], [1, 0], 0.25) == {}
    _, again = auction.admit(WaitingRound(queue[:2], None, [1.0, 0.5], None, QueueDelta([queue[1]], [], [], lens),
                                          lens))
    assert type(again) is CompiledRound
    _, asked = auction.admit(WaitingRound(queue[:2], None, [1.0, 0.5], None, QueueDelta([], [], [], lens), lens))
    assert type(asked) is AuctionRound and asked.allocation is again.allocation
    assert asked.bids == again.bids == [1.0, 1.0]


_SHRINKING_BIDDER = """
import numpy as np
from auction_gym import Request, core
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.policy import WaitingRound

class Shrinking(Request):
    # Its bidder read empties the round's multipliers, as Python code the lone round calls may.
    __slots__ = ()

    @property
    def bidder(self):
        multipliers.clear()
        return 0

    @bidder.setter
    def bidder(self, value):
        pass

with core.use("compiled"):
    auction = RadixTreeAuction()
multipliers = [1.0] * 4096
r = Shrinking(1, 0, np.arange(1, 9, dtype=np.int64), bid=1.0)
try:
    auction.admit(WaitingRound([r], None, multipliers, None, None, {r: 0}))
except ValueError as error:
    print(error)
"""


def test_a_lone_round_reads_its_multiplier_after_python_code_ran():
    """A lone round's bidder read may run Python code (a Request subclass's property) that changes
    the multipliers: the compiled call reads what it checked before, or declines, and the round
    raises what Python raises (the bidder has no multiplier left), rather than reading past the
    list's end."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _SHRINKING_BIDDER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "request 1 is bidder 0's, but the round has 0 multipliers, one per bidder"


def _made_alike(fast: tuple, layered: tuple, pricing: RadixTreeAuction) -> None:
    """A round the compiled call made (`fast`: its order and decision) holds what the layers' holds:
    its pricing, its allocation's fields (those read on first use unread yet), request work and
    completion times, and an order that is a list of its own."""
    (order, decision), (layered_order, layered_decision) = fast, layered
    allocation, kept = decision.allocation, layered_decision.allocation
    assert type(allocation) is type(kept) and decision.pricing is pricing
    fields = sorted(vars(allocation))
    if type(decision) is CompiledRound:  # the layers' allocation holds its bids; a compiled one's are read later
        assert fields == ["admission", "compiled", "prefix_lens", "request_work", "requests"]
        assert allocation.request_work == kept.request_work
    else:
        assert fields == sorted(vars(kept)) == ["admission", "bids", "full", "prefix_lens", "requests"]
    assert allocation.requests is decision.requests and allocation.prefix_lens is decision.prefix_lens
    completion = [allocation.whole(pricing).completion, kept.whole(layered_decision.pricing).completion]
    assert [c.hex() for c in completion[0]] == [c.hex() for c in completion[1]]
    assert order == allocation.admission == layered_order and order is not allocation.admission
    order.reverse()
    assert [r.id for r in allocation.admission] == [r.id for r in layered_order]


@pytest.mark.parametrize("cost_model", ["tokens", "unit"])
def test_the_one_call_rounds_are_made_as_the_layers_make_them(cost_model):
    recorded = _rounds("RadixAuction-v1")
    with core.use("compiled"):
        fast = [RadixTreeAuction(cost_model, *rest) for _, (_, *rest) in recorded.auctions]
        layered = [_layered("_decide")(cost_model, *rest) for _, (_, *rest) in recorded.auctions]
    made = []
    for a, queue, multipliers, remaining, changes, lens in recorded.rounds:
        rounds = [auctions[a].admit(WaitingRound(queue, None, multipliers, remaining, changes, lens))
                  for auctions in (fast, layered)]
        if type(rounds[0][1]) is CompiledRound:
            _made_alike(*rounds, fast[a].pricing)
            made.append(rounds[0][1])
    assert len(made) > 50
    queue = [Request(k, k % 2, [1, 2, k % 3, k], urgency=float(k + 1)) for k in range(5)]
    lens = {r: k % 2 for k, r in enumerate(queue)}
    with core.use("compiled"):
        auctions = [kind(cost_model) for kind in (RadixTreeAuction, _layered("_decide"))]
    rounds = [WaitingRound(queue, None, [1.0, 0.5], None, QueueDelta(list(queue), [], [], lens), lens),
              WaitingRound(queue[3:4], None, [0.5, 2.0], None, QueueDelta([], queue[:3] + queue[4:], [], lens), lens)]
    rounds = [[a.admit(r) for a in auctions] for r in rounds][-1]
    assert type(rounds[0][1]) is LoneRound
    _made_alike(*rounds, auctions[0].pricing)


def _lone_then_three() -> list[AuctionRound]:
    """The decisions of a lone round and a round of three after `_market`'s first round."""
    auction, queue, _, lens = _market()
    rounds = [WaitingRound(queue[:1], None, [1.0, 0.5], None, QueueDelta([], queue[1:], [], lens), lens),
              WaitingRound(queue[:3], None, [1.0, 0.5], None, QueueDelta(queue[1:3], [], [], lens), lens)]
    return [auction.admit(r)[1] for r in rounds]


@pytest.mark.parametrize("kind", [CompiledRound, LoneRound])
def test_a_round_class_setting_attributes_its_own_way_has_them_set(kind, monkeypatch):
    """The compiled call fills a round's slots in place only while its class sets attributes as
    `object` does and its slots are plain; otherwise it sets each through the class."""
    seen: list[str] = []

    def setattr_seen(self, name, value):
        seen.append(name)
        object.__setattr__(self, name, value)

    expected = _lone_then_three()
    monkeypatch.setattr(kind, "__setattr__", setattr_seen)
    decisions = _lone_then_three()
    assert [type(d) for d in decisions] == [LoneRound, CompiledRound]
    filled = ["requests", "prefix_lens", "allocation"] if kind is CompiledRound else \
        ["requests", "bids", "prefix_lens", "allocation"]
    assert seen == [*filled, "_outcome_cache", "_queued", "pricing"]
    assert [(d.bids, d.prefix_lens, [r.id for r in d.admission_order()]) for d in decisions] == \
        [(d.bids, d.prefix_lens, [r.id for r in d.admission_order()]) for d in expected]
    monkeypatch.undo()
    seen.clear()
    _lone_then_three()
    assert not seen


@pytest.mark.parametrize("kind", [CompiledRound, LoneRound])
def test_a_round_class_whose_slot_is_not_plain_has_it_set_through_the_class(kind, monkeypatch):
    queued: list[object] = []
    monkeypatch.setattr(kind, "_queued", property(lambda self: None, lambda self, value: queued.append(value)))
    decisions = _lone_then_three()
    assert [type(d) for d in decisions] == [LoneRound, CompiledRound] and queued == [None]
    assert [len(d.requests) for d in decisions] == [1, 3]


def test_the_one_call_rounds_charge_alike_when_asked_again():
    """Their charges keep no state (`stateless_charges`): the market asks them without keeping the
    first answer."""
    auction, queue, delta, lens = _market()
    _, decision = auction.admit(WaitingRound(queue, None, [0.5, 1.0], None, delta, lens))
    assert type(decision) is CompiledRound and CompiledRound.stateless_charges and LoneRound.stateless_charges
    first = decision.charges([0, 1], [1, 1], 0.25)
    assert first and decision.charges([0, 1], [1, 1], 0.25) == first
    decision.outcome  # the rule reads the outcome where it is there: the same charges
    assert decision.charges([0, 1], [1, 1], 0.25) == first
