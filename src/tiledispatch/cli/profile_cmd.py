"""`profile gemm|conv ...`: time every built instance that can run one problem (and the vendor library with
--vendor: torch.matmul for GEMMs, cuDNN for convolutions)."""
import csv
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from tiledispatch.cli.conv_args import ConvOptions, ConvPresetOpt, conv_problem_command
from tiledispatch.cli.measure import (
    Problem,
    Target,
    check,
    interpreter_notice,
    make_inputs,
    measure,
    pick_target,
    reference_of,
    throughput,
)
from tiledispatch.cli.output import emit_json, note, show_table, table, text
from tiledispatch.cli.problem_args import (
    ActivationOpt,
    BatchOpt,
    BiasOpt,
    ConfigOpt,
    DTypeOpt,
    JsonOpt,
    KArg,
    LayoutOpt,
    MArg,
    NArg,
    NumDOpt,
    OutDTypeOpt,
    PresetOpt,
    TargetOpt,
    WithCOpt,
    WorkersOpt,
    gemm_problem_maker,
)
from tiledispatch.errors import TileDispatchError, UnsupportedProblem
from tiledispatch.registry.kernel import Kernel
from tiledispatch.registry.registry import Registry
from tiledispatch.bench.vendor import CUBLAS, CUDNN, vendor_call
from tiledispatch.select.selector import Plan, Selection

VENDORS = (CUBLAS, CUDNN)
CSV_COLUMNS = ("kernel", "status", "time_ms", "tflops", "gbps", "padded", "rel_err", "reason")

profile_app = typer.Typer(help="Time every built instance for one problem.", no_args_is_help=True)


def plans_by_kernel(registry: Registry, problem: Problem) -> dict[str, Plan]:
    """Each built kernel that can compute `problem`, with its plan: direct if possible, else padded."""
    chosen: dict[str, Plan] = {}
    for plan in registry.plans(problem):
        chosen.setdefault(plan.kernel.name, plan)
    return chosen


def profile_kernel(kernel: Kernel, plan: Plan | None, problem: Problem, args: Any, target: Target,
                   reference: Any) -> dict:
    """One row: the kernel's time on `args` (and its error against `reference`, when given)."""
    row: dict[str, Any] = {"kernel": kernel.name, "status": "unsupported", "padded": False}
    if plan is None:
        return {**row, "reason": kernel.is_supported(problem).reason}
    row["padded"] = plan.padded
    selection = Selection(plan.kernel, "profile", plan.problem, plan.padded)
    try:
        result = measure(selection, problem, args, target, validate=reference is not None,
                         reference=reference)
    except TileDispatchError as exc:
        return {**row, "status": "runtime_error", "reason": str(exc)}
    row.update(result["execution"])
    row["status"] = "ok"
    if reference is not None:
        row["rel_err"] = result["validation"]["rel_err"]
        row["status"] = "ok" if result["validation"]["passed"] else "failed_validation"
    return row


def profile_vendor(problem: Problem, args: Any, target: Target, reference: Any) -> dict | None:
    from tiledispatch.bench.timer import time_ms

    if target.backend != "cuda":
        note("--vendor: skipped, vendor timing needs a GPU (this run uses Triton's interpreter on the CPU)")
        return None
    try:
        label, fn = vendor_call(problem, args)
    except UnsupportedProblem as exc:
        note(f"--vendor: skipped, {exc}")
        return None
    row: dict[str, Any] = {"kernel": label, "status": "ok", "padded": False,
                           **throughput(problem, time_ms(fn, target.device))}
    if reference is not None:
        verdict = check(fn(), args, problem, reference)
        row["rel_err"], row["status"] = verdict["rel_err"], "ok" if verdict["passed"] else "failed_validation"
    return row


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["status"] != "ok", r.get("time_ms", float("inf"))))


def _print_rows(rows: list[dict], problem: Problem, target: Target) -> None:
    timed = [r for r in rows if "time_ms" in r]
    unit = "interpreter ms" if target.backend == "interpreter" else "time ms"
    view = table("kernel", unit, "TFLOP/s", "GB/s", "padded", "status", "rel_err")
    for row in timed:
        rel = f"{row['rel_err']:.2e}" if "rel_err" in row else "-"
        view.add_row(text(row["kernel"], style="bold" if row["kernel"].startswith(VENDORS) else ""),
                     text(f"{row['time_ms']:.4f}"), text(f"{row['tflops']:.4g}"), text(f"{row['gbps']:.4g}"),
                     text("yes" if row["padded"] else ""), text(row["status"]), text(rel))
    show_table(f"{problem.describe()} on {target.describe()}: {len(timed)} timed, fastest first", view)
    for row in rows:
        if row["status"] == "runtime_error":
            note(f"{row['kernel']}: {row['reason']}")
    unsupported = sum(r["status"] == "unsupported" for r in rows)
    if unsupported:
        note(f"{unsupported} built kernel(s) cannot run this problem (see --json for reasons)")


