"""The operand copies of padded GEMM runs (runtime/operand_copy.py): one or two (batch x rows x cols) matrices
whose cols run along a unit stride, each copied into the top-left corner of a wider buffer, in one launch.
torch's strided copy of such views ran at 130-700 GB/s on the H200 (one index division per element); here a
program copies a tile of ROWS rows, and one launch serves both operands of a GEMM (a launch boundary costs a
small padded GEMM about as much as a copy).

Not a family kernel: it has one form, is compiled by Triton's JIT on first use per word sizes and alignments,
and is then launched directly."""
from __future__ import annotations

import triton
import triton.language as tl

ROWS = 16             # rows per program
ROW_BYTES = 512       # bytes of a row per program


@triton.jit
def _copy_tile(t, src, dst, tiles_c, tiles_rc, rows, cols, src_ld, dst_ld, src_batch, dst_batch,
               BR: tl.constexpr, BC: tl.constexpr):
    """Tile t of one matrix: batch t // tiles_rc, then row block and column block."""
    z = (t // tiles_rc).to(tl.int64)
    rest = t % tiles_rc
    r = (rest // tiles_c) * BR + tl.arange(0, BR)
    c = (rest % tiles_c) * BC + tl.arange(0, BC)
    mask = (r[:, None] < rows) & (c[None, :] < cols)
    r64 = r.to(tl.int64)
    values = tl.load(src + z * src_batch + r64[:, None] * src_ld + c[None, :], mask=mask)
    tl.store(dst + z * dst_batch + r64[:, None] * dst_ld + c[None, :], values, mask=mask)


# The leading dimensions are not specialized: were the destination's known to be 16-byte aligned (it always
# is) and the source's not, Triton would give loads and stores different layouts, and a store layout of
# 16-byte runs per thread masked element by element scatters each warp's store over sixteen sectors.
@triton.jit(do_not_specialize=["src_ld0", "dst_ld0", "src_ld1", "dst_ld1"])
def pad_copy_kernel(src0, dst0, src1, dst1, tiles0, tiles_c0, tiles_rc0, rows0, cols0, src_ld0, dst_ld0,
                    src_batch0, dst_batch0, tiles_c1, tiles_rc1, rows1, cols1, src_ld1, dst_ld1, src_batch1,
                    dst_batch1, BR: tl.constexpr, BC0: tl.constexpr, BC1: tl.constexpr):
    """Programs [0, tiles0) copy the first matrix, the rest the second (a grid of tiles0 copies one)."""
    t = tl.program_id(0)
    if t < tiles0:
        _copy_tile(t, src0, dst0, tiles_c0, tiles_rc0, rows0, cols0, src_ld0, dst_ld0, src_batch0, dst_batch0,
                   BR, BC0)
    else:
        _copy_tile(t - tiles0, src1, dst1, tiles_c1, tiles_rc1, rows1, cols1, src_ld1, dst_ld1, src_batch1,
                   dst_batch1, BR, BC1)


def geometry(batch: int, rows: int, cols: int, width: int, src_strides: tuple, dst_strides: tuple
             ) -> tuple[int, tuple[int, ...], int]:
    """(programs, the matrix's integer arguments, its column block) for a copy of `width`-byte words;
    strides are (batch, row) of the (batch x rows x cols) views."""
    block = ROW_BYTES // width
    tiles_c = triton.cdiv(cols, block)
    tiles_rc = triton.cdiv(rows, ROWS) * tiles_c
    return batch * tiles_rc, (tiles_c, tiles_rc, rows, cols, src_strides[1], dst_strides[1], src_strides[0],
                              dst_strides[0]), block
