"""Family `tma` (stride-1 fwd / bwd_data / bwd_weight over tensor-copy boxes) on the interpreter vs the float64
reference, its validity and problem-match rules, and sm_90 compiles."""
from __future__ import annotations

import dataclasses
import re

import pytest

import tiledispatch as td
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.kernels.family import config_errors as conv_config_errors
from tiledispatch.kernels.family import problem_mismatch as conv_problem_mismatch
from tiledispatch.kernels import conv_igemm, conv_tma, conv_tma_wgrad
from tiledispatch.testing.reference import run_and_validate

ARCH = td.get_arch("sm_90")
# the smallest boxes per ndim: 1-D 16 pixels, 2-D 2x8, 3-D 1x8x8
BLOCK_M = {1: 16, 2: 16, 3: 64}
# Per ndim: odd sizes (partial boxes at the far edge), padding larger than the dilated reach on one side
# (boxes starting at negative coordinates), asymmetric padding, a dilation 2.
GEOMETRY = {
    1: {"spatial": (19,), "filter": (3,), "padding": ((2, 1),), "dilation": 2},
    2: {"spatial": (5, 11), "filter": (3, 2), "padding": ((1, 2), (1, 0)), "dilation": (1, 2)},
    3: {"spatial": (3, 5, 9), "filter": (2, 3, 3), "padding": ((1, 0), (1, 1), (2, 2)), "dilation": (2, 1, 1)},
}
# (n, c, k, groups): the comment says why each is here
SIZES = {
    # dense, 24 channels: a 16-channel chunk plus a half-empty one (zero-filled past C), two column tiles
    "dense": (2, 24, 24, 1),
    # 3 groups of 16 in, 8 out: fwd chunks stay inside the group; bwd_data K/G = 8 < block_k is refused (below)
    "grouped": (1, 48, 24, 3),
    # 2 groups of 8 in, 16 out: fwd chunks of 16 read the next group's channels against zero-filled weights
    "grouped8": (1, 16, 32, 2),
}


def _config(direction, ndim, activation="none", bias=False, block_k=16):
    return ConvConfig(family="tma", direction=direction, ndim=ndim, dtype="fp16", block_m=BLOCK_M[ndim],
                      block_n=16, block_k=block_k, num_warps=4, num_stages=2, align=8, activation=activation,
                      bias=bias)


def _wgrad_config(ndim, split=0):
    # bwd_weight: block_k pixels per box (the smallest box per ndim), 16x16 (k, c) tiles, a filter row per program
    return ConvConfig(family="tma", direction="bwd_weight", ndim=ndim, dtype="fp16", block_m=16, block_n=16,
                      block_k=BLOCK_M[ndim], num_warps=4, num_stages=2, split_k=split, kloop="taprow", align=8)


def _problem(direction, ndim, sizes, activation="none", bias=False):
    n, c, k, groups = sizes
    return td.ConvProblem(direction, n, c, k, groups, dtype="fp16", activation=activation, bias=bias,
                          **GEOMETRY[ndim])


def _cases():
    out = []
    for direction in ("fwd", "bwd_data"):
        for ndim in (1, 2, 3):
            for name, sizes in SIZES.items():
                if direction == "bwd_data" and name == "grouped":
                    continue
                out.append((f"{direction}-{ndim}d-{name}", _config(direction, ndim), _problem(direction, ndim, sizes)))
    for ndim, activation in ((2, "relu"), (3, "gelu_tanh")):
        out.append((f"fwd-{ndim}d-bias-{activation}", _config("fwd", ndim, activation, True),
                    _problem("fwd", ndim, SIZES["dense"], activation, True)))
    for ndim in (1, 2, 3):   # filter widths 3, 2, 3: the 2-D filter row masks its third tap
        for name, sizes in SIZES.items():
            out.append((f"bwd_weight-{ndim}d-{name}", _wgrad_config(ndim), _problem("bwd_weight", ndim, sizes)))
    # split reductions (at most 4 ranges of the taps x chunks loop, the ordered reduce runs the epilogue)
    for direction, ndim in (("fwd", 2), ("bwd_data", 3), ("fwd", 1)):
        cfg = dataclasses.replace(_config(direction, ndim, *(("silu", True) if direction == "fwd" else ())),
                                  split_k=4)
        out.append((f"{direction}-{ndim}d-split", cfg, _problem(direction, ndim, SIZES["dense"], cfg.activation,
                                                                 cfg.bias)))
    # 4 splits of the boxes (the ordered reduce), 2-D dense: 2 x 3 x 2 boxes of 2x8 output pixels
    out.append(("bwd_weight-2d-split", _wgrad_config(2, split=4), _problem("bwd_weight", 2, SIZES["dense"])))
    return out


CASES = _cases()


