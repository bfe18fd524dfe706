"""`tiledispatch list`: presets (of one op with --op), or the instances of one (optionally only those
supporting a GEMM). Text output stays within about a screen per op: presets as a table of instance counts
(row: dtype / layout or direction / dtype, column: which set), instances as counts per family; --verbose gives
the full listing, --json every row."""
from __future__ import annotations

import re
from typing import Annotated, Any

import typer

from tiledispatch.cli.output import emit_json, note, out_console, show_table, table, text
from tiledispatch.cli.preset_names import preset_option
from tiledispatch.cli.problem_args import (ActivationOpt, BatchOpt, BiasOpt, DTypeOpt, JsonOpt, LayoutOpt,
                                           NumDOpt, OutDTypeOpt, TargetOpt, WithCOpt, build_problem)
from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.registry import Registry

OPS = ("gemm", "conv")
SCREEN_ROWS = 30     # instance listings up to this long are shown in full without --verbose
SET_ORDER = ("essential", "latency", "memory", "compute", "candidates", "all")
_PRESET_NAME = re.compile(r"^(?P<stem>.+?)_(?P<set>(\d+d_)?[a-z0-9]+)$")   # conv_fwd_bf16 | 2d_essential


def _presets() -> list[dict[str, Any]]:
    from tiledispatch.presets import list_presets, load_preset, preset_info

    rows = []
    for name in list_presets():
        info = preset_info(name)
        arch = info.get("arch") or info.get("space", {}).get("arch")
        rows.append({"name": name, "op": info.get("op", "gemm"), "arch": arch,
                     "instances": len(load_preset(name)), "description": info.get("description", "")})
    return rows


def _print_presets(rows: list[dict[str, Any]], verbose: bool) -> None:
    """Verbose: one row per preset, each description once; else one table of instance counts per op."""
    if verbose:
        view = table("preset", "op", "arch", "instances #", "description")
        first: dict[str, str] = {}
        for row in rows:
            description = row["description"]
            shown = f"as {first[description]}" if description in first else description
            first.setdefault(description, row["name"])
            view.add_row(*(text(row[k]) for k in ("name", "op", "arch", "instances")), text(shown))
        out_console().print(view)
        return
    for op in dict.fromkeys(row["op"] for row in rows):
        _print_preset_matrix([row for row in rows if row["op"] == op], op)
    note("a preset is named <row>_<column>; cells count its instances. --verbose: one row per preset with "
         "its description; --preset NAME: its instances")


def _split_name(name: str) -> tuple[str, str]:
    match = _PRESET_NAME.match(name)
    return (match["stem"], match["set"]) if match else (name, "")


def _set_key(kind: str) -> tuple[str, int, str]:
    prefix, _, base = kind.rpartition("_")
    return prefix, SET_ORDER.index(base) if base in SET_ORDER else len(SET_ORDER), base


def _print_preset_matrix(rows: list[dict[str, Any]], op: str) -> None:
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        stem, kind = _split_name(row["name"])
        counts.setdefault(stem, {})[kind] = row["instances"]
    kinds = sorted({kind for cells in counts.values() for kind in cells}, key=_set_key)
    view = table(op, *(f"{kind} #" for kind in kinds))
    for stem, cells in counts.items():
        view.add_row(text(stem), *(text(cells.get(kind, "-")) for kind in kinds))
    archs = ", ".join(sorted({str(row["arch"]) for row in rows}))
    show_table(f"{len(rows)} {op} presets for {archs}", view)


def _kernel_rows(registry: Registry, problem: GemmProblem | None) -> list[dict[str, Any]]:
    rows = []
    for kernel in registry.kernels:
        cfg = kernel.config
        row: dict[str, Any] = {"name": kernel.name, "family": cfg.family,
                               "tile": f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k}", "split_k": cfg.split_k,
                               "align": cfg.align, "warps": cfg.num_warps, "stages": cfg.num_stages}
        if problem is None or kernel.is_supported(problem):
            rows.append(row)
    return rows


