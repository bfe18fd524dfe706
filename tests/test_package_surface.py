"""The public surface: import cost, exported names, the error hierarchy."""
from __future__ import annotations

import subprocess
import sys

import pytest

import tiledispatch as td
from tiledispatch import errors


def test_import_pulls_in_neither_torch_nor_triton():
    code = ("import sys, tiledispatch\n"
            "heavy = sorted(m for m in ('torch', 'triton', 'numpy') if m in sys.modules)\n"
            "print(','.join(heavy) or 'none')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"


def test_public_names_exist():
    for name in td.__all__:
        assert hasattr(td, name), name
    for name in ("GemmProblem", "GemmConfig", "Registry", "Kernel", "parse_name", "gemm", "TileDispatchError",
                 "InvalidConfig", "UnsupportedProblem", "NoKernelFound", "CompileError", "BadInput"):
        assert name in td.__all__, name
    assert isinstance(td.__version__, str) and td.__version__.count(".") >= 1


@pytest.mark.parametrize("kind", [td.InvalidConfig, td.UnsupportedProblem, td.NoKernelFound, td.CompileError,
                                  td.BadInput, td.CacheError])
def test_every_error_is_a_tiledispatch_error_with_a_field(kind):
    assert issubclass(kind, td.TileDispatchError) and issubclass(kind, Exception)
    exc = kind("boom", field="block_m")
    assert exc.field == "block_m" and str(exc) == "boom"


def test_bad_choice_names_field_value_and_legal_values():
    exc = errors.bad_choice(td.BadInput, "layout", "xyz", ("rcr", "rrr"))
    assert isinstance(exc, td.BadInput) and exc.field == "layout"
    assert "layout='xyz'" in str(exc) and "'rcr'" in str(exc) and "'rrr'" in str(exc)


def test_module_docstrings_stay_short_and_modules_small():
    """Docstrings say what and why in a few lines (history goes to docs/design/): none over 15 lines; no
    module over 600 lines."""
    import ast
    from pathlib import Path

    root = Path(td.__file__).resolve().parent
    long_docs, long_files = [], []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        doc = ast.get_docstring(ast.parse(text), clean=False)
        if doc is not None and len(doc.splitlines()) > 15:
            long_docs.append(f"{path.relative_to(root)}: {len(doc.splitlines())} lines")
        if len(text.splitlines()) > 600:
            long_files.append(f"{path.relative_to(root)}: {len(text.splitlines())} lines")
    assert not long_docs, long_docs
    assert not long_files, long_files
