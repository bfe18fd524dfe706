"""KernelStore's space declared on demand: kept out of build(), part of space_plans, round-tripped through the
registry JSON, and moved into the built set by a plain add."""
from __future__ import annotations

import json

import tiledispatch as td
from tiledispatch.testing import builds, small_config

PLAIN = small_config("tiled", "rcr", "fp16")
WIDE = small_config("tiled", "rcr", "fp16", block=(16, 64, 32))
PROBLEM = td.GemmProblem(48, 40, 32, dtype="fp16")


def test_build_leaves_the_on_demand_kernels_to_their_picks(monkeypatch, tmp_path):
    stub = builds.install(monkeypatch, builds.StubBuilds(tmp_path))
    registry = td.Registry("sm_90", cache_dir=tmp_path / "cache")
    registry.add(PLAIN)
    registry.add(WIDE, on_demand=True)
    report = registry.build(max_workers=1)
    assert report.built == [PLAIN.name] and stub.batches == [[PLAIN.name]]
    assert [k.name for k in registry.on_demand] == [WIDE.name] and registry.is_on_demand(WIDE.name)
    assert [p.kernel.name for p in registry.plans(PROBLEM)] == [PLAIN.name]
    assert {p.kernel.name for p in registry.space_plans(PROBLEM)} == {PLAIN.name, WIDE.name}
    report = registry.compile_on_demand([registry.get(WIDE.name)])
    assert report.built == [WIDE.name] and stub.batches[-1] == [WIDE.name]
    assert registry.get(WIDE.name).built and WIDE.name in registry.compiled_on_demand


def test_a_failed_build_is_recorded_and_leaves_the_space(monkeypatch, tmp_path):
    builds.install(monkeypatch, builds.StubBuilds(tmp_path, fail={WIDE.name: "CompilationError: no"}))
    registry = td.Registry("sm_90", cache_dir=tmp_path / "cache")
    registry.add(WIDE, on_demand=True)
    report = registry.compile_on_demand(registry.kernels)
    assert report.failed == registry.failed == {WIDE.name: "CompilationError: no"}
    assert registry.space_plans(PROBLEM) == []


def test_a_plain_add_moves_a_kernel_into_the_built_set():
    registry = td.Registry("sm_90")
    registry.add(PLAIN, on_demand=True)
    version = registry.declared_version()
    registry.add(PLAIN, on_demand=True)
    assert registry.declared_version() == version and registry.is_on_demand(PLAIN.name)
    registry.add(PLAIN)
    assert not registry.is_on_demand(PLAIN.name) and registry.declared_version() != version
    registry.add(PLAIN, on_demand=True)   # declared already: stays in the built set
    assert not registry.on_demand


def test_the_json_round_trip_keeps_the_space_on_demand():
    registry = td.Registry("sm_90")
    registry.add(PLAIN)
    registry.add(WIDE, on_demand=True)
    data = json.loads(registry.to_json())
    assert data["kernels"] == [PLAIN.name] and data["on_demand"] == [WIDE.name]
    again = td.Registry.from_json(registry.to_json())
    assert [k.name for k in again] == [PLAIN.name, WIDE.name]
    assert [k.name for k in again.on_demand] == [WIDE.name]
    plain = td.Registry.from_json(json.dumps({"arch": "sm_90", "kernels": [PLAIN.name]}))
    assert "on_demand" not in json.loads(plain.to_json())
