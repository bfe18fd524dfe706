"""Where the host time of a converted model's step goes (GPU): wall time of stock and converted steps
(benchmarks/models.py's models and steps) in interleaved rounds, GPU time per kernel class, optionally a
cProfile of converted steps, and what each converted module's layer plan settled on (and why).

Usage (GPU):  python tools/probe_model_host.py convnext_nano mobilenet_v2 [--phase train,infer] [--top 25]
"""
from __future__ import annotations

import argparse
import cProfile
import collections
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import model_measure as measure  # noqa: E402
import models as bench  # noqa: E402

WARMUP = 15   # steps before timing: a converted layer's plan settles after 1 + 2 * layer_plan.SAMPLES calls


def _wall_ms(step, steps: int) -> float:
    import torch

    torch.cuda.synchronize()
    samples = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e3)
    return sorted(samples)[len(samples) // 2]


def plan_summary(model) -> dict:
    """Counts of converted modules by (class, where their plans settled), and every plan's summary."""
    counts: collections.Counter = collections.Counter()
    for name, module in model.named_modules():
        plans = getattr(module, "_td_plans", None)
        if plans is None:
            continue
        if not plans:
            counts[(type(module).__name__, "never called on td")] += 1
        for plan in plans.values():
            state = plan.stage if plan.stage != "settled" else "torch" if plan.on_torch else "td"
            counts[(type(module).__name__, state)] += 1
            print(f"  {name:40s} {state:6s} {plan.summary()}")
    return counts


def probe(name: str, phase: str, steps: int, rounds: int, profile_top: int) -> None:
    import torch

    spec = next(m for m in bench.MODELS if m.name == name)
    s = bench.Settings()
    torch.manual_seed(0)
    base, _ = bench.build(spec)
    device, dtype = torch.device("cuda"), torch.bfloat16
    import tiledispatch.nn as tdnn

    steps_of, models = {}, {}
    for variant in ("stock", "converted", "checked"):
        model, _ = bench._prepare(base, "stock", device, dtype, spec.video)
        report = None if variant == "stock" else tdnn.convert(model, step_check=variant == "checked")
        x, labels = bench._inputs(spec, s, device, dtype, bench._num_classes(base))
        model.train() if phase == "train" else model.eval()
        steps_of[variant] = bench.make_step(phase, model, model, x, labels, False)
        models[variant] = model
        for _ in range(WARMUP):   # converted: layer plans learn and sample, then settle
            steps_of[variant]()
        if report is not None and report.step_check is not None:   # on until the step check is done
            for extra in range(80):
                states = report.step_check.summary()
                if states and all(v["phase"] == "done" for v in states.values()):
                    break
                steps_of[variant]()
            trials = report.step_check.trials
            print(f"== {name} {phase} checked: done after {WARMUP} + {extra} steps: {states}; blocks (ms): "
                  + "; ".join(f"{mode}: " + ", ".join(f"{a[:5]} {1e3 * t:.1f}" for a, t in trial.blocks)
                              for mode, trial in trials.items()), flush=True)
    samples: dict[str, list[float]] = {v: [] for v in steps_of}
    for _ in range(rounds):   # interleaved: drifts of the host's speed hit both alike
        for variant, step in steps_of.items():
            samples[variant].append(_wall_ms(step, steps))
    walls = {v: statistics.median(t) for v, t in samples.items()}
    for variant, step in steps_of.items():
        gpu = measure.gpu_time(step, device, 3, top=8)
        print(f"== {name} {phase} {variant}: wall {walls[variant]:.2f} ms (rounds "
              f"{', '.join(f'{t:.2f}' for t in samples[variant])}), GPU {gpu['gpu_ms']:.2f} ms, "
              f"{gpu['kernels_per_step']} kernels/step; by class (ms) "
              + ", ".join(f"{k} {v:.2f}" for k, v in gpu["by_class_ms"].items()))
        for k in gpu["top_kernels"]:
            print(f"    {k['ms']:7.3f} ms x{k['calls']:3d} {k['class']:16s} {k['name'][:110]}")
    if profile_top:
        profile = cProfile.Profile()
        torch.cuda.synchronize()
        profile.enable()
        for _ in range(steps):
            steps_of["converted"]()
        torch.cuda.synchronize()
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(profile_top)
        print(f"== {name} {phase} converted: cProfile of {steps} steps by own time")
        print(text.getvalue()[-8000:])
    for (cls, state), count in sorted(plan_summary(models["converted"]).items()):
        print(f"  plan {cls:8s} x{count:3d}: {state}")
    print(f"== {name} {phase}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in walls.items())
          + f" (converted {walls['stock'] / walls['converted']:.2f}x)", flush=True)
    del models, steps_of
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="+")
    parser.add_argument("--phase", default="train", help="train, infer or both (comma-separated)")
    parser.add_argument("--steps", type=int, default=5, help="steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--top", type=int, default=0, help="cProfile converted steps, print the top N")
    opts = parser.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    for name in opts.models:
        for phase in opts.phase.split(","):
            probe(name, phase, opts.steps, opts.rounds, opts.top)


if __name__ == "__main__":
    main()
