"""GPU checks of an exported C library against torch (tests/bundle/test_capi_gpu.py, tools/capi_gpu_check.py):
run one table problem through the library on random CUDA tensors of its exact strides and compare with
torch's result in fp32; time the host side of calls.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tiledispatch.bundle.capi.binding import CapiLibrary
from tiledispatch.bundle.capi.problems import ConvSpec, GemmSpec, conv_shapes


def _tensor(shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any, fill: bool = True) -> Any:
    import torch

    t = torch.empty_strided(shape, strides, dtype=dtype, device="cuda")
    if fill:
        t.copy_(torch.randn(shape, device="cuda") * 0.5)
    return t


def relative_error(got: Any, want: Any) -> float:
    """max |got - want| / max |want| (in fp32)."""
    diff = (got.float() - want.float()).abs().max().item()
    return diff / max(want.float().abs().max().item(), 1e-6)


def gemm_error(lib: CapiLibrary, spec: GemmSpec) -> float:
    """Run `spec` through td_gemm and return its relative error against torch.matmul in fp32."""
    import torch

    from tiledispatch.dtypes import torch_dtype

    dtype = torch_dtype("fp32" if spec.dtype == "tf32" else spec.dtype)
    batch = spec.batch
    a = _tensor((batch, spec.m, spec.k), spec.a_strides, dtype)
    b = _tensor((batch, spec.k, spec.n), spec.b_strides, dtype)
    out = _tensor((batch, spec.m, spec.n), spec.out_strides, dtype, fill=False)
    lib.gemm(a if batch > 1 else a[0], b if batch > 1 else b[0], out if batch > 1 else out[0], spec.dtype)
    torch.cuda.synchronize()
    return relative_error(out, torch.matmul(a.float(), b.float()))


def conv_error(lib: CapiLibrary, spec: ConvSpec) -> float:
    """Run `spec` through td_conv (its direction) and return the relative error against torch's fp32
    convolution or its gradient."""
    import torch
    import torch.nn.functional as F
    from torch.nn import grad

    from tiledispatch.dtypes import torch_dtype

    p = spec.problem
    dtype = torch_dtype(p.dtype)
    shapes = conv_shapes(p)
    written = {"fwd": "y", "bwd_data": "x", "bwd_weight": "w"}[p.direction]
    strides = {"x": spec.x_strides, "w": spec.w_strides, "y": spec.y_strides}
    t = {role: _tensor(shapes[role], strides[role], dtype, fill=role != written) for role in shapes}
    lib.conv(p, t["x"], t["w"], t["y"])
    torch.cuda.synchronize()
    if any(lo != hi for lo, hi in p.padding):
        raise ValueError("asymmetric padding: torch's reference takes symmetric padding only")
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[p.ndim]
    grads = {1: grad.conv1d_input, 2: grad.conv2d_input, 3: grad.conv3d_input}
    weights = {1: grad.conv1d_weight, 2: grad.conv2d_weight, 3: grad.conv3d_weight}
    geometry = {"stride": p.stride, "padding": tuple(lo for lo, _ in p.padding), "dilation": p.dilation,
                "groups": p.groups}
    x, w, y = (t[role].float() for role in ("x", "w", "y"))
    if p.direction == "fwd":
        want = conv(x, w, **geometry)
    elif p.direction == "bwd_data":
        want = grads[p.ndim](shapes["x"], w, y, **geometry)
    else:
        want = weights[p.ndim](x, shapes["w"], y, **geometry)
    return relative_error(t[written], want)


def host_us(call: Callable[[], Any], rounds: int = 20, per_round: int = 100) -> dict[str, float]:
    """Host time of `call` in µs: `rounds` rounds of `per_round` calls, each timed alone (no synchronisation
    inside a round; the GPU drains between rounds). Median, 10th and 90th percentile."""
    import torch

    for _ in range(per_round):
        call()
    torch.cuda.synchronize()
    times = []
    clock = time.perf_counter_ns
    for _ in range(rounds):
        for _ in range(per_round):
            t0 = clock()
            call()
            times.append((clock() - t0) / 1e3)
        torch.cuda.synchronize()
    times.sort()
    n = len(times)
    return {"median": times[n // 2], "p10": times[n // 10], "p90": times[n * 9 // 10], "calls": n}
