"""Rank the space, compile the winner (dispatch/space.py): `auto` ranks every declared kernel with the shipped
cost model, built or not, and compiles only its pick and the runner-up; a failed compile falls to the next
plan; TILEDISPATCH_RANK_SPACE turns it off; a warm repeat builds nothing. Builds go through a stub pool
(testing/builds.py) except in the td.gemm test, whose kernels the session cache holds."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.dispatch import decide, defaults, entry, space
from tiledispatch.errors import CacheError, CompileError
from tiledispatch.select import cost_model, selector
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.testing import builds, check_against_reference, matrix, small_config, suites

# six fp16 rcr kernels of the CPU lane's suites (compiled into the session cache by the `universe` fixture)
SPACE = [c for c in suites.all_configs()
         if c.dtype == "fp16" and c.layout == "rcr" and c.epilogue.is_identity]
PROBLEM = td.GemmProblem(48, 40, 32, dtype="fp16")


def model_order(problem: td.GemmProblem = PROBLEM) -> list[str]:
    """The shipped fp16 model's ranking of every SPACE kernel for the problem, best first."""
    registry = td.Registry("sm_90")
    for cfg in SPACE:
        registry.add(cfg)
    model, why = cost_model.shipped_model("sm_90", problem)
    ranking = selector.by_model_or_rules(selector.plans_of(registry.kernels, problem), problem, registry.arch,
                                         model, why)
    assert ranking.source == "ml" and not ranking.unranked
    return [plan.kernel.name for plan, _ in ranking.ranked]


ORDER = model_order()


@pytest.fixture
def stub(monkeypatch, tmp_path):
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "1")
    return builds.install(monkeypatch, builds.StubBuilds(tmp_path / "entries"))


def space_registry(tmp_path, warm: list[str] | None = None) -> td.Registry:
    """The model's worst kernel built (or `warm`), every SPACE kernel declared on demand; a private cache."""
    registry = td.Registry("sm_90", cache_dir=tmp_path / "cache", tuning_db=tmp_path / "db.json")
    for name in warm or ORDER[-1:]:
        registry.add(name)
    registry.build(max_workers=1)
    for cfg in SPACE:
        registry.add(cfg, on_demand=True)
    return registry


def test_auto_ranks_unbuilt_kernels_and_compiles_only_the_pick_and_the_runner_up(stub, tmp_path):
    registry = space_registry(tmp_path)
    assert stub.batches == [ORDER[-1:]] and sum(k.built for k in registry) == 1
    chosen = registry.select(PROBLEM, "auto")
    assert chosen.kernel.name == ORDER[0] and chosen.strategy == "ml"
    assert [name for name, _ in chosen.ranking] == ORDER            # every declared kernel ranked
    assert stub.batches[1:] == [ORDER[:2]]                           # one batch: the pick and the runner-up
    assert {k.name for k in registry if k.built} == {ORDER[0], ORDER[1], ORDER[-1]}
    assert chosen.space["pick"] == "on_demand" and set(chosen.space["compiled"]) == set(ORDER[:2])
    assert chosen.space["ranked"] == len(SPACE) and chosen.space["compile_s"] > 0
    assert any("compiled on demand in" in note for note in chosen.notes), chosen.notes


def test_unbuilt_plans_follow_the_validity_of_built_ones(stub, tmp_path):
    registry = space_registry(tmp_path)
    odd = td.GemmProblem(37, 45, 100, dtype="fp16")   # align 1: the align-16 kernels run it on padded copies
    before = [(p.label, p.problem) for p in registry.space_plans(odd)]
    assert any(label.endswith("(padded)") for label, _ in before)
    registry.compile_on_demand(registry.kernels)
    assert [(p.label, p.problem) for p in registry.plans(odd)] == before


def test_a_failed_compile_of_the_pick_falls_to_the_next_plan(stub, tmp_path):
    stub.fail[ORDER[0]] = "CompilationError: out of registers"
    registry = space_registry(tmp_path)
    chosen = registry.select(PROBLEM, "auto")
    assert chosen.kernel.name == ORDER[1] and stub.batches[1:] == [ORDER[:2]]
    assert registry.failed == {ORDER[0]: "CompilationError: out of registers"}
    assert chosen.space["failed"] == registry.failed and ORDER[0] not in [n for n, _ in chosen.ranking]
    assert any("on-demand compile failed" in note and ORDER[0] in note for note in chosen.notes)
    registry.selections.clear()
    assert registry.select(PROBLEM, "auto").kernel.name == ORDER[1] and len(stub.batches) == 2   # not retried


