"""Aligned (a16) kernels for aligned problems; exact padding when only a16 kernels exist."""
from __future__ import annotations

import pytest
import torch

from tiledispatch.registry.kernel import Kernel
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.runtime.execute import execute
from tiledispatch.testing import check_against_reference, matrix, poisoned, small_config

A16_TILED = small_config("tiled", "rcr", "fp16", align=16)
A16_SPLITK = small_config("splitk", "rcr", "fp16", align=16, split_k=2)
A16_WITH_C = small_config("tiled", "rcr", "fp16", align=16, with_c=True)
A1_TILED = small_config("tiled", "rcr", "fp16", align=1)


@pytest.fixture(scope="module")
def aligned_only(build_registry):
    return build_registry([A16_TILED, A16_SPLITK])


@pytest.fixture(scope="module")
def mixed(build_registry):
    # The a1 twin comes first: registry order alone would pick it.
    return build_registry([A1_TILED, A16_TILED])


def rcr(m, n, k, batch=None):
    return matrix(m, k, letter="r", batch=batch), matrix(k, n, letter="c", batch=batch)


@pytest.mark.parametrize("strategy", ["auto", "rules"])
def test_aligned_problem_uses_the_aligned_kernel(mixed, strategy):
    a, b = rcr(64, 48, 96)
    out, selection = mixed.run(None, a, b, strategy=strategy, return_selection=True)
    assert selection.problem.align == 16 and not selection.padded
    assert selection.kernel.config.align == 16, selection.ranking
    check_against_reference(out, GemmArgs(a, b), "fp16")


def test_unaligned_problem_uses_the_unaligned_kernel_without_padding(mixed):
    a, b = rcr(20, 24, 17)
    out, selection = mixed.run(None, a, b, return_selection=True)
    assert selection.problem.align == 1 and not selection.padded
    assert selection.kernel.config.align == 1
    check_against_reference(out, GemmArgs(a, b), "fp16")


@pytest.mark.parametrize("batch", [None, 3])
def test_unaligned_problem_on_aligned_only_registry_is_padded_exactly(aligned_only, batch):
    a, b = rcr(20, 24, 17, batch)   # K=17: neither A's nor B's leading dimension is a multiple of 16
    out, selection = execute(aligned_only, None, a, b, return_selection=True)
    assert selection.padded is True
    assert selection.kernel.config.align == 16 and selection.problem.align == 16
    assert any("padded" in note for note in selection.notes)
    assert out.shape == ((3, 20, 24) if batch else (20, 24))
    check_against_reference(out, GemmArgs(a, b), "fp16")


def test_padding_writes_into_the_users_unaligned_out(aligned_only):
    a, b = rcr(19, 21, 17)
    full = poisoned((19, 24), "fp16")
    out = full[:, :21]                        # leading dimension 24: not a multiple of 16
    result, selection = aligned_only.run(None, a, b, out=out, alpha=-0.5, return_selection=True)
    assert selection.padded and result.data_ptr() == out.data_ptr()
    check_against_reference(out, GemmArgs(a, b, alpha=-0.5), "fp16")
    assert torch.isnan(full[:, 21:]).all()


def test_padding_with_blas_style_c_in_out(build_registry):
    """beta != 0 without c reads `out` as C; the padded copy must carry C's values in."""
    registry = build_registry([A16_WITH_C])
    a, b = rcr(18, 22, 17)
    c = matrix(18, 22)
    out = c.clone()
    result, selection = registry.run(None, a, b, out=out, beta=0.75, alpha=2.0, return_selection=True)
    assert selection.padded and result.data_ptr() == out.data_ptr()
    check_against_reference(out, GemmArgs(a, b, c=c, alpha=2.0, beta=0.75), "fp16")


def test_padded_launch_gets_aligned_buffers_including_out(aligned_only, monkeypatch):
    """The a16 kernel is compiled assuming 16-element leading dimensions for A, B *and* out."""
    seen = []
    original = Kernel.launch

    def spy(self, args, problem):
        seen.append(args)
        return original(self, args, problem)

    monkeypatch.setattr(Kernel, "launch", spy)
    a, b = rcr(20, 20, 17)
    out = aligned_only.run(None, a, b, strategy="first_fit")
    (args,) = seen
    for name in ("a", "b", "out"):
        t = getattr(args, name)
        assert t.data_ptr() % 16 == 0, name
        assert all(s % 16 == 0 for s in t.stride() if s != 1), (name, t.stride())
    assert out.is_contiguous() and out.shape == (20, 20)
    check_against_reference(out, GemmArgs(a, b), "fp16")
