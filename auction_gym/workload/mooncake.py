"""Replay of the Mooncake FAST'25 traces (kvcache-ai/Mooncake, FAST25-release/traces/, Apache-2.0).

A trace line gives arrival, input and output lengths and prefix-block ids, but no text, tenant or
bid: this loader derives tokens from the block ids (equal blocks, equal tokens), a bidder per
conversation, and a class with its urgency and value per line (keyed by the line index, so a
slice draws the same), read lazily and checked line by line (ValueError naming file and line).
What a line gives whatever the seed (its JSON, checks and tokens) is derived once per process
(`_line`), and what a seed adds (bidder, class) once per seed (`_derive`), each kept for the last
`PARSED_LINES` lines: episodes of new seeds, as training plays them, read the JSON and expand the
tokens once, and a sweep that replays the same lines with the same seed draws the classes once too.
The derivations in full: docs/environment.md, "Workloads".
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import math
import os
from pathlib import Path
from typing import Iterator, Mapping

import numpy as np

from .._checks import check_int
from ..request import Request, as_tokens, read_only
from .classes import CLASSES, DEFAULT_CLASS_MIX, checked_class_mix, checked_max_new_tokens

_MASK64 = (1 << 64) - 1

SAMPLE_TRACE = Path(__file__).parent / "data" / "mooncake" / "conversation_slice.jsonl"
"""The first 1,000 lines of the conversation trace (Apache-2.0, its license beside it), shipped as
package data so that an installed package replays it as a source checkout does."""

MOONCAKE_MAX_NEW_TOKENS = 2000
"""The conversation trace's clients' cap on output (tokens), `iter_mooncake`'s default
`max_new_tokens`. Evidence, the trace's 12,031 output_lengths: they range over 1..2000, and 30 of them
(0.25%) are exactly 2000 while no other length above 1,000 occurs more than 5 times: outputs cut
off at a cap of 2000 (which is also the 99.9th percentile)."""


def _splitmix64(x: int) -> int:
    """The splitmix64 finalizer on a Python int (a well-mixed 64-bit hash of x)."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _splitmix64_np(x: np.ndarray) -> np.ndarray:
    """splitmix64 on a uint64 array (numpy wraps on overflow, which is the arithmetic we want)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def expand_blocks(
    hash_ids: list[int] | np.ndarray,
    input_length: int,
    block_size: int = 512,
    vocab_size: int | None = None,
) -> np.ndarray:
    """Token ids of a prompt given by block ids (`block_size` tokens per id); length input_length."""
    try:
        blocks = np.asarray(hash_ids, dtype=np.int64)
    except OverflowError:
        raise ValueError("hash_ids must be below 2**63") from None
    n = len(blocks)
    if not (n - 1) * block_size < input_length <= n * block_size:
        raise ValueError(
            f"input_length {input_length} does not fit {n} blocks of {block_size} tokens "
            f"(needs {(n - 1) * block_size} < input_length <= {n * block_size})"
        )
    if vocab_size is None and n:
        _check_block_tokens(blocks, input_length, block_size)
    offsets = np.arange(block_size, dtype=np.int64)
    if vocab_size is None:
        tokens = (blocks[:, None] * block_size + offsets).ravel()
    else:
        mixed = _splitmix64_np(blocks.astype(np.uint64))
        tokens = (_splitmix64_np(mixed[:, None] + offsets.astype(np.uint64)).ravel()
                  % np.uint64(vocab_size)).astype(np.int64)
    return tokens[:input_length]


def _check_block_tokens(blocks: np.ndarray, input_length: int, block_size: int) -> None:
    """ValueError if a token id `expand_blocks` keeps (block id x block_size + offset) passes int64:
    int64 arithmetic would wrap it, to a negative id or, past 2**64, onto another block's ids."""
    last = int(blocks[-1]) * block_size + input_length - (len(blocks) - 1) * block_size  # one past its last kept
    full = (int(blocks[:-1].max()) + 1) * block_size if len(blocks) > 1 else 0
    if max(last, full) > 2**63:
        raise ValueError(f"tokens must be non-negative token ids within int64: block ids up to "
                         f"{int(blocks.max())} of {block_size} tokens pass 2**63 - 1")


def _field_int(obj: dict, name: str, minimum: int) -> int:
    v = obj[name]
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{name} must be an integer, got {v!r}")
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


