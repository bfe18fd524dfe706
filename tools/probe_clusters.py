"""Probe: tma_persistent GEMM instances compiled with Triton's num_ctas=2 (a 2-CTA cluster computes each tile,
the CTAs splitting its columns) against the same instances with num_ctas=1 and cuBLAS, on the GPU.

Only the pointer-store epilogue (subtile 0) compiles with num_ctas=2 in Triton 3.6 (the descriptor store fails
to legalize ttg.local_store). Times follow the benchmark protocol (256 MB L2 flush outside CUDA events, median);
each output is checked against torch.matmul first.

    python tools/probe_clusters.py --shapes 1000x1000x1000,1024x1024x1024 --names NAME[,NAME] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
import triton
from triton.compiler import ASTSource

from tiledispatch.bench.timer import FLUSH_MB, flushed_event_samples, quantile
from tiledispatch.build.loader import import_source
from tiledispatch.codegen.render import render_source
from tiledispatch.configs.naming import parse_name
from tiledispatch.kernels import gemm_tma
from tiledispatch.kernels import tma_common as tma
from tiledispatch.runtime.launcher import ensure_scratch_allocator

def compiled(name: str, ctas: int, workdir: Path):
    cfg = parse_name(name)
    path = workdir / f"{name}.py"
    path.write_text(render_source(cfg))
    (spec,) = gemm_tma.entries(cfg)
    src = ASTSource(getattr(import_source(path, interpret=False), spec.fn), spec.signature(), spec.constexprs(),
                    spec.attrs())
    kernel = triton.compile(src, options={"num_warps": spec.num_warps, "num_stages": spec.num_stages,
                                          "num_ctas": ctas})
    return cfg, spec, kernel


def launch(cfg, spec, kernel, ctas: int, a, b, out) -> None:
    m, k = a.shape
    n = b.shape[0]
    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    programs = min(tiles, 132 // ctas * tma.programs_per_sm(cfg, gemm_tma.resources(cfg)))
    values = {"a_ptr": a, "b_ptr": b, "out_ptr": out, "M": m, "N": n, "K": k, "BATCH": 1, "NUM_PROGRAMS": programs,
              "stride_ab": 0, "stride_ar": k, "stride_bb": 0, "stride_bc": k, "stride_ob": 0, "stride_or": n,
              "alpha": 1.0}
    args = [p.value if p.is_constexpr else values[p.name] for p in spec.params]
    ensure_scratch_allocator()
    kernel[(programs, 1, 1)](*args)


def timed_us(fn, flush, reps: int = 50) -> float:
    """Median µs of `reps` calls, each with the L2 flushed before it (outside the CUDA events)."""
    fn()
    return quantile(flushed_event_samples(fn, reps, flush, flush.device), 0.5) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--names", required=True, help="rcr bf16/fp16 tma_persistent instances with subtile 0")
    ap.add_argument("--json")
    opts = ap.parse_args()
    workdir = Path(tempfile.mkdtemp())
    flush = torch.empty(FLUSH_MB * 2**20, dtype=torch.int8, device="cuda")
    kernels, failed = {}, {}
    for name in opts.names.split(","):
        for ctas in (1, 2):
            try:
                kernels[(name, ctas)] = compiled(name, ctas, workdir)
            except RuntimeError as exc:      # Triton's pass manager: recorded, the probe goes on
                failed[f"{name} ctas={ctas}"] = str(exc).strip().splitlines()[-1]
                print(f"{name} ctas={ctas}: compile failed ({failed[f'{name} ctas={ctas}']})")
    rows = []
    for shape in opts.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        gen = torch.Generator(device="cuda").manual_seed(m + n + k)
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[next(iter(kernels.values()))[0].dtype]
        a = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
        bt = torch.randn(n, k, device="cuda", generator=gen).to(dtype)     # B column-major: B^T row-major
        ref = (a.float() @ bt.float().T)
        out = torch.empty(m, n, dtype=dtype, device="cuda")
        row = {"shape": shape, "cublas_us": timed_us(lambda: torch.mm(a, bt.T, out=out), flush), "instances": {}}
        for (name, ctas), (cfg, spec, kernel) in kernels.items():
            out.fill_(float("nan"))
            launch(cfg, spec, kernel, ctas, a, bt, out)
            err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            us = timed_us(lambda: launch(cfg, spec, kernel, ctas, a, bt, out), flush)
            row["instances"][f"{name} ctas={ctas}"] = {"us": us, "max_rel_err": err}
            print(f"{shape} {name} ctas={ctas}: {us:.1f} us (cuBLAS {row['cublas_us']:.1f}), err {err:.2e}")
        rows.append(row)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "failed": failed, "rows": rows},
                                              indent=1))


if __name__ == "__main__":
    main()
