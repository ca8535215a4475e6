"""The engine's waiting queue (`auction_gym.engine.queue`): order of entry, resume tokens, least need."""

import numpy as np
import pytest

from auction_gym import Request
from auction_gym.engine.queue import WaitingQueue


def _req(i: int, arrival: float, prompt: int = 4) -> Request:
    return Request(id=i, bidder=0, tokens=np.arange(prompt) + 10 * i, bid=1.0, output_len=3, arrival=arrival)


def test_order_needs_and_resume_tokens_follow_arrivals_retractions_and_removals():
    q = WaitingQueue()
    a, b, c = _req(0, 0.0), _req(1, 1.0), _req(2, 2.0)
    q.arrive([b, a], [30, 50])  # one round's arrivals, in any order
    q.arrive([c], [20])
    assert [r.id for r in q.requests] == [0, 1, 2] and q.smallest_need() == 20
    q.remove([a])
    q.put_back(a, np.arange(6), 7)  # retracted after emitting 2 tokens: at the end, as in SGLang
    assert [r.id for r in q.requests] == [1, 2, 0]
    assert len(q.tokens(a)) - a.prompt_len == 2 and q.tokens(b) is b.tokens  # a emitted 2 tokens
    assert q.smallest_need() == 7
    q.remove([a, c])
    assert [r.id for r in q.requests] == [1] and q.smallest_need() == 30 and q.tokens(a) is a.tokens
    q.check()


def test_stale_needs_are_dropped_and_the_least_stays_exact():
    q, rng = WaitingQueue(), np.random.default_rng(0)
    for i in range(400):  # churn: far more entries pushed than ever wait at once
        q.arrive([_req(i, float(i))], [int(rng.integers(1, 1000))])
        if len(q) > 5:
            q.remove([q.requests[int(rng.integers(len(q)))]])
        assert q.smallest_need() == min(q.need.values())
    assert len(q._heap) <= 2 * len(q.need) + 65
    q.check()


def test_a_kept_head_follows_a_retraction_and_leaves_with_its_request():
    """The in-batch check's head is kept while a request waits and dropped when it leaves, so a
    retracted request (back with prompt + output so far) gets the head of its new tokens: a short
    prompt whose output makes it long enough counts."""
    q, a = WaitingQueue(), _req(0, 0.0, prompt=3)
    q.arrive([a], [5])
    assert q.head(a, 5) is None  # 3 prompt tokens: too short
    q.remove([a])
    q.put_back(a, np.arange(6), 7)  # retracted after 3 output tokens: 6 tokens now
    assert q.head(a, 5) == np.arange(5).tobytes()
    q.check()
    q.remove([a])
    assert q._heads == {}
    q.check()


def test_changes_are_the_difference_from_the_queue_when_last_taken():
    """Arrivals, admissions and retractions between two takes, in any mix: what is reported is
    the difference of the two queues, a request admitted and retracted in between being in both."""
    q, rng = WaitingQueue(), np.random.default_rng(1)
    pool = [_req(i, float(i)) for i in range(30)]
    then: set = set()
    for _ in range(300):
        waiting = set(q.requests)
        out = [r for r in pool if r not in waiting]
        move = int(rng.integers(3))
        if move == 0 and out:
            q.arrive([out[int(rng.integers(len(out)))]], [1])
        elif move == 1 and q.requests:
            q.remove([q.requests[int(rng.integers(len(q.requests)))]])
        elif out:
            q.put_back(out[int(rng.integers(len(out)))], np.arange(6), 2)
        q.check()
        if rng.random() < 0.3:
            joined, left = q.take_changes()
            now = set(q.requests)
            assert set(joined) == now - then and len(joined) == len(set(joined)) and left == then - now
            assert joined == [r for r in q.requests if r in set(joined)]  # in the order they joined
            then = now


@pytest.mark.parametrize("corrupt", ["twice", "need", "resume", "head", "joined", "left"])
def test_check_catches_a_broken_invariant(corrupt):
    q = WaitingQueue()
    q.arrive([_req(0, 0.0), _req(1, 1.0)], [5, 6])
    if corrupt == "joined":
        q._joined[_req(5, 2.0)] = None
    elif corrupt == "left":
        q._left.add(q.requests[0])
    elif corrupt == "twice":
        q.requests.append(q.requests[0])
    elif corrupt == "need":
        q.need[7] = 1
    elif corrupt == "resume":
        q._resume[9] = np.arange(3)
    else:
        q.head(q.requests[0], 2)
        q._resume[0] = np.arange(50, 56)  # its tokens changed without the head following
    with pytest.raises(AssertionError):
        q.check()
