"""td.gemm on torch tensors: compiled kernels on a CUDA GPU, Triton's interpreter on CPU tensors.

The first call builds the default registry for the problem's dtype and layout (the instances of the
gemm_fp16_rcr_essential preset; about 20 s on two CPU cores) into the cache ($TILEDISPATCH_CACHE_DIR,
default ~/.cache/tiledispatch); later runs load it from there.

    python examples/basic_gemm.py
"""
import torch

import tiledispatch as td


def main() -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # The interpreter runs every program of the grid in Python: keep CPU problems small.
    m, n, k = (4096, 4096, 4096) if device == "cuda" else (96, 80, 112)
    a = torch.randn(m, k, device=device, dtype=torch.float16)          # row-major A
    b = torch.randn(n, k, device=device, dtype=torch.float16).T        # column-major B: layout "rcr"

    out = td.gemm(a, b)

    ref = a.double() @ b.double()
    err = (out.double() - ref).norm() / ref.norm()
    backend = f"compiled, {torch.cuda.get_device_name()}" if device == "cuda" else "Triton interpreter"
    print(f"td.gemm {m}x{n}x{k} fp16 on {device} ({backend}): out {tuple(out.shape)} {out.dtype}, "
          f"relative error vs float64 {err:.2e}")
    assert err < 2e-3, err

    # The registry td.gemm used, and the kernel it selects for this problem:
    problem = td.GemmProblem(m, n, k, dtype="fp16", layout="rcr")
    selection = td.api.default_registry(problem).select(problem)
    print(f"selected {selection.kernel.name} (strategy: {selection.strategy})")


if __name__ == "__main__":
    main()
