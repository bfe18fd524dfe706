"""Float64 reference of a GEMM with its epilogue, and the error metrics used by validation."""
from __future__ import annotations

import math

from tiledispatch.runtime.arguments import GemmArgs

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
    """Max absolute and relative (Frobenius) error of `out` against `ref`, computed in ref's dtype and device."""
    import torch

    got = out.detach().to(ref.device, ref.dtype)
    diff = got - ref
    ref_norm = float(torch.linalg.vector_norm(ref))
    rel = float(torch.linalg.vector_norm(diff)) / ref_norm if ref_norm > 0 else float(torch.linalg.vector_norm(diff))
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    if not math.isfinite(rel) or torch.isnan(got).any():
        rel = math.inf
    return {"max_abs_err": max_abs, "rel_err": rel}


def validate(out, args: GemmArgs, dtype: str) -> dict[str, float | bool]:
    result: dict[str, float | bool] = dict(errors(out, reference(args)))
    result["passed"] = result["rel_err"] <= TOLERANCES[dtype]
    return result
