"""`select gemm ...` and `run gemm ...`: pick a kernel for one problem, and run (time, validate) it."""
from typing import Annotated, Any

import typer

from tiledispatch.cli.measure import interpreter_notice, measure, pick_target, status_of
from tiledispatch.cli.output import (EXIT_FAILURE, emit_json, fail, note, out_console, show_table, table,
                                     text)
from tiledispatch.cli.problem_args import (ActivationOpt, BatchOpt, BiasOpt, ConfigOpt, DTypeOpt, JsonOpt,
                                           KArg, KernelOpt, LayoutOpt, MArg, NArg, NumDOpt, OutDTypeOpt,
                                           PresetOpt, Strategy, StrategyOpt, TargetOpt, WithCOpt, WorkersOpt,
                                           build_problem)
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.errors import BadInput
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.registry.registry import Registry
from tiledispatch.select.selector import Selection

# Negative sizes reach GemmProblem (which names the field) instead of being read as unknown options.
PROBLEM_COMMAND = {"context_settings": {"ignore_unknown_options": True}}
TOP_RANKING = 5

select_app = typer.Typer(help="Select the kernel for one problem.", no_args_is_help=True)
run_app = typer.Typer(help="Build, select and run one problem (timing; --validate checks it).",
                      no_args_is_help=True)


def conv_not_supported(ctx: typer.Context) -> None:
    """Convolutions: declared in the design, not implemented yet."""
    raise BadInput("op 'conv' is not supported yet; supported ops: gemm", field="op")


def _problem_and_registry(m: int, n: int, k: int, batch: int, dtype, layout, activation, bias, num_d, with_c,
                          out_dtype, preset: str | None, config: str | None, kernel: str | None,
                          gpu_target: str | None, jobs: int | None, quiet: bool
                          ) -> tuple[GemmProblem, Registry]:
    from tiledispatch.cli.registries import build_for_use, problem_and_registry

    def make_problem(base: GemmConfig | None) -> GemmProblem:
        return build_problem(m, n, k, batch, dtype, layout, activation, bias, num_d, with_c, out_dtype, base)

    problem, registry = problem_and_registry(make_problem, preset=preset, config=config, kernel=kernel,
                                             gpu_target=gpu_target)
    build_for_use(registry, jobs, quiet)
    return problem, registry


def choose(registry: Registry, problem: GemmProblem, strategy: str, explicit: bool) -> Selection:
    """Registry.select; with --kernel the one-kernel registry's choice is reported as explicit."""
    selection = registry.select(problem, "first_fit" if explicit else strategy)
    if explicit:
        selection.strategy = "explicit (--kernel)"
        selection.ranking = []
    return selection


def _print_selection(problem: GemmProblem, selection: Selection) -> None:
    console = out_console()
    console.print(text(f"problem:  {problem.describe()}"))
    console.print(text(f"kernel:   {selection.kernel.name}"))
    console.print(text(f"strategy: {selection.strategy}" + ("  (on zero-padded copies)" if selection.padded
                                                             else "")))
    for line in selection.notes:
        console.print(text(f"note:     {line}"))
    if selection.ranking:
        unit = "ms" if selection.strategy == "tune" else "score"
        view = table("candidate", unit)
        for name, score in selection.ranking[:TOP_RANKING]:
            view.add_row(text(name), text(f"{score:.4g}"))
        show_table(f"top {min(TOP_RANKING, len(selection.ranking))} of {len(selection.ranking)} ranked "
                   "(lower is better)", view)


@select_app.command("gemm", **PROBLEM_COMMAND)
def select_gemm(
    m: MArg, n: NArg, k: KArg, batch: BatchOpt = 1, dtype: DTypeOpt = None, layout: LayoutOpt = None,
    activation: ActivationOpt = None, bias: BiasOpt = None, num_d: NumDOpt = None, with_c: WithCOpt = None,
    out_dtype: OutDTypeOpt = None, preset: PresetOpt = None, config: ConfigOpt = None,
    kernel: KernelOpt = None, gpu_target: TargetOpt = None, jobs: WorkersOpt = None,
    strategy: StrategyOpt = Strategy.auto,
    json_out: JsonOpt = False,
) -> None:
    """Build the preset (cached after the first time) and show which kernel serves M x N x K, and why."""
    problem, registry = _problem_and_registry(m, n, k, batch, dtype, layout, activation, bias, num_d, with_c,
                                              out_dtype, preset, config, kernel, gpu_target, jobs, json_out)
    if strategy.value == "tune":
        _note_target(registry, problem, quiet=json_out)
    selection = choose(registry, problem, strategy.value, explicit=bool(kernel))
    if json_out:
        emit_json({"problem": problem.to_dict(), "arch": registry.arch.name, **selection.to_dict()})
        return
    _print_selection(problem, selection)


