"""A kernel change, A/B in one GPU run: each instance rendered by the working tree's family module (B) and by
that module at a git revision (A), timed on the same layers and inputs, alternating A and B.

For each layer of the conv suites (`model/layer`, every listed direction) and each instance of the named
family in the layer's `_all` preset that runs it, reports the µs of A and B (CUDA events, no L2 flush: a
comparison, not the benchmark protocol), the B/A speed-up and B's relative error against the reference, plus
cuDNN's time. Per layer also the best instance of each side. Everything else (rules, launch, the registry)
is the working tree's, so the change must keep the family's entry points and signature.

    python tools/ab_kernel_source.py --rev HEAD --family tma --directions fwd,bwd_data
        --layers c3d/conv3b,r3d_18/layer2.conv,resnet50/layer2.1.conv2 [--repeats 3] [--json PATH]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def module_at(rev: str, family: str) -> Any:
    """The family module `kernels/conv_<family>.py` as it was at `rev`, imported under a private name."""
    rel = f"src/tiledispatch/kernels/conv_{family}.py"
    text = subprocess.run(["git", "show", f"{rev}:{rel}"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout
    path = Path(tempfile.mkdtemp()) / f"old_conv_{family}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"_ab_old_conv_{family}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def old_source(cfg: Any, old: Any) -> str:
    """render_source with the family module replaced by `old`."""
    from tiledispatch.codegen import render

    with mock.patch.object(render, "family_module", lambda _cfg: old):
        return render.render_source(cfg)


def instances(direction: str, ndim: int, family: str) -> list[Any]:
    from tiledispatch.presets import load_preset

    return [cfg for cfg in load_preset(f"conv_{direction}_bf16_{ndim}d_all") if cfg.family == family]


def time_layer(problem: Any, pairs: list[tuple[Any, Any]], repeats: int) -> dict[str, Any]:
    """pairs: (kernel A, kernel B) of one instance; A and B alternate `repeats` times, medians kept."""
    import torch
    from profile_padding import event_us

    import conv as bench_conv   # benchmarks/conv.py: the benchmark's inputs and cuDNN calls
    from tiledispatch.registry.kernel import prepare

    args = bench_conv.make_args(problem, torch.device("cuda"), seed=0)
    problem = prepare(problem, args)
    ref = bench_conv.reference(problem, args)
    row: dict[str, Any] = {"problem": problem.describe(), "flops": problem.flops,
                           "cudnn_us": event_us(bench_conv.torch_call(problem, args.x, args.w, args.y)),
                           "instances": {}}
    for a, b in pairs:
        if not b.is_supported(problem) or not a.is_supported(problem):
            continue
        times: dict[str, list[float]] = {"a": [], "b": []}
        for _ in range(repeats):
            for side, kernel in (("a", a), ("b", b)):
                times[side].append(event_us(lambda k=kernel: k.launch(args, problem)))
        us_a, us_b = statistics.median(times["a"]), statistics.median(times["b"])
        row["instances"][b.name] = {"a_us": us_a, "b_us": us_b, "speedup": us_a / us_b,
                                    "b_rel_err": bench_conv.rel_err(b.launch(args, problem), ref)}
    if row["instances"]:
        inst = row["instances"].values()
        row["best_a_us"], row["best_b_us"] = min(i["a_us"] for i in inst), min(i["b_us"] for i in inst)
        row["best_speedup"] = row["best_a_us"] / row["best_b_us"]
        row["geomean_speedup"] = math.exp(statistics.fmean(math.log(i["speedup"]) for i in inst))
    torch.cuda.empty_cache()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="HEAD", help="git revision of side A's family module")
    ap.add_argument("--family", default="tma")
    ap.add_argument("--directions", default="fwd,bwd_data")
    ap.add_argument("--layers", required=True, help="comma list of model/layer of the conv suites")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    opts = ap.parse_args()
    import torch

    import tiledispatch as td
    from tiledispatch.problems.conv_suites import HARD_SUITES, SUITES, all_cases

    cases = {f"{c.model}/{c.layer}": c for c in all_cases(SUITES + HARD_SUITES)}
    old = module_at(opts.rev, opts.family)
    a_reg, b_reg = td.Registry(td.detect()), td.Registry(td.detect())
    keys = {(d, cases[name].for_direction(d).ndim) for name in opts.layers.split(",")
            for d in opts.directions.split(",")}
    pairs: dict[tuple[str, int], list[tuple[Any, Any]]] = {}
    for key in sorted(keys):
        pairs[key] = [(a_reg.add(cfg, source=old_source(cfg, old)), b_reg.add(cfg))
                      for cfg in instances(*key, opts.family)]
    for registry in (a_reg, b_reg):
        registry.build()
    out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "rev_a": opts.rev, "family": opts.family,
                           "repeats": opts.repeats, "layers": {}}
    for name in opts.layers.split(","):
        for direction in opts.directions.split(","):
            problem = cases[name].for_direction(direction)
            row = time_layer(problem, pairs[(direction, problem.ndim)], opts.repeats)
            out["layers"][f"{name}/{direction}"] = row
            if "best_speedup" in row:
                print(f"{name}/{direction}: cuDNN {row['cudnn_us']:.1f} us, best A {row['best_a_us']:.1f} / "
                      f"B {row['best_b_us']:.1f} us ({row['best_speedup']:.3f}x), geomean over "
                      f"{len(row['instances'])} instances {row['geomean_speedup']:.3f}x", flush=True)
            if opts.json:
                Path(opts.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