PARSED_LINES = 1024
"""Lines whose derivations `_line` and `_derive` each keep: a quick `reproduce` replays 300 lines run
after run, the full one 1,000. The tokens take most of the memory, about 110 KB a line for the
slice's prompts (13,700 tokens on average); a line's tokens are one array, shared by both caches
while both keep that line."""


def _parse(line: str, index: int, *, time_scale: float, **parse_args) -> Request:
    """The request of one trace line (a new `Request` each call: a run may change its own), its
    arrival on the `time_scale` of the run (a sweep over load replays the lines on several).

    Its fields come checked from `_derive` (read-only int64 tokens of non-negative ids, an output
    length within the cap, finite urgency and value >= 0), so it is built without `Request`'s
    checks, which would read every token of a prompt again; only the arrival, scaled here, is
    checked (a non-finite one goes through the constructor, which names it)."""
    ts, tokens, output_length, bidder, kind, w, v = _derive(line, index, **parse_args)
    arrival = float(ts / 1000.0 * time_scale)  # a numpy time_scale gives a numpy float
    cap = parse_args["max_new_tokens"]
    if not math.isfinite(arrival):
        return Request(id=index, bidder=bidder, tokens=tokens, bid=w, output_len=output_length, arrival=arrival,
                       value=v, urgency=w, kind=kind, max_new_tokens=cap)
    return Request._unchecked_many(
        first_id=index, bidder=(bidder,), tokens=(tokens,), bid=(w,), output_len=(output_length,), arrival=(arrival,),
        value=(v,), urgency=(w,), output_tokens=(None,), kind=(kind,),
        max_new_tokens=(output_length if cap is None else cap,))[0]


@functools.lru_cache(maxsize=PARSED_LINES, typed=True)  # 8 and 8.0 are equal keys, not equal reads
def _derive(
    line: str, index: int, *, num_bidders: int, seed_key: int, seed: int, block_size: int,
    vocab_size: int | None, class_names: tuple[str, ...], class_cdf: tuple[float, ...], max_new_tokens: int | None,
) -> tuple:
    """What a line gives its request: (timestamp, read-only tokens, output length, bidder, class,
    urgency, value); ValueError for a malformed line (a failure is not kept). What does not depend
    on the seed (the JSON, its checks, the tokens) is `_line`'s, kept across seeds."""
    ts, tokens, output_length, conversation = _line(line, block_size, vocab_size, max_new_tokens)
    bidder = _splitmix64(seed_key ^ conversation) % num_bidders
    rng = np.random.default_rng([seed, index])
    # bisect_right is numpy's searchsorted(side="right") on the sorted cdf, without making it an array;
    # min(): guards against the cdf's last entry rounding to just below 1.
    cls = CLASSES[class_names[min(bisect.bisect_right(class_cdf, rng.random()), len(class_names) - 1)]]
    w, v, _ = cls.sample(rng, 1)
    return ts, tokens, output_length, bidder, cls.name, float(w[0]), float(v[0])


