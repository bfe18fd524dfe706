"""The `tiledispatch` command: the typer app, its global options, and one-line error handling."""
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from tiledispatch.cli import (
    build_cmds,
    bundle_cmds,
    cache_cmds,
    data_cmd,
    demo,
    info_cmd,
    list_cmd,
    ml_cmds,
    problems_cmd,
    profile_cmd,
    run_cmds,
    sweep_cmd,
)
from tiledispatch.cli.conv_args import join_per_dim_values
from tiledispatch.cli.output import report_exception


class CLIGroup(TyperGroup):
    """Runs the command line and turns every exception into `error: ...` on one line and an exit code.

    Overriding `main` covers both the console script and typer's CliRunner (which calls `main` too).
    """

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        argv = join_per_dim_values(sys.argv[1:] if args is None else args)
        debug = "--debug" in argv
        literal_help(self)
        try:
            result = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
            code = result if isinstance(result, int) else 0
        except Exception as exc:  # noqa: BLE001 - the one place every failure is reported
            code = _no_args_help(exc)
            if code is None:
                code = report_exception(exc, debug)
        except KeyboardInterrupt as exc:
            code = report_exception(exc, debug)
        if standalone_mode:
            sys.exit(code)
        return code


def literal_help(command: Any) -> None:
    """Escape rich markup in the help of `command` and its subcommands, so `[default: ...]` and `bias[m]` show
    as written (typer's rich help reads square brackets as style tags and drops them). Done once per command
    tree: escaping twice would show the backslashes."""
    from rich.markup import escape

    if getattr(command, "_literal_help", False):
        return
    command._literal_help = True
    for attr in ("help", "short_help", "epilog"):
        if getattr(command, attr, None):
            setattr(command, attr, escape(getattr(command, attr)))
    for param in command.params:
        if getattr(param, "help", None):
            param.help = escape(param.help)
    for sub in getattr(command, "commands", {}).values():
        literal_help(sub)


def _no_args_help(exc: Exception) -> int | None:
    """A group called without a subcommand shows its help (click signals that with an exception whose
    construction already printed the rich help; the plain-text help is its message)."""
    if type(exc).__name__ != "NoArgsIsHelpError":
        return None
    message = exc.format_message() if hasattr(exc, "format_message") else ""
    if message:
        sys.stdout.write(message.rstrip("\n") + "\n")
    return 0


app = typer.Typer(
    cls=CLIGroup,
    name="tiledispatch",
    help="Declare, generate, build, select and run Triton GEMM and convolution kernels.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from tiledispatch.version import __version__

        sys.stdout.write(f"tiledispatch {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def root(
    debug: Annotated[bool, typer.Option("--debug", help="show the traceback of an error")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="print the version and exit")] = False,
) -> None:
    """tiledispatch: declare, generate, build, select and run Triton GEMM and convolution kernels.

    Without a GPU, kernels still build for sm_90 and run on Triton's interpreter on the CPU.
    """


COMMAND_MODULES = (info_cmd, build_cmds, list_cmd, run_cmds, profile_cmd, cache_cmds, demo, problems_cmd,
                   sweep_cmd, data_cmd, ml_cmds, bundle_cmds)
for _module in COMMAND_MODULES:
    _module.register(app)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point (`tiledispatch`, `python -m tiledispatch`)."""
    command = typer.main.get_command(app)
    command.main(args=argv, prog_name="tiledispatch")


if __name__ == "__main__":
    main()
