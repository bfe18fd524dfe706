"""Random inputs for a GemmProblem (normal data, never zeros) laid out as the problem says."""
from __future__ import annotations

from tiledispatch.dtypes import SCALED_DTYPES, torch_dtype
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.runtime.arguments import GemmArgs

FP8_SPREAD = 32.0


def _matrix(rows: int, cols: int, batch: int, letter: str, dtype: str, device, generator):
    import torch

    shape = (batch, rows, cols) if letter == "r" else (batch, cols, rows)
    if dtype == "int8":
        t = torch.randint(-8, 8, shape, generator=generator, dtype=torch.int8, device=generator.device)
    # spread over the fp8 range; the per-tensor scale brings it back to ~N(0, 1)
    elif dtype in SCALED_DTYPES:
        t = (torch.randn(shape, generator=generator, dtype=torch.float32, device=generator.device)
             * FP8_SPREAD).to(torch_dtype(dtype))
    else:
        t = torch.randn(shape, generator=generator, dtype=torch.float32,
                        device=generator.device).to(torch_dtype(dtype))
    t = t.to(device)
    t = t if letter == "r" else t.transpose(-1, -2)
    return t if batch > 1 else t[0]


def seeded_generator(device, seed: int):
    """A generator on the GPU for CUDA devices (inputs of real sizes are drawn there), else on the CPU."""
    import torch

    device = torch.device(device)
    return torch.Generator(device=device if device.type == "cuda" else "cpu").manual_seed(seed)


def make_args(problem: GemmProblem, device, seed: int = 0, alpha: float = 1.0, beta: float = 0.5) -> GemmArgs:
    """Inputs for `problem` on `device`. beta applies only when the epilogue reads C."""
    import torch

    gen = seeded_generator(device, seed)
    p, e = problem, problem.epilogue
    a = _matrix(p.m, p.k, p.batch, p.layout[0], p.dtype, device, gen)
    b = _matrix(p.k, p.n, p.batch, p.layout[1], p.dtype, device, gen)
    other = p.out_dtype if p.out_dtype != "int32" else "int8"

    def out_like():
        t = _matrix(p.m, p.n, p.batch, "r", other, device, gen)
        return t.to(torch_dtype(p.out_dtype))

    bias = None
    if e.bias != "none":
        length = p.m if e.bias == "row" else p.n
        bias = (torch.randn(length, generator=gen, device=gen.device) * 2).to(
            torch_dtype(p.out_dtype)).to(device)
    d = tuple(out_like() for _ in range(e.num_d))
    c = out_like() if e.with_c else None
    if p.acc_dtype == "int32":
        alpha, beta = int(alpha), 1
    beta_value = beta if e.with_c else 0.0
    args = GemmArgs(a, b, None, c, bias, e.bias, d, alpha, beta_value, e.activation, p.out_dtype,
                    p.dtype == "tf32")
    if p.dtype in SCALED_DTYPES:
        args.scale_a = torch.full((1,), 1.0 / FP8_SPREAD, dtype=torch.float32, device=device)
        args.scale_b = torch.full((1,), 0.5 / FP8_SPREAD, dtype=torch.float32, device=device)
    return args
