"""Every conv / linear layer recorded from public model definitions (tests/data/model_layers.json, written
by tools/extract_model_layers.py) converts, and each problem it runs has a kernel: the CPU lane's "0 crashes"
check.

Per layer: the torch module is built with the recorded hyper-parameters (on the meta device, bf16 as the
benchmarks run), converted with tiledispatch.nn.convert, and must be taken, or left on torch for an expected
reason (subclasses with a forward of their own, transposed convs, padding modes other than zeros). For a taken
layer, each direction (conv: fwd, bwd_data, bwd_weight; linear: the forward GEMM and its two gradient GEMMs)
is derived from uninitialized CPU tensors laid out as the custom ops pass them to td.* (at the recorded batch
and at the benchmark batch), checked as a launch checks it, and must be supported by the preset the default
registry would build, with every plan's launch arguments derivable. Nothing is compiled.
"""
from __future__ import annotations

import functools
import json
import math
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

import tiledispatch as td
import tiledispatch.nn as tdnn
from tiledispatch.dispatch.call import role_tuple
from tiledispatch.kernels.family import family_module
from tiledispatch.ops.layout import conv_output_size, empty_channels_last, pairs
from tiledispatch.registry.kernel import prepare
from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
from tiledispatch.runtime.conv_args import ConvArgs, conv_problem, conv_values
from tiledispatch.select.selector import plans_of

DATA = Path(__file__).resolve().parents[1] / "data" / "model_layers.json"
ARCH = "sm_90"
DTYPE = torch.bfloat16
BENCH_BATCH = {1: 32, 2: 32, 3: 8}   # benchmarks/models.py: batch 32, video batch 8
MIN_MODELS = 30
# why convert may leave a layer on torch, by the recorded fields that make it so
EXPECTED_LEFT = {"transposed": "transposed convolution", "padding_mode": "padding_mode=",
                 "subclass": "subclass "}


def load() -> dict[str, Any]:
    if not DATA.is_file():
        pytest.skip(f"{DATA} is absent (write it with tools/extract_model_layers.py)")
    return json.loads(DATA.read_text())


@functools.cache
def registry(preset: str, epilogue: Any) -> td.Registry:
    """The registry the default path would build for a preset and epilogue, declared only (not built)."""
    reg = td.Registry(ARCH)
    reg.add_preset(preset, epilogue)
    return reg


# -- the module of a record --------------------------------------------------------------------------------
def _torch_class(record: dict[str, Any]) -> type:
    """The recorded class when it is torch's own, else a stand-in subclass with the recorded name, with a
    forward of its own unless the record says the subclass keeps torch's (`own_forward`: False)."""
    base = getattr(torch.nn, record["op"])
    if record["class"] == f"{base.__module__}.{base.__qualname__}":
        return base
    module, _, name = record["class"].rpartition(".")
    body: dict[str, Any] = {"__module__": module, "__qualname__": name}
    if record.get("own_forward", True):
        body["forward"] = lambda self, x: base.forward(self, x)
    return type(name, (base,), body)


def _keeps_torch_forward(record: dict[str, Any]) -> bool:
    return _torch_class(record) is not getattr(torch.nn, record["op"]) and not record.get("own_forward", True)


def build(record: dict[str, Any]) -> torch.nn.Module:
    cls = _torch_class(record)
    if record["op"] == "Linear":
        return cls(record["in_features"], record["out_features"], bias=record["bias"], device="meta",
                   dtype=DTYPE)
    padding = record["padding"] if isinstance(record["padding"], str) else tuple(record["padding"])
    kwargs = {"stride": tuple(record["stride"]), "padding": padding, "dilation": tuple(record["dilation"]),
              "groups": record["groups"], "bias": record["bias"], "padding_mode": record["padding_mode"]}
    if record.get("transposed"):
        kwargs["output_padding"] = tuple(record["output_padding"])
    return cls(record["in_channels"], record["out_channels"], tuple(record["kernel_size"]), **kwargs,
               device="meta", dtype=DTYPE)


def expected_reason(record: dict[str, Any]) -> str | None:
    """The start of the reason convert must give for leaving this layer on torch (None: it must take it)."""
    if record.get("transposed"):
        return EXPECTED_LEFT["transposed"]
    if _torch_class(record) is not getattr(torch.nn, record["op"]) and not _keeps_torch_forward(record):
        return EXPECTED_LEFT["subclass"]
    if record.get("padding_mode", "zeros") != "zeros":
        return EXPECTED_LEFT["padding_mode"]
    return None


