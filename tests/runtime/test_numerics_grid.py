"""Numerics of every family x dtype x layout x epilogue feature on odd shapes, on Triton's CPU interpreter,
against the float64 reference (runtime.reference.validate + an element-wise bound).

Shapes: every instance runs four (M, N, K) cases forming a Latin square over the values below, so each value
appears once in each dimension per instance; the pairing rotates between instances.
  1   - degenerate: a single row / column / a K loop of one element (and a matrix that is both row- and
        column-major, so the layout must come from the kernel, not from the strides)
  17  - not a multiple of any tile size (ragged edge in every tile, partial K step)
  100 - a multiple of 4 but not of 16 (defeats 16-element alignment assumptions)
  257 - one past a tile boundary (a nearly empty last tile; several K steps; 9 tiles of 32)
Each instance runs batch 1 and batch 3 cases (with broadcast B, 2-D C/D and per-batch bias on some cases); leading dimensions are
padded on some cases (strided views), and the output buffer is poisoned (NaN / INT32 minimum) including a padded
margin that must stay untouched.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from tiledispatch.problems.gemm import ACTIVATIONS, BIAS_MODES
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.testing import INT32_POISON, check_against_reference, matrix, poisoned, suites, vector

VALUES = (1, 17, 100, 257)
SHIFTS = ((1, 2), (2, 3), (3, 1), (1, 3), (2, 1), (3, 2))
CONFIGS = suites.numeric_configs()


def shape_cases(index: int) -> list[tuple[int, int, int, int]]:
    """Four (M, N, K, batch) cases; batch 3 goes to the two cheapest (interpreter time grows with M*N*K)."""
    a, b = SHIFTS[index % len(SHIFTS)]
    mnk = [(VALUES[j], VALUES[(j + a) % 4], VALUES[(j + b) % 4]) for j in range(4)]
    cheap = sorted(mnk, key=lambda s: s[0] * s[1] * s[2])[:2]
    return [(*s, 3 if s in cheap else 1) for s in mnk]


CASES = [pytest.param(i, case, id=f"{cfg.name}-{'x'.join(map(str, case[:3]))}-b{case[3]}")
         for i, cfg in enumerate(CONFIGS) for case in shape_cases(i)]


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry(CONFIGS)


def make_case(cfg, m: int, n: int, k: int, batch: int, variant: int):
    """Operands for `cfg` (all in the kernel's layout) plus a poisoned output with a padded margin."""
    gen = torch.Generator().manual_seed(1000 * variant + m + n + k)
    is_int = cfg.dtype == "int8"
    other = cfg.out_dtype
    pad = 5 if variant % 2 else 0
    lead = batch if batch > 1 else None
    a = matrix(m, k, letter=cfg.layout[0], dtype=cfg.dtype, batch=lead, ld_pad=pad, generator=gen)
    b_lead = None if (batch > 1 and variant % 3 == 0) else lead          # broadcast B over the batch
    b = matrix(k, n, letter=cfg.layout[1], dtype=cfg.dtype, batch=b_lead, ld_pad=pad, generator=gen)
    c = (matrix(m, n, letter="c" if variant % 2 else "r", dtype=other if not is_int else "int32", batch=lead,
                generator=gen) if cfg.with_c else None)
    bias = None
    if cfg.bias != "none":
        per_batch = batch if (batch > 1 and variant % 2) else None
        bias = vector(m if cfg.bias == "row" else n, dtype=other, batch=per_batch, generator=gen)
    d_lead = None if (batch > 1 and variant % 4 == 1) else lead            # 2-D D broadcast over the batch
    d = tuple(matrix(m, n, dtype=other if not is_int else "int32", batch=d_lead, ld_pad=3 * i, generator=gen)
              for i in range(cfg.num_d))
    alpha = (-2 if variant % 2 else 3) if is_int else (-1.25 if variant % 2 else 0.5)
    beta = (3 if is_int else 0.75) if cfg.with_c else 0.0
    margin = 3
    full = poisoned((*((batch,) if lead else ()), m, n + margin), cfg.out_dtype)
    out = full[..., :n]
    args = GemmArgs(a, b, out, c, bias, cfg.bias, d, alpha, beta, cfg.activation, cfg.out_dtype, cfg.dtype == "tf32")
    return args, full, margin


@pytest.mark.parametrize("index, case", CASES)
def test_instance_matches_reference(registry, index, case):
    cfg = CONFIGS[index]
    m, n, k, batch = case
    args, full, margin = make_case(cfg, m, n, k, batch, index)
    kernel = registry.get(cfg.name)
    result = kernel.run(args.a, args.b, out=args.out, c=args.c, bias=args.bias, d=args.d, alpha=args.alpha,
                        beta=args.beta)
    assert result.data_ptr() == args.out.data_ptr(), "the kernel must write into the given out tensor"
    check_against_reference(result, args, cfg.dtype)
    untouched = full[..., n:]
    if cfg.out_dtype == "int32":
        assert (untouched == INT32_POISON).all(), "the kernel wrote past the last column"
    else:
        assert torch.isnan(untouched).all(), "the kernel wrote past the last column"


def test_default_out_is_allocated_with_the_right_shape_and_dtype(registry):
    cfg = next(c for c in CONFIGS if c.family == "splitk" and c.dtype == "bf16")
    args, _, _ = make_case(cfg, 17, 100, 33, 3, 0)
    out = registry.get(cfg.name).run(args.a, args.b, c=args.c, bias=args.bias, d=args.d, alpha=args.alpha,
                                     beta=args.beta)
    assert out.shape == (3, 17, 100) and out.dtype == torch.bfloat16
    check_against_reference(out, dataclasses.replace(args, out=out), cfg.dtype)


def test_grid_covers_every_family_dtype_layout_and_epilogue_feature():
    """Guards the budget-driven design above: shrinking the grid must not silently drop coverage."""
    fams, layouts = set(suites.FAMILIES), set(suites.LAYOUTS)
    assert {(c.family, c.dtype, c.layout) for c in CONFIGS} >= {
        (f, d, l_) for f in fams for d in (*suites.FLOAT_DTYPES, "int8") for l_ in layouts}
    floats = [c for c in CONFIGS if c.dtype != "int8"]
    assert {(c.family, c.activation) for c in floats} == {(f, a) for f in fams for a in ACTIVATIONS}
    assert {(c.dtype, c.activation) for c in floats} == {
        (d, a) for d in suites.FLOAT_DTYPES for a in ACTIVATIONS}
    for family in fams:
        for dtype in (*suites.FLOAT_DTYPES, "int8"):
            group = [c for c in CONFIGS if c.family == family and c.dtype == dtype]
            assert {c.bias for c in group} == set(BIAS_MODES), (family, dtype)
            assert {c.num_d for c in group} == {0, 1, 2}, (family, dtype)
            assert {c.with_c for c in group} == {False, True}, (family, dtype)
    assert {c.activation for c in CONFIGS if c.dtype == "int8"} == {"none", "relu"}
    assert {c.out_dtype for c in CONFIGS if c.dtype in ("fp16", "bf16")} >= {"fp16", "bf16", "fp32"}
    for i in range(len(CONFIGS)):
        cases = shape_cases(i)
        for axis in range(3):
            assert sorted(case[axis] for case in cases) == sorted(VALUES)
        assert {case[3] for case in cases} == {1, 3}
    assert len(CONFIGS) <= 50, "keep the numerics grid within the CPU-lane compile budget"


def test_folded_split_reduce_matches_reference(build_registry):
    """128 splits (kernels/gemm_splitk: runs of 16 partial slots folded before the reduce) with a per-batch bias
    and an activation: K = 2100 gives 17 elements per split rounded up to one 32-element block, so splits 0..65
    hold products and 66..127 zeros, all summed in order; batch 2 checks the fold's batch offsets."""
    base = next(c for c in CONFIGS if c.family == "splitk" and c.dtype == "fp16")
    cfg = dataclasses.replace(base, split_k=128, block_k=32, bias="col", activation="relu", with_c=False, num_d=0)
    args, full, margin = make_case(cfg, 17, 33, 2100, 2, 1)
    out = build_registry([cfg]).get(cfg.name).run(args.a, args.b, out=args.out, bias=args.bias, alpha=args.alpha)
    check_against_reference(out, args, cfg.dtype)
    assert torch.isnan(full[..., 33:]).all(), "the kernel wrote past the last column"
