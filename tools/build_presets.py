"""Build (compile into the cache) every packaged preset whose name starts with a prefix: a warm cache before a
benchmark or a GPU test run. Usage: python tools/build_presets.py conv_ [--contains bf16] [-j N]"""
from __future__ import annotations

import argparse
import time

import tiledispatch as td


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("prefix")
    parser.add_argument("--contains", default="", help="only presets whose name contains this")
    parser.add_argument("-j", "--jobs", type=int, default=None)
    args = parser.parse_args()
    registry = td.Registry()
    names = [p for p in td.list_presets() if p.startswith(args.prefix) and args.contains in p]
    for name in names:
        registry.add_preset(name)
    start = time.perf_counter()
    report = registry.build(max_workers=args.jobs)
    print(f"{len(names)} presets, {len(registry)} kernels: {report} ({time.perf_counter() - start:.1f} s)")
    for kernel, reason in report.failed.items():
        print(f"FAILED {kernel}: {reason}")


if __name__ == "__main__":
    main()
