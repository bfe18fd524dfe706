"""The vendor plans (cuBLAS GEMM, cuDNN convolutions through torch): names, support, numerics on CPU tensors
against the float64 references, channels-last results, and a registry of vendor plans only."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.configs.naming import parse_name
from tiledispatch.configs.vendor import VendorConfig, vendor_configs
from tiledispatch.dtypes import torch_dtype
from tiledispatch.errors import InvalidConfig, InvalidConfigType
from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.registry.kernel import prepare
from tiledispatch.registry.vendor import VendorKernel, _Precision, activation_fn
from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
from tiledispatch.testing import check_against_reference, matrix, poisoned, vector
from tiledispatch.testing.inputs import make_args
from tiledispatch.testing.reference import (
    CONV_TOLERANCES,
    _act,
    conv_reference,
    errors,
    make_conv_args,
    reference,
)

ARCH = td.Registry("sm_90").arch
GEMM = VendorKernel(VendorConfig("gemm"), ARCH)
CONV = {d: VendorKernel(VendorConfig("conv", d), ARCH) for d in ("fwd", "bwd_data", "bwd_weight")}


# -- names and configs ---------------------------------------------------------------------------------------
def test_names_round_trip():
    names = [cfg.name for cfg in vendor_configs()]
    assert names == ["vendor-cublas-gemm", "vendor-cudnn-conv-fwd", "vendor-cudnn-conv-bwd_data",
                     "vendor-cudnn-conv-bwd_weight"]
    for cfg in vendor_configs():
        assert parse_name(cfg.name) == cfg and VendorConfig.from_dict(cfg.to_dict()) == cfg
        assert cfg.family == "vendor" and cfg.library == ("cublas" if cfg.op == "gemm" else "cudnn")


@pytest.mark.parametrize("fields, field", [(("matmul",), "op"), (("conv",), "direction"),
                                           (("gemm", "fwd"), "direction"), (("conv", "bwd"), "direction")])
def test_bad_fields_raise_invalid_config(fields, field):
    with pytest.raises(InvalidConfig) as info:
        VendorConfig(*fields)
    assert info.value.field == field


def test_a_non_string_field_raises_invalid_config_type():
    with pytest.raises(InvalidConfigType) as info:
        VendorConfig("conv", 1)   # type: ignore[arg-type]
    assert info.value.field == "direction"


@pytest.mark.parametrize("name", ["vendor-cudnn-gemm", "vendor-cublas-gemm-none", "vendor-cublas-conv-fwd",
                                  "vendor-cudnn-conv-up", "vendor-cudnn-conv", "vendor-",
                                  "vendor-cudnn-conv-fwd-2d"])
def test_bad_vendor_names_raise_invalid_config(name):
    with pytest.raises(InvalidConfig) as info:
        parse_name(name)
    assert info.value.field == "name" and name in str(info.value)


def test_vendor_kernels_are_always_built():
    assert GEMM.built and GEMM.name == "vendor-cublas-gemm" and "built" in repr(GEMM)


# -- support -------------------------------------------------------------------------------------------------
def geometry(**fields: object) -> dict[str, object]:
    return fields


def conv_problem(direction: str = "fwd", **kw) -> ConvProblem:
    base = geometry(n=2, c=6, k=4, groups=2, spatial=(7, 6), filter=(3, 3), padding=1, dtype="fp32")
    return ConvProblem(direction, **{**base, **kw})   # type: ignore[arg-type]


@pytest.mark.parametrize("kernel, problem, field", [
    (GEMM, GemmProblem(8, 8, 8, dtype="int8"), "dtype"),
    (GEMM, GemmProblem(8, 8, 8, dtype="fp8e4m3"), "dtype"),
    (GEMM, GemmProblem(8, 8, 8, dtype="bf16", out_dtype="fp32"), "out_dtype"),
    (GEMM, conv_problem(), "op"),
    (CONV["fwd"], GemmProblem(8, 8, 8), "op"),
    (CONV["fwd"], conv_problem("bwd_data"), "direction"),
    (CONV["bwd_weight"], conv_problem("bwd_weight", padding=((1, 0), (1, 1))), "padding"),
    (CONV["fwd"], conv_problem(dtype="bf16", out_dtype="fp32"), "out_dtype"),
])
def test_is_supported_says_why_not(kernel, problem, field):
    support = kernel.is_supported(problem)
    assert not support and support.reason.split(":", 1)[0] == field


@pytest.mark.parametrize("kernel, problem", [
    (GEMM, GemmProblem(13, 11, 7, batch=3, dtype="tf32", layout="crr",
                       epilogue=Epilogue("gelu", "row", 2, True))),
    (GEMM, GemmProblem(5, 3, 9, dtype="fp16", align=1)),
    (CONV["fwd"], conv_problem(groups=6, c=6, k=6, bias=True, activation="silu", dtype="bf16")),
    (CONV["bwd_data"], conv_problem("bwd_data", spatial=(5, 4, 3), filter=(3, 1, 2), stride=2, padding=0)),
    (CONV["bwd_weight"], conv_problem("bwd_weight", spatial=(9,), filter=(3,), dilation=2, dtype="fp16")),
])
def test_is_supported_accepts_what_the_library_takes(kernel, problem):
    assert kernel.is_supported(problem)


# -- GEMM numerics -------------------------------------------------------------------------------------------
def run_gemm(args, out_given: bool):
    problem = problem_from_args(args)
    assert GEMM.is_supported(problem)
    if out_given:
        shape = (problem.batch, problem.m, problem.n) if max(args.a.dim(), args.b.dim()) == 3 else (problem.m,
                                                                                                    problem.n)
        args.out = poisoned(shape, problem.out_dtype)
    given = args.out
    out = GEMM.launch(args, problem)
    assert given is None or out is given
    assert out.stride(-1) == 1
    return out


EPILOGUES = [Epilogue(), Epilogue(bias="col"), Epilogue(bias="row", activation="relu"),
             Epilogue(with_c=True), Epilogue(with_c=True, bias="col", activation="gelu"),
             Epilogue(num_d=1, activation="gelu_tanh"),
             Epilogue(num_d=2, bias="row", with_c=True, activation="silu"),
             Epilogue(activation="sigmoid"), Epilogue(num_d=1, with_c=True, activation="tanh")]


@pytest.mark.parametrize("layout", ["rrr", "rcr", "crr", "ccr"])
@pytest.mark.parametrize("epilogue", EPILOGUES, ids=lambda e: f"{e.activation}-{e.bias}-{e.num_d}-{e.with_c}")
@pytest.mark.parametrize("out_given", [False, True])
def test_gemm_matches_the_reference(layout, epilogue, out_given):
    problem = GemmProblem(13, 11, 7, dtype="fp32", layout=layout, epilogue=epilogue)
    args = make_args(problem, "cpu", alpha=1.5, beta=-0.75)
    check_against_reference(run_gemm(args, out_given), args, "fp32")


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "tf32"])
@pytest.mark.parametrize("out_given", [False, True])
def test_gemm_batched_in_every_dtype(dtype, out_given):
    problem = GemmProblem(9, 13, 5, batch=3, dtype=dtype, layout="rcr",
                          epilogue=Epilogue("relu", "col", 1, True))
    args = make_args(problem, "cpu", alpha=0.5, beta=2.0)
    out = run_gemm(args, out_given)
    assert out.shape == (3, 9, 13)
    check_against_reference(out, args, dtype)


@pytest.mark.parametrize("bias_mode", ["row", "col"])
def test_gemm_broadcasts_a_2d_operand_and_per_batch_bias(bias_mode):
    a = matrix(6, 5, letter="c", dtype="fp32")
    b = matrix(5, 7, dtype="fp32", batch=3)
    bias = vector(6 if bias_mode == "row" else 7, dtype="fp32", batch=3)
    c = matrix(6, 7, dtype="fp32")    # one C for every batch
    args = GemmArgs(a, b, None, c, bias, bias_mode, (), 2.0, 0.5, "gelu")
    out = run_gemm(args, out_given=False)
    assert out.shape == (3, 6, 7)
    check_against_reference(out, args, "fp32")


def test_gemm_out_as_c_and_d_reads_before_writing():
    """BLAS semantics: c (and a d) may be out itself; the addend is read before out is written."""
    a, b = matrix(7, 5, dtype="fp32"), matrix(5, 6, dtype="fp32")
    for d_too in (False, True):
        out = matrix(7, 6, dtype="fp32")
        before = out.clone()
        args = GemmArgs(a, b, out, out, None, "none", (out,) if d_too else (), 1.0, 0.5)
        got = GEMM.launch(args, problem_from_args(args))
        want = a.double() @ b.double() + 0.5 * before.double() + (before.double() if d_too else 0)
        assert got is out and errors(got, want)["rel_err"] < 1e-6


def test_gemm_out_with_a_leading_batch_of_one():
    a, b = matrix(4, 3, dtype="fp32", batch=1), matrix(3, 5, dtype="fp32", batch=1)
    out = poisoned((4, 5), "fp32")
    args = GemmArgs(a, b, out)
    got = GEMM.launch(args, problem_from_args(args))
    assert got is out and out.shape == (4, 5)
    assert errors(out, reference(args)[0])["rel_err"] < 1e-6


def test_gemm_bound_launch_is_remembered_and_takes_alpha_per_call():
    problem = GemmProblem(6, 5, 4, dtype="fp32", epilogue=Epilogue(with_c=True))
    args = make_args(problem, "cpu")
    bound = GEMM.bound_launch(args, problem)
    assert bound.reusable and GEMM.bound_launch(args, problem) is bound
    for alpha, beta in ((1.0, 0.5), (-3.0, 2.0)):
        args.alpha, args.beta = alpha, beta
        out = bound(args.a, args.b, None, args.c, None, (), alpha, beta)
        check_against_reference(out, args, "fp32")


# -- convolution numerics ------------------------------------------------------------------------------------
CONV_CASES = {
    "1d": geometry(n=2, c=5, k=3, groups=1, spatial=(11,), filter=(3,), stride=2, padding=1, dilation=1),
    "1d-dil-groups": geometry(n=1, c=6, k=9, groups=3, spatial=(13,), filter=(2,), stride=1, padding=2,
                              dilation=3),
    "2d-groups": geometry(n=2, c=6, k=4, groups=2, spatial=(7, 6), filter=(3, 2), stride=(2, 1),
                          padding=(1, 0), dilation=(1, 2)),
    "2d-depthwise": geometry(n=2, c=5, k=5, groups=5, spatial=(9, 7), filter=(3, 3), stride=2, padding=1),
    "2d-1x1": geometry(n=3, c=7, k=3, groups=1, spatial=(5, 4), filter=(1, 1)),
    "3d": geometry(n=1, c=3, k=4, groups=1, spatial=(5, 6, 4), filter=(3, 2, 3), stride=(1, 2, 2),
                   padding=(1, 0, 1)),
    "3d-depthwise": geometry(n=2, c=4, k=4, groups=4, spatial=(4, 5, 6), filter=(3, 3, 3), padding=1,
                             dilation=(1, 2, 1)),
}


def run_conv(problem: ConvProblem, out_given: bool, seed: int = 0):
    args = make_conv_args(problem, "cpu", seed=seed, poison=out_given)
    ref = conv_reference(problem, args)
    role = OUTPUT_ROLE[problem.direction]
    given = getattr(args, role)
    checked = prepare(problem, args)
    kernel = CONV[problem.direction]
    assert kernel.is_supported(checked)
    out = kernel.launch(args, checked)
    assert given is None or out is given
    assert out.shape == ref.shape and out.dtype == torch_dtype(problem.out_dtype)
    assert out.stride(1) == 1 or out.shape[1] == 1, f"channel stride {out.stride()}"
    assert not torch.isnan(out).any()
    return out, ref


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("case", list(CONV_CASES))
@pytest.mark.parametrize("out_given", [False, True])
def test_conv_matches_the_reference(direction, case, out_given):
    problem = ConvProblem(direction, **CONV_CASES[case], dtype="fp32")   # type: ignore[arg-type]
    out, ref = run_conv(problem, out_given)
    assert errors(out, ref)["rel_err"] <= CONV_TOLERANCES["fp32"]


@pytest.mark.parametrize("activation", ["none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])
@pytest.mark.parametrize("case", ["1d", "2d-depthwise", "3d"])
def test_conv_forward_epilogue(activation, case):
    problem = ConvProblem("fwd", **CONV_CASES[case], dtype="fp32", bias=True,   # type: ignore[arg-type]
                          activation=activation)
    for out_given in (False, True):
        out, ref = run_conv(problem, out_given)
        assert errors(out, ref)["rel_err"] <= CONV_TOLERANCES["fp32"]


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_conv_half_precision(dtype, direction):
    problem = ConvProblem(direction, **CONV_CASES["2d-groups"], dtype=dtype)   # type: ignore[arg-type]
    out, ref = run_conv(problem, out_given=False)
    assert errors(out, ref)["rel_err"] <= CONV_TOLERANCES[dtype]


def test_conv_bound_launch_is_remembered():
    problem = ConvProblem("fwd", **CONV_CASES["1d"], dtype="fp32")   # type: ignore[arg-type]
    args = make_conv_args(problem, "cpu")
    bound = CONV["fwd"].bound_launch(args, problem)
    assert bound.reusable and CONV["fwd"].bound_launch(args, problem) is bound
    first, second = bound(args.x, args.w, None, None), bound(args.x, args.w, None, None)
    assert first is not second and torch.equal(first, second)


# -- activations and precision -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"])
def test_activations_are_the_kernels_definitions(name):
    x = torch.randn(64, dtype=torch.float64) * 3
    fn, inplace = activation_fn(name), activation_fn(name, inplace=True)
    if name == "none":
        assert fn is None and inplace is None
        return
    y = x.clone()
    inplace(y)
    assert torch.equal(fn(x), _act(x, name)) and torch.equal(y, _act(x, name))


@pytest.mark.parametrize("op, wanted", [("matmul", "tf32"), ("matmul", "ieee"), ("conv", "ieee"),
                                        ("conv", "tf32")])
def test_precision_is_held_for_the_call_and_restored(op, wanted):
    get, set_ = torch._C._get_fp32_precision_getter, torch._C._set_fp32_precision_setter
    before = get("cuda", op)
    try:
        for start in ("tf32", "ieee"):
            set_("cuda", op, start)
            seen = _Precision(op, wanted).run(lambda: get("cuda", op))
            assert seen == wanted and get("cuda", op) == start
    finally:
        set_("cuda", op, before)


# -- a registry of vendor plans only -------------------------------------------------------------------------
def test_registry_of_the_vendor_gemm_selects_and_runs_it():
    registry = td.Registry("sm_90")
    registry.add("vendor-cublas-gemm")
    a, b = matrix(13, 7, letter="c", dtype="bf16"), matrix(7, 11, dtype="bf16")
    bias = vector(11, dtype="bf16")
    problem = problem_from_args(relu_args(a, b, bias))
    selection = registry.select(problem, "first_fit")
    assert selection.kernel.name == "vendor-cublas-gemm" and not selection.padded
    for _ in range(2):   # the second call is a memo hit
        out = registry.run(None, a, b, bias=bias, bias_mode="col", activation="relu", alpha=2.0,
                           strategy="first_fit")
        check_against_reference(out, relu_args(a, b, bias), "bf16")
    out = poisoned((13, 11), "bf16")
    assert registry.run(None, a, b, bias=bias, bias_mode="col", activation="relu", alpha=2.0, out=out,
                        strategy="first_fit") is out
    check_against_reference(out, relu_args(a, b, bias), "bf16")


def relu_args(a, b, bias):
    return GemmArgs(a, b, None, None, bias, "col", (), 2.0, 0.0, "relu")


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_registry_of_the_vendor_convolutions_runs_every_direction(direction):
    registry = td.Registry.from_json(td.Registry("sm_90").to_json())
    for cfg in vendor_configs():
        registry.add(cfg)
    extra = {"bias": True, "activation": "gelu"} if direction == "fwd" else {}
    problem = ConvProblem(direction, **CONV_CASES["2d-groups"], dtype="bf16",   # type: ignore[arg-type]
                          **extra)
    assert registry.select(problem, "first_fit").kernel.name == f"vendor-cudnn-conv-{direction}"
    args = make_conv_args(problem, "cpu")
    inputs = {"fwd": (args.x, args.w), "bwd_data": (args.y, args.w), "bwd_weight": (args.x, args.y)}
    first, second = inputs[direction]
    ref = conv_reference(problem, args)
    for _ in range(2):
        out = registry.run_conv(problem, first, second, bias=args.bias, strategy="first_fit")
        assert out.stride(1) == 1 and errors(out, ref)["rel_err"] <= CONV_TOLERANCES["bf16"]
    assert td.Registry.from_json(registry.to_json()).kernels[0].name == "vendor-cublas-gemm"
