"""Bad input raises the typed error of the hierarchy, naming the offending field (never a KeyError, never a
silent wrong result). Checks run before any kernel is selected, so td.gemm cases build nothing."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import tiledispatch as td
from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
from tiledispatch.testing import matrix, small_config, suites

F16 = torch.float16


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry(suites.error_configs())


def rcr(m=8, n=8, k=16, dtype=F16, batch=None):
    lead = (batch,) if batch else ()
    return torch.randn(*lead, m, k).to(dtype), torch.randn(*lead, n, k).to(dtype).transpose(-1, -2)


def raises(kind, field, fn, *args, **kwargs):
    with pytest.raises(kind) as info:
        fn(*args, **kwargs)
    assert info.value.field == field, (info.value.field, str(info.value))
    assert isinstance(info.value, td.TileDispatchError)
    return info.value


@pytest.mark.parametrize("entry", ["registry", "gemm"])
def test_float64_tensors(registry, entry):
    a, b = rcr(dtype=torch.float64)
    fn = registry.run if entry == "registry" else td.gemm
    args = (None, a, b) if entry == "registry" else (a, b)
    exc = raises(td.BadInput, "a.dtype", fn, *args)
    assert "float64" in str(exc) and "float16" in str(exc)


def test_integer_32_inputs(registry):
    a, b = rcr(dtype=torch.int32)
    raises(td.BadInput, "a.dtype", registry.run, None, a, b)


def test_k_mismatch(registry):
    a, _ = rcr(k=16)
    _, b = rcr(k=17)
    exc = raises(td.BadInput, "b", td.gemm, a, b)
    assert "K=16" in str(exc)


def test_batch_mismatch(registry):
    a, _ = rcr(batch=2)
    _, b = rcr(batch=3)
    raises(td.BadInput, "b", registry.run, None, a, b)


def test_tensors_on_different_devices(registry):
    a, b = rcr()
    exc = raises(td.BadInput, "b", registry.run, None, a, b.to("meta"))
    assert "meta" in str(exc)
    out = torch.empty(8, 8, dtype=F16, device="meta")
    raises(td.BadInput, "out", registry.run, None, a, b, out=out)


def test_mismatched_dtypes(registry):
    a, b = rcr()
    exc = raises(td.BadInput, "b", registry.run, None, a, b.float())
    assert "torch.float16" in str(exc) and "torch.float32" in str(exc)


@pytest.mark.parametrize("which", ["a", "b"])
def test_strides_no_kernel_handles(registry, which):
    strided = torch.randn(16, 16, dtype=F16)[::2, ::2]          # both strides != 1
    assert strided.stride() == (32, 2)
    a, b = rcr(m=8, n=8, k=8)
    args = (strided, b) if which == "a" else (a, strided)
    exc = raises(td.BadInput, which, registry.run, None, *args)
    assert "(32, 2)" in str(exc)


@pytest.mark.parametrize("shape_a, shape_b", [((8,), (8, 8)), ((2, 2, 8, 8), (8, 8)), ((0, 16), (16, 8)),
                                              ((8, 0), (0, 8))])
def test_bad_ranks_and_empty_sizes(registry, shape_a, shape_b):
    exc = raises(td.BadInput, "a", registry.run, None, torch.zeros(shape_a, dtype=F16),
                 torch.zeros(shape_b, dtype=F16))
    assert exc.field == "a"


def test_not_a_tensor(registry):
    raises(td.BadInput, "b", registry.run, None, torch.zeros(8, 8, dtype=F16), [[1.0]])


@pytest.mark.parametrize("field, value", [("m", 0), ("n", -3), ("k", 0), ("batch", 0)])
def test_zero_or_negative_problem_sizes(field, value):
    exc = raises(td.BadInput, field, td.GemmProblem, **{"m": 4, "n": 4, "k": 4, field: value})
    assert "positive" in str(exc)


def test_bad_strategy(registry):
    a, b = rcr()
    exc = raises(td.BadInput, "strategy", registry.run, None, a, b, strategy="fastest")
    assert "'first_fit'" in str(exc)


def test_bias_without_mode_and_mode_without_bias(registry):
    a, b = rcr()
    bias = torch.randn(8, dtype=F16)
    raises(td.BadInput, "bias", problem_from_args, GemmArgs(a, b, bias=bias))
    raises(td.BadInput, "bias", registry.run, None, a, b, bias_mode="row")
    plain = registry.get(suites.error_configs()[0].name)    # a kernel without bias has no mode to give it
    raises(td.BadInput, "bias", plain.run, a, b, bias=bias)


def test_beta_without_c(registry):
    a, b = rcr()
    exc = raises(td.BadInput, "c", registry.run, None, a, b, beta=0.5)
    assert "beta=0.5" in str(exc)
    raises(td.BadInput, "c", problem_from_args, GemmArgs(a, b, beta=1.0))


@pytest.mark.parametrize("kwargs, field", [
    ({"bias": torch.randn(8)}, "bias"),                                 # float32 bias for an fp16 GEMM
    ({"bias": torch.randn(9, dtype=F16)}, "bias"),                      # wrong length
    ({"bias": torch.randn(2, 8, dtype=F16)}, "bias"),                   # per-batch bias for batch 1
    ({"bias": torch.randn(16, dtype=F16)[::2]}, "bias"),                # not contiguous
    ({"out": torch.empty(8, 8), "out_dtype": "fp16"}, "out"),           # float32 out for an fp16 output
    ({"out": torch.empty(8, 8, dtype=F16).t()}, "out"),                 # column-major out
    ({"out": torch.empty(8, 9, dtype=F16)}, "out"),                     # wrong shape
    ({"d": (torch.randn(8, 8, dtype=torch.bfloat16),)}, "d[0]"),        # wrong dtype
    ({"d": (torch.randn(8, 8, dtype=F16), torch.randn(8, 7, dtype=F16))}, "d[1]"),
    ({"c": torch.randn(7, 8, dtype=F16), "beta": 1.0}, "c"),
    ({"c": torch.randn(8, 8), "beta": 1.0}, "c"),
    ({"out_dtype": "fp64"}, "out_dtype"),
    ({"activation": "swish"}, "activation"),
    ({"d": tuple(torch.randn(8, 8, dtype=F16) for _ in range(3))}, "d"),
])
def test_bad_epilogue_tensors_and_options(registry, kwargs, field):
    a, b = rcr()
    raises(td.BadInput, field, registry.run, None, a, b, **kwargs)


def test_batched_gemm_needs_a_batched_out(registry):
    a, b = rcr(batch=2)
    raises(td.BadInput, "out", registry.run, None, a, b, out=torch.empty(8, 8, dtype=F16))


def test_int8_needs_integral_scalars(registry):
    int8 = registry.get(suites.error_configs()[2].name)
    a = matrix(8, 32, dtype="int8")
    b = matrix(32, 8, letter="c", dtype="int8")
    raises(td.BadInput, "alpha", int8.run, a, b, alpha=0.5)
    assert int8.run(a, b, alpha=2).dtype == torch.int32


def test_tensors_must_match_an_explicit_problem(registry):
    a, b = rcr(m=8, n=8, k=16)
    raises(td.BadInput, "m", registry.run, td.GemmProblem(9, 8, 16, dtype="fp16"), a, b)
    raises(td.BadInput, "dtype", registry.run, td.GemmProblem(8, 8, 16, dtype="bf16"), a, b)
    raises(td.BadInput, "layout", registry.run, td.GemmProblem(8, 8, 16, dtype="fp16", layout="rrr"), a, b)


def test_kernel_run_names_the_mismatch(registry):
    plain = registry.get(suites.error_configs()[0].name)            # rcr
    a = torch.randn(8, 16, dtype=F16)
    b = torch.randn(16, 8, dtype=F16)                                # row-major B: rrr
    exc = raises(td.UnsupportedProblem, "layout", plain.run, a, b)
    assert "rrr" in str(exc)
    raises(td.UnsupportedProblem, "dtype", plain.run, a.bfloat16(), b.bfloat16().t().contiguous().t())


def test_unbuilt_kernel_cannot_run():
    kernel = td.Registry("sm_90").add(small_config())
    a, b = rcr()
    raises(td.NoKernelFound, "kernel", kernel.run, a, b)


# -- checked before any kernel is chosen (problem_from_args): D2, D3, D9, D15 ------------------------------
def derive(a, b, *, out=None, c=None, bias=None, bias_mode=None, d=(), activation=None, alpha=1.0, beta=0.0,
           out_dtype=None, allow_tf32=False):
    """problem_from_args of td.gemm's arguments, as the dispatch path builds them (c = out when beta != 0)."""
    if beta != 0 and c is None:
        c = out
    mode = bias_mode or ("col" if bias is not None else "none")
    return problem_from_args(GemmArgs(a, b, out, c, bias, mode, d, alpha, beta, activation or "none", out_dtype,
                                      allow_tf32))


