"""VendorKernel: the vendor library as a plan beside our kernels, for selection to pick when it is faster.

GEMMs run torch.mm / addmm / bmm / baddbmm (cuBLAS on CUDA tensors), convolutions F.conv* (fwd),
F.conv_transpose* (bwd_data: cuDNN's backward-data algorithms) and aten.convolution_backward (bwd_weight); an
epilogue the library call does not take runs as in-place torch ops on its result. CPU tensors run torch's CPU
ops (the CPU lane). Bound launches take the arguments of our kernels' bound launches and write the caller's
tensor when one is given; conv results have channel stride 1 as our kernels' do. Nothing is compiled: a
VendorKernel is always built. fp32 problems run at fp32 precision and tf32 GEMMs at tf32 whatever torch's
global TF32 setting is (_Precision switches it around the call and restores it).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.vendor import VendorConfig
from tiledispatch.dtypes import torch_dtype
from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.kernel import Kernel, Support, conv_call_key, launch_key
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.runtime.conv_args import ConvArgs, empty_channels_last, shapes

GEMM_DTYPES = ("fp16", "bf16", "fp32", "tf32")
CONV_DTYPES = ("fp16", "bf16", "fp32")


def activation_fn(name: str, inplace: bool = False) -> Callable[[Any], Any] | None:
    """The torch function of an epilogue activation as our kernels define it (gelu: the erf form, gelu_tanh:
    the tanh approximation); None for 'none'. inplace=True: the form that overwrites its argument."""
    import torch

    nn: Any = torch._C._nn   # gelu_ is missing from torch's stubs
    table: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
        "relu": (torch.relu, torch.relu_),
        "gelu": (nn.gelu, nn.gelu_),
        "gelu_tanh": (lambda t: nn.gelu(t, approximate="tanh"), lambda t: nn.gelu_(t, approximate="tanh")),
        "silu": (nn.silu, nn.silu_),
        "sigmoid": (torch.sigmoid, torch.sigmoid_),
        "tanh": (torch.tanh, torch.tanh_),
    }
    if name == "none":
        return None
    return table[name][int(inplace)]


class VendorKernel(Kernel):
    """The vendor library for one op (and conv direction): always built, supports what the library call takes
    (`is_supported` says why not), launches through torch."""

    config: VendorConfig   # type: ignore[assignment]

    def __init__(self, config: VendorConfig, arch: ArchSpec) -> None:
        super().__init__(config, arch)   # type: ignore[arg-type]

    @property
    def built(self) -> bool:
        return True

    def is_supported(self, problem: GemmProblem | ConvProblem) -> Support:
        cfg = self.config
        if cfg.op == "gemm":
            if not isinstance(problem, GemmProblem):
                return Support(False, f"op: {self.name} computes GEMMs, not {type(problem).__name__}")
            return _gemm_support(problem)
        if not isinstance(problem, ConvProblem):
            return Support(False, f"op: {self.name} computes convolutions, not {type(problem).__name__}")
        if problem.direction != cfg.direction:
            return Support(False, f"direction: {self.name} computes direction {cfg.direction!r}, not "
                                  f"{problem.direction!r}")
        return _conv_support(problem)

    def launch(self, args: Any, problem: Any) -> Any:
        bound = self.bound_launch(args, problem)
        if isinstance(args, GemmArgs):
            args.out = bound(args.a, args.b, args.out, args.c, args.bias, args.d, args.alpha, args.beta,
                             args.scale_a, args.scale_b)
            return args.out
        return bound(args.x, args.w, args.y, args.bias)

    def bound_launch(self, args: Any, problem: Any) -> Any:
        """The launch of `problem` on arguments of this signature, remembered per signature (arguments checked
        and problem supported, as dispatch calls it)."""
        key = launch_key(problem, args) if isinstance(args, GemmArgs) else conv_call_key(problem, args)
        bound = self.launches.get(key) if key is not None else None
        if bound is None:
            bound = GemmLaunch(args, problem) if isinstance(args, GemmArgs) else ConvLaunch(args, problem)
            if key is not None:
                self.launches.put(key, bound)
        return bound


def _gemm_support(problem: GemmProblem) -> Support:
    if problem.dtype not in GEMM_DTYPES:
        return Support(False, f"dtype: the vendor GEMM takes {', '.join(GEMM_DTYPES)}, not {problem.dtype}")
    storage = "fp32" if problem.dtype == "tf32" else problem.dtype
    if problem.out_dtype != storage:
        return Support(False, f"out_dtype: the vendor GEMM writes its input dtype ({storage}), not "
                              f"{problem.out_dtype}")
    return Support(True)


def _conv_support(problem: ConvProblem) -> Support:
    if problem.dtype not in CONV_DTYPES:
        return Support(False, f"dtype: the vendor convolution takes {', '.join(CONV_DTYPES)}, not "
                              f"{problem.dtype}")
    if problem.out_dtype != problem.dtype:
        return Support(False, f"out_dtype: the vendor convolution writes its input dtype ({problem.dtype}), "
                              f"not {problem.out_dtype}")
    if any(left != right for left, right in problem.padding):
        return Support(False, f"padding: cuDNN takes symmetric padding only, not {problem.padding}")
    return Support(True)


class _Precision:
    """Runs a call with torch's fp32 precision of one CUDA op kind ('matmul' or 'conv') set to `wanted`
    ('ieee' or 'tf32'), switching it only when it differs and restoring it after: torch's setting is
    process-wide, so another thread's fp32 call that runs meanwhile sees the switched value."""

    def __init__(self, op: str, wanted: str) -> None:
        import torch

        self.op, self.wanted, self.tf32 = op, wanted, wanted == "tf32"
        self.get, self.set = torch._C._get_fp32_precision_getter, torch._C._set_fp32_precision_setter

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        current = self.get("cuda", self.op)
        if (current == "tf32") == self.tf32:
            return fn(*args)
        self.set("cuda", self.op, self.wanted)
        try:
            return fn(*args)
        finally:
            self.set("cuda", self.op, current)


