"""tune on the CPU interpreter stores the winner; a new process picks it up; foreign DB files are refused."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

import tiledispatch as td
from tiledispatch.select.tuning_db import FORMAT_VERSION, TuningDB, default_path
from tiledispatch.testing import suites

PROBLEM = td.GemmProblem(40, 48, 72, dtype="fp16")
DEVICE = "cpu-interpreter"


@pytest.fixture(scope="module")
def names(build_registry):
    build_registry(suites.select_configs())
    return [c.name for c in suites.select_configs()]


def registry_with_db(build_registry, path):
    return build_registry(suites.select_configs(), tuning_db=path)


def test_tune_stores_the_winner_and_auto_reuses_it(build_registry, names, tmp_path):
    db_path = tmp_path / "tuning.json"
    registry = registry_with_db(build_registry, db_path)
    tuned = registry.select(PROBLEM, "tune")
    assert tuned.strategy == "tune" and tuned.kernel.name in names
    timed = dict(tuned.ranking)
    assert set(timed) == set(names) and all(t > 0 for t in timed.values())
    assert min(timed, key=timed.get) == tuned.kernel.name
    data = json.loads(db_path.read_text())
    assert data["arch"] == "sm_90" and data["format"] == FORMAT_VERSION
    entry = data["entries"][TuningDB.key(DEVICE, PROBLEM.signature())]
    assert entry["kernel"] == tuned.kernel.name and entry["time_ms"] == min(entry["timings_ms"].values())

    # a new Registry (fresh TuningDB object) in this process
    again = registry_with_db(build_registry, db_path).select(PROBLEM, "auto")
    assert again.strategy == "tuning_db" and again.kernel.name == tuned.kernel.name
    # other problems are not affected
    other = registry_with_db(build_registry, db_path).select(td.GemmProblem(40, 48, 73, dtype="fp16"), "auto")
    assert other.strategy == "ml"   # a DB miss: the shipped fp16 cost model ranks


SELECT_IN_NEW_PROCESS = textwrap.dedent("""
    import json, sys
    import tiledispatch as td
    registry = td.Registry("sm_90")
    for name in json.loads(sys.argv[1]):
        registry.add(name)
    report = registry.build(max_workers=1)
    assert not report.built and not report.failed, report
    chosen = registry.select(td.GemmProblem(40, 48, 72, dtype="fp16"), "auto")
    print(json.dumps({"strategy": chosen.strategy, "kernel": chosen.kernel.name}))