def test_every_pick_failing_ends_on_a_built_plan_after_a_bounded_number_of_tries(stub, tmp_path):
    stub.fail.update({name: "boom" for name in ORDER[:-1]})
    registry = space_registry(tmp_path)
    chosen = registry.select(PROBLEM, "auto")
    assert chosen.kernel.name == ORDER[-1] and chosen.space["pick"] == "prebuilt"
    assert len(stub.names) - 1 <= space.MAX_FAILURES + space.RUNNER_UP


def test_no_plan_left_raises_a_compile_error(stub, tmp_path):
    stub.fail.update({name: "boom" for name in ORDER})
    registry = space_registry(tmp_path, warm=[])
    with pytest.raises(CompileError) as info:
        registry.select(PROBLEM, "auto")
    assert "boom" in str(info.value)


def test_errors_other_than_a_failed_compile_raise(stub, tmp_path):
    registry = space_registry(tmp_path)
    stub.error = CacheError("cannot use the build cache dir", field="TILEDISPATCH_CACHE_DIR")
    with pytest.raises(CacheError):
        registry.select(PROBLEM, "auto")


def test_the_setting_turns_the_space_off(stub, tmp_path, monkeypatch):
    registry = space_registry(tmp_path)
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "0")
    chosen = registry.select(PROBLEM, "auto")
    assert chosen.kernel.name == ORDER[-1] and chosen.space is None and len(stub.batches) == 1
    assert [name for name, _ in chosen.ranking] == ORDER[-1:]


def test_the_space_is_ranked_on_a_gpu_unless_turned_off(monkeypatch, tmp_path):
    registry = td.Registry("sm_90", cache_dir=tmp_path)
    monkeypatch.delenv("TILEDISPATCH_RANK_SPACE", raising=False)
    monkeypatch.delenv("TILEDISPATCH_INTERPRET", raising=False)
    monkeypatch.setattr(registry, "default_device", lambda: torch.device("cuda", 0))
    assert space.enabled(registry)                     # on by default on a GPU
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "0")
    assert not space.enabled(registry)
    monkeypatch.setattr(registry, "default_device", lambda: torch.device("cpu"))
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "1")
    assert space.enabled(registry)                     # on request, under the interpreter too
    monkeypatch.delenv("TILEDISPATCH_RANK_SPACE")
    assert not space.enabled(registry)                 # off by default without a GPU


def test_a_warm_repeat_builds_and_ranks_nothing(stub, tmp_path, monkeypatch):
    registry = space_registry(tmp_path)
    first = registry.select(PROBLEM, "auto")
    ranked = []
    monkeypatch.setattr(space, "by_model_or_rules", lambda *a, **k: ranked.append(a) or pytest.fail("ranked"))
    chosen = []
    real = decide._choose
    monkeypatch.setattr(decide, "_choose", lambda *a: chosen.append(a) or real(*a))
    assert registry.select(PROBLEM, "auto").kernel is first.kernel and not chosen   # a memo lookup
    registry.compile_on_demand([registry.get(ORDER[2])])   # another build: every stamp changes
    again = registry.select(PROBLEM, "auto")
    assert again.kernel is first.kernel and len(chosen) == 1 and not ranked   # the remembered ranking, walked
    assert again.space["compiled"] == [] and any("compiled on demand earlier" in n for n in again.notes)
    assert stub.batches[1:] == [ORDER[:2], ORDER[2:3]]


def test_unsure_auto_times_its_top_k_compiled_on_demand_and_remembers(stub, tmp_path, monkeypatch):
    import tiledispatch.bench.tune as tune

    monkeypatch.setenv("TILEDISPATCH_MEASURE_TOP_K", "2")
    monkeypatch.setattr(decide, "_can_measure", lambda device: True)
    timed = []

    def fake_time(plans, problem, device, quick=False):   # the stub's kernels cannot run: made-up timings
        timed.append([p.label for p in plans])
        times = {p.label: 1.0 + i for i, p in enumerate(reversed(plans))}
        return min(plans, key=lambda p: times[p.label]), times

    monkeypatch.setattr(tune, "time_plans", fake_time)
    registry = space_registry(tmp_path)
    registry.add("vendor-cublas-gemm")          # a plan no model ranks: auto is unsure
    chosen = registry.select(PROBLEM, "auto")
    assert timed == [ORDER[:2] + ["vendor-cublas-gemm"]] and stub.batches[1:] == [ORDER[:2]]
    assert chosen.strategy == "measured" and chosen.kernel.name == "vendor-cublas-gemm"
    assert chosen.space["compiled"] and any(n.startswith("unsure:") for n in chosen.notes)
    winner = ORDER[1]
    registry.tuning_db.store(registry.device_name(registry.default_device()), PROBLEM.signature(), winner,
                              {winner: 0.5})
    fresh = space_registry(tmp_path)           # another process: the DB names an unbuilt kernel of the space
    fresh.add("vendor-cublas-gemm")
    looked_up = fresh.select(PROBLEM, "auto")
    assert looked_up.strategy == "tuning_db" and looked_up.kernel.name == winner and len(timed) == 1
    assert stub.batches[-1] == [winner]


