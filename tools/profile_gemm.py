"""Where the time of GEMM instances goes, on the GPU: for each named shape, cuBLAS and each named instance (event
time per call, no L2 flush: a comparison between instances, not the benchmark protocol), with the CUDA kernels
of one call and their mean device time (e.g. a split kernel's partial pass and its reduce).

    python tools/profile_gemm.py --combo bf16_rcr --shapes 256x3584x3584,1000x1000x1000 --only NAME[,NAME]
        [--json PATH]
"""
from __future__ import annotations

import argparse
import json

import torch
from profile_padding import event_us, kernels_of

import tiledispatch as td
from tiledispatch.configs.naming import parse_name
from tiledispatch.runtime.execute import run_selection
from tiledispatch.testing.inputs import make_args
from tiledispatch.select.selector import Selection, plans_of


def profile(combo: str, shape: str, reg: td.Registry) -> dict:
    dtype, layout = combo.split("_")
    m, n, k = (int(v) for v in shape.split("x"))
    problem = td.GemmProblem(m, n, k, dtype=dtype, layout=layout)
    args = make_args(problem, torch.device("cuda"))
    out = torch.empty(m, n, dtype=args.a.dtype, device="cuda")
    row = {"combo": combo, "shape": shape, "cublas_us": event_us(lambda: torch.mm(args.a, args.b, out=out)),
           "instances": {}}
    for plan in plans_of(reg.kernels, problem):
        selection = Selection(plan.kernel, "profile", plan.problem, plan.padded)
        call = lambda s=selection: run_selection(s, args)
        row["instances"][plan.label] = {"us": event_us(call), "kernels": kernels_of(call)}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--combo", required=True, help="dtype_layout, e.g. bf16_rcr")
    ap.add_argument("--shapes", required=True, help="comma list of MxNxK")
    ap.add_argument("--only", required=True, help="comma list of instance names")
    ap.add_argument("--json", help="write the rows here")
    opts = ap.parse_args()
    reg = td.Registry(td.detect())
    for name in opts.only.split(","):
        reg.add(parse_name(name))
    reg.build()
    rows = []
    for shape in opts.shapes.split(","):
        row = profile(opts.combo, shape, reg)
        rows.append(row)
        print(f"{opts.combo} {shape}: cuBLAS {row['cublas_us']:.1f} us")
        for label, info in sorted(row["instances"].items(), key=lambda kv: kv[1]["us"]):
            parts = ", ".join(f"{name[:40]} {us:.1f}" for name, us in info["kernels"])
            print(f"  {info['us']:8.1f} us  {label}\n             [{parts}]")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
