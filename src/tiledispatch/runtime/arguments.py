"""Tensors of a GEMM call -> validated GemmProblem and the kernel's run-time argument values.

problem_from_args checks every argument before any kernel is chosen or built, and names the caller's argument
(a, b, out, c, bias, bias_mode, d, activation, alpha, beta, out_dtype, scale_a, scale_b) in its errors.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch.dtypes import INPUT_DTYPES, OUTPUT_DTYPES, SCALED_DTYPES, default_out_dtype, from_torch
from tiledispatch.errors import BadInput, BadInputType, bad_choice
from tiledispatch.problems.gemm import (ACTIVATIONS, BIAS_MODES, MAX_D, PROBLEM_ALIGNS, Epilogue, GemmProblem,
                                        contiguous_sizes)
from tiledispatch.runtime.tensor_checks import check_written, require_real, require_tensor


@dataclasses.dataclass
class GemmArgs:
    a: Any
    b: Any
    out: Any = None
    c: Any = None
    bias: Any = None
    bias_mode: str = "none"
    d: tuple = ()
    alpha: float = 1.0
    beta: float = 0.0
    activation: str = "none"
    out_dtype: str | None = None
    allow_tf32: bool = False
    scale_a: Any = None     # fp8 only: one-element fp32 tensors on the device (None: 1.0)
    scale_b: Any = None


def _admits(t, letter: str) -> bool:
    """Whether t can be read as a row- ('r') or column-major ('c') matrix: its unit-stride axis has stride 1
    or a single element (a dimension of size 1 makes its stride irrelevant)."""
    axis = -1 if letter == "r" else -2
    return t.stride(axis) == 1 or t.shape[axis] == 1


def _major(t, field: str, prefer: str = "") -> str:
    if prefer in ("r", "c") and _admits(t, prefer):
        return prefer
    if t.stride(-1) == 1:
        return "r"
    if t.stride(-2) == 1:
        return "c"
    raise BadInput(f"{field} has strides {tuple(t.stride())}: no kernel handles a matrix whose rows and "
                   "columns are both strided; pass a row- or column-major tensor (e.g. .contiguous())",
                   field=field)


def _check_matrix(t, field: str, rows: int, cols: int, batch: int) -> None:
    shape = tuple(t.shape)
    if t.dim() not in (2, 3) or shape[-2:] != (rows, cols) or (t.dim() == 3 and shape[0] != batch):
        want = f"({rows}, {cols})" if batch == 1 else f"({batch}, {rows}, {cols}) or ({rows}, {cols})"
        raise BadInput(f"{field} has shape {shape}; expected {want}", field=field)


def _aligned(t, multiple: int) -> bool:
    """16-byte aligned base and every non-unit stride a multiple of `multiple` elements."""
    if t.data_ptr() % 16:
        return False
    return all(s % multiple == 0 for s in t.stride() if s != 1)


def check_options(args: GemmArgs) -> None:
    """The non-tensor arguments: alpha and beta real numbers, activation, bias_mode and out_dtype from their
    closed sets, d a tuple or list of at most MAX_D tensors, allow_tf32 a bool."""
    require_real(args.alpha, "alpha")
    require_real(args.beta, "beta")
    if not isinstance(args.activation, str) or args.activation not in ACTIVATIONS:
        raise bad_choice(BadInput, "activation", args.activation, ACTIVATIONS)
    if not isinstance(args.bias_mode, str) or args.bias_mode not in BIAS_MODES:
        raise bad_choice(BadInput, "bias_mode", args.bias_mode, BIAS_MODES)
    out_dtype = args.out_dtype
    if out_dtype is not None and (not isinstance(out_dtype, str) or out_dtype not in OUTPUT_DTYPES):
        raise bad_choice(BadInput, "out_dtype", args.out_dtype, OUTPUT_DTYPES)
    if not isinstance(args.d, (tuple, list)):
        raise BadInputType(f"d must be a tuple of tensors, got {type(args.d).__name__}", field="d")
    if len(args.d) > MAX_D:
        raise BadInput(f"d holds {len(args.d)} tensors; at most {MAX_D} are fused", field="d")
    if type(args.allow_tf32) is not bool:
        raise BadInputType(f"allow_tf32={args.allow_tf32!r} must be True or False", field="allow_tf32")


def problem_from_args(args: GemmArgs, prefer_layout: str | None = None) -> GemmProblem:
    """The problem the tensors describe. A matrix with a dimension of size 1 is both row- and column-major;
    `prefer_layout` (e.g. the layout of the kernel that will run it) decides such ties."""
    check_options(args)
    a, b = args.a, args.b
    for field, t in (("a", a), ("b", b)):
        require_tensor(t, field)
        if t.dim() not in (2, 3):
            raise BadInput(f"{field} has shape {tuple(t.shape)}: a 2-D (M, K) / (K, N) or 3-D batched "
                           "tensor is needed", field=field)
    if a.shape[-1] != b.shape[-2]:
        raise BadInput(f"b has shape {tuple(b.shape)}: its rows must equal a's columns K={a.shape[-1]}",
                       field="b")
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise BadInput(f"batch sizes differ: a {a.shape[0]}, b {b.shape[0]}", field="b")
    if a.dtype != b.dtype:
        raise BadInput(f"a is {a.dtype} but b is {b.dtype}; both must have the same dtype", field="b")
    if a.device != b.device:
        raise BadInput(f"a is on {a.device} but b is on {b.device}", field="b")
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
    if min(m, n, k, batch) == 0:
        empty = "a" if 0 in a.shape else "b"
        raise BadInput(f"{empty} has shape {tuple((a if empty == 'a' else b).shape)}: an empty GEMM "
                       f"{m}x{n}x{k}; sizes must be positive", field=empty)
    dtype = from_torch(a.dtype, "a.dtype", args.allow_tf32)
    if dtype not in INPUT_DTYPES:
        raise BadInput(f"a.dtype={a.dtype} is not an input dtype; legal: {', '.join(INPUT_DTYPES)}",
                       field="a.dtype")
    _check_scales(args, dtype)
    _check_epilogue_tensors(args, m, n, batch)
    out_dtype = args.out_dtype or default_out_dtype(dtype)
    _check_epilogue_dtypes(args, out_dtype)
    if args.out is not None:
        in_place = ("c", *(f"d[{i}]" for i in range(len(args.d))))   # read at the element written
        check_written(args.out, "out", _inputs(args), elementwise=in_place)
    prefer = prefer_layout or ""
    layout = _major(a, "a", prefer[:1]) + _major(b, "b", prefer[1:2]) + "r"
    extras = [t for t in (args.c if args.beta != 0 else None, *args.d) if t is not None]
    tensors = [t for t in (a, b, args.out, args.bias, *extras) if t is not None]
    # aligned kernels also read C and D row-major, like the output
    sizes = contiguous_sizes(layout, m, n, k)
    align = 1
    if all(t.stride(-1) == 1 for t in extras):
        align = max((a for a in PROBLEM_ALIGNS if all(_aligned(t, a) for t in tensors)
                     and all(x % a == 0 for x in sizes)), default=1)
    epilogue = Epilogue(args.activation, args.bias_mode, len(args.d), args.beta != 0)
    return GemmProblem(m, n, k, batch, dtype, out_dtype, None, layout, epilogue, align=align)


def _inputs(args: GemmArgs) -> list[tuple[str, Any]]:
    """Every tensor the call reads, by the caller's argument name."""
    named = [("a", args.a), ("b", args.b), ("c", args.c if args.beta != 0 else None), ("bias", args.bias),
             ("scale_a", args.scale_a), ("scale_b", args.scale_b)]
    return named + [(f"d[{i}]", t) for i, t in enumerate(args.d)]


