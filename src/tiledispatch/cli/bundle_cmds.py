"""`export`, `verify-bundle` and `export-capi`: write a deployment bundle on any machine, check one where it
will run, and export a C library of exact-problem plans over one."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tiledispatch.cli.output import emit_json, out_console, text
from tiledispatch.cli.preset_names import check_preset
from tiledispatch.cli.problem_args import JsonOpt, TargetOpt, WorkersOpt
from tiledispatch.errors import BadInput, InvalidConfig


def _presets_option(values: list[str] | None) -> list[str] | None:
    """typer callback: every --preset names a packaged preset (checked before any work)."""
    return None if values is None else [check_preset(value) for value in values]


def export(
    out: Annotated[Path, typer.Option("--out", "-o", help="the bundle directory to write (must not exist, "
                                      "unless --force)", show_default=False)],
    preset: Annotated[list[str] | None, typer.Option(
        "--preset", help="packaged preset to include (repeat for several)", show_default=False,
        callback=_presets_option)] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", help="JSON file of more kernels: a list of instance names / config dicts, a registry "
        "JSON or a preset-style {'configs': [...]}", show_default=False)] = None,
    epilogue: Annotated[list[str] | None, typer.Option(
        "--epilogue", help="also export each GEMM / conv fwd preset specialised to this fused epilogue, as "
        "td.gemm / td.conv use for calls with a bias or an activation: '+'-joined words, e.g. bias, "
        "relu+bias, gelu, silu+bias_row (repeat for several)", show_default=False)] = None,
    gpu_target: TargetOpt = None,
    jobs: WorkersOpt = None,
    force: Annotated[bool, typer.Option("--force", help="replace an earlier bundle at --out")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Build the kernels of presets for a GPU target (no GPU needed; the build cache is reused) and write them
    with the presets, cost models and tuning entries they need into a bundle that `load_bundle` /
    TILEDISPATCH_BUNDLE run from without compiling."""
    from tiledispatch.bundle.export import export_bundle

    if not preset and config is None:
        raise BadInput("give at least one --preset NAME (or --config FILE.json)", field="preset")
    if jobs is not None and jobs < 1:
        raise BadInput(f"-j {jobs} must be >= 1", field="jobs")
    configs = _configs_of(config, gpu_target) if config is not None else []
    report = export_bundle(out, preset or [], configs, gpu_target, epilogues=epilogue or [], max_workers=jobs,
                           force=force)
    if json_out:
        emit_json(report.to_dict())
        return
    console = out_console()
    console.print(text(f"wrote {report.path}: {report}"))
    if report.skipped:
        console.print(text(f"skipped {len(report.skipped)} preset config(s) invalid on {report.arch}"))
    console.print(text(f"run from it: TILEDISPATCH_BUNDLE={report.path} (or tiledispatch.load_bundle(path))"))


def _configs_of(path: Path, gpu_target: str | None) -> list:
    from tiledispatch.cli.registries import read_config_file, registry_from_file

    data = read_config_file(path)
    if isinstance(data, dict) and "instances" in data:
        raise InvalidConfig(f"--config {path} is a codegen manifest; export builds configs from their names "
                            "(give a list of instance names, a registry JSON or --preset)", field="config")
    return [kernel.config for kernel in registry_from_file(path, gpu_target).kernels]


def verify_bundle(
    path: Annotated[Path, typer.Argument(help="bundle directory written by `tiledispatch export`",
                                         show_default=False)],
    any_arch: Annotated[bool, typer.Option("--any-arch", help="do not compare the bundle's arch with this "
                                           "machine's GPU (check it away from the target)")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Verify a bundle as load_bundle does (format, tiledispatch and Triton versions, the GPU's arch, every
    file's sha256); exits non-zero naming the first mismatch."""
    from tiledispatch.bundle.manifest import open_bundle

    bundle = open_bundle(path, arch=None if any_arch else "device")
    manifest = bundle.manifest
    summary = {key: manifest.get(key) for key in ("arch", "tiledispatch", "triton", "torch", "created",
                                                  "presets", "models", "tuning_entries", "bytes")}
    summary.update(path=str(bundle.path), kernels=len(bundle.kernels), files=len(manifest["files"]), ok=True)
    if json_out:
        emit_json(summary)
        return
    out_console().print(text(
        f"ok: {bundle.path}: {summary['kernels']} {summary['arch']} kernels, {summary['files']} files "
        f"({summary['bytes'] / 2**20:.1f} MiB) verified; tiledispatch {summary['tiledispatch']}, Triton "
        f"{summary['triton']}, exported {summary['created']}"))


def export_capi(
    bundle: Annotated[Path, typer.Argument(help="bundle directory written by `tiledispatch export`",
                                           show_default=False)],
    problems: Annotated[Path, typer.Option("--problems", help="JSON file of the exact problems the library "
                                           "serves: {\"gemm\": [...], \"conv\": [...]} (docs/design/"
                                           "bundle_capi.md)", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="folder to write (tiledispatch.h, td_capi.c, "
                                      "libtdcapi.so, capi.json)", show_default=False)],
    strategy: Annotated[str, typer.Option("--strategy", help="selection: auto (cost model, else rules; "
                                          "no measuring), ml, rules, first_fit")] = "auto",
    build: Annotated[bool, typer.Option("--build/--no-build", help="compile the library with --cc")] = True,
    cc: Annotated[str, typer.Option("--cc", help="the C compiler")] = "gcc",
    force: Annotated[bool, typer.Option("--force", help="replace an earlier export-capi folder")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Select a kernel of the bundle for each listed problem (no GPU needed) and write a C shared library
    (td_gemm, td_conv, td_select; header tiledispatch.h) that launches those plans with the CUDA driver."""
    from tiledispatch.bundle.capi.export import export_capi as run_export

    report = run_export(bundle, problems, out, strategy=strategy, build=build, compiler=cc, force=force)
    if json_out:
        emit_json(report.to_dict())
        return
    console = out_console()
    console.print(text(f"wrote {report.path}: {report}"))
    for plan in report.plans:
        console.print(text(f"  {plan['problem']} -> {plan['instance']}"))


def register(app: typer.Typer) -> None:
    app.command("export")(export)
    app.command("verify-bundle")(verify_bundle)
    app.command("export-capi")(export_capi)
