"""nn/step_check.StepCheck: after the layer plans settle, alternating blocks of steps on the converted layers
and on torch's classes; the mode keeps the faster (stand-in classes whose forward advances a fake clock)."""
from __future__ import annotations

import copy

import pytest
import torch

import tiledispatch.nn as tdnn
from tiledispatch.nn import step_check
from tiledispatch.nn.step_check import ATTR, BLOCK, ROUNDS, WARMUP, WINS, StepCheck, run_step_check

CHECK_STEPS = 2 * (WARMUP + ROUNDS) * BLOCK   # the blocks of a check, warm-up included


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(step_check.time, "perf_counter", fake)
    return fake


def _pair(clock: Clock, td_s: float, torch_s: float) -> tuple[type, type]:
    """A torch-like class and its 'converted' subclass, each forward costing the given fake seconds."""

    class TorchLinear(torch.nn.Linear):
        def forward(self, x):
            clock.now += torch_s
            return super().forward(x)

    class TdLinear(TorchLinear):
        def forward(self, x):
            clock.now += td_s
            return torch.nn.Linear.forward(self, x)

    return TorchLinear, TdLinear


def _model(clock: Clock, td_s: float, torch_s: float) -> tuple[torch.nn.Module, StepCheck]:
    torch_cls, td_cls = _pair(clock, td_s, torch_s)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    for layer in (model[0], model[2]):
        layer.__class__ = td_cls
    check = StepCheck([(model[0], torch_cls), (model[2], torch_cls)])
    model.register_forward_pre_hook(check)
    return model, check


def _steps(model: torch.nn.Module, n: int) -> None:
    for _ in range(n):
        model(torch.randn(3, 4))


@pytest.mark.parametrize("td_s, torch_s, verdict", [(2.0, 1.0, "torch"), (1.0, 2.0, "tiledispatch"),
                                                     (1.0, 1.0, "torch")])
def test_the_faster_arm_wins_and_a_tie_goes_to_torch(clock, td_s, torch_s, verdict):
    model, check = _model(clock, td_s, torch_s)
    _steps(model, 3 + CHECK_STEPS + 1)
    (state,) = check.summary().values()
    assert state["phase"] == "done" and state["verdict"] == verdict, state
    ms = state["block_ms"]
    assert ms["tiledispatch"] == pytest.approx(1e3 * BLOCK * 2 * td_s)   # two layers per step
    assert ms["torch"] == pytest.approx(1e3 * BLOCK * 2 * torch_s)
    expected = "TorchLinear" if verdict == "torch" else "TdLinear"
    assert (type(model[0]).__name__, type(model[2]).__name__) == (expected, expected)


def test_the_warm_up_round_is_not_counted(clock):
    # torch's layers pay 10x on their first block (cuDNN's heuristics on first calls): counted, that block
    # would not move a median of 5, so it shows in the warm-up times only and in neither median
    model, check = _model(clock, 1.5, 1.0)
    calls = {"torch": 0}
    torch_cls = check.modules[0][1]
    forward = torch_cls.forward

    def first_calls_slow(self, x):
        calls["torch"] += 1
        if calls["torch"] <= 2 * BLOCK:
            clock.now += 9.0
        return forward(self, x)

    torch_cls.forward = first_calls_slow
    _steps(model, 3 + CHECK_STEPS + 1)
    (state,) = check.summary().values()
    assert state["verdict"] == "torch" and state["block_ms"]["torch"] == pytest.approx(1e3 * BLOCK * 2 * 1.0)
    assert state["warmup_ms"] == [pytest.approx(1e3 * BLOCK * 2 * 1.5), pytest.approx(1e3 * BLOCK * 2 * 10.0)]


