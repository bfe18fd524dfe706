"""The selection step: `auto` trusts a sure ranking, measures an unsure one once (on a GPU) and remembers the
winner in the tuning DB, so that the same problem later is a lookup."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.dispatch import decide
from tiledispatch.select import selector
from tiledispatch.testing import small_config

FP32 = [small_config("tiled", "rcr", "fp32", block=(32, 32, 32)), small_config("tiled", "rcr", "fp32",
                                                                                block=(16, 32, 32))]
PROBLEM = td.GemmProblem(40, 24, 56, dtype="fp32")


@pytest.fixture
def registry(build_registry, tmp_path):
    return build_registry(FP32, tuning_db=tmp_path / "db.json")


def test_a_rules_ranking_is_unsure_and_a_model_ranking_of_known_kinds_is_not(registry):
    plans = registry.plans(PROBLEM)
    rules_only = selector.by_model_or_rules(plans, PROBLEM, registry.arch, None, "no cost model")
    assert selector.unsure(rules_only) == "ranked by the rules alone"
    single = selector.by_model_or_rules(plans[:1], PROBLEM, registry.arch, None, "no cost model")
    assert selector.unsure(single) is None
    with_unknown = selector.Ranking(rules_only.ranked, "ml", "", unranked=plans[:1])
    assert "cannot rank" in selector.unsure(with_unknown)
    assert selector.to_measure(with_unknown, 1) == [rules_only.ranked[0][0], plans[0]]


def test_auto_does_not_measure_on_the_interpreter(registry):
    chosen = registry.select(PROBLEM, "auto")
    assert chosen.strategy == "rules" and not registry.tuning_db.entries


def test_unsure_auto_measures_once_and_later_looks_up(registry, monkeypatch):
    timed = []
    monkeypatch.setattr(decide, "_can_measure", lambda device: True)
    import tiledispatch.bench.tune as tune

    real = tune.time_plans
    monkeypatch.setattr(tune, "time_plans", lambda *a, **k: timed.append(k) or real(*a, **k))
    first = registry.select(PROBLEM, "auto")
    assert first.strategy == "measured" and timed == [{"quick": True}]
    assert first.ranking_unit == "ms measured" and {n for n, _ in first.ranking} == {k.name for k in registry}
    assert any(note.startswith("unsure: ranked by the rules alone") for note in first.notes)
    registry.selections.clear()
    again = registry.select(PROBLEM, "auto")
    assert again.strategy == "tuning_db" and again.kernel is first.kernel and len(timed) == 1


def test_measuring_can_be_switched_off(registry, monkeypatch):
    monkeypatch.setenv("TILEDISPATCH_MEASURE", "0")
    assert not decide._can_measure(registry.default_device())


def test_the_vendor_plan_is_measured_against_ours_and_never_ranked_by_rules(registry, monkeypatch):
    registry.add("vendor-cublas-gemm")
    plans = registry.plans(PROBLEM)
    assert [p.kernel.name for p in plans][-1] == "vendor-cublas-gemm"
    ranking = selector.by_model_or_rules(plans, PROBLEM, registry.arch, None, "no cost model")
    assert [p.kernel.name for p in ranking.unranked] == ["vendor-cublas-gemm"]
    assert "vendor-cublas-gemm" not in {p.kernel.name for p, _ in ranking.ranked}
    assert registry.select(PROBLEM, "rules").kernel.name != "vendor-cublas-gemm"
    assert registry.select(PROBLEM, "auto").kernel.name != "vendor-cublas-gemm"   # the interpreter: no timing
    monkeypatch.setattr(decide, "_can_measure", lambda device: True)
    registry.selections.clear()
    measured = registry.select(PROBLEM, "auto")
    assert measured.strategy == "measured" and "vendor-cublas-gemm" in {name for name, _ in measured.ranking}
