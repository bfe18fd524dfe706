"""The one-call API on torch tensors, over default registries built lazily from the essential presets."""
from __future__ import annotations

import threading
from typing import Any

from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.registry.registry import Registry
from tiledispatch.runtime.conv_execute import role_tuple
from tiledispatch.runtime.launcher import call_key, device_token, interpret_switch, remember, tensor_key

_LOCK = threading.Lock()


class _Versioned(dict):
    """A dict that counts its changes (td.gemm's memo checks that the default registries did not change)."""

    version = 0

    def _changed(self) -> None:
        self.version += 1

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        self._changed()

    def __delitem__(self, key: Any) -> None:
        super().__delitem__(key)
        self._changed()

    def pop(self, *args: Any) -> Any:
        self._changed()
        return super().pop(*args)

    def popitem(self) -> Any:
        self._changed()
        return super().popitem()

    def clear(self) -> None:
        super().clear()
        self._changed()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._changed()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._changed()
        return super().setdefault(key, default)


_DEFAULTS: dict[tuple, Registry] = _Versioned()
_MEMO: dict[tuple, tuple] = {}   # call_key + options -> (_DEFAULTS, its version, registry, Dispatch)


def default_registry(problem: GemmProblem) -> Registry:
    """The registry td.gemm uses for problems like this one: the essential preset of its dtype and layout,
    specialised to its epilogue, built (or loaded from the cache) on first use."""
    key = (problem.dtype, problem.layout, problem.epilogue)
    return _built_default(_DEFAULTS, key, f"gemm_{problem.dtype}_{problem.layout}_essential", problem.epilogue)


def _built_default(store: dict, key: tuple, preset: str, epilogue: Any) -> Registry:
    """store[key], first built from `preset` specialised to `epilogue` (failed builds are logged)."""
    with _LOCK:
        if key not in store:
            registry = Registry()
            registry.add_preset(preset, epilogue)
            report = registry.build()
            if report.failed:
                import logging

                logging.getLogger("tiledispatch").warning("default registry %s: %d kernels failed to build: %s",
                                                          preset, len(report.failed), report.failed)
            store[key] = registry
        return store[key]


def gemm(a: Any, b: Any, *, bias: Any = None, d: tuple = (), activation: str | None = None, alpha: float = 1.0,
         beta: float = 0.0, out: Any = None, out_dtype: str | None = None, c: Any = None,
         bias_mode: str | None = None, allow_tf32: bool = False, strategy: str = "auto", scale_a: Any = None,
         scale_b: Any = None) -> Any:
    """out = activation(alpha * a @ b + beta * c + bias + sum(d)), computed by the selected kernel.

    a: (M, K) or (batch, M, K); b: (K, N) or (batch, K, N), row- or column-major. bias has N values
    (per column, the default) or M values with bias_mode="row". With beta != 0 and no `c`, `out` is read
    as C (BLAS semantics). scale_a / scale_b: one-element float32 tensors scaling fp8 operands. CUDA tensors
    run compiled kernels; CPU tensors run on Triton's interpreter. The first call of an argument signature
    validates, selects and binds; later calls of the same signature reuse that decision.
    """
    if beta != 0 and c is None:
        c = out   # BLAS semantics, as make_gemm_args
    options = (bias_mode, activation, out_dtype, allow_tf32, strategy, None,
               device_token() if strategy == "auto" else None)   # auto reads the tuning DB of the current GPU
    key = None if strategy == "tune" else call_key(a, b, out, c, bias, d, beta, scale_a, scale_b, options)
    hit = _MEMO.get(key)
    if hit is not None:
        defaults, version, registry, entry = hit
        if (entry.bound is not None and defaults is _DEFAULTS and version == defaults.version
                and entry.valid(registry)):
            return entry.bound(a, b, out, c, bias, d, alpha, beta, scale_a, scale_b)
    fields = {"out": out, "c": c, "bias": bias, "bias_mode": bias_mode, "d": d, "activation": activation,
              "alpha": alpha, "beta": beta, "out_dtype": out_dtype, "allow_tf32": allow_tf32, "scale_a": scale_a,
              "scale_b": scale_b}
    return _dispatch(key, hit, a, b, strategy, fields)