@pytest.mark.parametrize("alias", ["a", "b", "a-view", "b-rows", "c-partial", "bias", "d-shifted"])
def test_out_sharing_memory_with_an_input_is_refused(alias):
    """D2: td.gemm(a, b, out=a) returned garbage (the kernel reads a while writing it)."""
    a = torch.randn(8, 8, dtype=F16)
    b = torch.randn(8, 8, dtype=F16).t()
    big = torch.randn(16, 8, dtype=F16)
    kwargs, out = {}, None
    if alias == "a":
        out = a
    elif alias == "b":
        out = b = torch.randn(8, 8, dtype=F16)        # row-major B (rrr): the very tensor written
    elif alias == "a-view":
        a = big[:8]
        out = big[4:12]
    elif alias == "b-rows":
        base = torch.randn(8, 16, dtype=F16)
        b, out = base[:, :8].t(), base[:, 8:]      # interleaved rows: conservatively refused
    elif alias == "c-partial":
        out, kwargs = big[:8], {"c": big[1:9], "beta": 1.0}
    elif alias == "bias":
        out = torch.empty(8, 8, dtype=F16)
        kwargs = {"bias": out[0]}
    else:
        out = big[:8]
        kwargs = {"d": (big[2:10],)}
    exc = raises(td.BadInput, "out", derive, a, b, out=out, **kwargs)
    assert "shares memory" in str(exc)


