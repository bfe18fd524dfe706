"""GPU lane: every family x dtype x epilogue on odd shapes with compiled sm_90 kernels (pytest -m gpu)."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.dtypes import torch_dtype
from tiledispatch.testing.inputs import make_args
from tiledispatch.testing.reference import validate
from tiledispatch.testing import suites

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

DTYPES = ("fp16", "bf16", "fp32", "tf32", "int8")
# 1: a single row; 17: not a multiple of any tile; 257: one past a tile boundary; 1000: several full tiles
# with a ragged edge; 4096: large aligned K for the split-K path.
SHAPES = ((1, 257, 64), (17, 100, 257), (257, 17, 1000), (1000, 1000, 100), (64, 48, 4096))


def _configs():
    for dtype in DTYPES:
        bk = 64 if dtype == "int8" else 32
        epilogues = suites.INT8_EPILOGUES if dtype == "int8" else suites.FLOAT_EPILOGUES
        for layout in ("rcr", "rrr", "crr", "ccr"):
            for family, split in (("tiled", 1), ("splitk", 4)):
                for i, epilogue in enumerate(epilogues):
                    if (i + len(layout) + split) % 2 and i:   # halve the grid, keep every epilogue per dtype
                        continue
                    yield td.GemmConfig(family, layout, dtype, block_m=64, block_n=64, block_k=bk, num_warps=4,
                                        num_stages=3, split_k=split, align=1).with_epilogue(epilogue)


@pytest.fixture(scope="module")
def registry():
    reg = td.Registry(td.detect())
    for cfg in _configs():
        reg.add(cfg)
    report = reg.build()
    assert not report.failed, report.failed
    return reg


def test_every_kernel_on_odd_shapes(registry):
    failures = []
    for kernel in registry.kernels:
        cfg = kernel.config
        for m, n, k in SHAPES:
            for batch in (1, 3):
                problem = td.GemmProblem(m, n, k, batch, cfg.dtype, layout=cfg.layout, epilogue=cfg.epilogue)
                args = make_args(problem, torch.device("cuda"), seed=m + n + k)
                fill = float("nan") if cfg.out_dtype != "int32" else -(2**31)
                shape = (batch, m, n) if batch > 1 else (m, n)
                args.out = torch.full(shape, fill, dtype=torch_dtype(cfg.out_dtype), device="cuda")
                out = kernel.launch(args, problem)
                result = validate(out, args, cfg.dtype)
                if not result["passed"]:
                    failures.append((kernel.name, (m, n, k, batch), result))
    assert not failures, failures[:10]


def test_td_gemm_bf16_with_epilogue_and_padding():
    a = torch.randn(1000, 777, device="cuda", dtype=torch.bfloat16)       # K=777: unaligned -> padded exactly
    b = torch.randn(777, 1536, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(1536, device="cuda", dtype=torch.bfloat16)
    out = td.gemm(a, b, bias=bias, activation="gelu")
    ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double())
    rel = (out.double() - ref).norm() / ref.norm()
    assert rel < 1e-2


def test_td_gemm_ranks_the_space_and_runs_its_pick_compiled_on_first_use(monkeypatch, tmp_path):
    """TILEDISPATCH_RANK_SPACE=1 (the GPU default): the model ranks every fp16 rcr candidate, the pick is
    compiled on first use into a cold cache, and it computes the product."""
    from tiledispatch.dispatch import defaults, entry
    from tiledispatch.presets import load_preset

    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "1")
    monkeypatch.setenv("TILEDISPATCH_MEASURE", "0")        # the model's pick, not a timed one
    defaults.reset()
    try:
        a = torch.randn(2048, 1024, device="cuda", dtype=torch.float16)
        b = torch.randn(3072, 1024, device="cuda", dtype=torch.float16).t()   # rcr
        out = td.gemm(a, b)
        picked = entry.gemm_plan(a, b)
        essential = load_preset("gemm_fp16_rcr_essential")
        assert picked.space is not None and picked.space["ranked"] > len(essential)
        if picked.space["pick"] == "on_demand":
            assert picked.kernel.name in picked.space["compiled"] and picked.space["compile_s"] > 0
        ref = a.double() @ b.double()
        assert ((out.double() - ref).norm() / ref.norm()) < 1e-2
    finally:
        defaults.reset()


def test_tune_stores_and_reuses(tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDISPATCH_TUNING_DB", str(tmp_path / "db.json"))
    reg = td.Registry(td.detect())
    reg.add_preset("gemm_bf16_rcr_essential")
    reg.build()
    problem = td.GemmProblem(512, 512, 4096, dtype="bf16")
    tuned = reg.select(problem, "tune", top_k=4)
    again = reg.select(problem, "auto")
    assert again.strategy == "tuning_db" and again.kernel.name == tuned.kernel.name


# Unaligned sizes (align 1 or 8): K=700/555/17 break 16-byte rows, N=1234 and 24 break multiples of 16,
# 1000 is a multiple of 8 only (TMA runs it directly, a16 kernels pad N and K)
UNALIGNED = ((1000, 1000, 1000), (777, 1234, 555), (3000, 5000, 700), (257, 24, 17))


@pytest.mark.parametrize("preset", ["gemm_bf16_rcr_essential", "gemm_fp16_rrr_essential",
                                    "gemm_fp8e4m3_rcr_essential"])
def test_every_padded_plan_of_the_essential_presets(preset):
    """Each kernel on the least padding it supports (selector.plan_for): operands copied only where they grow,
    the caller's output written in place when M and N stay, exact results either way."""
    from tiledispatch.runtime.execute import run_selection
    from tiledispatch.select.selector import Selection

    reg = td.Registry(td.detect())
    reg.add_preset(preset)
    assert not reg.build().failed
    cfg0 = reg.kernels[0].config
    failures, runs = [], 0
    for m, n, k in UNALIGNED:
        problem = td.GemmProblem(m, n, k, dtype=cfg0.dtype, layout=cfg0.layout)
        args = make_args(problem, torch.device("cuda"), seed=m + k)
        for plan in (p for p in reg.plans(problem) if p.padded):
            out = torch.full((m, n), float("nan"), dtype=torch_dtype(problem.out_dtype), device="cuda")
            args.out = out
            result = run_selection(Selection(plan.kernel, "test", plan.problem, True), args)
            check = validate(result, args, cfg0.dtype)
            runs += 1
            if not check["passed"] or result.data_ptr() != out.data_ptr():
                failures.append((plan.kernel.name, (m, n, k), (plan.problem.m, plan.problem.n, plan.problem.k),
                                 check))
    assert runs >= len(UNALIGNED)
    assert not failures, failures[:10]


