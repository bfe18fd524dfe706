"""GemmConfig: defaults, dict round trip, unknown fields, epilogue helpers."""
from __future__ import annotations

import json

import pytest

import tiledispatch as td
from tiledispatch.configs.space import gemm_space
from tiledispatch.kernels.family import is_valid_config


def test_defaults_derive_output_and_accumulator_dtypes():
    assert (td.GemmConfig(dtype="fp16").out_dtype, td.GemmConfig(dtype="fp16").acc_dtype) == ("fp16", "fp32")
    assert (td.GemmConfig(dtype="int8").out_dtype, td.GemmConfig(dtype="int8").acc_dtype) == ("int32", "int32")
    assert td.GemmConfig(dtype="tf32").out_dtype == "fp32"
    assert td.GemmConfig(dtype="fp16", out_dtype="fp32").out_dtype == "fp32"


def test_dict_round_trip_through_json():
    cfg = td.GemmConfig(family="splitk", layout="ccr", dtype="bf16", split_k=4, activation="silu", bias="row",
                        num_d=2, with_c=True, align=1)
    assert td.GemmConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert td.GemmConfig.from_dict({**cfg.to_dict(), "op": "gemm", "name": cfg.name}) == cfg


@pytest.mark.parametrize("data, field", [({"block_mm": 64}, "block_mm"), ({"dtype": "fp16", "tile": 3}, "tile"),
                                         ({"Block_m": 64, "zeta": 1}, "Block_m")])
def test_unknown_fields_raise_invalid_config(data, field):
    with pytest.raises(td.InvalidConfig) as info:
        td.GemmConfig.from_dict(data)
    assert info.value.field == field and field in str(info.value) and "block_m" in str(info.value)


def test_epilogue_view_and_with_epilogue():
    epi = td.Epilogue("gelu", "col", 1, True)
    cfg = td.GemmConfig().with_epilogue(epi)
    assert cfg.epilogue == epi and cfg.activation == "gelu" and cfg.num_d == 1 and cfg.with_c
    assert cfg.with_epilogue(td.Epilogue()).epilogue.is_identity
    assert cfg.op == "gemm"


def test_space_yields_only_valid_configs_in_a_deterministic_order():
    arch = td.get_arch("sm_90")
    grid = {"block_m": (32, 64), "block_n": (64,), "block_k": (32, 16), "num_warps": (4,), "num_stages": (2, 9)}
    first = list(gemm_space("int8", "rcr", arch, grid=grid, is_valid=is_valid_config))
    assert first == list(gemm_space("int8", "rcr", arch, grid=grid, is_valid=is_valid_config))
    assert first and all(is_valid_config(c, arch) for c in first)
    assert {c.block_k for c in first} == {32}          # int8 with block_k 16 is filtered out
    assert {c.num_stages for c in first} == {2}        # 9 stages is not a legal value
    assert {c.family for c in first} == {"tiled", "splitk"}
    assert all(c.split_k == 1 for c in first if c.family == "tiled")
    assert {c.split_k for c in first if c.family == "splitk"} == {2, 4, 8, 16}


@pytest.mark.parametrize("field, value", [("block_m", 128.0), ("block_k", 32.5), ("num_warps", True),
                                          ("split_k", "1"), ("align", None), ("num_d", 1.0)])
def test_int_fields_refuse_other_types(field, value):
    """D7: a float tile size passed validity (128.0 == 128) and its name '128.0x...' did not parse back."""
    with pytest.raises(td.InvalidConfig) as info:
        td.GemmConfig(**{field: value})
    assert info.value.field == field and isinstance(info.value, TypeError)
    with pytest.raises(td.InvalidConfig):
        td.GemmConfig.from_dict({**td.GemmConfig().to_dict(), field: value})


@pytest.mark.parametrize("field, value", [("family", None), ("dtype", 16), ("layout", ("r", "c", "r")),
                                          ("with_c", 1.0), ("with_c", "yes")])
def test_str_and_bool_fields_refuse_other_types(field, value):
    with pytest.raises(td.InvalidConfig) as info:
        td.GemmConfig(**{field: value})
    assert info.value.field == field


def test_numpy_integers_become_ints_and_round_trip():
    import numpy as np

    cfg = td.GemmConfig(block_m=np.int64(64), block_n=np.int32(64), split_k=np.int64(1))
    assert type(cfg.block_m) is int and cfg == td.GemmConfig(block_m=64, block_n=64)
    assert td.parse_name(cfg.name) == cfg
    assert td.GemmConfig(out_dtype=None).out_dtype == "fp16"   # None: the dtype's default, as ""
