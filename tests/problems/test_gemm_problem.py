"""GemmProblem and Epilogue: validation (typed errors naming the field), derived values."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.problems.gemm import ACTIVATIONS, BIAS_MODES, LAYOUTS


@pytest.mark.parametrize("field", ["m", "n", "k", "batch"])
@pytest.mark.parametrize("value", [0, -1, 2.5, True, "8"])
def test_sizes_must_be_positive_integers(field, value):
    sizes = {"m": 8, "n": 8, "k": 8, "batch": 1, field: value}
    with pytest.raises(td.BadInput) as info:
        td.GemmProblem(**sizes)
    assert info.value.field == field and field in str(info.value)


@pytest.mark.parametrize("field, value", [("dtype", "fp64"), ("dtype", "int32"), ("out_dtype", "int8"),
                                          ("acc_dtype", "fp16"), ("layout", "rcc"), ("layout", "RCR"),
                                          ("align", 4)])
def test_closed_sets_name_the_field_and_legal_values(field, value):
    with pytest.raises(td.BadInput) as info:
        td.GemmProblem(8, 8, 8, **{field: value})
    assert info.value.field == field
    assert "legal values" in str(info.value)


def test_epilogue_must_be_an_epilogue():
    with pytest.raises(td.BadInput) as info:
        td.GemmProblem(8, 8, 8, epilogue={"activation": "relu"})
    assert info.value.field == "epilogue"


@pytest.mark.parametrize("kwargs, field", [({"activation": "swish"}, "epilogue.activation"),
                                           ({"bias": "both"}, "epilogue.bias"),
                                           ({"num_d": 3}, "epilogue.num_d"), ({"num_d": -1}, "epilogue.num_d")])
def test_epilogue_validation(kwargs, field):
    with pytest.raises(td.BadInput) as info:
        td.Epilogue(**kwargs)
    assert info.value.field == field


def test_defaults_and_derived_dtypes():
    p = td.GemmProblem(4, 5, 6)
    assert (p.dtype, p.out_dtype, p.acc_dtype, p.layout, p.batch) == ("bf16", "bf16", "fp32", "rcr", 1)
    assert td.GemmProblem(4, 5, 6, dtype="int8").out_dtype == "int32"
    assert td.GemmProblem(4, 5, 6, dtype="int8").acc_dtype == "int32"
    assert td.GemmProblem(4, 5, 6, dtype="tf32").out_dtype == "fp32"
    assert td.GemmProblem(4, 5, 6, dtype="fp16", out_dtype="fp32").out_dtype == "fp32"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_natural_alignment_needs_multiples_of_16(layout):
    """Only sizes along a unit stride count: N always (output rows), K when A is row-major or B column-major,
    M when A is column-major."""
    assert td.GemmProblem(32, 64, 48, layout=layout).align == 16
    assert td.GemmProblem(32, 65, 48, layout=layout).align == 1
    assert td.GemmProblem(32, 72, 48, layout=layout).align == 8     # 16-byte rows for 2-byte types
    k_contiguous = layout[0] == "r" or layout[1] == "c"
    assert td.GemmProblem(32, 64, 47, layout=layout).align == (1 if k_contiguous else 16)
    for m in (33, 1):
        assert td.GemmProblem(m, 16, 16, layout=layout).align == (1 if layout[0] == "c" else 16)
    assert td.GemmProblem(32, 64, 48, layout=layout, align=1).align == 1


def test_leading_dims_follow_the_layout():
    assert td.GemmProblem(2, 3, 5, layout="rcr").leading_dims() == (5, 5, 3)
    assert td.GemmProblem(2, 3, 5, layout="rrr").leading_dims() == (5, 3, 3)
    assert td.GemmProblem(2, 3, 5, layout="crr").leading_dims() == (2, 3, 3)
    assert td.GemmProblem(2, 3, 5, layout="ccr").leading_dims() == (2, 5, 3)


def test_flops_and_bytes():
    p = td.GemmProblem(2, 3, 5, batch=4, dtype="fp16")
    assert p.flops == 2 * 4 * 2 * 3 * 5
    assert p.min_bytes == 4 * (2 * 5 + 5 * 3) * 2 + 4 * 2 * 3 * 2
    q = td.GemmProblem(2, 3, 5, batch=4, dtype="fp16", epilogue=td.Epilogue(num_d=2, with_c=True))
    assert q.min_bytes == p.min_bytes + 3 * 4 * 2 * 3 * 2


def test_signature_distinguishes_every_field():
    base = td.GemmProblem(64, 64, 64, dtype="fp16")
    variants = [td.GemmProblem(65, 64, 64, dtype="fp16"), td.GemmProblem(64, 65, 64, dtype="fp16"),
                td.GemmProblem(64, 64, 65, dtype="fp16"), td.GemmProblem(64, 64, 64, batch=2, dtype="fp16"),
                td.GemmProblem(64, 64, 64, dtype="bf16"), td.GemmProblem(64, 64, 64, dtype="fp16", out_dtype="fp32"),
                td.GemmProblem(64, 64, 64, dtype="fp16", layout="rrr"),
                td.GemmProblem(64, 64, 64, dtype="fp16", align=1)]
    variants += [td.GemmProblem(64, 64, 64, dtype="fp16", epilogue=e) for e in
                 (td.Epilogue("relu"), td.Epilogue(bias="row"), td.Epilogue(num_d=1), td.Epilogue(with_c=True))]
    signatures = {v.signature() for v in variants}
    assert len(signatures) == len(variants) and base.signature() not in signatures


def test_dict_round_trip_and_describe():
    p = td.GemmProblem(17, 100, 257, batch=3, dtype="fp16", layout="crr",
                       epilogue=td.Epilogue("gelu", "row", 2, True))
    assert td.GemmProblem.from_dict(p.to_dict()) == p
    text = p.describe()
    assert "17x100x257" in text and "batch=3" in text and "crr" in text and "gelu" in text


def test_constants():
    assert ACTIVATIONS == ("none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
    assert BIAS_MODES == ("none", "row", "col") and LAYOUTS == ("rcr", "rrr", "crr", "ccr")
