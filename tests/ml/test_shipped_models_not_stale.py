"""Selection never goes stale: every kernel kind of every shipped preset is known to the shipped cost model of
its (arch, op, direction, dtype), so `auto` can rank the whole preset. A change that adds a kernel kind to a
preset fails here until the model is retrained on sweeps that include it (sweep resume, `train`, commit)."""
from __future__ import annotations

import pytest

from tiledispatch.ml.model import kernel_kind
from tiledispatch.presets import list_presets, load_preset
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import GemmProblem
from tiledispatch.select import cost_model

ARCH = "sm_90"


def _problem_like(config) -> ConvProblem | GemmProblem:
    """A problem of the config's (op, direction, dtype): what picks the shipped model."""
    if config.op == "conv":
        return ConvProblem(config.direction, 1, 8, 8, 1, (8,) * config.ndim, (1,) * config.ndim,
                           dtype=config.dtype)
    return GemmProblem(64, 64, 64, dtype=config.dtype)


def _stale_kinds(name: str) -> tuple[str, list[str]]:
    configs = load_preset(name)
    model, why_not = cost_model.shipped_model(ARCH, _problem_like(configs[0]))
    if model is None:
        return why_not, []
    known = set(model.meta["kernel_kinds"])
    return model.describe(), sorted({kernel_kind(c) for c in configs} - known)


@pytest.mark.parametrize("name", list_presets())
def test_every_kernel_kind_of_a_preset_is_known_to_its_shipped_model(name):
    model, unknown = _stale_kinds(name)
    assert not unknown, f"{name}: the {model} was not trained on kernel kinds {unknown}: retrain it"


def test_the_check_sees_a_kind_the_model_lacks(monkeypatch):
    """The check can fail: a shipped model that forgot one kind of a preset is reported stale."""
    name = "conv_fwd_bf16_2d_all"
    configs = load_preset(name)
    model, _ = cost_model.shipped_model(ARCH, _problem_like(configs[0]))
    forgotten = kernel_kind(configs[0])
    monkeypatch.setitem(model.meta, "kernel_kinds", [k for k in model.meta["kernel_kinds"] if k != forgotten])
    assert _stale_kinds(name)[1] == [forgotten]