def test_repeated_padded_calls_on_kept_buffers():
    """runtime/padding.py keeps the padded copies per call signature: the second and third calls (new data,
    with and without an out) copy into the same buffers and must still be exact; results never alias them."""
    from tiledispatch.runtime import padding
    from tiledispatch.runtime.execute import run_selection
    from tiledispatch.select.selector import Selection

    reg = td.Registry(td.detect())
    reg.add_preset("gemm_bf16_rcr_essential")
    assert not reg.build().failed
    problem = td.GemmProblem(777, 1234, 555, dtype="bf16", layout="rcr")
    plans = [p for p in reg.plans(problem) if p.padded][:3]
    assert plans
    padding.clear_cache()
    for plan in plans:
        selection = Selection(plan.kernel, "test", plan.problem, True)
        results = []
        for seed in range(3):
            args = make_args(problem, torch.device("cuda"), seed=seed)
            args.out = None if seed == 1 else torch.empty(777, 1234, dtype=torch.bfloat16, device="cuda")
            result = run_selection(selection, args)
            check = validate(result, args, "bf16")
            assert check["passed"], (plan.kernel.name, seed, check)
            results.append((result, result.clone()))
        assert all(torch.equal(r, kept) for r, kept in results), plan.kernel.name   # nothing overwrote them


PADDED_ONLY = ("gemm-tiled-rcr-bf16-bf16-fp32-64x128x64-w4-s4-g8-k1-e1-a16-none-bnone-d0-c0",
               "gemm-tma_persistent-rcr-bf16-bf16-fp32-128x128x64-w4-s6-g8-k1-e1-a16-none-bnone-d0-c0")


