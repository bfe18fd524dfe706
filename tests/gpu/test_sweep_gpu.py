"""GPU lane: a sweep on the GPU records timed, validated rows for every runnable pair and a vendor row per
problem (cuBLAS), and its worker sees exactly the GPU it was given."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.bench.dataset import load_frame
from tiledispatch.bench.sweep import SweepSpec, run_sweep
from tiledispatch.problems.corpus import CorpusEntry

pytestmark = pytest.mark.gpu

# odd sizes (padded plans for a16 kernels), a decode-like M=1, an aligned square
SHAPES = ((1000, 1000, 1000), (1, 4096, 4096), (2048, 2048, 2048), (777, 1234, 555))


def test_gpu_sweep_times_every_runnable_pair(tmp_path):
    problems = tuple(CorpusEntry("gpu", td.GemmProblem(m, n, k, dtype="bf16")) for m, n, k in SHAPES)
    report = run_sweep(SweepSpec(problems, tmp_path / "d", presets=("gemm_bf16_rcr_latency",), vendor=True,
                                 gpus=(0,), progress=False))
    df = load_frame(tmp_path / "d")
    kernels = df[df.family != "vendor"]
    assert len(set(zip(df.problem, df.kernel))) == len(df) == report.recorded
    assert set(kernels.status) <= {"ok", "unsupported"} and (kernels.status == "ok").sum() > len(SHAPES)
    ok = df[df.status == "ok"]
    assert (ok.time_ms > 0).all() and (ok.rel_err < 1e-2).all() and (ok.repeats >= 3).all()
    assert (ok.tflops > 0).all() and set(ok.worker) == {"gpu0"} and ok.gpu.str.startswith("NVIDIA").all()
    vendor = df[df.family == "vendor"]
    assert len(vendor) == len(SHAPES) and set(vendor.status) == {"ok"}
