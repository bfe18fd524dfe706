"""Small default registries for the CPU lane: one small kernel per default-registry key, in place of the
essential preset that a first use of td.gemm / td.conv* builds (15-54 compiles per key, 20-35 s each on a
2-core CPU). Tests of what runs on the default registries (modules, custom ops, autograd, torch.compile) use
them; tests of the selection over the real presets (tests/test_api_gemm.py, tests/test_api_conv.py) do not.

The registries hold no vendor plan: a problem the small kernel cannot run fails loudly instead of running on
torch. Importing this module does no work.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.problems.gemm import Epilogue
from tiledispatch.testing import small_config

if TYPE_CHECKING:
    from tiledispatch.registry.registry import Registry


def conv_key(direction: str, dtype: str, ndim: int, activation: str = "none", bias: bool = False) -> tuple:
    """The default-registry key of td.conv* problems of this direction, dtype, ndim and epilogue."""
    return ("conv", direction, dtype, ndim, activation, bias)


def gemm_key(dtype: str, layout: str, activation: str = "none", bias: str = "none") -> tuple:
    """The default-registry key of td.gemm problems of this dtype, layout and epilogue."""
    return ("gemm", dtype, layout, Epilogue(activation, bias))


def config(key: tuple) -> ConvConfig | GemmConfig:
    """The small kernel of a default-registry key: an implicit-GEMM conv (runs every geometry, direction and
    group count) or a tiled GEMM; small tiles, unaligned, specialised to the key's epilogue."""
    if key[0] == "conv":
        _, direction, dtype, ndim, activation, bias = key
        return ConvConfig(family="igemm", direction=direction, ndim=ndim, dtype=dtype, block_m=32, block_n=16,
                          block_k=16, num_warps=4, num_stages=2, align=1, activation=activation, bias=bias)
    _, dtype, layout, epilogue = key
    return small_config("tiled", layout, dtype).with_epilogue(epilogue)


def registries(keys: Iterable[tuple]) -> dict[tuple, Registry]:
    """A built registry of the small kernel of each key (all compiled in one worker pool, or loaded from the
    build cache)."""
    from tiledispatch.registry.registry import Registry

    keys = list(dict.fromkeys(keys))
    universe = Registry()
    for key in keys:
        universe.add(config(key))
    report = universe.build()
    if report.failed:
        raise RuntimeError(f"small default kernels failed to build: {report.failed}")
    out = {}
    for key in keys:
        registry = Registry()
        registry.add(config(key))
        registry.build()   # from the cache the universe filled
        out[key] = registry
    return out


def install(small: dict[tuple, Registry]) -> None:
    """Use each registry as the default registry of its key; `defaults.reset()` goes back to the presets."""
    from tiledispatch.dispatch import defaults

    for key, registry in small.items():
        defaults.install(key, registry)
