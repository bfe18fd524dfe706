"""The shipped cost models in selection: `ml` and `auto` rank with the model of the problem's (arch, op,
direction, dtype); without one, or with one of another arch or feature spec, they rank by rules and say why."""
from __future__ import annotations

import json
import shutil

import pytest

import tiledispatch as td
from tiledispatch.select import cost_model
from tiledispatch.testing import suites

KEYS = ("gemm_none_bf16", "gemm_none_fp16", "gemm_none_fp8e4m3", "conv_fwd_bf16", "conv_bwd_data_bf16", "conv_bwd_weight_bf16")


@pytest.fixture(autouse=True)
def fresh_models():
    cost_model._load.cache_clear()
    cost_model._standing_in.cache_clear()
    yield
    cost_model._load.cache_clear()
    cost_model._standing_in.cache_clear()


@pytest.mark.parametrize("key", KEYS)
def test_every_issue_model_is_shipped_for_sm90(key):
    from tiledispatch.ml.model import CostModel

    model = CostModel.load(cost_model.models_root() / "sm_90" / key, arch="sm_90")   # this version's spec
    op, direction, dtype = key.split("_", 1)[0], key.split("_", 1)[1].rsplit("_", 1)[0], key.rsplit("_", 1)[1]
    assert model.key == ("sm_90", op, direction, dtype) and model.meta["gpu"].startswith("NVIDIA")


def test_ml_and_auto_rank_with_the_model_when_one_matches(build_registry):
    configs = [c for c in suites.select_configs() if c.dtype == "fp16"]
    registry = build_registry(configs)
    problem = td.GemmProblem(40, 48, 72, dtype="fp16")
    for strategy in ("ml", "auto"):
        chosen = registry.select(problem, strategy)
        assert chosen.strategy == "ml" and any("cost model" in n for n in chosen.notes), chosen.notes
        scores = [s for _, s in chosen.ranking]
        assert scores == sorted(scores) and chosen.ranking[0][0] == chosen.kernel.name


def test_no_model_falls_back_to_rules_and_says_so(build_registry):
    configs = [c for c in suites.numeric_configs()
               if c.dtype == "fp32" and c.layout == "rcr" and c.epilogue.is_identity][:2]
    registry = build_registry(configs)
    chosen = registry.select(td.GemmProblem(40, 48, 72, dtype="fp32"), "ml")
    assert chosen.strategy == "rules" and any("no cost model for sm_90 gemm none fp32" in n for n in chosen.notes)


