"""Family `igemm`, fwd and bwd_data: implicit GEMM on the interpreter vs the float64 reference, its validity and
problem-match rules, launch grids, and sm_90 compiles of the instances recommended for presets."""
from __future__ import annotations

import dataclasses

import pytest

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels.family import config_errors as conv_config_errors
from tiledispatch.kernels.family import problem_mismatch as conv_problem_mismatch
from tiledispatch.kernels import conv_igemm
from tiledispatch.kernels.conv_common import phase_rows
from tiledispatch.registry.kernel import prepare
from tiledispatch.testing.reference import make_conv_args, validate_conv
from tiledispatch.runtime.launcher import Workspaces

DIRECTIONS = ("fwd", "bwd_data")
SMALL = {"family": "igemm", "block_m": 32, "block_n": 16, "block_k": 16, "num_warps": 4, "num_stages": 2}

# Per ndim: odd sizes (partial row tiles), a stride 2 and a dilation 2 on different dims, asymmetric padding.
# stride / padding / dilation per dim, outermost first.
GEOMETRY = {
    1: {"spatial": (11,), "filter": (3,), "stride": 2, "padding": ((2, 1),)},
    2: {"spatial": (5, 7), "filter": (3, 2), "stride": (2, 1), "padding": ((1, 0), (2, 1)), "dilation": (1, 2)},
    3: {"spatial": (3, 4, 5), "filter": (2, 3, 3), "stride": (1, 2, 2), "padding": ((0, 1), (1, 1), (2, 0)),
        "dilation": (2, 1, 1)},
}

# name -> (config fields, (n, c, k, groups), dtype); the comment above each says why it is here
CASES = {
    # dense G=1; 24 channels: two BLOCK_K chunks (the second masked) and two column tiles (the second masked)
    "dense": ({"kloop": "tap", "groups_per_program": 1, "align": 8}, (2, 24, 24, 1), "fp16"),
    # C/G = 4 < BLOCK_K: the flat loop packs 4 taps per chunk; K/G = 2 columns; two groups merged per program;
    # fp32 checks the ieee dot path
    "cg4": ({"kloop": "flat", "groups_per_program": 2, "align": 1}, (1, 16, 8, 4), "fp32"),
    # C/G = 16 = BLOCK_K with 4 groups per program over 6 groups: the second group block is half empty
    "cg16": ({"kloop": "tap", "groups_per_program": 4, "align": 8}, (1, 96, 48, 6), "fp16"),
    # block-diagonal dot, C/G = K/G = 4: 6 groups in two 16-channel tiles (the second has 2 real groups, the
    # rest masked), align 8 with C/G below 8
    "diag4": ({"kloop": "diag", "block_k": 4, "align": 8}, (2, 24, 24, 6), "fp16"),
}
# 2-D only (the ndim-independent loop variants): the flat loop's align-8 vector hints with one group per program,
# and depthwise-like C/G = K/G = 1 (supported, though the direct family is the fast one there)
EXTRA_CASES = {
    "flat_a8": ({"kloop": "flat", "groups_per_program": 1, "align": 8}, (2, 32, 32, 2), "fp16"),
    "depthwise": ({"kloop": "flat", "groups_per_program": 4, "align": 1}, (2, 8, 8, 8), "fp16"),
    # block-diagonal dot with C/G = 2 and 10 channels (align 1: odd channel runs), fp32 (the ieee dot path)
    "diag2_a1": ({"kloop": "diag", "block_k": 2, "align": 1}, (1, 10, 10, 5), "fp32"),
}
# split instances (split_k >= 2): the reduction loop cut into ranges summed by the reduce entry; the tiny grids
# here make the launch choose the most splits the loop allows (tests below check SPLITS > 1). 1-D: dense only
# (3 taps leave too few iterations of the others to split)
SPLIT_CASES = {
    # dense tap loop: 12 iterations (6 taps x 2 chunks) in 3 splits; bwd_data: per-phase tap counts differ
    "split_dense": ({"kloop": "tap", "groups_per_program": 1, "align": 8, "split_k": 4}, (2, 24, 24, 1), "fp16"),
    # flat loop over packed (tap, channel) pairs with merged groups, C/G = 12, K/G = 24: chunks of 16 straddle
    # taps, so a split range starts inside a tap
    "split_cg12": ({"kloop": "flat", "groups_per_program": 2, "align": 1, "split_k": 2}, (1, 48, 96, 4), "fp32"),
    # block-diagonal dots: one iteration per tap, split over taps
    "split_diag4": ({"kloop": "diag", "block_k": 4, "align": 8, "split_k": 2}, (2, 24, 24, 6), "fp16"),
}
# fwd epilogues: bias + activation, on 2-D and 3-D dense problems
EPILOGUES = {2: ("relu", True), 3: ("gelu_tanh", True)}
# bwd_data phases without any contributing tap: a 1x1 stride-2 filter leaves odd pixels with dx = 0, and
# stride 3 with dilation 2 makes the tap progression skip (t0 > 0, step 3); NaN poisoning checks they are written.
# The last one has taps reaching past a 2-pixel first dim and an empty phase (stride 3 > 2 pixels): the rows past
# the end of the GEMM view must stay masked (the bounds-checked loads below)
PHASE_PROBLEMS = [
    {"spatial": (9,), "filter": (1,), "stride": 2, "padding": 0},
    {"spatial": (8, 7), "filter": (3, 4), "stride": (3, 2), "padding": ((2, 1), (0, 3)), "dilation": (2, 3)},
    {"spatial": (2, 9), "filter": (3, 2), "stride": (3, 1), "padding": ((2, 2), (0, 1)), "dilation": (2, 1)},
]


