"""The vendor libraries through torch, on the same tensors the kernels use: torch.matmul (cuBLAS) for GEMMs,
torch.nn.functional.conv* (cuDNN) for forward convolutions and torch.ops.aten.convolution_backward for the
backward directions; a fused epilogue runs as eager torch ops after them. Used by `profile --vendor` and
sweeps."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tiledispatch.errors import UnsupportedProblem
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.runtime.conv_args import ConvArgs

CUBLAS = "torch.matmul"
CUDNN = "cuDNN"
VendorCall = tuple[str, Callable[[], Any]]


def vendor_call(problem: GemmProblem | ConvProblem, args: Any) -> VendorCall:
    """(label, function returning the result) of the vendor library for `problem` on `args`; raises
    UnsupportedProblem (field 'vendor') when the vendor library has no path for it."""
    if isinstance(problem, ConvProblem):
        return conv_vendor(problem, args)
    return gemm_vendor(problem, args)


def gemm_vendor(problem: GemmProblem, args: Any) -> VendorCall:
    import torch

    if problem.dtype == "int8":
        raise UnsupportedProblem("torch.matmul has no general int8 CUDA path", field="vendor")
    if problem.dtype == "fp8e4m3":
        raise UnsupportedProblem("fp8 is compared with torch._scaled_mm by benchmarks/gemm.py only",
                                 field="vendor")
    torch.backends.cuda.matmul.allow_tf32 = problem.dtype == "tf32"
    label = CUBLAS if problem.epilogue.is_identity else f"{CUBLAS} + eager epilogue"
    return label, _matmul(args)


def _matmul(args: Any) -> Callable[[], Any]:
    """torch.matmul, plus the epilogue in eager torch ops when the problem has one."""
    import torch

    from tiledispatch.dtypes import torch_dtype
    from tiledispatch.testing.reference import _act

    out_dtype = torch_dtype(args.out_dtype) if args.out_dtype else args.a.dtype

    def run() -> Any:
        acc = torch.matmul(args.a, args.b)
        if args.alpha != 1:
            acc = acc * args.alpha
        if args.c is not None and args.beta != 0:
            acc = acc + args.beta * args.c
        if args.bias is not None:
            acc = acc + (args.bias.unsqueeze(-1) if args.bias_mode == "row" else args.bias)
        for extra in args.d:
            acc = acc + extra
        return _act(acc, args.activation).to(out_dtype)

    return run


def conv_vendor(problem: ConvProblem, args: ConvArgs) -> VendorCall:
    import torch

    if any(left != right for left, right in problem.padding):
        raise UnsupportedProblem("cuDNN takes symmetric padding only "
                                 "(asymmetric padding needs an extra copy)",
                                 field="vendor")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False     # fp32 is compared at fp32 accuracy, as the kernels are
    padding = [left for left, _ in problem.padding]
    if problem.direction == "fwd":
        return _forward(problem, args, padding)
    return _backward(problem, args, padding)


def _forward(problem: ConvProblem, args: ConvArgs, padding: list[int]) -> VendorCall:
    import torch.nn.functional as F

    from tiledispatch.testing.reference import _act

    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[problem.ndim]
    stride, dilation = list(problem.stride), list(problem.dilation)

    def run() -> Any:
        y = conv(args.x, args.w, args.bias, stride, padding, dilation, problem.groups)
        return _act(y, problem.activation) if problem.activation != "none" else y

    label = CUDNN if problem.activation == "none" else f"{CUDNN} + eager activation"
    return label, run


def _backward(problem: ConvProblem, args: ConvArgs, padding: list[int]) -> VendorCall:
    import torch

    data = problem.direction == "bwd_data"
    mask = [data, not data, False]
    zeros = [0] * problem.ndim
    stride, dilation = list(problem.stride), list(problem.dilation)

    def run() -> Any:
        grads = torch.ops.aten.convolution_backward(args.y, args.x, args.w, None, stride, padding, dilation,
                                                    False, zeros, problem.groups, mask)
        return grads[0] if data else grads[1]

    return CUDNN, run
