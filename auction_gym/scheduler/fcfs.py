"""First come, first served: the order requests arrived in, blind to the cache."""

from __future__ import annotations

from typing import Sequence

from ..radix_cache import RadixCache
from ..request import Request
from .base import fcfs_key


class FCFS:
    name = "fcfs"

    def order(self, queue: Sequence[Request], cache: RadixCache) -> list[Request]:
        return sorted(queue, key=fcfs_key)
