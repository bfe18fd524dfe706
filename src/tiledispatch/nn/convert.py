"""tiledispatch.nn.convert(model): run a model's conv and linear layers on tiledispatch, in place.

Each torch.nn.Conv1d/2d/3d and Linear (exactly those classes) that tiledispatch can serve becomes its
tiledispatch.nn counterpart by a class swap: the module object, its parameters (the same Parameter objects;
conv weights re-laid channels-last in place), buffers and hooks stay. Everything else stays on torch with a
reason: subclasses (their own forward, e.g. timm's Conv2dSame, lazy modules, MultiheadAttention's out_proj,
parametrized weights), transposed convs, padding modes other than zeros, unserved dtypes. The report lists
both and prints as a table.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch

from tiledispatch.nn.modules import SWAPS, conv_reason, dtype_reason
from tiledispatch.nn.step_check import ATTR, StepCheck, run_step_check

_SERVED = frozenset(SWAPS.values())
_TORCH_OF = {td_cls: torch_cls for torch_cls, td_cls in SWAPS.items()}


@dataclasses.dataclass(frozen=True)
class Layer:
    """One conv / linear layer of a converted model: qualified name, module class, shape, and the reason it
    stays on torch (None: it runs on tiledispatch)."""

    name: str
    kind: str
    shape: str
    reason: str | None = None


@dataclasses.dataclass
class ConvertReport:
    """Every conv / linear layer convert saw, in model order: on tiledispatch (`taken`) or left on torch
    (`left`, with reasons). str() is a table."""

    layers: list[Layer] = dataclasses.field(default_factory=list)
    step_check: StepCheck | None = None   # the model-level check of the converted layers

    @property
    def taken(self) -> list[Layer]:
        return [layer for layer in self.layers if layer.reason is None]

    @property
    def left(self) -> list[Layer]:
        return [layer for layer in self.layers if layer.reason is not None]

    def table(self) -> str:
        rows = [("layer", "module", "shape", "runs on")]
        rows += [(x.name or "(root)", x.kind, x.shape,
                  "tiledispatch" if x.reason is None else f"torch: {x.reason}")
                 for x in self.layers]
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3] for row in rows]
        lines.insert(1, "-" * max(len(line) for line in lines))
        lines.append(f"{len(self.taken)} layers on tiledispatch, {len(self.left)} left on torch")
        if self.step_check is not None:
            for mode, state in self.step_check.summary().items():
                lines.append(f"step check {mode}: {state['phase']}"
                             + (f", runs {state['verdict']}" if state["verdict"] else "")
                             + "".join(f", {arm} {ms:.2f} ms" for arm, ms in state["block_ms"].items()))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def shape_of(module: torch.nn.Module) -> str:
    """A short description of a conv / linear layer: channels, kernel, stride, groups."""
    if isinstance(module, torch.nn.Linear):
        return f"{module.in_features}->{module.out_features}"
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        text = f"{module.in_channels}->{module.out_channels} k{'x'.join(map(str, module.kernel_size))}"
        if any(s != 1 for s in module.stride):
            text += f" s{'x'.join(map(str, module.stride))}"
        return text + (f" g{module.groups}" if module.groups > 1 else "")
    return ""


def _reason(module: torch.nn.Module) -> str | None:
    """Why an exact torch Conv1d/2d/3d or Linear stays on torch (None: it is converted)."""
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        reason = conv_reason(module)
        if reason is not None:
            return reason
    return dtype_reason(module.get_parameter("weight").dtype)


def _unswappable(module: torch.nn.Module) -> str | None:
    """Why a conv / linear module that is not exactly one of torch's classes stays as it is (None: a subclass
    that computes as its torch base class does, which `_swap_class` serves)."""
    if isinstance(module, torch.nn.modules.lazy.LazyModuleMixin):
        return "lazy module: parameters not initialized yet (convert after the first forward)"
    if isinstance(module, torch.nn.modules.conv._ConvTransposeNd):
        return "transposed convolution: tiledispatch has no op for it"
    if torch.nn.utils.parametrize.is_parametrized(module):
        return "parametrized weight (e.g. weight_norm): its forward recomputes the weight"
    cls = type(module)
    base = _torch_base(cls)
    if base is None or any(getattr(cls, name, None) is not getattr(base, name, None) for name in _COMPUTE):
        return f"subclass {cls.__module__}.{cls.__qualname__} of a torch module: its own forward is kept"
    return _reason(module)


_COMPUTE = ("forward", "_conv_forward")   # what a subclass must inherit unchanged to be served
_DERIVED: dict[type, type] = {}           # subclass -> its tiledispatch class


def _torch_base(cls: type) -> type | None:
    return next((base for base in cls.__mro__[1:] if base in SWAPS), None)


def _swap_class(cls: type) -> type:
    """The tiledispatch class of a torch class or of a subclass that computes as its base does: for a
    subclass, one that derives from both (isinstance checks of the subclass still hold)."""
    if cls in SWAPS:
        return SWAPS[cls]
    if cls not in _DERIVED:
        base = _torch_base(cls)
        assert base is not None
        _DERIVED[cls] = type(cls.__name__, (SWAPS[base], cls), {"__module__": cls.__module__,
                                                               "__qualname__": cls.__qualname__})
    return _DERIVED[cls]


def _torch_class(module: torch.nn.Module) -> type:
    """The class a module had before convert (recorded by the swap), or the torch class of a module built as
    a tiledispatch one (`_DERIVED` classes exist only through a swap)."""
    return getattr(module, "_td_torch_class", None) or _TORCH_OF.get(type(module), type(module))


def _attach_check(model: torch.nn.Module, report: ConvertReport) -> None:
    """Give the first converted layer a StepCheck of every converted layer and the forward pre-hook that runs
    it (replacing an earlier convert's). Not on `model` itself: torch.compile runs a root module's hooks
    outside the traced frame, so a root hook became a compiled frame of its own, with its own guards, on
    every compiled step (torch 2.11); a submodule's hooks are traced into the model's frame, where the hook
    returns at once."""
    for module in model.modules():   # an earlier convert's (or a deep copy's)
        for key, hook in list(module._forward_pre_hooks.items()):
            if hook is run_step_check:
                del module._forward_pre_hooks[key]
        module.__dict__.pop(ATTR, None)
    taken = {layer.name for layer in report.taken}
    modules = [(m, _torch_class(m)) for name, m in model.named_modules() if name in taken]
    if not modules:
        return
    report.step_check = StepCheck(modules)
    first = modules[0][0]
    first.__dict__[ATTR] = report.step_check
    first.register_forward_pre_hook(run_step_check)


def convert(model: torch.nn.Module, *, exclude: Iterable[str] = (), step_check: bool = True) -> ConvertReport:
    """Swap every conv / linear layer of `model` that tiledispatch can run (in place) and report what was
    taken and what was left on torch (and why). `exclude`: qualified module names to leave on torch.
    `step_check`: once the layer plans settle, time the converted layers against torch's on the model's own
    steps and keep the faster (nn/step_check.py; eager only)."""
    excluded = set(exclude)
    report = ConvertReport()
    attention: list[str] = []   # nn.MultiheadAttention modules: their forward reads out_proj's weight itself
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.MultiheadAttention):
            attention.append(name + ".")
        if not isinstance(module, (torch.nn.modules.conv._ConvNd, torch.nn.Linear)):
            continue
        cls = type(module)
        layer = Layer(name, cls.__name__, shape_of(module))
        if cls in _SERVED or cls in _DERIVED.values():   # converted before, or built as a tiledispatch module
            report.layers.append(dataclasses.replace(layer, reason=module.td_reason))   # type: ignore[arg-type]
            continue
        reason = ("excluded by the caller" if name in excluded else
                  "inside nn.MultiheadAttention: its forward reads the weight, never calls the layer"
                  if any(name.startswith(prefix) for prefix in attention) else
                  _reason(module) if cls in SWAPS else _unswappable(module))
        if reason is None:
            module.__class__ = _swap_class(cls)
            module.__dict__["_td_torch_class"] = cls
            module._td_setup()   # type: ignore[operator]
        report.layers.append(dataclasses.replace(layer, reason=reason))
    if step_check:
        _attach_check(model, report)
    return report
