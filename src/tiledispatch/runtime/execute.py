"""Run a selection: its kernel directly, or on kept zero-padded copies of the operands that need them."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiledispatch.runtime.padding import run_padded

if TYPE_CHECKING:
    from tiledispatch.select.selector import Selection


def run_selection(selection: Selection, args: Any) -> Any:
    """Run a selection on prepared arguments (GemmArgs or ConvArgs); a padded GEMM selection runs on kept
    zero-padded copies (runtime/padding.py) and writes the exact result back when it could not write it in
    place."""
    if not selection.padded:
        return selection.kernel.launch(args, selection.problem)
    return run_padded(selection, args)
