"""An admission round's Python layers on the compiled core: the `WaitingRound` the compiled engine
makes without its `__init__` (csrc/engine.cpp) against the class's own, a replaced `__init__`
called; the radix auction's one-call round (`RoundTree.market_round`) naming a bad input as the
layers name it, with the same exception chain."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import Request, core
from auction_gym.engine import SimEngine
from auction_gym.engine.sim_engine import CompiledSimEngine
from auction_gym.mechanism import RadixTreeAuction
from auction_gym.mechanism.radix_auction import CompiledRound
from auction_gym.policy import QueueDelta, WaitingRound

pytestmark = pytest.mark.skipif(core.compiled_module() is None,
                                reason="the compiled core (auction_gym._core) is not built")


class _Recording(RadixTreeAuction):
    """A radix auction that keeps each round the engine passed it (`admit` is none of the layers
    its compiled round stands in for, so its rounds stay compiled)."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.rounds: list[WaitingRound] = []

    def admit(self, round: WaitingRound):
        self.rounds.append(round)
        return super().admit(round)


def _engine_rounds(requests: int = 40) -> tuple[list[WaitingRound], list[tuple]]:
    """The rounds a compiled engine passed its radix auction serving a small burst, and what each
    held when it was passed (the engine's lists change as it serves)."""
    with core.use("compiled"):
        policy = _Recording()
        engine = SimEngine(policy)
    assert isinstance(engine, CompiledSimEngine)
    rng = np.random.default_rng(3)
    engine.submit([Request(k, k % 3, rng.integers(0, 4, 6 + k % 5), output_len=8, urgency=float(1 + k % 4),
                           arrival=0.002 * (k // 4)) for k in range(requests)])
    held = []
    original = policy.admit

    def admit(round: WaitingRound):
        held.append((type(round), list(round.queue), round.cache, round.multipliers, round.remaining,
                     round.changes, round.length_of, round._lens))
        return original(round)

    policy.admit = admit
    while engine.step([1.0, 0.5, 2.0], [5.0, 5.0, 5.0]) is not None:
        pass
    return policy.rounds, held


def test_the_engine_makes_the_rounds_the_class_makes():
    rounds, held = _engine_rounds()
    assert len(rounds) > 3
    assert any(type(r.changes) is QueueDelta for r in rounds)
    for round_, (kind, queue, *rest) in zip(rounds, held):
        assert kind is WaitingRound
        made = WaitingRound(round_.queue, *rest[:-1])
        assert all(getattr(made, s) is getattr(round_, s) for s in WaitingRound.__slots__ if s != "_lens")
        assert rest[-1] is None  # `_lens` unset until read


def test_a_replaced_init_makes_the_engine_s_rounds(monkeypatch):
    """The engine calls the class while its `__init__` is not the class's own."""
    made = []
    own = WaitingRound.__init__

    def init(self, *args, **kwargs):
        made.append(args)
        own(self, *args, **kwargs)

    baseline = [(len(q), m) for _, q, _, m, *_ in _engine_rounds()[1]]
    monkeypatch.setattr(WaitingRound, "__init__", init)
    rounds, held = _engine_rounds()
    assert len(made) == len(rounds) and [(len(q), m) for _, q, _, m, *_ in held] == baseline


def _first_round(kind: type) -> tuple[RadixTreeAuction, list[Request], dict]:
    """An auction of `kind` following a first round of four requests of two bidders."""
    queue = [Request(k, k % 2, [1, 2, k % 3, k], urgency=float(k + 1)) for k in range(4)]
    lens = {r: 0 for r in queue}
    with core.use("compiled"):
        auction = kind(tie_break="request_id")
    auction.admit(WaitingRound(queue, None, [1.0, 0.5], None, QueueDelta(list(queue), [], [], lens), lens))
    return auction, queue, lens


class _Layered(RadixTreeAuction):
    """The layers decide its rounds (it overrides `_decide`)."""

    def _decide(self, *args, **kwargs):
        return super()._decide(*args, **kwargs)


def _chain(error: BaseException | None) -> list[tuple[type, str]]:
    chain = []
    while error is not None:
        chain.append((type(error), str(error)))
        error = error.__context__
    return chain


@pytest.mark.parametrize("bad", ["empty", "bid"])
def test_the_one_call_round_names_a_bad_input_as_the_layers_do(bad):
    """A joining request the compiled call refuses is named by `validate_requests`, its error
    raised while the round's is handled (its context), as the layers raise it; the rounds after are
    the layers' rounds, the one after the next decided in one call again."""
    chains, kinds = [], []
    for kind in (RadixTreeAuction, _Layered):
        auction, queue, lens = _first_round(kind)
        culprit = Request(99, 0, [1, 2], urgency=1.0)
        if bad == "empty":
            culprit.tokens = np.zeros(0, dtype=np.int64)
        else:
            culprit.bid = "high"
        lens = {**lens, culprit: 0}
        round_ = WaitingRound(queue + [culprit], None, [1.0, 0.5], None, QueueDelta([culprit], [], [], lens), lens)
        with pytest.raises(ValueError, match="request 99") as raised:
            auction.admit(round_)
        chains.append(_chain(raised.value))
        for alpha in ([0.5, 1.0], [0.25, 1.0]):  # the queue compared, then followed again
            order, decision = auction.admit(WaitingRound(queue, None, alpha, None, QueueDelta([], [], [], lens), lens))
            kinds.append(([r.id for r in order], type(decision)))
    assert chains[0] == chains[1] and len(chains[0]) >= 2
    assert [k[0] for k in kinds[:2]] == [k[0] for k in kinds[2:]] and kinds[1][1] is CompiledRound