# -- problems of a taken layer -----------------------------------------------------------------------------
def _empty(shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> torch.Tensor:
    """Uninitialized CPU memory (never touched: large shapes cost nothing)."""
    if strides is None:
        return torch.empty(shape, dtype=DTYPE)
    return torch.empty_strided(shape, strides, dtype=DTYPE)


def conv_failures(module: torch.nn.Module, x_shape: tuple[int, ...]) -> list[str]:
    """Each direction of a converted conv on an input of x_shape, as its custom op passes it to td.conv*."""
    stride, padding, dilation, groups = module._td_geometry
    w_shape = tuple(module.weight.shape)
    x = empty_channels_last(x_shape, DTYPE, "cpu")
    w = _empty(w_shape, tuple(module.weight.stride()))   # convert keeps conv weights channels-last
    out = conv_output_size(x_shape[2:], w_shape[2:], stride, padding, dilation)
    y = empty_channels_last((x_shape[0], w_shape[0], *out), DTYPE, "cpu")
    bias = _empty((w_shape[0],)) if module.bias is not None else None
    tensors = {"fwd": (x, w, y), "bwd_data": (y, w, empty_channels_last(x_shape, DTYPE, "cpu")),
               "bwd_weight": (x, y, empty_channels_last(w_shape, DTYPE, "cpu"))}
    failures = []
    for direction, (first, second, written) in tensors.items():
        b = bias if direction == "fwd" else None
        try:
            problem = conv_problem(direction, x_shape, w_shape, stride=tuple(stride), padding=pairs(padding),
                                   dilation=tuple(dilation), groups=groups, dtype="bf16", bias=b is not None)
            args = ConvArgs(*role_tuple(direction, first, second, written, b))
            checked = prepare(problem, args)
        except td.TileDispatchError as exc:
            failures.append(f"{direction}: problem not derived: {exc}")
            continue
        reg = registry(f"conv_{direction}_bf16_{checked.ndim}d_essential", ("none", b is not None))
        failures += [f"{direction}: {f}" for f in _support_failures(reg, checked, args)]
    return failures


def _support_failures(reg: td.Registry, problem: Any, args: Any) -> list[str]:
    """Why the registry cannot run the problem: no kernel supports it, or a plan's launch arguments (what a
    launch derives before running) cannot be derived from the tensors."""
    support = reg.is_supported(problem)
    if not support:
        return [f"no kernel of the preset supports {problem.describe()}: {support.reason}"]
    failures = []
    for plan in plans_of(reg.kernels, problem):
        try:
            _launch_arguments(reg, plan, args)
        except td.TileDispatchError as exc:
            failures.append(f"plan {plan.kernel.name}: launch arguments: {exc}")
    return failures


def _launch_arguments(reg: td.Registry, plan: Any, args: Any) -> None:
    """The launch plan (grid, scalars) and, for a conv kernel run on the tensors themselves, the values of
    its run-time parameters (ConvKernel._bind's steps before the compiled entries are needed)."""
    cfg, module, sms = plan.kernel.config, family_module(plan.kernel.config), reg.arch.sm_count
    if isinstance(plan.problem, td.GemmProblem):
        p = plan.problem
        module.launch_plan(cfg, p.m, p.n, p.k, p.batch, sms)
        return
    module.launch_plan(cfg, plan.problem, sms)
    if plan.padded:
        return   # runs on padded copies made at launch
    conv_values(plan.problem, args)
    if hasattr(module, "extra_values"):
        module.extra_values(cfg, plan.problem, {"x": args.x, "w": args.w, "y": args.y})


def linear_failures(module: torch.nn.Module, m: int) -> list[str]:
    """The forward GEMM of a converted Linear on m rows (x @ weight.T, weight.T a column-major view) and its
    two gradient GEMMs (dy @ weight, x^T @ dy), as torch.ops.tiledispatch.gemm passes them to td.gemm."""
    k, n = module.in_features, module.out_features
    x, dy, weight = _empty((m, k)), _empty((m, n)), _empty((n, k))
    bias = _empty((n,)) if module.bias is not None else None
    calls = {"fwd": (x, weight.t(), bias, (m, n)), "bwd_data": (dy, weight, None, (m, k)),
             "bwd_weight": (x.mT, dy, None, (k, n))}
    failures = []
    for direction, (a, b, c_bias, out_shape) in calls.items():
        mode = "col" if c_bias is not None else "none"
        args = GemmArgs(a, b, _empty(out_shape), bias=c_bias, bias_mode=mode)
        try:
            problem = problem_from_args(args)
        except td.TileDispatchError as exc:
            failures.append(f"{direction}: problem not derived: {exc}")
            continue
        reg = registry(f"gemm_{problem.dtype}_{problem.layout}_essential", problem.epilogue)
        failures += [f"{direction}: {f}" for f in _support_failures(reg, problem, args)]
    return failures


def check_layer(record: dict[str, Any]) -> tuple[str, list[str]]:
    """(outcome, failures) of one record: outcome 'taken' or the reason convert left it on torch."""
    module = build(record)
    layer = tdnn.convert(module).layers[0]
    expected = expected_reason(record)
    if layer.reason is not None:
        if expected is not None and layer.reason.startswith(expected):
            return layer.reason, []
        return layer.reason, [f"left on torch: {layer.reason} (expected: {expected or 'taken'})"]
    if expected is not None:
        return "taken", [f"taken, but expected to be left on torch ({expected}...)"]
    shape = list(record["input_shape"])
    failures = []
    for batch in sorted({shape[0], BENCH_BATCH[len(shape) - 2 if record["op"] != "Linear" else 2]}):
        if record["op"] == "Linear":
            rows = math.prod(shape[:-1]) // shape[0] * batch
            failures += [f"M={rows}: {f}" for f in linear_failures(module, rows)]
        else:
            failures += [f"N={batch}: {f}" for f in conv_failures(module, (batch, *shape[1:]))]
    return "taken", failures


def run_all(data: dict[str, Any]) -> tuple[Counter, list[str]]:
    outcomes: Counter = Counter()
    failures = []
    done: dict[str, tuple[str, list[str]]] = {}   # models share layers: each configuration checked once
    for model in data["models"]:
        for record in model["layers"]:
            key = json.dumps({k: v for k, v in record.items() if k not in ("layer", "count")}, sort_keys=True)
            if key not in done:
                done[key] = check_layer(record)
            outcome, problems = done[key]
            kind = "taken" if outcome == "taken" else f"left: {outcome.split(':')[0]}"
            outcomes[kind] += record.get("count", 1)
            failures += [f"{model['model']} {record['layer']} ({record['op']} {record['input_shape']}): {p}"
                         for p in problems]
    return outcomes, failures


def test_every_recorded_layer_converts_and_has_a_kernel_for_each_direction(capsys: pytest.CaptureFixture
                                                                           ) -> None:
    data = load()
    outcomes, failures = run_all(data)
    layers = sum(len(m["layers"]) for m in data["models"])
    with capsys.disabled():
        counts = ", ".join(f"{n} {kind}" for kind, n in outcomes.most_common())
        print(f"\nmodel zoo ({data.get('kind')}, {len(data['models'])} models, {layers} distinct layers): "
              f"{counts}; {len(failures)} failures")
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:60])


