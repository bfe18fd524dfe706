"""Cut a kernel-cache archive down to the kernels of some presets, for one device call.

A device call carries at most 64 MiB (tracked files, .whl and .carry together), and the full sm_90 cache of
the bf16 `_all` presets does not fit beside the tracked files. This writes an .tar.xz of the cache entries
(`sm_90/<kernel name>/...`) whose kernel names belong to the named presets (shell-style patterns over preset
names), and says how many of the presets' kernels the source archive lacked (they compile on the device).

    python tools/carry_cache.py SOURCE.tar.xz OUT.tar.xz PATTERN [PATTERN ...]
    e.g. ... '*_bf16_*_essential' 'gemm_bf16_*_essential' conv_bwd_weight_bf16_3d_all
"""
from __future__ import annotations

import argparse
import fnmatch
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wanted_kernels(patterns: list[str]) -> tuple[set[str], list[str]]:
    """The kernel names of every preset matching one of `patterns`, and those presets."""
    from tiledispatch.presets import list_presets, load_preset

    presets = [p for p in list_presets() if any(fnmatch.fnmatchcase(p, pat) for pat in patterns)]
    return {c.name for p in presets for c in load_preset(p)}, presets


def cut(source: Path, out: Path, names: set[str]) -> tuple[int, set[str]]:
    """Copy the members of `source` under sm_90/<name>/ for `names` into `out`; (members, names found)."""
    found: set[str] = set()
    members = 0
    with tarfile.open(source, "r:xz") as src, tarfile.open(out, "w:xz") as dst:
        for member in src:
            parts = Path(member.name).parts
            if len(parts) >= 2 and parts[1] in names:
                found.add(parts[1])
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
                members += 1
    return members, found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("patterns", nargs="+", help="preset name patterns (fnmatch)")
    args = parser.parse_args(argv)
    names, presets = wanted_kernels(args.patterns)
    if not presets:
        parser.error(f"no preset matches {args.patterns}")
    members, found = cut(args.source, args.out, names)
    size = args.out.stat().st_size / 2**20
    print(f"{len(presets)} presets, {len(names)} kernels: {len(found)} in {args.source.name} "
          f"({members} files, {size:.1f} MiB -> {args.out}); {len(names) - len(found)} compile on the device")
    return 0


if __name__ == "__main__":
    sys.exit(main())
