"""CPU lane: `tiledispatch data summary|oracle DIR` on a small hand-made dataset (no GPU, no build).

    Q1 256^3   A ok 0.2, B ok 0.6, vendor ok 0.3  -> best A, 2nd/best 3, median/best 2, vendor/best 1.5
    Q2 128^3   A ok 0.1, B ok 0.15                -> best A, 2nd/best 1.5
    Q3 100^3   A unsupported, B compile_error     -> no ok kernel
"""
from __future__ import annotations

import csv
import json
import math

import pytest
from test_cli import invoke

from tiledispatch.bench.dataset import Dataset
from tiledispatch.bench.schema import Outcome, make_row
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.problems.gemm import GemmProblem

A = GemmConfig(dtype="bf16", block_m=64, block_n=64)
B = GemmConfig(dtype="bf16", family="splitk", split_k=4)
Q1, Q2, Q3 = (GemmProblem(m, m, m, dtype="bf16") for m in (256, 128, 100))
GPU = "NVIDIA H200"
CELLS = [(Q1, A, "ok", 0.2), (Q1, B, "ok", 0.6), (Q1, None, "ok", 0.3),
         (Q2, A, "ok", 0.1), (Q2, B, "ok", 0.15),
         (Q3, A, "unsupported", math.nan), (Q3, B, "compile_error", math.nan)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    dataset = Dataset(tmp_path_factory.mktemp("data") / "gemm-bf16")
    dataset.open("gemm", "none", "bf16", GPU, resume=False, extra={"command": "unit test"})
    stamp = {"gpu": GPU, "arch": "sm_90", "triton": "3.6.0", "timestamp": "2025-03-04T05:06:07"}
    dataset.append([make_row(p, "cli", c.name if c else "vendor:cublas", c, Outcome(s, time_ms=t), stamp)
                    for p, c, s, t in CELLS])
    return str(dataset.path)


def _ok(result):
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def test_summary_json(data_dir):
    data = json.loads(_ok(invoke("data", "summary", data_dir, "--json")))
    assert (data["rows"], data["problems"], data["kernels"], data["vendor_rows"]) == (7, 3, 2, 1)
    assert data["by_status"]["ok"] == 5 and data["by_status"]["unsupported"] == 1
    assert (data["pairs_expected"], data["pairs_present"], data["ok_pairs"]) == (6, 6, 4)
    assert data["coverage"] == 1.0 and data["ok_share"] == pytest.approx(4 / 6)
    assert data["problems_without_ok"] == {"count": 1, "examples": [Q3.signature()]}
    assert data["manifest"]["command"] == "unit test" and data["gpus"] == [GPU]
    assert data["duplicate_pairs"] == 0


def test_summary_text(data_dir):
    out = _ok(invoke("data", "summary", data_dir))
    assert "7 rows; 3 problems x 2 kernels (+ 1 vendor rows)" in out
    assert "coverage 100.0% of 6 (problem, kernel) pairs; ok 66.7% (4 pairs)" in out
    assert f"no ok kernel: {Q3.signature()}" in out
    assert "duplicate (problem, kernel) pairs: 0" in out
    assert "rows by status and family" in out and "compile_error" in out and "vendor #" in out
    assert "2025-03-04T05:06:07" in out and GPU in out


def test_oracle_json_top(data_dir):
    data = json.loads(_ok(invoke("data", "oracle", data_dir, "--json", "--top", "1")))
    assert [p["problem"] for p in data["problems"]] == [Q1.signature()]
    q1 = data["problems"][0]
    assert (q1["best_kernel"], q1["second_kernel"], q1["n_ok"]) == (A.name, B.name, 2)
    assert q1["second_ratio"] == pytest.approx(3.0) and q1["median_ratio"] == pytest.approx(2.0)
    assert q1["vendor_speedup"] == pytest.approx(1.5) and q1["vendor_kernel"] == "vendor:cublas"
    s = data["summary"]
    assert (s["problems"], s["problems_with_ok"], s["problems_with_vendor"]) == (3, 2, 1)
    assert s["geomean_second_ratio"] == pytest.approx(math.sqrt(3.0 * 1.5))
    assert s["best_counts"] == [{"kernel": A.name, "count": 2, "share": 1.0}]
    everything = json.loads(_ok(invoke("data", "oracle", data_dir, "--json", "--top", "0")))
    assert [p["problem"] for p in everything["problems"]] == [Q1.signature(), Q2.signature(), Q3.signature()]
    assert everything["problems"][2]["best_ms"] is None   # NaN is written as null


def test_oracle_text_and_csv(data_dir, tmp_path):
    path = tmp_path / "oracle.csv"
    out = _ok(invoke("data", "oracle", data_dir, "--csv", str(path), "--top", "2"))
    assert "oracle: 2 of 3 problems, largest second/best gap first" in out
    assert Q1.signature() in out and Q2.signature() in out and Q3.signature() not in out
    assert "geomean second/best 2.121" in out and "vendor/best" in out
    assert "geomean vendor/best (oracle speed-up over the vendor) 1.500 on 1 problems" in out
    assert "most often the best" in out and A.name in out
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["problem"] for r in rows] == sorted(p.signature() for p in (Q1, Q2, Q3))
    assert {r["problem"]: r["best_kernel"] for r in rows}[Q2.signature()] == A.name


def test_errors_are_one_line(tmp_path, data_dir):
    for args in (("data", "summary", str(tmp_path)), ("data", "oracle", data_dir, "--top", "-1")):
        result = invoke(*args)
        assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.stderr
    assert "is not a dataset" in invoke("data", "summary", str(tmp_path)).stderr


def test_drop_removes_rows_of_changed_kernels_for_resume(tmp_path, data_dir):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(data_dir, copy)
    out = _ok(invoke("data", "drop", str(copy), "--family", "splitk"))
    assert "dropped 3 row(s)" in out
    dataset = Dataset(copy)
    frame = dataset.frame()
    assert len(frame) == len(CELLS) - 3 and "splitk" not in set(frame["family"]) and len(dataset.parts()) == 1
    assert (Q1.signature(), B.name) not in dataset.done_pairs()     # --resume measures them again
    assert "dropped 1 row(s)" in _ok(invoke("data", "drop", str(copy), "--kernel", "vendor:cublas"))
    assert invoke("data", "drop", str(copy)).exit_code == 2         # nothing named
