"""GPU lane: the exported C library computes what torch computes. Small sm_90 kernels (a tiled fp16 GEMM, a
TMA GEMM for aligned shapes, an implicit-GEMM fp16 conv per direction) are exported with 24 GEMM problems and
20 conv problems per direction; each runs through td_gemm / td_conv (ctypes) on CUDA tensors and matches
torch in fp32."""
from __future__ import annotations

import pytest
import torch

from tiledispatch.bundle.capi.binding import CapiError, CapiLibrary, gemm_problem
from tiledispatch.bundle.capi.check import conv_error, gemm_error
from tiledispatch.bundle.capi.export import export_capi
from tiledispatch.bundle.capi.problems import ConvSpec, GemmSpec, parse_problems
from tiledispatch.bundle.export import export_bundle
from tiledispatch.testing import small_config
from tiledispatch.testing import small_defaults as small

pytestmark = pytest.mark.gpu

TILED = small_config()
TMA = small_config("tma_persistent", "rcr", "fp16", align=16)
CONVS = [small.config(small.conv_key(d, "fp16", 2)) for d in ("fwd", "bwd_data", "bwd_weight")]
GEMMS = [(m, n, k) for m, n, k in ((1, 7, 5), (3, 64, 17), (17, 33, 65), (40, 24, 16), (64, 80, 48),
                                   (100, 37, 45), (128, 1, 32), (1, 256, 128), (77, 91, 13), (256, 96, 200),
                                   (31, 129, 257), (2, 2, 300), (300, 5, 2), (512, 48, 33), (45, 45, 45),
                                   (8, 512, 8), (160, 160, 160), (33, 17, 1), (96, 200, 72), (63, 65, 127))]
TMA_GEMMS = [(64, 64, 64), (128, 256, 64), (96, 64, 128), (256, 128, 512)]
CONV_GEOMETRY = [  # n, c, k, spatial, filter, stride, padding, dilation, groups
    (1, 8, 8, (8, 8), (3, 3), 1, 1, 1, 1), (2, 8, 16, (9, 9), (3, 3), 1, 1, 1, 1),
    (2, 16, 8, (10, 7), (1, 1), 1, 0, 1, 1), (1, 4, 12, (11, 11), (5, 5), 2, 2, 1, 1),
    (3, 8, 8, (6, 6), (3, 3), 2, 0, 1, 1), (1, 16, 16, (12, 12), (3, 3), 1, 2, 2, 1),
    (2, 8, 8, (7, 9), (3, 1), 1, 1, 1, 1), (1, 32, 16, (5, 5), (1, 1), 2, 0, 1, 1),
    (2, 6, 10, (8, 8), (3, 3), 1, 1, 1, 2), (1, 8, 8, (9, 9), (3, 3), 1, 1, 1, 8),
    (4, 4, 4, (4, 4), (2, 2), 2, 0, 1, 1), (1, 3, 16, (16, 16), (7, 7), 2, 3, 1, 1),
    (2, 16, 32, (6, 6), (3, 3), 1, 0, 1, 4), (1, 24, 8, (13, 5), (3, 3), 1, 1, 1, 1),
    (1, 8, 24, (14, 14), (1, 1), 1, 0, 1, 1), (2, 12, 12, (10, 10), (3, 3), 3, 1, 1, 3),
    (1, 8, 8, (20, 3), (5, 3), 1, 2, 1, 1), (5, 8, 8, (3, 3), (3, 3), 1, 1, 1, 1),
    (1, 64, 8, (4, 4), (3, 3), 1, 1, 1, 1), (1, 8, 64, (4, 4), (3, 3), 1, 1, 1, 1),
]


def _conv_rows(direction):
    return [{"direction": direction, "dtype": "fp16", "n": n, "c": c, "k": k, "spatial": list(s),
             "filter": list(f), "stride": st, "padding": pad, "dilation": dil, "groups": g}
            for n, c, k, s, f, st, pad, dil, g in CONV_GEOMETRY]


PROBLEMS = {
    "gemm": [{"m": m, "n": n, "k": k, "dtype": "fp16", "layout": "rcr", "instance": cfg.name}
             for cfg, shapes in ((TILED, GEMMS), (TMA, TMA_GEMMS)) for m, n, k in shapes],
    "conv": [row for d in ("fwd", "bwd_data", "bwd_weight") for row in _conv_rows(d)],
}


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    root = tmp_path_factory.mktemp("capi-gpu")
    bundle = export_bundle(root / "b", configs=[TILED, TMA, *CONVS], arch="sm_90", max_workers=2)
    out = export_capi(bundle.path, PROBLEMS, root / "lib")
    return CapiLibrary(out.library)


@pytest.mark.parametrize("op", ["gemm", "fwd", "bwd_data", "bwd_weight"])
def test_every_table_problem_matches_torch(lib, op):
    def wanted(s):
        if op == "gemm":
            return isinstance(s, GemmSpec)
        return isinstance(s, ConvSpec) and s.problem.direction == op

    specs = [s for s in parse_problems(PROBLEMS) if wanted(s)]
    assert len(specs) >= 20
    errors = {s.describe(): gemm_error(lib, s) if isinstance(s, GemmSpec) else conv_error(lib, s)
              for s in specs}
    bad = {problem: err for problem, err in errors.items() if not err < 1e-2}
    assert not bad, bad


def test_a_problem_outside_the_table_launches_nothing(lib):
    a = torch.randn(40, 17, dtype=torch.float16, device="cuda")
    b = torch.randn(24, 17, dtype=torch.float16, device="cuda").t()
    out = torch.full((40, 24), 7.0, dtype=torch.float16, device="cuda")
    with pytest.raises(CapiError) as info:
        lib.gemm(a, b, out)
    assert info.value.status == "TD_ERR_NO_PLAN" and bool((out == 7).all())
    assert lib.select(gemm_problem("fp16", 40, 24, 16, (0, 16, 1), (0, 1, 16), (0, 24, 1))) == TILED.name
