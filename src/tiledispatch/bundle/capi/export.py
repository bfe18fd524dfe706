"""export_capi: a C shared library of exact-problem plans from a bundle (CLI: `tiledispatch export-capi`).

For each problem of the list, selection runs over the bundle's kernels (with its cost models) as `auto` does
without measuring, and the chosen kernel's launches become a table entry; the library embeds the cubins, so
it is one file (plus the header) to ship. Written into a staging dir and renamed into place, like bundles.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tiledispatch.bundle.capi.c_header import ABI_VERSION, HEADER
from tiledispatch.bundle.capi.codegen import compile_library, generate
from tiledispatch.bundle.capi.plan import SELECT_STRATEGIES, bundle_kernels, plan_problem
from tiledispatch.bundle.capi.problems import ProblemSpec, parse_problems, read_problems
from tiledispatch.bundle.export import staged
from tiledispatch.errors import BadInput, BundleError, bad_choice

HEADER_FILE, SOURCE_FILE = "tiledispatch.h", "td_capi.c"
LIBRARY_FILE, TABLE_FILE = "libtdcapi.so", "capi.json"


@dataclasses.dataclass
class CapiReport:
    """What export_capi wrote: where, the plans (problem -> instance), the files and the time taken."""

    path: str
    arch: str
    plans: list[dict[str, Any]]
    kernels: int
    source_bytes: int
    library: str | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        built = f"library {self.library}" if self.library else "source only (not compiled)"
        return (f"{len(self.plans)} {self.arch} plans over {self.kernels} kernels (cubins embedded), "
                f"{self.source_bytes / 2**20:.1f} MiB of C; {built}; {self.seconds:.1f} s")


def export_capi(bundle_path: str | Path, problems: str | Path | dict | Iterable[ProblemSpec], out: str | Path,
                *, strategy: str = "auto", build: bool = True, compiler: str = "gcc",
                force: bool = False) -> CapiReport:
    """Write the C library of `problems` (a JSON file, its parsed dict, or ProblemSpecs) over the kernels of
    the bundle at `bundle_path` into the folder `out`: tiledispatch.h, td_capi.c, capi.json (each plan: the
    problem, its key, the instance chosen and why) and, with build=True, libtdcapi.so compiled with
    `compiler`. Raises BundleError naming the first problem no kernel of the bundle runs directly."""
    from tiledispatch.arch.spec import get_arch
    from tiledispatch.bundle import active
    from tiledispatch.bundle.manifest import open_bundle

    start = time.perf_counter()
    if strategy not in SELECT_STRATEGIES:
        raise bad_choice(BadInput, "strategy", strategy, SELECT_STRATEGIES)
    specs = _specs(problems)
    out = Path(out).expanduser().resolve()
    _check_out(out, force)
    bundle = open_bundle(bundle_path, arch=None)
    arch = get_arch(bundle.arch)
    with active.using(bundle):
        kernels = bundle_kernels(bundle, arch)
        plans = [plan_problem(spec, kernels, arch, strategy).to_dict() for spec in specs]
    source = generate(plans, arch.name, arch.cc)
    with staged(out, replace=True) as staging:   # _check_out refused an existing out without force
        (staging / HEADER_FILE).write_text(HEADER)
        (staging / SOURCE_FILE).write_text(source)
        (staging / TABLE_FILE).write_text(json.dumps(_table(bundle, plans), indent=1))
        if build:
            compile_library(staging / SOURCE_FILE, staging / LIBRARY_FILE, compiler)
    kernels_used = len({launch["kernel"] for plan in plans for launch in plan["launches"]})
    chosen = [{"problem": p["problem"], "instance": p["instance"]} for p in plans]
    library = str(out / LIBRARY_FILE) if build else None
    return CapiReport(str(out), arch.name, chosen, kernels_used, len(source.encode()), library,
                      time.perf_counter() - start)


def _specs(problems: str | Path | dict | Iterable[ProblemSpec]) -> list[ProblemSpec]:
    if isinstance(problems, (str, Path)):
        return read_problems(problems)
    if isinstance(problems, dict):
        return parse_problems(problems)
    return parse_problems({}) if not problems else list(problems)


def _table(bundle: Any, plans: list[dict[str, Any]]) -> dict[str, Any]:
    """capi.json: the bundle it came from and each plan without machine paths (cubins named by kernel)."""
    rows = []
    for plan in plans:
        launches = [{k: v for k, v in launch.items() if k != "cubin"} for launch in plan["launches"]]
        rows.append({**plan, "launches": launches})
    manifest = bundle.manifest
    return {"format": "tiledispatch-capi", "abi_version": ABI_VERSION, "arch": bundle.arch,
            "bundle": {"path": str(bundle.path), "created": manifest.get("created"),
                       "tiledispatch": manifest["tiledispatch"], "triton": manifest["triton"]},
            "plans": rows}


def _check_out(out: Path, force: bool) -> None:
    if not out.exists():
        return
    if not force:
        raise BundleError(f"--out {out} exists; remove it or pass --force to replace it", field="out")
    if not (out / TABLE_FILE).is_file() and any(out.iterdir()):
        raise BundleError(f"--out {out} exists and is not an export-capi folder; --force replaces only one",
                          field="out")
