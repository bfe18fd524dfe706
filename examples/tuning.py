"""Tuning: strategy="tune" times the best-ranked candidates on this device and stores the winner in the tuning
database; a later select with the default strategy ("auto") finds it there.

On a CPU-only machine the timings are Triton-interpreter timings (they show the mechanism, not GPU
performance). The database lives under $TILEDISPATCH_CACHE_DIR (or at $TILEDISPATCH_TUNING_DB).

    python examples/tuning.py
"""
import torch

import tiledispatch as td

NAMES = [
    "gemm-tiled-rcr-fp16-fp16-fp32-32x32x32-w4-s2-g8-k1-e1-a1-none-bnone-d0-c0",
    "gemm-tiled-rcr-fp16-fp16-fp32-64x32x32-w4-s2-g8-k1-e1-a1-none-bnone-d0-c0",
    "gemm-splitk-rcr-fp16-fp16-fp32-32x32x32-w4-s2-g8-k2-e1-a1-none-bnone-d0-c0",
]


def main() -> None:
    on_gpu = torch.cuda.is_available()
    registry = td.Registry()
    for name in NAMES:
        registry.add(name)
    print(f"build: {registry.build()}")

    problem = td.GemmProblem(*((1000, 1000, 1000) if on_gpu else (50, 40, 100)), dtype="fp16", layout="rcr")
    print(f"problem: {problem.describe()} (signature {problem.signature()})")

    ranked = registry.select(problem, strategy="rules")
    print(f"rules pick: {ranked.kernel.name}")

    tuned = registry.select(problem, strategy="tune")
    print(f"tune pick:  {tuned.kernel.name}" + (" (on padded copies)" if tuned.padded else ""))
    for label, ms in tuned.ranking:
        print(f"  {ms:10.4f} ms  {label}")
    print(f"tuning DB:  {registry.tuning_db.path}")

    # A new registry (as in a new process) with the default strategy finds the measured winner.
    fresh = td.Registry()
    for name in NAMES:
        fresh.add(name)
    fresh.build()
    auto = fresh.select(problem)
    print(f"auto pick:  {auto.kernel.name} (strategy: {auto.strategy})")
    assert auto.strategy == "tuning_db" and auto.kernel.name == tuned.kernel.name


if __name__ == "__main__":
    main()
