"""The order in which both cores' prefix matchers take their new requests (fcfs_key's, stably):
the compiled matcher reads plain Requests' keys itself and leaves any other to Python's sort
(docs/design.md section 8), so mixed queues must come out as the reference's."""

from __future__ import annotations

import numpy as np
import pytest

from auction_gym import core
from auction_gym.prefix_matcher import PrefixMatcher
from auction_gym.radix_cache import RadixCache
from auction_gym.request import Request

pytestmark = pytest.mark.skipif(core.compiled_module() is None, reason="the compiled core (auction_gym._core) is not built")


class _OtherRequest(Request):
    """A Request of another class: its keys are sorted by Python on either core."""

    __slots__ = ()


def _request(rng: np.random.Generator, rid: int) -> Request:
    """A request with a tied, early, late or integer arrival, now and then of another class."""
    kind = rng.random()
    arrival = float(rng.integers(0, 3)) if kind < 0.5 else float(rng.random() * 3)
    if kind > 0.94:
        arrival = int(rng.integers(0, 3))
    cls = _OtherRequest if rng.random() < 0.05 else Request
    return cls(rid, 0, [1, 2, int(rng.integers(0, 3)), 5], 1.0, arrival=arrival)


@pytest.mark.parametrize("given", [True, False], ids=["changes", "diffed"])
@pytest.mark.parametrize("seed", range(8))
def test_both_cores_match_new_requests_in_the_same_order(seed, given):
    rng = np.random.default_rng([seed, 23])
    sides = {}
    for which in ("python", "compiled"):
        with core.use(which):
            cache = RadixCache()
            cache.insert([1, 2, 0, 5])
            sides[which] = (cache, PrefixMatcher(split=True))
    waiting: list[Request] = []
    next_id, seen = 0, 0
    for _ in range(60):
        joined = [_request(rng, next_id + i) for i in range(int(rng.integers(0, 8)))]
        next_id += len(joined) or 1
        rng.shuffle(joined)
        kept = [r for r in waiting if rng.random() < 0.7]
        left = set(waiting) - set(kept)
        waiting = kept + joined
        results = []
        for cache, matcher in sides.values():
            match = matcher.update(list(waiting), cache, (list(joined), set(left)) if given else None)
            results.append([list(match), matcher.added, matcher.joined, matcher.splits.keys(), list(matcher.length_of)])
        assert results[0] == results[1]
        seen += len(results[0][2])
    assert seen > 100
