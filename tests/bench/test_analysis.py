"""CPU lane: dataset summary and oracle (tiledispatch.bench.analysis) on a small hand-made dataset.

Five GEMM problems x three kernels plus a cuBLAS reference row on three problems, every status present:
    P1 256^3        K1 ok 0.5, K2 ok 0.25, K3 ok 1.0, vendor 0.3   -> best K2, 2nd/best 2, median/best 2
    P2 512x512x128  K1 ok 0.2, K2 wrong_result (fast but wrong), K3 timeout, vendor 0.1 -> best K1 alone
    P3 100^3        K1 unsupported, K2 compile_error, K3 runtime_error, vendor 0.05 -> nothing ok
    P4 64^3         K1 ok 0.4, K3 ok 0.1, K2 missing (coverage < 1), no vendor -> best K3, 2nd/best 4
    P5 128^3        K1 ok with a NaN time (no timing), K2 ok 0.3, K3 ok 0.3 -> a tie, broken by name (K3)
"""
from __future__ import annotations

import json
import math

import pytest

from tiledispatch.bench import analysis
from tiledispatch.bench.dataset import Dataset, load_frame
from tiledispatch.bench.schema import Outcome, make_row
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.errors import BadInput
from tiledispatch.problems.gemm import GemmProblem

K1 = GemmConfig(dtype="fp16", block_m=64, block_n=64)
K2 = GemmConfig(dtype="fp16", block_m=128, block_n=128)
K3 = GemmConfig(dtype="fp16", family="splitk", split_k=2)
P1, P2, P3, P4, P5 = (GemmProblem(m, n, k, dtype="fp16") for m, n, k in
                      ((256, 256, 256), (512, 512, 128), (100, 100, 100), (64, 64, 64), (128, 128, 128)))
VENDOR = "vendor:cublas"
GPU = "NVIDIA H100 80GB HBM3"
NAN = math.nan

# (problem, kernel config or None for the vendor, status, time_ms)
CELLS = [
    (P1, K1, "ok", 0.5), (P1, K2, "ok", 0.25), (P1, K3, "ok", 1.0), (P1, None, "ok", 0.3),
    (P2, K1, "ok", 0.2), (P2, K2, "wrong_result", 0.01), (P2, K3, "timeout", NAN), (P2, None, "ok", 0.1),
    (P3, K1, "unsupported", NAN), (P3, K2, "compile_error", NAN), (P3, K3, "runtime_error", NAN),
    (P3, None, "ok", 0.05),
    (P4, K1, "ok", 0.4), (P4, K3, "ok", 0.1),
    (P5, K1, "ok", NAN), (P5, K2, "ok", 0.3), (P5, K3, "ok", 0.3),
]


def _row(problem, config, status, time_ms, second=0):
    stamp = {"gpu": GPU, "arch": "sm_90", "tiledispatch": "0.1.0", "triton": "3.6.0", "torch": "2.13.0",
             "cuda": "12.8", "schema_version": 1, "timestamp": f"2025-01-02T03:04:{second:02d}"}
    kernel = config.name if config is not None else VENDOR
    return make_row(problem, "unit", kernel, config, Outcome(status, time_ms=time_ms), stamp)


def write_dataset(path, cells=CELLS):
    """The cells as a dataset directory of two parts (as a sweep writes batches)."""
    dataset = Dataset(path)
    dataset.open("gemm", "none", "fp16", GPU, resume=False, extra={})
    rows = [_row(*cell, second=i) for i, cell in enumerate(cells)]
    dataset.append(rows[:7])
    dataset.append(rows[7:])
    return path


@pytest.fixture(scope="module")
def frame(tmp_path_factory):
    return load_frame(write_dataset(tmp_path_factory.mktemp("data") / "ds"))


@pytest.fixture(scope="module")
def table(frame):
    return analysis.oracle(frame).set_index("problem")


def test_summary_counts(frame):
    s = analysis.summary(frame)
    assert s["rows"] == 17 and s["problems"] == 5 and s["kernels"] == 3 and s["vendor_rows"] == 3
    assert s["by_status"] == {"ok": 12, "unsupported": 1, "compile_error": 1, "runtime_error": 1, "timeout": 1,
                              "wrong_result": 1}
    assert (s["pairs_expected"], s["pairs_present"], s["ok_pairs"]) == (15, 14, 8)
    assert s["coverage"] == pytest.approx(14 / 15) and s["ok_share"] == pytest.approx(8 / 15)
    assert s["problems_with_ok"] == 4
    assert s["problems_without_ok"] == {"count": 1, "examples": [P3.signature()]}
    assert s["duplicate_pairs"] == 0
    assert (s["ops"], s["directions"], s["dtypes"]) == (["gemm"], ["none"], ["fp16"])


def test_summary_families_stamps_and_time_range(frame):
    s = analysis.summary(frame)
    assert set(s["by_family"]) == {"tiled", "splitk", "vendor"}
    assert s["by_family"]["vendor"]["ok"] == 3 and sum(s["by_family"]["vendor"].values()) == 3
    assert s["by_family"]["tiled"]["ok"] == 6 and s["by_family"]["tiled"]["wrong_result"] == 1
    assert s["by_family"]["splitk"] == {"ok": 3, "unsupported": 0, "compile_error": 0, "runtime_error": 1,
                                        "timeout": 1, "wrong_result": 0}
    assert s["gpus"] == [GPU] and s["archs"] == ["sm_90"]
    assert s["versions"] == {"tiledispatch": ["0.1.0"], "triton": ["3.6.0"], "torch": ["2.13.0"],
                             "cuda": ["12.8"]}
    assert s["time_range"] == {"first": "2025-01-02T03:04:00", "last": "2025-01-02T03:04:16"}
    json.dumps(s)  # plain Python values only


