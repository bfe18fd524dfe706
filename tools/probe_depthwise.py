"""How far the depthwise / grouped convolution rows are from what the memory system allows, on the GPU, under
the benchmark protocol (benchmarks/protocol.py: 256 MB L2 flush before every call, CUDA events, median):
for named layers and one direction, cuDNN, a device copy moving the layer's minimal bytes (half read, half
written: the practical floor at that size, flush write-back and launch included), the benchmark's `tune`
winner (from the result JSON) and any extra instances, each with the CUDA kernels of one call.

    python tools/probe_depthwise.py --direction fwd [--category depthwise] [--layers A,B] [--only NAME,...]
        [--result benchmarks/results/conv_h200.json] [--roll-programs-per-sm N] [--json PATH]

--roll-programs-per-sm sets kernels/conv_roll.ROLL_PROGRAMS_PER_SM (the programs per SM its row chunks aim
for) in this process, to compare chunkings of the roll kernels without changing the package.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from profile_padding import kernels_of

import tiledispatch as td
from tiledispatch.configs.naming import parse_name
from tiledispatch.problems.conv_suites import all_cases
from tiledispatch.registry.kernel import prepare

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import conv as bench_conv  # benchmarks/conv.py: the benchmark's inputs and cuDNN calls  # noqa: E402
from protocol import CudaTimer, Protocol  # noqa: E402


def probe(timer: CudaTimer, case, direction: str, names: list[str]) -> dict:
    problem = case.for_direction(direction)
    args = bench_conv.make_args(problem, torch.device("cuda"), seed=0)
    problem = prepare(problem, args)
    vendor = bench_conv.torch_call(problem, args.x, args.w, args.y)
    ref = bench_conv.reference(problem, args)
    copy = bench_conv.copy_timing(timer, torch.device("cuda"), problem.min_bytes)
    row = {"layer": case.name, "direction": direction, "min_bytes": problem.min_bytes,
           "cudnn_us": timer.time_ms(vendor).ms * 1e3, "copy_us": copy.ms * 1e3, "instances": {}}
    reg = td.Registry(td.detect())
    for name in dict.fromkeys(names):
        reg.add(parse_name(name))
    reg.build()
    for kernel in reg.kernels:
        support = kernel.is_supported(problem)
        if not support:
            row["instances"][kernel.name] = {"error": support.reason}
            continue
        call = lambda k=kernel: k.launch(args, problem)
        err = bench_conv.rel_err(call(), ref)
        row["instances"][kernel.name] = {"us": timer.time_ms(call).ms * 1e3, "rel_err": err,
                                         "kernels": kernels_of(call)}
    return row


def winners(result: Path, direction: str) -> dict[str, str]:
    rows = json.loads(result.read_text())["rows"]
    return {r["case"]: r["tune_kernel"] for r in rows if r["direction"] == direction and r.get("tune_kernel")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--direction", required=True, choices=("fwd", "bwd_data", "bwd_weight"))
    ap.add_argument("--category", default="depthwise", help="suite category of the layers (when --layers is unset)")
    ap.add_argument("--layers", help="comma list of model/layer names of the conv suites")
    ap.add_argument("--only", default="", help="comma list of extra instance names (for the layers' ndim)")
    ap.add_argument("--result", default=str(ROOT / "benchmarks/results/conv_h200.json"))
    ap.add_argument("--roll-programs-per-sm", type=int, help="override conv_roll.ROLL_PROGRAMS_PER_SM")
    ap.add_argument("--json", help="write the rows here")
    opts = ap.parse_args()
    if opts.roll_programs_per_sm:
        from tiledispatch.kernels import conv_roll

        conv_roll.ROLL_PROGRAMS_PER_SM = opts.roll_programs_per_sm
    cases = all_cases()
    if opts.layers:
        wanted = opts.layers.split(",")
        cases = [c for c in cases if c.name in wanted]
    else:
        cases = [c for c in cases if c.category == opts.category]
    best = winners(Path(opts.result), opts.direction)
    timer = CudaTimer(Protocol(), torch.device("cuda"))
    torch.backends.cudnn.benchmark = True
    rows = []
    for case in cases:
        extra = [n for n in opts.only.split(",") if n and f"-{case.problem.ndim}d-" in n]
        row = probe(timer, case, opts.direction, ([best[case.name]] if case.name in best else []) + extra)
        rows.append(row)
        print(f"{case.name} {opts.direction}: {row['min_bytes'] / 1e6:.1f} MB, cuDNN {row['cudnn_us']:.1f} us, "
              f"copy {row['copy_us']:.1f} us", flush=True)
        for label, info in row["instances"].items():
            if "error" in info:
                print(f"   {label}: {info['error']}")
                continue
            print(f"   {info['us']:8.1f} us  {label}  (rel err {info['rel_err']:.2g})")
            for kname, us in info["kernels"]:
                print(f"        {us:8.1f} us  {kname}")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(), "protocol": Protocol().describe(True, "cudnn"),
                       "roll_programs_per_sm": opts.roll_programs_per_sm, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
