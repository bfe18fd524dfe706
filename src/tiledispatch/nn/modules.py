"""tiledispatch.nn.Conv1d / Conv2d / Conv3d / Linear: torch's modules whose forward runs the custom ops.

Subclasses of torch.nn.ConvNd / Linear: same constructor, parameters, buffers and state_dict (a torch
checkpoint loads unchanged, and theirs loads into torch's). What tiledispatch cannot serve stays on torch: a
module whose configuration td has no op for keeps `td_reason` (e.g. padding_mode='reflect') and runs torch's
forward, as does a call with an unserved dtype (float64, ...), an empty batch, a call under a torch.func
transform (grad, vmap, ...) or torch.jit.trace, and in eager code a call under saved-tensor hooks
(activation checkpointing, offloading), each warned once (eager.foreign). torch.jit.script refuses them
with a clear error. Conv weights are kept channels-last (the layout the kernels read, so no per-call copy);
inputs and weights in another layout are copied channels-last per call, and outputs are channels-last. Under
autocast the operands are cast to the autocast dtype, as torch does.
"""
from __future__ import annotations

from typing import Any

import torch

from tiledispatch.errors import BadInputType
from tiledispatch.nn import eager
from tiledispatch.nn.layer_plan import LayerPlan, clock
from tiledispatch.ops import DTYPES, conv_padding
from tiledispatch.ops.conv_ops import conv as _conv_op
from tiledispatch.ops.gemm_ops import gemm as _gemm_op
from tiledispatch.ops.gemm_ops import matrix
from tiledispatch.ops.layout import as_channels_last


def conv_reason(module: torch.nn.modules.conv._ConvNd) -> str | None:
    """Why tiledispatch cannot run this conv module, whatever its dtype (None: it can)."""
    if module.transposed:
        return "transposed convolution: tiledispatch has no op for it"
    if module.padding_mode != "zeros":
        return f"padding_mode={module.padding_mode!r}: only 'zeros' runs on tiledispatch"
    return None


def dtype_reason(dtype: torch.dtype) -> str | None:
    """Why tiledispatch cannot run tensors of this dtype (None: it can)."""
    if dtype not in DTYPES:
        return f"dtype {dtype}: tiledispatch takes {', '.join(str(d) for d in DTYPES)}"
    return None


_any_autocast = torch._C._is_any_autocast_enabled


def _autocast(input: torch.Tensor, *tensors: Any) -> tuple:
    """The tensors cast to the autocast dtype when autocast is on for input's device (as torch's layers do);
    with no autocast on at all (the common case) one cheap check."""
    if not _any_autocast():
        return tensors
    device = input.device.type
    if not torch.is_autocast_enabled(device):
        return tensors
    dtype = torch.get_autocast_dtype(device)
    return tuple(t if t is None else t.to(dtype) for t in tensors)


_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_linear = torch.nn.functional.linear


