"""The fast divisor of kernels/conv_common: multiply-high and shift equal floor division on every int32 index."""
from __future__ import annotations

import random

import pytest

from tiledispatch.kernels.conv_common import fast_divisor, fast_divisor_scalars

# divisors: 1 (the special case), powers of two, their neighbours, conv output extents (7, 14, 28, 56, 112),
# primes, and the largest allowed
DIVISORS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 14, 15, 16, 17, 28, 31, 33, 49, 56, 112, 127, 129, 196, 3136, 12544,
            65535, 65537, 2**20 + 1, 2**30 - 1, 2**30, 2**30 + 1, 2**31 - 1]
LIMIT = 2**31


def _quotient(n: int, d: int) -> int:
    m, shift = fast_divisor(d)
    if m == 0:
        return n
    assert 0 < m < 2**32 and shift >= 0
    return ((n * m) >> 32) >> shift


@pytest.mark.parametrize("d", DIVISORS)
def test_quotient_equals_floor_division(d):
    rng = random.Random(d)
    edges = {0, 1, d - 1, d, d + 1, LIMIT - 1, LIMIT - 2, (LIMIT - 1) // d * d, (LIMIT - 1) // d * d - 1}
    samples = edges | {rng.randrange(LIMIT) for _ in range(2000)} | {k * d + r for k in (1, 7, 1000)
                                                                     for r in (0, d - 1) if k * d + r < LIMIT}
    wrong = [n for n in samples if 0 <= n < LIMIT and _quotient(n, d) != n // d]
    assert not wrong, (d, wrong[:5])


@pytest.mark.parametrize("d", [0, -3, 2**31])
def test_divisor_out_of_range_raises(d):
    with pytest.raises(ValueError, match="fast_divisor"):
        fast_divisor(d)


def test_scalars_name_each_divisor():
    assert fast_divisor_scalars({"w": 1, "h": 7}) == (("dm_w", 0), ("ds_w", 0), ("dm_h", fast_divisor(7)[0]),
                                                     ("ds_h", 2))
