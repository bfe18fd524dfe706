"""CPU lane: the C ABI over a bundle. A bundle of small sm_90 kernels (a tiled and a TMA GEMM, an igemm
conv per direction) is exported to a C library: generation is deterministic and compiles warning-free; the
library loads with ctypes without a GPU, answers td_select from its table, names unknown problems, other
strides and bad codes, and reports that no CUDA driver was found when a launch needs one."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import tiledispatch as td
from tiledispatch.bundle import active
from tiledispatch.bundle.capi.binding import CapiError, CapiLibrary, conv_problem, gemm_problem
from tiledispatch.bundle.capi.codegen import generate
from tiledispatch.bundle.capi.export import export_capi
from tiledispatch.bundle.capi.plan import bundle_kernels, plan_problem
from tiledispatch.bundle.capi.problems import parse_problems
from tiledispatch.bundle.export import export_bundle
from tiledispatch.bundle.manifest import open_bundle
from tiledispatch.cli.main import app
from tiledispatch.testing import small_config
from tiledispatch.testing import small_defaults as small

TILED = small_config()                                                  # fp16 rcr, unaligned
TMA = small_config("tma_persistent", "rcr", "fp16", align=16)           # host TMA descriptors
CONVS = {d: small.config(small.conv_key(d, "fp16", 2)) for d in ("fwd", "bwd_data", "bwd_weight")}
CONV_ROW = {"dtype": "fp16", "n": 2, "c": 8, "k": 16, "spatial": [9, 9], "filter": [3, 3], "padding": 1}
PROBLEMS = {
    "gemm": [{"m": 40, "n": 24, "k": 16, "dtype": "fp16", "layout": "rcr"},
             {"m": 64, "n": 64, "k": 64, "dtype": "fp16", "layout": "rcr", "instance": TMA.name}],
    "conv": [{**CONV_ROW, "direction": d} for d in ("fwd", "bwd_data", "bwd_weight")],
}
HAS_GPU = torch.cuda.is_available()


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """(bundle path, export-capi folder, its capi.json) of the small kernels and PROBLEMS."""
    root = tmp_path_factory.mktemp("capi")
    report = export_bundle(root / "b", configs=[TILED, TMA, *CONVS.values()], arch="sm_90", max_workers=2)
    out = export_capi(report.path, PROBLEMS, root / "lib")
    return Path(report.path), Path(out.path), json.loads((Path(out.path) / "capi.json").read_text())


@pytest.fixture
def lib(library):
    return CapiLibrary(library[1] / "libtdcapi.so")


def _gemm(m, n, k, a=None, b=None, dtype="fp16"):
    return gemm_problem(dtype, m, n, k, a or (m * k, k, 1), b or (k * n, 1, k), (m * n, n, 1))


def _conv(direction, **change):
    spec = parse_problems({"conv": [{**CONV_ROW, "direction": direction, **change}]})[0]
    return conv_problem(spec.problem, spec.x_strides, spec.w_strides, spec.y_strides)


def test_the_table_holds_each_problem_with_its_kernel_and_launch_recipe(library):
    _, out, table = library
    assert {p.name for p in out.iterdir()} == {"tiledispatch.h", "td_capi.c", "libtdcapi.so", "capi.json"}
    plans = table["plans"]
    assert table["arch"] == "sm_90" and len(plans) == 5
    assert [p["instance"] for p in plans] == [TILED.name, TMA.name, *(c.name for c in CONVS.values())]
    tma = plans[1]["launches"][0]
    kinds = [arg[0] for arg in tma["args"]]
    assert kinds.count("tma") == len(tma["tma"]) == 3    # a, b and out described, each map encoded per call
    # a: (64, 64) fp16 row-major, one batch -> dims innermost first, byte strides (the shared batch's 16
    # elements), the 32x32 box of the tile, as Triton's launcher encodes it
    assert tma["tma"][0] == {"role": 0, "dtype": 6, "rank": 3, "dims": [64, 64, 1], "strides": [128, 32],
                             "box": [32, 32, 1], "swizzle": tma["tma"][0]["swizzle"], "elem_size": 2}
    at = tma["args"].index(["tma", 0])
    assert tma["args"][at + 1:at + 7] == [["const", 4, 1], ["const", 4, 64], ["const", 4, 64],
                                          ["const", 8, 16], ["const", 8, 64], ["const", 8, 1]]
    tiled = plans[0]["launches"][0]["args"]
    assert tiled[:3] == [["ptr", 0], ["ptr", 1], ["ptr", 2]] and ["alpha", "f32"] in tiled


def test_generation_is_deterministic(library):
    path, out, _ = library
    bundle = open_bundle(path, arch=None)
    arch = td.get_arch("sm_90")
    with active.using(bundle):
        kernels = bundle_kernels(bundle, arch)
        plans = [plan_problem(spec, kernels, arch).to_dict() for spec in parse_problems(PROBLEMS)]
    assert generate(plans, "sm_90", 90) == (out / "td_capi.c").read_text()


def test_a_kernel_the_c_abi_cannot_replay_gives_way_to_the_next_choice(library, monkeypatch):
    """A chosen kernel whose launch the C ABI cannot describe (field 'kernel', e.g. a tensor descriptor over
    a workspace) is passed over, with a note, for the next choice; a pinned instance is not replaced."""
    from tiledispatch.bundle.capi import plan as capi_plan
    from tiledispatch.errors import BundleError

    path, _, _ = library
    bundle = open_bundle(path, arch=None)
    arch = td.get_arch("sm_90")
    replay, select = capi_plan._replay, capi_plan._select

    def refuse_tma(spec, selection, args):
        if selection.kernel.name == TMA.name:
            raise BundleError(f"{TMA.name}: not describable here", field="kernel")
        return replay(spec, selection, args)

    def tma_first(spec, problem, plans, arch, strategy):
        tma = [p for p in plans if p.kernel.name == TMA.name]
        return select(spec, problem, tma or plans, arch, strategy)

    monkeypatch.setattr(capi_plan, "_replay", refuse_tma)
    monkeypatch.setattr(capi_plan, "_select", tma_first)
    (free,) = parse_problems({"gemm": [{**PROBLEMS["gemm"][1], "instance": None}]})
    (pinned,) = parse_problems({"gemm": [PROBLEMS["gemm"][1]]})
    with active.using(bundle):
        kernels = bundle_kernels(bundle, arch)
        plan = plan_problem(free, kernels, arch)
        assert plan.instance == TILED.name and plan.notes[0].startswith(f"passed over {TMA.name}")
        with pytest.raises(BundleError, match="not describable"):
            plan_problem(pinned, kernels, arch)


def test_td_select_answers_from_the_table_without_a_gpu(lib):
    assert lib.arch == "sm_90" and lib.plan_count == 5
    assert lib.select(_gemm(40, 24, 16)) == TILED.name
    assert lib.select(_gemm(64, 64, 64)) == TMA.name
    for direction, cfg in CONVS.items():
        assert lib.select(_conv(direction)) == cfg.name
    # a size-1 dim's stride is no part of the key: any value there finds the plan
    assert lib.select(gemm_problem("fp16", 40, 24, 16, (7, 16, 1), (3, 1, 16), (1, 24, 1))) == TILED.name


def test_unknown_problems_and_other_strides_are_named(lib):
    with pytest.raises(CapiError) as info:
        lib.select(_gemm(40, 24, 17))
    assert info.value.status == "TD_ERR_NO_PLAN" and "gemm fp16 batch=1 m=40 n=24 k=17" in str(info.value)
    with pytest.raises(CapiError) as info:
        lib.select(_gemm(40, 24, 16, b=(384, 24, 1)))      # b row-major: the plan is for column-major b
    assert info.value.status == "TD_ERR_STRIDES" and "b(0, 1, 16)" in str(info.value)
    with pytest.raises(CapiError) as info:
        lib.select(_conv("fwd", padding=0))
    assert info.value.status == "TD_ERR_NO_PLAN" and "conv fwd fp16 2d n=2 c=8 k=16" in str(info.value)


def test_bad_codes_are_refused_with_messages(lib):
    for problem, words in ((_gemm(40, 24, 16, dtype=9), "dtype=9 is not a td_dtype"),
                           (_gemm(0, 24, 16), "batch/m/n/k=0 must be >= 1")):
        with pytest.raises(CapiError) as info:
            lib.select(problem)
        assert info.value.status == "TD_ERR_BAD_ARGUMENT" and words in str(info.value)
    for field, value, words in (("direction", 3, "direction=3 is not a td_direction"),
                                ("dtype", 4, "dtype=4 is not a convolution dtype"), ("ndim", 4, "ndim=4")):
        problem = _conv("fwd")
        setattr(problem, field, value)
        with pytest.raises(CapiError) as info:
            lib.select(problem)
        assert info.value.status == "TD_ERR_BAD_ARGUMENT" and words in str(info.value)
    import ctypes

    name = ctypes.c_char_p()
    assert lib.lib.td_select(7, ctypes.byref(_gemm(40, 24, 16)), ctypes.byref(name)) == 5
    assert "op=7 is not a td_op" in lib.last_error()


@pytest.mark.skipif(HAS_GPU, reason="checks the library on a machine without a CUDA driver")
def test_a_launch_without_a_cuda_driver_says_so(lib):
    assert lib.gemm_raw(_gemm(40, 24, 16), 4096, 8192, 12288) == 1   # TD_ERR_NO_DRIVER
    assert "no CUDA driver found" in lib.last_error() and "libcuda.so.1" in lib.last_error()
    with pytest.raises(CapiError) as info:
        lib.init()
    assert info.value.status == "TD_ERR_NO_DRIVER"
    assert lib.gemm_raw(_gemm(40, 24, 16), 4097, 8192, 12288) == 6    # checked before the driver: alignment
    assert "a=0x1001 is not 16-byte aligned" in lib.last_error()


def test_problem_files_are_checked(library, tmp_path):
    path, _, _ = library
    for data, words in (({"gemm": [{"m": 4, "n": 4, "k": 4, "layuot": "rcr"}]}, "unknown field(s) 'layuot'"),
                        ({"gemm": [{"m": 4, "n": 4, "k": 4, "layout": "rcc"}]}, "layout='rcc'"),
                        ({"gemm": [{"m": 4, "n": 4, "k": 4, "dtype": "int8"}]}, "dtype='int8'"),
                        ({"gemm": [{"m": 4, "n": 4, "k": 4}, {"m": 4, "n": 4, "k": 4}]}, "listed twice"),
                        ({"conv": [{**CONV_ROW, "direction": "bwd"}]}, "direction")):
        with pytest.raises(td.BadInput, match=words.replace("(", r"\(").replace(")", r"\)")):
            export_capi(path, data, tmp_path / "x", build=False)
    with pytest.raises(td.BundleError, match="no kernel of the bundle runs it") as info:
        export_capi(path, {"gemm": [{"m": 8, "n": 8, "k": 8, "dtype": "bf16"}]}, tmp_path / "x", build=False)
    assert info.value.field == "problem" and not (tmp_path / "x").exists()


def test_the_cli_writes_the_library(library, tmp_path):
    path, _, _ = library
    problems = tmp_path / "problems.json"
    problems.write_text(json.dumps({"gemm": PROBLEMS["gemm"][:1]}))
    result = CliRunner().invoke(app, ["export-capi", str(path), "--problems", str(problems), "--out",
                                      str(tmp_path / "lib"), "--no-build", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["plans"][0]["instance"] == TILED.name and report["library"] is None
    assert (tmp_path / "lib" / "td_capi.c").is_file()