def _precision(op: str, dtype: str, device: Any) -> _Precision | None:
    """The precision a CUDA fp32 / tf32 problem must run at (None: nothing to hold)."""
    if device.type != "cuda" or dtype not in ("fp32", "tf32"):
        return None
    return _Precision(op, "tf32" if dtype == "tf32" else "ieee")


# -- GEMM ----------------------------------------------------------------------------------------------------
class GemmLaunch:
    """The vendor GEMM for one argument signature: out = act(alpha * a @ b + beta * c + bias + sum(d)).

    The library call is mm / bmm when nothing is added, else addmm / baddbmm with the one addend (beta * c,
    the broadcast bias or d[0]) or the sum of several, computed before out is written (c and d may be out
    itself); the activation runs in place on the result. A 2-D operand of a batched GEMM is expanded (a view).
    """

    reusable = True

    def __init__(self, args: GemmArgs, problem: GemmProblem) -> None:
        import torch

        self.batched = max(args.a.dim(), args.b.dim()) == 3
        self.batch = problem.batch
        self.expand_a = self.batched and args.a.dim() == 2
        self.expand_b = self.batched and args.b.dim() == 2
        self.mm: Callable[..., Any] = torch.bmm if self.batched else torch.mm
        self.addmm: Callable[..., Any] = torch.baddbmm if self.batched else torch.addmm
        out_dim = 3 if self.batched else 2
        # out may have one more or one fewer dim than the result (a leading batch of 1): write through a view
        self.out_view = None if args.out is None or args.out.dim() == out_dim else (
            (lambda t: t.unsqueeze(0)) if out_dim == 3 else (lambda t: t.squeeze(0)))
        epi = problem.epilogue
        self.with_c, self.num_d = epi.with_c, epi.num_d
        # a row bias is a column (M, 1); a 1-D column bias stays 1-D: addmm fuses it into the GEMM (cuBLASLt)
        self.bias_view = None if args.bias is None else (
            (lambda t: t.unsqueeze(-1)) if epi.bias == "row" else
            (lambda t: t.unsqueeze(-2)) if args.bias.dim() == 2 else (lambda t: t))
        self.addends = int(epi.with_c) + int(args.bias is not None) + epi.num_d
        self.act = activation_fn(epi.activation, inplace=True)
        self.precision = _precision("matmul", problem.dtype, args.a.device)

    def __call__(self, a: Any, b: Any, out: Any, c: Any, bias: Any, d: Any, alpha: Any, beta: Any,
                 scale_a: Any = None, scale_b: Any = None) -> Any:
        if self.precision is not None:
            return self.precision.run(self._run, a, b, out, c, bias, d, alpha, beta)
        return self._run(a, b, out, c, bias, d, alpha, beta)

    def _run(self, a: Any, b: Any, out: Any, c: Any, bias: Any, d: Any, alpha: Any, beta: Any) -> Any:
        if self.expand_a:
            a = a.expand(self.batch, *a.shape)
        if self.expand_b:
            b = b.expand(self.batch, *b.shape)
        target = out if out is None or self.out_view is None else self.out_view(out)
        if self.addends == 0:
            result = self.mm(a, b) if target is None else self.mm(a, b, out=target)
            if alpha != 1:
                result.mul_(alpha)
        else:
            addend, scale = self._addend(c, bias, d, beta)
            if target is None:
                result = self.addmm(addend, a, b, beta=scale, alpha=alpha)
            else:
                result = self.addmm(addend, a, b, beta=scale, alpha=alpha, out=target)
        if self.act is not None:
            self.act(result)
        return result if out is None else out

    def _addend(self, c: Any, bias: Any, d: Any, beta: Any) -> tuple[Any, Any]:
        """(tensor, its scale) that addmm adds: beta * c alone, bias or d[0] alone, or the sum of all."""
        terms = list(d) if self.num_d else []
        if bias is not None:
            terms.insert(0, self.bias_view(bias))   # type: ignore[misc]
        if not self.with_c:
            total = terms[0]
            for t in terms[1:]:
                total = total + t
            return total, 1
        if not terms:
            return c, beta
        total = c * beta
        for t in terms:
            total = total + t
        return total, 1