def _dispatch(key: tuple | None, hit: tuple | None, a: Any, b: Any, strategy: str, fields: dict[str, Any]) -> Any:
    """td.gemm past a bound launch: validate, select, run and remember (Registry.dispatch)."""
    defaults = _DEFAULTS
    version = getattr(defaults, "version", None)
    if hit is not None and hit[0] is defaults and hit[1] == version:
        registry = hit[2]
    else:
        from tiledispatch.runtime.arguments import problem_from_args
        from tiledispatch.runtime.execute import make_gemm_args

        registry = default_registry(problem_from_args(make_gemm_args(a, b, **fields)))
        version = getattr(defaults, "version", None)   # building the registry stored it
    out, entry = registry.dispatch(key, None, a, b, strategy, fields)
    if key is not None and version is not None and registry._memo.get(key) is entry:
        remember(_MEMO, key, (defaults, version, registry, entry))
    return out




# -- convolutions ------------------------------------------------------------------------------------------
_CONV_DEFAULTS: dict[tuple, Registry] = _Versioned()


def _conv_defaults_key(problem: Any) -> tuple:
    return (problem.direction, problem.dtype, problem.ndim, problem.activation, problem.bias)


def default_conv_registry(problem: Any) -> Registry:
    """The registry td.conv* use for problems like this one: the essential preset of its direction, dtype and
    ndim, specialised to its epilogue, built (or loaded from the cache) on first use."""
    key = _conv_defaults_key(problem)
    return _built_default(_CONV_DEFAULTS, key, f"conv_{problem.direction}_{problem.dtype}_{problem.ndim}d_essential",
                          (problem.activation, problem.bias))


# (direction, shapes, geometry, groups, torch dtype, bias?, activation) -> (ConvProblem, its default registry):
# a call of a known geometry skips deriving and checking the problem (the registry's own memo then skips the
# selection)
_CONV_CALLS: dict[tuple, tuple] = {}
# the whole argument signature (_conv_signature) -> (_CONV_DEFAULTS, its version, registry, Dispatch): a
# repeated call goes straight to its bound launch
_CONV_MEMO: dict[tuple, tuple] = {}


def _frozen(value: Any) -> Any:
    """A stride / padding / dilation argument as nested tuples (lists are not hashable)."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _geometry(direction: str, x_shape: Any, w_shape: Any, stride: Any, padding: Any, dilation: Any,
              groups: int) -> tuple:
    """The hashable part of a td.conv* call that fixes its problem's shape (TypeError: an unhashable argument)."""
    key = (direction, tuple(x_shape), tuple(w_shape), _frozen(stride), _frozen(padding), _frozen(dilation), groups)
    hash(key)
    return key


def _conv_signature(direction: str, first: Any, second: Any, x_shape: Any, w_shape: Any, stride: Any,
                    padding: Any, dilation: Any, groups: int, bias: Any, activation: str | None, out: Any,
                    strategy: str) -> tuple | None:
    """td.conv*'s memo key: every argument a decision reads (tensors by shape, strides, dtype, device and
    alignment), or None for `tune` and for arguments that cannot be keys (the checked path names the bad one)."""
    if strategy == "tune":
        return None
    try:
        key = (_geometry(direction, x_shape, w_shape, stride, padding, dilation, groups), activation, strategy,
               tensor_key(first), tensor_key(second), None if out is None else tensor_key(out),
               None if bias is None else tensor_key(bias), interpret_switch(),
               device_token() if strategy == "auto" else None)
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None
    return key


def _run_conv(direction: str, first: Any, second: Any, x_shape: Any, w_shape: Any, stride: Any, padding: Any,
              dilation: Any, groups: int, *, bias: Any = None, activation: str | None = None, out: Any = None,
              strategy: str = "auto") -> Any:
    signature = _conv_signature(direction, first, second, x_shape, w_shape, stride, padding, dilation, groups,
                                bias, activation, out, strategy)
    hit = _CONV_MEMO.get(signature) if signature is not None else None
    if hit is not None:
        defaults, version, registry, entry = hit
        if defaults is _CONV_DEFAULTS and version == defaults.version and entry.valid(registry):
            return entry.bound(*role_tuple(direction, first, second, out, bias))
    return _checked_conv(signature, direction, first, second, x_shape, w_shape, stride, padding, dilation, groups,
                         bias=bias, activation=activation, out=out, strategy=strategy)


