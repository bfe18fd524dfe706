"""The model benchmark's pieces without a GPU (benchmarks/models.py, model_measure.py, model_report.py), the
layer extractor (tools/extract_model_layers.py) on a small model, and the project's X3D-M definition."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    """benchmarks/ and tools/ on sys.path (the scripts import their neighbours by module name)."""
    for folder in ("benchmarks", "tools"):
        if str(ROOT / folder) not in sys.path:
            sys.path.insert(0, str(ROOT / folder))
    return {name: importlib.import_module(name) for name in ("models", "model_measure", "model_report",
                                                              "model_loss", "extract_model_layers")}


@pytest.mark.parametrize(("name", "expected"), [
    ("conv_igemm_kernel", "tiledispatch"),
    ("gemm_tma_kernel", "tiledispatch"),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
     "vendor_conv_gemm"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", "vendor_conv_gemm"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<__nv_bfloat16, float>", "norm"),
    ("triton_per_fused__native_batch_norm_legit_functional_convolution_backward_12", "norm"),
    ("triton_poi_fused_convolution_backward_relu_threshold_backward_7", "elementwise"),
    ("triton_red_fused_sum_3", "reduction"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "elementwise"),
    ("void nchwToNhwcKernel<__nv_bfloat16>", "layout_copy"),
    ("Memcpy DtoD (Device -> Device)", "layout_copy"),
    ("void at::native::reduce_kernel<512, 1, ReduceOp<float, MeanOps<float>>>", "reduction"),
])
def test_kernel_classes(bench, name, expected):
    assert bench["model_measure"].kernel_class(name) == expected


def _row(model: str, group: str, stock: float, converted: float, file: str = "") -> dict:
    runs = {"train": {"stock_eager": {"wall_ms": stock, "gpu_ms": stock / 2, "pipelined_ms": stock,
                                      "file": file},
                      "converted_eager": {"wall_ms": converted, "gpu_ms": converted / 2,
                                          "pipelined_ms": converted / 2, "file": file}}}
    return {"model": model, "group": group, "runs": runs}


def test_speedups_summary_and_acceptance(bench):
    report = bench["model_report"]
    rows = [_row("resnet50", "2d-dense", 10.0, 8.0), _row("mobilenet_v2", "2d-dw-grouped", 9.0, 10.0),
            {"model": "broken", "group": "2d-dense", "error": "ImportError: no timm"}]
    for row in rows:
        row["speedups"] = report.speedups(row)
    assert rows[0]["speedups"]["train"]["eager_wall"] == pytest.approx(1.25)
    summary = report.summary(rows)
    assert summary["train_eager"]["min_model"] == "mobilenet_v2"
    assert summary["train_eager"]["group_geomean"] == pytest.approx(0.9)
    assert rows[0]["speedups"]["train"]["eager_back_to_back"] == pytest.approx(2.5)
    assert summary["train_eager"]["back_to_back_group_geomean"] == pytest.approx(1.8)
    assert summary["acceptance"]["every_model_eager_ge_1"] is False
    assert summary["acceptance"]["every_model_compiled_ge_1"] is None   # nothing compiled: no verdict
    assert summary["failures"] == ["broken: ImportError: no timm"]
    text = report.markdown({"models": rows, "summary": summary, "settings": {}})
    assert "| resnet50 |" in text and "1.25× (1.25×)" in text


def test_merge_takes_each_stock_converted_pair_from_one_file(bench, tmp_path):
    report = bench["model_report"]
    a = _row("resnet50", "2d-dense", 10.0, 8.0, "a")
    a["runs"]["train"]["converted_eager"] = {"skipped": "time budget (--budget-s) spent"}
    b = _row("resnet50", "2d-dense", 11.0, 9.0, "b")
    paths = []
    for name, row in (("a", a), ("b", b)):
        path = tmp_path / f"{name}.json"
        loss = {"model": "resnet18", "error": "RuntimeError: x"} if name == "a" else _loss_result(bench)
        path.write_text(json.dumps({"gpu": "NVIDIA H100", "date": name, "argv": [], "models": [row],
                                    "loss": loss}))
        paths.append(path)
    merged = report.merge(paths, tmp_path / "merged.json")
    runs = merged["models"][0]["runs"]["train"]
    assert runs["stock_eager"]["file"] == runs["converted_eager"]["file"] == "b"
    assert merged["loss"]["pass"] is True   # the file whose loss comparison ran, not the failed one
    assert merged["summary"]["acceptance"]["loss_matches_stock"] is True
    assert "Loss over training steps: resnet18" in (tmp_path / "merged.md").read_text()


def test_aa_control_sits_beside_each_speedup_and_survives_a_merge(bench, tmp_path):
    """--aa: a second stock copy in the same rounds; stock / stock again is reported per mode, its range in
    the summary, a table in the markdown, and a merge keeps it with the pair of its own run."""
    report = bench["model_report"]
    row = _row("resnet50", "2d-dense", 10.0, 9.0, "a")
    row["runs"]["train"]["stock_again_eager"] = {"wall_ms": 10.4, "gpu_ms": 5.0, "pipelined_ms": 10.0}
    other = _row("mobilenet_v2", "2d-dw-grouped", 9.0, 9.0)
    for r in (row, other):
        r["speedups"] = report.speedups(r)
    sp = row["speedups"]["train"]
    assert sp["eager_aa_wall"] == pytest.approx(10.0 / 10.4) and sp["eager_aa_gpu"] == pytest.approx(1.0)
    assert "compiled_aa_wall" not in sp and "eager_aa_wall" not in other["speedups"]["train"]
    summary = report.summary([row, other])
    assert summary["train_eager"]["aa_wall_range"] == [pytest.approx(10.0 / 10.4)] * 2
    text = report.markdown({"models": [row, other], "summary": summary, "settings": {}})
    assert sp["eager_aa_back_to_back"] == pytest.approx(1.0)   # _row's stock pipelined_ms is 10.0
    assert "**A/A" in text and ("| resnet50 | train | 0.96× (1.00×) | 1.11× (1.11×) | 1.00× / 2.22× | "
                                "–× (–×) |") in text
    path = tmp_path / "a.json"
    path.write_text(json.dumps({"gpu": "NVIDIA H100", "date": "a", "argv": [], "models": [row]}))
    merged = report.merge([path], tmp_path / "merged.json")
    assert merged["models"][0]["runs"]["train"]["stock_again_eager"]["wall_ms"] == 10.4
    assert merged["models"][0]["speedups"]["train"]["eager_aa_wall"] == pytest.approx(10.0 / 10.4)


def _loss_result(bench: dict) -> dict:
    curves = {"stock": [2.0, 1.5, 1.0], "converted": [2.0, 1.55, 1.0], "fp32": [2.0, 1.5, 0.9]}
    return {"model": "resnet18", "source": "torchvision.resnet18", "input_shape": [4, 3, 8, 8], "batches": 2,
            "optimizer": "SGD", "precision": "fp32", **bench["model_loss"].compare(curves, window=2)}


def test_loss_compare_reports_curves_gaps_and_the_verdict(bench):
    loss = bench["model_loss"]
    out = loss.compare({"stock": [2.0, 1.5, 1.0], "converted": [2.0, 1.6, 1.0], "fp32": [2.0, 1.5, 0.9]},
                       window=2, tol=0.02)
    assert out["first"] == {"stock": 2.0, "converted": 2.0, "fp32": 2.0}
    assert out["final"]["converted"] == pytest.approx(1.3) and out["final"]["stock"] == pytest.approx(1.25)
    assert out["max_abs_diff"]["converted_vs_stock"] == pytest.approx(0.1)
    assert out["max_abs_diff"]["stock_vs_fp32"] == pytest.approx(0.1)
    assert out["pass"] is False   # 0.05 above stock's final loss > 0.02 x 2.0
    assert loss.compare({"stock": [2.0, 1.0], "converted": [2.0, 1.03]}, window=1, tol=0.02)["pass"] is True
    assert "fp32_vs_stock" not in out["max_abs_diff"] and len(out["curves"]["stock"]) == 3


def test_train_curve_is_repeatable_and_learns(bench):
    """Two copies from the same weights on the same batches give the same curve, and the loss falls."""
    import copy

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(4, 5))
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(4, 3, 6, 6, generator=gen), torch.randint(0, 5, (4,), generator=gen))]
    train = bench["model_loss"].train_curve
    loss_fn = bench["models"]._loss
    a = train(copy.deepcopy(model), batches, 30, loss_fn, lr=0.1)
    b = train(copy.deepcopy(model), batches, 30, loss_fn, lr=0.1)
    assert a == b and len(a) == 30 and a[-1] < 0.8 * a[0]


def test_loss_options_are_checked(bench):
    models = bench["models"]
    with pytest.raises(SystemExit):
        models.main(["--loss-only"])   # no --loss-steps: nothing to run
    with pytest.raises(SystemExit):
        models.main(["--loss-steps", "5", "--loss-model", "no_such_model"])
    assert models.loss_spec("resnet18").choices == (("torchvision", "resnet18"),)
    assert models.loss_spec("smoke_cnn").name == "smoke_cnn"


def test_top_kernels_option(bench, capsys):
    """--top-kernels N keeps N kernels per variant in the JSON (a name-by-name comparison needs them all)."""
    models = bench["models"]
    with pytest.raises(SystemExit):
        models.main(["--top-kernels", "0", "--smoke"])
    assert "--top-kernels 0" in capsys.readouterr().err
    args = models.build_parser().parse_args(["--top-kernels", "500", "--modes", "compiled",
                                             "--phases", "train", "--no-numerics", "--aa"])
    assert models.settings_from(args).top_kernels == 500 and models.settings_from(args).aa
    assert models.Settings().top_kernels == 8 and not models.Settings().aa


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--rounds", "11", "--steps", "10"]])
def test_rounds_option_refuses_what_it_cannot_split(bench, capsys, argv):
    """--rounds N splits the timed steps into N alternating rounds: 1 to --steps, not silently clamped."""
    models = bench["models"]
    with pytest.raises(SystemExit):
        models.main([*argv, "--smoke"])
    assert "--rounds" in capsys.readouterr().err
    args = models.build_parser().parse_args(["--rounds", "10", "--steps", "40"])
    assert models.settings_from(args).rounds == 10 and models.Settings().rounds == 5


def test_video_models_come_from_torchvision_models_video(bench, monkeypatch):
    """torchvision's video nets live in torchvision.models.video (there is no torchvision.video)."""
    import types

    built = []
    video = types.ModuleType("torchvision.models.video")
    video.r2plus1d_18 = lambda weights: built.append(weights) or nn.Identity()
    for name, module in (("torchvision", types.ModuleType("torchvision")),
                         ("torchvision.models", types.ModuleType("torchvision.models")),
                         ("torchvision.models.video", video)):
        monkeypatch.setitem(sys.modules, name, module)
    spec = next(m for m in bench["models"].MODELS if m.name == "r2plus1d_18")
    model, source = bench["models"].build(spec)
    assert isinstance(model, nn.Identity) and built == [None]
    assert source == "torchvision.models.video.r2plus1d_18"


