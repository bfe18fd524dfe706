"""The dispatch memo of Kernel.run, Registry.run and td.gemm on CPU tensors (Triton's interpreter).

A repeated argument signature skips validation, problem derivation, selection and binding; anything a decision
depends on (alignment of every pointer, strides, shapes, dtypes, which optional tensors are given, beta == 0,
the registry's kernels, builds and tuning DB) changes the signature or invalidates the memo, so a cached
decision is never reused where it would be wrong. alpha and beta are values, never keys.
"""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch import memo
from tiledispatch.dispatch import call, decide, defaults
from tiledispatch.registry import kernel as kernel_mod
from tiledispatch.runtime import arguments, launcher
from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
from tiledispatch.testing import check_against_reference, matrix, small_config, suites, vector

F16 = torch.float16
TILED_A16, SPLITK_A16, TILED_A16_C, TILED_A1 = suites.aligned_configs()
PLAIN, BIAS_COL, INT8 = suites.error_configs()
BIAS_COL_A16 = small_config("tiled", "rcr", "fp16", align=16, bias="col")


def rcr(m: int = 32, n: int = 32, k: int = 32, dtype: str = "fp16"):
    return matrix(m, k, dtype=dtype), matrix(k, n, letter="c", dtype=dtype)


def misaligned_like(t: torch.Tensor) -> torch.Tensor:
    """Same shape, strides and dtype as a contiguous t, base pointer 2 bytes past a 16-byte boundary."""
    flat = torch.empty(t.numel() + 8, dtype=t.dtype)
    view = flat[1:1 + t.numel()].view(t.shape)
    view.copy_(t)
    assert view.stride() == t.stride() and view.data_ptr() % 16 and t.data_ptr() % 16 == 0
    return view


class Counter:
    def __init__(self, monkeypatch, owner, name: str) -> None:
        self.calls = 0
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)


@pytest.fixture
def fresh_memo():
    defaults.reset()
    yield
    defaults.reset()


def test_warm_kernel_run_skips_derivation_and_binding(build_registry, monkeypatch):
    kernel = build_registry([TILED_A16]).get(TILED_A16.name)
    derive = Counter(monkeypatch, kernel_mod, "problem_from_args")
    plans = Counter(monkeypatch, kernel_mod, "family_module")
    values = Counter(monkeypatch, arguments, "argument_values")
    for seed in range(4):
        a, b = rcr()
        out = kernel.run(a, b, alpha=0.5 + seed)
        check_against_reference(out, GemmArgs(a, b, alpha=0.5 + seed), "fp16")
    assert (derive.calls, plans.calls, values.calls) == (1, 1, 1)
    assert len(kernel.launches) == 1


def test_warm_registry_run_and_td_gemm_skip_selection(build_registry, monkeypatch, fresh_memo):
    registry = build_registry([TILED_A16, TILED_A1])
    defaults.install(("gemm", "fp16", "rcr", td.Epilogue()), registry)
    select = Counter(monkeypatch, decide, "_choose")
    derive = Counter(monkeypatch, call, "problem_from_args")
    for entry in ("registry", "gemm"):
        for seed in range(3):
            a, b = rcr()
            out = torch.empty(32, 32, dtype=F16)
            result = registry.run(None, a, b, out=out) if entry == "registry" else td.gemm(a, b, out=out)
            assert result is out
            check_against_reference(out, GemmArgs(a, b), "fp16")
    # td.gemm's first call derives its problem once and finds the selection Registry.run made for it
    assert select.calls == 1 and derive.calls == 2


def test_misaligned_pointer_never_reuses_an_aligned_plan(build_registry):
    registry = build_registry([TILED_A16, TILED_A1])
    a, b = rcr(64, 64, 64)
    _, aligned = registry.run(None, a, b, return_selection=True)
    assert aligned.kernel.config.align == 16 and not aligned.padded
    skewed = misaligned_like(a)
    out, chosen = registry.run(None, skewed, b, return_selection=True)
    assert chosen.kernel.config.align == 1 or chosen.padded
    check_against_reference(out, GemmArgs(skewed, b), "fp16")
    _, again = registry.run(None, a, b, return_selection=True)
    assert again.kernel.name == aligned.kernel.name
    kernel = registry.get(TILED_A16.name)
    kernel.run(a, b)
    with pytest.raises(td.UnsupportedProblem):
        kernel.run(skewed, b)
    out_skewed = misaligned_like(torch.empty(64, 64, dtype=F16))
    with pytest.raises(td.UnsupportedProblem):
        kernel.run(a, b, out=out_skewed)


