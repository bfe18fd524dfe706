"""Selection strategies: first_fit, rules (robust properties only), auto."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.presets import load_preset
from tiledispatch.registry.kernel import Kernel
from tiledispatch.select import rules
from tiledispatch.select.selector import STRATEGIES
from tiledispatch.testing import suites

H100 = td.get_arch("sm_90")
PROBLEM = td.GemmProblem(40, 48, 72, dtype="fp16")


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry(suites.select_configs())


def test_strategies_are_the_documented_ones():
    assert set(STRATEGIES) >= {"auto", "first_fit", "rules", "tune"}


def test_first_fit_follows_registry_order(registry, build_registry):
    chosen = registry.select(PROBLEM, "first_fit")
    assert chosen.strategy == "first_fit" and chosen.kernel is registry.kernels[0]
    assert [name for name, _ in chosen.ranking] == [k.name for k in registry.kernels]
    reverse = build_registry(list(reversed(suites.select_configs())))
    assert reverse.select(PROBLEM, "first_fit").kernel.name == reverse.kernels[0].name != chosen.kernel.name


def test_first_fit_skips_kernels_that_do_not_fit(build_registry):
    registry = build_registry([suites.aligned_configs()[0], *suites.select_configs()])
    assert registry.kernels[0].config.align == 16
    problem = td.GemmProblem(40, 48, 68, dtype="fp16")   # K=68: no 16-byte rows, the a16 kernel cannot run it
    direct = registry.select(problem, "first_fit")
    assert direct.kernel is registry.kernels[1] and not direct.padded


@pytest.mark.parametrize("strategy", ["rules", "auto"])
def test_ranking_is_sorted_and_decides(registry, strategy):
    """rules ranks by the analytic estimate; auto (no tuning DB entry) by the shipped fp16 GEMM cost model."""
    chosen = registry.select(PROBLEM, strategy)
    assert chosen.strategy == ("rules" if strategy == "rules" else "ml")
    scores = [score for _, score in chosen.ranking]
    assert scores == sorted(scores) and len(scores) == len(registry)
    assert chosen.ranking[0][0] == chosen.kernel.name
    assert chosen.problem == PROBLEM and not chosen.padded
    if strategy == "auto":
        assert any("cost model" in note for note in chosen.notes)
    assert chosen.to_dict()["kernel"] == chosen.kernel.name


def test_selection_is_deterministic(registry):
    assert registry.select(PROBLEM, "rules").kernel is registry.select(PROBLEM, "rules").kernel


def preset_kernels(name="gemm_fp16_rcr_essential"):
    return [Kernel(cfg, H100) for cfg in load_preset(name)]


def ranked(problem, name="gemm_fp16_rcr_essential"):
    kernels = [k for k in preset_kernels(name) if k.is_supported(problem)]
    return rules.rank(kernels, problem, H100)


def test_rank_scores_are_positive_and_sorted():
    result = ranked(td.GemmProblem(1000, 1000, 1000, dtype="fp16"))
    scores = [s for _, s in result]
    assert scores == sorted(scores) and all(s > 0 for s in scores)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_big_problem_prefers_a_big_tile(dtype):
    problem = td.GemmProblem(8192, 8192, 8192, dtype=dtype)
    result = ranked(problem, f"gemm_{dtype}_rcr_essential")
    best = result[0][0].config
    assert best.block_m * best.block_n >= 128 * 128, best.name
    assert best.family in ("tma_persistent", "tma_ws", "streamk") and best.align == 16, "compute-bound: a TMA family"
    score = {k.name: s for k, s in result}
    small = [n for n in score if "-16x64x" in n]
    big = [n for n in score if "-128x128x" in n]
    assert small and big
    assert max(score[n] for n in big) < min(score[n] for n in small)


def test_tiny_m_prefers_a_small_block_m():
    problem = td.GemmProblem(8, 4096, 4096, dtype="fp16")
    result = ranked(problem)
    assert result[0][0].config.block_m <= 32, result[0][0].name
    best_big_m = min(s for k, s in result if k.config.block_m >= 128)
    assert result[0][1] < best_big_m


def test_small_mn_huge_k_ranks_split_k_high():
    problem = td.GemmProblem(64, 64, 65536, dtype="fp16")
    result = ranked(problem)
    best_split = min(s for k, s in result if k.config.family == "splitk")
    best_tiled = min(s for k, s in result if k.config.family == "tiled")
    assert best_split < best_tiled
    assert any(k.config.family == "splitk" for k, _ in result[:3])


def test_aligned_kernels_rank_above_their_unaligned_twins():
    problem = td.GemmProblem(4096, 4096, 4096, dtype="fp16")
    for cfg in load_preset("gemm_fp16_rcr_essential"):
        if cfg.align == 16:
            import dataclasses

            twin = dataclasses.replace(cfg, align=1)
            assert rules.estimate_us(cfg, problem, H100) < rules.estimate_us(twin, problem, H100), cfg.name


def test_wave_quantization_penalises_one_extra_wave():
    """One more tile than the SMs can take at once costs a whole extra wave for the same tile config."""
    import dataclasses

    cfg = td.GemmConfig("tiled", "rcr", "fp16", block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4)
    one_sm = dataclasses.replace(H100, sm_count=1)
    tiles = td.GemmProblem(cfg.block_m, cfg.block_n * 1, 4096, dtype="fp16")
    more = td.GemmProblem(cfg.block_m, cfg.block_n * 2, 4096, dtype="fp16")
    assert rules.estimate_us(cfg, more, one_sm) > rules.estimate_us(cfg, tiles, one_sm)


def test_conv_rules_charge_the_split_partials_of_im2col():
    """A forward im2col instance that splits its GEMM's reduction pays for the fp32 partials: on a layer with
    many pixels (every SM already has tiles) its unsplit twin must rank first; on a 7x7 layer with few tiles the
    split may win (not asserted: a ranking, not a law)."""
    import dataclasses

    from tiledispatch.select import conv_rules

    cfg = td.ConvConfig(family="gemm", direction="fwd", dtype="bf16", block_m=64, block_n=128, block_k=64,
                        num_warps=4, num_stages=4, split_k=1, kloop="im2col", align=8)
    many_pixels = td.ConvProblem("fwd", 32, 64, 64, 1, (56, 56), (3, 3), padding=1, dtype="bf16")
    split = dataclasses.replace(cfg, split_k=4)
    assert conv_rules.estimate_us(cfg, many_pixels, H100) < conv_rules.estimate_us(split, many_pixels, H100)


def test_conv_rules_count_the_programs_of_a_halo_launch():
    """A halo program covers block_m rows x 8 columns: 2 images x 4 row blocks x 2 strips x 2 channel tiles
    of a 14x14 layer with 24 channels (not 2 * 196 / 4 pixel blocks x 2)."""
    from tiledispatch.select import conv_rules

    cfg = td.ConvConfig(family="direct", kloop="halo", direction="fwd", dtype="fp16", block_m=4, block_n=16,
                        block_k=7, num_warps=1, num_stages=1, align=8)
    problem = td.ConvProblem("fwd", 2, 24, 24, 24, (14, 14), (7, 7), padding=3, dtype="fp16")
    assert conv_rules.direct_programs(cfg, problem, H100) == 32


def test_conv_rules_plan_a_halo_wgrad_for_the_arch_s_sms():
    """bwd_weight sizes its row chunks for the SMs it runs on: the rules count them for the arch's SMs."""
    import dataclasses
    import math

    from tiledispatch.kernels import conv_halo
    from tiledispatch.select import conv_rules

    cfg = td.ConvConfig(family="direct", kloop="halo", direction="bwd_weight", dtype="fp16", block_m=4,
                        block_n=16, block_k=7, num_warps=1, num_stages=1, align=8)
    problem = td.ConvProblem("bwd_weight", 2, 24, 24, 24, (28, 28), (7, 7), padding=3, dtype="fp16")
    two_sms = dataclasses.replace(H100, sm_count=2)
    want = math.prod(conv_halo.grid(cfg, problem, 2))
    assert want != math.prod(conv_halo.grid(cfg, problem, H100.sm_count))
    assert conv_rules.direct_programs(cfg, problem, two_sms) == want
