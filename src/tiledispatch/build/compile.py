"""The tensor-free compile task. Its fields are the pool task and the cache key at once."""
from __future__ import annotations

import dataclasses
import os
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
        (out_dir / f"{spec.fn}.json").write_text(
            (Path(compiled.metadata_group[f"{spec.fn}.json"])).read_text())
        resources[spec.fn] = {"shared": compiled.metadata.shared, "num_warps": spec.num_warps}
    return resources


ATTEMPTS = 3   # a `cache clear` during the build removes the staging dir: the instance starts again


class _Cleared(Exception):
    """The cache was cleared under this build (its staging dir or a file it needed vanished)."""


def run_task(task: CompileTask) -> CompileResult:
    """Build one instance into the cache. A compile failure is returned, never raised (any exception: a
    hand-edited or foreign source can fail at import time with NameError, SyntaxError, ...). A cache cleared
    meanwhile costs a new attempt, not the build. The staging dir never outlives the call."""
    start = time.perf_counter()
    reason = ""
    for _ in range(ATTEMPTS):
        try:
            return _attempt(task, start)
        except _Cleared as exc:
            reason = str(exc)
    return CompileResult(task.name, False, time.perf_counter() - start,
                         f"the cache dir was cleared {ATTEMPTS} times during the build ({reason})"[:500])


def _attempt(task: CompileTask, start: float) -> CompileResult:
    staging = cache.new_staging_dir(Path(task.cache_root), task.arch)
    try:
        source_path = staging / cache.SOURCE
        source_path.write_text(task.source)
        try:
            resources = compile_entries(source_path, task.cc, staging)
        except Exception as exc:   # any: recorded per instance in BuildReport.failed
            if _cleared(task, staging, exc):
                raise _Cleared(_reason(exc)) from exc
            return CompileResult(task.name, False, time.perf_counter() - start, _reason(exc)[:500])
        manifest = {"name": task.name, "arch": task.arch, "fingerprint": task.fingerprint,
                    "resources": resources, "compile_seconds": round(time.perf_counter() - start, 3)}
        final = cache.publish(staging, task.entry, manifest)
    except OSError as exc:
        if _cleared(task, staging, exc):
            raise _Cleared(_reason(exc)) from exc
        raise
    finally:
        cache.remove_entry(staging)   # still there on every path but a successful publish
    return CompileResult(task.name, True, time.perf_counter() - start, path=str(final))


def _cleared(task: CompileTask, staging: Path, exc: BaseException) -> bool:
    """The staging dir is gone, or a file of the cache vanished (Triton's cache lives in ours, so it goes
    too)."""
    if not staging.is_dir():
        return True
    root = os.path.join(os.path.abspath(task.cache_root), "")
    chain: BaseException | None = exc
    for _ in range(16):   # bounded: a hand-built exception chain may loop
        if chain is None:
            break
        name = chain.filename if isinstance(chain, FileNotFoundError) else None
        if isinstance(name, str) and os.path.abspath(name).startswith(root):
            return True
        chain = chain.__cause__ or chain.__context__
    return False


def _reason(exc: BaseException) -> str:
    """One line saying why a compile failed. A Triton CompilationError keeps the compiler's message and the
    line it names: an error inside a called @jit function reaches here wrapped in the call site's
    CompilationError, whose text ends with a caret line and carries no message, so the innermost message of
    the chain is taken (else the innermost cause's text). Any other error: the last line of its text that
    says something."""
    chain = _chain(exc)
    compiler = [e for e in chain if _is_compilation_error(e) and getattr(e, "error_message", None)]
    if compiler:
        inner = compiler[-1]
        return f"{type(exc).__name__}: {_one_line(str(getattr(inner, 'error_message')))}{_where(inner)}"
    for candidate in reversed(chain) if _is_compilation_error(exc) else [exc]:
        line = _last_line(candidate)
        if line:
            return f"{type(exc).__name__}: {line}"
    return f"{type(exc).__name__}: "


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and its explicit causes, outermost first (bounded: a hand-built chain may loop)."""
    chain = [exc]
    while len(chain) < 16 and chain[-1].__cause__ is not None and chain[-1].__cause__ not in chain:
        chain.append(chain[-1].__cause__)
    return chain


def _is_compilation_error(exc: BaseException) -> bool:
    return hasattr(exc, "node") and hasattr(exc, "error_message")


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _last_line(exc: BaseException) -> str:
    """The last line of the text that is more than a caret marking a column."""
    lines = [line.strip() for line in str(exc).splitlines()]
    return next((line for line in reversed(lines) if line.strip("^ ")), "")


def _where(exc: BaseException) -> str:
    """ (in <function>, line N: <source line>) of a CompilationError whose source and line are known."""
    src, lineno = getattr(exc, "src", None), getattr(getattr(exc, "node", None), "lineno", None)
    if not isinstance(src, str) or not isinstance(lineno, int):
        return ""
    lines = src.splitlines()
    code = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
    head = next((line.strip() for line in lines if line.lstrip().startswith("def ")), "")
    function = head[4:].split("(", 1)[0].strip()
    return f" (in {function or 'the kernel'}, line {lineno}: {code})" if code else f" (line {lineno})"