def test_extracted_data_covers_the_model_zoo() -> None:
    """The extracted file (not the development fixture) holds >= MIN_MODELS models that ran (a definition the
    installed timm / torchvision lacks or cannot run is listed under `failed`: not a tiledispatch crash)."""
    data = load()
    if data.get("kind") != "extracted":
        pytest.skip(f"{DATA.name} is a {data.get('kind')} file, not an extraction")
    failed = [f"{f['model']}: {f['error']}" for f in data["failed"]]
    assert len(data["models"]) >= MIN_MODELS, (len(data["models"]), failed)


def test_a_layer_without_a_supporting_kernel_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check fails when no kernel of the preset runs a problem (here: every registry is empty)."""
    monkeypatch.setattr(sys.modules[__name__], "registry", lambda preset, epilogue: td.Registry(ARCH))
    conv = {"op": "Conv2d", "class": "torch.nn.modules.conv.Conv2d", "input_shape": [1, 8, 1, 1],
            "in_channels": 8, "out_channels": 4, "kernel_size": [1, 1], "stride": [1, 1], "padding": [0, 0],
            "padding_mode": "zeros", "dilation": [1, 1], "groups": 1, "bias": True, "transposed": False}
    outcome, failures = check_layer(conv)
    assert outcome == "taken" and len(failures) == 6   # three directions at N=1 and N=32
    assert all("no kernel of the preset supports" in f for f in failures)


@pytest.mark.parametrize(("fields", "expected"), [
    ({"class": "timm.layers.conv2d_same.Conv2dSame"}, "subclass "),
    ({"padding_mode": "reflect"}, "padding_mode="),
    ({"class": "torch.nn.modules.conv.Conv2d"}, None),
])
def test_expected_outcomes_of_convert(fields: dict[str, Any], expected: str | None) -> None:
    """A subclass and a reflect-padded conv are left on torch with their stated reason; a plain one is
    taken."""
    record = {"op": "Conv2d", "class": "torch.nn.modules.conv.Conv2d", "input_shape": [1, 8, 6, 6],
              "in_channels": 8, "out_channels": 8, "kernel_size": [3, 3], "stride": [1, 1], "padding": [1, 1],
              "padding_mode": "zeros", "dilation": [1, 1], "groups": 1, "bias": False, "transposed": False,
              **fields}
    outcome, failures = check_layer(record)
    assert not failures
    assert (outcome == "taken") if expected is None else outcome.startswith(expected)


def test_a_plan_whose_launch_arguments_cannot_be_derived_is_reported() -> None:
    """The launch-argument step of the check can fail: a 1x1 conv input whose pixels are not evenly spaced
    (a channels-last view with a gap after each row) is refused by the 1x1-as-GEMM kernels at launch."""
    x = empty_channels_last((2, 16, 4, 6), DTYPE, "cpu")[:, :, :, :5]
    w = empty_channels_last((32, 16, 1, 1), DTYPE, "cpu")
    y = empty_channels_last((2, 32, 4, 5), DTYPE, "cpu")
    problem = prepare(conv_problem("fwd", tuple(x.shape), tuple(w.shape), dtype="bf16"), ConvArgs(x, w, y))
    failures = _support_failures(registry("conv_fwd_bf16_2d_essential", ("none", False)), problem,
                                 ConvArgs(x, w, y))
    assert failures and all("evenly spaced pixels" in f for f in failures)
