"""Command-line options that describe a GEMM problem (shared by select, run, profile and list)."""
from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Annotated, Any

import typer

from tiledispatch.cli.preset_names import check_preset, preset_option
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.dtypes import INPUT_DTYPES, OUTPUT_DTYPES
from tiledispatch.errors import BadInput
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import ACTIVATIONS, BIAS_MODES, LAYOUTS, MAX_D, Epilogue, GemmProblem
from tiledispatch.select.selector import STRATEGIES


def _choices(name: str, values: tuple[str, ...]) -> type[enum.Enum]:
    """A str Enum over a closed set, so typer shows and checks the legal values."""
    return enum.Enum(name, {v: v for v in values}, type=str)  # type: ignore[return-value]


DType = _choices("DType", INPUT_DTYPES)
OutDType = _choices("OutDType", OUTPUT_DTYPES)
Layout = _choices("Layout", LAYOUTS)
Activation = _choices("Activation", ACTIVATIONS)
Bias = _choices("Bias", BIAS_MODES)
Strategy = _choices("Strategy", STRATEGIES)

DEFAULT_DTYPE = "bf16"
DEFAULT_LAYOUT = "rcr"
PROBLEM_PANEL = "Problem"
KERNELS_PANEL = "Kernels"

_WHOLE = re.compile(r"[+-]?\d+")


def whole_number(value: str | int) -> int:
    """Sizes and counts on the command line: whole numbers only (`1e12`, `64.0` and `0x40` are refused while
    parsing); the problem classes check the range, naming the field."""
    if isinstance(value, int):
        return value
    if not _WHOLE.fullmatch(value.strip()):
        raise typer.BadParameter(f"{value!r} is not a whole number")
    return int(value)


def _size_arg(metavar: str, help_text: str) -> Any:
    return typer.Argument(metavar=metavar, help=help_text, show_default=False, parser=whole_number)


MArg = Annotated[int, _size_arg("M", "rows of A and of the output")]
NArg = Annotated[int, _size_arg("N", "columns of B and of the output")]
KArg = Annotated[int, _size_arg("K", "the reduction size (columns of A, rows of B)")]
BatchOpt = Annotated[int, typer.Option("--batch", help="batch count", rich_help_panel=PROBLEM_PANEL,
                                       metavar="INT", parser=whole_number)]
DTypeOpt = Annotated[DType | None, typer.Option(  # type: ignore[valid-type]
    "--dtype", help=f"input dtype [default: {DEFAULT_DTYPE}, or the --kernel's]", show_default=False,
    rich_help_panel=PROBLEM_PANEL)]
OutDTypeOpt = Annotated[OutDType | None, typer.Option(  # type: ignore[valid-type]
    "--out-dtype", help="output dtype [default: the input dtype's usual output]", show_default=False,
    rich_help_panel=PROBLEM_PANEL)]
LayoutOpt = Annotated[Layout | None, typer.Option(  # type: ignore[valid-type]
    "--layout", help=f"major order of A, B, out [default: {DEFAULT_LAYOUT}, or the --kernel's]",
    show_default=False, rich_help_panel=PROBLEM_PANEL)]
ActivationOpt = Annotated[Activation | None, typer.Option(  # type: ignore[valid-type]
    "--activation", help="fused activation [default: none, or the --kernel's]", show_default=False,
    rich_help_panel=PROBLEM_PANEL)]
BiasOpt = Annotated[Bias | None, typer.Option(  # type: ignore[valid-type]
    "--bias", help="fused bias: row adds bias[m], col adds bias[n] [default: none, or the --kernel's]",
    show_default=False, rich_help_panel=PROBLEM_PANEL)]
NumDOpt = Annotated[int | None, typer.Option(
    "--num-d", help=f"extra M x N tensors added in the epilogue (0..{MAX_D}) [default: 0, or the --kernel's]",
    show_default=False, rich_help_panel=PROBLEM_PANEL, metavar="INT", parser=whole_number)]
WithCOpt = Annotated[bool | None, typer.Option(
    "--with-c/--no-c", help="read beta*C in the epilogue [default: no, or the --kernel's]",
    show_default=False, rich_help_panel=PROBLEM_PANEL)]