def _check_epilogue_tensors(args: GemmArgs, m: int, n: int, batch: int) -> None:
    device = args.a.device
    named = [("out", args.out), ("c", args.c if args.beta != 0 else None), ("bias", args.bias)]
    named += [(f"d[{i}]", t) for i, t in enumerate(args.d)]
    for field, t in named:
        if t is None:
            continue
        require_tensor(t, field)
        if t.device != device:
            raise BadInput(f"{field} is on {t.device} but a is on {device}", field=field)
        if field == "bias":
            length = m if args.bias_mode == "row" else n
            if (t.dim() not in (1, 2) or t.shape[-1] != length or t.stride(-1) != 1
                    or (t.dim() == 2 and t.shape[0] != batch)):
                raise BadInput(f"bias has shape {tuple(t.shape)}; a contiguous ({length},) or ({batch}, "
                               f"{length}) tensor is needed for bias='{args.bias_mode}'", field="bias")
            continue
        _check_matrix(t, field, m, n, batch)
    if args.out is not None:
        if args.out.dim() == 2 and batch > 1:
            raise BadInput(f"out must have shape ({batch}, {m}, {n}) for a batched GEMM", field="out")
        if args.out.stride(-1) != 1:
            raise BadInput(f"out has strides {tuple(args.out.stride())}: it must be row-major", field="out")
    if args.beta != 0 and args.c is None:
        raise BadInput(f"beta={args.beta} needs the tensor c", field="c")
    if args.bias is not None and args.bias_mode == "none":
        raise BadInput("bias given without a bias mode; legal: 'row', 'col'", field="bias")
    if args.bias is None and args.bias_mode != "none":
        raise BadInput(f"bias_mode={args.bias_mode!r} given without a bias tensor", field="bias")