def test_strides_decide_the_layout_of_a_repeated_shape(build_registry):
    registry = build_registry(suites.fuzz_configs())
    a = matrix(24, 40, dtype="fp16")
    for letter in ("c", "r", "c"):
        b = matrix(40, 24, letter=letter, dtype="fp16")
        out, selection = registry.run(None, a, b, return_selection=True)
        assert selection.kernel.config.layout == "r" + letter + "r"
        check_against_reference(out, GemmArgs(a, b), "fp16")


def test_optional_tensors_and_beta_zero_are_part_of_the_signature(build_registry):
    registry = build_registry([BIAS_COL, TILED_A16_C])
    with_bias = registry.get(BIAS_COL.name)
    a, b = rcr()
    bias = torch.randn(32).to(F16)
    with_bias.run(a, b, bias=bias)
    with pytest.raises(td.UnsupportedProblem):
        with_bias.run(a, b)
    with_c = registry.get(TILED_A16_C.name)
    c = matrix(32, 32, dtype="fp16")
    for beta in (0.5, -1.25):
        out = with_c.run(a, b, c=c, beta=beta)
        check_against_reference(out, GemmArgs(a, b, c=c, beta=beta), "fp16")
    with pytest.raises(td.UnsupportedProblem):
        with_c.run(a, b, c=c, beta=0.0)


def test_alpha_and_beta_are_values_not_keys(build_registry):
    kernel = build_registry([TILED_A16_C]).get(TILED_A16_C.name)
    a, b = rcr()
    c = matrix(32, 32, dtype="fp16")
    for alpha, beta in ((1.0, 0.5), (-2.0, 3.0), (0.25, 1.0)):
        out = kernel.run(a, b, c=c, alpha=alpha, beta=beta)
        check_against_reference(out, GemmArgs(a, b, c=c, alpha=alpha, beta=beta), "fp16")
    assert len(kernel.launches) == 1


def test_c_aliasing_out_is_not_baked_into_the_signature(build_registry):
    """beta != 0 without c reads out as C; a later call of the same signature with a distinct c must read c."""
    registry = build_registry([TILED_A16_C])
    a, b = rcr()
    out = matrix(32, 32, dtype="fp16")
    expected = GemmArgs(a, b, c=out.clone(), beta=0.5)
    registry.run(None, a, b, out=out, beta=0.5)
    check_against_reference(out, expected, "fp16")
    c, out2 = matrix(32, 32, dtype="fp16"), torch.empty(32, 32, dtype=F16)
    registry.run(None, a, b, out=out2, c=c, beta=0.5)
    check_against_reference(out2, GemmArgs(a, b, c=c, beta=0.5), "fp16")


def test_validation_errors_are_unchanged_after_a_warm_call(build_registry):
    registry = build_registry([PLAIN, INT8])
    a, b = rcr()
    registry.run(None, a, b)
    with pytest.raises(td.BadInput) as info:
        registry.run(None, a, b, out=torch.empty(32, 31, dtype=F16))
    assert info.value.field == "out"
    with pytest.raises(td.BadInput) as info:
        registry.run(None, a, rcr(k=48)[1])
    assert info.value.field == "b"
    for bad in ([[1.0]], None):
        with pytest.raises(td.BadInput) as info:
            registry.run(None, bad, b)
        assert info.value.field == "a"
    int8 = registry.get(INT8.name)
    a8, b8 = rcr(dtype="int8")
    assert int8.run(a8, b8, alpha=2).dtype == torch.int32
    with pytest.raises(td.BadInput) as info:
        int8.run(a8, b8, alpha=2.5)
    assert info.value.field == "alpha"


def test_a_kernel_pointed_elsewhere_drops_its_memo_and_the_registry_reselects(build_registry):
    registry = build_registry([PLAIN])
    kernel = registry.get(PLAIN.name)
    a, b = rcr()
    registry.run(None, a, b)
    kernel.run(a, b)
    entry = kernel.entry_dir
    kernel.entry_dir = None
    assert not len(kernel.launches)
    with pytest.raises(td.NoKernelFound) as info:
        kernel.run(a, b)
    assert info.value.field == "kernel"
    with pytest.raises(td.NoKernelFound) as info:
        registry.run(None, a, b)
    assert info.value.field == "registry"
    kernel.entry_dir = entry
    check_against_reference(registry.run(None, a, b), GemmArgs(a, b), "fp16")


def test_adding_a_kernel_invalidates_memoized_selections(build_registry, monkeypatch):
    registry = build_registry([TILED_A1])
    select = Counter(monkeypatch, decide, "_choose")
    a, b = rcr(64, 64, 64)
    registry.run(None, a, b)
    registry.run(None, a, b)
    registry.add(TILED_A16)
    registry.build(max_workers=1)
    _, selection = registry.run(None, a, b, return_selection=True)
    assert select.calls == 2 and selection.kernel.name == TILED_A16.name


