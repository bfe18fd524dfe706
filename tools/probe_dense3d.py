"""Probe (issue 38): where a dense 3-D layer's tma kernel loses against a GEMM of the same work. For one layer
of the conv suites (fwd, stride 1) it times, with CUDA events and no L2 flush (a comparison, not the
benchmark protocol), and reports TF/s:
- cuDNN and each named conv instance on the layer itself;
- the same instances on its tap-folded twin: a 1x1x1 convolution with C x taps input channels, the same
  reduction length and output, so the pixel boxes are never shifted (no halo, no zero fill at the edges);
- cuBLAS and each named GEMM instance on the layer's im2col GEMM (M = output pixels, N = K, K = C x taps),
  the same tensor-core work with 2-D boxes.
If the twin runs at the GEMM's speed, shifting the boxes per tap is the cost; if not, the conv form (5-D
boxes, the transposed dot, the masked epilogue) is. Stop 60 measured the tap / chunk counters of the
shipped loop this way (docs/design/conv_tma.md).

    python tools/probe_dense3d.py --layer c3d/conv3b --conv NAME[,NAME] --gemm NAME[,NAME] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
def folded(problem: Any) -> Any:
    """The 1x1x1 convolution with the layer's reduction length and output extent (stride 1, no padding)."""
    import tiledispatch as td

    taps = math.prod(problem.filter)
    ones = (1,) * problem.ndim
    return td.ConvProblem("fwd", problem.n, problem.c * taps, problem.k, 1, problem.output, ones, 1, 0, 1,
                          problem.dtype)


def im2col_shape(problem: Any) -> tuple[int, int, int]:
    return problem.n * math.prod(problem.output), problem.k, problem.c * math.prod(problem.filter)


def conv_rows(problem: Any, registry: Any) -> dict[str, Any]:
    import torch
    from profile_padding import event_us

    from tiledispatch.registry.kernel import prepare

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import conv as bench_conv   # benchmarks/conv.py: the benchmark's inputs and cuDNN calls

    args = bench_conv.make_args(problem, torch.device("cuda"), seed=0)
    problem = prepare(problem, args)
    ref = bench_conv.reference(problem, args)
    cudnn_us = event_us(bench_conv.torch_call(problem, args.x, args.w, args.y))
    row: dict[str, Any] = {"problem": problem.describe(), "cudnn_us": cudnn_us,
                           "cudnn_tflops": problem.flops / cudnn_us / 1e6, "instances": {}}
    for kernel in registry.kernels:
        why = kernel.is_supported(problem)
        if not why:
            row["instances"][kernel.name] = {"error": why.reason}
            continue

        def call(k: Any = kernel) -> Any:
            return k.launch(args, problem)

        us = event_us(call)
        row["instances"][kernel.name] = {"us": us, "tflops": problem.flops / us / 1e6,
                                         "rel_err": bench_conv.rel_err(call(), ref)}
    torch.cuda.empty_cache()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="c3d/conv3b", help="model/layer of the conv suites")
    ap.add_argument("--conv", required=True, help="comma list of conv instance names (fwd, the layer's ndim)")
    ap.add_argument("--gemm", required=True, help="comma list of bf16 rcr GEMM instance names")
    ap.add_argument("--json")
    opts = ap.parse_args()
    import torch
    from profile_gemm import profile as gemm_profile

    import tiledispatch as td
    from tiledispatch.configs.naming import parse_name
    from tiledispatch.problems.conv_suites import HARD_SUITES, SUITES, all_cases

    case = {f"{c.model}/{c.layer}": c for c in all_cases(SUITES + HARD_SUITES)}[opts.layer]
    problem = case.for_direction("fwd")
    convs, gemms = (td.Registry(td.detect()) for _ in range(2))
    for name in opts.conv.split(","):
        convs.add(parse_name(name))
    for name in opts.gemm.split(","):
        gemms.add(parse_name(name))
    for registry in (convs, gemms):
        registry.build()
    m, n, k = im2col_shape(problem)
    gemm = gemm_profile("bf16_rcr", f"{m}x{n}x{k}", gemms)
    gemm["tflops"] = {label: 2 * m * n * k / info["us"] / 1e6 for label, info in gemm["instances"].items()}
    gemm["cublas_tflops"] = 2 * m * n * k / gemm["cublas_us"] / 1e6
    out = {"gpu": torch.cuda.get_device_name(), "layer": opts.layer, "layer_conv": conv_rows(problem, convs),
           "folded_conv": conv_rows(folded(problem), convs), "im2col_gemm": gemm}
    for name in [k for k in out if k.endswith("_conv")]:
        row = out[name]
        print(f"{name}: {row['problem']}  cuDNN {row['cudnn_us']:.1f} us ({row['cudnn_tflops']:.0f} TF/s)")
        for label, info in row["instances"].items():
            text = info.get("error") or (f"{info['us']:.1f} us ({info['tflops']:.0f} TF/s), "
                                         f"rel err {info['rel_err']:.1e}")
            print(f"  {label}: {text}")
    print(f"im2col GEMM {m}x{n}x{k}: cuBLAS {gemm['cublas_us']:.1f} us ({gemm['cublas_tflops']:.0f} TF/s)")
    for label, info in gemm["instances"].items():
        print(f"  {label}: {info['us']:.1f} us ({gemm['tflops'][label]:.0f} TF/s)")
    if opts.json:
        Path(opts.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
