"""GPU lane for padded GEMM runs (runtime/padding.py): the operand copies through kernels/pad_copy.py (word sizes,
layouts, batches, a source whose base is not word aligned, the second call's direct launch) and fp8 GEMMs whose K
and N need padding, against a float reference."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.runtime.operand_copy import Corner, CornerCopies
from tiledispatch.runtime.padding import zero_padded
from tiledispatch.testing import check_against_reference

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _fp8(shape, letter, offset=0):
    """Random fp8 bytes of (..., rows, cols) in layout `letter`, starting `offset` bytes into their storage."""
    rows, cols = shape[-2:]
    lead = (*shape[:-2], rows, cols) if letter == "r" else (*shape[:-2], cols, rows)
    count = torch.Size(lead).numel()
    raw = torch.randint(-100, 100, (count + offset,), dtype=torch.int8, device="cuda")
    t = raw[offset:].view(torch.float8_e4m3fn).view(lead)
    return t if letter == "r" else t.transpose(-1, -2)


# (shape, padded rows x cols, letter, second call's source offset, word widths of the two calls): K=700 rows
# of int32, K=1023 bytes, a column-major B (K along the unit stride), a batch, and a second source one byte off
# the word alignment (copied in bytes)
CASES = [((300, 700), (300, 704), "r", 0, (4, 4)), ((300, 1023), (300, 1024), "r", 0, (1, 1)),
         ((700, 500), (704, 512), "c", 0, (4, 4)), ((3, 40, 700), (40, 704), "r", 0, (4, 4)),
         ((300, 700), (300, 704), "r", 1, (4, 1))]


@pytest.mark.parametrize("shape, padded, letter, offset, widths", CASES)
def test_operand_copies_match_the_bytes(shape, padded, letter, offset, widths):
    """One operand per launch (the second half of the launch idle), then the same corner paired with a second
    one (both halves)."""
    first = _fp8(shape, letter)
    corner = Corner.of(first, zero_padded(first, *padded, letter))
    other = Corner.of(first, zero_padded(first, *padded, letter))
    copies = CornerCopies()
    rows, cols = shape[-2:]
    for call in range(2):         # the first call compiles through Triton's JIT, the second launches directly
        t = first if call == 0 else _fp8(shape, letter, offset)
        copies([(corner, t)])
        _assert_copied(corner.buf, t, rows, cols)
        u = _fp8(shape, letter)
        copies([(corner, t), (other, u)])
        _assert_copied(corner.buf, t, rows, cols)
        _assert_copied(other.buf, u, rows, cols)
    assert corner.width == widths[0]
    assert len(copies.launches) == 2 * len(set(widths))    # per (pair, word sizes of its sources)


def _assert_copied(buf, t, rows, cols):
    assert torch.equal(buf[..., :rows, :cols].view(torch.int8), t.view(torch.int8))
    assert not buf[..., rows:, :].view(torch.int8).any() and not buf[..., cols:].view(torch.int8).any()


@pytest.mark.parametrize("m, n, k", [(300, 500, 700), (409, 410, 1023), (77, 123, 55)])
def test_padded_fp8_gemm_is_exact(m, n, k):
    """td.gemm on fp8 sizes whose K (and N) break 16-byte rows: the result (a view when N grew) against the
    float reference of the unpadded operands."""
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).t()     # K-major B
    scale_a = torch.tensor([0.5], device="cuda")
    scale_b = torch.tensor([0.25], device="cuda")
    for _ in range(2):
        out = td.gemm(a, b, scale_a=scale_a, scale_b=scale_b)
        assert out.shape == (m, n)
        check_against_reference(out, GemmArgs(a, b, scale_a=scale_a, scale_b=scale_b), "fp8e4m3")


def test_padded_fp8_gemm_replays_in_a_cuda_graph():
    """A padded td.gemm (K=700 and N=500 grow; the operand copies run the copy kernel) warmed up once, then
    captured: the replay copies the refilled operands into the kept buffers and writes the captured result."""
    a = torch.randn(300, 700, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(500, 700, device="cuda").to(torch.float8_e4m3fn).t()
    scale = torch.tensor([0.5], device="cuda")
    td.gemm(a, b, scale_a=scale, scale_b=scale)          # compiles and binds outside the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = td.gemm(a, b, scale_a=scale, scale_b=scale)
    torch.cuda.current_stream().wait_stream(stream)
    a.copy_(torch.randn(300, 700, device="cuda").to(torch.float8_e4m3fn))
    b.copy_(torch.randn(500, 700, device="cuda").to(torch.float8_e4m3fn).t())
    graph.replay()
    torch.cuda.synchronize()
    check_against_reference(out, GemmArgs(a, b, scale_a=scale, scale_b=scale), "fp8e4m3")
