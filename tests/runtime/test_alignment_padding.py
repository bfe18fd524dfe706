"""Aligned (a16) kernels for aligned problems; exact padding when only a16 kernels exist."""
from __future__ import annotations

import pytest
import torch

from tiledispatch.registry.kernel import Kernel
from tiledispatch.runtime.launcher import BoundLaunch
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.testing import check_against_reference, matrix, poisoned, small_config, suites

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


def _launch_spy(monkeypatch) -> list:
    """Record the tensors of every bound launch (GemmArgs of a, b and the out it wrote: it allocates one when
    given None)."""
    seen = []
    original = BoundLaunch.__call__

    def spy(self, a, b, out, *rest):
        out = original(self, a, b, out, *rest)
        seen.append(GemmArgs(a, b, out))
        return out

    monkeypatch.setattr(BoundLaunch, "__call__", spy)
    return seen


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
    out, selection = aligned_only.run(None, a, b, return_selection=True)
    assert selection.padded is True
    # the least padding: K 17 -> 24, 16-byte fp16 rows (align 8), all an a16 kernel needs
    assert selection.kernel.config.align == 16 and selection.problem.align == 8 and selection.problem.k == 24
    assert any("padded" in note for note in selection.notes)
    assert out.shape == ((3, 20, 24) if batch else (20, 24))
    check_against_reference(out, GemmArgs(a, b), "fp16")


def test_padding_writes_into_the_users_unaligned_out(aligned_only):
    a, b = rcr(19, 21, 17)
    full = poisoned((19, 24), "fp16")
    out = full[:, :21]                        # N=21: not 16-byte rows, so the kernel writes a padded out
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
    """The a16 kernel is compiled assuming 16-byte leading dimensions (8 fp16 elements) for A, B *and* out."""
    seen = _launch_spy(monkeypatch)
    a, b = rcr(20, 20, 17)
    out = aligned_only.run(None, a, b, strategy="first_fit")
    (args,) = seen
    for name in ("a", "b", "out"):
        t = getattr(args, name)
        assert t.data_ptr() % 16 == 0, name
        assert all(s % 8 == 0 for s in t.stride() if s != 1), (name, t.stride())
    assert out.shape == (20, 20) and out.stride() == (24, 1)    # the exact view of the padded output
    assert out.data_ptr() == args.out.data_ptr()
    check_against_reference(out, GemmArgs(a, b), "fp16")


# -- least padding: only sizes along unit strides grow, operands that fit are used in place ----------------
TMA_RCR = small_config("tma_persistent", "rcr", "fp16", align=16, subtile=1)


def test_padded_rounds_only_the_sizes_along_unit_strides():
    from tiledispatch.problems.gemm import GemmProblem

    p = GemmProblem(20, 24, 17, dtype="fp16", layout="rcr")
    assert (p.padded(16).m, p.padded(16).n, p.padded(16).k, p.padded(16).align) == (20, 32, 32, 16)
    assert (p.padded(8).m, p.padded(8).n, p.padded(8).k, p.padded(8).align) == (20, 24, 24, 8)
    q = GemmProblem(20, 24, 17, dtype="fp16", layout="crr")     # column-major A: M runs along a unit stride
    assert (q.padded(16).m, q.padded(16).n, q.padded(16).k) == (32, 32, 17)


def test_plan_for_gives_each_kernel_its_least_padding():
    from tiledispatch.arch import get_arch
    from tiledispatch.problems.gemm import GemmProblem
    from tiledispatch.select.selector import plan_for

    arch = get_arch("sm_90")
    p = GemmProblem(20, 24, 17, dtype="fp16", layout="rcr")
    tma = plan_for(Kernel(TMA_RCR, arch), p)           # descriptors need 16-byte rows: 8 fp16 elements
    a16 = plan_for(Kernel(A16_TILED, arch), p)         # 16-byte vector loads: the same
    a1 = plan_for(Kernel(A1_TILED, arch), p)
    assert tma.padded and (tma.problem.n, tma.problem.k, tma.problem.align) == (24, 24, 8)
    assert a16.padded and (a16.problem.n, a16.problem.k, a16.problem.align) == (24, 24, 8)
    fp8 = plan_for(Kernel(small_config("tiled", "rcr", "fp8e4m3", align=16), arch),
                   GemmProblem(20, 24, 17, dtype="fp8e4m3", layout="rcr"))   # 16 bytes: 16 fp8 elements
    assert fp8.padded and (fp8.problem.n, fp8.problem.k, fp8.problem.align) == (32, 32, 16)
    assert not a1.padded and a1.problem == p


