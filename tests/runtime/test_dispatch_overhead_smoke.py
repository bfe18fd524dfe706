"""benchmarks/dispatch_overhead.py --smoke runs its whole control flow on CPU (no-op compiled kernels), writes a
JSON that benchmarks/tables.py renders (smoke files are skipped when BENCHMARKS.md is rendered)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_smoke_run_writes_a_renderable_result(tmp_path, isolated_cache):
    out = tmp_path / "overhead.json"
    env = {**os.environ, "TILEDISPATCH_CACHE_DIR": str(isolated_cache)}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "dispatch_overhead.py"), "--smoke", "--calls", "20",
           "--trials", "1", "--issue-calls", "5", "--out", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["benchmark"] == "dispatch_overhead" and data["mode"] == "smoke" and len(data["rows"]) == 2
    for row in data["rows"]:
        assert set(row["per_call_us"]) == {"direct", "kernel_run", "kernel_run_alloc", "registry_run", "td_gemm"}
        assert set(row["overhead_us"]) == {"kernel_run", "registry_run", "td_gemm"}
        assert row["kernel"] == row["registry_kernel"]
    tables = load("tables")
    assert tables.result_kind(out) is None   # smoke results are not rendered into BENCHMARKS.md
    text = tables.dispatch_overhead_section(out)
    assert "| 64×64×64 |" in text and "| 1×4096×4096 |" in text


def test_gpu_slug_and_defaults():
    bench = load("dispatch_overhead")
    assert bench.gpu_slug("NVIDIA H100 80GB HBM3") == "h100_80gb_hbm3" and bench.gpu_slug("NVIDIA H200") == "h200"
    opts = bench.parse_args([])
    assert (opts.calls, opts.trials) == (2000, 7)
    assert bench.default_out({"mode": "gpu", "gpu": "NVIDIA H200"}).name == "dispatch_overhead_h200.json"
    assert bench.per_call_us(lambda: None, 10, 2, lambda: None) >= 0
