"""benchmarks/conv.py without a GPU: --help, case selection, the acceptance summary, the BENCHMARKS.md section
(rendered from a synthetic result and spliced between the conv markers, other sections kept)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_help_runs_without_gpu() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "conv.py"), "--help"], check=False,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--max-problems" in done.stdout and "--top-k" in done.stdout


def test_select_cases(conv) -> None:
    opts = conv.parse_args(["--max-problems", "2", "--categories", "dense2d,depthwise3d"])
    cases = conv.select_cases(opts)
    assert [c.category for c in cases] == ["dense2d", "dense2d", "depthwise3d", "depthwise3d"]
    assert cases[0].name == "resnet50/conv1" and cases[1].name != cases[0].name     # spread: first and last
    smoke = conv.select_cases(conv.parse_args(["--smoke"]))
    assert len(smoke) == 6 and len({c.category for c in smoke}) == 6
    tiny = conv.select_cases(conv.parse_args(["--cpu", "--batch-scale", "0.5"]))
    assert all(c.problem.n == 1 and max(c.problem.spatial) <= 6 for c in tiny)
    assert [c.category for c in tiny] == [c.category for c in smoke]
    assert conv.select_cases(conv.parse_args(["--batch-scale", "0.5", "--max-problems", "1"]))[0].problem.n == 16
    with pytest.raises(SystemExit):
        conv.select_cases(conv.parse_args(["--categories", "sparse"]))


def _row(conv, direction: str, category: str, ratio: float | None, pct: float | None, cpg: int = 1) -> dict:
    return {"direction": direction, "category": category, "case": f"m/{category}-{ratio}", "memory_bound":
            category.startswith("depthwise") or (category.startswith("grouped") and cpg <= 16),
            "tune_ratio": ratio, "auto_ratio": ratio, "tune_floor_pct": pct, "cudnn_floor_pct": 10.0}


def test_summary_and_acceptance(conv) -> None:
    rows = [_row(conv, "fwd", "grouped", 4.0, 70.0, cpg=4), _row(conv, "fwd", "grouped", 1.0, 50.0, cpg=8),
            _row(conv, "fwd", "dense2d", 0.9, None), _row(conv, "bwd_data", "dense2d", 0.6, None),
            _row(conv, "fwd", "depthwise3d", None, None)]
    summary = conv.summarize(rows)
    checks = {(a["direction"], a["check"]): a for a in summary["acceptance"]}
    assert checks[("fwd", "grouped ratio")]["value"] == pytest.approx(2.0) and checks[("fwd", "grouped ratio")]["pass"]
    assert checks[("fwd", "dense2d ratio")]["pass"] and not checks[("bwd_data", "dense2d ratio")]["pass"]
    assert not checks[("fwd", "depthwise3d ratio")]["pass"]             # no result is a miss
    mem = checks[("fwd", "memory-bound 2D % of HBM")]
    assert mem["value"] == pytest.approx((70 * 50) ** 0.5) and mem["cases_meeting"] == 1 and not mem["pass"]
    assert conv.target("dense2d", "bwd_weight") == 0.7 and conv.target("grouped3d", "fwd") == 3.0


def test_markdown_section_between_markers(conv, tmp_path: Path) -> None:
    row = {"direction": "fwd", "case": "resnext50_32x4d/layer1.conv2", "category": "grouped", "memory_bound": True,
           "n": 32, "c": 128, "k": 128, "groups": 32, "spatial": [56, 56], "filter": [3, 3], "stride": [1, 1],
           "cudnn_ms": 0.2, "tune_ms": 0.05, "tune_ratio": 4.0, "auto_ms": 0.06, "auto_ratio": 3.3,
           "tune_tflops": 18.0, "tune_gbps": 1000.0, "tune_floor_pct": 70.0, "tune_kernel": "conv-direct-x"}
    result = {"benchmark": "conv", "mode": "gpu", "gpu": "NVIDIA H200", "tiledispatch": "0", "triton": "3",
              "torch": "2", "cuda": "13", "date": "today", "dtype": "bf16", "suites": ["resnext50_32x4d"],
              "seconds": 1.0, "protocol": "p", "limits": {"hbm_copy_gbps": 4000.0}, "rows": [row],
              "summary": conv.summarize([row])}
    path = tmp_path / "conv_h200.json"
    path.write_text(json.dumps(result))
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\n## GEMM\n\nkeep me\n")
    conv.update_markdown(path, md, results=tmp_path)
    first = md.read_text()
    assert "keep me" in first and first.count("<!-- table: conv_h200.json -->") == 1 and "4.00" in first
    conv.update_markdown(path, md, results=tmp_path)                    # replaced in place, not appended again
    assert md.read_text() == first
    md.write_text(first + "\n## after\n")
    conv.update_markdown(path, md, results=tmp_path)
    assert md.read_text().endswith("## after\n") and md.read_text().count("<!-- /table -->") == 1


def test_ceiling_is_reported_beside_each_check(conv) -> None:
    """cuDNN / copy time: the ratio a kernel at copy speed would get, per row, category and check."""
    rows = [{**_row(conv, "fwd", "depthwise", 1.0, 20.0), "ceiling_ratio": 1.2, "copy_floor_pct": 30.0,
             "copy_ms": 0.01, "tune_ms": 0.02},
            {**_row(conv, "fwd", "depthwise", 1.1, 30.0), "ceiling_ratio": 1.8, "copy_floor_pct": 30.0,
             "copy_ms": 0.01, "tune_ms": 0.01}]
    rows[1]["case"] += "b"
    summary = conv.summarize(rows)
    checks = {a["check"]: a for a in summary["acceptance"]}
    assert checks["depthwise ratio"]["ceiling"] == pytest.approx((1.2 * 1.8) ** 0.5)
    assert checks["memory-bound 2D % of HBM"]["copy_floor_pct"] == pytest.approx(30.0)
    assert checks["memory-bound 2D % of HBM"]["copy_speed_pct"] == pytest.approx((50.0 * 100.0) ** 0.5)
    assert summary["groups"][0]["ceiling_geomean"] == pytest.approx((1.2 * 1.8) ** 0.5)


def _result(conv, rows: list[dict], gpu: str = "NVIDIA H200") -> dict:
    return {"benchmark": "conv", "gpu": gpu, "tiledispatch": "0", "triton": "3", "torch": "2", "cuda": "13",
            "dtype": "bf16", "protocol": "p", "suites": ["s"], "seconds": 2.0, "argv": [], "builds": {},
            "rows": rows, "summary": conv.summarize(rows)}


def test_merge_joins_disjoint_runs_and_refuses_others(conv, tmp_path: Path) -> None:
    fwd, bwd = _row(conv, "fwd", "dense2d", 0.9, None), _row(conv, "bwd_data", "dense2d", 0.6, None)
    paths = [tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json", tmp_path / "d.json"]
    for path, result in zip(paths, [_result(conv, [fwd]), _result(conv, [bwd]), _result(conv, [fwd]),
                                    _result(conv, [bwd], gpu="NVIDIA H100")]):
        path.write_text(json.dumps(result))
    merged = conv.merge_results(paths[:2])
    assert [r["direction"] for r in merged["rows"]] == ["fwd", "bwd_data"] and merged["seconds"] == 4.0
    checks = {(a["direction"], a["check"]): a["pass"] for a in merged["summary"]["acceptance"]}
    assert checks == {("fwd", "dense2d ratio"): True, ("bwd_data", "dense2d ratio"): False}
    with pytest.raises(SystemExit, match="share"):
        conv.merge_results(paths[:1] + paths[2:3])
    with pytest.raises(SystemExit, match="gpu"):
        conv.merge_results(paths[:1] + paths[3:])


def test_replace_swaps_rows_measured_again(conv, tmp_path: Path) -> None:
    first = [_row(conv, "fwd", "dense2d", 0.5, None), _row(conv, "bwd_data", "dense2d", 0.6, None)]
    again = {**first[0], "tune_ratio": 0.9}
    base, rerun = tmp_path / "base.json", tmp_path / "rerun.json"
    base.write_text(json.dumps(_result(conv, first)))
    rerun.write_text(json.dumps({**_result(conv, [again]), "date": "later", "argv": ["--directions", "fwd"]}))
    merged = conv.merge_results([base, rerun], "kernel changed")
    assert [r["tune_ratio"] for r in merged["rows"]] == [0.9, 0.6]
    assert merged["reruns"] == [{"date": "later", "rows": 1, "argv": ["--directions", "fwd"], "why": "kernel changed"}]
    checks = {(a["direction"], a["check"]): a["pass"] for a in merged["summary"]["acceptance"]}
    assert checks[("fwd", "dense2d ratio")] and not checks[("bwd_data", "dense2d ratio")]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**_result(conv, [again]), "triton": "4"}))
    with pytest.raises(SystemExit, match="triton"):             # a rerun must match the base as a merge does
        conv.merge_results([base, other], "kernel changed")
