"""A warm select (a problem seen before) is a lookup: it ranks nothing, returns an independent copy, and is
forgotten when what it depends on changes (kernels declared, a tuning DB entry)."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.select import selector
from tiledispatch.testing import suites

PROBLEM = td.GemmProblem(40, 48, 72, dtype="fp16")


@pytest.fixture
def registry(build_registry):
    return build_registry(suites.select_configs())


@pytest.fixture
def ranked(monkeypatch):
    calls = []
    original = selector.by_rules

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(selector, "by_rules", counting)
    return calls


@pytest.mark.parametrize("strategy", ["auto", "rules", "ml", "first_fit"])
def test_second_select_of_a_problem_ranks_nothing(registry, ranked, strategy):
    first = registry.select(PROBLEM, strategy)
    count = len(ranked)
    second = registry.select(PROBLEM, strategy)
    assert len(ranked) == count and second.kernel is first.kernel and second.ranking == first.ranking
    second.notes.append("changed by the caller")
    assert "changed by the caller" not in registry.select(PROBLEM, strategy).notes
    assert registry.select(td.GemmProblem(41, 48, 72, dtype="fp16"), strategy).kernel is not None


def test_declaring_a_kernel_forgets_the_selection(registry, ranked, build_registry):
    registry.select(PROBLEM, "rules")
    count = len(ranked)
    registry.add(suites.aligned_configs()[0])
    registry.select(PROBLEM, "rules")
    assert len(ranked) == count + 1


def test_a_tuning_db_entry_changes_the_auto_selection(registry, tmp_path):
    registry = td.Registry("sm_90", tuning_db=tmp_path / "db.json")
    for cfg in suites.select_configs():
        registry.add(cfg)
    registry.build(max_workers=2)
    before = registry.select(PROBLEM, "auto")
    other = next(k for k in registry.kernels if k.name != before.kernel.name and k.is_supported(PROBLEM))
    registry.tuning_db.store(registry.device_name(registry.default_device()), PROBLEM.signature(), other.name,
                             {other.name: 1.0})
    after = registry.select(PROBLEM, "auto")
    assert after.strategy == "tuning_db" and after.kernel is other
