"""cuDNN through torch for `profile conv --vendor`: torch.nn.functional.conv* for forward (with the epilogue
in eager ops) and torch.ops.aten.convolution_backward for the backward directions, on the same channels-last
tensors the kernels use."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tiledispatch.cli.output import note
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.runtime.conv_args import ConvArgs

CUDNN = "cuDNN"


def conv_vendor(problem: ConvProblem, args: ConvArgs) -> tuple[str, Callable[[], Any]] | None:
    """(label, function returning the written tensor), or None (with a note) when cuDNN cannot run it."""
    import torch

    if any(left != right for left, right in problem.padding):
        note("--vendor: skipped, cuDNN takes symmetric padding only (asymmetric padding needs an extra copy)")
        return None
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False     # fp32 is compared at fp32 accuracy, as the kernels are
    padding = [left for left, _ in problem.padding]
    if problem.direction == "fwd":
        return _forward(problem, args, padding)
    return _backward(problem, args, padding)


def _forward(problem: ConvProblem, args: ConvArgs, padding: list[int]) -> tuple[str, Callable[[], Any]]:
    import torch.nn.functional as F

    from tiledispatch.runtime.reference import _act

    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[problem.ndim]
    stride, dilation = list(problem.stride), list(problem.dilation)

    def run() -> Any:
        y = conv(args.x, args.w, args.bias, stride, padding, dilation, problem.groups)
        return _act(y, problem.activation) if problem.activation != "none" else y

    label = CUDNN if problem.activation == "none" else f"{CUDNN} + eager activation"
    return label, run


def _backward(problem: ConvProblem, args: ConvArgs, padding: list[int]) -> tuple[str, Callable[[], Any]]:
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