def _bf16_instances() -> list[ConvConfig]:
    """bf16 instances of every direction and ndim (bwd_weight: kloop taprow)."""
    out = [ConvConfig(family="tma", direction=direction, ndim=ndim, dtype="bf16", block_m=bm, block_n=128,
                      block_k=64, num_warps=8, num_stages=3, align=8)
           for direction in ("fwd", "bwd_data") for ndim, bm in ((2, 128), (3, 128), (1, 64))]
    return out + [ConvConfig(family="tma", direction="bwd_weight", ndim=ndim, dtype="bf16", block_m=64,
                             block_n=64, block_k=64, num_warps=4, num_stages=3, kloop="taprow", align=8)
                  for ndim in (1, 2, 3)]


def prebuild_registries(items, load_script):
    """(tests/conftest.py) The instances of `registry` and of the sm_90 compile test, when selected."""
    out = [[cfg for _, cfg, _ in CASES]] if any("registry" in item.fixturenames for item in items) else []
    if any(item.name == "test_instances_compile_for_sm90" for item in items):
        out.append(_bf16_instances())
    return out


@pytest.fixture(scope="module")
def registry(build_registry):
    return build_registry([cfg for _, cfg, _ in CASES])


@pytest.mark.parametrize("cfg, problem", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.slow
def test_matches_reference(registry, cfg, problem):
    assert conv_problem_mismatch(cfg, problem) is None
    _, _, result = run_and_validate(registry.get(cfg.name), problem)
    assert result["passed"], result


def test_problem_match_rules():
    cfg = _config("fwd", 2)
    assert conv_problem_mismatch(cfg, td.ConvProblem("fwd", 1, 16, 16, 1, (6, 6), (3, 3), stride=2,
                                                     dtype="fp16")).startswith("stride")
    assert conv_problem_mismatch(cfg, td.ConvProblem("fwd", 1, 16, 16, 4, (6, 6), (3, 3),
                                                     dtype="fp16")).startswith("c_per_group")
    grouped = _problem("bwd_data", 2, SIZES["grouped"])   # K/G = 8 < block_k = 16
    assert conv_problem_mismatch(_config("bwd_data", 2), grouped).startswith("k_per_group")
    assert conv_problem_mismatch(_config("bwd_data", 2, block_k=16), _problem("bwd_data", 2, (1, 24, 48, 3))) is None


@pytest.mark.parametrize("changes, field", [
    ({"direction": "bwd_weight"}, "kloop"), ({"dtype": "fp32"}, "dtype"), ({"align": 1}, "align"),
    ({"kloop": "flat"}, "kloop"), ({"groups_per_program": 2}, "groups_per_program"), ({"split_k": 1}, "split_k"),
    ({"ndim": 3, "block_m": 32}, "block_m"), ({"ndim": 2, "block_m": 16, "block_n": 24}, "block_n"),
])
def test_validity_names_the_field(changes, field):
    cfg = dataclasses.replace(_config("fwd", 2), **changes)
    assert field in dict(conv_config_errors(cfg, ARCH))


def test_grid_counts_pixel_boxes_groups_and_column_tiles():
    cfg = dataclasses.replace(_config("fwd", 2), block_m=64)          # 8 x 8 boxes
    problem = td.ConvProblem("fwd", 3, 64, 96, 2, (14, 20), (3, 3), padding=1)
    assert conv_tma.pixel_box(cfg) == (8, 8)
    assert conv_tma.tiles(cfg, problem) == 3 * 2 * 3 * 2 * 3   # n x boxes(h) x boxes(w) x G x column tiles
    assert conv_tma.grid(cfg, problem, 132) == (108, 1, 1)      # fewer tiles than program slots: one each
    assert conv_tma.grid(cfg, problem, 4)[0] == 4 * conv_tma.programs_per_sm(cfg)   # persistent walk


def test_split_plan_fills_the_program_slots():
    cfg = dataclasses.replace(_config("fwd", 2), split_k=4)
    problem = _problem("fwd", 2, SIZES["dense"])
    assert conv_igemm.loop_iterations(cfg, problem) == 6 * 2        # 3x2 taps x 2 chunks of 16 of 24 channels
    assert conv_tma.split_count(cfg, problem, 132) == 4           # split_k (<= loop iterations / 2)
    plan = conv_tma.launch_plan(cfg, problem, 132)
    assert plan.scalars == (("NUM_PROGRAMS", conv_tma.tiles(cfg, problem) * 4), ("SPLITS", 4))
    assert plan.workspaces[0][1] == 4 * 2 * 6 * 10 * 24           # splits x N x output pixels x K
    assert conv_tma.split_count(dataclasses.replace(cfg, split_k=8), problem, 1) == 1   # 1 SM: tiles fill it
    assert conv_tma.split_count(_config("fwd", 2), problem, 132) == 1


def test_wgrad_rules_and_grid():
    cfg = _wgrad_config(2, split=4)
    problem = _problem("bwd_weight", 2, SIZES["dense"])
    assert conv_tma_wgrad.boxes(cfg, problem) == 12               # 2 images x 3 x 2 boxes of 2x8 pixels
    assert conv_tma_wgrad.split_plan(cfg, problem, 132) == (4, 3)
    plan = conv_tma_wgrad.launch_plan(cfg, problem, 132)
    assert plan.grids[0] == (2 * 2 * 3, 4, 1)                     # (k tiles x c tiles x filter rows, splits, G)
    wide = td.ConvProblem("bwd_weight", 1, 16, 16, 1, (8, 8), (3, 5), padding=1, dtype="fp16")
    assert conv_problem_mismatch(cfg, wide).startswith("filter")
    assert "block_k" in dict(conv_config_errors(dataclasses.replace(_wgrad_config(3), block_k=32), ARCH))


@pytest.mark.slow
def test_instances_compile_for_sm90(build_registry):
    for cfg in _bf16_instances():
        assert conv_config_errors(cfg, ARCH) == [], cfg.name
    build_registry(_bf16_instances())   # asserts that every instance compiled


def _loop_body(source: str) -> list[str]:
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith("for it in range("))
    depth = len(lines[at]) - len(lines[at].lstrip())
    body = []
    for line in lines[at + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= depth:
            break
        body.append(line)
    return body


@pytest.mark.parametrize("direction", ["fwd", "bwd_data"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("split", [0, 4])
def test_the_loop_steps_taps_and_chunks_as_counters(direction, ndim, split):
    """No division or modulo a K step: kc and the filter indices are counters (stop 60: the 3-D fwd 256x128
    instance ran 13% faster on an H200 that way, docs/design/conv_tma.md)."""
    from tiledispatch.codegen.render import render_source

    body = _loop_body(render_source(dataclasses.replace(_config(direction, ndim), split_k=split)))
    assert body and not [line for line in body if "//" in line or "%" in line]
    # kc and every filter dim but the outermost wrap
    assert sum("tl.where(wrap, 0," in line for line in body) == ndim


@pytest.mark.parametrize("name", ["fwd-2d-dense", "bwd_data-3d-grouped8"])
def test_persistent_walk_matches_reference(name):
    """On a 1-SM device every program walks several tiles (the descriptors are reused across them)."""
    _, cfg, problem = next(case for case in CASES if case[0] == name)
    reg = td.Registry(ARCH.with_device(1, "test device"))
    reg.add(cfg)
    assert not reg.build(max_workers=1).failed
    assert conv_tma.tiles(cfg, problem) > conv_tma.grid(cfg, problem, 1)[0]
    assert run_and_validate(reg.get(cfg.name), problem)[2]["passed"]


def _register_operand_in_flight(ttgir: str) -> bool:
    """A Hopper dot whose first operand comes from registers while the IR lets dots stay pending: the
    read-after-write hazard of Triton 3.6 (issue 9433) that kernels/conv_tma.py avoids."""
    register_operand = re.search(r"ttng\.warp_group_dot %\S+, %\S+, %\S+[^\n]*: tensor<", ttgir)
    return bool(register_operand) and any(int(p) for p in re.findall(r"pendings = (\d+)", ttgir))


HAZARD_CASES = [
    "conv-tma-fwd-2d-bf16-bf16-fp32-128x128x64-g1-w4-s3-k0-tap-a8-none-b0",
    "conv-tma-fwd-3d-bf16-bf16-fp32-128x128x64-g1-w8-s3-k4-tap-a8-relu-b1",
    "conv-tma-bwd_data-2d-bf16-bf16-fp32-64x128x64-g1-w4-s4-k0-tap-a8-none-b0",
    "conv-tma-bwd_data-3d-bf16-bf16-fp32-128x128x64-g1-w4-s3-k4-tap-a8-none-b0",
    "conv-tma-bwd_weight-2d-bf16-bf16-fp32-64x64x64-g1-w4-s3-k0-taprow-a8-none-b0",
    "conv-tma-bwd_weight-3d-bf16-bf16-fp32-128x64x64-g1-w8-s3-k4-taprow-a8-none-b0",
]
# compiles each name's main entry for sm_90 in a fresh process (this one may have run the interpreter, which
# leaves Triton unable to compile) and prints {name: ttgir} as JSON
_TTGIR_SCRIPT = """
import json, sys, tempfile
from pathlib import Path
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tiledispatch.build.loader import import_source
from tiledispatch.codegen.render import render_source
from tiledispatch.configs.naming import parse_name
from tiledispatch.kernels.spec import EntrySpec
out = {}
with tempfile.TemporaryDirectory() as tmp:
    for i, name in enumerate(sys.argv[1:]):
        path = Path(tmp) / f"k{i}.py"
        path.write_text(render_source(parse_name(name)))
        module = import_source(path, interpret=False)
        spec = EntrySpec.from_json(module.ENTRIES[0])
        src = ASTSource(getattr(module, spec.fn), spec.signature(), spec.constexprs(), spec.attrs())
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": spec.num_warps, "num_stages": spec.num_stages})
        out[name] = compiled.asm["ttgir"]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def ttgirs():
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _TTGIR_SCRIPT, *HAZARD_CASES], capture_output=True, text=True,
                          check=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", HAZARD_CASES)
def test_no_register_operand_dot_in_flight(name, ttgirs):
    """Compiled for sm_90: fwd / bwd_data keep both dot operands in shared memory; bwd_weight, whose first
    operand is in registers, waits for its dots before the next box."""
    assert "warp_group_dot" in ttgirs[name]
    assert not _register_operand_in_flight(ttgirs[name])
