"""`codegen` and `build`: generate instance sources, compile them into the cache."""
from pathlib import Path
from typing import Annotated

import typer

from tiledispatch.cli.output import (EXIT_BAD_INPUT, emit_json, fail, note, out_console, show_table, table,
                                     text)
from tiledispatch.cli.problem_args import DType, JsonOpt, Layout, TargetOpt, WorkersOpt
from tiledispatch.configs.gemm import GEMM_FAMILIES, GemmConfig
from tiledispatch.errors import BadInput, InvalidConfig, bad_choice
from tiledispatch.registry.registry import BuildReport, Registry

SUPPORTED_OPS = ("gemm",)
PLANNED_OPS = ("conv",)


def check_op(op: str) -> None:
    if op in PLANNED_OPS:
        raise BadInput(f"--op {op} is not supported yet; supported ops: {', '.join(SUPPORTED_OPS)}",
                       field="op")
    if op not in SUPPORTED_OPS:
        raise bad_choice(BadInput, "op", op, SUPPORTED_OPS)


def parse_variants(variants: str | None) -> tuple[str, ...]:
    if not variants:
        return GEMM_FAMILIES
    names = tuple(v.strip() for v in variants.split(",") if v.strip())
    for name in names:
        if name not in GEMM_FAMILIES:
            raise bad_choice(BadInput, "variants", name, GEMM_FAMILIES)
    return names


def codegen_configs(dtype: str | None, layout: str | None, preselected: str | None,
                    families: tuple[str, ...]) -> list[GemmConfig]:
    """The configs codegen writes: a preset (by default the essential one of dtype/layout), by family."""
    from tiledispatch.presets import load_preset

    if preselected is None:
        if dtype is None:
            raise BadInput("--datatype is required unless --preselected names a preset", field="datatype")
        preselected = f"gemm_{dtype}_{layout or 'rcr'}_essential"
    configs = load_preset(preselected)
    for field, wanted in (("dtype", dtype), ("layout", layout)):
        found = sorted({getattr(c, field) for c in configs})
        if wanted is not None and found != [wanted]:
            raise InvalidConfig(f"preset {preselected} holds {field} {', '.join(found)}, not {wanted}",
                                field=field)
    return [c for c in configs if c.family in families]


def codegen(
    output_dir: Annotated[Path, typer.Option("--output-dir", "-o",
                                             help="where to write the sources and manifest.json")],
    op: Annotated[str, typer.Option("--op", help="operation: gemm (conv: not yet supported)")] = "gemm",
    datatype: Annotated[DType | None, typer.Option(  # type: ignore[valid-type]
        "--datatype", help="input dtype (required unless --preselected)", show_default=False)] = None,
    layout: Annotated[Layout | None, typer.Option(  # type: ignore[valid-type]
        "--layout", help="major order of A, B, out [default: rcr]", show_default=False)] = None,
    gpu_target: TargetOpt = None,
    variants: Annotated[str | None, typer.Option(
        "--variants", help=f"comma-separated kernel families to keep ({','.join(GEMM_FAMILIES)}) "
        "[default: all]",
        show_default=False)] = None,
    preselected: Annotated[str | None, typer.Option(
        "--preselected", help="preset to generate [default: gemm_<datatype>_<layout>_essential]",
        show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Generate the Triton source of each instance and a manifest.json (the input of `build --config`)."""
    from tiledispatch.arch.spec import detect, get_arch
    from tiledispatch.codegen import write_instances
    from tiledispatch.configs.validity import gemm_config_errors

    check_op(op)
    arch = get_arch(gpu_target) if gpu_target else detect()
    configs = codegen_configs(datatype and datatype.value, layout and layout.value, preselected,
                              parse_variants(variants))
    valid = [c for c in configs if not gemm_config_errors(c, arch)]
    skipped = {c.name: "; ".join(r for _, r in gemm_config_errors(c, arch))
               for c in configs if c not in valid}
    if not valid:
        raise InvalidConfig(f"no config left to generate for {arch.name} (variants={variants or 'all'})",
                            field="variants")
    manifest = write_instances(valid, output_dir, arch.name)
    if json_out:
        emit_json({"manifest": str(manifest), "arch": arch.name, "instances": [c.name for c in valid],
                   "skipped": skipped})
        return
    for name, reason in skipped.items():
        note(f"skipped {name}: {reason}")
    out_console().print(text(f"wrote {len(valid)} {arch.name} instances to {output_dir}"))
    out_console().print(text(f"manifest: {manifest}  (next: tiledispatch build --config {manifest})"))


def build_cmd(
    preselected: Annotated[str | None, typer.Option("--preselected", help="packaged preset to build",
                                                       show_default=False)] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", help="JSON file: codegen manifest.json, registry JSON, or a list of instance names / "
        "config dicts", show_default=False)] = None,
    jobs: WorkersOpt = None,
    gpu_target: TargetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Compile instances into the cache (cached ones are reused); exits 1 if any failed."""
    from tiledispatch.cli.registries import build, registry_from_file, registry_from_preset

    if (preselected is None) == (config is None):
        raise fail("give exactly one of --preselected NAME or --config FILE.json", EXIT_BAD_INPUT)
    registry = (registry_from_file(config, gpu_target) if config is not None
                else registry_from_preset(preselected, gpu_target))  # type: ignore[arg-type]
    report = build(registry, jobs, quiet=json_out)
    if json_out:
        emit_json({"arch": registry.arch.name, "cache_dir": str(registry.cache_dir), "kernels": len(registry),
                   "skipped": registry.skipped, **report.to_dict()})
    else:
        _print_report(registry, report)
    if report.failed:
        raise fail(f"{len(report.failed)} of {len(registry)} kernels failed to build")


def _print_report(registry: Registry, report: BuildReport) -> None:
    console = out_console()
    console.print(text(f"{len(registry)} kernels for {registry.arch.name}: {report}"))
    console.print(text(f"cache: {registry.cache_dir}"))
    if report.failed:
        rows = table("failed kernel", "reason")
        for name, reason in report.failed.items():
            rows.add_row(text(name), text(reason))
        show_table("build failures", rows)


def register(app: typer.Typer) -> None:
    app.command("codegen")(codegen)
    app.command("build")(build_cmd)
