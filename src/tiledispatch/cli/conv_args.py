"""Command-line options that describe a convolution problem (select, run and profile conv), and the decorator
that gives a command those options.

Per-dim options take one value per spatial dim after the flag, as a profiler's command line does:
`--spatial 56 56 --filter 3 3 --stride 2 --padding 1`. One value applies to every dim. Padding also takes
`LEFT:RIGHT` pairs for asymmetric padding: `--padding 1:0 2:1` (or `--padding 1:0` for every dim).
The values may also be written joined by commas (`--spatial 56,56`).
"""
from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer

from tiledispatch.cli.preset_names import preset_option
from tiledispatch.cli.problem_args import KERNELS_PANEL, PROBLEM_PANEL, _choices, _value, whole_number
from tiledispatch.errors import BadInput
from tiledispatch.problems.conv import CONV_DTYPES, DIRECTIONS, ConvProblem
from tiledispatch.problems.gemm import ACTIVATIONS

Direction = _choices("Direction", DIRECTIONS)
ConvDType = _choices("ConvDType", CONV_DTYPES)
ConvActivation = _choices("ConvActivation", ACTIVATIONS)

DEFAULT_DTYPE = "bf16"
PER_DIM_FLAGS = ("--spatial", "--filter", "--stride", "--padding", "--dilation")
_PER_DIM_VALUE = re.compile(r"-?\d+(:-?\d+)?")
_INT = re.compile(r"[+-]?\d+")


def join_per_dim_values(argv: Sequence[str]) -> list[str]:
    """Rewrite `--spatial 56 56` as `--spatial 56,56` (click options take a fixed number of values).

    Only tokens that look like ints or LEFT:RIGHT pairs are joined, so a positional argument after the values
    stays positional; anything else is left for the option's own parser to reject by field.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        out.append(token)
        i += 1
        if token not in PER_DIM_FLAGS:
            continue
        values = []
        while i < len(argv) and _PER_DIM_VALUE.fullmatch(argv[i]):
            values.append(argv[i])
            i += 1
        if values:
            out.append(",".join(values))
    return out


def _int(field: str, text: str, whole: str) -> int:
    if not _INT.fullmatch(text):
        raise BadInput(f"{field}={whole!r}: {text!r} is not an integer", field=field)
    return int(text)


def _items(field: str, text: str) -> list[str]:
    items = [part.strip() for part in text.split(",")]
    if not all(items) or not 1 <= len(items) <= 3:
        raise BadInput(f"{field}={text!r} must be 1 to 3 values (one per spatial dim)", field=field)
    return items


def per_dim_ints(field: str, text: str) -> int | tuple[int, ...]:
    """`3` -> 3 (every dim), `3,3` -> (3, 3); ConvProblem checks the count and the range, naming the field."""
    values = tuple(_int(field, item, text) for item in _items(field, text))
    return values[0] if len(values) == 1 else values


def sizes(field: str, text: str) -> tuple[int, ...]:
    """Sizes given per dim (spatial, filter): the count is the ndim."""
    return tuple(_int(field, item, text) for item in _items(field, text))


def padding_value(text: str, ndim: int) -> Any:
    """`1` -> 1; `1,2` -> (1, 2) symmetric per dim; `1:0,2:1` -> ((1, 0), (2, 1)); one item is every dim's."""
    items = _items("padding", text)
    values = []
    for item in items:
        parts = item.split(":")
        if len(parts) > 2:
            raise BadInput(f"padding={text!r}: {item!r} must be an int or LEFT:RIGHT", field="padding")
        ints = tuple(_int("padding", part, text) for part in parts)
        values.append(ints[0] if len(ints) == 1 else ints)
    if len(values) == 1:
        return values[0] if isinstance(values[0], int) else (values[0],) * ndim
    return tuple(values)


@dataclasses.dataclass(frozen=True)
class ConvOptions:
    """The problem options of a conv command, as given (None: not given)."""

    direction: str
    n: int
    c: int
    k: int
    groups: int
    spatial: str
    filter_size: str
    stride: str
    padding: str
    dilation: str
    dtype: str | None
    activation: str | None
    bias: bool | None

    def problem(self, base: Any = None) -> ConvProblem:
        """The ConvProblem; dtype and (forward) epilogue left unset default to `base` (the --kernel's config,
        or the first instance of --config/--preset) when given, else to bf16 without epilogue."""
        if base is not None and getattr(base, "op", None) != "conv":
            raise BadInput(f"{base.name} is a {base.op} instance; a conv problem needs conv-... instances "
                           "(--kernel, --config or --preset)", field="kernel")
        spatial = sizes("spatial", self.spatial)
        epilogue = base if base is not None and self.direction == "fwd" else None
        bias = self.bias if self.bias is not None else bool(epilogue and epilogue.bias)
        return ConvProblem(
            self.direction, self.n, self.c, self.k, self.groups, spatial, sizes("filter", self.filter_size),
            stride=per_dim_ints("stride", self.stride), padding=padding_value(self.padding, len(spatial)),
            dilation=per_dim_ints("dilation", self.dilation),
            dtype=self.dtype or (base.dtype if base is not None else DEFAULT_DTYPE),
            activation=self.activation or (epilogue.activation if epilogue else "none"), bias=bias)


