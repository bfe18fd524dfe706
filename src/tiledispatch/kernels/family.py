"""The kernel-family protocol: the module that builds each config, and the one validity predicate of both ops.

`family_module(cfg)` is the module of cfg's family. Besides entries(cfg), render(cfg) and launch_plan(...),
each family module owns its rules: config_errors(cfg, arch, errors) appends (field, reason) for each of its
rules that cfg breaks, problem_mismatch(cfg, problem) says why its kernel cannot compute a problem (None: it
can), and resources(cfg) estimates what one program holds. kernels/rules.py runs the op-wide rules around
them. Every caller (registry, selection, codegen, presets, tools, tests) asks the functions below, for GEMM
and conv alike.
"""
from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import TypeVar

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.conv import CONV_FAMILIES, ConvConfig
from tiledispatch.configs.fields import choice, raise_first_error
from tiledispatch.configs.gemm import GEMM_FAMILIES, GemmConfig
from tiledispatch.errors import InvalidConfig, bad_choice
from tiledispatch.kernels import rules
from tiledispatch.kernels.spec import Resources
from tiledispatch.problems.conv import DIRECTIONS, ConvProblem
from tiledispatch.problems.gemm import PROBLEM_ALIGNS, GemmProblem

Config = TypeVar("Config", GemmConfig, ConvConfig)

_GEMM = {"tiled": "gemm_tiled", "splitk": "gemm_splitk", "tma_persistent": "gemm_tma", "tma_ws": "gemm_tma",
         "streamk": "gemm_streamk"}
# conv: by family, then direction (None: every direction)
_CONV: dict[str, dict[str | None, str]] = {
    "igemm": {"fwd": "conv_igemm", "bwd_data": "conv_igemm", "bwd_weight": "conv_wgrad"},
    "direct": {None: "conv_direct"}, "gemm": {None: "conv_gemm"},
    "tma": {"fwd": "conv_tma", "bwd_data": "conv_tma", "bwd_weight": "conv_tma_wgrad"}}
# a family's k-loop with a module of its own
_CONV_KLOOPS = {("direct", "roll"): "conv_roll", ("direct", "halo"): "conv_halo",
                ("direct", "halofh"): "conv_halo_fh",
                ("gemm", "im2col"): "conv_im2col"}


def family_module(cfg: GemmConfig | ConvConfig) -> ModuleType:
    """The module of cfg's family (imported on first use)."""
    if isinstance(cfg, GemmConfig):
        if rules.is_ws_fp8(cfg):
            return importlib.import_module("tiledispatch.kernels.gemm_ws_fp8")   # the Gluon form
        if cfg.family not in _GEMM:
            raise bad_choice(InvalidConfig, "family", cfg.family, _GEMM)
        return importlib.import_module(f"tiledispatch.kernels.{_GEMM[cfg.family]}")
    if cfg.family not in _CONV:
        raise bad_choice(InvalidConfig, "family", cfg.family, _CONV)
    by_direction = _CONV[cfg.family]
    name = (_CONV_KLOOPS.get((cfg.family, cfg.kloop)) or by_direction.get(None)
            or by_direction.get(cfg.direction))
    if name is None:
        raise bad_choice(InvalidConfig, "direction", cfg.direction, DIRECTIONS)
    return importlib.import_module(f"tiledispatch.kernels.{name}")


def _checking_module(cfg: GemmConfig | ConvConfig) -> ModuleType:
    """The family module whose rules check cfg: a conv config of an unknown direction (reported by the op-wide
    rules) is checked by its family's forward module."""
    if isinstance(cfg, ConvConfig) and cfg.direction not in DIRECTIONS:
        return family_module(dataclasses.replace(cfg, direction="fwd"))
    return family_module(cfg)


def config_errors(cfg: GemmConfig | ConvConfig, arch: ArchSpec) -> list[tuple[str, str]]:
    """Every reason `cfg` cannot be built for `arch`, as (field, reason) in a fixed order (empty: valid)."""
    errors: list[tuple[str, str]] = []
    if isinstance(cfg, GemmConfig):
        if choice(errors, "family", cfg.family, GEMM_FAMILIES):
            rules.gemm_errors(cfg, arch, _checking_module(cfg), errors)
    elif choice(errors, "family", cfg.family, CONV_FAMILIES):
        rules.conv_errors(cfg, arch, _checking_module(cfg), errors)
    return errors


def is_valid_config(cfg: GemmConfig | ConvConfig, arch: ArchSpec) -> bool:
    return not config_errors(cfg, arch)


def check_config(cfg: Config, arch: ArchSpec) -> Config:
    """Return cfg, or raise InvalidConfig naming the first offending field."""
    raise_first_error(cfg, config_errors(cfg, arch))
    return cfg


def problem_mismatch(cfg: GemmConfig | ConvConfig, problem: GemmProblem | ConvProblem) -> str | None:
    """None when a kernel built from cfg computes `problem` exactly; otherwise the reason it cannot."""
    if isinstance(cfg, GemmConfig) and isinstance(problem, GemmProblem):
        reason = rules.gemm_mismatch(cfg, problem)
    elif isinstance(cfg, ConvConfig) and isinstance(problem, ConvProblem):
        reason = rules.conv_mismatch(cfg, problem)
    else:
        return f"op: kernel computes {cfg.op}, the problem is a {type(problem).__name__}"
    return reason or family_module(cfg).problem_mismatch(cfg, problem)


def least_padded(cfg: GemmConfig, problem: GemmProblem) -> GemmProblem | None:
    """The least padded form of `problem` (GemmProblem.padded, smallest align first) that a kernel built from
    cfg computes exactly, or None. An a16 kernel (TMA or vectorized pointer loads) needs 16-byte rows: align 8
    for 2-byte types, 16 for 1-byte ones."""
    for align in (a for a in PROBLEM_ALIGNS if a > problem.align):
        padded = problem.padded(align)
        if problem_mismatch(cfg, padded) is None:
            return padded
    return None


def resources(cfg: GemmConfig | ConvConfig) -> Resources:
    """What one program of cfg's kernel holds (shared memory, accumulators per thread, warps), as its family
    estimates it; cfg's tile fields and dtype must be legal."""
    return _checking_module(cfg).resources(cfg)