def write_csv(path: Path, rows: list[dict], problem: Problem, target: Target) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=("problem", "device", "backend") + CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({"problem": problem.signature(), "device": target.name, "backend": target.backend,
                             **{c: row.get(c, "") for c in CSV_COLUMNS}})


VendorOpt = Annotated[bool, typer.Option("--vendor", help="add a row of the vendor library: torch.matmul "
                                       "(cuBLAS) or cuDNN (GPU only)")]
ValidateOpt = Annotated[bool, typer.Option("--validate",
                                           help="check each output against a float64 reference")]
CsvOpt = Annotated[Path | None, typer.Option("--csv", help="also write the rows to this CSV file",
                                             show_default=False)]


@profile_app.command("gemm", context_settings={"ignore_unknown_options": True})
def profile_gemm(
    m: MArg, n: NArg, k: KArg, batch: BatchOpt = 1, dtype: DTypeOpt = None, layout: LayoutOpt = None,
    activation: ActivationOpt = None, bias: BiasOpt = None, num_d: NumDOpt = None, with_c: WithCOpt = None,
    out_dtype: OutDTypeOpt = None, preset: PresetOpt = None, config: ConfigOpt = None,
    gpu_target: TargetOpt = None, jobs: WorkersOpt = None, vendor: VendorOpt = False,
    validate: ValidateOpt = False, csv_path: CsvOpt = None, json_out: JsonOpt = False,
) -> None:
    """Time every built instance that can run M x N x K (directly or on padded copies), fastest first."""
    make = gemm_problem_maker(m, n, k, batch, dtype, layout, activation, bias, num_d, with_c, out_dtype)
    profile_problem(make, preset, config, gpu_target, jobs, vendor, validate, csv_path, json_out)


@profile_app.command("conv", context_settings={"ignore_unknown_options": True})
@conv_problem_command
def profile_conv(
    options: ConvOptions, preset: ConvPresetOpt = None, config: ConfigOpt = None,
    gpu_target: TargetOpt = None, jobs: WorkersOpt = None, vendor: VendorOpt = False,
    validate: ValidateOpt = False, csv_path: CsvOpt = None, json_out: JsonOpt = False,
) -> None:
    """Time every built instance that can run the convolution, fastest first (--vendor: and cuDNN)."""
    profile_problem(options.problem, preset, config, gpu_target, jobs, vendor, validate, csv_path, json_out)


def profile_problem(make_problem: Callable[[Any], Problem], preset: str | None, config: str | None,
                    gpu_target: str | None, jobs: int | None, vendor: bool, validate: bool,
                    csv_path: Path | None, json_out: bool) -> None:
    """profile gemm|conv: build, time every kernel that runs the problem (and the vendor's), report."""
    from tiledispatch.cli.registries import prepared

    problem, registry = prepared(make_problem, preset=preset, config=config, kernel=None,
                                 gpu_target=gpu_target, jobs=jobs, quiet=json_out)
    target = pick_target(registry)
    notice = interpreter_notice(target, problem)
    if notice and not json_out:
        note(notice)
    args = make_inputs(problem, target.device)
    expected = reference_of(problem, args) if validate else None
    plans = plans_by_kernel(registry, problem)
    rows = [profile_kernel(kern, plans.get(kern.name), problem, args, target, expected)
            for kern in registry.kernels if kern.built]
    vendor_row = profile_vendor(problem, args, target, expected) if vendor else None
    rows = _sorted(rows + ([vendor_row] if vendor_row else []))
    if csv_path is not None:
        write_csv(csv_path, rows, problem, target)
    if json_out:
        emit_json({"problem": problem.to_dict(), "device": target.name, "backend": target.backend,
                   "rows": rows})
    else:
        _print_rows(rows, problem, target)
        if csv_path is not None:
            note(f"wrote {len(rows)} rows to {csv_path}")


def register(app: typer.Typer) -> None:
    app.add_typer(profile_app, name="profile")
