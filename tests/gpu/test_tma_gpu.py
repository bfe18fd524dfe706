"""GPU lane for the persistent TMA families and fp8: tma_persistent (subtile 0, 1 and 2, split K), tma_ws and
streamk in fp16/bf16 x four layouts, and fp8e4m3 rcr in every family (tma_ws: the Gluon kernel, with every bias
mode and output type, and split K), with production tile sizes, every
epilogue kind, on shapes that are multiples of 16 (what TMA needs) but not of the tiles, with a NaN-poisoned
output."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.dtypes import torch_dtype
from tiledispatch.problems.gemm import Epilogue
from tiledispatch.testing.inputs import make_args
from tiledispatch.testing.reference import validate
from tiledispatch.testing import suites

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EPILOGUES = suites.FLOAT_EPILOGUES   # every activation, bias mode, number of D and C
# 16: a single 16-row strip; 272: two tiles plus 16; 1008: ragged last tile; 4096 K: long K loop;
# 2064x2064 at 128x128 tiles: 289 tiles = two full waves + 25 on 132 SMs (stream-K splits the tail).
SHAPES = ((16, 272, 64), (272, 48, 1008), (1008, 1024, 96), (64, 48, 4096), (2064, 2064, 512))
FAMILY_TILES = {
    "tma_persistent": [dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, subtile=2),
                       dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4, subtile=1),
                       dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, subtile=0),
                       # split K: the last unit of each tile sums its slots and runs the epilogue
                       dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=6, split_k=3)],
    "tma_ws": [dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3)],
    "streamk": [dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4),
                # 256-row tiles: four 32-column workspace slices, a two-slice descriptor epilogue
                dict(block_m=256, block_n=128, block_k=64, num_warps=8, num_stages=3, subtile=2),
                # partials and whole tiles stored through pointers
                dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=6, subtile=0)],
}


def _configs():
    i = 0
    for dtype in ("fp16", "bf16"):
        for layout in ("rcr", "rrr", "crr", "ccr"):
            for family, tiles in FAMILY_TILES.items():
                for fields in tiles:
                    i += 1
                    yield td.GemmConfig(family, layout, dtype, **fields).with_epilogue(_epilogue(family, i))
    fp8 = dict(block_m=128, block_n=128, block_k=128, num_warps=8, num_stages=3)
    for j, family in enumerate(("tiled", "splitk", "tma_persistent", "tma_ws", "streamk")):
        fields = dict(fp8, num_warps=4) if family == "tma_ws" else dict(fp8)
        if family == "splitk":
            fields.update(split_k=4, block_m=64)
        for i in (j, j + 3):
            yield td.GemmConfig(family, "rcr", "fp8e4m3", **fields).with_epilogue(_epilogue(family, i))
    # fp8 tma_ws is the Gluon kernel: its deeper rings, 128x64 tiles, row biases and other output types
    ws = dict(block_m=128, block_k=128, num_warps=4)
    yield td.GemmConfig("tma_ws", "rcr", "fp8e4m3", block_n=128, num_stages=6, **ws).with_epilogue(
        Epilogue("silu", "row"))
    yield td.GemmConfig("tma_ws", "rcr", "fp8e4m3", block_n=64, num_stages=8, out_dtype="fp16", **ws).with_epilogue(
        Epilogue("gelu", "row"))
    yield td.GemmConfig("tma_ws", "rcr", "fp8e4m3", block_n=128, num_stages=5, out_dtype="fp32", **ws)
    # 192-row tiles: three consumer warp groups, A loaded as three 64-row boxes per stage
    tall = dict(ws, block_m=192, block_n=128)
    yield td.GemmConfig("tma_ws", "rcr", "fp8e4m3", num_stages=4, **tall).with_epilogue(Epilogue("gelu", "col"))
    yield td.GemmConfig("tma_ws", "rcr", "fp8e4m3", num_stages=3, out_dtype="fp16", **tall).with_epilogue(
        Epilogue("relu", "row"))
    # split K (K=64 leaves the later splits no block: they add zeros); the last split of a tile sums the slots
    yield td.GemmConfig("tma_ws", "rcr", "fp8e4m3", num_stages=4, split_k=2, **dict(ws, block_n=128)).with_epilogue(
        Epilogue("gelu", "col"))
    yield td.GemmConfig("tma_ws", "rcr", "fp8e4m3", num_stages=6, split_k=4, out_dtype="fp32",
                        **dict(ws, block_n=64)).with_epilogue(Epilogue("relu", "row"))
    yield td.GemmConfig("tma_ws", "rcr", "fp8e4m3", num_stages=3, split_k=3, out_dtype="fp16", **tall)


def _epilogue(family: str, i: int) -> Epilogue:
    return suites.family_epilogue(family, EPILOGUES[i % len(EPILOGUES)])


@pytest.fixture(scope="module")
def registry():
    reg = td.Registry(td.detect())
    for cfg in _configs():
        reg.add(cfg)
    report = reg.build()
    assert not report.failed, report.failed
    return reg


def test_tma_families_and_fp8_on_odd_shapes(registry):
    failures, runs = [], 0
    for kernel in registry.kernels:
        cfg = kernel.config
        for m, n, k in SHAPES:
            for batch in ((1,) if cfg.family == "tma_ws" else (1, 3)):   # tma_ws: one batch
                problem = td.GemmProblem(m, n, k, batch, cfg.dtype, cfg.out_dtype, layout=cfg.layout,
                                         epilogue=cfg.epilogue)
                args = make_args(problem, torch.device("cuda"), seed=m + n + k + batch)
                shape = (batch, m, n) if batch > 1 else (m, n)
                args.out = torch.full(shape, float("nan"), dtype=torch_dtype(cfg.out_dtype), device="cuda")
                out = kernel.launch(args, problem)
                result = validate(out, args, cfg.dtype)
                runs += 1
                if not result["passed"]:
                    failures.append((kernel.name, (m, n, k, batch), result))
    assert runs >= 250
    assert not failures, failures[:10]


def test_td_gemm_fp8_matches_scaled_mm():
    a = torch.randn(512, 1024, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(768, 1024, device="cuda").to(torch.float8_e4m3fn).t()       # K-major B
    sa = torch.tensor([0.5], device="cuda")
    sb = torch.tensor([0.25], device="cuda")
    out = td.gemm(a, b, scale_a=sa, scale_b=sb)
    ref = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    assert out.dtype == torch.bfloat16
    assert (out.float() - ref.float()).norm() / ref.float().norm() < 1e-2


def test_tma_families_run_16_byte_rows_directly(registry):
    """Sizes that are multiples of 8 but not 16 (problem align 8): the TMA families run them unpadded."""
    failures = []
    for kernel in registry.kernels:
        cfg = kernel.config
        if cfg.family not in FAMILY_TILES or cfg.dtype == "fp8e4m3":
            continue
        for m, n, k in ((1000, 1000, 1000), (40, 1032, 776)):
            problem = td.GemmProblem(m, n, k, 1, cfg.dtype, layout=cfg.layout, epilogue=cfg.epilogue)
            assert problem.align == 8 and kernel.is_supported(problem), (kernel.name, problem)
            args = make_args(problem, torch.device("cuda"), seed=m)
            args.out = torch.full((m, n), float("nan"), dtype=torch_dtype(cfg.out_dtype), device="cuda")
            result = validate(kernel.launch(args, problem), args, cfg.dtype)
            if not result["passed"]:
                failures.append((kernel.name, (m, n, k), result))
    assert not failures, failures[:10]
