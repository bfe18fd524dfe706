"""tools/derive_presets.py: the greedy set cover on synthetic timings, input merging, subsets, the CLI."""
from __future__ import annotations

import json
import math
import random

import pytest


@pytest.fixture(scope="module")
def dp(load_script):
    return load_script("tools/derive_presets.py")


def test_one_kernel_best_everywhere(dp):
    times = {"s1": {"a": 1.0, "b": 2.0}, "s2": {"a": 3.0, "b": 4.0}}
    cover = dp.greedy_cover(times)
    assert cover.kernels == ["a"]
    assert cover.wins == {"a": ["s1", "s2"]}
    assert cover.loss == {"s1": 1.0, "s2": 1.0} and not cover.uncovered


def test_generalist_first_then_specialists(dp):
    # c is 10% off on both shapes: the largest first gain; a and b then close the gaps (tie -> smaller name),
    # after which c wins nothing and is pruned.
    times = {"s1": {"a": 1.0, "b": 2.0, "c": 1.1}, "s2": {"a": 2.0, "b": 1.0, "c": 1.1}}
    cover = dp.greedy_cover(times)
    assert [s["kernel"] for s in cover.steps] == ["c", "a", "b"]
    assert [s["within"] for s in cover.steps] == [0, 1, 2]
    assert cover.steps[0]["gain"] == pytest.approx(2 * (10.0 - math.log(1.1)))
    assert cover.kernels == ["a", "b"] and cover.pruned == ["c"]
    assert cover.wins == {"a": ["s1"], "b": ["s2"]}
    unpruned = dp.greedy_cover(times, prune=False)
    assert unpruned.kernels == ["c", "a", "b"] and unpruned.wins["c"] == []


def test_a_seeded_cover_adds_to_the_seed_only(dp):
    """seed: kernels held as chosen; the cover adds what they leave open, max_kernels counts the additions."""
    times = {"s1": {"a": 1.0, "b": 2.0, "c": 3.0}, "s2": {"a": 3.0, "b": 1.0, "c": 2.0},
             "s3": {"a": 3.0, "b": 3.0, "c": 1.0}}
    cover = dp.greedy_cover(times, seed=["a"])
    assert set(cover.kernels) == {"b", "c"} and "a" not in cover.wins
    assert cover.wins == {"b": ["s2"], "c": ["s3"]} and not cover.uncovered
    one = dp.greedy_cover(times, seed=["a"], max_kernels=1)
    assert len(one.kernels) == 1 and len(one.uncovered) == 1
    assert dp.greedy_cover(times, seed=["a", "b", "c"]).kernels == []
    assert dp.greedy_cover(times, seed=["unknown"]).kernels == dp.greedy_cover(times).kernels


def test_tolerance_decides_when_to_stop(dp):
    times = {"s1": {"a": 1.0, "b": 1.5}, "s2": {"a": 1.015, "b": 1.0}}
    assert dp.greedy_cover(times, tolerance=0.02).kernels == ["a"]
    assert dp.greedy_cover(times, tolerance=0.01).kernels == ["a", "b"]


def test_missing_timings_are_penalized_and_covered(dp):
    # a cannot run s3 (wrong or unsupported plan): b must be added although it only runs s3.
    times = {"s1": {"a": 1.0}, "s2": {"a": 1.0}, "s3": {"b": 5.0}}
    cover = dp.greedy_cover(times)
    assert cover.kernels == ["a", "b"]
    assert cover.wins == {"a": ["s1", "s2"], "b": ["s3"]}


def test_max_kernels_reports_uncovered(dp):
    times = {"s1": {"a": 1.0, "b": 2.0}, "s2": {"a": 2.0, "b": 1.0}, "s3": {"c": 1.0}}
    cover = dp.greedy_cover(times, max_kernels=1)
    assert len(cover.kernels) == 1
    assert len(cover.uncovered) == 2
    assert math.isinf(max(cover.loss.values()))


def test_items_without_timings_are_left_out(dp):
    times = {"s1": {"a": 1.0}, "s2": {}, "s3": {"a": math.inf}}
    cover = dp.greedy_cover(times)
    assert cover.kernels == ["a"] and cover.no_timing == ["s2", "s3"]
    assert set(cover.loss) == {"s1"}


def test_random_matrices_are_covered_within_tolerance(dp):
    rng = random.Random(7)
    for _ in range(20):
        kernels = [f"k{i}" for i in range(rng.randint(2, 25))]
        times = {f"s{j}": {k: rng.uniform(1, 3) for k in kernels if rng.random() < 0.8} for j in range(30)}
        cover = dp.greedy_cover(times, tolerance=0.03)
        ran = [s for s, row in times.items() if row]
        assert not cover.uncovered and sorted(cover.no_timing) == sorted(set(times) - set(ran))
        assert all(loss <= 1.03 + 1e-12 for loss in cover.loss.values())
        assert sorted(s for wins in cover.wins.values() for s in wins) == sorted(ran)
        assert len(set(cover.kernels)) == len(cover.kernels) and all(cover.wins[k] for k in cover.kernels)
        # every chosen kernel lowered the objective
        assert all(step["gain"] > 0 for step in cover.steps)


