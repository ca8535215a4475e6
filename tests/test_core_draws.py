"""The workloads' compiled `integers` draws (csrc/workload/numpy_draws.hpp, reached through the test-only
`auction_gym._workload._test_integers`) against numpy's `Generator.integers`: the numbers, the bit
generator's state after them and the Python draws that follow, drawn inline on numpy's PCG64 where the
range fits 32 bits and through numpy's random library elsewhere."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from auction_gym.workload import compiled

pytestmark = pytest.mark.skipif(compiled._module() is None, reason="auction_gym._workload is not built here")

# (low, high): ranges of 1, 2, 31999, 2^31, 2^31 + 1 (about half its words rejected), 2^32 - 1, then
# ranges past 32 bits, which numpy draws with 64-bit words.
RANGES = [(0, 1), (0, 2), (0, 31999), (-7, 31992), (0, 2**31), (5, 2**31 + 6), (0, 2**32 - 1),
          (0, 2**32), (-(2**40), 2**40), (0, 2**62)]
COUNTS = [0, 1, 2, 7, 64, 1001]


def _inline(low: int, high: int) -> bool:
    """Whether integers(low, high) on PCG64 is drawn inline: by a build whose compiler has 128-bit
    integers, for a range of 2 to 2^32 - 1."""
    return compiled._module().INLINE_PCG64 and 1 < high - low < 2**32


def _pair(bit_generator, seed: int, lead: int) -> tuple[np.random.Generator, np.random.Generator]:
    """Two generators on the same state, after `lead` Python draws of 32-bit words (an odd lead
    leaves a buffered half on PCG64)."""
    a, b = np.random.Generator(bit_generator(seed)), np.random.Generator(bit_generator(seed))
    a.integers(0, 1000, lead), b.integers(0, 1000, lead)
    return a, b


def _same_state(x, y) -> bool:
    """Two `bit_generator.state` values equal (MT19937's and Philox's hold arrays)."""
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same_state(x[k], y[k]) for k in x)
    return np.array_equal(x, y) if isinstance(x, np.ndarray) else type(x) is type(y) and x == y


def _check_same_draws(a: np.random.Generator, b: np.random.Generator, low: int, high: int, n: int) -> bool:
    """Draws integers(low, high, n) on `a` in C++ and on `b` in numpy, checks the numbers, the states
    and the draws that follow are the same, and says whether the C++ drew inline."""
    drawn, inline = compiled._module()._test_integers(a, low, high, n)
    expected = b.integers(low, high, n, dtype=np.int64)
    assert drawn.dtype == np.int64 and drawn.shape == (n,)
    np.testing.assert_array_equal(drawn, expected)
    assert _same_state(a.bit_generator.state, b.bit_generator.state)
    np.testing.assert_array_equal(a.integers(0, 2**31, 3), b.integers(0, 2**31, 3))
    assert a.random() == b.random()
    return inline


@pytest.mark.parametrize("low, high", RANGES)
def test_draws_are_numpys_on_pcg64(low, high):
    for seed, n, lead in itertools.product(range(6), COUNTS, (0, 1, 4)):
        a, b = _pair(np.random.PCG64, seed, lead)
        assert _check_same_draws(a, b, low, high, n) == _inline(low, high)


def test_consecutive_draws_are_one_draw():
    """The workloads split one integers() draw into consecutive calls, one per prompt."""
    for seed in range(20):
        a, b = _pair(np.random.PCG64, seed, seed % 3)
        sizes = np.random.default_rng(seed).integers(0, 9, 12)
        split = [compiled._module()._test_integers(a, 0, 32000, int(k))[0] for k in sizes]
        np.testing.assert_array_equal(np.concatenate(split), b.integers(0, 32000, int(sizes.sum())))
        assert _same_state(a.bit_generator.state, b.bit_generator.state)


def test_state_set_between_draws_is_read():
    a, b = _pair(np.random.PCG64, 3, 1)
    state = np.random.PCG64(99).state | {"has_uint32": 1, "uinteger": 12345}
    a.bit_generator.state, b.bit_generator.state = state, state
    assert _check_same_draws(a, b, 0, 31999, 5) == _inline(0, 31999)


class _PCG64(np.random.PCG64):
    pass


@pytest.mark.parametrize("bit_generator", [np.random.MT19937, np.random.Philox, np.random.SFC64,
                                           np.random.PCG64DXSM, _PCG64])
def test_other_bit_generators_draw_through_numpy(bit_generator):
    for (low, high), seed, n in itertools.product(RANGES, range(3), (0, 1, 7, 300)):
        a, b = _pair(bit_generator, seed, seed)
        assert not _check_same_draws(a, b, low, high, n)
