"""GEMM kernel families. Each module renders Triton source for a config and describes its entries and grids."""
from __future__ import annotations

from types import ModuleType

from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.errors import InvalidConfig, bad_choice


def family_module(cfg: GemmConfig) -> ModuleType:
    from tiledispatch.kernels import gemm_splitk, gemm_streamk, gemm_tiled, gemm_tma

    table = {"tiled": gemm_tiled, "splitk": gemm_splitk, "tma_persistent": gemm_tma, "tma_ws": gemm_tma,
             "streamk": gemm_streamk}
    if cfg.family not in table:
        raise bad_choice(InvalidConfig, "family", cfg.family, table)
    return table[cfg.family]
