"""Select-and-run of a convolution on torch tensors (Registry.run_conv, td.conv*)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.registry.conv_kernel import conv_call_key, prepare
from tiledispatch.runtime.conv_args import ConvArgs
from tiledispatch.runtime.launcher import device_token, remember

if TYPE_CHECKING:
    from tiledispatch.registry.registry import Dispatch, Registry

# the two tensors a direction reads, by forward role, in call order
INPUT_ROLES = {"fwd": ("x", "w"), "bwd_data": ("y", "w"), "bwd_weight": ("x", "y")}


# per direction, the positions of x, w and y in (first input, second input, output)
_SLOTS = {d: tuple((*INPUT_ROLES[d], OUTPUT_ROLE[d]).index(role) for role in ("x", "w", "y")) for d in INPUT_ROLES}


def role_tuple(direction: str, first: Any, second: Any, out: Any = None, bias: Any = None) -> tuple:
    """(x, w, y, bias) of a call: its two inputs in call order and its output (None: to be allocated)."""
    given = (first, second, out)
    i, j, k = _SLOTS[direction]
    return given[i], given[j], given[k], bias


def role_args(direction: str, first: Any, second: Any, out: Any = None, bias: Any = None) -> ConvArgs:
    return ConvArgs(*role_tuple(direction, first, second, out, bias))


def execute_conv(registry: Registry, problem: ConvProblem, first: Any, second: Any, *, strategy: str = "auto",
                 out: Any = None, bias: Any = None, return_selection: bool = False) -> Any:
    """Validate, select (memoized per argument signature and strategy, `tune` excepted) and run."""
    result, entry, _ = dispatch_conv(registry, problem, first, second, strategy=strategy, out=out, bias=bias)
    return (result, entry.selection_copy()) if return_selection else result


def dispatch_conv(registry: Registry, problem: ConvProblem, first: Any, second: Any, *, strategy: str,
                  out: Any, bias: Any) -> tuple[Any, Dispatch, bool]:
    """execute_conv's work: (the written tensor, the decision, whether the registry remembered it)."""
    from tiledispatch.registry.registry import Dispatch

    args = role_args(problem.direction, first, second, out, bias)
    key = None
    if strategy != "tune":
        key = (conv_call_key(problem, args), strategy, device_token() if strategy == "auto" else None)
    entry = registry._memo.get(key) if key is not None else None
    if entry is not None and entry.valid(registry):
        return entry.bound(args.x, args.w, args.y, args.bias), entry, True
    checked = prepare(problem, args)
    selection = registry.select(checked, strategy)
    bound = selection.kernel.bound_launch(args, checked)
    entry = Dispatch(selection, bound, registry._state())
    remembered = key is not None and bound.reusable
    if remembered:
        remember(registry._memo, key, entry)
    return bound(args.x, args.w, args.y, args.bias), entry, remembered