def _check_scales(args: GemmArgs, dtype: str) -> None:
    """fp8 operands take per-tensor scales: one-element float32 tensors on a's device; other dtypes none."""
    import torch

    for field in ("scale_a", "scale_b"):
        t = getattr(args, field)
        if t is None:
            continue
        if dtype not in SCALED_DTYPES:
            raise BadInput(f"{field} is only accepted for the scaled dtypes {SCALED_DTYPES}, not {dtype}",
                           field=field)
        require_tensor(t, field)
        if t.numel() != 1 or t.dtype != torch.float32:
            raise BadInput(f"{field} must be a one-element float32 tensor", field=field)
        if t.device != args.a.device:
            raise BadInput(f"{field} is on {t.device} but a is on {args.a.device}", field=field)


def _check_epilogue_dtypes(args: GemmArgs, out_dtype: str) -> None:
    """out, C, bias and D are read and written in the output dtype (kernels take typed pointers)."""
    from tiledispatch.dtypes import get_dtype, torch_dtype

    want = torch_dtype(get_dtype(out_dtype, "out_dtype").name)
    named = [("out", args.out), ("c", args.c if args.beta != 0 else None), ("bias", args.bias)]
    named += [(f"d[{i}]", t) for i, t in enumerate(args.d)]
    chosen = "given as out_dtype" if args.out_dtype else "the inputs' default; pass out_dtype to choose"
    for field, t in named:
        if t is not None and t.dtype != want:
            raise BadInput(f"{field} is {t.dtype} but the output dtype is {out_dtype} ({want}, {chosen}); "
                           "out, c, bias and d must all have the output dtype", field=field)


def _strides3(t) -> tuple[int, int, int]:
    if t.dim() == 3:
        return t.stride(0), t.stride(1), t.stride(2)
    return 0, t.stride(0), t.stride(1)


def argument_values(args: GemmArgs, m: int, n: int, k: int, extra: dict[str, Any]) -> dict[str, Any]:
    """Values of every run-time parameter a GEMM entry may have, by parameter name."""
    values: dict[str, Any] = {"a_ptr": args.a, "b_ptr": args.b, "out_ptr": args.out, "M": m, "N": n, "K": k,
                              "alpha": args.alpha, "beta": args.beta, **extra}
    for prefix, t in (("a", args.a), ("b", args.b), ("o", args.out), ("c", args.c)):
        if t is not None:
            values.update(zip((f"stride_{prefix}b", f"stride_{prefix}r", f"stride_{prefix}c"), _strides3(t)))
    for i, t in enumerate(args.d):
        values[f"d{i}_ptr"] = t
        values.update(zip((f"stride_d{i}b", f"stride_d{i}r", f"stride_d{i}c"), _strides3(t)))
    if args.c is not None:
        values["c_ptr"] = args.c
    if args.bias is not None:
        values["bias_ptr"] = args.bias
        values["stride_biasb"] = args.bias.stride(0) if args.bias.dim() == 2 else 0
    if from_torch(args.a.dtype, "a.dtype") in SCALED_DTYPES:   # only scaled kernels take scale pointers
        values["scale_a_ptr"] = args.scale_a if args.scale_a is not None else unit_scale(args.a.device)
        values["scale_b_ptr"] = args.scale_b if args.scale_b is not None else unit_scale(args.a.device)
    return values


_UNIT_SCALES: dict[Any, Any] = {}


def unit_scale(device) -> Any:
    """A cached one-element float32 tensor holding 1.0 on `device` (the scale of an unscaled fp8 operand)."""
    if device not in _UNIT_SCALES:
        import torch

        _UNIT_SCALES[device] = torch.ones(1, dtype=torch.float32, device=device)
    return _UNIT_SCALES[device]
