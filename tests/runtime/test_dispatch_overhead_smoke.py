"""benchmarks/dispatch_overhead.py --smoke runs its whole control flow on CPU (Triton's interpreter with its
launches skipped) through the public API; its GEMM rows are what benchmarks/tables.py renders (smoke files are
skipped when BENCHMARKS.md is rendered)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_GEMM = {"kernel_run", "kernel_run_alloc", "registry_run", "td_gemm"}


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_smoke_run_measures_every_call_path(tmp_path, isolated_cache):
    out = tmp_path / "overhead.json"
    env = {**os.environ, "TILEDISPATCH_CACHE_DIR": str(isolated_cache), "PYTHONPATH": str(ROOT / "src")}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "dispatch_overhead.py"), "--smoke", "--smoke-kernels",
           "1", "--calls", "20", "--trials", "1", "--issue-calls", "5", "--label", "after", "--out", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False)
    assert result.returncode in (0, 1), result.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["benchmark"] == "dispatch_overhead" and data["mode"] == "smoke" and data["label"] == "after"
    assert Path(data["code"]["package"]) == ROOT / "src" / "tiledispatch"
    assert [row["id"] for row in data["rows"]] == ["gemm 64x64x64", "gemm 1x4096x4096"]
    for row in data["rows"]:
        assert PUBLIC_GEMM <= set(row["per_call_us"]) and PUBLIC_GEMM <= set(row["issue_us"]), row
        assert "direct" in row["per_call_us"] or row["unavailable"]["direct"]   # measured, or why not
        assert row["kernel"] == row["registry_kernel"] and row["td_gemm_kernel"].startswith("gemm-")
    assert len(data["conv_rows"]) == 6
    for row, direction in zip(data["conv_rows"], ("fwd", "fwd", "bwd_data", "bwd_data", "bwd_weight",
                                                  "bwd_weight")):
        assert row["direction"] == direction and row["id"].startswith(f"conv {direction} ")
        assert set(row["per_call_us"]) == set(row["issue_us"]) == {"td_api"}   # torch's is a real CPU conv
        assert row["td_conv_kernel"].startswith(f"conv-igemm-{direction}-")
    assert load("tables").result_kind(out) is None   # smoke results are not rendered into BENCHMARKS.md


def test_rows_render_in_the_benchmarks_table(tmp_path):
    bench, tables = load("dispatch_overhead"), load("tables")
    rows = []
    for (m, n, k), floor in zip(bench.PROBLEMS, (10.0, 12.0)):
        us = {name: floor + i for i, name in enumerate(bench.VARIANTS)}
        row = {"id": f"gemm {m}x{n}x{k}", "m": m, "n": n, "k": k, "kernel": "gemm-x", "valid": True,
               "per_call_us": us, "issue_us": us}
        rows.append({**row, **bench.overheads(row)})
    assert rows[0]["overhead_us"] == {"kernel_run": 1.0, "registry_run": 3.0, "td_gemm": 4.0}
    assert rows[0]["pass"] and rows[0]["issue_pass"]
    path = tmp_path / "dispatch_overhead_h200.json"
    path.write_text(json.dumps({"benchmark": "dispatch_overhead", "mode": "gpu", "gpu": "NVIDIA H200",
                                "host_cpu": "x", "tiledispatch": "0.1", "triton": "3.6", "torch": "2.11",
                                "cuda": "12.8", "date": "today", "protocol": "p", "limit_us": bench.LIMIT_US,
                                "rows": rows, "conv_rows": []}))
    text = tables.dispatch_overhead_section(path)
    assert "| 64×64×64 |" in text and "| 1×4096×4096 |" in text and "+1.00 / +3.00 / +4.00" in text


def test_a_missing_direct_launch_leaves_the_limit_unjudged():
    bench = load("dispatch_overhead")
    row = {"valid": True, "per_call_us": {"td_gemm": 9.0}, "issue_us": {"td_gemm": 5.0}}
    unjudged = {"overhead_us": {}, "issue_overhead_us": {}, "pass": None, "issue_pass": None}
    assert bench.overheads(row) == unjudged


def test_first_calls_leave_out_a_changed_api_but_not_the_judged_variant():
    bench = load("dispatch_overhead")

    def changed() -> None:
        raise TypeError("run() got an unexpected keyword argument 'out'")

    def broken() -> None:
        raise AttributeError("no attribute 'bound'")

    fns = {"registry_run": changed, "td_gemm": lambda: None}
    errors, missing = bench.first_calls(fns, None, None, "td_gemm")
    assert list(fns) == ["td_gemm"] and errors == {}
    assert missing == {"registry_run": "TypeError: run() got an unexpected keyword argument 'out'"}
    with pytest.raises(AttributeError):
        bench.first_calls({"td_gemm": broken}, None, None, "td_gemm")
    with pytest.raises(ZeroDivisionError):   # only what an API change raises is left out
        bench.first_calls({"registry_run": lambda: 1 / 0}, None, None, "td_gemm")


def test_gpu_slug_defaults_and_output_names():
    bench = load("dispatch_overhead")
    assert bench.gpu_slug("NVIDIA H100 80GB HBM3") == "h100_80gb_hbm3"
    assert bench.gpu_slug("NVIDIA H200") == "h200"
    opts = bench.parse_args([])
    assert (opts.calls, opts.trials, opts.label) == (2000, 7, None)
    assert bench.default_out({"mode": "gpu", "gpu": "NVIDIA H200"}).name == "dispatch_overhead_h200.json"
    labelled = bench.default_out({"mode": "gpu", "gpu": "NVIDIA H200", "label": "before"})
    expected = "benchmarks/results/dispatch_ab_h200/dispatch_overhead_before.json"
    assert labelled.relative_to(ROOT).as_posix() == expected
    assert bench.default_out({"mode": "smoke", "label": "after"}).name == "dispatch_overhead_smoke_after.json"
    assert bench.per_call_us(lambda: None, 10, 2, lambda: None) >= 0


def test_code_revision_names_the_imported_package():
    import tiledispatch

    code = load("dispatch_overhead").code_revision()
    assert code["package"] == str(Path(tiledispatch.__file__).resolve().parent)
    assert len(code["sources_sha256"]) == 16 and code["git_tracked"] in (True, False)
