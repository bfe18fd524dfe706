"""cuDNN against cuBLAS mm on ResNet-50's 1x1 convolutions, each direction alone (GPU, issue 35).

Per layer (batch 32, bf16 channels-last): cuDNN forward, weight gradient alone, data gradient alone, both
gradients in one convolution_backward call (as a compiled training graph asks), the same layer as mm
(stride 1 only), and the weight gradient with cudnn.benchmark off. triton's do_bench, median us, in a
process doing nothing else: the reference for what `auto` measured inside a model's process.

Usage (GPU):  python tools/probe_vendor_1x1.py OUT_DIR
"""
from __future__ import annotations

import json
import sys
from typing import Any

# (batch, in channels, out channels, spatial, stride): 1x1 layers of ResNet-50 at 224x224
CASES = [(32, 2048, 512, 7, 1), (32, 256, 1024, 14, 1), (32, 512, 1024, 28, 2), (32, 1024, 512, 14, 1),
         (32, 1024, 2048, 14, 2), (32, 128, 512, 28, 1), (32, 64, 256, 56, 1), (32, 512, 2048, 7, 1),
         (32, 256, 64, 56, 1)]


def us(fn: Any) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3


def layer(n: int, c: int, k: int, hw: int, s: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    cl = torch.channels_last
    x = torch.randn(n, c, hw, hw, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    w = torch.randn(k, c, 1, 1, device="cuda", dtype=torch.bfloat16).to(memory_format=cl)
    dy = torch.randn_like(F.conv2d(x, w, stride=s))

    def grads(mask: list[bool]) -> Any:
        return torch.ops.aten.convolution_backward(dy, x, w, None, [s, s], [0, 0], [1, 1], False, [0, 0], 1,
                                                   mask)

    row = {"case": [n, c, k, hw, s], "fwd_cudnn": us(lambda: F.conv2d(x, w, stride=s)),
           "bwd_w_only": us(lambda: grads([False, True, False])),
           "bwd_d_only": us(lambda: grads([True, False, False])),
           "bwd_both": us(lambda: grads([True, True, False]))}
    if s == 1:
        xm, dym = x.permute(0, 2, 3, 1).reshape(-1, c), dy.permute(0, 2, 3, 1).reshape(-1, k)
        wm = w.reshape(k, c)
        row.update(fwd_mm=us(lambda: xm @ wm.t()), bwd_d_mm=us(lambda: dym @ wm),
                   bwd_w_mm=us(lambda: dym.t() @ xm))
    torch.backends.cudnn.benchmark = False
    row["bwd_w_only_nobench"] = us(lambda: grads([False, True, False]))
    torch.backends.cudnn.benchmark = True
    return row


def main() -> None:
    import torch

    torch.backends.cudnn.benchmark = True
    rows = []
    for case in CASES:
        rows.append(layer(*case))
        print(json.dumps({k: round(v, 1) if isinstance(v, float) else v for k, v in rows[-1].items()}),
              flush=True)
    with open(f"{sys.argv[1]}/v1x1.json", "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
