"""Longest prefix match first with anti-starvation aging (the rule proposed to SGLang in
sgl-project/sglang pull request #31723, for its feature request #31954).

SGLang's `lpm` sorts by cached prefix alone, so a request with nothing cached is passed over by
every cache-hot arrival; the issue measured such requests (about 5%) forming a 20-60 s tail of
time to first token. The proposed rule keeps LPM's order but ages what waits: each admission round
in which a request waits adds `tokens_per_pass` to its effective match, and the sort key is
-(cached prefix tokens + tokens_per_pass x rounds waited), stable (ties in the queue's order). A
request is then passed over at most about (longest match / tokens_per_pass) rounds. No payments.
"""

from __future__ import annotations

from .._checks import is_int
from ..policy import AdmissionPolicy, WaitingRound
from ..request import Request

TOKENS_PER_PASS = 256
"""The default aging (SGLang's PR defaults to 0, plain `lpm`, which is "lpm" here)."""


class LPMAging(AdmissionPolicy):
    """LPM with aging; see the module docstring.

    Args:
        tokens_per_pass: tokens of effective match a request gains per round it waits (int >= 1).
    """

    name = "lpm_aging"
    in_batch = True

    def __init__(self, tokens_per_pass: int = TOKENS_PER_PASS) -> None:
        if not (is_int(tokens_per_pass) and tokens_per_pass >= 1):
            raise ValueError(f"tokens_per_pass must be an int >= 1, got {tokens_per_pass!r}")
        self.tokens_per_pass = int(tokens_per_pass)
        self._passes: dict[int, int] = {}  # request id -> rounds it has waited

    def order_round(self, round: WaitingRound) -> list[Request]:
        queue = round.queue
        held = self._passes
        self._passes = passes = {r.id: held.get(r.id, -1) + 1 for r in queue}  # 0 in its first round
        step = self.tokens_per_pass
        negated = [-(n + step * passes[r.id]) for r, n in zip(queue, round.prefix_lens)]
        return [queue[i] for i in sorted(range(len(queue)), key=negated.__getitem__)]
