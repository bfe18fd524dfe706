"""`tiledispatch cache info|clear`: the build cache, Triton's cache and the tuning DB under
$TILEDISPATCH_CACHE_DIR."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from tiledispatch import settings
from tiledispatch.cli.output import emit_json, out_console, table, text
from tiledispatch.cli.problem_args import JsonOpt
from tiledispatch.errors import CacheError

cache_app = typer.Typer(help="Inspect or clear the build cache.", no_args_is_help=True)
TRITON_SUBDIR = ".triton"   # where build workers point TRITON_CACHE_DIR (build/pool.py)


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def triton_cache_stats(root: Path) -> dict[str, Any]:
    """Triton's own cache inside ours: one entry per compiled-kernel hash directory."""
    folder = root / TRITON_SUBDIR
    entries, size = 0, 0
    if folder.is_dir():
        for entry in folder.iterdir():
            entries += entry.is_dir()
            files = entry.rglob("*") if entry.is_dir() else [entry]
            size += sum(f.stat().st_size for f in files if f.is_file())
    return {"root": str(folder), "entries": entries, "bytes": size}


def _per_arch(root: Path) -> dict[str, int]:
    from tiledispatch.build.cache import MANIFEST

    counts: dict[str, int] = {}
    if root.is_dir():
        for arch_dir in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("sm_")):
            counts[arch_dir.name] = sum(1 for _ in arch_dir.glob(f"*/*/{MANIFEST}"))
    return counts


def _tuning_files(root: Path) -> list[str]:
    folder = root / "tuning"
    return sorted(str(p) for p in folder.glob("*.json")) if folder.is_dir() else []


@cache_app.command("info")
def cache_info(json_out: JsonOpt = False) -> None:
    """Where the cache is, how many built kernels it holds (per arch), its size, and Triton's cache in it."""
    from tiledispatch.build.cache import cache_stats

    root = settings.cache_dir()
    if root.exists() and not root.is_dir():
        raise CacheError(f"the cache dir {root} is not a directory (set $TILEDISPATCH_CACHE_DIR to a folder)",
                         field="cache_dir")
    data: dict[str, Any] = {**cache_stats(root), "per_arch": _per_arch(root),
                            "triton": triton_cache_stats(root), "tuning_dbs": _tuning_files(root)}
    if json_out:
        emit_json(data)
        return
    console = out_console()
    console.print(text(f"cache dir: {data['root']}" + ("" if root.exists() else " (does not exist yet)")))
    console.print(text(f"{data['entries']} built kernels, {mib(data['bytes'])}"))
    triton = data["triton"]
    console.print(text(f"Triton's cache: {triton['root']} ({triton['entries']} entries, "
                       f"{mib(triton['bytes'])})"))
    if data["per_arch"]:
        rows = table("arch", "kernels #")
        for arch, count in data["per_arch"].items():
            rows.add_row(text(arch), text(count))
        console.print(rows)
    for path in data["tuning_dbs"]:
        console.print(text(f"tuning DB: {path}"))


@cache_app.command("clear")
def cache_clear(json_out: JsonOpt = False) -> None:
    """Delete everything under the cache dir (built kernels, Triton's cache and the tuning DB kept there)."""
    from tiledispatch.build.cache import clear

    root = settings.cache_dir()
    removed = clear(root)
    if json_out:
        emit_json({"root": str(root), "removed_entries": removed})
        return
    out_console().print(text(f"removed {removed} built kernels (and Triton's cache, any tuning DB) from "
                             f"{root}"))


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")
