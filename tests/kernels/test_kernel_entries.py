"""Kernel families: entry parameters (what is constexpr, what is assumed aligned), grids, workspace."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.kernels import gemm_splitk, gemm_tiled
from tiledispatch.kernels.family import family_module
from tiledispatch.kernels.spec import EntrySpec, Param
from tiledispatch.testing import small_config


def params(entry):
    return {p.name: p for p in entry.params}


@pytest.mark.parametrize("layout", ["rcr", "rrr", "crr", "ccr"])
def test_unit_strides_are_constexpr_one_per_layout(layout):
    (entry,) = gemm_tiled.entries(small_config("tiled", layout))
    p = params(entry)
    unit_a = "stride_ac" if layout[0] == "r" else "stride_ar"
    other_a = "stride_ar" if layout[0] == "r" else "stride_ac"
    unit_b = "stride_bc" if layout[1] == "r" else "stride_br"
    other_b = "stride_br" if layout[1] == "r" else "stride_bc"
    for unit in (unit_a, unit_b, "stride_oc"):
        assert p[unit].ty == "constexpr" and p[unit].value == 1, unit
    for other in (other_a, other_b, "stride_or", "stride_ab", "stride_bb", "stride_ob"):
        assert p[other].ty == "i64", other


@pytest.mark.parametrize("align", [1, 4, 16])
@pytest.mark.parametrize("dtype, bytes_", [("fp16", 2), ("fp8e4m3", 1), ("fp32", 4)])
def test_alignment_assumptions_follow_the_config(align, dtype, bytes_):
    """aN: N-byte aligned pointers; sizes along unit strides and strides known multiples of N bytes of the
    input type (a16: 8 fp16, 16 fp8, 4 fp32 elements; a4: 2 fp16, 4 fp8, 1 fp32); a1: nothing."""
    factor = max(1, align // bytes_)
    (entry,) = gemm_tiled.entries(small_config("tiled", "rcr", dtype, align=align))
    p = params(entry)
    for name in ("a_ptr", "b_ptr", "out_ptr"):
        assert p[name].divisibility == align, name
    for name in ("stride_ar", "stride_bc", "stride_or", "N", "K"):
        assert p[name].divisibility == factor, name
    assert p["M"].divisibility == 1, "M runs along no unit stride in rcr: it may be any size"
    attrs = entry.attrs()
    assert bool(attrs) == (align > 1)
    assert {value[0][1] for value in attrs.values()} <= {align, factor}


def test_aligned_pointer_kernels_take_16_byte_rows():
    """A bf16 a16 tiled kernel runs a problem whose sizes are multiples of 8 (16-byte rows) unpadded; an fp8 one
    needs multiples of 16 (16 bytes) and runs it padded."""
    from tiledispatch.kernels.family import least_padded, problem_mismatch

    bf16 = small_config("tiled", "rcr", "bf16", align=16)
    problem = td.GemmProblem(1000, 1000, 1000, dtype="bf16")
    assert problem.align == 8 and problem_mismatch(bf16, problem) is None
    fp8 = small_config("tiled", "rcr", "fp8e4m3", align=16)
    problem = td.GemmProblem(1000, 1000, 1000, dtype="fp8e4m3")
    assert problem_mismatch(fp8, problem).startswith("align:")
    assert least_padded(fp8, problem).align == 16


def test_epilogue_parameters_exist_only_for_enabled_features():
    plain = params(gemm_tiled.entries(small_config())[0])
    assert not {"c_ptr", "beta", "bias_ptr", "d0_ptr", "d1_ptr"} & set(plain) and "alpha" in plain
    full = params(gemm_tiled.entries(small_config(activation="gelu", bias="row", num_d=2, with_c=True))[0])
    assert {"c_ptr", "beta", "bias_ptr", "stride_biasb", "d0_ptr", "d1_ptr", "stride_d1r"} <= set(full)
    assert full["c_ptr"].ty == full["d1_ptr"].ty == "*fp16"
    int8 = params(gemm_tiled.entries(small_config(dtype="int8", with_c=True))[0])
    assert int8["a_ptr"].ty == "*i8" and int8["out_ptr"].ty == "*i32" and int8["alpha"].ty == "i32"
    assert int8["beta"].ty == "i32"


def test_splitk_up_to_16_splits_is_one_entry_that_also_runs_the_epilogue():
    cfg = small_config("splitk", "crr", "bf16", split_k=3, bias="col", warps=8, stages=3)
    (partial,) = gemm_splitk.entries(cfg)
    assert partial.fn == gemm_splitk.PARTIAL_FN and (partial.num_warps, partial.num_stages) == (8, 3)
    assert params(partial)["SPLIT_K"].value == 3 and params(partial)["ws_ptr"].ty == "*fp32"
    assert {"a_ptr", "bias_ptr", "out_ptr", "alpha"} <= set(params(partial))
    assert params(partial)["count_ptr"].ty == "*i32"
    assert len(gemm_splitk.entries(small_config("splitk", split_k=16))) == 1


def test_splitk_past_16_splits_has_a_partial_and_a_reduce_entry():
    cfg = small_config("splitk", "crr", "bf16", split_k=32, bias="col", warps=8, stages=3)
    partial, reduce = gemm_splitk.entries(cfg)
    assert (partial.fn, reduce.fn) == (gemm_splitk.PARTIAL_FN, gemm_splitk.REDUCE_FN)
    assert (partial.num_warps, partial.num_stages) == (8, 3)
    assert params(partial)["SPLIT_K"].value == params(reduce)["SPLIT_K"].value == 32
    assert params(partial)["ws_ptr"].ty == params(reduce)["ws_ptr"].ty == "*fp32"
    assert "bias_ptr" in params(reduce) and "bias_ptr" not in params(partial) and "count_ptr" not in params(partial)
    assert "a_ptr" in params(partial) and "a_ptr" not in params(reduce)


def test_grids_and_workspace():
    tiled = small_config("tiled", block=(32, 64, 32))
    assert gemm_tiled.launch_plan(tiled, 33, 65, 7, 3, 132).grids == ((2 * 2, 3, 1),)
    assert gemm_tiled.launch_plan(tiled, 1, 1, 1, 1, 132).grids == ((1, 1, 1),)
    split = small_config("splitk", block=(32, 32, 32), split_k=4)
    plan = gemm_splitk.launch_plan(split, 64, 33, 1000, 2, 132)
    assert plan.grids == ((2 * 2, 4, 2),)                                        # one launch
    assert plan.workspaces == (("ws_ptr", 2 * 4 * 64 * 48, split.acc_dtype),)   # rows of N=33 padded to 48
    assert plan.counters == (("count_ptr", 2 * 2 * 2),)                        # a counter per tile and batch
    assert plan.scalars == (("WS_LD", 48),)
    # the reduce has its own tile (at most 32 x 128): a 128x128 partial tile over 300 x 500 is 3 x 4 partial
    # programs per split, and 10 x 4 reduce programs
    big = small_config("splitk", block=(128, 128, 32), split_k=32, warps=8)
    plan = gemm_splitk.launch_plan(big, 300, 500, 1000, 1, 132)
    assert plan.grids == ((3 * 4, 32, 1), (10 * 4, 1, 1)) and plan.counters == ()
    reduce = gemm_splitk.entries(big)[1]
    assert (params(reduce)["BLOCK_M"].value, params(reduce)["BLOCK_N"].value, reduce.num_warps) == (32, 128, 4)


def test_splitk_past_64_splits_folds_runs_of_16_slots_before_the_reduce():
    cfg = small_config("splitk", "crr", "bf16", block=(64, 32, 64), split_k=128)
    partial, fold, reduce = gemm_splitk.entries(cfg)
    assert (partial.fn, fold.fn, reduce.fn) == (gemm_splitk.PARTIAL_FN, gemm_splitk.FOLD_FN, gemm_splitk.REDUCE_FN)
    assert params(fold)["SPLIT_K"].value == 128 and "out_ptr" not in params(fold)
    plan = gemm_splitk.launch_plan(cfg, 54, 24, 10**6, 2, 132)
    # partial: 1 tile x 128 splits x 2 batches; fold: 2 reduce tiles (32 rows) x 8 runs x 2; reduce: 2 x 2
    assert plan.grids == ((1, 128, 2), (2, 8, 2), (2, 2, 1))
    source = gemm_splitk.render(cfg)
    assert "tl.static_range(0, SPLIT_K, 16)" in source and gemm_splitk.FOLD_FN in source
    unfolded = gemm_splitk.render(small_config("splitk", "crr", "bf16", block=(64, 32, 64), split_k=64))
    assert gemm_splitk.FOLD_FN not in unfolded and "tl.static_range(SPLIT_K)" in unfolded


def test_family_module_and_unknown_family():
    assert family_module(small_config("tiled")) is gemm_tiled
    assert family_module(small_config("splitk")) is gemm_splitk
    with pytest.raises(td.InvalidConfig) as info:
        family_module(td.GemmConfig(family="blocked"))
    assert info.value.field == "family"


def test_entry_spec_json_round_trip():
    for cfg in (small_config("tiled", align=16, with_c=True), small_config("splitk", "ccr", "int8")):
        for entry in family_module(cfg).entries(cfg):
            assert EntrySpec.from_json(entry.to_json()) == entry
            assert entry.signature() == {p.name: p.ty for p in entry.params}
            assert set(entry.constexprs()) == {p.name for p in entry.params if p.ty == "constexpr"}
            assert entry.arg_names()[0] == entry.params[0].name
    assert Param("x", "constexpr", 1).is_constexpr and not Param("x", "i32").is_constexpr
