"""GPU lane: launches are capturable in CUDA graphs (pytest -m gpu).

Kernel.run, Registry.run and td.gemm are captured on static tensors; the inputs are then overwritten in place and
the graph replayed; the output must match torch in fp32 for the new values. Covers split-K and stream-K
(workspaces allocated during capture come from the graph's pool; a split tma_persistent's counters are zeroed
by a memset captured with it), the persistent TMA families (device-side
tensor descriptors: global scratch from launcher.SCRATCH, reused during capture), a fused epilogue reading C,
bias and D, and several captures sharing one stream.
"""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.runtime import launcher

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

BF16 = torch.bfloat16
EPILOGUE = td.Epilogue("gelu", "col", 1, True)
CONFIGS = {
    "tiled": td.GemmConfig("tiled", "rcr", "bf16", block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=4),
    "tiled_epilogue": td.GemmConfig("tiled", "rcr", "bf16", block_m=64, block_n=64, block_k=64, num_warps=4,
                                    num_stages=4).with_epilogue(EPILOGUE),
    "splitk": td.GemmConfig("splitk", "rcr", "bf16", block_m=64, block_n=64, block_k=128, num_warps=4,
                            num_stages=3, split_k=4),
    "tma_persistent": td.GemmConfig("tma_persistent", "rcr", "bf16", block_m=128, block_n=128, block_k=64,
                                    num_warps=8, num_stages=4),
    "streamk": td.GemmConfig("streamk", "rcr", "bf16", block_m=128, block_n=128, block_k=64, num_warps=8,
                             num_stages=4),
    # split K: fp32 slots and arrival counters (zeroed by a memset captured with the graph)
    "tma_split": td.GemmConfig("tma_persistent", "rcr", "bf16", block_m=128, block_n=128, block_k=64,
                               num_warps=4, num_stages=6, split_k=3),
    # makes its descriptors on the device, in scratch memory (tma_persistent and streamk take host descriptors)
    "tma_ws": td.GemmConfig("tma_ws", "rcr", "bf16", block_m=128, block_n=128, block_k=64, num_warps=4,
                            num_stages=4),
}
M, N, K = 272, 400, 1024   # multiples of 16, not of the tiles; stream-K has a partial last wave


@pytest.fixture(scope="module")
def registry():
    reg = td.Registry(td.detect())
    for cfg in CONFIGS.values():
        reg.add(cfg)
    report = reg.build()
    assert not report.failed, report.failed
    return reg


def operands(m: int = M, n: int = N, k: int = K):
    a = torch.randn(m, k, device="cuda", dtype=BF16)
    b = torch.randn(n, k, device="cuda", dtype=BF16).t()   # column-major K x N
    return a, b


def refill(*tensors: torch.Tensor) -> None:
    for t in tensors:
        t.copy_(torch.randn(t.shape, device=t.device, dtype=torch.float32))