def test_a_model_of_another_arch_is_refused(tmp_path, monkeypatch, build_registry):
    target = tmp_path / "sm_90" / "gemm_none_fp16"
    shutil.copytree(cost_model.models_root() / "sm_90" / "gemm_none_fp16", target)
    meta = json.loads((target / "meta.json").read_text())
    meta["arch"] = "sm_100"
    (target / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setattr(cost_model, "models_root", lambda: tmp_path)
    registry = build_registry([c for c in suites.select_configs() if c.dtype == "fp16"])
    chosen = registry.select(td.GemmProblem(40, 48, 72, dtype="fp16"), "ml")
    assert chosen.strategy == "rules" and any("refused" in n and "sm_100" in n for n in chosen.notes), chosen.notes


def test_tune_confirms_the_models_top_five(build_registry, tmp_path):
    registry = td.Registry("sm_90", tuning_db=tmp_path / "db.json")
    for cfg in suites.all_configs():   # the fp16 rcr kernels without an epilogue (compiled for the CPU lane)
        if cfg.dtype == "fp16" and cfg.layout == "rcr" and cfg.epilogue.is_identity:
            registry.add(cfg)
    registry.build(max_workers=2)
    problem = td.GemmProblem(40, 48, 72, dtype="fp16")
    ranked = [name for name, _ in registry.select(problem, "ml").ranking]
    assert len(ranked) > 5
    tuned = registry.select(problem, "tune")
    assert {name for name, _ in tuned.ranking} == set(ranked[:5])
    assert registry.select(problem, "auto").strategy == "tuning_db"


def _model_without(tmp_path, monkeypatch, drop: set[str]) -> None:
    """Ship a copy of the fp16 GEMM model that was 'trained' without the kernel kinds in `drop`."""
    target = tmp_path / "sm_90" / "gemm_none_fp16"
    shutil.copytree(cost_model.models_root() / "sm_90" / "gemm_none_fp16", target)
    meta = json.loads((target / "meta.json").read_text())
    meta["kernel_kinds"] = [k for k in meta["kernel_kinds"] if k not in drop]
    (target / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setattr(cost_model, "models_root", lambda: tmp_path)


def test_kernels_of_kinds_the_model_never_saw_are_not_ranked_by_it(tmp_path, monkeypatch):
    _model_without(tmp_path, monkeypatch, {"splitk"})
    registry = td.Registry("sm_90", tuning_db=tmp_path / "db.json")
    for cfg in suites.all_configs():
        if cfg.dtype == "fp16" and cfg.layout == "rcr" and cfg.epilogue.is_identity:
            registry.add(cfg)
    registry.build(max_workers=2)
    families = {k.config.family for k in registry.kernels}
    assert {"splitk", "tiled"} <= families
    problem = td.GemmProblem(40, 48, 72, dtype="fp16")
    chosen = registry.select(problem, "ml")
    ranked = [name for name, _ in chosen.ranking]
    assert chosen.strategy == "ml" and ranked and not any("splitk" in name for name in ranked)
    assert any("kinds it was not trained on (splitk) not ranked" in n for n in chosen.notes), chosen.notes
    # tune times them all, since the model cannot judge them
    splitk = {k.name for k in registry.kernels if k.config.family == "splitk"}
    labels = [label for label, _ in registry.select(problem, "tune").ranking]
    assert splitk <= {label.removesuffix(" (padded)") for label in labels}
    assert len([label for label in labels if "splitk" not in label]) == min(5, len(ranked))   # the model's top 5


def test_a_model_that_knows_none_of_the_candidates_leaves_them_to_the_rules(tmp_path, monkeypatch, build_registry):
    _model_without(tmp_path, monkeypatch, {"tiled", "splitk"})
    registry = build_registry([c for c in suites.select_configs() if c.dtype == "fp16"])
    chosen = registry.select(td.GemmProblem(40, 48, 72, dtype="fp16"), "ml")
    assert chosen.strategy == "rules" and any("trained on none of the candidates" in n for n in chosen.notes)


def test_fp16_conv_is_ranked_by_the_bf16_model_as_its_bf16_twin():
    """No fp16 conv model is shipped: the bf16 one ranks fp16 problems (STAND_IN), keyed to fp16 and saying
    so, with the scores it gives the same problem and kernels in bf16; fp32 keeps the rules."""
    from tiledispatch.presets import load_preset

    arch = td.get_arch("sm_90")
    half = td.ConvProblem("fwd", 4, 32, 32, 32, (14, 14), (3, 3), padding=1, dtype="fp16")
    brain = td.ConvProblem("fwd", 4, 32, 32, 32, (14, 14), (3, 3), padding=1, dtype="bf16")
    model, why_not = cost_model.shipped_model("sm_90", half)
    assert model is not None and why_not == ""
    assert model.key == ("sm_90", "conv", "fwd", "fp16") and "trained on bf16 sweeps" in model.describe()
    bf16_model, _ = cost_model.shipped_model("sm_90", brain)
    assert bf16_model.meta["dtype"] == "bf16" and model.booster is bf16_model.booster
    configs = {dtype: [c for c in load_preset(f"conv_fwd_{dtype}_2d_essential") if c.family == "direct"]
               for dtype in ("fp16", "bf16")}
    assert [c.name.replace("fp16", "bf16") for c in configs["fp16"]] == [c.name for c in configs["bf16"]]
    assert list(model.scores(half, configs["fp16"], arch)) == list(bf16_model.scores(brain, configs["bf16"], arch))
    with pytest.raises(Exception, match="bf16"):
        bf16_model.scores(half, configs["fp16"], arch)      # the bf16 model itself still refuses fp16
    single = td.ConvProblem("fwd", 4, 32, 32, 32, (14, 14), (3, 3), padding=1, dtype="fp32")
    none, why = cost_model.shipped_model("sm_90", single)
    assert none is None and "no cost model for sm_90 conv fwd fp32" in why


def test_serving_key_names_the_model_files_that_rank_a_key():
    assert cost_model.serving_key("sm_90", "conv_bwd_data_bf16") == "conv_bwd_data_bf16"
    assert cost_model.serving_key("sm_90", "conv_bwd_data_fp16") == "conv_bwd_data_bf16"   # STAND_IN
    assert cost_model.serving_key("sm_90", "conv_bwd_data_fp32") is None
    assert cost_model.serving_key("sm_90", "gemm_none_fp32") is None
    assert cost_model.serving_key("sm_90", "gemm_none_fp16") == "gemm_none_fp16"


def test_the_bwd_weight_model_ranks_halofh_first_on_convnext_7x7_layers(tmp_path):
    """kloop halofh won every 7x7 depthwise bwd_weight layer of the depthwise7x7 suite on an H200 (stop 54:
    tune 1.13x, auto 1.08x of cuDNN). The shipped model knows the kind and ranks one of the essential
    preset's halofh instances first on each ConvNeXt-T layer (nothing built); a model trained without it
    left them unranked."""
    import tiledispatch as td
    from tiledispatch.problems import conv_suites
    from tiledispatch.select import selector

    for layer in conv_suites.convnext_tiny_dw_layers():
        problem = conv_suites.with_direction(conv_suites.problem_of(layer, 32), "bwd_weight")
        registry = td.Registry(td.get_arch("sm_90"), cache_dir=tmp_path)
        registry.add_preset("conv_bwd_weight_bf16_2d_essential", ("none", False), on_demand=True)
        plans = registry.space_plans(problem)
        model, why = cost_model.shipped_model("sm_90", problem)
        assert model is not None, why
        ranking = selector.by_model_or_rules(plans, problem, registry.arch, model)
        assert not ranking.unranked and ranking.ranked[0][0].kernel.config.kloop == "halofh", layer.name
