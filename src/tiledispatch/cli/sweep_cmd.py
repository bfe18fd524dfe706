"""`tiledispatch sweep`: measure every (problem, kernel) pair of a problem set and presets into a dataset."""
from pathlib import Path
from typing import Annotated, Any

import typer

from tiledispatch.cli.output import emit_json, note, out_console, table, text
from tiledispatch.cli.problem_args import JsonOpt, TargetOpt, WorkersOpt
from tiledispatch.cli.problems_cmd import parse_ndims
from tiledispatch.errors import BadInput

SUITE_PANEL = "Problem set"
RUN_PANEL = "Execution"


def _problems(source: str, options: dict[str, Any]) -> list[Any]:
    """A problems file (tiledispatch problems generate) or a named suite with the options given."""
    from tiledispatch.problems.corpus import load_problems, named_suite

    given = {k: v for k, v in options.items() if v is not None}
    if Path(source).is_file():
        if given:
            raise BadInput(f"--{next(iter(given)).replace('_', '-')} applies to named suites, not to the "
                           f"problems file {source}", field=next(iter(given)))
        entries, _ = load_problems(source)
        return entries
    return named_suite(source, **given)


def _gpus(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        return tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise BadInput(f"--gpus {value!r}: expected GPU indices like 0,1", field="gpus") from None


def _config_names(files: list[str], gpu_target: str | None) -> tuple[str, ...]:
    from tiledispatch.cli.registries import registry_from_file

    names: list[str] = []
    for path in files:
        names += [k.name for k in registry_from_file(path, gpu_target).kernels]
    return tuple(names)


def sweep(
    problems: Annotated[str, typer.Option("--problems", help="a problems JSON file or a named suite (see "
                                          "`tiledispatch problems list`)", rich_help_panel=SUITE_PANEL)],
    out: Annotated[Path, typer.Option("--out", help="dataset directory to write")],
    preset: Annotated[list[str] | None, typer.Option("--preset",
                                                     help="preset(s) whose kernels to sweep")] = None,
    config: Annotated[list[str] | None, typer.Option("--config", help="config file(s) of kernels to sweep "
                                                     "(formats as for `build`)")] = None,
    resume: Annotated[bool, typer.Option("--resume",
                                         help="continue DIR: skip the pairs it already holds")] = False,
    dtype: Annotated[str | None, typer.Option("--dtype", rich_help_panel=SUITE_PANEL)] = None,
    layout: Annotated[str | None, typer.Option("--layout", rich_help_panel=SUITE_PANEL)] = None,
    ndims: Annotated[str | None, typer.Option("--ndims", help="e.g. 2,3",
                                              rich_help_panel=SUITE_PANEL)] = None,
    batch: Annotated[int | None, typer.Option("--batch", rich_help_panel=SUITE_PANEL)] = None,
    direction: Annotated[str | None, typer.Option("--direction", rich_help_panel=SUITE_PANEL)] = None,
    count: Annotated[int | None, typer.Option("--count", help="random problems", rich_help_panel=SUITE_PANEL)
                     ] = None,
    seed: Annotated[int | None, typer.Option("--seed", rich_help_panel=SUITE_PANEL)] = None,
    limit: Annotated[int | None, typer.Option("--limit", help="only the first N problems",
                                              rich_help_panel=SUITE_PANEL)] = None,
    executor: Annotated[str, typer.Option("--executor", help="local or ray",
                                          rich_help_panel=RUN_PANEL)] = "local",
    address: Annotated[str | None,
                       typer.Option("--address", help="Ray cluster address [default: start a local "
                                                "Ray]", rich_help_panel=RUN_PANEL)] = None,
    gpus: Annotated[str | None, typer.Option("--gpus", help="GPU indices, one worker each [default: all "
                                             "visible]", rich_help_panel=RUN_PANEL)] = None,
    workers: Annotated[int, typer.Option("--workers", help="interpreter workers when no GPU is visible",
                                         rich_help_panel=RUN_PANEL)] = 1,
    timeout: Annotated[float, typer.Option("--timeout", help="seconds a pair may take before its worker is "
                                           "killed (row: timeout)", rich_help_panel=RUN_PANEL)] = 120.0,
    vendor: Annotated[bool, typer.Option("--vendor", help="add a cuBLAS/cuDNN row per problem (GPU only)",
                                         rich_help_panel=RUN_PANEL)] = False,
    gpu_target: TargetOpt = None,
    jobs: WorkersOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure every (problem, kernel) pair into a parquet dataset: unsupported and failed pairs get a row
    too; a crashing or hanging kernel costs one row; a killed sweep continues with --resume."""
    from tiledispatch.bench.sweep import SweepSpec, run_sweep

    entries = _problems(problems,
                        {"dtype": dtype, "layout": layout,
                         "ndims": None if ndims is None else parse_ndims(ndims), "batch": batch,
                                   "direction": direction, "count": count, "seed": seed})
    if limit is not None:
        entries = entries[:limit]
    spec = SweepSpec(tuple(entries), out, tuple(preset or ()), _config_names(config or [], gpu_target),
                     resume, executor, _gpus(gpus), workers, timeout, vendor, gpu_target, build_workers=jobs,
                     progress=None if not json_out else False)
    report = run_sweep(spec, note)
    if json_out:
        emit_json(report.to_dict())
        return
    _print(report)


def _print(report: Any) -> None:
    console = out_console()
    rows = table("pairs", "resumed", "recorded", "sent to workers", "pairs/s", "build s", "measure s")
    rows.add_row(str(report.pairs), str(report.resumed), str(report.recorded), str(report.measured),
                 f"{report.pairs_per_second:.1f}", f"{report.build_seconds:.1f}",
                 f"{report.measure_seconds:.1f}")
    console.print(rows)
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(report.by_status.items())) or "none"
    console.print(text(f"rows by status: {statuses}"))
    console.print(text(f"dataset: {report.dataset} "
                       f"({report.gpu}; workers {', '.join(report.workers) or '-'})"))


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
