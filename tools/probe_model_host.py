"""Where the host time of a converted model's step goes (GPU): wall time of stock and converted steps
(benchmarks/models.py's models and steps), a cProfile of converted steps (top functions by own and by
cumulative time), and what each converted module's layer plan settled on.

Usage (GPU):  python tools/probe_model_host.py convnext_nano mobilenet_v2 [--phase train] [--steps 20]
"""
from __future__ import annotations

import argparse
import cProfile
import collections
import io
import pstats
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import model_measure as measure  # noqa: E402
import models as bench  # noqa: E402


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


def probe(name: str, phase: str, steps: int, top: int) -> None:
    import torch

    spec = next(m for m in bench.MODELS if m.name == name)
    s = bench.Settings()
    torch.manual_seed(0)
    base, _ = bench.build(spec)
    device, dtype = torch.device("cuda"), torch.bfloat16
    walls = {}
    for variant in ("stock", "stock td-weights", "converted", "stock again"):
        model, _ = bench._prepare(base, variant.split()[0], device, dtype, spec.video)
        if variant == "stock td-weights":   # conv weights laid out as convert lays them
            from tiledispatch.ops.layout import as_channels_last

            for module in model.modules():
                if isinstance(module, torch.nn.modules.conv._ConvNd):
                    module.weight.data = as_channels_last(module.weight.data)
        x, labels = bench._inputs(spec, s, device, dtype, bench._num_classes(base))
        model.train() if phase == "train" else model.eval()
        step = bench.make_step(phase, model, model, x, labels, False)
        for _ in range(5):
            step()
        walls[variant] = _wall_ms(step, steps)
        gpu = measure.gpu_time(step, device, 3, top=12)
        print(f"== {name} {phase} {variant}: wall {walls[variant]:.2f} ms, GPU {gpu['gpu_ms']:.2f} ms, "
              f"{gpu['kernels_per_step']} kernels/step; by class (ms) "
              + ", ".join(f"{k} {v:.2f}" for k, v in gpu["by_class_ms"].items()))
        for k in gpu["top_kernels"]:
            print(f"    {k['ms']:7.3f} ms x{k['calls']:3d} {k['class']:16s} {k['name'][:110]}")
        if variant == "converted":
            profile = cProfile.Profile()
            torch.cuda.synchronize()
            profile.enable()
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
            profile.disable()
            for key in ("tottime", "cumulative"):
                text = io.StringIO()
                pstats.Stats(profile, stream=text).sort_stats(key).print_stats(top)
                print(f"== {name} {phase} converted: cProfile of {steps} steps by {key}")
                print(text.getvalue()[-12000:])
            for (cls, state), count in sorted(plan_summary(model).items()):
                print(f"  plan {cls:8s} x{count:3d}: {state}")
        del model
        torch.cuda.empty_cache()
    print(f"== {name} {phase}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in walls.items())
          + f" (converted {walls['stock'] / walls['converted']:.2f}x)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("models", nargs="+")
    parser.add_argument("--phase", default="train", choices=bench.PHASES)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=30)
    opts = parser.parse_args()
    import torch

    torch.backends.cudnn.benchmark = True
    for name in opts.models:
        probe(name, opts.phase, opts.steps, opts.top)


if __name__ == "__main__":
    main()