def _checked_conv(signature: tuple | None, direction: str, first: Any, second: Any, x_shape: Any, w_shape: Any,
                  stride: Any, padding: Any, dilation: Any, groups: int, *, bias: Any, activation: str | None,
                  out: Any, strategy: str) -> Any:
    """td.conv* past a remembered decision: check the tensors, derive the problem (or find it by geometry),
    dispatch on the default registry and remember the decision under `signature`."""
    from tiledispatch.errors import BadInput

    for field, t in (("first", first), ("second", second)):
        if not hasattr(t, "dtype"):
            raise BadInput(f"{field} tensor argument must be a torch tensor, got {type(t).__name__}", field=field)
    if first.dtype != second.dtype:
        raise BadInput(f"the tensors have different dtypes ({first.dtype}, {second.dtype})", field="dtype")
    if first.device != second.device:
        raise BadInput(f"the tensors are on different devices ({first.device}, {second.device})", field="device")
    try:
        key = (_geometry(direction, x_shape, w_shape, stride, padding, dilation, groups), first.dtype,
               bias is not None, activation)
        hit = _CONV_CALLS.get(key)
    except TypeError:   # an argument that cannot be a dict key: derive the problem (it names the bad field)
        key, hit = None, None
    if hit is None or _CONV_DEFAULTS.get(_conv_defaults_key(hit[0])) is not hit[1]:
        problem = _conv_problem(direction, x_shape, w_shape, stride, padding, dilation, groups, first.dtype, bias,
                                activation)
        hit = (problem, default_conv_registry(problem))
        if key is not None:
            remember(_CONV_CALLS, key, hit)
    problem, registry = hit
    defaults = _CONV_DEFAULTS
    version = getattr(defaults, "version", None)
    result, entry, remembered = registry.dispatch_conv(problem, first, second, strategy=strategy, out=out,
                                                       bias=bias)
    if signature is not None and remembered and version is not None:
        remember(_CONV_MEMO, signature, (defaults, version, registry, entry))
    return result


def _conv_problem(direction: str, x_shape: Any, w_shape: Any, stride: Any, padding: Any, dilation: Any,
                  groups: int, dtype: Any, bias: Any, activation: str | None) -> Any:
    from tiledispatch.dtypes import from_torch
    from tiledispatch.runtime.conv_args import conv_problem

    return conv_problem(direction, tuple(x_shape), tuple(w_shape), stride=stride, padding=padding,
                        dilation=dilation, groups=groups, dtype=from_torch(dtype, "dtype"), bias=bias is not None,
                        activation=activation or "none")


def conv(x: Any, w: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1,
         *, activation: str | None = None, out: Any = None, strategy: str = "auto") -> Any:
    """y = activation(conv(x, w) + bias): x (N, C, *spatial) and w (K, C/groups, *filter) channels-last
    (torch.channels_last / channels_last_3d; for 1-D a (N, L, C) tensor transposed to (N, C, L)); padding is
    an int, one per dim, or a (left, right) pair per dim. Returns y (N, K, *out) channels-last. The first call
    of an argument signature (as td.conv_bwd_data / td.conv_bwd_weight) checks, selects and binds; later calls
    of the same signature reuse that decision."""
    return _run_conv("fwd", x, w, tuple(x.shape), tuple(w.shape), stride, padding, dilation, groups, bias=bias,
                     activation=activation, out=out, strategy=strategy)


def conv_bwd_data(dy: Any, w: Any, input_shape: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                  groups: int = 1, *, out: Any = None, strategy: str = "auto") -> Any:
    """dx (input_shape, channels-last): the gradient of conv(x, w) with respect to x, given dy."""
    return _run_conv("bwd_data", dy, w, tuple(input_shape), tuple(w.shape), stride, padding, dilation, groups,
                     out=out, strategy=strategy)


def conv_bwd_weight(x: Any, dy: Any, weight_shape: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1,
                    groups: int = 1, *, out: Any = None, strategy: str = "auto") -> Any:
    """dw (weight_shape, channels-last): the gradient of conv(x, w) with respect to w, given x and dy."""
    return _run_conv("bwd_weight", x, dy, tuple(x.shape), tuple(weight_shape), stride, padding, dilation, groups,
                     out=out, strategy=strategy)


__all__ = ["Epilogue", "GemmProblem", "conv", "conv_bwd_data", "conv_bwd_weight", "default_conv_registry",
           "default_registry", "gemm"]
