"""In-batch prefix sharing: SGLang's rule against computing one uncached prefix twice in a batch.

The cache learns a prompt only when its prefill ends, so two requests of one prefill batch that
share an uncached prefix would each compute it. SGLang (`schedule_policy.py`,
`IN_BATCH_PREFIX_CACHING_CHECK_THRESHOLD` and `IN_BATCH_PREFIX_CACHING_DEPRIORITIZE_THRESHOLD`, 32
each) checks every waiting request whose cached match is at most the check threshold against the
prompts ahead of it, and one that shares at least the deprioritize threshold with them waits:
the next batch finds the shared prefix cached.

Here (`EngineConfig.in_batch_prefix_caching`, on by default) a candidate whose cached match is at
most `in_batch_check_threshold` tokens, and that shares at least `in_batch_deprioritize_threshold`
tokens beyond that match with a request already taken into the batch, is held for the next batch;
admission goes on with the next request in the scheduler's order. The first request of a batch
is never held, so every batch admits something and a held request hits the cache next time (the
prompt it shares stays locked while its owner runs). Two differences from SGLang, both so that
every policy (the auctions included) keeps its own order: SGLang applies the rule only in its
cache-aware policies and sorts deprioritized requests behind the others (a batch with room left
still takes them), where here they always wait; and SGLang compares the whole shared prefix with
the threshold, here the part beyond the cached match (they agree when nothing is cached).
"""

from __future__ import annotations

import numpy as np

from ..radix_cache import RadixCache


class BatchPrefixes:
    """The prompts taken into one prefill batch, as far as a later candidate needs to see them.

    The tree of the batch's prompts is built only when a candidate is first checked (most batches
    never need it: a request whose prefix is cached, or the first of its batch, is not checked).

    Args:
        check: candidates with at most this many cached tokens are checked.
        deprioritize: a checked candidate sharing at least this many tokens beyond its cached
            match with the batch is held.
        page_size: the engine's page size; only whole shared pages count, as only they are cached.
    """

    def __init__(self, check: int, deprioritize: int, page_size: int) -> None:
        self.check, self.deprioritize, self.page_size = check, deprioritize, page_size
        self._taken: list[np.ndarray] = []
        self._tree: RadixCache | None = None

    def add(self, tokens: np.ndarray) -> None:
        """Record a prompt (the part the engine matches: all but its last token) taken into the batch."""
        self._taken.append(tokens)
        if self._tree is not None:
            self._tree.insert(tokens)

    def holds(self, tokens: np.ndarray, cached: int) -> bool:
        """Whether a candidate with `cached` tokens matched in the cache waits for the next batch."""
        if not self._taken or cached > self.check:
            return False
        if self._tree is None:
            self._tree = RadixCache(page_size=self.page_size)
            for taken in self._taken:
                self._tree.insert(taken)
        return self._tree.prefix_len(tokens) - cached >= self.deprioritize
