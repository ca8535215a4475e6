"""Old home of `WaitingPrefixes`, which moved next to the cache it stamps
(`auction_gym.waiting_prefixes`): its names here are aliases that warn once."""

from .._deprecation import deprecated_aliases


def _waiting_prefixes() -> type:
    from ..waiting_prefixes import WaitingPrefixes

    return WaitingPrefixes


def _queue_delta() -> type:
    from ..policy import QueueDelta

    return QueueDelta


__getattr__ = deprecated_aliases(__name__, {
    "WaitingPrefixes": ("auction_gym.waiting_prefixes.WaitingPrefixes", _waiting_prefixes),
    "QueueDelta": ("auction_gym.policy.QueueDelta", _queue_delta),
})
