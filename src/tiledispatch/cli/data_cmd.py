"""`tiledispatch data summary|oracle|compact|drop DIR`: what a sweep dataset holds, its best kernel per
problem, and upkeep (one part; rows of changed kernels removed for re-measuring)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from tiledispatch.cli.output import emit_json, note, out_console, show_table, table, text
from tiledispatch.cli.problem_args import JsonOpt

data_app = typer.Typer(help="Inspect sweep datasets (directories written by `tiledispatch sweep`).",
                       no_args_is_help=True)

DirArg = Annotated[Path, typer.Argument(help="dataset directory (manifest.json + parts/*.parquet)",
                                        show_default=False)]
TopOpt = Annotated[int, typer.Option("--top", help="list the N problems with the largest second/best gap "
                                                   "(0: every problem)")]
CsvOpt = Annotated[Path | None, typer.Option("--csv", help="also write the oracle of every problem to this "
                                                           "CSV file", show_default=False)]


def _load(directory: Path):
    """The manifest and the rows (a damaged part is named once on stderr and skipped)."""
    from tiledispatch.bench.dataset import Dataset

    dataset = Dataset(directory, note)
    return dataset.manifest(), dataset.frame()


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def _num(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.{digits}f}"


# -- summary --------------------------------------------------------------------------------------
@data_app.command("summary")
def data_summary(directory: DirArg, json_out: JsonOpt = False) -> None:
    """Rows by status and family, problems, kernels, coverage of problem x kernel, GPU and versions."""
    from tiledispatch.bench.analysis import summary

    manifest, frame = _load(directory)
    data = {"path": str(directory), "manifest": manifest, **summary(frame)}
    if json_out:
        emit_json(data)
        return
    _print_summary(data)


def _print_summary(data: dict[str, Any]) -> None:
    console, m = out_console(), data["manifest"]
    console.print(text(f"dataset {data['path']}: {m.get('op')} {m.get('direction')} {m.get('dtype')}, "
                       f"GPU {', '.join(data['gpus']) or m.get('gpu') or '?'}"
                       f" ({', '.join(data['archs']) or '?'})"))
    console.print(text(f"{data['rows']} rows; {data['problems']} problems x {data['kernels']} kernels "
                       f"(+ {data['vendor_rows']} vendor rows)"))
    console.print(text(f"coverage {_pct(data['coverage'])} of {data['pairs_expected']} (problem, kernel) "
                       f"pairs; ok {_pct(data['ok_share'])} ({data['ok_pairs']} pairs)"))
    without = data["problems_without_ok"]
    console.print(text(f"problems with an ok kernel: {data['problems_with_ok']}; "
                       f"without: {without['count']}"))
    for example in without["examples"]:
        console.print(text(f"  no ok kernel: {example}"))
    style = "" if data["duplicate_pairs"] == 0 else "bold red"
    console.print(text(f"duplicate (problem, kernel) pairs: {data['duplicate_pairs']}", style=style))
    versions = ", ".join(f"{k} {'/'.join(v) or '?'}" for k, v in data["versions"].items())
    console.print(text(f"versions: {versions}"))
    span = data["time_range"]
    console.print(text(f"measured: {span['first'] or '?'} .. {span['last'] or '?'}"))
    show_table("rows by status and family", _status_table(data))


def _status_table(data: dict[str, Any]):
    families = list(data["by_family"])
    rows = table("status", *(f"{f} #" for f in families), "total #")
    for status, total in data["by_status"].items():
        cells = [data["by_family"][f].get(status, 0) for f in families]
        rows.add_row(text(status), *(text(c) for c in cells), text(total))
    return rows


# -- oracle ---------------------------------------------------------------------------------------
@data_app.command("oracle")
def data_oracle(directory: DirArg, json_out: JsonOpt = False, csv_path: CsvOpt = None,
                top: TopOpt = 20) -> None:
    """Best kernel per problem, how far the second-best and the median kernel are, and the vendor speed-up."""
    from tiledispatch.bench.analysis import largest_gaps, oracle, oracle_summary, records

    _, frame = _load(directory)
    full = oracle(frame)
    shown = largest_gaps(full, top)
    stats = oracle_summary(full)
    if csv_path is not None:
        full.to_csv(csv_path, index=False)
        note(f"wrote the oracle of {len(full)} problems to {csv_path}")
    if json_out:
        emit_json({"path": str(directory), "summary": stats, "problems": records(shown)})
        return
    _print_oracle(shown, len(full), stats)


def _print_oracle(shown, total: int, stats: dict[str, Any]) -> None:
    vendor = bool(stats["problems_with_vendor"])
    columns = ["problem", "tag", "ok #", "best kernel", "best ms", "TFLOP/s", "2nd/best", "median/best"]
    rows = _right_aligned(table(*columns, *(["vendor/best"] if vendor else [])), 6)
    for r in shown.to_dict("records"):
        cells = [r["problem"], r["tag"], r["n_ok"], r["best_kernel"] or "-", _num(r["best_ms"], 4),
                 _num(r["best_tflops"], 1), _num(r["second_ratio"]), _num(r["median_ratio"])]
        rows.add_row(*(text(c) for c in cells + ([_num(r["vendor_speedup"])] if vendor else [])))
    show_table(f"oracle: {len(shown)} of {total} problems, largest second/best gap first", rows)
    _print_oracle_summary(stats)


def _right_aligned(rows, first: int):
    """Columns from `first` on hold numbers: right-aligned."""
    for column in rows.columns[first:]:
        column.justify = "right"
    return rows


def _print_oracle_summary(stats: dict[str, Any]) -> None:
    console = out_console()
    console.print(text(f"{stats['problems_with_ok']} of {stats['problems']} problems have an ok kernel; "
                       f"{stats['distinct_best_kernels']} distinct kernels are the best somewhere"))
    console.print(text(f"geomean second/best {_num(stats['geomean_second_ratio'])}, "
                       f"median/best {_num(stats['geomean_median_ratio'])}"))
    if stats["problems_with_vendor"]:
        console.print(text(f"geomean vendor/best (oracle speed-up over the vendor) "
                           f"{_num(stats['geomean_vendor_speedup'])} on {stats['problems_with_vendor']} "
                           f"problems; the vendor is faster on {stats['vendor_wins']}"))
    wins = table("kernel", "best on #", "share")
    for entry in stats["best_counts"]:
        wins.add_row(text(entry["kernel"]), text(entry["count"]), text(_pct(entry["share"])))
    show_table("most often the best", _right_aligned(wins, 2))


@data_app.command("compact")
def data_compact(directory: DirArg) -> None:
    """Rewrite a dataset's parts as one packed parquet file (for committing or copying it)."""
    from tiledispatch.bench.dataset import Dataset

    dataset = Dataset(directory, note)
    manifest = dataset.manifest()
    with dataset.lock():
        before = len(dataset.parts())
        part = dataset.compact()
    size = part.stat().st_size / 2**20 if part is not None else 0.0
    out_console().print(text(f"{directory}: {before} part(s) -> 1 ({size:.1f} MiB; {manifest['op']} "
                             f"{manifest['direction']} {manifest['dtype']})"))


FamilyOpt = Annotated[list[str] | None, typer.Option("--family", help="drop the rows of this kernel family "
                                                                    "(repeatable)", show_default=False)]
KernelOpt = Annotated[list[str] | None, typer.Option("--kernel", help="drop the rows of this kernel name "
                                                                    "(repeatable)", show_default=False)]


@data_app.command("drop")
def data_drop(directory: DirArg, family: FamilyOpt = None, kernel: KernelOpt = None) -> None:
    """Remove the rows of kernels whose code changed; `tiledispatch sweep --resume` then measures them
    again."""
    from tiledispatch.bench.dataset import Dataset
    from tiledispatch.errors import BadInput

    if not family and not kernel:
        raise BadInput("name what to drop: --family and/or --kernel", field="family")
    dataset = Dataset(directory, note)
    manifest = dataset.manifest()
    with dataset.lock():
        count = dataset.drop(family or (), kernel or ())
    out_console().print(text(f"{directory}: dropped {count} row(s) ({manifest['op']} {manifest['direction']} "
                             f"{manifest['dtype']})"))


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")
