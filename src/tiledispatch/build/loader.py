"""Import a generated source file as a module, for compilation or for Triton's interpreter."""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_source(path: str | Path, interpret: bool) -> ModuleType:
    """Import the generated file at `path`; with interpret=True its @triton.jit functions run on the CPU.

    Triton decides between the compiler and the interpreter when @triton.jit is applied, so the module is
    executed under the matching knob and cached per (path, mode). The source is compiled and executed here
    rather than by the import system, which would write a __pycache__ directory beside it (unless Python runs
    with PYTHONDONTWRITEBYTECODE): into a build's staging directory, whose files the cache manifest hashes, or
    into a published cache entry.
    """
    import triton

    path = Path(path).resolve()
    tag = hashlib.sha1(str(path).encode()).hexdigest()[:16]
    mod_name = f"tiledispatch_generated_{tag}_{'interp' if interpret else 'cuda'}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    code = compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        exec(code, module.__dict__)   # noqa: S102 - a generated kernel source, like an import without bytecode
    sys.modules[mod_name] = module
    return module
