"""conv_args.check_args and conv_problem before any kernel is chosen: errors name the caller's argument (x, w,
dy, out, bias, input_shape, ...), never the forward role (D15); an `out` sharing memory with an input (D2) or
among its own elements (D3) is refused; non-tensors, NumPy arrays and meta tensors get typed errors (D9)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tiledispatch as td
from tiledispatch.errors import BadInputType
from tiledispatch.runtime.conv_args import ConvArgs, check_args, conv_problem, plain_geometry

F16 = torch.float16


def cl(t):
    return t.contiguous(memory_format=torch.channels_last)


FWD = td.ConvProblem("fwd", 2, 8, 8, 1, (6, 6), (3, 3), padding=1, dtype="fp16")
DGRAD = td.ConvProblem("bwd_data", 2, 8, 8, 1, (6, 6), (3, 3), padding=1, dtype="fp16")
WGRAD = td.ConvProblem("bwd_weight", 2, 8, 8, 1, (6, 6), (3, 3), padding=1, dtype="fp16")


def tensors():
    return (cl(torch.randn(2, 8, 6, 6, dtype=F16)), cl(torch.randn(8, 8, 3, 3, dtype=F16)),
            cl(torch.randn(2, 8, 6, 6, dtype=F16)))


def carve(source, like):
    """A tensor of like's shape and strides on the first elements of source's memory."""
    return source.as_strided(like.shape, like.stride(), source.storage_offset())


def raises(kind, field, fn, *args, **kwargs):
    with pytest.raises(kind) as info:
        fn(*args, **kwargs)
    assert info.value.field == field, (info.value.field, str(info.value))
    return info.value


# (problem, which role is made bad, how, the field the caller knows it by)
@pytest.mark.parametrize("problem, role, bad, field", [
    (DGRAD, "y", "shape", "dy"), (DGRAD, "y", "layout", "dy"), (DGRAD, "y", "dtype", "dy"),
    (DGRAD, "x", "shape", "out"), (DGRAD, "x", "layout", "out"), (DGRAD, "x", "dtype", "out"),
    (DGRAD, "w", "shape", "w"), (WGRAD, "y", "layout", "dy"), (WGRAD, "w", "shape", "out"),
    (WGRAD, "x", "dtype", "x"), (FWD, "y", "shape", "out"), (FWD, "x", "layout", "x"),
    (FWD, "w", "dtype", "w"),
    (DGRAD, "y", "missing", "dy"), (WGRAD, "x", "missing", "x"), (FWD, "w", "missing", "w"),
    (DGRAD, "y", "list", "dy"), (FWD, "x", "numpy", "x"), (FWD, "y", "meta", "out"),
])
def test_errors_name_the_callers_argument(problem, role, bad, field):
    """D15: dy was reported as 'output' and dx as 'input'."""
    x, w, y = tensors()
    args = ConvArgs(x, w, y)
    t = args.get(role)
    changed = {"shape": lambda: t[..., :2], "layout": lambda: t.contiguous(), "dtype": lambda: t.float(),
               "missing": lambda: None, "list": lambda: t.tolist(), "numpy": lambda: t.numpy(),
               "meta": lambda: t.to("meta")}[bad]()
    setattr(args, role, changed)
    kind = BadInputType if bad in ("list", "numpy") else td.BadInput
    raises(kind, field, check_args, problem, args)


def test_fields_may_be_given_by_the_caller():
    x, w, y = tensors()
    raises(td.BadInput, "y", check_args, DGRAD, ConvArgs(x, w, y[..., :5]), {"x": "x", "w": "w", "y": "y"})


@pytest.mark.parametrize("problem, alias", [(FWD, "x"), (FWD, "w"), (DGRAD, "y"), (WGRAD, "x"), (WGRAD, "y"),
                                            (FWD, "bias")])
def test_out_sharing_memory_with_an_input(problem, alias):
    """D2: td.conv(x, w, padding=1, out=x) and conv_bwd_data(..., out=dy) returned garbage."""
    x, w, y = tensors()
    written = {"fwd": "y", "bwd_data": "x", "bwd_weight": "w"}[problem.direction]
    args = ConvArgs(x, w, y)
    if alias == "bias":
        problem = td.ConvProblem("fwd", 2, 8, 8, 1, (6, 6), (3, 3), padding=1, dtype="fp16", bias=True)
        args.bias = carve(y, torch.empty(8))     # 8 elements of out itself
    else:
        setattr(args, written, carve(args.get(alias), args.get(written)))
    exc = raises(td.BadInput, "out", check_args, problem, args)
    assert "shares memory" in str(exc)


def test_out_with_overlapping_elements():
    """D3: an out with a stride of 0 (every pixel one location) was accepted."""
    x, w, _ = tensors()
    out = torch.empty(2, 8, 1, 1, dtype=F16).expand(2, 8, 6, 6)
    assert out.stride(1) == 1
    exc = raises(td.BadInput, "out", check_args, FWD, ConvArgs(x, w, out))
    assert "share memory" in str(exc)


def test_bias_checks_name_bias():
    problem = td.ConvProblem("fwd", 2, 8, 8, 1, (6, 6), (3, 3), padding=1, dtype="fp16", bias=True)
    x, w, _ = tensors()
    for bias in (None, [0.0] * 8, torch.zeros(8), torch.zeros(9, dtype=F16), torch.zeros(16, dtype=F16)[::2]):
        raises(td.BadInput, "bias", check_args, problem, ConvArgs(x, w, None, bias))
    raises(td.BadInput, "bias", check_args, FWD, ConvArgs(x, w, None, torch.zeros(8, dtype=F16)))


@pytest.mark.parametrize("kwargs, field", [
    ({"x_shape": None, "x_field": "input_shape"}, "input_shape"),
    ({"x_shape": (1, 8.0, 6, 6), "x_field": "input_shape"}, "input_shape"),
    ({"x_shape": (1, 8, 6), "x_field": "x"}, "w"),
    ({"w_shape": "8x8x3x3", "w_field": "weight_shape"}, "weight_shape"),
    ({"w_shape": (8, 4, 3, 3)}, "w"),
    ({"groups": 2.0}, "groups"), ({"groups": True}, "groups"), ({"stride": 1.0}, "stride"),
    ({"padding": [1.0, 1]}, "padding"), ({"dilation": "1"}, "dilation"), ({"groups": 3}, "groups"),
])
def test_conv_problem_names_the_argument(kwargs, field):
    base = {"x_shape": (1, 8, 6, 6), "w_shape": (8, 8, 3, 3), "dtype": "fp16"}
    base.update(kwargs)
    raises(td.BadInput, field, conv_problem, "fwd", base.pop("x_shape"), base.pop("w_shape"), **base)


def test_plain_geometry():
    assert plain_geometry(1, (1, 2), ((0, 1), (1, 0)), 1)
    for value in (1.0, True, np.int64(1), [1, 1], (1, 1.0), ((0, 1), (1, False))):
        assert not plain_geometry(value), value
