"""The tensor-free compile task. Its fields are the pool task and the cache key at once."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from tiledispatch.build import cache
from tiledispatch.kernels.spec import EntrySpec


@dataclasses.dataclass(frozen=True)
class CompileTask:
    name: str
    arch: str           # "sm_90"
    cc: int             # 90
    fingerprint: str
    source: str
    cache_root: str

    @property
    def entry(self) -> Path:
        return cache.entry_dir(Path(self.cache_root), self.arch, self.name, self.fingerprint)


@dataclasses.dataclass(frozen=True)
class CompileResult:
    name: str
    ok: bool
    seconds: float
    reason: str = ""
    path: str = ""


def compile_entries(source_path: Path, cc: int, out_dir: Path) -> dict[str, dict]:
    """Compile every entry of a generated source file for compute capability `cc`; write cubin + metadata."""
    import triton
    from triton.backends.compiler import GPUTarget

    from tiledispatch.build.loader import import_source

    module = import_source(source_path, interpret=False)
    target = GPUTarget("cuda", cc, 32)
    resources = {}
    for raw in module.ENTRIES:
        spec = EntrySpec.from_json(raw)
        src = spec.ast_source(module)
        compiled = triton.compile(src, target=target,
                                  options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
        (out_dir / f"{spec.fn}.cubin").write_bytes(compiled.asm["cubin"])
        (out_dir / f"{spec.fn}.json").write_text((Path(compiled.metadata_group[f"{spec.fn}.json"])).read_text())
        resources[spec.fn] = {"shared": compiled.metadata.shared, "num_warps": spec.num_warps}
    return resources


def run_task(task: CompileTask) -> CompileResult:
    """Build one instance into the cache. A compile failure is returned, never raised (any exception: a
    hand-edited or foreign source can fail at import time with NameError, SyntaxError, ...)."""
    start = time.perf_counter()
    root = Path(task.cache_root)
    staging = cache.new_staging_dir(root, task.arch)
    source_path = staging / cache.SOURCE
    source_path.write_text(task.source)
    try:
        resources = compile_entries(source_path, task.cc, staging)
    except Exception as exc:  # noqa: BLE001 - recorded per instance in BuildReport.failed
        cache.remove_entry(staging)
        reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
        return CompileResult(task.name, False, time.perf_counter() - start, reason[:500])
    manifest = {"name": task.name, "arch": task.arch, "fingerprint": task.fingerprint, "resources": resources,
                "compile_seconds": round(time.perf_counter() - start, 3)}
    final = cache.publish(staging, task.entry, manifest)
    return CompileResult(task.name, True, time.perf_counter() - start, path=str(final))