def test_a_median_win_needs_enough_won_rounds(clock):
    # the converted layers' blocks: fast in WINS - 1 rounds (a majority), slow in the rest; their median is
    # below torch's but they win fewer than WINS rounds: torch keeps the mode
    model, check = _model(clock, 0.0, 1.0)
    td_cls = type(model[0])
    forward = td_cls.forward
    trial_of = check.trials

    def td_forward(self, x):
        trial = trial_of.get("train/grad")
        counted = len(trial.blocks) // 2 if trial is not None and len(trial.warmup) >= 2 * WARMUP else 0
        clock.now += 0.5 if counted < WINS - 1 else 1.5
        return forward(self, x)

    td_cls.forward = td_forward
    _steps(model, 3 + CHECK_STEPS + 1)
    (state,) = check.summary().values()
    assert state["wins"] == WINS - 1 > ROUNDS // 2
    assert state["block_ms"]["tiledispatch"] < 0.99 * state["block_ms"]["torch"]
    assert state["verdict"] == "torch"


def test_settled_once_every_seen_mode_has_its_verdict(clock):
    model, check = _model(clock, 2.0, 1.0)
    assert not check.settled()                 # no step yet
    _steps(model, 2 + CHECK_STEPS)
    assert not check.settled()                 # the last block ends at the next step's hook
    _steps(model, 1)
    assert check.settled()
    model.eval()
    with torch.no_grad():
        model(torch.randn(3, 4))               # a new mode starts learning
    assert not check.settled()


def test_blocks_alternate_arms_and_run_both_classes(clock):
    model, check = _model(clock, 2.0, 1.0)
    seen = []
    model.register_forward_pre_hook(lambda m, a: seen.append(type(m[0]).__name__))
    _steps(model, 3 + CHECK_STEPS + 1)
    rounds = WARMUP + ROUNDS
    blocks = [seen[2 + i * BLOCK:2 + (i + 1) * BLOCK] for i in range(2 * rounds)]   # step 3 begins them
    assert [set(b) for b in blocks] == [{"TdLinear"}, {"TorchLinear"}] * rounds
    trial = check.trials["train/grad"]
    assert [arm for arm, _ in trial.warmup] == ["tiledispatch", "torch"] * WARMUP
    assert [arm for arm, _ in trial.blocks] == ["tiledispatch", "torch"] * ROUNDS


def test_learning_lasts_while_the_layer_plans_change(clock):
    model, check = _model(clock, 1.0, 2.0)
    learned = {"n": 0}
    model[0]._td_plans = {}

    class Plan:                   # a layer plan that samples a host time on each of its first 6 calls
        stage, gpu = "td", {}

        @property
        def host(self):
            return {"td": {"fwd": [0.0] * min(learned["n"], 6)}, "torch": {}}

    model[0]._td_plans["sig"] = Plan()
    for step in range(12):
        learned["n"] = step
        model(torch.randn(3, 4))
    trial = check.trials["train/grad"]
    assert trial.phase == "blocks"   # from step 8 on (the first that learned nothing): steps 8-11 a block
    assert len(trial.warmup) == 1 and not trial.blocks and trial.steps == 1


def test_modes_are_checked_apart_and_each_runs_its_verdict(clock):
    model, check = _model(clock, 2.0, 1.0)
    _steps(model, 3 + CHECK_STEPS + 1)      # train/grad -> torch
    model.eval()
    with torch.no_grad():
        assert type(model[0]).__name__ == "TorchLinear"
        model(torch.randn(3, 4))            # a new mode learns on the converted layers
        assert type(model[0]).__name__ == "TdLinear"
    assert set(check.summary()) == {"train/grad", "eval/no_grad"}
    model.train()
    model(torch.randn(3, 4))                # back to the settled mode: its verdict again
    assert type(model[0]).__name__ == "TorchLinear"


def test_a_block_that_another_mode_interrupts_starts_again(clock):
    model, check = _model(clock, 2.0, 1.0)
    _steps(model, 4)                        # learned; the first block began at step 3
    model.eval()
    with torch.no_grad():
        model(torch.randn(3, 4))            # an eval step inside the train block
    model.train()
    _steps(model, 1)
    trial = check.trials["train/grad"]
    assert trial.restarts == 1 and trial.steps == 1 and not trial.blocks and not trial.warmup
    _steps(model, CHECK_STEPS)
    assert trial.phase == "done" and trial.verdict == "torch"
    assert all(s == pytest.approx(BLOCK * 2 * (2.0 if a == "tiledispatch" else 1.0)) for a, s in trial.blocks)


