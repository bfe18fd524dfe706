"""The `ml` strategy: LightGBM cost models shipped in the package, one per (arch, op, direction, dtype).

    tiledispatch/models/<arch>/<op>_<direction>_<dtype>/{model.txt.gz, meta.json}

A model is used only when its arch and feature spec version match (ml.model.CostModel.load refuses
others); without one, selection falls back to the rules and says so in the selection's notes. A key in
STAND_IN without a model of its own is ranked by the model of its stand-in dtype (see STAND_IN).
Importing this module does no work; a model is loaded once per process, on first use.
"""
from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.problems.conv import ConvProblem

MODELS_PACKAGE = "tiledispatch.models"
# (op, dtype) -> the dtype whose model ranks it while it has none of its own. fp16 conv kernels are the bf16
# kernels with the other 2-byte element type: same code, tensor-core rate and bytes, so every feature of a
# problem and config equals the bf16 one. No fp16 conv sweep has measured how close the ranking is.
STAND_IN = {("conv", "fp16"): "bf16"}


def model_key(problem: Any) -> str:
    """`<op>_<direction>_<dtype>` of a problem (GEMM's direction is 'none', as in datasets)."""
    if isinstance(problem, ConvProblem):
        return f"conv_{problem.direction}_{problem.dtype}"
    return f"gemm_none_{problem.dtype}"


def models_root() -> Path:
    return Path(str(resources.files(MODELS_PACKAGE)))


def config_model_key(config: GemmConfig | ConvConfig) -> str:
    """The model key of the problems a config's kernels compute (as model_key)."""
    if isinstance(config, ConvConfig):
        return f"conv_{config.direction}_{config.dtype}"
    return f"gemm_none_{config.dtype}"


def model_dir(arch: str, key: str) -> Path:
    """Where the model of (arch, key) is: in the active bundle when it ships one (bundle/), else in the
    package."""
    from tiledispatch.bundle.active import current

    bundle = current()
    folder = bundle.model_dir(arch, key) if bundle is not None else None
    return folder if folder is not None else models_root() / arch / key


@functools.cache
def _load(folder: Path, arch: str, key: str) -> tuple[Any, str]:
    """(model or None, why not) for a shipped model directory."""
    if not (folder / "meta.json").is_file():
        return None, f"no cost model for {arch} {key.replace('_', ' ')}"
    from tiledispatch.ml.model import CostModel, ModelMismatch

    try:
        return CostModel.load(folder, arch=arch), ""
    except ModelMismatch as exc:
        return None, f"cost model {arch}/{key} refused: {exc}"


def shipped_model(arch: str, problem: Any) -> tuple[Any, str]:
    """The shipped model for `problem` on `arch` (or its STAND_IN's), or (None, the reason there is none)."""
    key = model_key(problem)
    model, why_not = _load(model_dir(arch, key), arch, key)
    other = _stand_in_key(key)
    if model is None and other is not None:
        base = _standing_in(model_dir(arch, other), arch, other, problem.dtype)
        if base is not None:
            return base, ""
    return model, why_not


def serving_key(arch: str, key: str) -> str | None:
    """The model key whose files rank problems of `key` on `arch`: key itself, its STAND_IN's, or None
    (what a bundle ships for kernels of `key`)."""
    for candidate in (key, _stand_in_key(key)):
        if candidate is not None and (model_dir(arch, candidate) / "meta.json").is_file():
            return candidate
    return None


def _stand_in_key(key: str) -> str | None:
    """The model key of `key`'s STAND_IN dtype (`conv_fwd_fp16` -> `conv_fwd_bf16`), or None."""
    op, dtype = key.split("_")[0], key.rsplit("_", 1)[1]
    stand_in = STAND_IN.get((op, dtype))
    return None if stand_in is None else key.removesuffix(dtype) + stand_in


@functools.cache
def _standing_in(folder: Path, arch: str, key: str, dtype: str) -> Any:
    """The model of `key` (in `folder`) keyed to `dtype`, or None when there is none."""
    model, _ = _load(folder, arch, key)
    return None if model is None else model.standing_in(dtype)
