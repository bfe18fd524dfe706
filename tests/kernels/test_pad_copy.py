"""kernels/pad_copy.py under Triton's interpreter: one launch copies two batches of row blocks into the corners of
wider rows."""
from __future__ import annotations

import pytest
import torch

from tiledispatch.build.loader import import_source
from tiledispatch.kernels import pad_copy

DTYPES = {1: torch.int8, 2: torch.int16, 4: torch.int32}


def _matrices(batch, rows, cols, width):
    """A source with strided rows (3 words beyond cols) and a larger destination filled with 7."""
    dtype = DTYPES[width]
    src = torch.randint(-100, 100, (batch, rows, cols + 3), dtype=torch.int32).to(dtype)[..., :cols]
    return src, torch.full((batch, rows + 2, cols + 5), 7, dtype=dtype)


@pytest.mark.parametrize("first, second", [
    ((1, 20, 700, 1), (2, 17, 175, 4)),   # 700 bytes: two 512-byte column blocks, the second ragged; int32
    ((3, 5, 33, 2), (1, 40, 9, 1)),       # fewer rows than a block; three row blocks of a narrow matrix
])
def test_copies_two_matrices_into_their_corners(first, second):
    kernel = import_source(pad_copy.__file__, interpret=True).pad_copy_kernel
    (s0, d0), (s1, d1) = _matrices(*first), _matrices(*second)
    tiles0, ints0, block0 = pad_copy.geometry(*s0.shape, first[3], s0.stride(), d0.stride())
    tiles1, ints1, block1 = pad_copy.geometry(*s1.shape, second[3], s1.stride(), d1.stride())
    kernel[(tiles0 + tiles1,)](s0, d0, s1, d1, tiles0, *ints0, *ints1, pad_copy.ROWS, block0, block1)
    for src, dst, (_, rows, cols, _) in ((s0, d0, first), (s1, d1, second)):
        assert torch.equal(dst[:, :rows, :cols], src)
        assert (dst[:, rows:] == 7).all() and (dst[:, :, cols:] == 7).all()
