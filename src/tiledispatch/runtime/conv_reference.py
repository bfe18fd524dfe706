"""Random channels-last inputs of a ConvProblem, its float64 reference, and validation."""
from __future__ import annotations

from typing import Any

from tiledispatch.dtypes import torch_dtype
from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.runtime.conv_args import ConvArgs, empty_channels_last, shapes
from tiledispatch.runtime.inputs import seeded_generator
from tiledispatch.runtime.reference import _act, _converter, errors

# Relative-error limits ‖out − ref‖/‖ref‖ per input dtype (the acceptance limits)
CONV_TOLERANCES = {"fp16": 2e-3, "bf16": 1e-2, "fp32": 1e-5}


def _random_channels_last(shape: tuple[int, ...], dtype: str, device: Any, gen: Any, scale: float = 1.0) -> Any:
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
                tensors[role] = empty_channels_last(shape, torch_dtype(problem.out_dtype), device).fill_(float("nan"))
            else:
                tensors[role] = None
        else:
            tensors[role] = _random_channels_last(shape, problem.dtype, device, gen)
    bias = None
    if problem.bias:
        bias = torch.randn(problem.k, generator=gen, device=gen.device).to(torch_dtype(problem.out_dtype)).to(device)
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
