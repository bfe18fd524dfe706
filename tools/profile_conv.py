"""Where the time of convolution instances goes, on the GPU: for named layers of the conv suites and one
direction, cuDNN and each named instance (event time per call, no L2 flush: a comparison between instances,
not the benchmark protocol), with the CUDA kernels of one call and their mean device time, and each instance's
relative error against the benchmark's fp32 reference (checked before timing).

    python tools/profile_conv.py --direction fwd --layers resnet50/layer4.1.conv2 --only NAME[,NAME] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from profile_padding import event_us, kernels_of

import tiledispatch as td
from tiledispatch.configs.naming import parse_name
from tiledispatch.problems.conv_suites import all_cases
from tiledispatch.registry.kernel import prepare

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import conv as bench_conv  # benchmarks/conv.py: the benchmark's inputs and cuDNN calls


def profile(case, direction: str, names: list[str]) -> dict:
    problem = case.for_direction(direction)
    args = bench_conv.make_args(problem, torch.device("cuda"), seed=0)
    problem = prepare(problem, args)
    vendor = bench_conv.torch_call(problem, args.x, args.w, args.y)
    ref = bench_conv.reference(problem, args)
    row = {"layer": f"{case.model}/{case.layer}", "direction": direction, "cudnn_us": event_us(vendor),
           "instances": {}}
    reg = td.Registry(td.detect())
    for name in names:
        reg.add(parse_name(name))
    reg.build()
    for kernel in reg.kernels:
        if not kernel.is_supported(problem):
            row["instances"][kernel.name] = {"error": kernel.is_supported(problem).reason}
            continue
        call = lambda k=kernel: k.launch(args, problem)
        err = bench_conv.rel_err(call(), ref)
        row["instances"][kernel.name] = {"us": event_us(call), "kernels": kernels_of(call), "rel_err": err}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--direction", required=True, choices=("fwd", "bwd_data", "bwd_weight"))
    ap.add_argument("--layers", required=True, help="comma list of model/layer names of the conv suites")
    ap.add_argument("--only", required=True, help="comma list of instance names (for the layers' ndim)")
    ap.add_argument("--json", help="write the rows here")
    opts = ap.parse_args()
    cases = {f"{c.model}/{c.layer}": c for c in all_cases()}
    rows = []
    for name in opts.layers.split(","):
        row = profile(cases[name], opts.direction, opts.only.split(","))
        rows.append(row)
        print(f"{name} {opts.direction}: cuDNN {row['cudnn_us']:.1f} us")
        for label, info in row["instances"].items():
            if "error" in info:
                print(f"   {label}: {info['error']}")
                continue
            print(f"   {info['us']:8.1f} us  {label}  (rel err {info['rel_err']:.2g})")
            for kname, us in info["kernels"]:
                print(f"        {us:8.1f} us  {kname}")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
