"""Old home of `PrefixMatcher`, which moved next to the cache it reads (`auction_gym.prefix_matcher`),
with `WaitingPrefixes`, which is built on it: its name here is an alias that warns once."""

from .._deprecation import deprecated_aliases


def _prefix_matcher() -> type:
    from ..prefix_matcher import PrefixMatcher

    return PrefixMatcher


__getattr__ = deprecated_aliases(__name__, {"PrefixMatcher": ("auction_gym.prefix_matcher.PrefixMatcher", _prefix_matcher)})
