"""Fixtures shared by the runtime tests."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def conv():
    """benchmarks/conv.py as a module (benchmarks/ on sys.path for its `protocol` and `tables` imports)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("conv_bench_under_test", ROOT / "benchmarks" / "conv.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["conv_bench_under_test"] = module
    spec.loader.exec_module(module)
    return module