def test_a_tuning_db_winner_replaces_a_memoized_ranked_pick(build_registry, tmp_path, monkeypatch):
    monkeypatch.setenv("TILEDISPATCH_TUNING_DB", str(tmp_path / "db.json"))
    registry = build_registry(suites.select_configs())
    a, b = rcr(48, 48, 64)
    _, first = registry.run(None, a, b, return_selection=True)
    assert first.strategy == "ml"   # no DB entry yet: the shipped fp16 cost model ranks
    other = next(k for k in registry.kernels if k.name != first.kernel.name)
    problem = problem_from_args(GemmArgs(a, b))
    device = registry.device_name(registry.default_device())
    registry.tuning_db.store(device, problem.signature(), other.name, {other.name: 0.1})
    out, tuned = registry.run(None, a, b, return_selection=True)
    assert tuned.strategy == "tuning_db" and tuned.kernel.name == other.name
    check_against_reference(out, GemmArgs(a, b), "fp16")


def test_padded_selection_is_remembered_with_a_bound_padded_launch(build_registry, monkeypatch, fresh_memo):
    """A padded decision is memoized like an aligned one: later calls skip validation and selection and reuse
    the kernel's launch bound on the kept buffers; each call still copies its own data in (new values, new
    alpha: exact results)."""
    from tiledispatch.runtime import padding

    registry = build_registry([TILED_A16])
    select = Counter(monkeypatch, decide, "_choose")
    derive = Counter(monkeypatch, call, "problem_from_args")
    bind = Counter(monkeypatch, kernel_mod.GemmKernel, "_bind")
    padding.clear_cache()
    for seed in range(3):
        a, b = rcr(30, 20, 40)
        out, selection = registry.run(None, a, b, alpha=seed - 1.0, return_selection=True)
        assert selection.padded
        check_against_reference(out, GemmArgs(a, b, alpha=seed - 1.0), "fp16")
    (entry,) = registry.calls.values()
    assert isinstance(entry.bound, padding.PaddedLaunch)
    assert (select.calls, derive.calls) == (1, 1)
    assert bind.calls == 1      # the kernel's launch on the kept buffers was bound once
    padding.clear_cache()


def test_bound_padded_launch_with_an_out_that_does_not_fit_and_a_bias(build_registry, fresh_memo):
    """Repeated td.gemm-style calls of one padded signature with an out that does not fit and a bias: the
    result lands in the caller's out, exact every time; the out is the caller's tensor, never a kept buffer."""
    from tiledispatch.runtime import padding

    registry = build_registry([BIAS_COL_A16])
    padding.clear_cache()
    for seed in range(3):
        torch.manual_seed(seed)
        a, b = rcr(19, 21, 17)
        bias = vector(21, dtype="fp16")
        out = torch.empty(19, 21, dtype=F16)
        result = registry.run(None, a, b, bias=bias, out=out, alpha=0.25 * (seed + 1))
        assert result.data_ptr() == out.data_ptr()
        check_against_reference(out, GemmArgs(a, b, bias=bias, bias_mode="col", alpha=0.25 * (seed + 1)),
                                "fp16")
    (entry,) = registry.calls.values()
    assert isinstance(entry.bound, padding.PaddedLaunch)
    (kept,) = padding._CACHE.values()
    assert kept.bound is not None and kept.out is not None and kept.out.shape == (19, 24)
    padding.clear_cache()


def test_returned_selections_are_copies(build_registry):
    registry = build_registry([PLAIN])
    a, b = rcr()
    _, first = registry.run(None, a, b, return_selection=True)
    first.notes.append("mine")
    _, second = registry.run(None, a, b, return_selection=True)
    assert "mine" not in second.notes


def test_the_memo_is_bounded(build_registry, monkeypatch):
    monkeypatch.setattr(memo, "LIMIT", 3)
    kernel = build_registry([PLAIN]).get(PLAIN.name)
    for m in range(8, 14):
        a, b = rcr(m=m)
        check_against_reference(kernel.run(a, b), GemmArgs(a, b), "fp16")
    assert len(kernel.launches) == 3


def test_unknown_keyword_arguments_still_reach_execute(build_registry):
    registry = build_registry([PLAIN])
    a, b = rcr()
    with pytest.raises(TypeError):
        registry.run(None, a, b, not_an_option=1)