def test_tma_kernel_runs_on_k_padding_only_and_writes_out_in_place(build_registry, monkeypatch):
    """rcr 20x24x17: K=17 breaks the 16-byte rows; M=20 and N=24 need nothing, so A and B are copied with K
    rounded to 24 and the kernel writes the caller's output directly (no padded output, no copy back)."""
    registry = build_registry([TMA_RCR])
    seen = _launch_spy(monkeypatch)
    a, b = rcr(20, 24, 17)
    out = poisoned((20, 24), "fp16")
    result, selection = registry.run(None, a, b, out=out, return_selection=True)
    assert selection.padded and selection.problem.k == 24 and selection.problem.align == 8
    (args,) = seen
    assert args.out is out and result.data_ptr() == out.data_ptr()
    assert args.a.shape == (20, 24) and args.b.shape == (24, 24)
    check_against_reference(out, GemmArgs(a, b), "fp16")


def test_operands_that_fit_are_not_copied(build_registry, monkeypatch):
    """rrr 20x20x32 with a16 kernels: K=32 is aligned, N=20 is not (no 16-byte fp16 rows): B and the output are
    padded to N=24, A is used as it is (same storage)."""
    registry = build_registry(suites.padding_configs())
    seen = _launch_spy(monkeypatch)
    a, b = matrix(20, 32), matrix(32, 20)
    out, selection = registry.run(None, a, b, return_selection=True)
    assert selection.padded and (selection.problem.m, selection.problem.n) == (20, 24)
    (args,) = seen
    assert args.a is a and args.b.shape == (32, 24) and args.out.shape == (20, 24)   # (launch allocated it)
    assert out.shape == (20, 20) and out.data_ptr() == args.out.data_ptr()
    check_against_reference(out, GemmArgs(a, b), "fp16")


def test_padding_estimate_counts_only_the_copies_made():
    from tiledispatch.arch import get_arch
    from tiledispatch.problems.gemm import Epilogue, GemmProblem
    from tiledispatch.select.rules import padding_us

    arch = get_arch("sm_90")
    k_only = GemmProblem(3000, 5000, 700, dtype="bf16", layout="rcr")      # K breaks the rows, N=5000 does not
    n_too = GemmProblem(3000, 5001, 700, dtype="bf16", layout="rcr")       # N too: B grows, the output is a view
    assert padding_us(k_only, k_only.padded(8), arch) == pytest.approx(padding_us(n_too, n_too.padded(8), arch),
                                                                        rel=1e-3)
    with_c = GemmProblem(3000, 5001, 700, dtype="bf16", layout="rcr", epilogue=Epilogue(with_c=True))
    assert padding_us(n_too, n_too.padded(8), arch) < padding_us(with_c, with_c.padded(8), arch)   # C copied in
    assert padding_us(k_only, k_only.padded(8), arch) < padding_us(k_only, k_only.padded(16), arch)
    strided = GemmProblem(3000, 5008, 704, dtype="bf16", layout="rcr", align=1)   # aligned sizes, strided tensors
    assert padding_us(strided, strided.padded(8), arch) > 0


# -- kept padded buffers (runtime/padding.py) ---------------------------------------------------------------
@pytest.fixture
def fresh_pad_cache():
    from tiledispatch.runtime import padding

    padding.clear_cache()
    yield padding
    padding.clear_cache()


def test_repeated_padded_calls_reuse_buffers_and_stay_exact(aligned_only, fresh_pad_cache, monkeypatch):
    """Same signature, new data: one kept set of buffers, the same padded A each call, margins still zero (a
    stale margin would add the first call's values into the second result)."""
    seen = _launch_spy(monkeypatch)
    for seed in range(3):
        torch.manual_seed(seed)
        a, b = rcr(20, 24, 17)
        out = aligned_only.run(None, a, b)
        check_against_reference(out, GemmArgs(a, b), "fp16")
    assert len(fresh_pad_cache._CACHE) == 1
    assert len({args.a.data_ptr() for args in seen}) == 1


def test_padded_calls_keep_no_buffers_inside_fresh_workspaces(aligned_only, fresh_pad_cache):
    """The custom ops run inside fresh_workspaces: torch.compile's cudagraph trees warm up in the graph's
    pool and refuse tensors that outlive the run (a kept padded buffer failed reduce-overhead on an H100)."""
    from tiledispatch.runtime.launcher import fresh_workspaces

    a, b = rcr(20, 24, 17)
    with fresh_workspaces():
        out = aligned_only.run(None, a, b)
    check_against_reference(out, GemmArgs(a, b), "fp16")
    assert len(fresh_pad_cache._CACHE) == 0
    aligned_only.run(None, a, b)
    assert len(fresh_pad_cache._CACHE) == 1


def test_results_never_alias_kept_buffers(aligned_only, fresh_pad_cache):
    a, b = rcr(20, 24, 17)
    first = aligned_only.run(None, a, b)
    kept = first.clone()
    second = aligned_only.run(None, a * 2, b)
    assert first.data_ptr() != second.data_ptr()
    assert torch.equal(first, kept)


