"""`tiledispatch problems list|generate|show`: the problem sets sweeps run over (named suites, JSON files)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from tiledispatch.cli.output import emit_json, out_console, show_table, table, text
from tiledispatch.cli.problem_args import JsonOpt
from tiledispatch.errors import BadInput

problems_app = typer.Typer(help="Problem sets for sweeps: named suites and problem files.",
                           no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="a suite of `tiledispatch problems list`",
                                        show_default=False)]
FileArg = Annotated[Path, typer.Argument(metavar="FILE", help="a problems JSON file", show_default=False)]


@problems_app.command("list")
def problems_list(json_out: JsonOpt = False) -> None:
    """The named suites with their op and size (default options)."""
    from tiledispatch.problems import corpus

    rows = [{"name": name, "op": corpus.suite_op(name), "problems": len(corpus.named_suite(name)),
             "options": list(corpus.suite_options(name)), "description": corpus.suite_description(name)}
            for name in corpus.SUITE_NAMES]
    if json_out:
        emit_json(rows)
        return
    view = table("suite", "op", "problems #", "options", "description")
    for row in rows:
        view.add_row(*(text(row[k]) for k in ("name", "op", "problems")), text(", ".join(row["options"])),
                     text(row["description"]))
    out_console().print(view)


def parse_ndims(value: str) -> tuple[int, ...]:
    """--ndims: a comma list such as 2,3 (shared by `problems generate` and `sweep`)."""
    try:
        return tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise BadInput(f"--ndims={value!r} must be a comma list of 1, 2, 3 (e.g. 2,3)",
                       field="ndims") from None


@problems_app.command("generate")
def problems_generate(
    name: NameArg,
    out: Annotated[Path, typer.Option("--out", help="the JSON file to write", show_default=False)],
    dtype: Annotated[str | None, typer.Option("--dtype", help="input dtype [default: bf16]",
                                              show_default=False)] = None,
    layout: Annotated[str | None, typer.Option("--layout", help="GEMM layout [default: rcr]",
                                               show_default=False)] = None,
    ndims: Annotated[str | None, typer.Option("--ndims", help="conv spatial dims, e.g. 2,3 [default: 2,3]",
                                              show_default=False)] = None,
    count: Annotated[int | None, typer.Option("--count", help="number of problems [default: the suite's]",
                                              show_default=False)] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="seed of the random part [default: 0]",
                                             show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Write a named suite to a problems file; prints its size and the problems per source."""
    from tiledispatch.problems import corpus
    from tiledispatch.version import __version__

    given = {"dtype": dtype, "layout": layout, "count": count, "seed": seed,
             "ndims": None if ndims is None else parse_ndims(ndims)}
    options = {k: v for k, v in given.items() if v is not None}
    entries = corpus.named_suite(name, **options)
    meta = {"suite": name, "options": options, "tiledispatch": __version__}
    corpus.save_problems(out, entries, meta)
    summary = {"file": str(out), "suite": name, "op": corpus.suite_op(name), "problems": len(entries),
               "by_source": corpus.breakdown(entries)}
    if json_out:
        emit_json(summary)
        return
    out_console().print(text(f"wrote {len(entries)} {summary['op']} problems of {name!r} to {out}"))
    _print_counts("problems per source", summary["by_source"])


@problems_app.command("show")
def problems_show(path: FileArg, json_out: JsonOpt = False) -> None:
    """Summary of a problems file: op, meta, problems per source and per kind."""
    from tiledispatch.problems import corpus

    entries, meta = corpus.load_problems(path)
    op = entries[0].op if entries else None
    summary: dict[str, Any] = {"file": str(path), "op": op, "problems": len(entries), "meta": meta,
                               "by_source": corpus.breakdown(entries), "by_kind": _kinds(entries)}
    if json_out:
        emit_json(summary)
        return
    console = out_console()
    console.print(text(f"{path}: {len(entries)} {op or ''} problems"))
    console.print(text(f"meta: {meta}"))
    _print_counts("problems per source", summary["by_source"])
    _print_counts("problems per kind", summary["by_kind"])


def _kinds(entries: list[Any]) -> dict[str, int]:
    """GEMM: dtype/layout and aligned vs odd; conv: direction, ndim and dense / grouped / depthwise."""
    counts: Counter[str] = Counter()
    for entry in entries:
        p = entry.problem
        if entry.op == "gemm":
            counts[f"{p.dtype} {p.layout} align{p.align}"] += 1
        else:
            kind = "depthwise" if p.is_depthwise else ("dense" if p.groups == 1 else "grouped")
            counts[f"{p.direction} {p.ndim}d {kind}"] += 1
    return dict(sorted(counts.items()))


def _print_counts(title: str, counts: dict[str, int]) -> None:
    view = table("source" if "source" in title else "kind", "problems #")
    for key, value in counts.items():
        view.add_row(text(key), text(value))
    show_table(title, view)


def register(app: typer.Typer) -> None:
    app.add_typer(problems_app, name="problems")
