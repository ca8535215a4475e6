"""experiments.studies.hit_rate_gaps: finding a session's previous turn, and counting turns admitted early."""

from __future__ import annotations

import numpy as np

from auction_gym import Request
from experiments.studies.hit_rate_gaps import predecessors, session_gaps

PROMPT, REPLY = np.arange(100), np.arange(1000, 1050)


def turns() -> list[Request]:
    """Turn 0 (100-token prompt, a 50-token reply known in advance); turn 1 quotes it and arrives
    while turn 0 decodes; request 2 shares the prompt but not the reply."""
    first = Request(0, 0, PROMPT, 1.0, output_len=50, output_tokens=REPLY, arrival=0.0)
    follow = Request(1, 0, np.concatenate([PROMPT, REPLY, [7, 7]]), 1.0, output_len=3, arrival=0.001)
    other = Request(2, 0, np.concatenate([PROMPT, [5, 5, 5]]), 1.0, output_len=3, arrival=0.001)
    return [first, follow, other]


def test_a_turn_is_found_by_its_quoted_reply():
    assert predecessors(turns()) == {1: (0, 150)}


def test_a_turn_admitted_before_its_predecessor_finished_misses_the_reply():
    """Turn 1 goes in while turn 0 still decodes: only turn 0's prompt (100 tokens, cached when its
    prefill ended) is there, so of the 150 - 1 it could reuse it misses 49."""
    rows = session_gaps(turns(), kv_capacity=10_000, policies=("fcfs", "lpm"))
    for name in ("fcfs", "lpm"):
        assert rows[name]["turns"] == 1 and rows[name]["early_turns"] == 1, name
        assert rows[name]["missed"] == 49, name
    assert rows["lpm"]["gap"] == rows["lpm"]["gap_on_turns"] == 0