@pytest.mark.parametrize("layout, n", [("rcr", 21), ("crr", 24)])
def test_results_without_an_out_are_views_of_a_fresh_padded_out(build_registry, fresh_pad_cache, layout, n):
    """No out and a padded M or N: each call's launch allocates the padded output and the caller gets its exact
    view, never a kept buffer. rcr with N = 21 pads N (rows of 24: a strided view); crr pads M alone (A
    column-major: the view of the first rows is contiguous). Two calls: the second must not overwrite the first."""
    registry = build_registry([small_config("tiled", layout, "fp16", align=16)])
    first_args = None
    results = []
    for seed in range(2):
        torch.manual_seed(seed)
        a = matrix(20, 16, letter=layout[0])
        b = matrix(16, n, letter=layout[1])
        out, selection = registry.run(None, a, b, return_selection=True)
        assert selection.padded and out.shape == (20, n)
        assert out.stride() == ((24, 1) if layout == "rcr" else (n, 1))
        results.append((out, out.clone()))
        first_args = first_args or GemmArgs(a, b)
    (entry,) = fresh_pad_cache._CACHE.values()
    assert entry.out is None
    assert results[0][0].data_ptr() != results[1][0].data_ptr()
    assert all(torch.equal(r, kept) for r, kept in results)
    check_against_reference(results[0][0], first_args, "fp16")


def test_out_that_does_not_fit_is_written_from_a_kept_padded_out(aligned_only, fresh_pad_cache):
    a, b = rcr(19, 21, 17)
    for alpha in (1.0, -0.5):
        full = poisoned((19, 24), "fp16")
        out = full[:, :21]
        result = aligned_only.run(None, a, b, out=out, alpha=alpha)
        assert result.data_ptr() == out.data_ptr()
        check_against_reference(out, GemmArgs(a, b, alpha=alpha), "fp16")
        assert torch.isnan(full[:, 21:]).all()        # beyond the caller's columns: untouched poison
    (entry,) = fresh_pad_cache._CACHE.values()
    assert entry.out is not None and entry.out.shape == (19, 24)   # N=21 padded to 16-byte rows


def test_the_cache_keeps_at_most_its_limit(aligned_only, fresh_pad_cache, monkeypatch):
    monkeypatch.setattr(fresh_pad_cache, "PAD_CACHE_LIMIT", 2)
    for k in (17, 18, 19):
        a, b = rcr(20, 24, k)
        check_against_reference(aligned_only.run(None, a, b), GemmArgs(a, b), "fp16")
    assert len(fresh_pad_cache._CACHE) == 2


# -- word copies (runtime/operand_copy.py) ---------------------------------------------------------------
@pytest.mark.parametrize("shape, letter, dtype, width", [
    ((30, 700), "r", torch.float8_e4m3fn, 4),    # fp8 rows of 700 bytes: 175 int32 (the benchmark's K=700)
    ((30, 1023), "r", torch.float8_e4m3fn, 1),   # odd rows: bytes only
    ((555, 30), "c", torch.float8_e4m3fn, 1),    # column-major (B of rcr, K=555 along the unit stride): bytes
    ((704, 30), "c", torch.float8_e4m3fn, 8),    # column-major, 704-byte columns: int64
    ((30, 17), "r", torch.float16, 2),           # 34-byte rows: no wider word than an fp16
    ((30, 18), "r", torch.float16, 4),           # 36-byte rows: int32
])
def test_word_width_follows_the_unit_stride(shape, letter, dtype, width):
    from tiledispatch.runtime.operand_copy import as_words, word_width

    rows, cols = shape
    t = torch.zeros(rows, cols, dtype=dtype) if letter == "r" else torch.zeros(cols, rows, dtype=dtype).t()
    assert word_width(t) == width
    words = as_words(t, width)
    assert words.element_size() == width and words.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()


def test_word_copies_reproduce_the_bytes_of_fp8_operands():
    """The corner of an fp8 operand is copied in int32 words when its rows allow it, in bytes otherwise, and the
    padded buffer holds the caller's bytes in its corner and zeros in its margin either way (a source whose
    base is not word aligned falls back to bytes)."""
    from tiledispatch.runtime.operand_copy import Corner, CornerCopies
    from tiledispatch.runtime.padding import zero_padded

    raw = torch.randint(-100, 100, (31 * 700 + 1,), dtype=torch.int8)
    first = raw[:30 * 700].view(torch.float8_e4m3fn).view(30, 700)
    corner = Corner.of(first, zero_padded(first, 30, 704, "r"))
    assert corner.width == 4
    copies = CornerCopies()
    for t in (first, raw[1:30 * 700 + 1].view(torch.float8_e4m3fn).view(30, 700)):
        copies([(corner, t)])
        assert torch.equal(corner.buf[:, :700].view(torch.int8), t.view(torch.int8))
        assert not corner.buf[:, 700:].view(torch.int8).any()
    assert corner.words(first) == 4 and corner.words(t) == 1
