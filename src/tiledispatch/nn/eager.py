"""The eager path of tiledispatch.nn's modules: torch.autograd.Functions calling td.conv* / td.gemm directly.

A custom-op call with autograd goes op -> autograd kernel -> Function -> redispatch -> kernel, several Python
frames of torch's each way; in plain eager code the modules skip that and call the td.* hot paths from a
Function, so a converted layer's host time stays near torch's own. Whatever transforms tensors (torch.compile
and export, dispatch and torch-function modes, tensor subclasses) takes the custom ops, whose fake kernels and
autograd formulas torch reads; so does a backward that builds a graph (create_graph=True) or runs batched.
torch.func transforms, torch.jit.trace, saved-tensor hooks and forward AD run torch's own layers (`foreign`).
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.autograd.forward_ad as _forward_ad

import tiledispatch as td
from tiledispatch.dispatch import entry
from tiledispatch.ops.conv_ops import conv_grads
from tiledispatch.ops.gemm_ops import gemm_grads, matrix
from tiledispatch.ops.layout import as_channels_last
from tiledispatch.nn.layer_plan import LayerPlan, clock

_Parameter = torch.nn.Parameter
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_functorch_level = torch._C._functorch.peek_interpreter_stack
_tracing_state = torch._C._get_tracing_state
_top_saved_hooks = torch._C._autograd._top_saved_tensors_default_hooks
_has_storage = torch._C._has_storage


def foreign() -> str | None:
    """Outside torch.compile: what makes a call run torch's own layer instead of td's, or None.
    - A torch.func transform (grad, vjp, jacrev, vmap, ...): the custom ops have no functorch rules
      (torch.library's autograd registration builds a Function without setup_context).
    - torch.jit.trace: the traced module then records torch's aten ops, which run wherever TorchScript does
      (traced sizes are tensors, which td's checks refuse).
    - Saved-tensor hooks (torch.utils.checkpoint, save_on_cpu): a non-reentrant checkpoint recomputes the
      forward in the backward and needs it to save what the forward saved; a learning LayerPlan alternates
      td's path and torch's layer from call to call (the plan is left as it is).
    - A forward-AD dual level (torch.autograd.forward_ad): the Functions here have no jvp."""
    if _functorch_level() is not None:
        return ("a torch.func transform (grad, vmap, jacrev, ...): the tiledispatch ops have no functorch "
                "rules")
    if _tracing_state() is not None:
        return "torch.jit.trace: the traced module records torch's aten ops, runnable wherever TorchScript is"
    if _top_saved_hooks(False) is not None:
        return ("saved-tensor hooks in eager code (torch.utils.checkpoint, offloading): a recomputation must "
                "save what its forward saved")
    if _forward_ad._current_level >= 0:
        return "forward-mode AD (torch.autograd.forward_ad): the eager Functions have no jvp"
    return None


def _batched_backward(grad: torch.Tensor) -> bool:
    """Whether this backward's grad is batched: batched gradients (torch.autograd.grad with
    is_grads_batched=True, jacobian(vectorize=True)) run the backward under vmap (torch's legacy one, or a
    functorch transform), and a batched tensor has no storage the td.* kernels could read. The ops then
    compute it (create_graph does the same): under vmap torch runs them once per batch entry."""
    return _functorch_level() is not None or not _has_storage(grad)


_warned: set[str] = set()


def warn_foreign(why: str) -> None:
    """Say once per process and reason that converted layers run torch's own conv / linear."""
    if why not in _warned:
        _warned.add(why)
        warnings.warn(f"tiledispatch.nn: converted layers run torch's own conv / linear under {why}",
                      UserWarning, stacklevel=2)


def plain(*tensors: torch.Tensor | None) -> bool:
    """Whether a call runs in plain eager mode on plain tensors (the Functions here may serve it)."""
    if (torch.compiler.is_compiling() or _dispatch_modes() or _function_modes()
            or _functorch_level() is not None):
        return False
    for t in tensors:
        if t is not None and type(t) is not torch.Tensor and type(t) is not _Parameter:
            return False
    return True


_grad_enabled = torch.is_grad_enabled
_autocasting = torch._C._is_any_autocast_enabled


def signature(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple:
    """A module call's key to its LayerPlan: the input's shape, strides and dtype, whether autocast is on,
    and (dx, dw) wanted by its backward (key[4:], LayerPlan.needs). Cheap: it runs on every call."""
    grad = _grad_enabled() and (x.requires_grad or weight.requires_grad
                                or (bias is not None and bias.requires_grad))
    return (x.shape, x.stride(), x.dtype, _autocasting(), grad and x.requires_grad,
            grad and weight.requires_grad)


def td_geometry(stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                groups: int) -> tuple:
    """The ops' geometry (per-dim stride and dilation, flat padding) as td.conv*'s arguments, ints where
    every dim agrees (the cheapest memo key)."""
    def compact(values: Sequence[int]) -> Any:
        return values[0] if len(set(values)) == 1 else tuple(values)

    lefts, rights = padding[0::2], padding[1::2]
    pad: Any = compact(lefts) if lefts == rights else tuple(zip(lefts, rights))
    return compact(stride), pad, compact(dilation), groups


def time_backward(y: torch.Tensor, plan: LayerPlan) -> None:
    """Sample the host time of the autograd node that made y (torch's layer: one backward call) when the
    backward runs."""
    node = y.grad_fn
    if node is None:
        return
    started: list[float] = []

    def before(grad_outputs: Any) -> None:
        started.append(clock())

    def after(grad_inputs: Any, grad_outputs: Any) -> None:
        if started:
            plan.sample("torch", "bwd", started[0])

    node.register_prehook(before)
    node.register_hook(after)


def conv(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, args: tuple,
         plan: LayerPlan) -> torch.Tensor:
    """td.conv(x, w, bias, *args) for a channels-last x, learning what td picked."""
    y = td.conv(x, w, bias, *args)
    if "fwd" not in plan.gpu:
        plan.learn("fwd", entry.conv_plan("fwd", x, w, w.shape, *args, bias=bias))
    return y


class Conv(torch.autograd.Function):
    """y = conv(x, w) + bias on td.conv; backward on td.conv_bwd_data / td.conv_bwd_weight and a bias sum
    (or cuDNN's one backward call when td picked it for both). `geometry` is (td.conv* arguments, ops
    arguments, bias-sum dims) of the module."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,  # type: ignore[override]
                geometry: tuple, plan: LayerPlan) -> torch.Tensor:
        x, w = as_channels_last(x), as_channels_last(w)   # w: a weight re-laid after convert, e.g. .to(NCHW)
        ctx.geometry, ctx.plan = geometry, plan
        ctx.save_for_backward(x, w, bias)
        return conv(x, w, bias, geometry[0], plan)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:  # type: ignore[override]
        plan = ctx.plan
        start = clock() if plan.timing("td") else None
        x, w, bias = ctx.saved_tensors
        needs = ctx.needs_input_grad
        if torch.is_grad_enabled() or _batched_backward(grad):   # through the ops (see _batched_backward)
            return (*conv_grads(x, w, bias, grad, ctx.geometry[1], needs), None, None)
        grad = as_channels_last(grad)
        if plan.vendor_backward:
            grads = _cudnn_backward(x, w, bias, grad, ctx.geometry[1], needs)
            if start is not None:
                plan.sample("td", "bwd", start)
            return (*grads, None, None)
        td_args = ctx.geometry[0]
        dx = dw = db = None
        if needs[0]:
            dx = td.conv_bwd_data(grad, w, x.shape, *td_args)
            if "bwd_data" not in plan.gpu:
                plan.learn("bwd_data", entry.conv_plan("bwd_data", grad, w, x.shape, *td_args))
        if needs[1]:
            dw = td.conv_bwd_weight(x, grad, w.shape, *td_args)
            if "bwd_weight" not in plan.gpu:
                plan.learn("bwd_weight", entry.conv_plan("bwd_weight", x, grad, w.shape, *td_args))
        if bias is not None and needs[2]:
            db = grad.sum(dim=ctx.geometry[2]).to(bias.dtype)
        if start is not None:
            plan.sample("td", "bwd", start)
        return dx, dw, db, None, None


def _cudnn_backward(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, grad: torch.Tensor,
                    geometry: tuple, needs: Sequence[bool]) -> tuple:
    """(dx, dw, dbias) in one aten.convolution_backward call (cuDNN computes dx and dw together); the vendor
    plans td picked run symmetric padding only."""
    stride, padding, dilation, groups = geometry
    bias_sizes = None if bias is None else [bias.shape[0]]
    mask = [needs[0], needs[1], bias is not None and needs[2]]
    dx, dw, db = torch.ops.aten.convolution_backward(grad, x, w, bias_sizes, stride, padding[0::2], dilation,
                                                     False, [0] * len(stride), groups, mask)
    return dx, dw, db


class Linear(torch.autograd.Function):
    """y = x @ weight.T + bias for a 2-D x on td.gemm; backward two td.gemm calls and a bias sum."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor,  # type: ignore[override]
                bias: torch.Tensor | None, plan: LayerPlan) -> torch.Tensor:
        x = matrix(x)
        ctx.save_for_backward(x, weight, bias)
        ctx.plan = plan
        return linear(x, weight, bias, plan)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:  # type: ignore[override]
        plan = ctx.plan
        start = clock() if plan.timing("td") else None
        x, weight, bias = ctx.saved_tensors
        needs = ctx.needs_input_grad
        if torch.is_grad_enabled() or _batched_backward(grad):   # through the ops (see _batched_backward)
            dx, dw_t, db = gemm_grads(x, weight.t(), bias, grad, needs)
            return dx, None if dw_t is None else dw_t.t(), db, None
        grad = matrix(grad)
        dx = _gemm(plan, "bwd_data", grad, weight) if needs[0] else None
        dw = _gemm(plan, "bwd_weight", grad.t(), x) if needs[1] else None
        db = grad.sum(0).to(bias.dtype) if bias is not None and needs[2] else None
        if start is not None:
            plan.sample("td", "bwd", start)
        return dx, dw, db, None


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, plan: LayerPlan) -> torch.Tensor:
    """td.gemm(x, weight.T, bias) for a 2-D row-major x, learning what td picked."""
    return _gemm(plan, "fwd", x, weight.t(), bias)


def _gemm(plan: LayerPlan, direction: str, a: torch.Tensor, b: torch.Tensor,
          bias: torch.Tensor | None = None) -> torch.Tensor:
    out = td.gemm(a, b, bias=bias)
    if direction not in plan.gpu:
        plan.learn(direction, entry.gemm_plan(a, b, bias=bias))
    return out
