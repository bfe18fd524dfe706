"""Probe: time a whole config grid (every valid config of the named families) on a few GEMM shapes.

Answers "does any instance we can build reach X on this shape?" beyond the shipped presets: builds the grid in
parallel, checks each output against an fp32 reference, times each instance as the benchmark does (CUDA events,
L2 flushed before each call, median) next to torch.mm, and prints the fastest.

    python tools/probe_space.py --dtype fp16 --shapes 1000x1000x1000,1000x1000x1000@AB \
        --families tiled,tma_persistent --block-k 64,128,256 [--json PATH]

A shape's `@` suffix names the operands (A, B, C) whose rows start 128-byte aligned: views of wider buffers.
"""
from __future__ import annotations

import argparse
import functools
import json
import time

import torch

import tiledispatch as td
from tiledispatch.bench.timer import FLUSH_MB, flushed_event_samples, quantile
from tiledispatch.configs.space import gemm_space
from tiledispatch.kernels.family import is_valid_config

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2}


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(","))


def grid(opts: argparse.Namespace) -> dict[str, tuple[int, ...]]:
    return {"block_m": ints(opts.block_m), "block_n": ints(opts.block_n), "block_k": ints(opts.block_k),
            "num_warps": ints(opts.warps), "num_stages": ints(opts.stages), "group_m": ints(opts.group_m),
            "align": (16,), "split_k": ints(opts.split_k), "subtile": ints(opts.subtile)}


def pitch(cols: int, dtype: torch.dtype) -> int:
    """Elements per row of a buffer whose rows of `cols` elements are padded to 128 bytes."""
    return -(-cols * dtype.itemsize // 128) * 128 // dtype.itemsize


def matrix(rows: int, cols: int, dtype: torch.dtype, aligned: bool) -> torch.Tensor:
    """rows x cols of normal values (fp8: cast from fp32), row-major; with `aligned`, a view of a buffer whose
    rows are padded to 128 bytes."""
    width = pitch(cols, dtype) if aligned else cols
    return torch.randn(rows, width, device="cuda").to(dtype)[:, :cols]


def time_shape(reg: td.Registry, names: list[str], shape: str, opts: argparse.Namespace,
               flush: torch.Tensor) -> list[dict]:
    """`shape`: MxNxK, optionally @ and the operands (A, B, C) whose rows start 128-byte aligned."""
    dims, _, aligned = shape.partition("@")
    m, n, k = (int(v) for v in dims.split("x"))
    dtype = TORCH_DTYPES[opts.dtype]
    a, b = matrix(m, k, dtype, "A" in aligned), matrix(n, k, dtype, "B" in aligned).t()   # rcr
    out = matrix(m, n, dtype, "C" in aligned)
    ref = a.float() @ b.float()
    runs = {"torch.mm": lambda: torch.mm(a, b, out=out)}
    for name in names:
        runs[name] = functools.partial(reg.get(name).run, a, b, out=out)
    rows = []
    for name, fn in runs.items():
        out.zero_()
        try:
            fn()
        except td.TileDispatchError as exc:
            rows.append({"shape": shape, "instance": name, "error": str(exc)})
            continue
        err = float((out.float() - ref).norm() / ref.norm())
        row = {"shape": shape, "instance": name, "rel_err": err}
        if err <= TOLERANCE[opts.dtype]:
            samples = flushed_event_samples(fn, opts.samples, flush, torch.device("cuda"))
            row.update(us=quantile(samples, 0.5) * 1e3, p20_us=quantile(samples, 0.2) * 1e3,
                       p80_us=quantile(samples, 0.8) * 1e3)
        rows.append(row)
    return rows


def report(rows: list[dict], top: int) -> None:
    for shape in dict.fromkeys(r["shape"] for r in rows):
        timed = sorted((r for r in rows if r["shape"] == shape and "us" in r), key=lambda r: r["us"])
        vendor = next(r["us"] for r in timed if r["instance"] == "torch.mm")
        wrong = [r["instance"] for r in rows if r["shape"] == shape and "us" not in r]
        print(f"{shape}: torch.mm {vendor:.2f} us, {len(timed) - 1} instances timed, {len(wrong)} wrong or failed")
        for r in timed[:top]:
            print(f"  {r['us']:6.2f} us  ratio {vendor / r['us']:.3f}  {r['instance']}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="fp16", choices=sorted(TORCH_DTYPES))
    parser.add_argument("--shapes", default="1000x1000x1000")
    parser.add_argument("--families", default="tiled,tma_persistent,tma_ws,streamk")
    parser.add_argument("--block-m", default="64,128")
    parser.add_argument("--block-n", default="64,128,256")
    parser.add_argument("--block-k", default="64,128,256")
    parser.add_argument("--warps", default="4,8")
    parser.add_argument("--stages", default="2,3,4,5,6")
    parser.add_argument("--group-m", default="8")
    parser.add_argument("--split-k", default="1")
    parser.add_argument("--subtile", default="1", help="epilogue subtiles (0: pointer stores)")
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--json")
    opts = parser.parse_args()
    arch = td.detect()
    reg = td.Registry(arch)
    configs = list(gemm_space(opts.dtype, "rcr", arch, tuple(opts.families.split(",")), grid(opts),
                              is_valid=is_valid_config))
    for cfg in configs:
        reg.add(cfg)
    began = time.perf_counter()
    build = reg.build()
    names = [c.name for c in configs if c.name not in build.failed]
    print(f"{len(configs)} configs, {len(names)} built in {time.perf_counter() - began:.0f} s, "
          f"{len(build.failed)} failed", flush=True)
    flush = torch.empty(FLUSH_MB * 2**20, dtype=torch.int8, device="cuda")
    rows = [row for shape in opts.shapes.split(",") for row in time_shape(reg, names, shape, opts, flush)]
    report(rows, opts.top)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "argv": vars(opts),
                       "failed": build.failed, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
