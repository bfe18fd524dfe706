"""The operand copy of padded GEMM runs (runtime/padding.py): a (batch x rows x cols) matrix whose cols run along
a unit stride, copied into the top-left corner of a wider buffer. torch's strided copy of such views ran at
130-700 GB/s on the H200 (one index division per element); this kernel copies a tile of rows per program.

Not a family kernel: it has one form, is compiled by Triton's JIT on first use per element width and
alignment, and is then launched directly (PadCopy)."""
from __future__ import annotations

import triton
import triton.language as tl

ROWS = 16             # rows per program
ROW_BYTES = 512       # bytes of a row per program


# The leading dimensions are not specialized: were the destination's known to be 16-byte aligned (it always is)
# and the source's not, Triton would give loads and stores different layouts, and a store layout of 16-byte
# runs per thread masked element by element scatters each warp's store over sixteen sectors.
@triton.jit(do_not_specialize=["src_ld", "dst_ld"])
def pad_copy_kernel(src, dst, rows, cols, src_ld, dst_ld, src_batch, dst_batch, BR: tl.constexpr,
                    BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)
    c = tl.program_id(1) * BC + tl.arange(0, BC)
    z = tl.program_id(2).to(tl.int64)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    r64 = r.to(tl.int64)
    values = tl.load(src + z * src_batch + r64[:, None] * src_ld + c[None, :], mask=mask)
    tl.store(dst + z * dst_batch + r64[:, None] * dst_ld + c[None, :], values, mask=mask)


def grid(rows: int, cols: int, batch: int, width: int) -> tuple[int, int, int]:
    return triton.cdiv(rows, ROWS), triton.cdiv(cols, ROW_BYTES // width), batch
