"""`tiledispatch info`: versions, GPU, arch, cache, shipped cost models, presets."""
from __future__ import annotations

import os
from typing import Any

import typer

from tiledispatch import settings
from tiledispatch.cli.cache_cmds import mib, triton_cache_stats
from tiledispatch.cli.output import emit_json, out_console, text
from tiledispatch.cli.problem_args import JsonOpt
from tiledispatch.errors import TileDispatchError

NO_GPU = "none (Triton interpreter for CPU tensors)"


def _gpu() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {"name": NO_GPU, "count": 0, "cuda": torch.version.cuda}
    index = torch.cuda.current_device()
    major, minor = torch.cuda.get_device_capability(index)
    return {"name": torch.cuda.get_device_name(index), "count": torch.cuda.device_count(),
            "capability": f"sm_{major}{minor}", "cuda": torch.version.cuda}


def _arch() -> dict[str, Any]:
    import torch

    from tiledispatch.arch.spec import detect, known_archs

    spec = detect()
    source = "the visible GPU" if torch.cuda.is_available() else "no GPU: $TILEDISPATCH_ARCH or the default"
    return {"name": spec.name, "source": source, "sm_count": spec.sm_count, "known": list(known_archs())}


def _models() -> list[dict[str, Any]]:
    """The cost models shipped in the package (models/<arch>/<key>/meta.json), each with a line of its
    metadata and whether this version can use it."""
    from tiledispatch.ml.model import META_FILE, check_spec, read_meta
    from tiledispatch.select.cost_model import models_root

    rows = []
    for folder in sorted(p.parent for p in models_root().glob(f"*/*/{META_FILE}")):
        row: dict[str, Any] = {"arch": folder.parent.name, "key": folder.name, "path": str(folder)}
        try:
            meta = read_meta(folder)
            check_spec(meta, None, folder)
        except TileDispatchError as exc:
            rows.append({**row, "usable": False, "summary": f"not used: {exc}"})
            continue
        rows.append({**row, "usable": True, "summary": _model_summary(meta)})
    return rows


def _model_summary(meta: dict[str, Any]) -> str:
    trained = meta.get("trained_on", {})
    versions = meta.get("versions", {})
    return (f"{meta['kind']}, {trained.get('problems', '?')} problems ({trained.get('rows', '?')} rows) "
            f"measured on {meta.get('gpu', '?')}, triton {versions.get('triton', '?')}, "
            f"{str(meta.get('created', '?'))[:10]}")


def collect() -> dict[str, Any]:
    import torch
    import triton

    from tiledispatch.build.cache import cache_stats
    from tiledispatch.presets import list_presets
    from tiledispatch.select.tuning_db import default_path
    from tiledispatch.version import __version__

    arch, root = _arch(), settings.cache_dir()
    env = {name: os.environ[name] for name in settings.ENV_VARS if os.environ.get(name)}
    return {
        "tiledispatch": __version__, "triton": triton.__version__, "torch": torch.__version__,
        "gpu": _gpu(), "arch": arch, "cache": {**cache_stats(root), "triton": triton_cache_stats(root)},
        "tuning_db": str(default_path(arch["name"])), "models": _models(), "presets": list_presets(),
        "environment": env,
    }


def info(json_out: JsonOpt = False) -> None:
    """Versions, GPU, target arch, cache and tuning DB locations, presets."""
    data = collect()
    if json_out:
        emit_json(data)
        return
    _print(data)


def _print(data: dict[str, Any]) -> None:
    gpu, arch, cache = data["gpu"], data["arch"], data["cache"]
    rows = [
        ("tiledispatch", data["tiledispatch"]), ("triton", data["triton"]), ("torch", data["torch"]),
        ("gpu", gpu["name"] + (f" ({gpu['capability']}, {gpu['count']} visible)" if gpu["count"] else "")),
        ("arch", f"{arch['name']} (from {arch['source']})"),
        ("cache dir", _cache_line(cache)),
        ("tuning db", data["tuning_db"]),
    ]
    rows += _model_rows(data["models"])
    rows += [(f"${name}", value) for name, value in data["environment"].items()]
    rows.append(("presets", _preset_summary(data["presets"])))
    console = out_console()
    width = max(len(key) for key, _ in rows) + 2
    for key, value in rows:
        console.print(text(f"{key:<{width}}{value}"))


def _cache_line(cache: dict[str, Any]) -> str:
    triton = cache["triton"]
    return (f"{cache['root']} ({cache['entries']} kernels, {mib(cache['bytes'])}; Triton's cache: "
            f"{triton['entries']} entries, {mib(triton['bytes'])})")


def _preset_summary(names: list[str]) -> str:
    ops: dict[str, int] = {}
    for name in names:
        op = name.split("_", 1)[0]
        ops[op] = ops.get(op, 0) + 1
    counts = ", ".join(f"{count} {op}" for op, count in sorted(ops.items()))
    return f"{len(names)}: {counts} (tiledispatch list shows them by op, list --preset NAME one)"


def _model_rows(models: list[dict[str, Any]]) -> list[tuple[str, str]]:
    if not models:
        return [("cost models", "none shipped (selection uses the tuning DB, then rules)")]
    usable = sum(1 for m in models if m["usable"])
    rows = [("cost models", f"{len(models)} shipped, {usable} usable by this version (strategy auto / ml)")]
    width = max(len(f"{m['arch']}/{m['key']}") for m in models) + 2
    return rows + [("", f"{m['arch'] + '/' + m['key']:<{width}}{m['summary']}") for m in models]


def register(app: typer.Typer) -> None:
    app.command("info")(info)
