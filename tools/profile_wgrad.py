"""Where the time of weight-gradient convolutions goes, on the GPU: for named layers of the conv suites (ResNet-50,
ResNeXt-50, the 3-D networks), cuDNN, cuBLAS on the equivalent GEMM (dw = dy^T @ im2col(x): K/G x taps*C/G over
N*pixels), every igemm weight-gradient candidate that takes the problem at several split counts and the im2col
candidates (kernels/conv_im2col.py): event time per call (no L2 flush: a comparison between instances, not the benchmark protocol) and the CUDA kernels of one
call of the fastest.

    python tools/profile_wgrad.py --layers resnet50/layer4.1.conv2,resnet50/layer3.1.conv2 [--only NAMES] [--json PATH]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import torch
from profile_padding import event_us, kernels_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import conv as bench_conv  # benchmarks/conv.py: the benchmark's inputs and cuDNN calls

import tiledispatch as td
from tiledispatch.kernels.family import problem_mismatch
from tiledispatch.kernels import conv_im2col, conv_wgrad
from tiledispatch.problems.conv_suites import all_cases
from tiledispatch.registry.kernel import prepare

SPLITS = (1, 2, 4, 8, 16, 0)   # 0: the instance's automatic split


def _gemm_us(problem) -> float:
    """cuBLAS on one group's GEMM times the groups (a batched GEMM when grouped): dy^T (K/G x P) @ im2col."""
    p = problem.n * math.prod(problem.output)
    cols = problem.c_per_group * math.prod(problem.filter)
    a = torch.randn(problem.groups, p, problem.k_per_group, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(problem.groups, p, cols, device="cuda", dtype=torch.bfloat16)
    return event_us(lambda: torch.bmm(a.transpose(1, 2), b))


def profile(case, only: set[str] | None = None) -> dict:
    problem = case.for_direction("bwd_weight")
    args = bench_conv.make_args(problem, torch.device("cuda"), seed=0)
    problem = prepare(problem, args)
    row = {"layer": f"{case.model}/{case.layer}", "gflop": problem.flops / 1e9,
           "cudnn_us": event_us(bench_conv.torch_call(problem, args.x, args.w, args.y)),
           "gemm_us": _gemm_us(problem), "instances": {}}
    reg = td.Registry(td.detect())
    configs = [dataclasses.replace(base, split_k=split) for base in conv_wgrad.candidate_configs(
        problem.dtype, problem.ndim) for split in SPLITS] + conv_im2col.candidate_configs(problem.dtype, problem.ndim)
    for cfg in configs:
        if problem_mismatch(cfg, problem) is None and (not only or cfg.name in only):
            reg.add(cfg)
    reg.build()
    for kernel in reg.kernels:
        row["instances"][kernel.name] = event_us(lambda k=kernel: k.launch(args, problem))
    best = min(row["instances"], key=row["instances"].get)
    row["best"] = best
    row["best_kernels"] = kernels_of(lambda: reg.get(best).launch(args, problem))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", required=True, help="comma list of model/layer names of the conv suites")
    ap.add_argument("--only", help="comma list of instance names: time only these (e.g. under ncu)")
    ap.add_argument("--json", help="write the rows here")
    opts = ap.parse_args()
    cases = {f"{c.model}/{c.layer}": c for c in all_cases()}
    rows = []
    for name in opts.layers.split(","):
        row = profile(cases[name], set(opts.only.split(",")) if opts.only else None)
        rows.append(row)
        print(f"{name}: {row['gflop']:.2f} GFLOP  cuDNN {row['cudnn_us']:.1f} us  cuBLAS GEMM {row['gemm_us']:.1f} us")
        for label, us in sorted(row["instances"].items(), key=lambda kv: kv[1])[:12]:
            print(f"   {us:8.1f} us  {row['gflop'] / us * 1e3:6.0f} TF/s  {label}")
        for kname, us in row["best_kernels"]:
            print(f"      {us:8.1f} us  {kname}")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
