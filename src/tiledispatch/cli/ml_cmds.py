"""`tiledispatch train` (a cost model from a sweep dataset) and `tiledispatch validate` (the model on the
problems held out from its training, against the `rules` strategy and the vendor library)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from tiledispatch.cli.output import emit_json, note, out_console, show_table, table, text
from tiledispatch.cli.problem_args import JsonOpt
from tiledispatch.errors import BadInput, bad_choice

KIND_CHOICES = ("auto", "regressor", "ranker")
STRATEGY_LABELS = {"model": "model top-1", "model_top5": "model top-5 (confirm)", "rules": "rules top-1",
                   "rules_top5": "rules top-5", "vendor": "vendor (best kernel / vendor)"}


def _pct(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{100 * value:.1f}%"


def train_cmd(
    data: Annotated[Path, typer.Option("--data", help="dataset directory (tiledispatch sweep --out)")],
    out: Annotated[Path, typer.Option("--out", help="model directory to write (model.txt.gz + meta.json)")],
    holdout: Annotated[float, typer.Option("--holdout", help="share of the problems held out from training "
                                                             "(split by problem)")] = 0.2,
    seed: Annotated[int, typer.Option("--seed", help="seed of the hold-out split")] = 0,
    kind: Annotated[str, typer.Option("--kind", help="auto: cross-validate both kinds, keep the better; "
                                                     "or regressor | ranker")] = "auto",
    threads: Annotated[int | None, typer.Option("--threads", help="LightGBM threads (default 1)")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Train a LightGBM cost model on a sweep dataset: CV grouped by problem, held-out problems kept out."""
    from tiledispatch.ml.model import KINDS
    from tiledispatch.ml.train import train

    if kind not in KIND_CHOICES:
        raise bad_choice(BadInput, "kind", kind, KIND_CHOICES)
    if threads is not None and threads < 1:
        raise BadInput(f"--threads {threads} must be >= 1", field="threads")
    kinds = KINDS if kind == "auto" else (kind,)
    report = train(data, out, holdout=holdout, seed=seed, kinds=kinds, num_threads=threads)
    if json_out:
        emit_json(report)
        return
    console = out_console()
    console.print(text(f"model {report['out']}: {report['kind']} for {report['arch']} {report['op']} "
                       f"{report['direction']} {report['dtype']}"))
    console.print(text(f"trained on {report['rows']} rows of {report['problems']} problems; "
                       f"{report['holdout_problems']} problems held out; {report['features']} features; "
                       f"{report['seconds']:.1f} s"))
    rows = table("kind", "folds #", "trees #", "CV mean eff", "CV P10 eff", "chosen")
    for name, cv in report["cv"].items():
        rows.add_row(text(name), text(len(cv["folds"])), text(cv["rounds"]), text(_pct(cv["mean"])),
                     text(_pct(cv["p10"])), text("yes" if name == report["kind"] else ""))
    show_table("grouped cross-validation (top-1 efficiency per fold, mean over folds)", rows)


def validate_cmd(
    model: Annotated[Path, typer.Option("--model", help="model directory (tiledispatch train --out)")],
    data: Annotated[Path, typer.Option("--data", help="dataset directory holding the held-out problems")],
    plot: Annotated[Path | None, typer.Option("--plot", help="write the efficiency CDF (model vs rules) to "
                                                           "this PNG file", show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Efficiency of the model's picks on its held-out problems, against rules and the vendor library."""
    from tiledispatch.ml.validate import validate

    report = validate(model, data, plot=plot)
    if json_out:
        emit_json(report)
        return
    m = report["model"]
    console = out_console()
    what = f"{m['kind']} for {m['arch']} {m['op']} {m['direction']} {m['dtype']}"
    console.print(text(f"model {m['dir']}: {what}"))
    console.print(text(f"{report['problems']} held-out problems, "
                       f"{report['candidates']['mean']:.1f} ok kernels each on average"))
    if not report["data"]["same_as_training"]:
        note("the data differs from the dataset the model was trained on (its hash)")
    _strategies(report)
    _worst(report)
    if report["plot"]:
        note(f"wrote the efficiency CDF to {report['plot']}")


def _strategies(report: dict[str, Any]) -> None:
    rows = table("strategy", "problems #", "mean", "median", "P10", "P90", "best-kernel hit")
    for key, stats in report["strategies"].items():
        rows.add_row(text(STRATEGY_LABELS.get(key, key)), text(stats["count"]), text(_pct(stats["mean"])),
                     text(_pct(stats["median"])), text(_pct(stats["p10"])), text(_pct(stats["p90"])),
                     text(_pct(stats.get("hit"))))
    for column in rows.columns[2:]:
        column.justify = "right"
    show_table("efficiency = best time / time of the pick (vendor: best kernel / vendor time)", rows)


def _worst(report: dict[str, Any]) -> None:
    """Problem, picked kernel and efficiencies (tags and times are in --json)."""
    rows = table("problem", "picked kernel", "eff", "top-5 eff")
    for w in report["worst"]:
        rows.add_row(text(w["problem"]), text(w["picked"]), text(_pct(w["efficiency"])),
                     text(_pct(w["efficiency_top5"])))
    rows.columns[1].no_wrap = True
    for column in rows.columns[2:]:
        column.justify = "right"
    show_table(f"the {len(report['worst'])} problems the model picks worst", rows)


def register(app: typer.Typer) -> None:
    app.command("train")(train_cmd)
    app.command("validate")(validate_cmd)
