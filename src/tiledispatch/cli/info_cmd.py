"""`tiledispatch info`: versions, GPU, arch, cache, presets."""
import os
from typing import Any

import typer

from tiledispatch import settings
from tiledispatch.cli.output import emit_json, out_console, text
from tiledispatch.cli.problem_args import JsonOpt

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


def collect() -> dict[str, Any]:
    import torch
    import triton

    from tiledispatch.build.cache import cache_stats
    from tiledispatch.presets import list_presets
    from tiledispatch.select.tuning_db import default_path
    from tiledispatch.version import __version__

    arch = _arch()
    env = {name: os.environ[name] for name in settings.ENV_VARS if os.environ.get(name)}
    return {
        "tiledispatch": __version__, "triton": triton.__version__, "torch": torch.__version__,
        "gpu": _gpu(), "arch": arch, "cache": cache_stats(settings.cache_dir()),
        "tuning_db": str(default_path(arch["name"])), "models": [], "presets": list_presets(),
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
        ("cache dir", f"{cache['root']} ({cache['entries']} kernels, {cache['bytes'] / 2**20:.1f} MiB)"),
        ("tuning db", data["tuning_db"]),
        ("cost models", "none shipped yet (selection uses the tuning DB, then rules)"),
    ]
    rows += [(f"${name}", value) for name, value in data["environment"].items()]
    console = out_console()
    width = max(len(key) for key, _ in rows) + 2
    for key, value in rows:
        console.print(text(f"{key:<{width}}{value}"))
    from rich.columns import Columns

    count = len(data["presets"])
    console.print(text(f"{'presets':<{width}}{count} (tiledispatch list --preset NAME shows one)"))
    console.print(Columns([text(name) for name in data["presets"]], padding=(0, 2)))


def register(app: typer.Typer) -> None:
    app.command("info")(info)
