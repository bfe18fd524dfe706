"""`select gemm|conv ...` and `run gemm|conv ...`: pick a kernel for one problem, and run (time, validate)
it."""
from collections.abc import Callable
from typing import Annotated, Any

import typer

from tiledispatch.cli.conv_args import ConvOptions, ConvPresetOpt, conv_problem_command
from tiledispatch.cli.measure import Problem, interpreter_notice, make_inputs, measure, pick_target, status_of
from tiledispatch.cli.output import EXIT_FAILURE, emit_json, fail, note, out_console, show_table, table, text
from tiledispatch.cli.problem_args import (ActivationOpt, BatchOpt, BiasOpt, ConfigOpt, DTypeOpt, JsonOpt,
                                           KArg, KernelOpt, LayoutOpt, MArg, NArg, NumDOpt, OutDTypeOpt,
                                           PresetOpt, Strategy, StrategyOpt, TargetOpt, WithCOpt, WorkersOpt,
                                           gemm_problem_maker)
from tiledispatch.registry.registry import Registry
from tiledispatch.select.selector import Selection

# Negative sizes reach GemmProblem (which names the field) instead of being read as unknown options.
PROBLEM_COMMAND = {"context_settings": {"ignore_unknown_options": True}}
TOP_RANKING = 5

ValidateOpt = Annotated[bool, typer.Option("--validate", help="check the output against a float64 reference "
                                         "(exit 1 when it fails)")]
SeedOpt = Annotated[int, typer.Option("--seed", help="seed of the random inputs")]

select_app = typer.Typer(help="Select the kernel for one problem.", no_args_is_help=True)
run_app = typer.Typer(help="Build, select and run one problem (timing; --validate checks it).",
                      no_args_is_help=True)


def choose(registry: Registry, problem: Problem, strategy: str, explicit: bool) -> Selection:
    """Registry.select; with --kernel the one-kernel registry's choice is reported as explicit."""
    selection = registry.select(problem, "first_fit" if explicit else strategy)
    if explicit:
        selection.strategy = "explicit (--kernel)"
        selection.ranking = []
    return selection


def _print_selection(problem: Problem, selection: Selection) -> None:
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
    make = gemm_problem_maker(m, n, k, batch, dtype, layout, activation, bias, num_d, with_c, out_dtype)
    select_problem(make, preset, config, kernel, gpu_target, jobs, strategy.value, json_out)


def select_problem(make_problem: Callable[[Any], Problem], preset: str | None, config: str | None,
                   kernel: str | None, gpu_target: str | None, jobs: int | None, strategy: str,
                   json_out: bool) -> None:
    """select gemm|conv: build the kernels, select for the problem, print the choice."""
    from tiledispatch.cli.registries import prepared

    problem, registry = prepared(make_problem, preset=preset, config=config, kernel=kernel,
                                 gpu_target=gpu_target, jobs=jobs, quiet=json_out)
    if strategy == "tune":
        _note_target(registry, problem, quiet=json_out)
    selection = choose(registry, problem, strategy, explicit=bool(kernel))
    if json_out:
        emit_json({"problem": problem.to_dict(), "arch": registry.arch.name, **selection.to_dict()})
        return
    _print_selection(problem, selection)


def _note_target(registry: Registry, problem: Problem, quiet: bool):
    target = pick_target(registry)
    notice = interpreter_notice(target, problem)
    if notice and not quiet:
        note(notice)
    return target


def _run_report(problem: Problem, selection: Selection, result: dict[str, Any], target) -> dict[str, Any]:
    report = {"problem": problem.to_dict(), "kernel": selection.kernel.name, "strategy": selection.strategy,
              "padded": selection.padded, **result, "status": status_of(result),
              "device": target.name, "backend": target.backend}
    return report


def _print_run(report: dict[str, Any], problem: Problem) -> None:
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
    validate: ValidateOpt = False, seed: SeedOpt = 0, json_out: JsonOpt = False,
) -> None:
    """Run M x N x K on random inputs with the selected (or --kernel) instance; on a CPU-only machine this
    uses Triton's interpreter, so keep the problem small."""
    make = gemm_problem_maker(m, n, k, batch, dtype, layout, activation, bias, num_d, with_c, out_dtype)
    run_problem(make, preset, config, kernel, gpu_target, jobs, strategy.value, validate, seed, json_out)


def run_problem(make_problem: Callable[[Any], Problem], preset: str | None, config: str | None,
                kernel: str | None, gpu_target: str | None, jobs: int | None, strategy: str, validate: bool,
                seed: int, json_out: bool) -> None:
    """run gemm|conv: build, select, run on random inputs (timing, validation), report; exit 1 on a failed
    validation."""
    from tiledispatch.cli.registries import prepared

    problem, registry = prepared(make_problem, preset=preset, config=config, kernel=kernel,
                                 gpu_target=gpu_target, jobs=jobs, quiet=json_out)
    target = _note_target(registry, problem, quiet=json_out)
    selection = choose(registry, problem, strategy, explicit=bool(kernel))
    args = make_inputs(problem, target.device, seed=seed)
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


@select_app.command("conv", **PROBLEM_COMMAND)
@conv_problem_command
def select_conv(
    options: ConvOptions, preset: ConvPresetOpt = None, config: ConfigOpt = None, kernel: KernelOpt = None,
    gpu_target: TargetOpt = None, jobs: WorkersOpt = None, strategy: StrategyOpt = Strategy.auto,
    json_out: JsonOpt = False,
) -> None:
    """Build the preset (cached after the first time) and show which kernel serves the convolution, and
    why."""
    select_problem(options.problem, preset, config, kernel, gpu_target, jobs, strategy.value, json_out)


@run_app.command("conv", **PROBLEM_COMMAND)
@conv_problem_command
def run_conv(
    options: ConvOptions, preset: ConvPresetOpt = None, config: ConfigOpt = None, kernel: KernelOpt = None,
    gpu_target: TargetOpt = None, jobs: WorkersOpt = None, strategy: StrategyOpt = Strategy.auto,
    validate: ValidateOpt = False, seed: SeedOpt = 0, json_out: JsonOpt = False,
) -> None:
    """Run the convolution on random channels-last inputs with the selected (or --kernel) instance; on a
    CPU-only machine this uses Triton's interpreter, so keep the problem small."""
    run_problem(options.problem, preset, config, kernel, gpu_target, jobs, strategy.value, validate, seed,
                json_out)


def register(app: typer.Typer) -> None:
    app.add_typer(select_app, name="select")
    app.add_typer(run_app, name="run")