def _result(gpu: str, rows: list[tuple[str, tuple[int, int, int], dict]]) -> dict:
    return {"benchmark": "gemm", "gpu": gpu, "arch": "sm_90",
            "rows": [{"combo": combo, "m": m, "n": n, "k": k, "shape": f"{m}x{n}x{k}", "timings": timings}
                     for combo, (m, n, k), timings in rows]}


def test_load_merges_padded_plans_and_gpus(dp, tmp_path):
    first = _result("NVIDIA H200", [("bf16_rcr", (17, 33, 40), {"a": {"ms": 2.0}, "b (padded)": {"ms": 1.0}}),
                                    ("fp16_rcr", (64, 64, 64), {"a": 1.0})])
    second = _result("NVIDIA H100", [("bf16_rcr", (17, 33, 40), {"a": {"ms": 3.0}})])
    paths = []
    for i, data in enumerate((first, second)):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(data))
    matrices = dp.load_matrices(paths)
    assert sorted(matrices) == ["bf16_rcr", "fp16_rcr"]
    assert matrices["bf16_rcr"].times == {"NVIDIA H200:17x33x40": {"a": 2.0, "b": 1.0},
                                          "NVIDIA H100:17x33x40": {"a": 3.0}}
    single = dp.load_matrices(paths[:1])
    assert single["fp16_rcr"].times == {"64x64x64": {"a": 1.0}}


def test_load_refuses_results_without_full_matrix(dp, tmp_path):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps({"gpu": "x", "rows": [{"combo": "bf16_rcr", "shape": "1x1x1"}]}))
    with pytest.raises(SystemExit, match="--full-matrix"):
        dp.load_matrices([path])


def test_split_subsets(dp):
    shapes = {(4096, 4096, 4096): "compute", (16, 4096, 4096): "memory", (64, 64, 64): "latency",
              (2048, 2048, 256): "memory"}
    matrix = dp.Matrix("bf16_rcr", "sm_90")
    for (m, n, k), tag in shapes.items():
        item = f"{m}x{n}x{k}"
        matrix.dims[item] = (m, n, k)
        matrix.times[item] = {f"best_{tag}": 1.0, "generic": 1.5}
    thresholds = {"compute_min": 1024, "memory_max_m": 64, "memory_max_k": 512, "latency_flops": 2**30}
    report = dp.derive({"bf16_rcr": matrix}, split=True, tolerance=0.02, max_kernels=None, missing_penalty=10.0,
                       thresholds=thresholds)["bf16_rcr"]
    assert set(report) == {"all", "compute", "memory", "latency"}
    assert report["compute"]["kernels"] == ["best_compute"]
    assert report["compute"]["items"] == 1
    # 16x4096x4096 (5.4e8 FLOPs) is both memory and latency; 64^3 is latency and memory (M <= 64)
    assert report["memory"]["items"] == 3 and report["latency"]["items"] == 2
    # `generic` (1.5x everywhere) is picked first, then superseded by the specialists and pruned
    assert set(report["all"]["kernels"]) == {"best_compute", "best_memory", "best_latency"}
    assert report["all"]["pruned"] == ["generic"]


def test_cli_writes_report_and_presets(dp, tmp_path, capsys):
    data = _result("NVIDIA H200", [("bf16_rcr", (4096, 4096, 4096), {"x": 1.0, "y": 1.2}),
                                   ("bf16_rcr", (16, 4096, 4096), {"x": 2.0, "y (padded)": 1.0})])
    src = tmp_path / "gemm_h200.json"
    src.write_text(json.dumps(data))
    out = tmp_path / "report.json"
    assert dp.main([str(src), "--split", "--out", str(out), "--emit-presets", str(tmp_path / "presets")]) == 0
    report = json.loads(out.read_text())
    assert report["covers"]["bf16_rcr"]["all"]["kernels"] == ["y", "x"]   # y: the larger first gain
    assert report["covers"]["bf16_rcr"]["all"]["wins"] == {"x": ["4096x4096x4096"], "y": ["16x4096x4096"]}
    preset = json.loads((tmp_path / "presets" / "gemm_bf16_rcr_derived.json").read_text())
    assert preset["configs"] == ["y", "x"] and preset["arch"] == "sm_90"
    assert (tmp_path / "presets" / "gemm_bf16_rcr_compute.json").exists()
    assert "wins 1: 16x4096x4096" in capsys.readouterr().out
