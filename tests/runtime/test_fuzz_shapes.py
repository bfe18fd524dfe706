"""Property-based fuzz: random small shapes, layouts and batch through Registry.run on the interpreter."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.testing import check_against_reference, matrix, suites


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry(suites.fuzz_configs())      # align=1 kernels only: every shape runs without padding


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(m=st.integers(1, 80), n=st.integers(1, 80), k=st.integers(1, 80), batch=st.integers(1, 2),
       layout=st.sampled_from(["rcr", "rrr", "crr", "ccr"]), dtype=st.sampled_from(["fp16", "fp32"]),
       pad=st.sampled_from([0, 3]), seed=st.integers(0, 2**16))
def test_random_shapes_match_the_reference(registry, m, n, k, batch, layout, dtype, pad, seed):
    gen = torch.Generator().manual_seed(seed)
    lead = batch if batch > 1 else None
    a = matrix(m, k, letter=layout[0], dtype=dtype, batch=lead, ld_pad=pad, generator=gen)
    b = matrix(k, n, letter=layout[1], dtype=dtype, batch=lead, ld_pad=pad, generator=gen)
    out, selection = registry.run(None, a, b, return_selection=True)
    assert not selection.padded
    assert out.shape == ((batch, m, n) if lead else (m, n))
    check_against_reference(out, GemmArgs(a, b), dtype)