def test_without_a_model_auto_keeps_the_rules_over_the_built_set(stub, tmp_path):
    fp32 = [small_config("tiled", "rcr", "fp32", block=b) for b in ((32, 32, 32), (16, 32, 32))]
    registry = td.Registry("sm_90", cache_dir=tmp_path / "cache")
    registry.add(fp32[0])
    registry.build(max_workers=1)
    registry.add(fp32[1], on_demand=True)
    chosen = registry.select(td.GemmProblem(40, 24, 56, dtype="fp32"), "auto")
    assert chosen.strategy == "rules" and chosen.kernel.name == fp32[0].name and chosen.space is None
    assert stub.batches == [[fp32[0].name]]


def test_td_gemm_compiles_its_pick_on_first_use_then_runs_from_the_memo(universe, monkeypatch):
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "1")
    registry = td.Registry("sm_90")            # the session cache: every SPACE kernel is there
    registry.add(ORDER[-1])
    registry.build(max_workers=1)
    for cfg in SPACE:
        registry.add(cfg, on_demand=True)
    defaults.install(("gemm", "fp16", "rcr", td.Epilogue()), registry)
    try:
        compiles = []
        real = registry.compile_on_demand
        monkeypatch.setattr(registry, "compile_on_demand",
                            lambda ks, **kw: compiles.append(ks) or real(ks, **kw))
        a, b = matrix(48, 32, dtype="fp16"), matrix(32, 40, letter="c", dtype="fp16")
        check_against_reference(td.gemm(a, b), GemmArgs(a, b), "fp16")
        picked = entry.gemm_plan(a, b)
        assert picked.kernel.name == ORDER[0] and picked.space["pick"] == "on_demand"
        assert set(picked.space["cached"]) == set(ORDER[:2]) and len(compiles) == 1
        check_against_reference(td.gemm(a, b), GemmArgs(a, b), "fp16")
        assert len(compiles) == 1 and {k.name for k in registry if k.built} == {*ORDER[:2], ORDER[-1]}
    finally:
        defaults.reset()


def test_the_default_registries_declare_the_space_where_a_model_serves_the_key(stub, monkeypatch):
    registry = td.Registry("sm_90")
    assert space.declare_space(registry, "gemm_fp16_rcr_essential", PROBLEM, td.Epilogue()) == \
        "gemm_fp16_rcr_candidates"
    assert len(registry.on_demand) == len(registry) > 0 and not stub.batches
    registry.build()
    assert not stub.batches                                     # build() leaves the space to its picks
    fp32 = td.Registry("sm_90")
    assert space.declare_space(fp32, "gemm_fp32_rcr_essential", td.GemmProblem(8, 8, 8, dtype="fp32"),
                               td.Epilogue()) is None and len(fp32) == 0
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "0")
    off = td.Registry("sm_90")
    assert space.declare_space(off, "gemm_fp16_rcr_essential", PROBLEM, td.Epilogue()) is None
    assert len(off) == 0


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_the_conv_space_of_a_7x7_depthwise_layer_ranks_the_halo_kernels(direction, tmp_path):
    """The 2-D `_all` space holds the halo (and for bwd_weight the halofh) instances, they are valid plans of a
    ConvNeXt 7x7 depthwise layer (nothing built), and the shipped model ranks every plan of that space: none
    is left unranked."""
    problem = td.ConvProblem(direction, 32, 384, 384, 384, (14, 14), (7, 7), 1, 3, 1, "bf16")
    registry = td.Registry(td.get_arch("sm_90"), cache_dir=tmp_path)
    registry.add_preset(f"conv_{direction}_bf16_2d_all", ("none", False), on_demand=True)
    plans = registry.space_plans(problem)
    halo = [p for p in plans if p.kernel.config.kloop == "halo"]
    assert len(halo) == 18
    halofh = [p for p in plans if p.kernel.config.kloop == "halofh"]   # bwd_weight only; 7-wide windows
    assert len(halofh) == (17 if direction == "bwd_weight" else 0)
    model, why = cost_model.shipped_model("sm_90", problem)
    assert model is not None, why
    ranking = selector.by_model_or_rules(plans, problem, registry.arch, model)
    assert ranking.source != "rules" and not ranking.unranked
    assert len(ranking.ranked) == len(plans)
