"""Config spaces: the full valid grid of each family for a dtype and layout (the `_all` presets)."""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

from tiledispatch.arch.spec import ArchSpec
from tiledispatch.configs.gemm import GemmConfig

DEFAULT_GRID: dict[str, tuple[Any, ...]] = {
    "block_m": (16, 32, 64, 128, 256),
    "block_n": (32, 64, 128, 256),
    "block_k": (32, 64, 128),
    "num_warps": (4, 8),
    "num_stages": (2, 3, 4, 5),
    "group_m": (8,),
    "align": (16, 1),
}
SPLIT_K_GRID = (2, 4, 8, 16)


def gemm_space(dtype: str, layout: str, arch: ArchSpec, families: tuple[str, ...] = ("tiled", "splitk"),
               grid: dict[str, tuple[Any, ...]] | None = None, *,
               is_valid: Callable[[GemmConfig, ArchSpec], bool]) -> Iterator[GemmConfig]:
    """Every config of `families` over the grid that `is_valid` accepts on `arch` (the validity predicate,
    kernels/family.is_valid_config), in a deterministic order."""
    grid = {**DEFAULT_GRID, **(grid or {})}
    keys = list(grid)
    for family in families:
        splits = (1,) if family == "tiled" else tuple(grid.get("split_k", SPLIT_K_GRID))
        for values in itertools.product(*(grid[k] for k in keys if k != "split_k"), splits):
            fields = dict(zip([k for k in keys if k != "split_k"] + ["split_k"], values))
            cfg = GemmConfig(family=family, layout=layout, dtype=dtype, **fields)
            if is_valid(cfg, arch):
                yield cfg