def test_every_benchmark_model_builds_offline(bench):
    """Each model of the benchmark (and the loss models) builds without weights, with its input shape."""
    pytest.importorskip("timm")
    pytest.importorskip("torchvision")
    models = bench["models"]
    for spec in (*models.MODELS, *models.LOSS_MODELS):
        model, source = models.build(spec)
        assert not source.startswith("project") or spec.name == "x3d_m"
        assert models._num_classes(model) in (400, 1000), spec.name


def test_extract_records_deduplicated_layers_and_uncalled_ones(bench):
    ex = bench["extract_model_layers"]

    class Same(nn.Conv2d):   # a subclass: recorded with its own class name
        pass

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(4, 4, 3, padding="same", groups=4)
            self.b = nn.Conv2d(4, 4, 3, padding="same", groups=4)   # the same configuration as a
            self.c = Same(4, 8, 1, stride=2, bias=False)
            self.unused = nn.Linear(3, 3)
            self.head = nn.Linear(8, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.c(self.b(self.a(x)))
            return self.head(y.mean((2, 3)))

    layers, uncalled = ex.extract(Net(), torch.randn(1, 4, 6, 6))
    assert [layer["layer"] for layer in layers] == ["a", "c", "head"] and layers[0]["count"] == 2
    assert layers[0]["padding"] == "same" and layers[0]["groups"] == 4
    assert layers[0]["input_shape"] == [1, 4, 6, 6]
    assert layers[1]["class"].endswith("Same") and layers[1]["op"] == "Conv2d"
    assert layers[1]["stride"] == [2, 2]
    assert layers[2]["input_shape"] == [1, 8] and layers[2]["out_features"] == 2
    assert uncalled == ["unused"]


def test_model_lists_are_long_enough(bench):
    assert len(bench["extract_model_layers"].MODELS) >= 30
    names = {m.name for m in bench["models"].MODELS}
    assert len(names) >= 10 and {"x3d_m", "resnet50", "r2plus1d_18", "mobilenet_v2"} <= names


def test_x3d_m_follows_the_published_layer_table():
    from tiledispatch.testing.x3d import x3d_m

    model = x3d_m()
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(3.79e6, rel=0.01)   # paper: 3.8 M
    assert [len(stage) for stage in model.stages] == [3, 5, 11, 7]
    assert [stage[0].conv_c[0].out_channels for stage in model.stages] == [24, 48, 96, 192]
    # inner width 2.25x, channel-wise 3x3x3
    assert [stage[0].conv_b[0].groups for stage in model.stages] == [54, 108, 216, 432]
    se = [not isinstance(block.se, nn.Identity) for block in model.stages[2]]
    assert se == [i % 2 == 0 for i in range(11)]
    with torch.device("meta"):
        out = x3d_m()(torch.empty(2, 3, 16, 224, 224))
    assert out.shape == (2, 400)


def test_pipelined_steps_report_the_counters_a_step_can_hide_in(bench):
    """Each variant's back-to-back steps carry the per-step change of the GC (and, on CUDA, allocator)
    counters: a step that runs a full collection shows one gen-2 collection per step, one that does not
    shows none."""
    import gc

    measure = bench["model_measure"]
    steps = {"collects": lambda: gc.collect(), "quiet": lambda: None}
    # the session's objects frozen (left out of collections): each of the ~50 full collections still runs and
    # counts, in microseconds instead of ~0.4 s over a test session's heap
    gc.freeze()
    try:
        result = measure.interleaved_wall_times(steps, torch.device("cpu"), warmup=2, steps=4)
        single = measure.wall_times(steps["collects"], torch.device("cpu"), warmup=1, steps=3)
    finally:
        gc.unfreeze()
    assert result["collects"]["per_step_counters"]["gc_gen2"] == 1.0
    assert result["quiet"]["per_step_counters"]["gc_gen2"] == 0.0
    assert single["per_step_counters"]["gc_gen2"] == 1.0


def test_back_to_back_steps_are_timed_in_alternating_rounds_too(bench):
    """Back-to-back steps run in rounds of each variant in turn, like the synchronized ones (a host drift
    hits both), each round starting one variant later, and pipelined_ms is the median of the rounds'
    means."""
    order: list[str] = []
    steps = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    result = bench["model_measure"].interleaved_wall_times(steps, torch.device("cpu"), warmup=1, steps=6,
                                                           rounds=3)
    back = order[2 + 2 * (1 + 2) * 3:]   # after the first calls and the synchronized rounds
    per_round = bench["model_measure"].PIPELINED_ROUND_STEPS   # more than the 2 synchronized steps a round
    a, b = ["a"] * per_round, ["b"] * per_round
    assert back == a + b + b + a + a + b
    for r in result.values():
        assert len(r["pipelined_rounds_ms"]) == 3
        assert r["pipelined_ms"] == sorted(r["pipelined_rounds_ms"])[1]


def test_synchronized_rounds_rotate_the_order_and_settle_each_turn_untimed(bench):
    """Each round starts one variant later, and each turn's first step is untimed: a variant's timed steps
    never include the first step after another model's, and no variant always follows the same one."""
    measure = bench["model_measure"]
    order: list[str] = []
    clock = {"t": 0.0}

    def step(name: str, ms: float):
        def run() -> None:
            order.append(name)
            # the first step after another variant's turn is ten times slower
            clock["t"] += ms * (10 if len(order) > 1 and order[-2] != name else 1)
        return run

    steps = {"a": step("a", 1.0), "b": step("b", 1.0), "c": step("c", 1.0)}
    real = measure._step_ms

    def fake_step_ms(fn, device):
        before = clock["t"]
        fn()
        return clock["t"] - before

    measure._step_ms = fake_step_ms
    try:
        result = measure.interleaved_wall_times(steps, torch.device("cpu"), warmup=1, steps=6, rounds=3,
                                                pipelined=False)
    finally:
        measure._step_ms = real
    timed = order[3:]   # after each variant's first call (warmup=1: no more warm-up calls)
    turn = 1 + 2             # one untimed step, then 6 / 3 timed ones
    leads = [timed[i * 3 * turn] for i in range(3)]
    assert leads == ["a", "b", "c"]
    for r in result.values():
        assert r["steps"] == 6 and r["wall_ms"] == 1.0   # no timed step paid for the switch


@pytest.mark.slow
@pytest.mark.usefixtures("small_defaults")
def test_compiled_variants_are_warmed_apart_then_timed_in_alternation(bench):
    """models.py's compiled pass keeps both variants alive: each warmed up alone (its own compile counts and
    first call), then both timed in alternating rounds (timed one after the other, the second ran slower on
    the host). Smoke model, torch.compile's default mode, CPU."""
    models = bench["models"]
    s = models.Settings(device="cpu", dtype="float32", batch=1, steps=2, warmup=1, compiled_warmup=1,
                        modes=("compiled",), compile_mode="default", pipelined=False, phases=("infer",),
                        numerics=False, smoke=True)
    spec = models.loss_spec("smoke_cnn")
    base, _ = models.build(spec)
    row = {"runs": {}, "num_classes": models._num_classes(base)}
    models.measure_variants(row, spec, base, s, models.Budget(600), "compiled", ("infer",))
    slot = row["runs"]["infer"]
    assert set(slot) == {"stock_compiled", "converted_compiled"}, slot
    for result in slot.values():
        assert "error" not in result, result.get("error")
        assert result["interleaved"] == ["stock", "converted"] and result["rounds"] == 2
        assert result["first_call_s"] > 0 and result["graph_breaks"] == 0
    assert row["layers"]["taken"] > 0


@pytest.mark.usefixtures("small_defaults")
def test_no_interleave_times_one_variant_alone(bench, monkeypatch):
    """--no-interleave measures each variant in a pass of its own (measure_variants with one variant): the
    row gets that variant's result only, timed alone. Smoke model, eager, CPU (a short step check)."""
    from tiledispatch.nn import step_check

    for name, value in (("BLOCK", 1), ("ROUNDS", 1), ("WINS", 1)):
        monkeypatch.setattr(step_check, name, value)
    models = bench["models"]
    s = models.Settings(device="cpu", dtype="float32", batch=1, steps=2, warmup=1, modes=("eager",),
                        pipelined=False, phases=("infer",), numerics=False, smoke=True, interleave=False)
    spec = models.loss_spec("smoke_cnn")
    base, _ = models.build(spec)
    row = {"runs": {}, "num_classes": models._num_classes(base)}
    models.measure_variants(row, spec, base, s, models.Budget(600), "eager", ("infer",), ("converted",))
    slot = row["runs"]["infer"]
    assert set(slot) == {"converted_eager"}, slot
    assert "error" not in slot["converted_eager"], slot["converted_eager"].get("error")
    assert slot["converted_eager"]["interleaved"] == ["converted"] and slot["converted_eager"]["wall_ms"] > 0
    assert row["layers"]["taken"] > 0
    # the timed steps ran what the step check decided: it was stepped to its verdict first
    assert row["check_steps"]["infer"]["done"] and row["check_steps"]["infer"]["steps"] > 1
    assert row["step_check"]["infer"]["eval/no_grad"]["phase"] == "done"


def test_run_until_calls_at_least_once_and_stops_at_done_or_the_limit(bench):
    run_until = bench["model_measure"].run_until
    calls = []
    assert run_until(lambda: calls.append(1), torch.device("cpu"), lambda: len(calls) >= 3, 10) == {
        "steps": 3, "done": True}
    calls.clear()
    assert run_until(lambda: calls.append(1), torch.device("cpu"), lambda: True, 10) == {"steps": 1,
                                                                                         "done": True}
    calls.clear()
    assert run_until(lambda: calls.append(1), torch.device("cpu"), lambda: False, 4) == {"steps": 4,
                                                                                         "done": False}


def test_results_name_the_cost_models_that_ranked_their_plans(bench, tmp_path, monkeypatch):
    """The environment record carries a digest per packaged cost model, which changes with the booster (the
    digest is of the decompressed text, as results made before the models were compressed hashed it)."""
    import gzip
    import hashlib

    import protocol

    from tiledispatch.select import cost_model

    def write(key: str, text: str) -> None:
        (tmp_path / "sm_90" / key / "model.txt.gz").write_bytes(gzip.compress(text.encode()))

    for key in ("conv_fwd_bf16", "gemm_none_bf16"):
        (tmp_path / "sm_90" / key).mkdir(parents=True)
        write(key, f"trees of {key}")
    monkeypatch.setattr(cost_model, "models_root", lambda: tmp_path)
    first = protocol.cost_model_digests()
    assert sorted(first) == ["sm_90/conv_fwd_bf16", "sm_90/gemm_none_bf16"]
    assert first["sm_90/gemm_none_bf16"] == hashlib.sha256(b"trees of gemm_none_bf16").hexdigest()[:12]
    write("conv_fwd_bf16", "retrained")
    second = protocol.cost_model_digests()
    assert second["sm_90/conv_fwd_bf16"] != first["sm_90/conv_fwd_bf16"]
    assert second["sm_90/gemm_none_bf16"] == first["sm_90/gemm_none_bf16"]
    assert "cost_models" in protocol.environment(torch.device("cpu"))