def _note_target(registry: Registry, problem: GemmProblem, quiet: bool):
    target = pick_target(registry)
    notice = interpreter_notice(target, problem)
    if notice and not quiet:
        note(notice)
    return target


def _run_report(problem: GemmProblem, selection: Selection, result: dict[str, Any], target) -> dict[str, Any]:
    report = {"problem": problem.to_dict(), "kernel": selection.kernel.name, "strategy": selection.strategy,
              "padded": selection.padded, **result, "status": status_of(result),
              "device": target.name, "backend": target.backend}
    return report


def _print_run(report: dict[str, Any], problem: GemmProblem) -> None:
    console = out_console()
    console.print(text(f"problem:  {problem.describe()}"))
    console.print(text(f"kernel:   {report['kernel']}  (strategy: {report['strategy']}"
                       + (", padded" if report["padded"] else "") + ")"))
    console.print(text(f"device:   {report['device']}  backend: {report['backend']}"))
    ex = report.get("execution")
    if ex:
        what = "interpreter time" if report["backend"] == "interpreter" else "time"
        console.print(text(f"{what}: {ex['time_ms']:.4f} ms  {ex['tflops']:.4g} TFLOP/s  "
                           f"{ex['gbps']:.4g} GB/s"))
    check = report.get("validation")
    if check:
        verdict = "PASSED" if check["passed"] else "FAILED"
        style = "green" if check["passed"] else "bold red"
        console.print(text(f"validation vs float64 reference: {verdict}  "
                           f"max_abs_err={check['max_abs_err']:.3e}  rel_err={check['rel_err']:.3e}",
                           style=style))
    console.print(text(f"status:   {report['status']}"))


@run_app.command("gemm", **PROBLEM_COMMAND)
def run_gemm(
    m: MArg, n: NArg, k: KArg, batch: BatchOpt = 1, dtype: DTypeOpt = None, layout: LayoutOpt = None,
    activation: ActivationOpt = None, bias: BiasOpt = None, num_d: NumDOpt = None, with_c: WithCOpt = None,
    out_dtype: OutDTypeOpt = None, preset: PresetOpt = None, config: ConfigOpt = None,
    kernel: KernelOpt = None, gpu_target: TargetOpt = None, jobs: WorkersOpt = None,
    strategy: StrategyOpt = Strategy.auto,
    validate: Annotated[bool, typer.Option("--validate", help="check the output against a float64 reference "
                                           "(exit 1 when it fails)")] = False,
    seed: Annotated[int, typer.Option("--seed", help="seed of the random inputs")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Run M x N x K on random inputs with the selected (or --kernel) instance; on a CPU-only machine this
    uses Triton's interpreter, so keep the problem small."""
    from tiledispatch.runtime.inputs import make_args

    problem, registry = _problem_and_registry(m, n, k, batch, dtype, layout, activation, bias, num_d, with_c,
                                              out_dtype, preset, config, kernel, gpu_target, jobs, json_out)
    target = _note_target(registry, problem, quiet=json_out)
    selection = choose(registry, problem, strategy.value, explicit=bool(kernel))
    args = make_args(problem, target.device, seed=seed)
    result = measure(selection, problem, args, target, validate=validate)
    report = _run_report(problem, selection, result, target)
    if json_out:
        emit_json(report)
    else:
        _print_run(report, problem)
    if report["status"] != "ok":
        rel_err = report["validation"]["rel_err"]
        raise fail(f"validation failed: rel_err={rel_err:.3e} is above the {problem.dtype} tolerance",
                   EXIT_FAILURE)


def register(app: typer.Typer) -> None:
    conv = {"context_settings": {"ignore_unknown_options": True, "allow_extra_args": True}}
    select_app.command("conv", **conv)(conv_not_supported)
    run_app.command("conv", **conv)(conv_not_supported)
    app.add_typer(select_app, name="select")
    app.add_typer(run_app, name="run")
