"""Kernel families. Each module renders Triton source for a config and describes its entries and grids."""
from __future__ import annotations

from types import ModuleType
from typing import Any

from tiledispatch.configs.validity import is_ws_fp8
from tiledispatch.errors import InvalidConfig, bad_choice

_GEMM = {"tiled": "gemm_tiled", "splitk": "gemm_splitk", "tma_persistent": "gemm_tma", "tma_ws": "gemm_tma",
         "streamk": "gemm_streamk"}
# conv: by family, then direction (None: every direction)
_CONV = {"igemm": {"fwd": "conv_igemm", "bwd_data": "conv_igemm", "bwd_weight": "conv_wgrad"},
         "direct": {None: "conv_direct"}, "gemm": {None: "conv_gemm"},
         "tma": {"fwd": "conv_tma", "bwd_data": "conv_tma", "bwd_weight": "conv_tma_wgrad"}}
_CONV_KLOOPS = {("direct", "roll"): "conv_roll", ("gemm", "im2col"): "conv_im2col"}   # a family's k-loop with a module of its own


def family_module(cfg: Any) -> ModuleType:
    """The module of cfg's family: entries(cfg), render(cfg) and launch_plan(cfg, ...)."""
    import importlib

    if cfg.op == "gemm" and is_ws_fp8(cfg):
        return importlib.import_module("tiledispatch.kernels.gemm_ws_fp8")   # the Gluon form
    table = _CONV if cfg.op == "conv" else _GEMM
    if cfg.family not in table:
        raise bad_choice(InvalidConfig, "family", cfg.family, table)
    name = table[cfg.family]
    if cfg.op == "conv" and (cfg.family, cfg.kloop) in _CONV_KLOOPS:
        name = _CONV_KLOOPS[cfg.family, cfg.kloop]
    if isinstance(name, dict):
        name = name.get(None) or name[cfg.direction]
    return importlib.import_module(f"tiledispatch.kernels.{name}")
