"""Where the host time of a converted module's training step goes (GPU): cProfile of N steps of one layer
of benchmarks/module_overhead.py, stock and converted, top functions by own time.

Usage (GPU):  python tools/probe_module_host.py [--layer 0] [--steps 300] [--top 25]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import module_overhead as mo  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--top", type=int, default=25)
    opts = parser.parse_args()
    import torch

    stock, ours, _, x = mo.build(mo.LAYERS[opts.layer])   # the copy without the step check
    grad = torch.randn_like(stock(x))
    for name, module in (("stock", stock), ("converted", ours)):
        step = mo.calls(module, x, grad, "train")
        for _ in range(20):
            step()
        torch.cuda.synchronize()
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(opts.steps):
            step()
        profile.disable()
        torch.cuda.synchronize()
        print(f"== {name}: {mo.LAYERS[opts.layer][0]}, {opts.steps} training steps")
        pstats.Stats(profile).sort_stats("tottime").print_stats(opts.top)
    for key, plan in ours._td_plans.items():
        print("layer plan", key[4:], plan.summary())


if __name__ == "__main__":
    main()
