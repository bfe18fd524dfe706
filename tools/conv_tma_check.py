"""GPU check of the conv `tma` family: every valid tile of ROWS, fwd and bwd_data, 2-D and 3-D, fp16 and bf16,
on 5 problems each, run with the persistent walk (the device's SM count) and with one tile per program (a device
of 100,000 SMs); prints and writes ($OUT/conv_tma_check.json) every result outside the conv tolerances.

    OUT=/tmp/out python tools/conv_tma_check.py          (needs a CUDA GPU)

On the H200 (session 8) every failure came from the 128x256x64 tile, in both modes. Session 11 found the
cause: a race in the kernel's earlier dot form (kernels/conv_tma.py), which run-to-run comparisons expose
better than a single check; the tile is valid again.
"""
from __future__ import annotations

import itertools
import json
import os

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels.family import config_errors as conv_config_errors
from tiledispatch.testing.reference import check_kernels

ROWS = [(128, 128, 64, 8, 3), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 256, 64, 8, 3),
        (64, 64, 64, 4, 4), (256, 128, 64, 8, 3), (128, 32, 32, 4, 4), (128, 16, 16, 4, 4)]


def problems(direction: str, ndim: int, dtype: str) -> list[td.ConvProblem]:
    """Stride-1 shapes the family takes: dense 64/256 channels, grouped 32 per group, 1x1, dilation 2."""
    sp = {2: (27, 29), 3: (7, 13, 11)}[ndim]
    f3 = (3,) * ndim
    cases = [(4, 64, 64, 1, f3, 1, 1, 1), (4, 512, 512, 16, f3, 1, 1, 1), (2, 64, 256, 1, (1,) * ndim, 1, 0, 1),
             (4, 256, 256, 1, f3, 1, 1, 1), (2, 128, 128, 1, f3, 1, ((0, 2),) * ndim, 2)]
    return [td.ConvProblem(direction, n, c, k, g, sp, f, s, p, d, dtype) for n, c, k, g, f, s, p, d in cases]


def registry(arch: td.ArchSpec, direction: str, ndim: int, dtype: str) -> td.Registry:
    """The valid tiles of ROWS for one (direction, ndim, dtype), built."""
    reg = td.Registry(arch)
    for bm, bn, bk, w, s in ROWS:
        cfg = ConvConfig(family="tma", direction=direction, ndim=ndim, dtype=dtype, block_m=bm, block_n=bn,
                         block_k=bk, num_warps=w, num_stages=s, align=8)
        if not conv_config_errors(cfg, arch):
            reg.add(cfg)
    assert not reg.build().failed
    return reg


def main() -> None:
    os.environ["TILEDISPATCH_EXPERIMENTAL"] = "conv_tma"
    real = td.detect()
    modes = (("persistent", real), ("one-tile", real.with_device(100000, real.name)))
    out = []
    for (mode, arch), direction, ndim, dtype in itertools.product(modes, ("fwd", "bwd_data"), (2, 3),
                                                                   ("fp16", "bf16")):
        reg = registry(arch, direction, ndim, dtype)
        for problem in problems(direction, ndim, dtype):
            _, failed = check_kernels([k for k in reg.kernels if k.is_supported(problem)], problem)
            for line in failed:
                out.append(f"{mode}: {line}")
                print(out[-1], flush=True)
    with open(os.path.join(os.environ["OUT"], "conv_tma_check.json"), "w") as f:
        json.dump({"gpu": real.reference_gpu, "failures": out}, f, indent=1)


if __name__ == "__main__":
    main()
