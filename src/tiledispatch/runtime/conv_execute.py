"""Select-and-run of a convolution on torch tensors (Registry.run_conv, td.conv*)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.registry.conv_kernel import conv_call_key, prepare
from tiledispatch.runtime.conv_args import ConvArgs
from tiledispatch.runtime.launcher import device_token, remember

if TYPE_CHECKING:
    from tiledispatch.registry.registry import Registry

# the two tensors a direction reads, by forward role, in call order
INPUT_ROLES = {"fwd": ("x", "w"), "bwd_data": ("y", "w"), "bwd_weight": ("x", "y")}


def role_args(direction: str, first: Any, second: Any, out: Any = None, bias: Any = None) -> ConvArgs:
    roles = {INPUT_ROLES[direction][0]: first, INPUT_ROLES[direction][1]: second, OUTPUT_ROLE[direction]: out}
    return ConvArgs(roles.get("x"), roles.get("w"), roles.get("y"), bias)


def execute_conv(registry: Registry, problem: ConvProblem, first: Any, second: Any, *, strategy: str = "auto",
                 out: Any = None, bias: Any = None, return_selection: bool = False) -> Any:
    """Validate, select (memoized per argument signature and strategy, `tune` excepted) and run."""
    from tiledispatch.registry.registry import Dispatch

    args = role_args(problem.direction, first, second, out, bias)
    key = None
    if strategy != "tune":
        key = (conv_call_key(problem, args), strategy, device_token() if strategy == "auto" else None)
    entry = registry._memo.get(key) if key is not None else None
    if entry is not None and entry.valid(registry):
        result = entry.bound(args.x, args.w, args.y, args.bias)
    else:
        checked = prepare(problem, args)
        selection = registry.select(checked, strategy)
        bound = selection.kernel.bound_launch(args, checked)
        entry = Dispatch(selection, bound, registry._state())
        if key is not None and bound.reusable:
            remember(registry._memo, key, entry)
        result = bound(args.x, args.w, args.y, args.bias)
    return (result, entry.selection_copy()) if return_selection else result