@pytest.mark.parametrize("name", PADDED_ONLY)
def test_a_repeated_padded_signature_runs_its_bound_padded_launch(name):
    """Registry.run (and td.gemm, the same memo) remembers a padded decision with a PaddedLaunch: repeated
    calls (new data, with and without an out, on the default stream and a side stream) copy into kept buffers
    and must stay exact; results never alias the kept buffers; a CUDA graph of a warm call replays exactly on
    new data."""
    from tiledispatch.runtime import padding

    reg = td.Registry(td.detect())
    reg.add(name)
    assert not reg.build().failed
    problem = td.GemmProblem(777, 1234, 555, dtype="bf16", layout="rcr")
    padding.clear_cache()
    results = []
    side = torch.cuda.Stream()
    for seed in range(4):
        args = make_args(problem, torch.device("cuda"), seed=seed)
        out = None if seed % 2 else torch.empty(777, 1234, dtype=torch.bfloat16, device="cuda")
        with torch.cuda.stream(side if seed == 3 else torch.cuda.current_stream()):
            result = reg.run(None, args.a, args.b, out=out, alpha=args.alpha)
        torch.cuda.synchronize()
        check = validate(result, args, "bf16")
        assert check["passed"], (seed, check)
        results.append((result, result.clone()))
    assert all(torch.equal(r, kept) for r, kept in results)
    assert all(isinstance(entry.bound, padding.PaddedLaunch) for entry in reg.calls.values())

    args = make_args(problem, torch.device("cuda"), seed=7)
    a, b = args.a.clone(), args.b.clone()
    out = torch.empty(777, 1234, dtype=torch.bfloat16, device="cuda")
    reg.run(None, a, b, out=out)                 # warm: selection, buffers and bound launch exist
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        reg.run(None, a, b, out=out)
    fresh = make_args(problem, torch.device("cuda"), seed=8)
    a.copy_(fresh.a)
    b.copy_(fresh.b)
    graph.replay()
    torch.cuda.synchronize()
    check = validate(out, fresh, "bf16")
    assert check["passed"], check


@pytest.mark.parametrize("name", [
    "gemm-tiled-rcr-fp16-fp16-fp32-64x64x32-w4-s3-g8-k1-e1-a1-relu-bnone-d0-c0",
    "gemm-splitk-rrr-fp16-fp16-fp32-64x64x64-w4-s4-g8-k4-e1-a16-relu-bcol-d0-c0",
    "gemm-tma_persistent-rcr-bf16-bf16-fp32-128x128x64-w4-s4-g8-k1-e1-a16-relu-bnone-d0-c0",
    "gemm-streamk-rrr-fp16-fp16-fp32-128x128x64-w4-s4-g8-k1-e1-a16-relu-bcol-d0-c0"])
def test_fused_relu_keeps_nan_and_inf_as_torch_does(name, device="cuda"):
    """relu(NaN) is NaN in torch; tl.maximum(acc, 0) compiled to a max that returns the non-NaN operand
    (FMNMX without .NAN), so a fused ReLU turned NaN outputs into zeros. Rows of A holding a NaN, an inf and
    -inf (the products of that row -inf or NaN) must come out NaN / inf where the reference's do."""
    from tiledispatch.testing.reference import reference

    cfg = td.parse_name(name)
    reg = td.Registry(td.detect() if device == "cuda" else "sm_90")
    reg.add(cfg)
    assert not reg.build().failed
    problem = td.GemmProblem(64, 96, 128, 1, cfg.dtype, layout=cfg.layout, epilogue=cfg.epilogue)
    args = make_args(problem, torch.device(device), seed=3)
    args.a[0, 0], args.a[1, 0] = float("nan"), float("inf")
    args.a[2, :] = -float("inf")
    out = reg.get(cfg.name).launch(args, problem)
    ref = reference(args).to(out.device)   # the reference is computed on the CPU in float64
    for row in range(3):
        assert torch.equal(torch.isnan(out[row]), torch.isnan(ref[row])), (name, row)
        assert torch.equal(torch.isinf(out[row]), torch.isinf(ref[row])), (name, row)
    assert torch.isnan(out[0]).any() and torch.isnan(out[2]).all()
