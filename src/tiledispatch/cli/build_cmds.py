"""`codegen` and `build`: generate instance sources, compile them into the cache."""
from pathlib import Path
from typing import Annotated

import typer

from tiledispatch.cli.output import (EXIT_BAD_INPUT, emit_json, fail, note, out_console, show_table, table,
                                     text)
from tiledispatch.cli.preset_names import check_preset, preselected_option
from tiledispatch.cli.problem_args import DType, JsonOpt, Layout, TargetOpt, WorkersOpt, _choices, _value
from tiledispatch.configs.conv import CONV_FAMILIES, ConvConfig
from tiledispatch.configs.gemm import GEMM_FAMILIES, GemmConfig
from tiledispatch.errors import BadInput, InvalidConfig, bad_choice
from tiledispatch.problems.conv import CONV_DTYPES, DIRECTIONS
from tiledispatch.registry.registry import BuildReport, Registry

OPS = ("gemm", "conv")
FAMILIES = {"gemm": GEMM_FAMILIES, "conv": CONV_FAMILIES}
Op = _choices("Op", OPS)
Direction = _choices("Direction", DIRECTIONS)


def parse_variants(variants: str | None, op: str = "gemm") -> tuple[str, ...]:
    families = FAMILIES[op]
    if not variants:
        return families
    names = tuple(v.strip() for v in variants.split(",") if v.strip())
    for name in names:
        if name not in families:
            raise bad_choice(BadInput, "variants", name, families)
    return names


def _wanted_fields(op: str, dtype: str | None, layout: str | None, direction: str | None,
                   ndim: int | None) -> dict[str, object]:
    """The config fields codegen's options fix, by op; an option of the other op is an error."""
    own = {"gemm": {"layout": layout}, "conv": {"direction": direction, "ndim": ndim}}
    for other, fields in own.items():
        given = [name for name, value in fields.items() if value is not None]
        if other != op and given:
            raise BadInput(f"--{given[0]} applies to --op {other}, not --op {op}", field=given[0])
    if op == "conv" and dtype is not None and dtype not in CONV_DTYPES:
        raise bad_choice(BadInput, "datatype", dtype, CONV_DTYPES)
    return {"dtype": dtype, **own[op]}


def _default_preset(op: str, wanted: dict[str, object]) -> str:
    if wanted["dtype"] is None:
        raise BadInput("--datatype is required unless --preselected names a preset", field="datatype")
    if op == "conv":
        name = f"conv_{wanted['direction'] or 'fwd'}_{wanted['dtype']}_{wanted['ndim'] or 2}d_essential"
    else:
        name = f"gemm_{wanted['dtype']}_{wanted['layout'] or 'rcr'}_essential"
    return check_preset(name, "preselected", default=True)


def codegen_configs(op: str, wanted: dict[str, object], preselected: str | None,
                    families: tuple[str, ...]) -> list[GemmConfig | ConvConfig]:
    """The configs codegen writes: a preset (by default the essential one of the wanted fields), by family."""
    from tiledispatch.presets import load_preset

    preselected = preselected or _default_preset(op, wanted)
    configs = load_preset(preselected)
    other = sorted({c.op for c in configs} - {op})
    if other:
        raise InvalidConfig(f"preset {preselected} holds {other[0]} instances, not --op {op}", field="op")
    for field, value in wanted.items():
        found = sorted({str(getattr(c, field)) for c in configs})
        if value is not None and found != [str(value)]:
            raise InvalidConfig(f"preset {preselected} holds {field} {', '.join(found)}, not {value}",
                                field=field)
    return [c for c in configs if c.family in families]


def config_errors(cfg: GemmConfig | ConvConfig, arch) -> list[tuple[str, str]]:
    """The validity predicate of the config's op."""
    from tiledispatch.kernels.family import config_errors as conv_config_errors
    from tiledispatch.kernels.family import config_errors as gemm_config_errors

    return (conv_config_errors if isinstance(cfg, ConvConfig) else gemm_config_errors)(cfg, arch)


def codegen(
    output_dir: Annotated[Path, typer.Option("--output-dir", "-o",
                                             help="where to write the sources and manifest.json")],
    op: Annotated[Op, typer.Option("--op", help="operation")] = Op.gemm,  # type: ignore[valid-type]
    datatype: Annotated[DType | None, typer.Option(  # type: ignore[valid-type]
        "--datatype", help="input dtype (required unless --preselected)", show_default=False)] = None,
    layout: Annotated[Layout | None, typer.Option(  # type: ignore[valid-type]
        "--layout", help="gemm: major order of A, B, out [default: rcr]", show_default=False)] = None,
    direction: Annotated[Direction | None, typer.Option(  # type: ignore[valid-type]
        "--direction", help="conv: direction [default: fwd]", show_default=False)] = None,
    ndim: Annotated[int | None, typer.Option(
        "--ndim", help="conv: spatial dims, 1, 2 or 3 [default: 2]", min=1, max=3,
        show_default=False)] = None,
    gpu_target: TargetOpt = None,
    variants: Annotated[str | None, typer.Option(
        "--variants", help=f"comma-separated kernel families to keep (gemm: {','.join(GEMM_FAMILIES)}; conv: "
        f"{','.join(CONV_FAMILIES)}) [default: all]",
        show_default=False)] = None,
    preselected: Annotated[str | None, typer.Option(
        "--preselected", help="preset to generate [default: gemm_<datatype>_<layout>_essential, or "
        "conv_<direction>_<datatype>_<ndim>d_essential]",
        show_default=False, callback=preselected_option)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Generate the Triton source of each instance and a manifest.json (the input of `build --config`)."""
    from tiledispatch.arch.spec import detect, get_arch
    from tiledispatch.codegen import write_instances

    wanted = _wanted_fields(op.value, _value(datatype), _value(layout), _value(direction), ndim)
    arch = get_arch(gpu_target) if gpu_target else detect()
    configs = codegen_configs(op.value, wanted, preselected, parse_variants(variants, op.value))
    errors = {c.name: config_errors(c, arch) for c in configs}
    valid = [c for c in configs if not errors[c.name]]
    skipped = {name: "; ".join(r for _, r in found) for name, found in errors.items() if found}
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
                                                    show_default=False,
                                                    callback=preselected_option)] = None,
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
    report = build(registry, jobs, quiet=True)   # the summary is printed below, once
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
    if registry.skipped:
        note(f"skipped {len(registry.skipped)} preset config(s) invalid on {registry.arch.name}")
    if report.failed:
        rows = table("failed kernel", "reason")
        for name, reason in report.failed.items():
            rows.add_row(text(name), text(reason))
        show_table("build failures", rows)


def register(app: typer.Typer) -> None:
    app.command("codegen")(codegen)
    app.command("build")(build_cmd)
