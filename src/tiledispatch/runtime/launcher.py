"""Launch a built instance: compiled cubins on CUDA tensors, Triton's interpreter on CPU tensors."""
from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

from tiledispatch import settings
from tiledispatch.build import cache
from tiledispatch.errors import BadInput, CompileError
from tiledispatch.kernels.gemm_common import DOT_F32
from tiledispatch.kernels.spec import EntrySpec


def uses_interpreter(device) -> bool:
    return device.type == "cpu" or settings.force_interpreter()


class EntryLauncher:
    """Launches one entry (one @triton.jit function) of a built instance."""

    def __init__(self, entry_dir: Path, spec: EntrySpec, fingerprint: str) -> None:
        self.entry_dir = entry_dir
        self.spec = spec
        self.fingerprint = fingerprint
        self._compiled: dict[int, Any] = {}

    def _ordered(self, values: dict[str, Any], interpret: bool) -> list[Any]:
        out = []
        for p in self.spec.params:
            if p.is_constexpr:
                out.append(True if (interpret and p.name == DOT_F32) else p.value)
            else:
                out.append(values[p.name])
        return out

    def _compiled_kernel(self, device_index: int):
        if device_index not in self._compiled:
            from triton.compiler import ASTSource
            from triton.compiler.compiler import CompiledKernel
            from triton.runtime.errors import OutOfResources

            from tiledispatch.build.loader import import_source

            module = import_source(self.entry_dir / cache.SOURCE, interpret=False)
            fn = self.spec.fn
            src = ASTSource(getattr(module, fn), self.spec.signature(), self.spec.constexprs(), self.spec.attrs())
            group = {f"{fn}.json": str(self.entry_dir / f"{fn}.json"),
                     f"{fn}.cubin": str(self.entry_dir / f"{fn}.cubin")}
            kernel = CompiledKernel(src, group, self.fingerprint)
            try:
                kernel._init_handles()
            except OutOfResources as exc:
                raise CompileError(f"{fn} of {self.entry_dir.parent.name} cannot load on this device: {exc}",
                                   field="kernel") from exc
            self._compiled[device_index] = kernel
        return self._compiled[device_index]

    def launch(self, grid: tuple[int, int, int], values: dict[str, Any], device) -> None:
        if uses_interpreter(device):
            from tiledispatch.build.loader import import_source

            module = import_source(self.entry_dir / cache.SOURCE, interpret=True)
            with _library_callable_in_interpreter():
                getattr(module, self.spec.fn)[grid](*self._ordered(values, True))
            return
        import torch

        with torch.cuda.device(device):
            kernel = self._compiled_kernel(device.index if device.index is not None else torch.cuda.current_device())
            stream = torch.cuda.current_stream(device).cuda_stream
            kernel.run(grid[0], grid[1], grid[2], stream, kernel.function, kernel.packed_metadata, None, None, None,
                       *self._ordered(values, False))


_INTERP_LOCK = threading.Lock()


@contextlib.contextmanager
def _library_callable_in_interpreter():
    """Make Triton's library helpers (tl.zeros, tl.cdiv, ...) callable from an interpreted kernel.

    They are @jit functions built when Triton was imported; unless TRITON_INTERPRET was set before that import
    they refuse to be called outside a compiled kernel. For the duration of an interpreted launch they are
    replaced by interpreted versions of themselves.
    """
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    with _INTERP_LOCK:
        saved = {name: obj for name, obj in vars(tl).items() if isinstance(obj, JITFunction)}
        try:
            for name, obj in saved.items():
                setattr(tl, name, InterpretedFunction(obj.fn))
            yield
        finally:
            for name, obj in saved.items():
                setattr(tl, name, obj)


def load_launchers(entry_dir: Path) -> list[EntryLauncher]:
    manifest = cache.read_entry(entry_dir)
    if manifest is None:
        raise CompileError(f"cache entry {entry_dir} is missing or corrupt; rebuild the registry", field="cache")
    module_entries = _entries_of(entry_dir / cache.SOURCE)
    return [EntryLauncher(entry_dir, spec, manifest["fingerprint"]) for spec in module_entries]


def _entries_of(source: Path) -> list[EntrySpec]:
    """Read ENTRIES from a generated file without executing it (it is a literal)."""
    import ast

    tree = ast.parse(source.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "ENTRIES" for t in node.targets):
            return [EntrySpec.from_json(e) for e in ast.literal_eval(node.value)]
    raise BadInput(f"{source} has no ENTRIES literal", field="source")

