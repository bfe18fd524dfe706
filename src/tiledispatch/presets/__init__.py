"""Packaged presets: JSON files listing configs by name ("configs") or as a space ("space")."""
from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.errors import InvalidConfig, bad_choice


def list_presets() -> list[str]:
    files = resources.files("tiledispatch.presets").iterdir()
    return sorted(f.name[:-5] for f in files if f.name.endswith(".json"))


def _read(name: str) -> dict:
    """The preset's JSON: the active bundle's copy when it exported this preset (bundle/), else the
    package's."""
    from tiledispatch.bundle.active import current

    bundle = current()
    bundled = bundle.preset_file(name) if bundle is not None else None
    if bundled is not None:
        return _parse(str(bundled))
    if name not in list_presets():
        raise bad_choice(InvalidConfig, "preset", name, list_presets())
    return _parse(name)


@functools.cache
def _parse(source: str) -> dict:
    """A packaged preset by name, or a bundled one by path (read once)."""
    if source.endswith(".json"):
        return json.loads(Path(source).read_text())
    return json.loads(resources.files("tiledispatch.presets").joinpath(f"{source}.json").read_text())


def preset_text(name: str) -> str:
    """The packaged JSON file of a preset, as written (what a bundle ships)."""
    if name not in list_presets():
        raise bad_choice(InvalidConfig, "preset", name, list_presets())
    return resources.files("tiledispatch.presets").joinpath(f"{name}.json").read_text()


def preset_info(name: str) -> dict:
    return dict(_read(name))


def _config(entry: str | dict) -> GemmConfig | ConvConfig:
    if isinstance(entry, str):
        return parse_name(entry)
    return ConvConfig.from_dict(entry) if entry.get("op") == "conv" else GemmConfig.from_dict(entry)


def load_preset(name: str) -> list[GemmConfig | ConvConfig]:
    data = _read(name)
    if "configs" in data:
        return [_config(entry) for entry in data["configs"]]
    from tiledispatch.arch.spec import get_arch
    from tiledispatch.configs.space import gemm_space
    from tiledispatch.kernels.family import is_valid_config

    space = dict(data["space"])
    families = tuple(space.pop("families"))
    grid = {k: tuple(v) for k, v in space.pop("grid", {}).items()}
    return list(gemm_space(space["dtype"], space["layout"], get_arch(space["arch"]), families, grid,
                           is_valid=is_valid_config))


ESSENTIAL = "_essential"
# The preset holding a key's full declared space, by preference: GEMM's `_candidates` (every family's
# candidate tiles: what the GPU sweeps measure and the shipped GEMM models are trained on), else `_all` (conv:
# every candidate of every family; GEMM fp32 / tf32 / int8: tile grids of the tiled and splitk families).
SPACE_SUFFIXES = ("_candidates", "_all")


def space_of(preset: str) -> str | None:
    """The preset declaring the full space of an `_essential` preset's key (`<key>_candidates`, else
    `<key>_all`), or None when the preset is not an essential one or its key has no such preset."""
    if not preset.endswith(ESSENTIAL):
        return None
    key = preset[: -len(ESSENTIAL)]
    names = set(list_presets())
    return next((key + suffix for suffix in SPACE_SUFFIXES if key + suffix in names), None)
