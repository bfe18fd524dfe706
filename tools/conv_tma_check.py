"""GPU check of the experimental conv `tma` family: every valid tile of the former preset rows, fwd and
bwd_data, 2-D and 3-D, fp16 and bf16, on 5 problems each, run with the persistent walk (the device's SM count)
and with one tile per program (a device of 100,000 SMs); prints and writes ($OUT/conv_tma_check.json) every
result outside the conv tolerances.

    OUT=/tmp/out python tools/conv_tma_check.py          (needs a CUDA GPU)

On the H200 (session 8) every failure came from the 128x256x64 tile, in both modes, which the validity
predicate refuses since (block_n > 128); the other 7 tiles passed every case.
"""
from __future__ import annotations

import json
import os

import torch

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.conv_validity import conv_config_errors
from tiledispatch.kernels.conv_common import OUTPUT_ROLE
from tiledispatch.runtime.conv_reference import CONV_TOLERANCES, conv_reference, make_conv_args
from tiledispatch.runtime.reference import errors

ROWS = [(128, 128, 64, 8, 3), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 256, 64, 8, 3),
        (64, 64, 64, 4, 4), (256, 128, 64, 8, 3), (128, 32, 32, 4, 4), (128, 16, 16, 4, 4)]


def problems(direction, ndim, dtype):
    sp = {2: (27, 29), 3: (7, 13, 11)}[ndim]
    f3 = (3,) * ndim
    cases = [(4, 64, 64, 1, f3, 1, 1, 1), (4, 512, 512, 16, f3, 1, 1, 1), (2, 64, 256, 1, (1,) * ndim, 1, 0, 1),
             (4, 256, 256, 1, f3, 1, 1, 1), (2, 128, 128, 1, f3, 1, ((0, 2),) * ndim, 2)]
    return [td.ConvProblem(direction, n, c, k, g, sp, f, s, p, d, dtype) for n, c, k, g, f, s, p, d in cases]


def main():
    os.environ["TILEDISPATCH_EXPERIMENTAL"] = "conv_tma"
    real = td.detect()
    out = []
    for mode, arch in (("persistent", real), ("one-tile", real.with_device(100000, real.name))):
        for direction in ("fwd", "bwd_data"):
            for ndim in (2, 3):
                for dtype in ("fp16", "bf16"):
                    reg = td.Registry(arch)
                    for bm, bn, bk, w, s in ROWS:
                        cfg = ConvConfig(family="tma", direction=direction, ndim=ndim, dtype=dtype, block_m=bm,
                                         block_n=bn, block_k=bk, num_warps=w, num_stages=s, align=8)
                        if not conv_config_errors(cfg, arch):
                            reg.add(cfg)
                    assert not reg.build().failed
                    for problem in problems(direction, ndim, dtype):
                        args = make_conv_args(problem, "cuda", poison=True)
                        ref = conv_reference(problem, args)
                        role = OUTPUT_ROLE[direction]
                        for k in reg.kernels:
                            if not k.is_supported(problem):
                                continue
                            setattr(args, role, torch.full_like(getattr(args, role), float("nan")))
                            res = k.run(problem, x=args.x, w=args.w, y=args.y, bias=args.bias)
                            e = errors(res, ref)["rel_err"]
                            if not e <= CONV_TOLERANCES[dtype]:
                                out.append((mode, k.name, problem.describe(), e))
                                print(mode, k.name, problem.describe(), e, flush=True)
        print(mode, "done", flush=True)
    with open(os.path.join(os.environ["OUT"], "conv_tma_check.json"), "w") as f:
        json.dump({"gpu": real.reference_gpu, "failures": out}, f, indent=1)


if __name__ == "__main__":
    main()
