"""Bidding policies. All answer SB3's `predict(observation, state=None, episode_start=None,
deterministic=True) -> (action, state)`, so evaluation treats built-in and learned policies alike.

OGD pacing, truthful and fixed-multiplier bidding are implemented in `auction_gym.pacing` (the
environments run them for the bidders that are not learning, and `auction_gym` never imports
`agents`); they are exported here as the agents' public names.
"""

from auction_gym.pacing import FixedMultiplier, OGDPacer, Policy, Truthful, make_policy

__all__ = ["FixedMultiplier", "OGDPacer", "Policy", "Truthful", "make_policy"]