def _print_kernels(rows: list[dict[str, Any]], title: str, verbose: bool) -> None:
    """Every instance (verbose, or up to SCREEN_ROWS of them), else per family: counts and the values used."""
    keys = ("name", "family", "tile", "split_k", "align", "warps", "stages")
    if verbose or len(rows) <= SCREEN_ROWS:
        view = table("instance", *keys[1:])
        for row in rows:
            view.add_row(*(text(row[k]) for k in keys))
        show_table(title, view)
        return
    view = table("family", "instances #", "tiles #", "split_k", "align", "warps", "stages")
    for family in dict.fromkeys(row["family"] for row in rows):
        mine = [row for row in rows if row["family"] == family]
        view.add_row(text(family), text(len(mine)), text(len({row["tile"] for row in mine})),
                     *(text(_values(mine, key)) for key in keys[3:]))
    show_table(title, view)
    note(f"--verbose lists all {len(rows)} instances")


def _values(rows: list[dict[str, Any]], key: str) -> str:
    return ", ".join(str(v) for v in sorted({row[key] for row in rows}))


def list_cmd(
    op: Annotated[str | None, typer.Option("--op", help=f"list only presets of this op ({', '.join(OPS)})",
                                           show_default=False)] = None,
    preset: Annotated[str | None, typer.Option("--preset", help="list the instances of this preset",
                                                  show_default=False, callback=preset_option)] = None,
    supports: Annotated[tuple[int, int, int] | None, typer.Option(
        "--supports", metavar="M N K", help="keep only instances that support this GEMM (with the problem "
        "options below); without --preset uses gemm_<dtype>_<layout>_essential", show_default=False)] = None,
    batch: BatchOpt = 1, dtype: DTypeOpt = None, layout: LayoutOpt = None, activation: ActivationOpt = None,
    bias: BiasOpt = None, num_d: NumDOpt = None, with_c: WithCOpt = None, out_dtype: OutDTypeOpt = None,
    gpu_target: TargetOpt = None, json_out: JsonOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="list every preset (with its description) "
                                          "or every instance, not a summary")] = False,
) -> None:
    """List presets, or the instances of one; no build is needed."""
    from tiledispatch.cli.problem_args import default_preset
    from tiledispatch.cli.registries import registry_from_preset
    from tiledispatch.presets import load_preset, preset_info

    if op is not None and op not in OPS:
        raise bad_choice(BadInput, "op", op, OPS)
    if preset is None and supports is None:
        rows = [row for row in _presets() if op is None or row["op"] == op]
        emit_json(rows) if json_out else _print_presets(rows, verbose)
        return
    problem = None
    if supports is not None and "conv" in (op, preset and preset_info(preset).get("op")):
        raise BadInput("--supports takes a GEMM (M N K); for a convolution run `tiledispatch select conv ... "
                       "--preset NAME`", field="supports")
    if supports is not None:
        base = load_preset(preset)[0] if preset else None   # dtype and layout default to the preset's
        problem = build_problem(*supports, batch=batch, dtype=dtype, layout=layout, activation=activation,
                                bias=bias, num_d=num_d, with_c=with_c, out_dtype=out_dtype, base=base)
    name = preset or default_preset(problem)  # type: ignore[arg-type]
    registry = registry_from_preset(name, gpu_target, problem)
    rows = _kernel_rows(registry, problem)
    if json_out:
        emit_json({"preset": name, "arch": registry.arch.name, "problem": problem and problem.to_dict(),
                   "instances": rows, "skipped": registry.skipped})
        return
    title = f"{name} on {registry.arch.name}: {len(rows)} of {len(registry)} instances"
    _print_kernels(rows, title + (f" support {problem.describe()}" if problem else ""), verbose)
    if problem is not None and not rows:
        note(f"no instance supports it: {registry.is_supported(problem).reason}")
    if problem is not None and problem.align < 16:
        note("align-16 instances are not listed; select/run can still use them on exact padded copies")
    if registry.skipped:
        note(f"{len(registry.skipped)} preset config(s) are invalid on {registry.arch.name} and were skipped")


def register(app: typer.Typer) -> None:
    app.command("list")(list_cmd)
