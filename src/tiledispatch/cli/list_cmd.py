"""`tiledispatch list`: presets (of one op with --op), or the instances of one (optionally only those
supporting a GEMM)."""
from typing import Annotated, Any

import typer

from tiledispatch.cli.output import emit_json, note, out_console, show_table, table, text
from tiledispatch.cli.problem_args import (ActivationOpt, BatchOpt, BiasOpt, DTypeOpt, JsonOpt, LayoutOpt,
                                           NumDOpt, OutDTypeOpt, TargetOpt, WithCOpt, build_problem)
from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.registry import Registry

OPS = ("gemm", "conv")


def _presets() -> list[dict[str, Any]]:
    from tiledispatch.presets import list_presets, load_preset, preset_info

    rows = []
    for name in list_presets():
        info = preset_info(name)
        arch = info.get("arch") or info.get("space", {}).get("arch")
        rows.append({"name": name, "op": info.get("op", "gemm"), "arch": arch,
                     "instances": len(load_preset(name)), "description": info.get("description", "")})
    return rows


def _print_presets(rows: list[dict[str, Any]]) -> None:
    view = table("preset", "op", "arch", "instances #", "description")
    for row in rows:
        view.add_row(*(text(row[k]) for k in ("name", "op", "arch", "instances", "description")))
    out_console().print(view)


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


def _print_kernels(rows: list[dict[str, Any]], title: str) -> None:
    keys = ("name", "family", "tile", "split_k", "align", "warps", "stages")
    view = table("instance", *keys[1:])
    for row in rows:
        view.add_row(*(text(row[k]) for k in keys))
    show_table(title, view)


def list_cmd(
    op: Annotated[str | None, typer.Option("--op", help=f"list only presets of this op ({', '.join(OPS)})",
                                           show_default=False)] = None,
    preset: Annotated[str | None, typer.Option("--preset", help="list the instances of this preset",
                                                  show_default=False)] = None,
    supports: Annotated[tuple[int, int, int] | None, typer.Option(
        "--supports", metavar="M N K", help="keep only instances that support this GEMM (with the problem "
        "options below); without --preset uses gemm_<dtype>_<layout>_essential", show_default=False)] = None,
    batch: BatchOpt = 1, dtype: DTypeOpt = None, layout: LayoutOpt = None, activation: ActivationOpt = None,
    bias: BiasOpt = None, num_d: NumDOpt = None, with_c: WithCOpt = None, out_dtype: OutDTypeOpt = None,
    gpu_target: TargetOpt = None, json_out: JsonOpt = False,
) -> None:
    """List presets, or the instances of one; no build is needed."""
    from tiledispatch.cli.problem_args import default_preset
    from tiledispatch.cli.registries import registry_from_preset
    from tiledispatch.presets import load_preset, preset_info

    if op is not None and op not in OPS:
        raise bad_choice(BadInput, "op", op, OPS)
    if preset is None and supports is None:
        rows = [row for row in _presets() if op is None or row["op"] == op]
        emit_json(rows) if json_out else _print_presets(rows)
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
    _print_kernels(rows, title + (f" support {problem.describe()}" if problem else ""))
    if problem is not None and not rows:
        note(f"no instance supports it: {registry.is_supported(problem).reason}")
    if problem is not None and problem.align < 16:
        note("align-16 instances are not listed; select/run can still use them on exact padded copies")
    if registry.skipped:
        note(f"{len(registry.skipped)} preset config(s) are invalid on {registry.arch.name} and were skipped")


def register(app: typer.Typer) -> None:
    app.command("list")(list_cmd)
