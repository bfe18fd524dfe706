"""Device probe: run each TMA-family case in its own process with a timeout, to tell a hang in Triton's
lowering from one in tiledispatch's launcher. Usage: python tools/probe_tma.py [case ...]"""
from __future__ import annotations

import subprocess
import sys
import time

import torch

CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def _reg(**fields):
    import tiledispatch as td

    reg = td.Registry(td.detect())
    cfg = td.GemmConfig(layout="rcr", dtype="bf16", **fields)
    reg.add(cfg)
    assert not reg.build().failed
    return reg.get(cfg.name)


def _check(out, a, b):
    ref = a.float() @ b.float()
    err = float((out.float() - ref).norm() / ref.norm())
    assert err < 1e-2, err
    return err


def _ab(m=512, n=512, k=512):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    return a, b


def _family_run(family: str, warps: int = 8, shape: tuple[int, int, int] = (512, 512, 512)) -> float:
    """Kernel.run of one 128x128x64 instance of `family`, checked against torch."""
    k = _reg(family=family, block_m=128, block_n=128, block_k=64, num_warps=warps, num_stages=3)
    a, b = _ab(*shape)
    return _check(k.run(a, b), a, b)


@case
def tiled():
    return _family_run("tiled")


@case
def persistent():
    return _family_run("tma_persistent")


@case
def persistent_jit():
    """The generated kernel through Triton's own JIT launcher and a torch allocator."""
    import triton

    from tiledispatch.build import cache
    from tiledispatch.build.loader import import_source
    from tiledispatch.kernels.family import family_module
    from tiledispatch.runtime.arguments import GemmArgs, argument_values

    k = _reg(family="tma_persistent", block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    a, b = _ab()
    out = torch.empty(512, 512, device="cuda", dtype=torch.bfloat16)
    args = GemmArgs(a, b, out)
    plan = family_module(k.config).launch_plan(k.config, 512, 512, 512, 1, 132)
    values = argument_values(args, 512, 512, 512, dict(plan.scalars))
    (spec,) = family_module(k.config).entries(k.config)
    fn = getattr(import_source(k.entry_dir / cache.SOURCE, interpret=False), spec.fn)
    ordered = [p.value if p.is_constexpr else values[p.name] for p in spec.params]
    fn[plan.grids[0]](*ordered, num_warps=spec.num_warps, num_stages=spec.num_stages)
    return _check(out, a, b)


@case
def ws():
    return _family_run("tma_ws", warps=4)


@case
def streamk():
    return _family_run("streamk", shape=(640, 640, 512))


@case
def wsgrid():
    """tma_ws over epilogue kinds and shapes: which combinations leave elements unwritten or wrong."""
    import tiledispatch as td
    from tiledispatch.testing.inputs import make_args
    from tiledispatch.testing.reference import validate

    reg = td.Registry(td.detect())
    epilogues = [td.Epilogue(), td.Epilogue(with_c=True), td.Epilogue(num_d=1), td.Epilogue(bias="col"),
                 td.Epilogue("silu"), td.Epilogue("silu", with_c=True)]
    cfgs = [td.GemmConfig("tma_ws", "rcr", "fp16", block_m=128, block_n=128, block_k=64, num_warps=4,
                          num_stages=3).with_epilogue(e) for e in epilogues]
    for cfg in cfgs:
        reg.add(cfg)
    assert not reg.build().failed
    bad = 0
    for cfg in cfgs:
        for m, n, k in ((2064, 2064, 512), (1008, 1024, 96), (2048, 2048, 512), (4096, 4096, 512)):
            problem = td.GemmProblem(m, n, k, 1, "fp16", layout="rcr", epilogue=cfg.epilogue)
            args = make_args(problem, torch.device("cuda"), seed=1)
            args.out = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
            out = reg.get(cfg.name).launch(args, problem)
            res = validate(out, args, "fp16")
            nan = int(torch.isnan(out).sum())
            if not res["passed"]:
                bad += 1
                print(f"FAIL {cfg.epilogue} {m}x{n}x{k} nan={nan} rel={res['rel_err']:.3g}", flush=True)
    return float(bad)


@case
def skbench():
    """Stream-K against the best persistent tile and cuBLAS where tiles leave SMs idle."""
    import triton.testing

    import tiledispatch as td

    reg = td.Registry(td.detect())
    tiles = [("streamk", 128, 128, 4), ("streamk", 256, 128, 3), ("streamk", 256, 128, 4),
             ("tma_persistent", 256, 128, 3), ("tma_persistent", 128, 128, 4)]
    cfgs = [td.GemmConfig(f, "rcr", "bf16", block_m=bm, block_n=bn, block_k=64, num_warps=8, num_stages=s)
            for f, bm, bn, s in tiles]
    for cfg in cfgs:
        reg.add(cfg)
    assert not reg.build().failed
    for m, n, k in ((256, 3584, 18944), (256, 6144, 4096), (256, 4096, 14336), (256, 3584, 3584),
                    (256, 57344, 8192), (64, 4096, 4096), (1024, 1024, 1024)):
        a, b = _ab(m, n, k)
        cub = triton.testing.do_bench(lambda: a @ b, return_mode="median")
        line = [f"{m}x{n}x{k} cublas {cub * 1e3:.1f}us"]
        for cfg in cfgs:
            kern = reg.get(cfg.name)
            out = kern.run(a, b)
            _check(out, a, b)
            ms = triton.testing.do_bench(lambda: kern.run(a, b, out=out), return_mode="median")
            line.append(f"{cfg.family}-{cfg.block_m}x{cfg.block_n}-s{cfg.num_stages} {cub / ms:.2f}x")
        print(" | ".join(line), flush=True)
    return 0.0


def main() -> None:
    names = sys.argv[1:] or list(CASES)
    if len(names) == 1 and names[0].startswith("--one="):
        t = time.time()
        err = CASES[names[0][6:]]()
        torch.cuda.synchronize()
        print(f"ok err={err:.2e} {time.time() - t:.1f}s", flush=True)
        return
    for name in names:
        try:
            r = subprocess.run([sys.executable, __file__, f"--one={name}"], capture_output=True, text=True,
                               timeout=60)
            tail = (r.stdout + r.stderr).strip().splitlines()[-30:]
            print(f"{name}: rc={r.returncode} {chr(10).join(tail)[:4000]}", flush=True)
        except subprocess.TimeoutExpired:
            print(f"{name}: HANG (60 s)", flush=True)


if __name__ == "__main__":
    main()
