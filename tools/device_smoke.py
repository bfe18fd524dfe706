"""Quick check that a built kernel launches on the GPU and is right (first thing a device run does)."""
import time

import torch

import tiledispatch as td
from tiledispatch.testing.inputs import make_args
from tiledispatch.testing.reference import validate


def main() -> None:
    reg = td.Registry(td.detect())
    reg.add("gemm-tiled-rcr-bf16-bf16-fp32-128x128x64-w4-s4-g8-k1-a16-gelu-bcol-d1-c1")
    reg.add("gemm-splitk-rcr-fp16-fp16-fp32-64x64x128-w4-s3-g8-k4-a16-none-bnone-d0-c0")
    print(reg.build(), td.detect())
    for kernel in reg.kernels:
        p = td.GemmProblem(1000, 1024, 2048, dtype=kernel.config.dtype, epilogue=kernel.config.epilogue)
        args = make_args(p, torch.device("cuda"))
        out = kernel.launch(args, p)
        torch.cuda.synchronize()
        print(kernel.name, validate(out, args, p.dtype))
        t = time.perf_counter()
        for _ in range(100):
            kernel.launch(args, p)
        torch.cuda.synchronize()
        print("per call us", (time.perf_counter() - t) * 1e4)


if __name__ == "__main__":  # build() spawns workers, which re-import this file
    main()
