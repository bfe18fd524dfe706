"""Console output shared by every command: rich tables on stdout, notes on stderr, JSON, one-line errors."""
from __future__ import annotations

import json
import math
import sys
import traceback
from typing import Any

import typer

from tiledispatch.errors import (BadInput, CacheError, CompileError, InvalidConfig, NoKernelFound,
                                 TileDispatchError, UnsupportedProblem)

EXIT_FAILURE = 1      # the work itself failed (build failure, failed validation, unexpected error)
EXIT_BAD_INPUT = 2    # the command line, a config or a problem is wrong (also click's usage errors)
_BAD_INPUT_ERRORS = (BadInput, InvalidConfig, UnsupportedProblem, NoKernelFound)
_WIDE = 200           # width of rich output when stdout is not a terminal (kernel names are ~70 characters)


def _console(stderr: bool):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else _WIDE
    return Console(file=stream, width=width, soft_wrap=False, highlight=False)


def out_console():
    """Where tables and results go (stdout)."""
    return _console(stderr=False)


def err_console():
    """Where notes, warnings and build summaries go (stderr), so stdout stays parseable with --json."""
    return _console(stderr=True)


def note(message: str) -> None:
    """A one-line remark on stderr (never markup-interpreted)."""
    err_console().print(message, markup=False)


def text(value: Any, style: str = ""):
    """A table cell shown literally (kernel names and messages are never read as rich markup)."""
    from rich.text import Text

    return Text(str(value), style=style)


def table(*columns: str):
    """A rich table whose first column (kernel names) is never wrapped; numeric columns are right-aligned."""
    from rich.table import Table

    result = Table()
    for i, column in enumerate(columns):
        justify = "right" if column.endswith(("ms", "TFLOP/s", "GB/s", "err", "score", "#")) else "left"
        result.add_column(column, justify=justify, no_wrap=i == 0, overflow="fold")
    return result


def show_table(title: str, rows) -> None:
    """Print a title line, then the table unless it is empty."""
    console = out_console()
    console.print(text(title, style="bold"))
    if rows.row_count:
        console.print(rows)


def emit_json(data: Any) -> None:
    """Print one JSON document on stdout (non-finite floats become null, so any JSON parser reads it)."""
    sys.stdout.write(json.dumps(_finite(data), indent=1, default=str) + "\n")
    sys.stdout.flush()


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def exit_code_for(exc: BaseException) -> int:
    if isinstance(exc, _BAD_INPUT_ERRORS):
        return EXIT_BAD_INPUT
    if isinstance(exc, (CompileError, CacheError, TileDispatchError)):
        return EXIT_FAILURE
    return int(getattr(exc, "exit_code", EXIT_FAILURE) or EXIT_FAILURE)


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def print_error(message: str) -> None:
    sys.stderr.write(f"error: {one_line(message)}\n")
    sys.stderr.flush()


def report_exception(exc: BaseException, debug: bool) -> int:
    """Print `error: ...` (the traceback first with --debug) and return the exit code to use."""
    if debug:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    if isinstance(exc, TileDispatchError):
        print_error(str(exc))
    elif _is_click_exception(exc):
        print_error(_click_message(exc))
    elif isinstance(exc, (typer.Abort, KeyboardInterrupt)):
        print_error("interrupted")
        return 130
    elif isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        print_error(f"{exc.strerror}{where}")
        return EXIT_FAILURE
    else:
        hint = "" if debug else " (run with --debug for the traceback)"
        print_error(f"internal error: {type(exc).__name__}: {exc}{hint}")
        return EXIT_FAILURE
    return exit_code_for(exc)


def _click_exception_type() -> type:
    """click's ClickException (typer vendors its own copy of click in recent versions)."""
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _is_click_exception(exc: BaseException) -> bool:
    return isinstance(exc, _click_exception_type())


def _click_message(exc: Any) -> str:
    message = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and type(exc).__name__ != "BadParameter":
        message = f"{message.rstrip('.')} (see '{ctx.command_path} --help')"
    return message


def fail(message: str, code: int = EXIT_FAILURE) -> typer.Exit:
    """Print `error: message` and return the Exit to raise: `raise fail(...)`."""
    print_error(message)
    return typer.Exit(code)
