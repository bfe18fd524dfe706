"""Float64 references of GEMMs (with their epilogue) and convolutions, random convolution inputs, and the
error metrics validation uses."""
from __future__ import annotations

import math
from typing import Any

from tiledispatch.dtypes import torch_dtype
from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.runtime.conv_args import ConvArgs, empty_channels_last, shapes
from tiledispatch.testing.inputs import seeded_generator

# Relative-error limits ‖out − ref‖/‖ref‖ per input dtype (output rounding included).
# fp8: the operands are exact in the reference; the error is the output rounding plus fp32 accumulation.
TOLERANCES = {"fp16": 2e-3, "bf16": 1e-2, "fp32": 1e-5, "tf32": 5e-3, "int8": 0.0, "fp8e4m3": 1e-2}


def _act(x, name: str):
    import torch

    if name == "none":
        return x
    if name == "relu":
        return torch.relu(x)
    if name == "gelu":
        return torch.nn.functional.gelu(x)
    if name == "gelu_tanh":
        return torch.nn.functional.gelu(x, approximate="tanh")
    if name == "silu":
        return torch.nn.functional.silu(x)
    if name == "sigmoid":
        return torch.sigmoid(x)
    if name == "tanh":
        return torch.tanh(x)
    raise ValueError(name)


def reference(args: GemmArgs, exact: bool = True):
    """The result before the cast to the output dtype: exact in float64 on the CPU, or (exact=False, for
    sweeps at real sizes) in float32 (no TF32) on the operands' device."""
    import torch

    f64 = _converter(args.a.device, exact)
    acc = torch.matmul(f64(args.a), f64(args.b)) * args.alpha
    for scale in (args.scale_a, args.scale_b):
        if scale is not None:
            acc = acc * float(scale.reshape(()))
    if args.c is not None and args.beta != 0:
        acc = acc + args.beta * f64(args.c)
    if args.bias is not None:
        bias = f64(args.bias)
        acc = acc + (bias.unsqueeze(-1) if args.bias_mode == "row" else bias.unsqueeze(-2))
    for t in args.d:
        acc = acc + f64(t)
    return _act(acc, args.activation)


def _converter(device, exact: bool):
    import torch

    if exact:
        return lambda t: t.detach().to("cpu", torch.float64)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return lambda t: t.detach().to(device, torch.float32)


def errors(out, ref) -> dict[str, float]:
    """Max absolute and relative (Frobenius) error of `out` against `ref`, computed in ref's dtype and
    device."""
    import torch

    got = out.detach().to(ref.device, ref.dtype)
    diff = got - ref
    ref_norm = float(torch.linalg.vector_norm(ref))
    rel = (float(torch.linalg.vector_norm(diff)) / ref_norm if ref_norm > 0
           else float(torch.linalg.vector_norm(diff)))
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    if not math.isfinite(rel) or torch.isnan(got).any():
        rel = math.inf
    return {"max_abs_err": max_abs, "rel_err": rel}


def validate(out, args: GemmArgs, dtype: str) -> dict[str, float | bool]:
    result: dict[str, float | bool] = dict(errors(out, reference(args)))
    result["passed"] = result["rel_err"] <= TOLERANCES[dtype]
    return result


# -- convolutions ------------------------------------------------------------------------------------------
# Relative-error limits ‖out − ref‖/‖ref‖ per input dtype (the acceptance limits)
CONV_TOLERANCES = {"fp16": 2e-3, "bf16": 1e-2, "fp32": 1e-5}


def _random_channels_last(shape: tuple[int, ...], dtype: str, device: Any, gen: Any,
                          scale: float = 1.0) -> Any:
    import torch

    t = empty_channels_last(shape, torch_dtype(dtype), device)
    t.copy_((torch.randn(shape, generator=gen, device=gen.device) * scale).to(torch_dtype(dtype)))
    return t


def make_conv_args(problem: ConvProblem, device: Any, seed: int = 0, poison: bool = False) -> ConvArgs:
    """Normal random inputs (the two tensors the direction reads, and the bias) on `device`, channels-last.
    poison=True also allocates the written tensor, filled with NaN (every element must be written)."""
    import torch

    gen = seeded_generator(device, seed)
    written = OUTPUT_ROLE[problem.direction]
    tensors: dict[str, Any] = {}
    for role, shape in shapes(problem).items():
        if role == written:
            if poison:
                tensors[role] = empty_channels_last(shape, torch_dtype(problem.out_dtype),
                                                    device).fill_(float("nan"))
            else:
                tensors[role] = None
        else:
            tensors[role] = _random_channels_last(shape, problem.dtype, device, gen)
    bias = None
    if problem.bias:
        bias = torch.randn(problem.k, generator=gen, device=gen.device).to(
            torch_dtype(problem.out_dtype)).to(device)
    return ConvArgs(tensors["x"], tensors["w"], tensors["y"], bias)


def _pad_input(x64: Any, problem: ConvProblem) -> Any:
    import torch.nn.functional as F

    pads: list[int] = []
    for left, right in reversed(problem.padding):   # F.pad takes the last dim first
        pads += [left, right]
    return F.pad(x64, pads)