def capture(fn, warmup: int = 2, stream: torch.cuda.Stream | None = None) -> tuple[torch.cuda.CUDAGraph, object]:
    """Warm fn up on a side stream (first calls bind and load), then capture one call (on `stream`, or torch's
    default capture stream); returns (graph, result)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        result = fn()
    return graph, result


def check(out: torch.Tensor, ref: torch.Tensor, tol: float = 2e-2) -> None:
    torch.cuda.synchronize()
    rel = float((out.float() - ref).norm() / ref.norm())
    assert rel < tol, rel


@pytest.mark.parametrize("name", ["tiled", "splitk", "tma_persistent", "streamk", "tma_split"])
def test_kernel_run_replays_with_new_inputs(registry, name):
    kernel = registry.get(CONFIGS[name].name)
    a, b = operands()
    out = torch.empty(M, N, device="cuda", dtype=BF16)
    graph, result = capture(lambda: kernel.run(a, b, out=out, alpha=0.5))
    assert result is out
    for _ in range(3):
        refill(a, b)
        out.fill_(float("nan"))
        graph.replay()
        check(out, 0.5 * (a.float() @ b.float()))


@pytest.mark.parametrize("name", ["tiled", "splitk"])
def test_an_output_allocated_during_capture_is_the_graphs_static_output(registry, name):
    kernel = registry.get(CONFIGS[name].name)
    a, b = operands()
    graph, out = capture(lambda: kernel.run(a, b))
    for _ in range(2):
        refill(a, b)
        graph.replay()
        check(out, a.float() @ b.float())


def test_fused_epilogue_reads_the_static_c_bias_and_d(registry):
    kernel = registry.get(CONFIGS["tiled_epilogue"].name)
    a, b = operands()
    c, d0 = (torch.empty(M, N, device="cuda", dtype=BF16) for _ in range(2))
    bias = torch.empty(N, device="cuda", dtype=BF16)
    refill(c, d0, bias)
    out = torch.empty(M, N, device="cuda", dtype=BF16)
    graph, _ = capture(lambda: kernel.run(a, b, out=out, c=c, bias=bias, d=(d0,), alpha=1.5, beta=-0.5))
    for _ in range(2):
        refill(a, b, c, d0, bias)
        graph.replay()
        ref = 1.5 * (a.float() @ b.float()) - 0.5 * c.float() + bias.float() + d0.float()
        check(out, torch.nn.functional.gelu(ref))


def test_td_gemm_and_registry_run_replay(registry):
    a, b = operands(128, 256, 512)
    out = torch.empty(128, 256, device="cuda", dtype=BF16)
    graph, result = capture(lambda: td.gemm(a, b, out=out))
    assert result is out
    out2 = torch.empty_like(out)
    graph2, _ = capture(lambda: registry.run(None, a, b, out=out2, strategy="rules"))
    for _ in range(2):
        refill(a, b)
        graph.replay()
        graph2.replay()
        check(out, a.float() @ b.float())
        check(out2, a.float() @ b.float())


def test_graphs_of_every_family_share_a_stream_and_replay_in_any_order(registry):
    """Split-K workspaces come from each graph's pool and TMA scratch is one buffer per stream: graphs captured
    on the same stream and replayed in any order (on the current stream, one at a time) stay correct."""
    runs = []
    for name in ("splitk", "tma_persistent", "streamk", "tiled", "tma_split", "tma_ws"):
        kernel = registry.get(CONFIGS[name].name)
        a, b = operands()
        out = torch.empty(M, N, device="cuda", dtype=BF16)
        graph, _ = capture(lambda kernel=kernel, a=a, b=b, out=out: kernel.run(a, b, out=out))
        runs.append((graph, a, b, out))
    for order in ([0, 1, 2, 3, 4, 5], [3, 5, 4, 1, 0, 2, 4, 5, 2, 1]):
        for i in order:
            graph, a, b, out = runs[i]
            refill(a, b)
            graph.replay()
            check(out, a.float() @ b.float())


def test_scratch_buffers_used_in_captures_stay_alive(registry):
    """After a capture, a larger eager launch on the capture stream replaces that stream's scratch buffer; the
    graph still addresses the old one, which is retained (never freed), so replays stay correct."""
    kernel = registry.get(CONFIGS["tma_ws"].name)
    a, b = operands(128, 128, 256)   # one tile: the smallest persistent grid
    out = torch.empty(128, 128, device="cuda", dtype=BF16)
    stream = torch.cuda.Stream()
    graph, _ = capture(lambda: kernel.run(a, b, out=out), stream=stream)
    slot = (torch.cuda.current_device(), stream.cuda_stream)
    assert slot in launcher.SCRATCH.buffers(), "the tma_ws kernel did not take its scratch from launcher.SCRATCH"
    captured_capacity, captured_address, _ = launcher.SCRATCH._buffers[slot]
    big_a, big_b = operands(4096, 4096, 256)   # every SM busy: needs more scratch than one program
    with torch.cuda.stream(stream):
        check(kernel.run(big_a, big_b), big_a.float() @ big_b.float())
    assert launcher.SCRATCH.buffers()[slot] > captured_capacity
    assert any(t.data_ptr() == captured_address for t in launcher.SCRATCH._retired)
    for _ in range(2):
        refill(a, b)
        graph.replay()
        check(out, a.float() @ b.float())


def test_host_descriptor_kernels_take_no_scratch(registry):
    """tma_persistent gets its tensor descriptors from the launch (runtime/descriptors.py): a launch and a
    capture on a fresh stream allocate no scratch for it (streamk does too, but with subtile > 0 it stores its
    partial tiles through a descriptor it makes on the device)."""
    stream = torch.cuda.Stream()
    slot = (torch.cuda.current_device(), stream.cuda_stream)
    for name in ("tma_persistent", "tma_split"):
        kernel = registry.get(CONFIGS[name].name)
        a, b = operands()
        out = torch.empty(M, N, device="cuda", dtype=BF16)
        graph, _ = capture(lambda kernel=kernel, a=a, b=b, out=out: kernel.run(a, b, out=out), stream=stream)
        refill(a, b)
        graph.replay()
        check(out, a.float() @ b.float())
        with torch.cuda.stream(stream):
            check(kernel.run(a, b), a.float() @ b.float())
        torch.cuda.synchronize()
    assert slot not in launcher.SCRATCH.buffers()
