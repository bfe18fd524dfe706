"""Backward of the fused epilogue activations, through aten's own backward ops (traceable by torch.compile).

relu, sigmoid and tanh differentiate from the op's output; gelu, gelu_tanh and silu need the pre-activation
value, which the backward recomputes (one more forward without the activation).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.problems.gemm import ACTIVATIONS

if TYPE_CHECKING:
    import torch

FROM_OUTPUT = ("none", "relu", "sigmoid", "tanh")
FROM_INPUT = ("gelu", "gelu_tanh", "silu")


def check_activation(name: str) -> str:
    if name not in ACTIVATIONS:
        raise bad_choice(BadInput, "activation", name, ACTIVATIONS)
    return name


def needs_pre_activation(name: str) -> bool:
    return name in FROM_INPUT


def activation_backward(name: str, grad: torch.Tensor, output: torch.Tensor,
                        pre: torch.Tensor | None = None) -> torch.Tensor:
    """d loss / d pre-activation, given d loss / d output. `pre` is needed for FROM_INPUT activations."""
    import torch

    aten = torch.ops.aten
    if name == "none":
        return grad
    if name == "relu":
        return aten.threshold_backward(grad, output, 0)
    if name == "sigmoid":
        return aten.sigmoid_backward(grad, output)
    if name == "tanh":
        return aten.tanh_backward(grad, output)
    if pre is None:
        raise BadInput(f"activation {name!r} differentiates from its input; none was given",
                       field="activation")
    if name == "silu":
        return aten.silu_backward(grad, pre)
    return aten.gelu_backward(grad, pre, approximate="tanh" if name == "gelu_tanh" else "none")