# -- convolution ---------------------------------------------------------------------------------------------
class ConvLaunch:
    """The vendor convolution of one direction for one argument signature: call it with (x, w, y, bias) by
    forward role (y is dy in the backward directions); returns the written tensor (the caller's when given).

    1-D problems run as 2-D ones of height 1 on views, so that results keep channel stride 1 (torch's 1-D
    convolutions write (N, C, L) row-major). A result with another channel stride is copied into a
    channels-last tensor.
    """

    reusable = True

    def __init__(self, args: ConvArgs, problem: ConvProblem) -> None:
        import torch
        import torch.nn.functional as F

        p = problem
        self.direction, self.written = p.direction, OUTPUT_ROLE[p.direction]
        self.out_slot = ("x", "w", "y").index(self.written)
        self.device = next(t for t in (args.x, args.w, args.y) if t is not None).device
        self.out_shape, self.out_dtype = shapes(p)[self.written], torch_dtype(p.dtype)
        self.flat = p.ndim == 1   # run as 2-D of height 1
        lead = (1, 0) if self.flat else ()
        self.stride = [*lead[:1], *p.stride]
        self.padding = [*lead[1:], *(left for left, _ in p.padding)]
        self.dilation = [*lead[:1], *p.dilation]
        self.groups = p.groups
        ndim = 2 if self.flat else p.ndim
        self.conv = {2: F.conv2d, 3: F.conv3d}[ndim]
        self.conv_transpose = {2: F.conv_transpose2d, 3: F.conv_transpose3d}[ndim]
        self.backward = torch.ops.aten.convolution_backward.default
        self.zeros, self.mask = [0] * ndim, [False, True, False]
        # bwd_data: the output padding that gives back the input size (torch's transposed-conv rule)
        self.output_padding = [*lead[1:], *((size + 2 * left - dil * (f - 1) - 1) % s
                                             for size, f, s, (left, _), dil
                                             in zip(p.spatial, p.filter, p.stride, p.padding, p.dilation))]
        self.act = activation_fn(p.activation, inplace=True)
        self.run = {"fwd": self._fwd, "bwd_data": self._bwd_data, "bwd_weight": self._bwd_weight}[p.direction]
        self.precision = _precision("conv", p.dtype, self.device)

    def __call__(self, x: Any, w: Any, y: Any, bias: Any) -> Any:
        out = (x, w, y)[self.out_slot]
        if self.precision is None:
            result = self.run(x, w, y, bias)
        else:
            result = self.precision.run(self.run, x, w, y, bias)
        if self.flat:
            result = result.squeeze(2)
        if out is not None:
            out.copy_(result)
            return out
        if result.stride(1) != 1 and result.shape[1] != 1:
            return empty_channels_last(self.out_shape, self.out_dtype, self.device).copy_(result)
        return result

    def _fwd(self, x: Any, w: Any, y: Any, bias: Any) -> Any:
        if self.flat:
            x, w = x.unsqueeze(2), w.unsqueeze(2)
        result = self.conv(x, w, bias, self.stride, self.padding, self.dilation, self.groups)
        if self.act is not None:
            self.act(result)
        return result

    def _bwd_data(self, x: Any, w: Any, dy: Any, bias: Any) -> Any:
        if self.flat:
            dy, w = dy.unsqueeze(2), w.unsqueeze(2)
        return self.conv_transpose(dy, w, None, self.stride, self.padding, self.output_padding, self.groups,
                                   self.dilation)

    def _bwd_weight(self, x: Any, w: Any, dy: Any, bias: Any) -> Any:
        like = w if w is not None else empty_channels_last(self.out_shape, self.out_dtype, self.device)
        if self.flat:
            x, like, dy = x.unsqueeze(2), like.unsqueeze(2), dy.unsqueeze(2)
        grads = self.backward(dy, x, like, None, self.stride, self.padding, self.dilation, False, self.zeros,
                              self.groups, self.mask)
        return grads[1]