def test_out_may_be_c_or_d_itself():
    """In place is exact where out is the very tensor read at each written element (BLAS beta semantics)."""
    a, b = rcr()
    out = torch.randn(8, 8, dtype=F16)
    assert derive(a, b, out=out, beta=1.0).epilogue.with_c                 # c defaults to out
    assert derive(a, b, out=out, c=out[:, :], beta=1.0).epilogue.with_c    # a view of the same elements
    assert derive(a, b, out=out, d=(out,)).epilogue.num_d == 1


@pytest.mark.parametrize("make", [lambda: torch.empty(1, 8, dtype=F16).expand(8, 8),
                                  lambda: torch.empty(16, dtype=F16).as_strided((8, 8), (1, 1)),
                                  lambda: torch.empty(2, 1, 8, dtype=F16).expand(2, 8, 8)])
def test_out_with_overlapping_elements_is_refused(make):
    """D3: an out whose rows overlap (stride 0) was accepted; several programs would write one element."""
    a, b = rcr(batch=2) if make().dim() == 3 else rcr()
    exc = raises(td.BadInput, "out", derive, a, b, out=make())
    assert "share memory" in str(exc)


@pytest.mark.parametrize("kwargs, field", [
    ({"alpha": "2"}, "alpha"), ({"beta": [1.0]}, "beta"), ({"alpha": True}, "alpha"),
    ({"alpha": torch.tensor(2.0)}, "alpha"), ({"bias": [1.0] * 8}, "bias"),
    ({"c": np.zeros((8, 8), np.float16), "beta": 1.0}, "c"), ({"d": torch.randn(8, 8, dtype=F16)}, "d"),
    ({"bias_mode": "both"}, "bias_mode"), ({"out_dtype": torch.float16}, "out_dtype"),
    ({"allow_tf32": "yes"}, "allow_tf32"), ({"out": np.zeros((8, 8), np.float16)}, "out"),
])
def test_non_tensor_and_non_number_arguments(kwargs, field):
    """D9: alpha="2" reached the kernel; a list or NumPy array raised AttributeError."""
    a, b = rcr()
    exc = raises(td.BadInput, field, derive, a, b, **kwargs)
    assert isinstance(exc, (TypeError, ValueError))


@pytest.mark.parametrize("which", ["a", "b"])
def test_numpy_and_meta_operands(which):
    """D9: a NumPy operand and meta tensors are named, never an AttributeError / AssertionError."""
    a, b = rcr()
    arrays = {"a": a, "b": b, which: (a if which == "a" else b).numpy()}
    exc = raises(td.BadInput, which, derive, arrays["a"], arrays["b"])
    assert isinstance(exc, TypeError) and "torch.from_numpy" in str(exc)
    meta = {"a": a, "b": b, which: (a if which == "a" else b).to("meta")}
    meta["a" if which == "b" else "b"] = meta["a" if which == "b" else "b"].to("meta")
    exc = raises(td.BadInput, which if which == "a" else "a", derive, meta["a"], meta["b"])
    assert "meta" in str(exc)


def test_out_of_another_dtype_names_out():
    """D15: an fp32 out for fp16 inputs was reported as field 'problem' (no kernel); the output dtype is
    out_dtype or the inputs' default, and out must have it."""
    a, b = rcr()
    exc = raises(td.BadInput, "out", derive, a, b, out=torch.empty(8, 8))
    assert "out_dtype" in str(exc)
    assert derive(a, b, out=torch.empty(8, 8), out_dtype="fp32").out_dtype == "fp32"
    raises(td.BadInput, "out_dtype", derive, a, b, out_dtype="int32")    # no kernel writes int32 from fp16
