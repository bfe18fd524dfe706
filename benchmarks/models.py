"""Whole-model benchmark: a training step (forward + backward, no optimizer) and inference of public model
definitions (timm / torchvision, no weights) and the project's X3D-M, stock vs tiledispatch.nn.convert-ed,
eager and under torch.compile(mode="reduce-overhead"), bf16 channels-last, batch 32 (video 8), one process.

The models: model_catalog.py. Per model, phase and variant: wall time per step (median of --steps
synchronized steps), GPU time per step (profiler kernel time by kernel class: model_measure.py), speedups,
layers taken / left, numerics vs fp32 (end to end and per layer). Eager runs (and numerics) of every
model come first, then compiled passes; failures are recorded and the run goes on; the JSON is rewritten
after each model; --budget-s stops starting new work.

--loss-steps N: first a loss comparison (model_loss.py); --vendor-off-gpu: also a converted copy with vendor
plans off (model_vendor_off.py); --top-kernels N: N kernels per variant in the JSON (default 8); --aa: also a
second stock copy timed in the same rounds (the A/A ratio: how far from 1.00 noise alone moves a speedup).

Usage (GPU):  python benchmarks/models.py [--models resnet50,x3d_m] [--steps 10] [--modes eager,compiled]
                  [--phases train,infer] [--no-numerics] [--budget-s 400] [--out PATH]
              python benchmarks/models.py --loss-only --loss-steps 100 [--loss-model resnet18]
              python benchmarks/models.py --merge A.json B.json ... --out PATH
Usage (CPU):  python benchmarks/models.py --smoke   (tiny, fp32, interpreter, small installed registries)
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:   # benchmarks/protocol.py, however this was started
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import model_loss
from model_catalog import COMPILE_ORDER, LOSS_MODELS, MODELS, SMOKE_MODELS, ModelSpec, build
import model_measure as measure
import model_registries as registries
import model_report as report
import model_vendor_off as vendor_off
from protocol import environment, gpu_slug

from tiledispatch import settings as td_settings

ROOT = Path(__file__).resolve().parents[1]
VARIANTS, MODES = report.VARIANTS, report.MODES
PHASES = ("train", "infer")
LAYER_LIMIT = 1e-2   # per-layer rel. err. of y / dx / dw vs fp32 (issue 35's acceptance for bf16)
SKIPPED = "time budget (--budget-s) spent"
CHECK_LIMIT = 400    # eager: converted steps at most, before timing, for its StepCheck to decide


@dataclasses.dataclass(frozen=True)
class Settings:
    device: str = "cuda"
    dtype: str = "bfloat16"
    batch: int = 32
    video_batch: int = 8
    steps: int = 10
    rounds: int = 5              # alternating rounds the steps are split into (--rounds)
    warmup: int = 70             # eager: layer plans settle (~13 steps), then the step check
                                 # (2 * (WARMUP + ROUNDS) * BLOCK = 48 steps, nn/step_check.py)
    compiled_warmup: int = 5     # compile, cudagraph-tree warm-up run, recording, replays
    profile_steps: int = 3
    top_kernels: int = 8         # kernels per variant kept in the JSON, by time (--top-kernels)
    modes: tuple[str, ...] = MODES
    compile_mode: str = "reduce-overhead"
    pipelined: bool = True       # also time --steps back-to-back steps (no sync between them)
    phases: tuple[str, ...] = PHASES
    numerics: bool = True
    budget_s: float = 400.0
    smoke: bool = False
    loss_steps: int = 0          # > 0: the loss comparison of loss_model first (model_loss.py)
    loss_model: str = "resnet18"
    loss_batches: int = 4        # fixed random batches the loss comparison cycles through
    loss_autocast: bool = True   # fp32 weights + torch.autocast(dtype) (CUDA); False: weights in dtype
    cudnn_benchmark: bool = True   # cuDNN picks its algorithms by timing them (as benchmarks/conv.py runs it)
    interleave: bool = True      # stock and converted side by side, timed in alternating rounds
    vendor_off_gpu: bool = False  # eager: also a converted copy with vendor plans off (model_vendor_off.py)
    aa: bool = False             # also a second stock copy in the same rounds (the run's noise: A/A ratio)


# -- steps --------------------------------------------------------------------------------------------------
def _loss(out: Any, labels: Any) -> Any:
    import torch.nn.functional as F

    return F.cross_entropy(out.float(), labels)


def make_step(phase: str, runner: Any, model: Any, x: Any, labels: Any, compiled: bool) -> Any:
    """One training step (zero grads, forward, loss, backward) or one inference forward."""
    import torch

    mark = torch.compiler.cudagraph_mark_step_begin if compiled else (lambda: None)
    if phase == "train":
        def train() -> None:
            mark()
            model.zero_grad(set_to_none=True)
            _loss(runner(x), labels).backward()
        return train

    def infer() -> None:
        with torch.no_grad():
            mark()
            runner(x)
    return infer


def _reset_compiled() -> None:
    import torch

    torch._dynamo.reset()
    trees = getattr(getattr(torch._inductor, "cudagraph_trees", None), "reset_cudagraph_trees", None)
    if trees is not None:
        trees()


# -- one model ----------------------------------------------------------------------------------------------
class Budget:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def spent(self) -> bool:
        return time.monotonic() > self.deadline


def _error(exc: BaseException) -> dict[str, str]:
    return {"error": f"{type(exc).__name__}: {str(exc)[:2000]}",
            "traceback": traceback.format_exc(limit=-6)[-4000:]}


def _inputs(spec: ModelSpec, s: Settings, device: Any, dtype: Any, num_classes: int, seed: int = 0
            ) -> tuple[Any, Any]:
    import torch

    batch = s.video_batch if spec.video else s.batch
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((batch, *spec.input), generator=gen)
    fmt = torch.channels_last_3d if spec.video else torch.channels_last
    labels = torch.randint(0, num_classes, (batch,), generator=gen)
    return x.to(device=device, dtype=dtype).contiguous(memory_format=fmt), labels.to(device)


def _prepare(base: Any, variant: str, device: Any, dtype: Any, video: bool) -> tuple[Any, Any]:
    """A copy of the model on the device in dtype, channels-last; converted for 'converted' (its report)."""
    import torch

    import tiledispatch.nn as tdnn

    fmt = torch.channels_last_3d if video else torch.channels_last
    model = copy.deepcopy(base).to(device=device, dtype=dtype).to(memory_format=fmt)
    return model, tdnn.convert(model) if variant == "converted" else None


def _layers(converted: Any) -> dict[str, Any]:
    """Layers convert took and left (by reason) from its ConvertReport."""
    reasons: dict[str, list[str]] = {}
    for layer in converted.left:
        reasons.setdefault(layer.reason, []).append(layer.name)
    return {"taken": len(converted.taken), "left": len(converted.left),
            "left_reasons": {r: {"count": len(names), "layers": names[:8]} for r, names in reasons.items()}}


def measure_variants(row: dict, spec: ModelSpec, base: Any, s: Settings, budget: Budget, mode: str,
                     phases: tuple[str, ...], variants: tuple[str, ...] = VARIANTS) -> None:
    """`variants` (stock and converted by default) in `mode`, side by side on the device, timed in
    alternation per phase (measure.interleaved_wall_times) into row['runs'][phase][f'{variant}_{mode}'].
    Timed one after the other in one process, the second variant ran 5-10% slower on the host than the same
    variant timed first (compiled ConvNeXt-nano inference, H200): alternation gives both the same host.
    --no-interleave passes one variant at a time."""
    import torch

    device, dtype = torch.device(s.device), getattr(torch, s.dtype)
    models, report = {}, None
    for variant in variants:
        models[variant], converted = _prepare(base, variant, device, dtype, spec.video)
        if converted is not None:
            row["layers"], report = _layers(converted), converted
    runners = {v: m if mode == "eager" else torch.compile(m, mode=s.compile_mode) for v, m in models.items()}
    x, labels = _inputs(spec, s, device, dtype, row["num_classes"])
    try:
        for phase in phases:
            _measure_phase(row, phase, models, runners, x, labels, s, budget, mode, report)
    finally:
        if mode == "compiled":
            _reset_compiled()


def _measure_phase(row: dict, phase: str, models: dict, runners: dict, x: Any, labels: Any, s: Settings,
                   budget: Budget, mode: str, report: Any) -> None:
    """One phase of measure_variants: compiled variants are warmed up one at a time first (their compile
    counts and first-call times kept apart), then timed in alternation."""
    import torch

    device = torch.device(s.device)
    slot = row["runs"].setdefault(phase, {})
    if budget.spent():
        slot.update({f"{v}_{mode}": {"skipped": SKIPPED} for v in models})
        return
    started = time.perf_counter()
    try:
        steps, warm = {}, {}
        for variant, model in models.items():
            model.train() if phase == "train" else model.eval()
            steps[variant] = make_step(phase, runners[variant], model, x, labels, mode == "compiled")
            if mode == "compiled":
                before = _compile_counts()
                first_s = measure.first_and_warm(steps[variant], device, s.compiled_warmup)
                warm[variant] = {"first_call_s": first_s,
                                 **{k: v - before[k] for k, v in _compile_counts().items()}}
        check = report.step_check if mode == "eager" and report is not None else None
        if check is not None and "converted" in steps:   # timed steps run what the check decided
            settled = measure.run_until(steps["converted"], device, check.settled, CHECK_LIMIT)
            row.setdefault("check_steps", {})[phase] = settled
        timed = measure.interleaved_wall_times(steps, device, 1 if warm else s.warmup, s.steps,
                                               rounds=s.rounds, pipelined=s.pipelined)
        for variant, step in steps.items():
            result = {**timed[variant], **warm.get(variant, {})}
            if device.type == "cuda":
                result.update(measure.gpu_time(step, device, s.profile_steps, s.top_kernels))
            result["seconds"] = time.perf_counter() - started
            slot[f"{variant}_{mode}"] = result
            print(f"  {phase:5s} {variant + '_' + mode:18s} {_brief(result)}", flush=True)
        if mode == "eager" and report is not None and report.step_check is not None:
            row.setdefault("step_check", {})[phase] = report.step_check.summary()
            print(f"  {phase:5s} step check: {row['step_check'][phase]}", flush=True)
    except Exception as exc:  # noqa: BLE001 - a model / compile failure is a result: recorded
        slot.update({f"{v}_{mode}": {**_error(exc), "seconds": time.perf_counter() - started}
                     for v in models})
        print(f"  {phase:5s} ERROR {_error(exc)['error'][:200]}", flush=True)


def _compile_counts() -> dict[str, int]:
    """torch.compile's running counts: graph breaks, and compiled graphs Inductor ran without CUDA graphs
    under reduce-overhead (a skip leaves the host cost in the step: the reason is in the log)."""
    from torch._dynamo.utils import counters

    return {"graph_breaks": sum(counters["graph_break"].values()),
            "cudagraph_skips": counters["inductor"]["cudagraph_skips"]}


def _brief(result: dict) -> str:
    if "error" in result:
        return "ERROR " + result["error"][:200]
    if "skipped" in result:
        return "skipped: " + result["skipped"]
    gpu = result.get("gpu_ms")
    compiled = (f", {result['graph_breaks']} graph breaks, {result['cudagraph_skips']} cudagraph skips"
                if "cudagraph_skips" in result else "")
    counters = result.get("per_step_counters", {})
    held = "".join(f", {counters[k]:g} {k}/step" for k in ("num_device_alloc", "num_alloc_retries", "gc_gen2")
                   if counters.get(k))
    return (f"{result['wall_ms']:8.2f} ms wall" + (f", {gpu:8.2f} ms GPU" if gpu else "")
            + f" (first call {result['first_call_s']:.1f} s, {result['seconds']:.0f} s{compiled}{held})")


def check_numerics(row: dict, spec: ModelSpec, base: Any, s: Settings) -> None:
    """End-to-end (output, first-conv dw) and per-layer (y, dx, dw) errors vs fp32, stock and converted."""
    import torch

    import tiledispatch.nn as tdnn

    device, dtype = torch.device(s.device), getattr(torch, s.dtype)
    flags = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False   # a true fp32 reference
    try:
        ref, _ = _prepare(base, "stock", device, torch.float32, spec.video)
        stock, _ = _prepare(base, "stock", device, dtype, spec.video)
        converted, _ = _prepare(base, "converted", device, dtype, spec.video)
        x, labels = _inputs(spec, s, device, torch.float32, row["num_classes"])
        models = {"ref": ref, "stock": stock, "converted": converted}
        row["numerics"] = {"end_to_end": measure.end_to_end(models, x, labels, _loss)}
        del ref, converted
        row["numerics"]["per_layer"] = measure.per_layer(stock, x, tdnn.convert, LAYER_LIMIT)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = flags


def measure_model(row: dict[str, Any], spec: ModelSpec, s: Settings, budget: Budget, mode: str,
                  phases: tuple[str, ...], numerics: bool) -> None:
    """One pass over a model: stock and converted in `mode` for `phases`, then (if asked) the numerics."""
    import torch

    started = time.perf_counter()
    torch.manual_seed(0)   # the same weights in every pass
    try:
        base, source = build(spec)
    except Exception as exc:  # noqa: BLE001 - recorded; the other models still run
        row.update(_error(exc))
        return
    batch = s.video_batch if spec.video else s.batch
    row.update(source=source, input_shape=[batch, *spec.input], num_classes=_num_classes(base),
               params_m=sum(p.numel() for p in base.parameters()) / 1e6)
    paired = s.interleave and mode in ("eager", "compiled")
    if paired:
        try:
            measure_variants(row, spec, base, s, budget, mode, phases,
                             (*VARIANTS, report.AA) if s.aa else VARIANTS)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: recorded
            row.setdefault("errors", {})[mode] = _error(exc)
            print(f"  {mode}: ERROR {_error(exc)['error'][:200]}", flush=True)
        _free(s)
    if mode == "eager" and s.vendor_off_gpu and not budget.spent():
        measure_vendor_off(row, spec, base, s, phases)
        _free(s)
    for variant in VARIANTS if not paired and mode != "numerics" else ():
        try:
            measure_variants(row, spec, base, s, budget, mode, phases, (variant,))
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: recorded per variant
            row.setdefault("errors", {})[f"{variant}_{mode}"] = _error(exc)
            print(f"  {variant}: ERROR {_error(exc)['error'][:200]}", flush=True)
        _free(s)
    if numerics and not budget.spent():
        try:
            check_numerics(row, spec, base, s)
        except Exception as exc:  # noqa: BLE001 - recorded, as a timing failure is
            row["numerics"] = _error(exc)
        _free(s)
    row["speedups"] = report.speedups(row)
    row["seconds"] = row.get("seconds", 0.0) + time.perf_counter() - started


def measure_vendor_off(row: dict, spec: ModelSpec, base: Any, s: Settings, phases: tuple[str, ...]) -> None:
    """A fresh converted copy with vendor plans off, per phase (model_vendor_off.py); failures recorded."""
    import torch

    device, dtype = torch.device(s.device), getattr(torch, s.dtype)
    try:
        model, _ = _prepare(base, "stock", device, dtype, spec.video)
        inputs = _inputs(spec, s, device, dtype, row["num_classes"])
        vendor_off.measure(row, model, inputs, phases, s, make_step, measure,
                           registries.install_smoke if s.smoke else None)
    except Exception as exc:  # noqa: BLE001 - recorded; the run goes on
        for phase in phases:
            row["runs"].setdefault(phase, {}).setdefault(vendor_off.KEY, _error(exc))
        print(f"  vendor off: ERROR {_error(exc)['error'][:200]}", flush=True)


def _num_classes(model: Any) -> int:
    import torch

    head = getattr(model, "num_classes", None) or next(m.out_features for m in reversed(list(model.modules()))
                                                       if isinstance(m, torch.nn.Linear))
    return int(head)


def loss_comparison(spec: ModelSpec, s: Settings) -> dict[str, Any]:
    """Stock and converted copies of one model (and an fp32 one unless the run is fp32) trained s.loss_steps
    SGD steps from the same weights on the same s.loss_batches fixed random batches: curves and verdict."""
    import torch

    device = torch.device(s.device)
    autocast = getattr(torch, s.dtype) if s.loss_autocast and device.type == "cuda" else None
    dtype = torch.float32 if autocast is not None else getattr(torch, s.dtype)
    started = time.perf_counter()
    torch.manual_seed(0)
    base, source = build(spec)
    classes = _num_classes(base)
    batches = [_inputs(spec, s, device, dtype, classes, seed) for seed in range(s.loss_batches)]
    variants = [("stock", "stock", dtype, autocast), ("converted", "converted", dtype, autocast)]
    if dtype != torch.float32 or autocast is not None:
        variants.append(("fp32", "stock", torch.float32, None))
    curves: dict[str, list[float]] = {}
    layers = None
    for name, variant, model_dtype, cast in variants:
        model, converted = _prepare(base, variant, device, model_dtype, spec.video)
        layers = _layers(converted) if converted is not None else layers
        measure.deterministic_train(model)
        data = [(x.to(model_dtype), labels) for x, labels in batches]
        curves[name] = model_loss.train_curve(model, data, s.loss_steps, _loss, autocast=cast)
        print(f"  loss {name:9s} first {curves[name][0]:.4f} last {curves[name][-1]:.4f}", flush=True)
        del model
        _free(s)
    precision = f"autocast {s.dtype}, fp32 weights" if autocast is not None else f"{s.dtype} weights"
    batch = s.video_batch if spec.video else s.batch
    return {"model": spec.name, "source": source, "input_shape": [batch, *spec.input], "layers": layers,
            "batches": s.loss_batches, "precision": precision,
            "optimizer": f"SGD(lr={model_loss.LR}, momentum={model_loss.MOMENTUM})",
            **model_loss.compare(curves), "seconds": time.perf_counter() - started}


def _free(s: Settings) -> None:
    import gc

    import torch

    gc.collect()
    if s.device == "cuda":
        torch.cuda.empty_cache()


# -- the run ------------------------------------------------------------------------------------------------
def run(specs: list[ModelSpec], s: Settings, out: Path, argv: list[str], built: dict | None = None
        ) -> dict[str, Any]:
    import torch

    device = torch.device(s.device)
    env = environment(device)
    for name in ("timm", "torchvision"):
        try:
            env[name] = __import__(name).__version__
        except ImportError:
            env[name] = None
    env["cudnn"] = torch.backends.cudnn.version() if device.type == "cuda" else None
    torch.backends.cudnn.benchmark = s.cudnn_benchmark
    data = {"benchmark": "models", "mode": "smoke" if s.smoke else "gpu", **env, "argv": argv,
            "settings": dataclasses.asdict(s),
            "env": td_settings.snapshot(), "prebuild": built, "models": []}
    budget = Budget(s.budget_s)
    if s.loss_steps:
        print(f"[loss] {s.loss_model}: {s.loss_steps} steps, stock vs converted", flush=True)
        try:
            data["loss"] = loss_comparison(loss_spec(s.loss_model), s)
        except Exception as exc:  # noqa: BLE001 - recorded; the timing passes still run
            data["loss"] = {"model": s.loss_model, **_error(exc)}
            print(f"  loss: ERROR {data['loss']['error'][:200]}", flush=True)
        _free(s)
        report.write(data, out)
    rows: dict[str, dict[str, Any]] = {spec.name: {"model": spec.name, "group": spec.group, "runs": {}}
                                       for spec in specs}
    data["models"] = list(rows.values())
    plan = passes(s)
    for number, (mode, phases) in enumerate(plan):
        order = specs if mode == "eager" else sorted(specs, key=lambda m: COMPILE_ORDER.index(m.name)
                                                      if m.name in COMPILE_ORDER else len(COMPILE_ORDER))
        for i, spec in enumerate(order):
            row = rows[spec.name]
            print(f"[pass {number + 1}/{len(plan)}: {mode} {'+'.join(phases)}] [{i + 1}/{len(order)}] "
                  f"{spec.name}", flush=True)
            if "error" in row:
                continue   # the model did not build in an earlier pass
            if budget.spent():
                for phase in phases:
                    for variant in VARIANTS:
                        row["runs"].setdefault(phase, {})[f"{variant}_{mode}"] = {"skipped": SKIPPED}
                continue
            measure_model(row, spec, s, budget, mode, phases, s.numerics and number == 0)
            report.write(data, out)
    report.write(data, out)
    return data


def loss_spec(name: str) -> ModelSpec:
    """The ModelSpec --loss-model names (any benchmarked, loss-only or smoke model)."""
    return {m.name: m for m in (*MODELS, *LOSS_MODELS, *SMOKE_MODELS)}[name]


def passes(s: Settings) -> list[tuple[str, tuple[str, ...]]]:
    """The order of the work: eager (both phases, and the numerics) for every model first, then compiled
    training steps, then compiled inference, so a run cut by --budget-s keeps the most useful numbers."""
    if s.modes == ("numerics",):
        return [("numerics", ())]
    plan = [("eager", s.phases)] if "eager" in s.modes else []
    return plan + ([("compiled", (phase,)) for phase in s.phases] if "compiled" in s.modes else [])


def settings_from(args: argparse.Namespace) -> Settings:
    loss = {"loss_autocast": not args.loss_no_autocast, "cudnn_benchmark": not args.no_cudnn_benchmark,
            "interleave": not args.no_interleave, "vendor_off_gpu": args.vendor_off_gpu,
            "top_kernels": args.top_kernels, "aa": args.aa, "rounds": args.rounds}
    if args.smoke:
        return Settings(device="cpu", dtype="float32", batch=1, video_batch=1, steps=args.steps or 2,
                        warmup=1, compiled_warmup=2, modes=MODES if args.smoke_compile else ("eager",),
                        compile_mode="default", pipelined=False, phases=tuple(args.phases.split(",")),
                        numerics=not args.no_numerics, budget_s=args.budget_s or 3600.0, smoke=True,
                        loss_steps=3 if args.loss_steps is None else args.loss_steps,
                        loss_model=args.loss_model or "smoke_cnn", **loss)
    modes = ("eager",) if args.no_compile else tuple(args.modes.split(","))
    return Settings(steps=args.steps or 10, modes=modes, phases=tuple(args.phases.split(",")),
                    numerics=not args.no_numerics, budget_s=args.budget_s or 400.0,
                    loss_steps=args.loss_steps or 0, loss_model=args.loss_model or "resnet18", **loss)


def build_parser() -> argparse.ArgumentParser:
    """The command line (settings_from reads what it parses)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help=f"comma-separated subset of: {', '.join(m.name for m in MODELS)}")
    parser.add_argument("--steps", type=int, help="timed steps per measurement (default 10; smoke 2)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="alternating rounds the timed steps of the variants are split into (default 5)")
    parser.add_argument("--no-compile", action="store_true", help="eager only (same as --modes eager)")
    parser.add_argument("--modes", default="eager,compiled",
                        help="eager, compiled or both; 'numerics' alone: the numerics, no timing")
    parser.add_argument("--phases", default="train,infer", help="train, infer or both")
    parser.add_argument("--no-numerics", action="store_true")
    parser.add_argument("--budget-s", type=float,
                        help="start no new measurement after this many seconds (default 400; smoke 3600)")
    parser.add_argument("--out", type=Path, help="JSON path (default benchmarks/results/models_<gpu>.json)")
    parser.add_argument("--smoke", action="store_true", help="CPU end-to-end check (tiny, fp32, interpreter)")
    parser.add_argument("--smoke-compile", action="store_true", help="also torch.compile in --smoke (slow)")
    parser.add_argument("--no-prebuild", action="store_true",
                        help="build the default registries on first use only")
    parser.add_argument("--loss-steps", type=int,
                        help="first train stock and converted copies of --loss-model this many SGD steps on "
                             "fixed random data and record both loss curves (default 0; smoke 3)")
    parser.add_argument("--loss-model", help="the model of --loss-steps (default resnet18; smoke smoke_cnn; "
                                             f"also: {', '.join(m.name for m in LOSS_MODELS)})")
    parser.add_argument("--loss-only", action="store_true", help="the loss comparison alone (no timing)")
    parser.add_argument("--loss-no-autocast", action="store_true",
                        help="loss comparison with bf16 weights (default: fp32 weights under autocast bf16)")
    parser.add_argument("--no-interleave", action="store_true",
                        help="time stock, then converted (default: side by side, alternating rounds)")
    parser.add_argument("--no-cudnn-benchmark", action="store_true",
                        help="leave torch.backends.cudnn.benchmark off (default: on, for both variants)")
    parser.add_argument("--vendor-off-gpu", action="store_true",
                        help="eager: also time a fresh converted copy with vendor plans off "
                             "(TILEDISPATCH_VENDOR=0, no StepCheck), reported beside the converted GPU time")
    parser.add_argument("--aa", action="store_true",
                        help="also time a second stock copy in the same alternating rounds: stock / stock "
                             "again (the A/A ratio) is the run's noise next to each speedup")
    parser.add_argument("--top-kernels", type=int, default=8,
                        help="kernels per variant and phase kept in the JSON, by GPU time (default 8; "
                             "a large N lists every kernel, to compare stock and converted by name)")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                        help="merge result files of one GPU into --out (per model and mode, the first "
                             "measured stock / converted pair)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.top_kernels < 1:
        parser.error(f"--top-kernels {args.top_kernels}: give a count >= 1")
    if args.rounds < 1 or (args.steps is not None and args.rounds > args.steps):
        parser.error(f"--rounds {args.rounds}: give 1 to --steps rounds")
    if any(p not in PHASES for p in args.phases.split(",")):
        parser.error(f"--phases {args.phases!r}: choose from {', '.join(PHASES)}")
    if args.modes != "numerics" and any(m not in MODES for m in args.modes.split(",")):
        parser.error(f"--modes {args.modes!r}: choose from {', '.join(MODES)}")
    if args.merge:
        data = report.merge(args.merge, args.out or args.merge[0])
        print(report.markdown(data), flush=True)
        return 0
    pool = SMOKE_MODELS if args.smoke else MODELS
    wanted = args.models.split(",") if args.models else [m.name for m in pool]
    unknown = [w for w in wanted if w not in {m.name for m in pool}]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(m.name for m in pool)}")
    s = settings_from(args)
    try:
        loss_spec(s.loss_model)
    except KeyError:
        parser.error(f"unknown --loss-model {s.loss_model!r}")
    if args.loss_only and not s.loss_steps:
        parser.error("--loss-only needs --loss-steps N (N > 0)")
    if not args.smoke:
        import torch

        if not torch.cuda.is_available():
            parser.error("no CUDA device: run on a GPU, or --smoke on CPU")
    else:
        registries.install_smoke()
    out = args.out or ROOT / "benchmarks" / "results" / (
        "models_cpu_smoke.json" if args.smoke else f"models_{gpu_slug(_gpu_name())}.json")
    specs = [] if args.loss_only else [m for m in pool if m.name in wanted]
    needs = specs + ([loss_spec(s.loss_model)] if s.loss_steps else [])
    ndims = sorted({3 if spec.video else 2 for spec in needs})
    built = None if args.smoke or args.no_prebuild else registries.prebuild(ndims, s.dtype)
    data = run(specs, s, out, sys.argv if argv is None else argv, built)
    print(report.markdown(data), flush=True)
    print(f"wrote {out} and {out.with_suffix('.md')}", flush=True)
    return 0


def _gpu_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)


if __name__ == "__main__":
    sys.exit(main())