def test_call_key_distinguishes_everything_a_decision_reads():
    a, b = rcr()
    base = launcher.call_key(a, b, None, None, None, (), 0.0, None, None, ())
    variants = [
        launcher.call_key(misaligned_like(a), b, None, None, None, (), 0.0, None, None, ()),
        launcher.call_key(a, b.contiguous(), None, None, None, (), 0.0, None, None, ()),
        launcher.call_key(a.float(), b, None, None, None, (), 0.0, None, None, ()),
        launcher.call_key(a, b, torch.empty(32, 32, dtype=F16), None, None, (), 0.0, None, None, ()),
        launcher.call_key(a, b, None, a, None, (), 0.0, None, None, ()),
        launcher.call_key(a, b, None, None, None, (a,), 0.0, None, None, ()),
        launcher.call_key(a, b, None, None, None, (), 0.5, None, None, ()),
        launcher.call_key(a, b, None, None, None, (), 0.0, torch.ones(1), None, ()),
        launcher.call_key(a, b, None, None, None, (), 0.0, None, None, ("rules",)),
        launcher.call_key(a[:16], b, None, None, None, (), 0.0, None, None, ()),
    ]
    assert all(v is not None and v != base for v in variants)
    assert len(set(variants)) == len(variants)
    a2, b2 = rcr()
    assert launcher.call_key(a2, b2, None, None, None, [], 0.0, None, None, ()) == base
    assert launcher.call_key(a, b, None, None, None, (), 0.0, None, None, ()) == base
    assert launcher.call_key([[1.0]], b, None, None, None, (), 0.0, None, None, ()) is None
    assert launcher.call_key(a, b, None, None, None, iter(()), 0.0, None, None, ()) is None


def test_interpreter_switch_is_part_of_the_signature(monkeypatch):
    a, b = rcr()
    monkeypatch.delenv("TILEDISPATCH_INTERPRET", raising=False)
    before = launcher.call_key(a, b, None, None, None, (), 0.0, None, None, ())
    monkeypatch.setenv("TILEDISPATCH_INTERPRET", "1")
    assert launcher.call_key(a, b, None, None, None, (), 0.0, None, None, ()) != before


def test_fp8_scales_are_per_call_values(build_registry):
    cfg = next(c for c in suites.tma_configs() if c.dtype == "fp8e4m3" and c.family == "tiled")
    kernel = build_registry([cfg]).get(cfg.name)
    gen = torch.Generator().manual_seed(3)
    a = matrix(32, 48, dtype=cfg.dtype, generator=gen, scale=16.0)
    b = matrix(48, 32, letter="c", dtype=cfg.dtype, generator=gen, scale=16.0)
    c = matrix(32, 32, dtype=cfg.out_dtype, generator=gen) if cfg.with_c else None
    d = tuple(matrix(32, 32, dtype=cfg.out_dtype, generator=gen) for _ in range(cfg.num_d))
    bias = vector(32, dtype=cfg.out_dtype, generator=gen) if cfg.bias != "none" else None
    beta = 0.5 if cfg.with_c else 0.0
    for sa, sb in ((1 / 16, 1 / 32), (1 / 8, 1 / 64)):
        scales = torch.tensor([sa]), torch.tensor([sb])
        out = kernel.run(a, b, c=c, bias=bias, d=d, beta=beta, scale_a=scales[0], scale_b=scales[1])
        check_against_reference(out, GemmArgs(a, b, None, c, bias, cfg.bias, d, 1.0, beta, cfg.activation,
                                              cfg.out_dtype, False, *scales), cfg.dtype)
    assert len(kernel.launches) == 1


def test_small_config_kernels_report_reusable_binds(build_registry):
    """Every argument of the CPU lane's families comes from a per-call slot or is a constant of the signature."""
    registry = build_registry([PLAIN, SPLITK_A16, BIAS_COL])
    a, b = rcr()
    for kernel in registry.kernels:
        bias = torch.randn(32).to(F16) if kernel.config.bias != "none" else None
        args = GemmArgs(a, b, bias=bias, bias_mode=kernel.config.bias)
        problem = problem_from_args(args, prefer_layout=kernel.config.layout)
        assert kernel.bound_launch(args, problem).reusable, kernel.name


def test_kernel_launch_reuses_its_bound_launch(build_registry):
    kernel = build_registry([SPLITK_A16]).get(SPLITK_A16.name)
    for seed in range(3):
        a, b = rcr(32, 48, 64)
        args = GemmArgs(a, b)
        problem = problem_from_args(args, prefer_layout="rcr")
        out = kernel.launch(args, problem)
        assert args.out is out
        check_against_reference(out, GemmArgs(a, b), "fp16")
    assert len(kernel.launches) == 1

