"""First calls from a bundle against a cold JIT start (issue 39's GPU acceptance).

Two fresh processes, each with an empty build cache and an empty Triton cache:

- `bundle`: TILEDISPATCH_BUNDLE=<bundle> and TILEDISPATCH_BUNDLE_STRICT=1 (a compile would raise);
- `cold`: no bundle, so the first call of each key compiles its essential preset.

Each process runs td.gemm, then td.conv, td.conv_bwd_data and td.conv_bwd_weight. It times every first call
(synchronized) and the process's import. It counts the kernels compiled and checks each result against torch.
The bundle must hold gemm_<dtype>_rcr_essential and conv_{fwd,bwd_data,bwd_weight}_<dtype>_2d_essential:

    tiledispatch export --preset gemm_bf16_rcr_essential --preset conv_fwd_bf16_2d_essential \\
        --preset conv_bwd_data_bf16_2d_essential --preset conv_bwd_weight_bf16_2d_essential \\
        --gpu-target sm_90 --out /tmp/td-bundle
    python tools/bundle_first_call.py --bundle /tmp/td-bundle --out bundle_first_call.json

Without a GPU, `--device cpu --dtype fp16` runs the same on Triton's interpreter with small shapes.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _calls(device: str, dtype: str):
    """(name, run, reference) of the four first calls: small shapes on the CPU, model-like ones on a GPU."""
    import torch

    import tiledispatch as td

    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    big = device == "cuda"
    m, n, k = (4096, 4096, 4096) if big else (48, 40, 64)
    nb, c, hw, groups = (32, 256, 56, 32) if big else (2, 8, 6, 4)
    cl = torch.channels_last
    a = torch.randn(m, k, device=device, dtype=dt)
    b = torch.randn(n, k, device=device, dtype=dt).t()          # rcr: B column-major
    x = torch.randn(nb, c, hw, hw, device=device, dtype=dt).contiguous(memory_format=cl)
    w = torch.randn(c, c // groups, 3, 3, device=device, dtype=dt).contiguous(memory_format=cl)
    dy = torch.randn(nb, c, hw, hw, device=device, dtype=dt).contiguous(memory_format=cl)
    f = torch.nn.functional
    geometry = {"stride": 1, "padding": 1, "dilation": 1, "groups": groups}

    def grads():
        xr = x.float().requires_grad_()
        wr = w.float().requires_grad_()
        f.conv2d(xr, wr, padding=1, groups=groups).backward(dy.float())
        return xr.grad, wr.grad

    return [
        ("gemm", lambda: td.gemm(a, b), lambda: a.float() @ b.float()),
        ("conv_fwd", lambda: td.conv(x, w, **geometry), lambda: f.conv2d(x.float(), w.float(), padding=1,
                                                                          groups=groups)),
        ("conv_bwd_data", lambda: td.conv_bwd_data(dy, w, x.shape, **geometry), lambda: grads()[0]),
        ("conv_bwd_weight", lambda: td.conv_bwd_weight(x, dy, w.shape, **geometry), lambda: grads()[1]),
    ]


def child(device: str, dtype: str) -> dict:
    """Run in the fresh process: first-call times, compilations, errors against torch."""
    start = time.perf_counter()
    import torch

    import tiledispatch as td  # noqa: F401 - timed: the import is part of a start
    from tiledispatch.build.pool import compilations
    from tiledispatch.bundle.active import current

    out: dict = {"import_s": time.perf_counter() - start, "calls": {}}
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for name, run, reference in _calls(device, dtype):
        before = compilations()
        t = time.perf_counter()
        result = run()
        sync()
        seconds = time.perf_counter() - t
        ref = reference()
        err = ((result.float() - ref).norm() / ref.norm().clamp_min(1e-12)).item()
        out["calls"][name] = {"first_call_s": seconds, "compiled": compilations() - before, "rel_err": err}
    bundle = current()
    out["compiled"] = compilations()
    out["bundle"] = bundle.stats() if bundle is not None else None
    out["device"] = torch.cuda.get_device_name() if device == "cuda" else "cpu-interpreter"
    return out


def run_fresh(mode: str, bundle: str | None, device: str, dtype: str) -> dict:
    """One fresh process (empty caches); `bundle` mode runs from the bundle, strictly."""
    with tempfile.TemporaryDirectory(prefix=f"td-first-call-{mode}-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TILEDISPATCH_BUNDLE")}
        env.update(TILEDISPATCH_CACHE_DIR=str(Path(tmp) / "cache"),
                   TRITON_CACHE_DIR=str(Path(tmp) / "triton"))
        if mode == "bundle":
            env.update(TILEDISPATCH_BUNDLE=str(bundle), TILEDISPATCH_BUNDLE_STRICT="1")
        command = [sys.executable, __file__, "--child", "--device", device, "--dtype", dtype]
        t = time.perf_counter()
        result = subprocess.run(command, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t
    if result.returncode != 0:
        raise SystemExit(f"{mode} process failed:\n{result.stderr[-4000:]}")
    return {**json.loads(result.stdout.strip().splitlines()[-1]), "process_wall_s": wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bundle", help="bundle directory (tiledispatch export --out)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    parser.add_argument("--skip-cold", action="store_true", help="run from the bundle only")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.device, args.dtype)))
        return
    if not args.bundle:
        parser.error("--bundle is required")
    results = {"bundle": run_fresh("bundle", args.bundle, args.device, args.dtype)}
    if not args.skip_cold:
        results["cold"] = run_fresh("cold", None, args.device, args.dtype)
    for mode, data in results.items():
        calls = ", ".join(f"{name} {c['first_call_s']:.3f} s ({c['compiled']} compiled, "
                          f"err {c['rel_err']:.1e})" for name, c in data["calls"].items())
        print(f"{mode:6} on {data['device']}: import {data['import_s']:.2f} s; {calls}; "
              f"{data['compiled']} kernels compiled; process {data['process_wall_s']:.1f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    if results["bundle"]["compiled"] != 0:
        raise SystemExit(f"the bundle run compiled {results['bundle']['compiled']} kernels")


if __name__ == "__main__":
    main()
