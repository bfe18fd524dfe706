"""Registry: the kernel store (declare, build, look up) with selection and runs through the dispatch path."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tiledispatch.dispatch import call, decide
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.store import BuildReport, KernelStore
from tiledispatch.select.selector import DEFAULT_TOP_K, Selection

if TYPE_CHECKING:
    import torch

__all__ = ["BuildReport", "Registry"]


class Registry(KernelStore):
    """Declared kernels of one arch: add / add_preset, build, select and run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._site = call.Site(self.calls, lambda problem: self)

    def select(self, problem: GemmProblem | ConvProblem, strategy: str = "auto",
               top_k: int | None = DEFAULT_TOP_K) -> Selection:
        """Pick a built kernel (run directly or on exactly padded operands) for `problem`. Every strategy but
        `tune` is remembered per (problem, strategy): a later select of the same problem is a lookup."""
        return decide.select(self, problem, strategy, top_k).copy()

    def run(self, problem: GemmProblem | ConvProblem | None, a: torch.Tensor, b: torch.Tensor, *,
            strategy: str = "auto", out: torch.Tensor | None = None, c: torch.Tensor | None = None,
            bias: torch.Tensor | None = None, bias_mode: str | None = None, d: tuple = (),
            activation: str | None = None, alpha: float = 1.0, beta: float = 0.0,
            out_dtype: str | None = None, allow_tf32: bool = False, scale_a: torch.Tensor | None = None,
            scale_b: torch.Tensor | None = None, return_selection: bool = False) -> Any:
        """Select for the problem (derived from the tensors when None) and run; returns out, or (out,
        selection) with return_selection=True. A ConvProblem runs as run_conv(problem, a, b, ...). Decisions
        are remembered per argument signature (every strategy but `tune`)."""
        if isinstance(problem, ConvProblem):
            return self.run_conv(problem, a, b, strategy=strategy, out=out, bias=bias,
                                 return_selection=return_selection)
        result, decision = call.gemm(self._site, a, b, out, c, bias, bias_mode, d, activation, alpha, beta,
                                     out_dtype, allow_tf32, strategy, scale_a, scale_b, problem)
        return (result, decision.selection.copy()) if return_selection else result

    def run_conv(self, problem: ConvProblem, first: torch.Tensor, second: torch.Tensor, *,
                 strategy: str = "auto", out: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                 return_selection: bool = False) -> Any:
        """Run a convolution: (x, w) for fwd, (dy, w) for bwd_data, (x, dy) for bwd_weight; returns the
        written tensor (y, dx or dw; `out` receives it when given)."""
        if not isinstance(problem, ConvProblem):
            from tiledispatch.errors import BadInput

            raise BadInput(f"problem must be a ConvProblem, got {type(problem).__name__}", field="problem")
        result, decision = call.conv(self._site, problem.direction, first, second, problem, bias, None, out,
                                     strategy)
        return (result, decision.selection.copy()) if return_selection else result