def _needs_grad(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether autograd records this call."""
    return torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))


def _kernel_layout(weight: torch.Tensor) -> torch.Tensor:
    """The weight channels-last, itself when torch deems it so already. The kernels ignore the strides of
    size-1 dims, torch does not: given a 1x1 or depthwise weight that torch keeps as (C, 1, 1, 1) or
    (49, 49, 7, 1) restrided to (C, 1, C, C) or (49, 1, 7, 1), torch's own conv path (layers left on torch)
    cost ~5 ms more host time per ConvNeXt-nano training step on an H100 (tools/probe_model_host.py)."""
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(weight.dim())
    return as_channels_last(weight) if fmt is None else weight.contiguous(memory_format=fmt)


def _compiled_bias(y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """y + bias per channel, outside the op under torch.compile: Inductor fuses the add into the next
    pointwise kernel (norm, activation), as it does for its own convolutions, where a bias inside the opaque
    op costs a vendor plan a separate add kernel per call (14 per ConvNeXt-nano inference step, H200)."""
    return y + bias.view(-1, *[1] * (y.dim() - 2))


def _bias_outside(input: torch.Tensor, spatial: int) -> bool:
    """Whether a compiled conv adds its bias outside the op (_compiled_bias): not on an input of one pixel
    per image (squeeze-excitation convs). There the fusion saves nothing, and the partitioner, recomputing
    the add in the backward, saves the bias as one more forward output per conv (an EfficientNet-B0's 16
    conv_reduce biases, tools/probe_saved_inputs.py), each costing host time per graph replay."""
    return not all(s == 1 for s in input.shape[input.dim() - spatial:])


class _TdConv(torch.nn.modules.conv._ConvNd):
    """The tiledispatch forward of Conv1d/2d/3d (ahead of torch's class in their method order)."""

    td_reason: str | None
    _td_geometry: tuple

    def _td_setup(self) -> None:
        """Decide whether this module runs on tiledispatch and prepare its arguments: called by __init__ and
        by convert (which swaps the class of an existing torch module)."""
        self.td_reason = conv_reason(self)
        self._td_last: tuple | None = None   # (input shape, grad mode) last sent to torch's layer by a plan
        if self.td_reason is not None:
            return
        stride, dilation = list(self.stride), list(self.dilation)
        padding = conv_padding(self.padding, tuple(self.kernel_size), stride, dilation)
        # immutable: Dynamo skips the guards of a module whose attributes are all immutable and unchanged
        # (dict tags); one list here made it check every guard of every converted module on each step
        self._td_geometry = (tuple(stride), tuple(padding), tuple(dilation), self.groups)
        bias_dims = (0, *range(2, len(self.kernel_size) + 2))
        self._td_eager = (eager.td_geometry(*self._td_geometry), self._td_geometry, bias_dims)
        self._td_plans: dict[tuple, LayerPlan] = {}   # by input signature (eager.LayerPlan)
        with torch.no_grad():
            self.weight.data = _kernel_layout(self.weight.data)

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor,
                      bias: torch.Tensor | None) -> torch.Tensor:
        if not _compiling():   # not read while tracing: an eager call setting it would fail a guard
            last = self._td_last   # the call before settled on torch's layer: same shape and grad mode, again
            if last is not None and input.shape == last[0] and _grad_enabled() is last[1]:
                return super()._conv_forward(input, weight, bias)
        if self.td_reason is not None:
            # torch.nn.Conv1d/2d/3d's, next in the method order of the concrete classes
            return super()._conv_forward(input, weight, bias)
        compiling, plan = _compiling(), None
        start = 0.0 if compiling else clock()
        if not compiling:   # a signature settled on torch's layer goes there first, without more checks
            why = eager.foreign()   # torch.func, jit.trace, checkpointing: torch's layer (eager.foreign)
            if why is not None:
                eager.warn_foreign(why)
                return super()._conv_forward(input, weight, bias)
            key = eager.signature(input, weight, bias)
            plan = self._td_plans.get(key)
            if plan is not None and plan.stage != "td":
                if plan.on_torch:
                    self._td_last = (input.shape, _grad_enabled())
                    return super()._conv_forward(input, weight, bias)
                if plan.stage == "torch":   # sampling the host time of torch's layer (from the top)
                    y = super()._conv_forward(input, weight, bias)
                    plan.sample("torch", "fwd", start)
                    eager.time_backward(y, plan)
                    return y
        spatial = len(self.kernel_size)
        dims = input.dim()
        if (input.dtype not in DTYPES or dims not in (spatial + 1, spatial + 2)
                or (dims == spatial + 2 and input.shape[0] == 0)):
            return super()._conv_forward(input, weight, bias)
        batched = dims == spatial + 2
        x, w, b = _autocast(input, input if batched else input.unsqueeze(0), weight, bias)
        if compiling and b is not None and _bias_outside(x, spatial):   # visible to Inductor (_compiled_bias)
            y = _compiled_bias(_conv_op(x, w, None, *self._td_geometry, "none"), b)
            return y if batched else y.squeeze(0)
        if compiling or not eager.plain(x, w, b):
            y = _conv_op(x, w, b, *self._td_geometry, "none")
            return y if batched else y.squeeze(0)
        if plan is None:
            plan = self._td_plans[key] = LayerPlan(key[4:])
        timing = plan.timing("td")   # td's host time from the top of the forward, as torch's
        if _needs_grad(x, w, b):
            y = eager.Conv.apply(x, w, b, self._td_eager, plan)
        else:
            y = eager.conv(as_channels_last(x), as_channels_last(w), b, self._td_eager[0], plan)
        if timing:
            plan.sample("td", "fwd", start)
        return y if batched else y.squeeze(0)

    def extra_repr(self) -> str:
        where = "tiledispatch" if self.td_reason is None else f"torch: {self.td_reason}"
        return f"{super().extra_repr()}, runs on {where}"

    def __prepare_scriptable__(self) -> torch.nn.Module:
        raise _unscriptable(self)


class Conv1d(_TdConv, torch.nn.Conv1d):
    """torch.nn.Conv1d running torch.ops.tiledispatch.conv (its constructor, parameters and state_dict)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._td_setup()


class Conv2d(_TdConv, torch.nn.Conv2d):
    """torch.nn.Conv2d running torch.ops.tiledispatch.conv (its constructor, parameters and state_dict)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._td_setup()


class Conv3d(_TdConv, torch.nn.Conv3d):
    """torch.nn.Conv3d running torch.ops.tiledispatch.conv (its constructor, parameters and state_dict)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._td_setup()


def _torch_linear(module: torch.nn.Linear, input: torch.Tensor) -> torch.Tensor:
    """torch.nn.Linear's forward, named rather than reached by super(): a step check's pre-hook may swap a
    converted layer back to torch's class after its call has bound this class's forward (nn/step_check.py)."""
    return torch.nn.Linear.forward(module, input)


class Linear(torch.nn.Linear):
    """torch.nn.Linear running torch.ops.tiledispatch.gemm: x (*, in) @ weight.T (column-major) + bias."""

    td_reason: str | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._td_setup()

    def _td_setup(self) -> None:
        self.td_reason = None
        self._td_last: tuple | None = None   # (input shape, grad mode) last sent to torch's layer by a plan
        self._td_plans: dict[tuple, LayerPlan] = {}   # by input signature (eager.LayerPlan)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not _compiling():   # not read while tracing (see _TdConv._conv_forward)
            last = self._td_last   # the call before settled on torch's layer: same shape and grad mode, again
            if last is not None and input.shape == last[0] and _grad_enabled() is last[1]:
                return _torch_linear(self, input)
        if self.td_reason is not None:
            return _torch_linear(self, input)
        compiling, plan = _compiling(), None
        start = 0.0 if compiling else clock()
        if not compiling:   # a signature settled on torch's layer goes there first, without more checks
            why = eager.foreign()   # torch.func, jit.trace, checkpointing: torch's layer (eager.foreign)
            if why is not None:
                eager.warn_foreign(why)
                return _torch_linear(self, input)
            key = eager.signature(input, self.weight, self.bias)
            plan = self._td_plans.get(key)
            if plan is not None and plan.stage != "td":
                if plan.on_torch:
                    self._td_last = (input.shape, _grad_enabled())
                    return _torch_linear(self, input)
                if plan.stage == "torch":   # sampling torch's layer (one addmm and its backward node)
                    y = _linear(input.reshape(-1, self.in_features), self.weight, self.bias)
                    plan.sample("torch", "fwd", start)
                    eager.time_backward(y, plan)
                    return y if input.dim() == 2 else y.reshape(*input.shape[:-1], self.out_features)
        if input.dtype not in DTYPES or input.numel() == 0:
            return _torch_linear(self, input)
        x, weight, bias = _autocast(input, input.reshape(-1, self.in_features), self.weight, self.bias)
        if compiling or not eager.plain(x, weight, bias):
            y = _gemm_op(x, weight.t(), bias, "none")
            return y.reshape(*input.shape[:-1], self.out_features)
        if plan is None:
            plan = self._td_plans[key] = LayerPlan(key[4:], "gemm")
        x = matrix(x)
        timing = plan.timing("td")   # td's host time from the top of the forward, as torch's
        y = (eager.Linear.apply(x, weight, bias, plan) if _needs_grad(x, weight, bias)
             else eager.linear(x, weight, bias, plan))
        if timing:
            plan.sample("td", "fwd", start)
        return y.reshape(*input.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        where = "tiledispatch" if self.td_reason is None else f"torch: {self.td_reason}"
        return f"{super().extra_repr()}, runs on {where}"

    def __prepare_scriptable__(self) -> torch.nn.Module:
        raise _unscriptable(self)


def _unscriptable(module: torch.nn.Module) -> BadInputType:
    """torch.jit.script's error for a converted module (torch calls __prepare_scriptable__ on every module
    before compiling; TorchScript cannot compile the modules' Python dispatch)."""
    return BadInputType(f"torch.jit.script cannot compile the tiledispatch module {type(module).__name__}: "
                        "script the model before tdnn.convert, or use torch.jit.trace (which records torch's "
                        "own layers), torch.export or torch.compile", field="model")


SWAPS: dict[type, type] = {torch.nn.Conv1d: Conv1d, torch.nn.Conv2d: Conv2d, torch.nn.Conv3d: Conv3d,
                           torch.nn.Linear: Linear}