@functools.lru_cache(maxsize=PARSED_LINES, typed=True)
def _line(line: str, block_size: int, vocab_size: int | None, max_new_tokens: int | None) -> tuple:
    """What a line gives whatever the seed: (timestamp, tokens, output length, conversation), the
    tokens a checked read-only array (`as_tokens` refuses a negative id, which a block id times
    block_size past int64 wraps to); ValueError for a malformed line (a failure is not kept)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        # Reworded: the decoder's own "line 1 column 5" would read as the file's line number.
        raise ValueError(f"invalid JSON: {e.msg} at column {e.colno}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in ("timestamp", "input_length", "output_length", "hash_ids") if k not in obj]
    if missing:
        raise ValueError(f"missing field(s) {missing}")
    ts = obj["timestamp"]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not ts >= 0 or ts == float("inf"):
        raise ValueError(f"timestamp must be a finite number >= 0, got {ts!r}")
    input_length = _field_int(obj, "input_length", 1)
    output_length = _field_int(obj, "output_length", 1)
    if max_new_tokens is not None and output_length > max_new_tokens:
        raise ValueError(f"output_length {output_length} exceeds max_new_tokens = {max_new_tokens}, the "
                         "clients' cap on output: pass a larger max_new_tokens, or None for each request's "
                         "own output_length")
    hash_ids = obj["hash_ids"]
    if (not isinstance(hash_ids, list) or not hash_ids
            or any(isinstance(h, bool) or not isinstance(h, int) or h < 0 for h in hash_ids)):
        raise ValueError("hash_ids must be a non-empty list of non-negative integers")
    tokens = as_tokens(read_only(expand_blocks(hash_ids, input_length, block_size, vocab_size)))
    conversation = hash_ids[1] if len(hash_ids) > 1 else hash_ids[0]
    return ts, tokens, output_length, conversation


def forget_parsed_lines() -> None:
    """Drop the lines `_line` and `_derive` keep (a test that reads the same lines twice, apart)."""
    _line.cache_clear()
    _derive.cache_clear()


def iter_mooncake(
    path: str | os.PathLike,
    *,
    num_bidders: int = 8,
    seed: int = 0,
    time_scale: float = 1.0,
    start: int = 0,
    limit: int | None = None,
    block_size: int = 512,
    vocab_size: int | None = None,
    class_mix: Mapping[str, float] | None = None,
    max_new_tokens: int | None = MOONCAKE_MAX_NEW_TOKENS,
) -> Iterator[Request]:
    """Yield the requests of lines [start, start + limit) of a Mooncake trace, lazily, in file order.

    `start` and `limit` count lines (0-based; blank lines count but yield nothing); limit None reads to
    the end. `max_new_tokens` (tokens, an int >= 1, or None) is every request's cap on output; None =
    its own output_length; a line whose output_length exceeds it raises ValueError. How tokens,
    arrivals, bidders, classes and caps are derived: docs/environment.md, "Workloads".
    """
    # As Python ints: a float count would make a float bidder, a numpy one overflow the hashes' ints.
    num_bidders, block_size = check_int("num_bidders", num_bidders, 1), check_int("block_size", block_size, 1)
    start, seed = check_int("start", start, 0), check_int("seed", seed, 0)
    limit = None if limit is None else check_int("limit", limit, 0)
    if not 0 < time_scale < math.inf:
        raise ValueError(f"time_scale must be finite and > 0, got {time_scale}")
    if vocab_size is not None:  # token ids are int64
        vocab_size = check_int("vocab_size", vocab_size, 1, 2**63)
    cap = checked_max_new_tokens(max_new_tokens, 1, "a request emits a token", "each request's own output_length")
    class_names, class_p = checked_class_mix(class_mix if class_mix is not None else DEFAULT_CLASS_MIX)
    # Arguments are checked above, at the call; the file is opened on the first next().
    return _iter_lines(
        os.fspath(path), start, None if limit is None else start + limit,
        num_bidders=num_bidders, seed_key=_splitmix64(seed), seed=seed, time_scale=time_scale,
        block_size=block_size, vocab_size=vocab_size, class_names=tuple(class_names),
        class_cdf=tuple(np.cumsum(class_p).tolist()), max_new_tokens=cap,
    )


def _iter_lines(path: str, start: int, stop: int | None, **parse_args) -> Iterator[Request]:
    # Binary, decoded line by line: a text-mode file decodes whole chunks, so a bad byte would raise
    # before the lines ahead of it are read, and without its line number.
    previous = None
    with open(path, "rb") as f:
        for index, raw in enumerate(itertools.islice(f, start, stop), start=start):
            try:
                line = raw.decode("utf-8")
                if not line.strip():
                    continue
                request = _parse(line, index, **parse_args)
                if previous is not None and request.arrival < previous:
                    raise ValueError(
                        f"timestamp out of order (arrival {request.arrival:g} s, before the previous "
                        f"request's {previous:g} s): the trace must be sorted by timestamp, the engine "
                        "replays it in arrival order"
                    )
            except UnicodeDecodeError as e:
                raise ValueError(f"{path}: line {index + 1}: not UTF-8 (byte {e.start + 1}: {e.reason})") from None
            except ValueError as e:
                raise ValueError(f"{path}: line {index + 1}: {e}") from e
            previous = request.arrival
            yield request


def load_mooncake(path: str | os.PathLike, **kwargs) -> list[Request]:
    """`iter_mooncake(path, **kwargs)` as a list. Mind memory: 8 bytes per prompt token (the whole
    conversation trace is ~145M tokens, ~1.2 GB); replay long traces with the iterator."""
    return list(iter_mooncake(path, **kwargs))