def conv_reference(problem: ConvProblem, args: ConvArgs, exact: bool = True) -> Any:
    """The result of the direction before the cast to the output dtype: exact in float64 on the CPU, or
    (exact=False, for sweeps at real sizes) in float32 (no TF32) on the tensors' device."""
    import torch
    import torch.nn.functional as F

    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[problem.ndim]
    device = next(t for t in (args.x, args.w, args.y) if t is not None).device
    f64 = _converter(device, exact)
    like = f64(torch.zeros(()))
    shp = shapes(problem)
    x = f64(args.x) if args.x is not None and problem.direction != "bwd_data" else torch.zeros(
        shp["x"], dtype=like.dtype, device=like.device)
    w = f64(args.w) if args.w is not None and problem.direction != "bwd_weight" else torch.zeros(
        shp["w"], dtype=like.dtype, device=like.device)
    x.requires_grad_(problem.direction == "bwd_data")
    w.requires_grad_(problem.direction == "bwd_weight")
    y = conv(_pad_input(x, problem), w, None, problem.stride, 0, problem.dilation, problem.groups)
    if problem.direction == "fwd":
        if args.bias is not None:
            y = y + f64(args.bias).reshape(1, -1, *([1] * problem.ndim))
        return _act(y.detach(), problem.activation)
    y.backward(f64(args.y))
    return (x.grad if problem.direction == "bwd_data" else w.grad).detach()


def validate_conv(out: Any, problem: ConvProblem, args: ConvArgs) -> dict[str, float | bool]:
    result: dict[str, float | bool] = dict(errors(out, conv_reference(problem, args)))
    result["passed"] = result["rel_err"] <= CONV_TOLERANCES[problem.dtype]
    return result


def torch_grad_error(out: Any, problem: ConvProblem, args: ConvArgs) -> float | None:
    """A 2-D backward result's max error relative to torch.nn.grad's own conv2d_input / conv2d_weight in
    float64 (a second reference beside conv_reference), or None where torch cannot say: asymmetric padding
    or another direction or rank."""
    import torch

    (pad_h, pad_h_right), (pad_w, pad_w_right) = problem.padding
    if problem.ndim != 2 or (pad_h, pad_w) != (pad_h_right, pad_w_right) or problem.direction == "fwd":
        return None
    geometry = (problem.stride, (pad_h, pad_w), problem.dilation, problem.groups)
    if problem.direction == "bwd_data":
        ref = torch.nn.grad.conv2d_input(tuple(args.x.shape), args.w.double(), args.y.double(), *geometry)
    else:
        ref = torch.nn.grad.conv2d_weight(args.x.double(), tuple(out.shape), args.y.double(), *geometry)
    return ((out.double() - ref).abs().max() / ref.abs().max()).item()


def assert_case(registry: Any, cfg: Any, problem: ConvProblem, arch: Any,
                against_torch: bool = False) -> tuple[Any, ConvArgs]:
    """A kernel test's case: the instance is valid on arch and takes the problem, and its output (the
    interpreter on the CPU) matches the float64 reference; against_torch: torch.nn.grad's dgrad / wgrad too
    (symmetric padding). Returns (out, args); raises AssertionError naming what failed."""
    from tiledispatch.kernels.family import config_errors, problem_mismatch

    errors = config_errors(cfg, arch)
    assert errors == [], errors
    mismatch = problem_mismatch(cfg, problem)
    assert mismatch is None, mismatch
    out, args, result = run_and_validate(registry.get(cfg.name), problem)
    assert result["passed"], result
    if against_torch:
        err = torch_grad_error(out, problem, args)
        assert err is None or err <= CONV_TOLERANCES[problem.dtype], err
    return out, args


def run_and_validate(kernel: Any, problem: ConvProblem, device: Any = "cpu", seed: int = 0
                     ) -> tuple[Any, ConvArgs, dict]:
    """Run a conv kernel on random inputs with a NaN-poisoned output; returns (out, args, validate_conv)."""
    args = make_conv_args(problem, device, seed, poison=True)
    out = kernel.run(problem, x=args.x, w=args.w, y=args.y, bias=args.bias)
    return out, args, validate_conv(out, problem, args)


def check_kernels(kernels: list[Any], problem: ConvProblem, device: Any = "cuda") -> tuple[int, list[str]]:
    """Run every kernel on the same inputs (the float64 reference computed once), each into a fresh
    NaN-poisoned output; returns (runs, one line per result outside the tolerance)."""
    import torch

    args = make_conv_args(problem, device, poison=True)
    ref = conv_reference(problem, args)
    role = OUTPUT_ROLE[problem.direction]
    failures = []
    for kernel in kernels:
        setattr(args, role, torch.full_like(getattr(args, role), float("nan")))
        out = kernel.run(problem, x=args.x, w=args.w, y=args.y, bias=args.bias)
        result = errors(out, ref)
        if not result["rel_err"] <= CONV_TOLERANCES[problem.dtype]:
            failures.append(f"{kernel.name}: {problem.describe()}: {result}")
    return len(kernels), failures


def check_problems(kernels: list[Any], problems: list[ConvProblem], device: Any = "cuda"
                   ) -> tuple[int, list[str]]:
    """check_kernels of each problem over the kernels that support it; (runs, failures) summed."""
    runs, failures = 0, []
    for problem in problems:
        count, failed = check_kernels([k for k in kernels if k.is_supported(problem)], problem, device)
        runs += count
        failures += failed
    return runs, failures
