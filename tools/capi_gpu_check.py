"""The C ABI on a GPU, end to end, in one run: export a bundle of the bf16 GEMM and 2-D conv presets, export a
C library for a list of problems (>= 20 GEMMs and >= 20 per conv direction), check every problem through the
library against torch, build and run the C example, and time the host side of a call: the C path (from C and
through ctypes) against torch.mm and torch's cuDNN convolution. Writes DIR/capi_gpu_check.json.

    python tools/capi_gpu_check.py --out $OUT/capi          # H100 / H200, about 3-6 min on 16 cores
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PRESETS = ("gemm_bf16_rcr_essential", "conv_fwd_bf16_2d_essential", "conv_bwd_data_bf16_2d_essential",
           "conv_bwd_weight_bf16_2d_essential")
GEMMS = [(128, 128, 128), (64, 64, 64), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
         (2048, 2048, 2048), (4096, 4096, 4096), (8, 4096, 4096), (16, 1024, 4096), (32, 4096, 1024),
         (4096, 8, 1024), (1, 4096, 4096),
         (4096, 4096, 64), (768, 3072, 768), (3072, 768, 3072), (1000, 1000, 1000), (8192, 128, 256),
         (128, 8192, 256), (200, 512, 136), (96, 96, 4096), (2048, 512, 8192), (384, 1536, 384),
         (24, 40, 56), (1536, 1536, 64), (640, 1280, 320), (4096, 1024, 16)]
# n, c, k, h, w, r, s, stride, padding, dilation, groups
CONVS = [(1, 64, 64, 56, 56, 3, 3, 1, 1, 1, 1), (8, 64, 64, 56, 56, 3, 3, 1, 1, 1, 1),
         (8, 64, 256, 56, 56, 1, 1, 1, 0, 1, 1), (8, 256, 64, 56, 56, 1, 1, 1, 0, 1, 1),
         (8, 128, 128, 28, 28, 3, 3, 1, 1, 1, 1), (8, 256, 512, 28, 28, 1, 1, 2, 0, 1, 1),
         (8, 256, 256, 14, 14, 3, 3, 1, 1, 1, 1), (8, 512, 512, 7, 7, 3, 3, 1, 1, 1, 1),
         (8, 3, 64, 224, 224, 7, 7, 2, 3, 1, 1), (16, 32, 32, 32, 32, 3, 3, 1, 1, 1, 1),
         (4, 64, 128, 64, 64, 3, 3, 2, 1, 1, 1), (2, 128, 128, 32, 32, 3, 3, 1, 2, 2, 1),
         (8, 96, 96, 28, 28, 3, 3, 1, 1, 1, 96), (8, 128, 128, 28, 28, 3, 3, 1, 1, 1, 4),
         (32, 16, 16, 16, 16, 3, 3, 1, 1, 1, 1), (1, 512, 512, 14, 14, 3, 3, 1, 1, 1, 1),
         (4, 32, 64, 100, 60, 5, 5, 1, 2, 1, 1), (2, 64, 32, 17, 23, 3, 3, 1, 1, 1, 1),
         (8, 1024, 256, 14, 14, 1, 1, 1, 0, 1, 1), (8, 48, 48, 40, 40, 3, 3, 2, 1, 1, 1),
         (16, 256, 256, 7, 7, 1, 1, 1, 0, 1, 1), (1, 16, 32, 128, 128, 3, 3, 1, 1, 1, 1),
         (8, 64, 64, 30, 30, 3, 3, 1, 0, 1, 1), (2, 40, 80, 21, 21, 3, 3, 2, 1, 1, 1)]
TIMED_GEMM, TIMED_CONV = (128, 128, 128), CONVS[0]


def say(message: str) -> None:
    print(f"[capi_gpu_check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def problems() -> dict:
    gemm = [{"m": m, "n": n, "k": k, "dtype": "bf16", "layout": "rcr"} for m, n, k in GEMMS]
    conv = [{"direction": d, "dtype": "bf16", "n": n, "c": c, "k": k, "spatial": [h, w], "filter": [r, s],
             "stride": st, "padding": pad, "dilation": dil, "groups": g}
            for d in ("fwd", "bwd_data", "bwd_weight") for n, c, k, h, w, r, s, st, pad, dil, g in CONVS]
    return {"gemm": gemm, "conv": conv}


def plannable(bundle_path: Path, data: dict) -> tuple[list, list[dict]]:
    """The problems some kernel of the bundle runs directly, and the others with the reason."""
    import tiledispatch as td
    from tiledispatch.bundle import active
    from tiledispatch.bundle.capi.plan import bundle_kernels, plan_problem
    from tiledispatch.bundle.capi.problems import parse_problems
    from tiledispatch.bundle.manifest import open_bundle

    bundle = open_bundle(bundle_path, arch=None)
    arch = td.get_arch(bundle.arch)
    kept, skipped = [], []
    with active.using(bundle):
        kernels = bundle_kernels(bundle, arch)
        for spec in parse_problems(data):
            try:
                plan_problem(spec, kernels, arch)
                kept.append(spec)
            except td.BundleError as exc:
                skipped.append({"problem": spec.describe(), "reason": str(exc)})
    return kept, skipped


def correctness(lib, specs) -> dict:
    from tiledispatch.bundle.capi.check import conv_error, gemm_error
    from tiledispatch.bundle.capi.problems import GemmSpec

    rows, summary = [], {}
    for spec in specs:
        op = "gemm" if isinstance(spec, GemmSpec) else spec.problem.direction
        try:
            err = gemm_error(lib, spec) if op == "gemm" else conv_error(lib, spec)
            row = {"op": op, "problem": spec.describe(), "rel_err": err, "ok": err < 2e-2}
        except Exception as exc:   # noqa: BLE001 - a tool: record every failure and go on
            row = {"op": op, "problem": spec.describe(), "error": f"{type(exc).__name__}: {exc}", "ok": False}
        row["instance"] = lib.select(_struct(spec))
        rows.append(row)
        tally = summary.setdefault(op, {"problems": 0, "ok": 0, "max_rel_err": 0.0})
        tally["problems"] += 1
        tally["ok"] += int(row["ok"])
        tally["max_rel_err"] = max(tally["max_rel_err"], row.get("rel_err", float("inf")))
    return {"summary": summary, "rows": rows}


def _struct(spec):
    from tiledispatch.bundle.capi.binding import conv_problem, gemm_problem
    from tiledispatch.bundle.capi.problems import GemmSpec

    if isinstance(spec, GemmSpec):
        return gemm_problem(spec.dtype, spec.m, spec.n, spec.k, spec.a_strides, spec.b_strides,
                            spec.out_strides, spec.batch)
    return conv_problem(spec.problem, spec.x_strides, spec.w_strides, spec.y_strides)


def overhead(lib) -> dict:
    """Per-call host µs: td_gemm / td_conv through ctypes, torch.mm(out=), F.conv2d (cuDNN), same problems."""
    import torch
    import torch.nn.functional as F

    from tiledispatch.bundle.capi.binding import conv_problem, gemm_problem
    from tiledispatch.bundle.capi.check import host_us
    from tiledispatch.bundle.capi.problems import parse_problems

    m, n, k = TIMED_GEMM
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    struct = gemm_problem("bf16", m, n, k, (0, k, 1), (0, 1, k), (0, n, 1))
    pa, pb, po, gemm = a.data_ptr(), b.data_ptr(), out.data_ptr(), lib.lib.td_gemm
    ref = ctypes.byref(struct)
    result = {"gemm": {"problem": f"bf16 rcr {m}x{n}x{k}",
                       "c_path_ctypes": host_us(lambda: gemm(ref, pa, pb, po, 1.0, None)),
                       "torch_mm_out": host_us(lambda: torch.mm(a, b, out=out)),
                       "torch_mm": host_us(lambda: torch.mm(a, b))}}
    nb, c, kk, h, w, r, s, st, pad, dil, g = TIMED_CONV
    spec = parse_problems({"conv": [{"direction": "fwd", "dtype": "bf16", "n": nb, "c": c, "k": kk,
                                     "spatial": [h, w], "filter": [r, s], "stride": st, "padding": pad}]})[0]
    x = torch.randn(nb, c, h, w, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    wt = torch.randn(kk, c, r, s, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    y = F.conv2d(x, wt, stride=st, padding=pad).contiguous(memory_format=torch.channels_last)
    cstruct = conv_problem(spec.problem, x.stride(), wt.stride(), y.stride())
    cref, px, pw, py, conv = ctypes.byref(cstruct), x.data_ptr(), wt.data_ptr(), y.data_ptr(), lib.lib.td_conv
    result["conv_fwd"] = {"problem": spec.problem.describe(),
                          "c_path_ctypes": host_us(lambda: conv(cref, px, pw, py, None)),
                          "torch_cudnn_conv2d": host_us(lambda: F.conv2d(x, wt, stride=st, padding=pad))}
    return result


def c_example(lib_dir: Path, out: Path) -> dict:
    """Build examples/capi_example.c against the library and run its GEMM and conv (host µs measured in C)."""
    from triton.backends.nvidia.driver import libcuda_dirs

    from tiledispatch.bundle.capi.codegen import cuda_include

    exe = out / "capi_example"
    source = Path(__file__).resolve().parent.parent / "examples" / "capi_example.c"
    command = ["gcc", "-O2", "-Wall", "-Werror", str(source), f"-I{lib_dir}", f"-I{cuda_include()}",
               f"-L{lib_dir}", "-ltdcapi", f"-Wl,-rpath,{lib_dir}", *(f"-L{d}" for d in libcuda_dirs()),
               "-l:libcuda.so.1", "-lm", "-o", str(exe)]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        return {"build": " ".join(command), "error": built.stderr[-3000:]}
    runs = {}
    m, n, k = TIMED_GEMM
    nb, c, kk, h, w, r, s, st, pad, _, _ = TIMED_CONV
    cases = (("gemm", ["gemm", m, n, k, 20]), ("conv_fwd", ["conv", nb, c, kk, h, w, r, s, st, pad, 20]))
    for name, args in cases:
        done = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, check=False,
                              timeout=300)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        runs[name] = {"rc": done.returncode, "result": json.loads(lines[-1]) if lines else None,
                      "stderr": done.stderr[-2000:]}
    return {"build": " ".join(command), "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for the bundle, library and JSON")
    parser.add_argument("--jobs", type=int, default=os.cpu_count(), help="compile workers")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    import torch

    from tiledispatch.bundle.capi.binding import CapiLibrary
    from tiledispatch.bundle.capi.export import export_capi
    from tiledispatch.bundle.export import export_bundle

    report: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    start = time.perf_counter()
    say(f"exporting the bundle of {', '.join(PRESETS)} with {args.jobs} workers")
    bundle = export_bundle(out / "bundle", PRESETS, arch=None, max_workers=args.jobs, force=True)
    report["bundle"] = {"kernels": bundle.kernels, "seconds": bundle.seconds, "build": str(bundle.build)}
    say(f"bundle: {bundle}")
    specs, skipped = plannable(Path(bundle.path), problems())
    report["skipped"] = skipped
    say(f"{len(specs)} problems have a direct plan, {len(skipped)} skipped")
    capi = export_capi(bundle.path, specs, out / "lib", force=True)
    report["capi"] = capi.to_dict()
    say(f"library: {capi}")
    lib = CapiLibrary(capi.library or "")
    report["correctness"] = correctness(lib, specs)
    say(f"correctness: {json.dumps(report['correctness']['summary'])}")
    report["overhead_python"] = overhead(lib)
    say(f"overhead (µs, median; from Python): {json.dumps(_medians(report['overhead_python']))}")
    report["c_example"] = c_example(out / "lib", out)
    say(f"C example: {json.dumps(report['c_example'].get('runs', report['c_example']))[:1500]}")
    report["seconds"] = time.perf_counter() - start
    path = out / "capi_gpu_check.json"
    path.write_text(json.dumps(report, indent=1))
    summary = report["correctness"]["summary"]
    ok = len(summary) == 4 and all(t["ok"] == t["problems"] >= 20 for t in summary.values())
    say(f"wrote {path} in {report['seconds']:.0f} s; every op >= 20 problems, all within 2e-2: {ok}")
    return 0 if ok else 1


def _medians(result: dict) -> dict:
    return {op: {k: round(v["median"], 2) for k, v in row.items() if isinstance(v, dict)}
            for op, row in result.items()}


if __name__ == "__main__":
    sys.exit(main())