def _config(direction, ndim, dtype, fields, activation="none", bias=False):
    return ConvConfig(direction=direction, ndim=ndim, dtype=dtype, activation=activation, bias=bias,
                      **{**SMALL, **fields})


def _problem(direction, ndim, sizes, dtype, geometry=None, activation="none", bias=False):
    n, c, k, groups = sizes
    return td.ConvProblem(direction, n, c, k, groups, dtype=dtype, bias=bias, activation=activation,
                          **(geometry or GEOMETRY[ndim]))


def _numeric_cases():
    out = []
    for direction in DIRECTIONS:
        for ndim in (1, 2, 3):
            for name, (fields, sizes, dtype) in CASES.items():
                out.append((f"{direction}-{ndim}d-{name}", _config(direction, ndim, dtype, fields),
                            _problem(direction, ndim, sizes, dtype)))
        for name, (fields, sizes, dtype) in EXTRA_CASES.items():
            out.append((f"{direction}-2d-{name}", _config(direction, 2, dtype, fields),
                        _problem(direction, 2, sizes, dtype)))
        for ndim in (1, 2, 3):
            for name, (fields, sizes, dtype) in SPLIT_CASES.items():
                if ndim == 1 and name != "split_dense":
                    continue
                out.append((f"{direction}-{ndim}d-{name}", _config(direction, ndim, dtype, fields),
                            _problem(direction, ndim, sizes, dtype)))
        dense_fields, dense_sizes, dense_dtype = CASES["dense"]
        for geometry in PHASE_PROBLEMS:
            ndim = len(geometry["spatial"])
            out.append((f"{direction}-{ndim}d-phases", _config(direction, ndim, dense_dtype, dense_fields),
                        _problem(direction, ndim, dense_sizes, dense_dtype, geometry)))
    for ndim, (activation, bias) in EPILOGUES.items():
        for name in ("dense", "split_dense"):   # the epilogue in the main entry, and in the split reduce
            fields, sizes, dtype = {**CASES, **SPLIT_CASES}[name]
            out.append((f"fwd-{ndim}d-{name}-{activation}", _config("fwd", ndim, dtype, fields, activation, bias),
                        _problem("fwd", ndim, sizes, dtype, activation=activation, bias=bias)))
    return out


NUMERIC = _numeric_cases()


def _recommended(direction, ndim, tile, warps, stages, gpp=1, kloop="tap"):
    block_m, block_n, block_k = tile
    return ConvConfig(direction=direction, ndim=ndim, dtype="bf16", block_m=block_m, block_n=block_n,
                      block_k=block_k, groups_per_program=gpp, num_warps=warps, num_stages=stages, kloop=kloop)


