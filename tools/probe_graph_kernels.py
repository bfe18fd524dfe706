"""Trivial Triton kernels for tools/probe_graph_launch.py: the same work with 2 and with 50 arguments."""
import triton
import triton.language as tl


@triton.jit
def few_args(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


@triton.jit
def many_args(x_ptr, n,
              a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11,
              a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23,
              a24, a25, a26, a27, a28, a29, a30, a31, a32, a33, a34, a35,
              a36, a37, a38, a39, a40, a41, a42, a43, a44, a45, a46, a47,
              BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    extra = (a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11
             + a12 + a13 + a14 + a15 + a16 + a17 + a18 + a19 + a20 + a21 + a22 + a23
             + a24 + a25 + a26 + a27 + a28 + a29 + a30 + a31 + a32 + a33 + a34 + a35
             + a36 + a37 + a38 + a39 + a40 + a41 + a42 + a43 + a44 + a45 + a46 + a47) * 0
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0 + extra, mask=offs < n)
