"""Probe: launch chosen GEMM instances and the vendor GEMM once each inside a profiler range, for Nsight Compute
to count what every kernel moves (L2 sectors and requests, DRAM bytes) next to its duration.

Answers "does cuBLAS read fewer bytes from L2 than our kernels for the same product?" (TMA multicast shares one
L2 read between the CTAs of a cluster). Each case is warmed up outside the range; inside it, each plan runs
once, a `spin` kernel (torch.cuda._sleep) separating plans, so the profiler's rows map back to plans by order.

    ncu --profile-from-start off --metrics ... --csv --log-file ncu.csv \\
        python tools/probe_l2_traffic.py --case 256x4096x14336:fp8e4m3:NAME,NAME --case 1000x1000x1000@AB:fp16:NAME \\
        --json order.json

A case's shape may end in `@` and the operands (A, B, C) whose rows start 128-byte aligned (views of wider
buffers), as in tools/probe_space.py.
"""
from __future__ import annotations

import argparse
import functools
import json

import torch
from probe_space import matrix  # tools/ is the script's directory

import tiledispatch as td

VENDOR = "vendor"


def case_plans(reg: td.Registry, text: str) -> tuple[str, list[tuple[str, object]]]:
    """(case label, [(plan name, zero-argument call)]) of one --case: shape[@ABC]:dtype:instance,instance."""
    shape, dtype, names = text.split(":")
    dims, _, aligned = shape.partition("@")
    m, n, k = (int(v) for v in dims.split("x"))
    fp8 = dtype == "fp8e4m3"
    elem = torch.float8_e4m3fn if fp8 else {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    a, b = matrix(m, k, elem, "A" in aligned), matrix(n, k, elem, "B" in aligned).t()   # rcr: K-major B
    out = matrix(m, n, torch.bfloat16 if fp8 else elem, "C" in aligned)
    if fp8:
        one = torch.ones((), device="cuda")
        plans = [(VENDOR, lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))]
        plans += [(name, functools.partial(reg.get(name).run, a, b, out=out, scale_a=one, scale_b=one))
                  for name in names.split(",")]
    else:
        plans = [(VENDOR, lambda: torch.mm(a, b, out=out))]
        plans += [(name, functools.partial(reg.get(name).run, a, b, out=out)) for name in names.split(",")]
    return text, plans


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", action="append", required=True, help="shape[@ABC]:dtype:instance,instance")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", required=True)
    opts = parser.parse_args()
    reg = td.Registry(td.detect())
    for text in opts.case:
        for name in text.split(":")[2].split(","):
            reg.add(td.parse_name(name))
    build = reg.build()
    if build.failed:
        raise SystemExit(f"builds failed: {build.failed}")
    cases = [case_plans(reg, text) for text in opts.case]
    for _, plans in cases:
        for _, fn in plans:
            for _ in range(opts.warmup):
                fn()
    torch.cuda.synchronize()
    order = []
    torch.cuda.cudart().cudaProfilerStart()
    for label, plans in cases:
        for name, fn in plans:
            torch.cuda._sleep(1000)   # the separator: a `spin` kernel before every plan
            fn()
            order.append({"case": label, "plan": name})
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    with open(opts.json, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "order": order}, f, indent=1)
    print(json.dumps(order))


if __name__ == "__main__":
    main()
