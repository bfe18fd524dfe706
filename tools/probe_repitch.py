"""Probe: does copying A and B into buffers with 128-byte aligned rows first pay for itself?

For GEMM shapes whose operand rows are 16- but not 128-byte aligned (1000x1000x1000 fp16: 2000-byte rows), time
next to torch.mm, with the benchmark's protocol (L2 flushed before each call, CUDA events, median): each named
instance run directly, and the same instance run on re-pitched copies (one copy launch for A and B into kept
zeroed buffers whose rows are padded to 128 bytes, runtime/operand_copy.py, then the GEMM on views of their
top-left corners). Each result is checked against an fp32 reference first.

    python tools/probe_repitch.py --shapes 1000x1000x1000 --dtype fp16 --instances NAME,NAME [--json PATH]
"""
from __future__ import annotations

import argparse
import functools
import json

import torch
from probe_space import pitch  # tools/ is the script's directory

import tiledispatch as td
from tiledispatch.bench.timer import FLUSH_MB, flushed_event_samples, quantile
from tiledispatch.runtime.operand_copy import Corner, CornerCopies

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2}


def pitched(rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """A zeroed buffer of `rows` rows of at least `cols` elements, padded to 128 bytes (probe_space.pitch)."""
    return torch.zeros(rows, pitch(cols, dtype), device="cuda", dtype=dtype)


def _repitched(kern, copies: CornerCopies, pairs: list, a2: torch.Tensor, b2: torch.Tensor,
               out: torch.Tensor) -> torch.Tensor:
    copies(pairs)
    return kern.run(a2, b2, out=out)


def plans(reg: td.Registry, names: list[str], m: int, n: int, k: int, dtype: torch.dtype) -> tuple:
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t()   # rcr: K-major B
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    ref = a.float() @ b.float()
    a2, b2 = pitched(m, k, dtype), pitched(n, k, dtype)
    copies = CornerCopies()
    pairs = [(Corner.of(a, a2), a), (Corner.of(b.t(), b2), b.t())]
    a2, b2 = a2[:, :k], b2[:, :k]
    runs = {"torch.mm": lambda: torch.mm(a, b, out=out)}
    for name in names:
        kern = reg.get(name)
        runs[name] = functools.partial(kern.run, a, b, out=out)
        runs[name + " (re-pitched)"] = functools.partial(_repitched, kern, copies, pairs, a2, b2.t(), out)
    return runs, out, ref


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shapes", default="1000x1000x1000")
    parser.add_argument("--dtype", default="fp16", choices=sorted(TORCH_DTYPES))
    parser.add_argument("--instances", required=True)
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--json")
    opts = parser.parse_args()
    names = opts.instances.split(",")
    reg = td.Registry(td.detect())
    for name in names:
        reg.add(td.parse_name(name))
    build = reg.build()
    if build.failed:
        raise SystemExit(f"builds failed: {build.failed}")
    flush = torch.empty(FLUSH_MB * 2**20, dtype=torch.int8, device="cuda")
    rows = []
    for shape in opts.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        runs, out, ref = plans(reg, names, m, n, k, TORCH_DTYPES[opts.dtype])
        for name, fn in runs.items():
            out.zero_()
            fn()
            err = float((out.float() - ref).norm() / ref.norm())
            row = {"shape": shape, "plan": name, "rel_err": err}
            if err <= TOLERANCE[opts.dtype]:
                samples = flushed_event_samples(fn, opts.samples, flush, torch.device("cuda"))
                row.update(us=quantile(samples, 0.5) * 1e3, p20_us=quantile(samples, 0.2) * 1e3,
                           p80_us=quantile(samples, 0.8) * 1e3)
            rows.append(row)
        base = next(r["us"] for r in rows if r["shape"] == shape and r["plan"] == "torch.mm")
        for r in rows:
            if r["shape"] == shape:
                ratio = f"{base / r['us']:.3f}" if "us" in r else "wrong"
                print(f"{shape} {r.get('us', float('nan')):7.2f} us ratio {ratio} {r['plan']}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "argv": vars(opts),
                       "protocol": "L2 flushed before each call, CUDA events, median", "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
