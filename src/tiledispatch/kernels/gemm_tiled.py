"""Family `tiled`: one program per output tile, pointer loads with masks, group-M swizzle, fused epilogue."""
from __future__ import annotations

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.kernels import gemm_common as common
from tiledispatch.kernels import rules
from tiledispatch.kernels.spec import EntrySpec, LaunchPlan, Resources
from tiledispatch.problems.gemm import GemmProblem

FN = "gemm_tiled_kernel"


def entries(cfg: GemmConfig) -> list[EntrySpec]:
    params = [
        common.ptr("a_ptr", cfg.dtype, cfg.align), common.ptr("b_ptr", cfg.dtype, cfg.align),
        common.ptr("out_ptr", cfg.out_dtype, cfg.align), *common.epilogue_pointer_params(cfg),
        *common.size_params(cfg, "MNK"),
        *common.operand_params(cfg), *common.epilogue_scalar_params(cfg), *common.tile_constexprs(cfg),
    ]
    return [EntrySpec(FN, tuple(params), cfg.num_warps, cfg.num_stages)]


def render(cfg: GemmConfig) -> str:
    (entry,) = entries(cfg)
    return (
        f"@triton.jit\ndef {FN}(\n    {common.signature_text(list(entry.params))},\n):\n"
        "    pid_b = tl.program_id(1)\n"
        + common.SWIZZLE
        + common.main_loop(cfg, "0", "K")
        + common.epilogue(cfg)
    )


def launch_plan(cfg: GemmConfig, m: int, n: int, k: int, batch: int, sms: int) -> LaunchPlan:
    return LaunchPlan(((common.tile_count(cfg, m, n), batch, 1),))


# -- rules ---------------------------------------------------------------------------------------------------
def config_errors(cfg: GemmConfig, arch: ArchSpec, errors: rules.Errors) -> None:
    rules.unsplit_errors(cfg, errors)
    rules.subtile_errors(cfg, errors, subtiles=False)


def problem_mismatch(cfg: GemmConfig, problem: GemmProblem) -> str | None:
    return rules.grid_mismatch(problem.batch)


def resources(cfg: GemmConfig) -> Resources:
    """The pipelined A and B tiles; every warp holds accumulators."""
    return rules.tile_resources(cfg, cfg.num_warps)