""")


@pytest.mark.slow
def test_a_new_process_gets_the_tuned_kernel(build_registry, names, tmp_path, monkeypatch):
    db_path = tmp_path / "env-tuning.json"
    monkeypatch.setenv("TILEDISPATCH_TUNING_DB", str(db_path))
    registry = build_registry(suites.select_configs())          # DB path from the environment
    assert registry.tuning_db.path == db_path
    tuned = registry.select(PROBLEM, "tune")
    assert db_path.exists()
    import os

    result = subprocess.run([sys.executable, "-c", SELECT_IN_NEW_PROCESS, json.dumps(names)],
                            env=dict(os.environ), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    chosen = json.loads(result.stdout.strip().splitlines()[-1])
    assert chosen == {"strategy": "tuning_db", "kernel": tuned.kernel.name}


def test_db_hit_for_a_kernel_not_in_the_registry_falls_back_to_the_ranking(build_registry, tmp_path):
    db_path = tmp_path / "stale.json"
    TuningDB("sm_90", db_path).store(DEVICE, PROBLEM.signature(), "gemm-some-kernel-we-do-not-have", {
        "gemm-some-kernel-we-do-not-have": 0.1})
    chosen = registry_with_db(build_registry, db_path).select(PROBLEM, "auto")
    assert chosen.strategy == "ml"   # the stale DB entry is ignored: the cost model ranks


def test_store_merges_entries(tmp_path):
    db = TuningDB("sm_90", tmp_path / "db.json")
    db.store("dev", "sig-1", "k1", {"k1": 1.0, "k2": 2.0})
    db.store("dev", "sig-2", "k2", {"k2": 0.5})
    fresh = TuningDB("sm_90", tmp_path / "db.json")
    assert fresh.lookup("dev", "sig-1")["kernel"] == "k1" and fresh.lookup("dev", "sig-2")["kernel"] == "k2"
    assert fresh.lookup("other-dev", "sig-1") is None
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]


def stamped(path, **changes):
    import triton

    data = {"format": FORMAT_VERSION, "tiledispatch": td.__version__, "triton": triton.__version__, "arch": "sm_90",
            "entries": {TuningDB.key(DEVICE, PROBLEM.signature()): {"kernel": "x", "time_ms": 1.0}}}
    data.update(changes)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("changes", [{"triton": "0.0.1"}, {"arch": "sm_80"}, {"tiledispatch": "0.0.0"},
                                     {"format": FORMAT_VERSION + 1}])
def test_db_stamped_for_other_versions_or_arch_is_refused_and_set_aside(tmp_path, build_registry, changes, caplog):
    path = stamped(tmp_path / "foreign.json", **changes)
    original = path.read_text()
    with caplog.at_level("WARNING", logger="tiledispatch"):
        assert TuningDB("sm_90", path).lookup(DEVICE, PROBLEM.signature()) is None
    (aside,) = tmp_path.glob("foreign.json.refused-*")
    assert aside.read_text() == original, "a refused file is kept, moved aside"
    assert len([r for r in caplog.records if "refused" in r.getMessage() or "written for" in r.getMessage()]) == 1
    assert registry_with_db(build_registry, path).select(PROBLEM, "auto").kernel is not None
    TuningDB("sm_90", path).store(DEVICE, "sig", "k", {"k": 1.0})
    assert TuningDB("sm_90", path).lookup(DEVICE, "sig")["kernel"] == "k"


def test_matching_stamp_is_accepted_and_garbage_is_set_aside_once(tmp_path, caplog):
    assert TuningDB("sm_90", stamped(tmp_path / "ok.json")).lookup(DEVICE, PROBLEM.signature())["kernel"] == "x"
    for garbage in ("{not json", "[1, 2]", '{"entries": 3}'):
        (tmp_path / "bad.json").write_text(garbage)
        db = TuningDB("sm_90", tmp_path / "bad.json")
        with caplog.at_level("WARNING", logger="tiledispatch"):
            assert db.lookup(DEVICE, "sig") is None and db.lookup(DEVICE, "other") is None
        db.store(DEVICE, "sig", "k", {"k": 1.0})     # rebuilt
        assert TuningDB("sm_90", tmp_path / "bad.json").lookup(DEVICE, "sig")["kernel"] == "k"
    assert len(list(tmp_path.glob("bad.json.refused-*"))) >= 1
    assert len([r for r in caplog.records if "unreadable" in r.getMessage()]) == 3   # once per bad file


def test_default_path_is_per_arch_and_versions_under_the_cache(isolated_cache, monkeypatch, tmp_path):
    p90, p80 = default_path("sm_90"), default_path("sm_80")
    assert p90.parent == isolated_cache / "tuning" and p90.name.startswith("sm_90-") and p90 != p80
    import triton

    monkeypatch.setattr(triton, "__version__", "0.0.1")
    assert default_path("sm_90") != p90
    monkeypatch.setenv("TILEDISPATCH_TUNING_DB", str(tmp_path / "x.json"))
    assert default_path("sm_90") == tmp_path / "x.json"


def _store_many(path: str, worker: int, count: int) -> None:
    db = TuningDB("sm_90", path)
    for i in range(count):
        db.store(DEVICE, f"sig-{worker}-{i}", "k", {"k": float(i)})


def test_two_processes_storing_concurrently_lose_no_entry(tmp_path):
    import multiprocessing

    path = str(tmp_path / "shared.json")
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_store_many, args=(path, w, 25)) for w in range(2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
        assert p.exitcode == 0
    entries = TuningDB("sm_90", path).entries
    assert {key for key in entries} == {TuningDB.key(DEVICE, f"sig-{w}-{i}") for w in range(2) for i in range(25)}


def test_db_entry_won_by_the_vendor_gives_ours_with_the_vendor_off(build_registry, names, tmp_path, monkeypatch):
    # an entry stored with the vendor on names cuBLAS; with TILEDISPATCH_VENDOR=0 its kept timings pick ours
    # (before: the vendor label matched no plan and the entry was ignored)
    db_path = tmp_path / "vendor.json"
    timings = {"vendor-cublas-gemm": 0.5, names[1]: 0.9, names[0]: 1.2}
    TuningDB("sm_90", db_path).store(DEVICE, PROBLEM.signature(), "vendor-cublas-gemm", timings)
    monkeypatch.setenv("TILEDISPATCH_VENDOR", "0")
    chosen = registry_with_db(build_registry, db_path).select(PROBLEM, "auto")
    assert chosen.strategy == "tuning_db" and chosen.kernel.name == names[1]