def test_modes_interleaving_step_by_step_leave_the_converted_layers_unchecked(clock):
    model, check = _model(clock, 2.0, 1.0)
    for _ in range(40):
        model.train()
        model(torch.randn(3, 4))
        model.eval()
        with torch.no_grad():
            model(torch.randn(3, 4))
    state = check.summary()["train/grad"]
    assert state["phase"] == "done" and state["verdict"] == "tiledispatch" and "unchecked" in state["note"]


def test_convert_attaches_one_check_to_the_first_layer_and_a_second_convert_replaces_it():
    # on the first converted layer, not the root: torch 2.11 compiled a root hook as a frame of its own
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.Linear(4, 2))
    report = tdnn.convert(model)
    assert report.step_check is not None
    assert [cls for _, cls in report.step_check.modules] == [torch.nn.Conv2d, torch.nn.Linear]
    assert not model._forward_pre_hooks and list(model[0]._forward_pre_hooks.values()) == [run_step_check]
    assert getattr(model[0], ATTR) is report.step_check and not hasattr(model[2], ATTR)
    again = tdnn.convert(model)
    assert len(model[0]._forward_pre_hooks) == 1 and again.step_check is not report.step_check
    assert getattr(model[0], ATTR) is again.step_check
    copy_ = copy.deepcopy(model)                          # a deep copy's check is its own, and replaced alike
    check = getattr(copy_[0], ATTR)
    assert check is not again.step_check and check.modules[0][0] is copy_[0]
    tdnn.convert(copy_)
    assert list(copy_[0]._forward_pre_hooks.values()) == [run_step_check]
    assert getattr(copy_[0], ATTR) is not check
    assert tdnn.convert(torch.nn.Sequential(torch.nn.ReLU())).step_check is None
    unchecked = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3))
    assert tdnn.convert(unchecked, step_check=False).step_check is None
    assert not unchecked[0]._forward_pre_hooks and not hasattr(unchecked[0], ATTR)


def test_the_hook_runs_the_check_its_layer_holds(clock):
    model, check = _model(clock, 2.0, 1.0)
    model._forward_pre_hooks.clear()
    setattr(model[0], ATTR, check)
    model[0].register_forward_pre_hook(run_step_check)
    _steps(model, 3 + CHECK_STEPS + 1)
    assert check.settled() and check.summary()["train/grad"]["verdict"] == "torch"


def test_a_linear_swapped_back_by_the_hook_of_its_own_call_still_runs():
    # the check's pre-hook runs after the call bound tiledispatch's forward; a converted Linear that is the
    # first layer (here the model itself) then ran that forward on torch's class: its super() call raised
    # TypeError (GPU, benchmarks/module_overhead.py, stop 49)
    layer = torch.nn.Linear(4, 2)
    report = tdnn.convert(layer)
    assert report.step_check is not None and report.step_check.modules[0][0] is layer
    x = torch.randn(3, 4)
    layer._td_last = (x.shape, torch.is_grad_enabled())   # its layer plan settled on torch's layer
    bound = layer.forward
    report.step_check._use("torch")
    assert type(layer) is torch.nn.Linear
    torch.testing.assert_close(bound(x), torch.nn.functional.linear(x, layer.weight, layer.bias))


def test_the_models_benchmark_warms_up_past_the_check(load_script):
    """benchmarks/models.py times eager steps after its warm-up: the check (with ~16 steps of layer plans
    learning first) must be done by then, or the timed steps would run the check's torch blocks."""
    models = load_script("benchmarks/models.py")
    assert models.Settings().warmup >= 16 + CHECK_STEPS + 1
