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
    executed under the matching knob and cached per (path, mode).
    """
    import triton

    path = Path(path).resolve()
    tag = hashlib.sha1(str(path).encode()).hexdigest()[:16]
    mod_name = f"tiledispatch_generated_{tag}_{'interp' if interpret else 'cuda'}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = interpret
        spec.loader.exec_module(module)
    sys.modules[mod_name] = module
    return module
