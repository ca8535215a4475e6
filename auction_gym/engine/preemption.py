"""SGLang's priority preemption: which running requests a waiting request of higher priority sends
back to the waiting queue (docs/design.md section 4; `EngineConfig.priority_preemption`).

SGLang 0.5.23 (`managers/schedule_policy.py`, `PrefillAdder.preempt_to_schedule`; called from
`Scheduler._get_new_batch_prefill_raw`) checks it while admitting in the policy's order, for a
waiting request met when the running batch is full (`max_running_requests`), and only then. The
running requests (not those admitted in the same round, nor a chunked prefill in flight) are
visited lowest priority first and, within a priority, the one that joined the waiting queue last
first (larger priority values are more important, SGLang's default without
`--schedule-low-priority-values-first`). Each whose priority the waiting request's exceeds by more
than the threshold is taken, and its share of the admission room given back (its remaining output
cap, clipped, times the new-token ratio), until the waiting request's uncached prompt plus
min(max_new_tokens, clip) fits what remains; the first that does not exceed it by the threshold
ends the search. If none is taken, or the room is still short, nothing is preempted and admission
stops there. The taken requests are released as a retraction releases them (`release_req`: their
KV outside the cache freed, the lock on their prompt dropped, the cache evicted for the remaining
requests' next steps) and join the waiting queue again at its end; the waiting request is then
checked for memory as any other, and the preempted ones stay queued even when it does not fit.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .state import Running


def preemption_victims(
    running: Sequence[Running], priority: int, threshold: int, deficit: float, gives_back: Callable[[Running], float]
) -> list[Running]:
    """The running requests that a waiting request of `priority` preempts (SGLang's rule, module
    docstring): `deficit` is the room it lacks (tokens; <= 0 when it fits already, and then one
    request is still preempted to free a running slot) and `gives_back(run)` what preempting `run`
    returns to the room. Empty when none has a priority below `priority` by more than `threshold`,
    or when those that have do not cover the deficit."""
    victims = []
    for run in sorted(running, key=lambda run: (run.priority, -run.joined)):
        if priority - run.priority <= threshold:
            break
        victims.append(run)
        deficit -= gives_back(run)
        if deficit <= 0:
            return victims
    return []
