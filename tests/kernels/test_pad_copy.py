"""kernels/pad_copy.py under Triton's interpreter: a batch of row blocks copied into the corner of wider rows."""
from __future__ import annotations

import pytest
import torch

from tiledispatch.build.loader import import_source
from tiledispatch.kernels import pad_copy


@pytest.mark.parametrize("batch, rows, cols, width", [
    (1, 20, 700, 1),     # 700 bytes: two 512-byte column blocks, the second ragged
    (2, 17, 175, 4),     # the same rows as int32 words, two matrices, 17 rows: two row blocks
    (3, 5, 33, 2),       # int16 words, fewer rows than a block
])
def test_copies_the_corner_and_leaves_the_margin(batch, rows, cols, width):
    kernel = import_source(pad_copy.__file__, interpret=True).pad_copy_kernel
    dtype = {1: torch.int8, 2: torch.int16, 4: torch.int32}[width]
    src = torch.randint(-100, 100, (batch, rows, cols + 3), dtype=torch.int32).to(dtype)[..., :cols]  # strided rows
    dst = torch.full((batch, rows + 2, cols + 5), 7, dtype=dtype)
    grid = pad_copy.grid(rows, cols, batch, width)
    kernel[grid](src, dst, rows, cols, src.stride(1), dst.stride(1), src.stride(0), dst.stride(0), pad_copy.ROWS,
                 pad_copy.ROW_BYTES // width)
    assert torch.equal(dst[:, :rows, :cols], src)
    assert (dst[:, rows:] == 7).all() and (dst[:, :, cols:] == 7).all()
