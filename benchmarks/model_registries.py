"""The default registries benchmarks/models.py needs: built up front in one worker pool on a GPU
(`prebuild`), or replaced by one small kernel each for the CPU smoke run (`install_smoke`).

Importing this module does no work.
"""
from __future__ import annotations

from typing import Any

# the epilogues converted layers run: conv (direction, bias) and linear (layout, bias) problems
CONV_EPILOGUES = (("fwd", False), ("fwd", True), ("bwd_data", False), ("bwd_weight", False))
GEMM_EPILOGUES = (("rcr", "col"), ("rcr", "none"), ("rrr", "none"), ("crr", "none"))
TD_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def install_smoke() -> None:
    """Small registries (one small kernel each, tiledispatch.testing.small_defaults) as the default registries
    of the fp32 problems the smoke models run, so the interpreter run does not build the essential presets
    (minutes each on a small CPU)."""
    from tiledispatch.testing import small_defaults

    keys = [small_defaults.conv_key(direction, "fp32", ndim, bias=bias)
            for ndim in (2, 3) for direction, bias in CONV_EPILOGUES]
    keys += [small_defaults.gemm_key("fp32", layout, bias=bias_mode) for layout, bias_mode in GEMM_EPILOGUES]
    print(f"smoke: building {len(keys)} small kernels (cached after the first run)", flush=True)
    small_defaults.install(small_defaults.registries(keys))


def prebuild(ndims: list[int], dtype_name: str) -> dict[str, Any]:
    """Build every kernel of the default registries converted models of these conv ndims and torch dtype
    will use, in one worker pool (the default path then loads them from the cache instead of building each
    registry on its first call)."""
    import tiledispatch as td

    dtype = TD_DTYPES[dtype_name]
    registry = td.Registry()
    for ndim in ndims:
        for direction, bias in CONV_EPILOGUES:
            registry.add_preset(f"conv_{direction}_{dtype}_{ndim}d_essential", ("none", bias))
    for layout, bias_mode in GEMM_EPILOGUES:
        registry.add_preset(f"gemm_{dtype}_{layout}_essential", td.Epilogue(bias=bias_mode))
    print(f"prebuild: {len(registry)} kernels of the default registries", flush=True)
    result = registry.build()
    print(f"prebuild: {result}", flush=True)
    return {"kernels": len(registry), "built": len(result.built), "cached": len(result.cached),
            "failed": result.failed, "seconds": result.seconds}
