"""Write generated instances to a directory: one source file each plus manifest.json."""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tiledispatch.codegen.render import render_source
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.errors import InvalidConfig
from tiledispatch.fsutil import atomic_write_text
from tiledispatch.version import __version__

MANIFEST = "manifest.json"


Config = GemmConfig | ConvConfig


def file_name(cfg: Config) -> str:
    return cfg.name.replace("-", "_") + ".py"


def write_instances(configs: Iterable[Config], output_dir: str | Path, arch: str) -> Path:
    """Render each config to `output_dir/<name>.py` and write the manifest; returns the manifest path.
    The manifest's op is the configs' op ("gemm" or "conv"), "mixed" when they differ."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for cfg in configs:
        path = out / file_name(cfg)
        atomic_write_text(path, render_source(cfg))
        rows.append({"name": cfg.name, "file": path.name, "config": cfg.to_dict()})
    ops = {row["config"].get("op", "gemm") for row in rows}
    op = ops.pop() if len(ops) == 1 else "mixed" if ops else "gemm"
    manifest = {"tiledispatch": __version__, "arch": arch, "op": op, "instances": rows}
    atomic_write_text(out / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return out / MANIFEST


def read_manifest(path: str | Path) -> tuple[str, list[tuple[Config, str]]]:
    """(arch, [(config, source text)]) of a codegen output directory or its manifest.json."""
    from tiledispatch.configs.naming import parse_name

    path = Path(path)
    manifest_path = path / MANIFEST if path.is_dir() else path
    try:
        manifest = json.loads(manifest_path.read_text())
        rows = manifest["instances"]
        arch = manifest["arch"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InvalidConfig(f"{manifest_path}: not a readable codegen manifest ({exc})",
                            field="manifest") from exc
    out = []
    for row in rows:
        cfg = parse_name(row["name"])
        out.append((cfg, (manifest_path.parent / row["file"]).read_text()))
    return arch, out
