"""Fixtures several test modules share."""

from __future__ import annotations

import pytest

from auction_gym.envs import RadixAuctionEnv


@pytest.fixture
def played_seeds(monkeypatch) -> list:
    """The seed of every `RadixAuctionEnv.reset` in the test, in order (None for an unseeded one):
    what a learner or a search played, to check it never plays an evaluation seed."""
    played = []
    reset = RadixAuctionEnv.reset

    def recording(self, *, seed=None, options=None):
        played.append(seed)
        return reset(self, seed=seed, options=options)

    monkeypatch.setattr(RadixAuctionEnv, "reset", recording)
    return played