def test_oracle_best_second_median_vendor(table):
    r = table.loc[P1.signature()]
    assert (r["best_kernel"], r["second_kernel"], r["vendor_kernel"], r["n_ok"]) == (K2.name, K1.name, VENDOR, 3)
    assert (r["best_ms"], r["second_ms"], r["second_ratio"], r["median_ratio"]) == (0.25, 0.5, 2.0, 2.0)
    assert r["vendor_speedup"] == pytest.approx(1.2)
    assert r["best_tflops"] == pytest.approx(P1.flops / 0.25 / 1e9)
    assert r["best_gbps"] == pytest.approx(P1.min_bytes / 0.25 / 1e6)
    assert r["tag"] == "unit"


def test_oracle_ignores_failed_wrong_and_untimed_rows(table):
    p2 = table.loc[P2.signature()]   # the fast wrong_result of K2 must not win
    assert (p2["best_kernel"], p2["n_ok"], p2["second_kernel"]) == (K1.name, 1, "")
    assert math.isnan(p2["second_ratio"]) and p2["median_ratio"] == 1.0 and p2["vendor_speedup"] == 0.5
    p3 = table.loc[P3.signature()]   # only the vendor worked: no best kernel, the vendor never wins
    assert (p3["best_kernel"], p3["n_ok"]) == ("", 0) and math.isnan(p3["best_ms"])
    assert p3["vendor_ms"] == 0.05 and math.isnan(p3["vendor_speedup"])
    p4 = table.loc[P4.signature()]
    assert (p4["best_kernel"], p4["second_ratio"], p4["median_ratio"]) == (K3.name, 4.0, 2.5)
    assert p4["vendor_kernel"] == "" and math.isnan(p4["vendor_speedup"])
    p5 = table.loc[P5.signature()]   # K1's ok-with-NaN row is no timing; the 0.3 tie goes to the smaller name
    assert (p5["n_ok"], p5["best_kernel"], p5["second_kernel"], p5["second_ratio"]) == (2, K3.name, K2.name, 1.0)
    assert list(table.index) == sorted(p.signature() for p in (P1, P2, P3, P4, P5))


def test_oracle_summary(table):
    s = analysis.oracle_summary(table.reset_index())
    assert (s["problems"], s["problems_with_ok"], s["distinct_best_kernels"]) == (5, 4, 3)
    assert s["geomean_second_ratio"] == pytest.approx(2.0)            # (2 * 4 * 1) ** (1/3)
    assert s["geomean_median_ratio"] == pytest.approx(5.0 ** 0.25)    # (2 * 1 * 2.5 * 1) ** (1/4)
    assert s["best_counts"] == [{"kernel": K3.name, "count": 2, "share": 0.5},
                                {"kernel": K2.name, "count": 1, "share": 0.25},
                                {"kernel": K1.name, "count": 1, "share": 0.25}]
    assert s["problems_with_vendor"] == 2 and s["vendor_wins"] == 1
    assert s["geomean_vendor_speedup"] == pytest.approx(math.sqrt(1.2 * 0.5))


def test_largest_gaps_and_records(table):
    full = table.reset_index()
    assert list(analysis.largest_gaps(full, 2)["problem"]) == [P4.signature(), P1.signature()]
    ordered = analysis.largest_gaps(full, 0)
    assert len(ordered) == 5 and list(ordered["problem"])[2] == P5.signature()
    with pytest.raises(BadInput, match="top=-1"):
        analysis.largest_gaps(full, -1)
    rows = analysis.records(ordered)
    assert rows[0]["best_kernel"] == K3.name and type(rows[0]["n_ok"]) is int
    assert type(rows[0]["best_ms"]) is float


def test_duplicates_are_counted_and_the_fastest_kept(tmp_path):
    cells = CELLS + [(P1, K1, "ok", 0.1), (P1, K1, "timeout", NAN)]
    frame = load_frame(write_dataset(tmp_path / "dup", cells))
    assert analysis.summary(frame)["duplicate_pairs"] == 1
    best = analysis.oracle(frame).set_index("problem").loc[P1.signature()]
    assert (best["best_kernel"], best["best_ms"], best["n_ok"], best["second_kernel"]) == (K1.name, 0.1, 3, K2.name)


def test_empty_dataset(tmp_path):
    dataset = Dataset(tmp_path / "empty")
    dataset.open("gemm", "none", "fp16", GPU, resume=False, extra={})
    frame = load_frame(dataset.path)
    s = analysis.summary(frame)
    assert (s["rows"], s["problems"], s["kernels"], s["coverage"], s["duplicate_pairs"]) == (0, 0, 0, 0.0, 0)
    assert s["time_range"] == {"first": None, "last": None}
    table = analysis.oracle(frame)
    assert table.empty and list(table.columns) == list(analysis.ORACLE_COLUMNS)
    stats = analysis.oracle_summary(table)
    assert stats["problems"] == 0 and math.isnan(stats["geomean_second_ratio"]) and stats["best_counts"] == []


def test_missing_column_is_named(frame):
    with pytest.raises(BadInput, match="status"):
        analysis.summary(frame.drop(columns=["status"]))


def test_numeric_timestamps_and_geomean():
    import pandas as pd

    span = analysis._time_range(pd.Series([86400.0, 0.0, None]))
    assert span == {"first": "1970-01-01T00:00:00+00:00", "last": "1970-01-02T00:00:00+00:00"}
    assert analysis.geomean([2.0, 8.0, NAN, -1.0, 0.0]) == pytest.approx(4.0)
    assert math.isnan(analysis.geomean([]))
