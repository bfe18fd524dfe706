"""A GEMM with a fused epilogue: out = gelu(alpha * A @ B + beta * C + bias[n] + D0), in one kernel.

The epilogue is part of an instance's config (and name), so the registry declares instances for exactly this
epilogue. Two small instances keep the build short: an unaligned 32x32x32 tile (any sizes) and an aligned
64x64x32 tile (sizes and leading dimensions that are multiples of 16).

    python examples/fused_epilogue.py
"""
import torch

import tiledispatch as td

EPILOGUE = td.Epilogue(activation="gelu", bias="col", num_d=1, with_c=True)
CONFIGS = [
    td.GemmConfig(family="tiled", dtype="fp16", layout="rcr", block_m=32, block_n=32, block_k=32,
                  num_warps=4, num_stages=2, align=1).with_epilogue(EPILOGUE),
    td.GemmConfig(family="tiled", dtype="fp16", layout="rcr", block_m=64, block_n=64, block_k=32,
                  num_warps=4, num_stages=3, align=16).with_epilogue(EPILOGUE),
]


def reference(a, b, c, bias, d0, alpha, beta):
    acc = alpha * (a.double() @ b.double()) + beta * c.double() + bias.double() + d0.double()
    return torch.nn.functional.gelu(acc)


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    m, n, k = (2048, 1536, 1024) if device == "cuda" else (70, 50, 90)   # odd sizes on the interpreter
    registry = td.Registry()               # the GPU's arch, or sm_90 without one
    for cfg in CONFIGS:
        registry.add(cfg)
    print(f"build: {registry.build()}")

    f16 = dict(device=device, dtype=torch.float16)
    a = torch.randn(m, k, **f16)
    b = torch.randn(n, k, **f16).T         # column-major B
    c = torch.randn(m, n, **f16)
    bias = torch.randn(n, **f16)           # one value per output column
    d0 = torch.randn(m, n, **f16)
    alpha, beta = 0.5, 0.25

    # Registry.run derives the problem from the tensors (here: the epilogue above), selects and runs.
    out = registry.run(None, a, b, alpha=alpha, beta=beta, c=c, bias=bias, d=(d0,), activation="gelu")
    problem = td.GemmProblem(m, n, k, dtype="fp16", layout="rcr", epilogue=EPILOGUE)
    selection = registry.select(problem)

    ref = reference(a, b, c, bias, d0, alpha, beta)
    err = ((out.double().cpu() - ref.cpu()).norm() / ref.cpu().norm()).item()
    print(f"{problem.describe()} on {device}: kernel {selection.kernel.name}")
    print(f"relative error vs float64 reference: {err:.2e}")
    assert err < 2e-3, err

    # A kernel can also be run directly; it checks that it supports the call first.
    kernel = registry.get(CONFIGS[0].name)
    again = kernel.run(a, b, alpha=alpha, beta=beta, c=c, bias=bias, d=(d0,))
    diff = (again.float() - out.float()).abs().max().item()
    print(f"{kernel.name} run directly: max difference {diff:.3g}")


if __name__ == "__main__":
    main()