PresetOpt = Annotated[str | None, typer.Option(
    "--preset", help="preset to build [default: gemm_<dtype>_<layout>_essential], specialised to the "
    "epilogue",
    show_default=False, rich_help_panel=KERNELS_PANEL, callback=preset_option)]
ConfigOpt = Annotated[str | None, typer.Option(
    "--config", help="build the instances of this JSON file instead of a preset (formats as for `build`)",
    show_default=False, rich_help_panel=KERNELS_PANEL)]
KernelOpt = Annotated[str | None, typer.Option(
    "--kernel", help="use (and build) only this instance; the problem's dtype, layout and epilogue default "
    "to its own", show_default=False, rich_help_panel=KERNELS_PANEL)]
TargetOpt = Annotated[str | None, typer.Option(
    "--gpu-target", help="arch to build for, e.g. sm_90 [default: the GPU's, else $TILEDISPATCH_ARCH or "
    "sm_90]",
    show_default=False, rich_help_panel=KERNELS_PANEL)]
WorkersOpt = Annotated[int | None, typer.Option(
    "-j", "--jobs", help="compile worker processes [default: $TILEDISPATCH_MAX_WORKERS or the CPU count]",
    show_default=False, rich_help_panel=KERNELS_PANEL)]
StrategyOpt = Annotated[Strategy, typer.Option(  # type: ignore[valid-type]
    "--strategy", help="how to choose: auto (tuning DB, then the cost model, then rules), first_fit, rules, "
    "ml (the shipped cost model; rules when none matches), or tune (time the top candidates and store the "
    "winner)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print one JSON object on stdout")]


def _value(choice: enum.Enum | None) -> str | None:
    return None if choice is None else str(choice.value)


def build_problem(m: int, n: int, k: int, batch: int = 1, dtype: enum.Enum | None = None,
                  layout: enum.Enum | None = None, activation: enum.Enum | None = None,
                  bias: enum.Enum | None = None, num_d: int | None = None, with_c: bool | None = None,
                  out_dtype: enum.Enum | None = None, base: GemmConfig | None = None) -> GemmProblem:
    """The GemmProblem the options describe; unset options come from `base` (a kernel's config) when given,
    else from the defaults (bf16, rcr, no epilogue)."""
    if base is not None and base.op != "gemm":
        raise BadInput(f"{base.name} is a {base.op} instance; a GEMM needs gemm-... instances (--kernel, "
                       "--config or --preset)", field="kernel")
    given = base
    base = base or GemmConfig(dtype=DEFAULT_DTYPE, layout=DEFAULT_LAYOUT)
    epilogue = Epilogue(activation=_value(activation) or base.activation, bias=_value(bias) or base.bias,
                        num_d=base.num_d if num_d is None else num_d,
                        with_c=base.with_c if with_c is None else with_c)
    in_dtype = _value(dtype) or base.dtype
    default_out = base.out_dtype if given is not None and in_dtype == base.dtype else None
    return GemmProblem(m, n, k, batch=batch, dtype=in_dtype, out_dtype=_value(out_dtype) or default_out,
                       layout=_value(layout) or base.layout, epilogue=epilogue)


def gemm_problem_maker(m: int, n: int, k: int, batch: int = 1, dtype: enum.Enum | None = None,
                       layout: enum.Enum | None = None, activation: enum.Enum | None = None,
                       bias: enum.Enum | None = None, num_d: int | None = None, with_c: bool | None = None,
                       out_dtype: enum.Enum | None = None) -> Callable[[GemmConfig | None], GemmProblem]:
    """build_problem with every option bound but the base config (which registries.problem_and_registry
    supplies once it knows the kernels)."""
    return lambda base: build_problem(m, n, k, batch, dtype, layout, activation, bias, num_d, with_c,
                                      out_dtype, base)


def default_preset(problem: GemmProblem | ConvProblem) -> str:
    """The essential preset of the problem's op, dtype and layout (conv: direction, dtype and ndim); a
    one-line error naming the closest presets when none is packaged for them."""
    if isinstance(problem, ConvProblem):
        name = f"conv_{problem.direction}_{problem.dtype}_{problem.ndim}d_essential"
    else:
        name = f"gemm_{problem.dtype}_{problem.layout}_essential"
    return check_preset(name, default=True)