# Recommended preset instances (bf16, align 8): they must compile for sm_90. The numeric cases above compile the
# other variants (fp16/fp32, align 1, epilogues) for sm_90 too, through the registry fixture.
RECOMMENDED = [
    # dense 2-D (K/G >= 256): 128x256 tiles, 3 stages; dense 3-D / K/G = 128: 128x128, 4 stages; K/G = 64: 128x64
    _recommended("fwd", 2, (128, 256, 64), 8, 3),
    _recommended("bwd_data", 2, (128, 256, 64), 8, 3),
    _recommended("bwd_data", 3, (128, 128, 64), 8, 4),
    _recommended("fwd", 3, (128, 64, 64), 4, 4),
    # grouped, several groups per program (batched dot): C/G = 8 flat (2 taps per chunk), C/G = 16 and 32 tap
    _recommended("fwd", 2, (64, 16, 16), 4, 3, gpp=8, kloop="flat"),
    _recommended("bwd_data", 3, (64, 16, 16), 4, 3, gpp=8, kloop="flat"),
    _recommended("fwd", 1, (128, 16, 16), 4, 3, gpp=4),
    _recommended("bwd_data", 2, (64, 32, 32), 4, 3, gpp=4),
    # block-diagonal dots for C/G = K/G = 4 and 8 (ResNeXt's first stages)
    _recommended("fwd", 2, (128, 32, 4), 4, 3, kloop="diag"),
    _recommended("bwd_data", 3, (128, 32, 8), 4, 3, kloop="diag"),
]


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The instances of `registry` and of the sm_90 compile test, when selected."""
    out = [[cfg for _, cfg, _ in NUMERIC]] if any("registry" in item.fixturenames for item in items) else []
    if any(item.name == "test_recommended_instances_compile_for_sm90" for item in items):
        out.append(list(RECOMMENDED))
    return out


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry([cfg for _, cfg, _ in NUMERIC])


@pytest.fixture
def bounds_checked(monkeypatch):
    """Make the interpreter raise on any unmasked load or store outside the given tensors (on the GPU it would
    read garbage into masked-off rows or fault): returns a function that arms the check for a set of tensors."""
    import numpy as np
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    ranges: list[tuple[int, int]] = []

    def check(ptrs, mask):
        addresses = ptrs.data[mask.data.astype(bool)] if mask is not None else ptrs.data.ravel()
        size = np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize
        inside = np.zeros(addresses.shape, dtype=bool)
        for low, high in ranges:
            inside |= (addresses >= low) & (addresses + size <= high)
        assert inside.all(), f"{int((~inside).sum())} unmasked accesses outside every tensor"

    load, store = builder.create_masked_load, builder.create_masked_store
    take = Workspaces.__call__

    def recording_take(self, stream):   # the launch's workspaces (fresh or kept from a call before) are legal too
        tensors = take(self, stream)
        ranges.extend((t.data_ptr(), t.data_ptr() + t.untyped_storage().nbytes()) for t in tensors)
        return tensors

    monkeypatch.setattr(Workspaces, "__call__", recording_take)
    monkeypatch.setattr(builder, "create_masked_load",
                        lambda self, ptrs, mask, *rest: (check(ptrs, mask), load(self, ptrs, mask, *rest))[1])
    monkeypatch.setattr(builder, "create_masked_store",
                        lambda self, ptrs, value, mask, *rest: (check(ptrs, mask),
                                                                store(self, ptrs, value, mask, *rest))[1])

    def arm(*tensors):
        ranges[:] = [(t.data_ptr(), t.data_ptr() + t.untyped_storage().nbytes()) for t in tensors if t is not None]

    return arm


@pytest.mark.parametrize("cfg, problem", [case[1:] for case in NUMERIC], ids=[case[0] for case in NUMERIC])
@pytest.mark.slow
def test_matches_reference(registry, bounds_checked, cfg, problem):
    assert conv_problem_mismatch(cfg, problem) is None
    args = make_conv_args(problem, "cpu", poison=True)
    bounds_checked(args.x, args.w, args.y, args.bias)
    out = registry.get(cfg.name).run(problem, x=args.x, w=args.w, y=args.y, bias=args.bias)
    result = validate_conv(out, problem, args)
    assert result["passed"], result


def test_split_cases_do_split():
    """Every split case launches more than one split and the reduce entry (else it tests nothing new)."""
    for name, cfg, problem in NUMERIC:
        if "split" in name:
            plan = conv_igemm.launch_plan(cfg, problem, 132)
            splits = dict(plan.scalars)["SPLITS"]
            launched = [grid[0] > 0 for grid in plan.grids[1:]]     # the wide or the tall reduce, not both
            assert splits > 1 and plan.grids[0][2] == splits and sum(launched) == 1, name
            assert plan.workspaces[0][1] == splits * conv_igemm.written_elements(problem), name


def test_split_count_fills_the_gpu_and_respects_split_k():
    cfg = _config("fwd", 2, "bf16", {"block_m": 64, "block_n": 64, "block_k": 64, "split_k": 8})
    small = td.ConvProblem("fwd", 32, 512, 512, 1, (7, 7), (3, 3), padding=1)   # 25 x 8 = 200 tiles, 72 iters
    assert conv_igemm.split_count(cfg, small, 132) == 3   # 600 programs: 5 waves of 132, 10% idle
    assert conv_igemm.split_count(dataclasses.replace(cfg, split_k=0), small, 132) == 1
    tiny = td.ConvProblem("fwd", 1, 512, 64, 1, (7, 7), (3, 3), padding=1)      # one tile: as many as allowed
    assert conv_igemm.split_count(cfg, tiny, 132) == 8
    big = td.ConvProblem("fwd", 32, 64, 64, 1, (56, 56), (3, 3), padding=1)     # 1,568 tiles: no split
    assert conv_igemm.split_count(cfg, big, 132) == 1


@pytest.mark.slow
def test_recommended_instances_compile_for_sm90(build_registry):
    for cfg in RECOMMENDED:
        assert conv_config_errors(cfg, td.get_arch("sm_90")) == [], cfg.name
    build_registry(RECOMMENDED)   # asserts that every instance compiled


def test_align8_needs_channels_per_group_multiple_of_8():
    cfg = _config("fwd", 2, "fp16", {"groups_per_program": 2, "align": 8})
    problem = td.ConvProblem("fwd", 1, 32, 32, 8, (5, 5), (3, 3), dtype="fp16")   # C/G = 4, problem align 8
    assert problem.align == 8
    assert conv_problem_mismatch(cfg, problem).startswith("align")
    assert conv_problem_mismatch(dataclasses.replace(cfg, align=1), problem) is None


def test_more_groups_per_program_than_groups_is_refused():
    cfg = _config("bwd_data", 2, "fp16", {"groups_per_program": 4})
    problem = td.ConvProblem("bwd_data", 1, 16, 16, 2, (5, 5), (3, 3), dtype="fp16")
    assert conv_problem_mismatch(cfg, problem).startswith("groups_per_program")


def test_int32_rows_guard():
    cfg = _config("fwd", 2, "fp16", {"align": 8})
    problem = td.ConvProblem("fwd", 4096, 8, 8, 1, (1024, 1024), (1, 1), dtype="fp16")   # 2^32 pixels
    assert conv_problem_mismatch(cfg, problem).startswith("spatial")


@pytest.mark.parametrize("direction, stride, want_phases", [("fwd", (2, 3), 1), ("bwd_data", (2, 3), 6),
                                                             ("bwd_data", (1, 1), 1)])
def test_grid_has_one_axis_entry_per_stride_phase(direction, stride, want_phases):
    cfg = _config(direction, 2, "fp16", {"groups_per_program": 2})
    problem = td.ConvProblem(direction, 2, 24, 40, 4, (9, 10), (3, 3), stride=stride, dtype="fp16")
    (grid,) = conv_igemm.launch_plan(cfg, problem, 132).grids
    cols = problem.k_per_group if direction == "fwd" else problem.c_per_group
    assert grid[1] == want_phases
    assert grid[0] == (-(-phase_rows(problem) // cfg.block_m) * 2 * -(-cols // cfg.block_n))


def test_misaligned_weight_view_lowers_the_alignment():
    """align-8 kernels read the weight in 16-byte vectors: a weight view at an odd offset demotes the call."""
    import torch

    problem = td.ConvProblem("fwd", 1, 16, 16, 1, (4, 4), (3, 3), dtype="fp16")
    args = make_conv_args(problem, "cpu")
    storage = torch.empty(args.w.numel() + 1, dtype=args.w.dtype)[1:]
    w = storage.as_strided(args.w.shape, args.w.stride())
    assert prepare(problem, dataclasses.replace(args, w=args.w)).align == 8
    assert prepare(problem, dataclasses.replace(args, w=w)).align == 1


def test_diag_rules():
    arch = td.Registry("sm_90").arch
    cfg = _config("fwd", 2, "fp16", {"kloop": "diag", "block_k": 4, "block_n": 32})
    assert conv_config_errors(cfg, arch) == []
    for fields, field in (({"block_k": 3}, "block_k"), ({"block_k": 64}, "block_k"),
                          ({"groups_per_program": 2}, "groups_per_program")):
        assert field in dict(conv_config_errors(dataclasses.replace(cfg, **fields), arch)), fields
    # bwd_weight 'diag' (kernels/conv_wgrad.py) reduces over pixels: block_k is a dot block, and one channel tile
    # makes rows and columns (block_m == block_n)
    wgrad = dataclasses.replace(cfg, direction="bwd_weight")
    assert set(dict(conv_config_errors(wgrad, arch))) == {"block_k"}
    assert conv_config_errors(dataclasses.replace(wgrad, block_k=64), arch) == []
    assert set(dict(conv_config_errors(dataclasses.replace(wgrad, block_k=64, block_m=64), arch))) == {"block_m"}
    grouped = td.ConvProblem("fwd", 1, 32, 32, 8, (5, 5), (3, 3), dtype="fp16")   # C/G = K/G = 4
    assert conv_problem_mismatch(cfg, grouped) is None
    wider = td.ConvProblem("fwd", 1, 32, 64, 8, (5, 5), (3, 3), dtype="fp16")     # K/G = 8
    assert conv_problem_mismatch(cfg, wider).startswith("c_per_group")
