"""`tiledispatch demo`: declare a few instances, build, select, run a GEMM with a fused epilogue, validate."""
from typing import Any

import typer

from tiledispatch.cli.measure import Target, measure, pick_target
from tiledispatch.cli.output import EXIT_FAILURE, fail, note, out_console, text
from tiledispatch.cli.problem_args import TargetOpt, WorkersOpt
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.registry.registry import Registry

EPILOGUE = Epilogue(activation="gelu", bias="col")
# Small tiles compile in seconds on two CPU cores and run quickly on the interpreter; the 128x128 and 64x64
# aligned tiles are what a GPU would pick for the 1024-cube problem.
DEMO_TILES = (  # family, block_m, block_n, block_k, num_warps, num_stages, split_k, align
    ("tiled", 32, 32, 32, 4, 2, 1, 1),
    ("tiled", 64, 32, 32, 4, 2, 1, 1),
    ("splitk", 32, 32, 32, 4, 2, 2, 1),
    ("tiled", 64, 64, 32, 4, 3, 1, 16),
    ("tiled", 128, 128, 32, 4, 3, 1, 16),
)
GPU_SHAPE = (1024, 1024, 1024)
CPU_SHAPE = (100, 72, 96)   # odd sizes: unaligned rows, partial tiles in every dimension


def demo_configs(dtype: str = "fp16", layout: str = "rcr") -> list[GemmConfig]:
    fields = ("family", "block_m", "block_n", "block_k", "num_warps", "num_stages", "split_k", "align")
    configs = [GemmConfig(dtype=dtype, layout=layout, **dict(zip(fields, tile, strict=True)))
               for tile in DEMO_TILES]
    return [cfg.with_epilogue(EPILOGUE) for cfg in configs]


def demo_problem(target: Target) -> GemmProblem:
    shape = GPU_SHAPE if target.backend == "cuda" else CPU_SHAPE
    return GemmProblem(*shape, dtype="fp16", layout="rcr", epilogue=EPILOGUE)


def _say(label: str, value: Any, style: str = "") -> None:
    out_console().print(text(f"{label:<11}{value}", style=style))


def demo(gpu_target: TargetOpt = None, jobs: WorkersOpt = None) -> None:
    """A tour: 5 fp16 instances with a fused bias+GELU epilogue -> build -> select -> run -> validate."""
    from tiledispatch.cli.registries import build_for_use
    from tiledispatch.testing.inputs import make_args

    registry = Registry(gpu_target)
    for cfg in demo_configs():
        registry.add(cfg)
    _say("declared", f"{len(registry)} fp16 rcr instances with epilogue gelu(A@B + bias[n]) for "
         f"{registry.arch.name}")
    report = build_for_use(registry, jobs, quiet=True)
    _say("built", f"{report}  (cache: {registry.cache_dir})")
    target = pick_target(registry)
    problem = demo_problem(target)
    _say("problem", problem.describe())
    selection = registry.select(problem)
    _say("selected", selection.kernel.name)
    _say("strategy", selection.strategy + ("; " + "; ".join(selection.notes) if selection.notes else ""))
    result = measure(selection, problem, make_args(problem, target.device), target, validate=True)
    _say("backend", f"GPU (compiled {registry.arch.name} cubins)" if target.backend == "cuda"
         else "Triton interpreter on the CPU (no GPU visible)")
    _say("device", target.name)
    ex, check = result["execution"], result["validation"]
    timing = f"{ex['time_ms']:.4f} ms, {ex['tflops']:.4g} TFLOP/s"
    if target.backend != "cuda":
        timing += "  (interpreter time, not GPU performance)"
    _say("time", timing)
    _say("error", f"max_abs_err={check['max_abs_err']:.3e} rel_err={check['rel_err']:.3e} "
         "vs float64 reference")
    verdict = "PASSED" if check["passed"] else "FAILED"
    _say("validation", verdict, style="bold green" if check["passed"] else "bold red")
    if not check["passed"]:
        raise fail("demo: the fused GEMM did not match the float64 reference", EXIT_FAILURE)
    note("next: tiledispatch run gemm 100 72 96 --dtype fp16 --activation gelu --bias col --validate")


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
