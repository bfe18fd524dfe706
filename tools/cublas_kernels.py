"""Which cuBLAS kernels torch.mm runs on given bf16 shapes (names carry the tile, cluster and split scheme) and
their mean device time, under torch.profiler on the GPU: a lead for what our instances lack on those shapes.

    python tools/cublas_kernels.py [--shapes 256x3584x3584,...] [--layout rcr] [--json PATH]
"""
from __future__ import annotations

import argparse
import json

import torch
from profile_padding import kernels_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shapes", default="256x3584x3584,256x6144x4096,256x4096x14336,256x3584x18944,"
                                        "256x28672x4096,1000x1000x1000,64x4096x4096,1024x1024x1024")
    ap.add_argument("--layout", default="rcr")
    ap.add_argument("--json")
    opts = ap.parse_args()
    rows = []
    for shape in opts.shapes.split(","):
        m, n, k = (int(v) for v in shape.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16).T if opts.layout[1] == "c"
             else torch.randn(k, n, device="cuda", dtype=torch.bfloat16))
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        kernels = kernels_of(lambda: torch.mm(a, b, out=out), width=None)
        rows.append({"shape": shape, "layout": opts.layout, "kernels": kernels})
        print(shape, opts.layout)
        for name, us in kernels:
            print(f"    {us:8.1f} us  {name}")
    if opts.json:
        with open(opts.json, "w") as fh:
            json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
