"""The one rule for integer arguments (ints; NumPy integers taken as ints; bools, floats and strings refused
by a typed error naming the field) and the size bounds (problems/bounds.py), applied by GemmProblem,
ConvProblem and the conv argument parsing alike; from_dict refuses unknown keys by name."""
from __future__ import annotations

import numpy as np
import pytest

import tiledispatch as td
from tiledispatch.errors import BadInput, BadInputType
from tiledispatch.problems.bounds import MAX_ELEMENTS, MAX_SIZE
from tiledispatch.runtime.conv_args import conv_problem

CONV = dict(direction="fwd", n=2, c=8, k=8, groups=2, spatial=(8, 8), filter=(3, 3))


def raises(kind, field, fn, *args, **kwargs):
    with pytest.raises(kind) as info:
        fn(*args, **kwargs)
    assert info.value.field == field, (info.value.field, str(info.value))
    assert field in str(info.value)
    return info.value


@pytest.mark.parametrize("field, value", [("stride", 1.0), ("stride", (1, 1.0)), ("dilation", 2.0),
                                          ("padding", 1.0), ("padding", ((0, 1.0), (0, 0))), ("groups", 2.0),
                                          ("stride", True), ("groups", True), ("n", 2.0), ("c", "8"),
                                          ("spatial", (8.0, 8)), ("filter", (3, 3.0)), ("stride", "1"),
                                          ("stride", None), ("padding", None), ("align", 8.0)])
def test_conv_problem_refuses_non_integers_by_field(field, value):
    exc = raises(BadInputType, field, td.ConvProblem, **{**CONV, field: value})
    assert isinstance(exc, TypeError) and isinstance(exc, BadInput)


@pytest.mark.parametrize("field, value", [("stride", 1.0), ("groups", 2.0), ("groups", True),
                                          ("dilation", 1.5), ("stride", np.float64(1.0))])
def test_conv_argument_parsing_applies_the_same_rule(field, value):
    """td.conv*'s parsing (conv_problem) refuses what ConvProblem refuses, whatever the call history."""
    kwargs = {"groups": 1, field: value}
    for _ in range(2):   # the same answer cold and warm
        raises(BadInputType, field, conv_problem, "fwd", (1, 8, 6, 6), (8, 8, 3, 3), dtype="fp16", **kwargs)


def test_numpy_integers_are_ints():
    p = td.ConvProblem(**{**CONV, "n": np.int64(2), "groups": np.int32(2), "stride": np.int64(2),
                          "padding": (np.int16(1), 1), "spatial": (np.int64(8), 8)})
    assert p == td.ConvProblem(**{**CONV, "stride": 2, "padding": 1})
    assert all(type(v) is int for v in (p.n, p.groups, *p.stride, *p.spatial, *p.padding[0]))
    q = conv_problem("fwd", (1, 8, 6, 6), (8, 4, 3, 3), dtype="fp16", groups=np.int64(2), stride=np.int64(1))
    assert q.groups == 2 and type(q.groups) is int
    g = td.GemmProblem(np.int64(8), np.int32(16), np.int64(32), batch=np.int64(2), align=np.int64(16))
    assert g == td.GemmProblem(8, 16, 32, batch=2, align=16) and type(g.m) is int
    assert td.Epilogue(num_d=np.int64(1)).num_d == 1


@pytest.mark.parametrize("field, value", [("m", 8.0), ("batch", 2.0), ("k", np.float32(8)), ("align", 16.0),
                                          ("align", True)])
def test_gemm_problem_refuses_non_integers(field, value):
    raises(BadInputType, field, td.GemmProblem, **{"m": 8, "n": 8, "k": 8, field: value})


@pytest.mark.parametrize("kwargs, field", [({"num_d": 1.0}, "epilogue.num_d"),
                                           ({"num_d": True}, "epilogue.num_d"),
                                           ({"with_c": 1}, "epilogue.with_c"),
                                           ({"activation": None}, "epilogue.activation")])
def test_epilogue_fields_are_typed(kwargs, field):
    raises(BadInput, field, td.Epilogue, **kwargs)


# -- bounds --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["m", "n", "k", "batch"])
def test_gemm_sizes_above_the_bound(field):
    exc = raises(BadInput, field, td.GemmProblem, **{"m": 8, "n": 8, "k": 8, field: MAX_SIZE + 1})
    assert str(MAX_SIZE) in str(exc) or "2**31" in str(exc)
    assert td.GemmProblem(**{"m": 8, "n": 8, "k": 8, field: MAX_SIZE}).flops > 0   # the bound itself is legal


@pytest.mark.parametrize("sizes, field", [((2**25, 2**24, 2**24), "m"), ((8, 2**25, 2**24), "n"),
                                          ((2**24, 2**25, 8), "n")])
def test_gemm_operands_above_the_element_bound(sizes, field):
    m, n, k = sizes
    exc = raises(BadInput, field, td.GemmProblem, m, n, k)
    assert "2**48" in str(exc)


def test_gemm_1e12_is_refused():
    raises(BadInput, "m", td.GemmProblem, 10**12, 64, 64)


@pytest.mark.parametrize("change, field", [({"n": MAX_SIZE + 1}, "n"),
                                           ({"c": 2**40, "k": 8, "groups": 1}, "c"),
                                           ({"spatial": (MAX_SIZE + 1, 8)}, "spatial"),
                                           ({"stride": (1, 2**31)}, "stride"),
                                           ({"padding": 2**31}, "padding"),
                                           ({"dilation": 2**32}, "dilation"),
                                           ({"n": 2**20, "spatial": (2**15, 2**15)}, "spatial")])
def test_conv_sizes_above_the_bound(change, field):
    exc = raises(BadInput, field, td.ConvProblem, **{**CONV, **change})
    assert "2**31" in str(exc) or "2**48" in str(exc)


def test_bounds_are_the_documented_ones():
    assert MAX_SIZE == 2**31 - 1 and MAX_ELEMENTS == 2**48


# -- from_dict -----------------------------------------------------------------------------------------------
def test_gemm_from_dict_names_an_unknown_key():
    data = td.GemmProblem(8, 8, 8).to_dict()
    raises(BadInput, "mm", td.GemmProblem.from_dict, {**data, "mm": 4})
    raises(BadInput, "epilogue.act", td.GemmProblem.from_dict, {**data, "epilogue": {"act": "relu"}})
    raises(BadInputType, "epilogue", td.GemmProblem.from_dict, {**data, "epilogue": "relu"})
    raises(BadInputType, "problem", td.GemmProblem.from_dict, [("m", 8)])
    assert td.GemmProblem.from_dict({"m": 8, "n": 8, "k": 8}) == td.GemmProblem(8, 8, 8)


def test_conv_from_dict_names_an_unknown_key_and_takes_lists():
    p = td.ConvProblem(**CONV, padding=((1, 0), (0, 1)))
    data = p.to_dict()
    raises(BadInput, "strides", td.ConvProblem.from_dict, {**data, "strides": 2})
    raises(BadInputType, "problem", td.ConvProblem.from_dict, "fwd")
    listed = {k: [list(x) if isinstance(x, tuple) else x for x in v] if isinstance(v, tuple) else v
              for k, v in data.items()}   # as JSON gives it back
    assert td.ConvProblem.from_dict(listed) == p


def test_errors_are_value_or_type_errors():
    assert issubclass(td.BadInput, ValueError) and issubclass(td.InvalidConfig, ValueError)
    assert issubclass(BadInputType, TypeError) and issubclass(BadInputType, td.BadInput)
    assert issubclass(td.NoKernelFound, LookupError)