def _int_opt(flag: str, help_text: str) -> Any:
    return typer.Option(flag, help=help_text, rich_help_panel=PROBLEM_PANEL, show_default=False,
                        metavar="INT", parser=whole_number)


def _problem_options(
    direction: Annotated[Direction, typer.Argument(  # type: ignore[valid-type]
        metavar="DIRECTION", show_default=False,
        help="fwd (y = conv(x, w)), bwd_data (dx from dy, w) or bwd_weight (dw from x, dy)")],
    n: Annotated[int, _int_opt("--n", "batch size")],
    c: Annotated[int, _int_opt("--c", "input channels (total over the groups)")],
    k: Annotated[int, _int_opt("--k", "output channels (total over the groups)")],
    spatial: Annotated[str, typer.Option(
        "--spatial", metavar="SIZE...", help="input size, one per spatial dim (1 to 3: the ndim), e.g. "
        "--spatial 56 56", rich_help_panel=PROBLEM_PANEL, show_default=False)],
    filter_size: Annotated[str, typer.Option(
        "--filter", metavar="SIZE...", help="filter size, one per spatial dim, e.g. --filter 3 3",
        rich_help_panel=PROBLEM_PANEL, show_default=False)],
    groups: Annotated[int, typer.Option("--groups", help="groups (divides --c and --k)", metavar="INT",
                                        rich_help_panel=PROBLEM_PANEL, parser=whole_number)] = 1,
    stride: Annotated[str, typer.Option("--stride", metavar="INT...", help="one value, or one per dim",
                                        rich_help_panel=PROBLEM_PANEL)] = "1",
    padding: Annotated[str, typer.Option("--padding", metavar="PAD...", help="one value, one per dim, or "
                                         "LEFT:RIGHT per dim for asymmetric padding (--padding 1:0 2:1)",
                                         rich_help_panel=PROBLEM_PANEL)] = "0",
    dilation: Annotated[str, typer.Option("--dilation", metavar="INT...", help="one value, or one per dim",
                                          rich_help_panel=PROBLEM_PANEL)] = "1",
    dtype: Annotated[ConvDType | None, typer.Option(  # type: ignore[valid-type]
        "--dtype", help=f"input and output dtype [default: {DEFAULT_DTYPE}, or the --kernel's]",
        show_default=False, rich_help_panel=PROBLEM_PANEL)] = None,
    activation: Annotated[ConvActivation | None, typer.Option(  # type: ignore[valid-type]
        "--activation", help="fused activation (fwd only) [default: none, or the --kernel's]",
        show_default=False, rich_help_panel=PROBLEM_PANEL)] = None,
    bias: Annotated[bool | None, typer.Option(
        "--bias/--no-bias", help="fused bias per output channel (fwd only) [default: no, or the --kernel's]",
        show_default=False, rich_help_panel=PROBLEM_PANEL)] = None,
) -> ConvOptions:
    return ConvOptions(_value(direction), n, c, k, groups, spatial, filter_size,  # type: ignore[arg-type]
                       stride, padding, dilation, _value(dtype), _value(activation), bias)


ConvPresetOpt = Annotated[str | None, typer.Option(
    "--preset", help="preset to build [default: conv_<direction>_<dtype>_<ndim>d_essential], specialised to "
    "the epilogue", show_default=False, rich_help_panel=KERNELS_PANEL, callback=preset_option)]


def conv_problem_command(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Give a command the conv problem options: `fn(options: ConvOptions, **its own options)` becomes a
    command taking DIRECTION and every problem option, then fn's other options."""
    shared = list(inspect.signature(_problem_options, eval_str=True).parameters.values())
    own = list(inspect.signature(fn, eval_str=True).parameters.values())[1:]
    names = [p.name for p in shared]

    def command(**kwargs: Any) -> Any:
        options = _problem_options(**{name: kwargs.pop(name) for name in names})
        return fn(options, **kwargs)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in shared + own]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__name__, command.__doc__ = fn.__name__, fn.__doc__
    command.__module__ = fn.__module__
    return command
