"""The float64 reference and the checks built on it must be able to fail."""
from __future__ import annotations

import math

import pytest
import torch

import tiledispatch as td
from tiledispatch.dtypes import INPUT_DTYPES
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.testing.inputs import make_args
from tiledispatch.testing.reference import TOLERANCES, errors, reference, validate
from tiledispatch.testing import check_against_reference

F64 = torch.float64


def test_tolerances_cover_every_input_dtype():
    assert set(TOLERANCES) == set(INPUT_DTYPES) and TOLERANCES["int8"] == 0.0


def test_reference_of_identity_and_epilogue():
    x = torch.randn(5, 7, dtype=F64)
    eye = torch.eye(5, dtype=F64)
    assert torch.equal(reference(GemmArgs(eye, x, alpha=2.0)), 2 * x)
    c, bias_col, bias_row, d0 = (torch.randn(5, 7, dtype=F64), torch.randn(7, dtype=F64), torch.randn(5, dtype=F64),
                                 torch.randn(5, 7, dtype=F64))
    got = reference(GemmArgs(eye, x, c=c, bias=bias_col, bias_mode="col", d=(d0,), alpha=0.5, beta=-1.0))
    assert torch.allclose(got, 0.5 * x - c + bias_col[None, :] + d0)
    got = reference(GemmArgs(eye, x, bias=bias_row, bias_mode="row", activation="relu"))
    assert torch.allclose(got, torch.relu(x + bias_row[:, None]))


@pytest.mark.parametrize("activation, fn", [
    ("relu", lambda x: torch.clamp(x, min=0)), ("sigmoid", lambda x: 1 / (1 + torch.exp(-x))),
    ("tanh", lambda x: (torch.exp(2 * x) - 1) / (torch.exp(2 * x) + 1)), ("silu", lambda x: x / (1 + torch.exp(-x))),
    ("gelu", lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))),
    ("gelu_tanh", lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))),
])
def test_reference_activations(activation, fn):
    x = torch.linspace(-4, 4, 33, dtype=F64).reshape(3, 11)
    got = reference(GemmArgs(torch.eye(3, dtype=F64), x, activation=activation))
    assert torch.allclose(got, fn(x), atol=1e-12)


def test_reference_broadcasts_batches():
    a, b = torch.randn(3, 4, 5, dtype=F64), torch.randn(5, 6, dtype=F64)
    bias = torch.randn(3, 6, dtype=F64)
    got = reference(GemmArgs(a, b, bias=bias, bias_mode="col"))
    assert got.shape == (3, 4, 6) and torch.allclose(got[1], a[1] @ b + bias[1])


def test_validate_passes_exact_and_fails_perturbed_or_nan():
    args = GemmArgs(torch.randn(16, 16, dtype=torch.float16), torch.randn(16, 16, dtype=torch.float16))
    exact = reference(args).to(torch.float16)
    assert validate(exact, args, "fp16")["passed"]
    assert not validate(exact * 1.01, args, "fp16")["passed"]
    broken = exact.clone()
    broken[3, 4] = float("nan")
    metrics = validate(broken, args, "fp16")
    assert not metrics["passed"] and metrics["rel_err"] == math.inf
    assert errors(exact, reference(args))["max_abs_err"] < 0.05


def test_element_check_catches_one_wrong_element_the_norm_misses():
    args = GemmArgs(torch.randn(64, 64, dtype=torch.bfloat16), torch.randn(64, 64, dtype=torch.bfloat16))
    out = reference(args).to(torch.bfloat16)
    out[10, 20] += 2.0                                  # one element off by ~25% of the typical magnitude
    assert validate(out, args, "bf16")["passed"], "the norm-wise check alone does not see it"
    with pytest.raises(AssertionError, match="elements off"):
        check_against_reference(out, args, "bf16")


def test_element_check_catches_unwritten_int32_elements():
    args = GemmArgs(torch.randint(-8, 8, (4, 8), dtype=torch.int8), torch.randint(-8, 8, (8, 4), dtype=torch.int8))
    out = reference(args).to(torch.int32)
    check_against_reference(out, args, "int8")
    out[0, 0] = -(2**31)
    with pytest.raises(AssertionError):
        check_against_reference(out, args, "int8")


@pytest.mark.parametrize("layout", ["rcr", "ccr"])
def test_make_args_builds_inputs_in_the_problem_layout(layout):
    problem = td.GemmProblem(5, 6, 7, batch=2, dtype="fp16", layout=layout,
                             epilogue=td.Epilogue("relu", "row", 2, True))
    args = make_args(problem, torch.device("cpu"))
    assert args.a.shape == (2, 5, 7) and args.b.shape == (2, 7, 6)
    assert (args.a.stride(-1) == 1) == (layout[0] == "r") and (args.b.stride(-1) == 1) == (layout[1] == "r")
    assert args.bias.shape == (5,) and len(args.d) == 2 and args.c.shape == (2, 5, 6) and args.beta != 0
    assert args.activation == "relu" and args.bias_mode == "row"
    assert bool(args.a.abs().sum() > 0) and bool(args.b.abs().sum() > 0)
