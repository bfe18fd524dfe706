"""StepCheck: a converted model's layer plans against torch's own layers, timed on the user's own steps.

Layer plans decide per layer from per-layer host and GPU times; a step's wall time also depends on how the
host and the GPU overlap across layers, which no per-layer sum sees. So once a mode's layer plans have settled
(grad mode and train/eval), the check runs the next steps in alternating blocks: the converted layers, then
the same modules swapped back to their torch classes (stock torch exactly), and compares the blocks' wall
times (device synchronized at each block boundary). The first round (a block per arm) warms each arm up and
is not counted: the first calls of torch's layers in the check can pay for cuDNN's heuristics, whose cost
once made a converted ResNet-50 keep its layers on a 17% margin that its later steps did not show (H200,
eager inference). The mode keeps the converted layers only where their median block is below MARGIN of
torch's and they won at least WINS of the ROUNDS paired rounds (one block per arm each); otherwise its layers
stay torch's classes, as before convert.
A step is one call of the first converted layer (whose forward pre-hook the check is: once per step in a
model that calls each layer once); a block that another mode's steps interrupt starts again (a mode whose
blocks keep being interrupted stays on the converted layers, unchecked).
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence
from typing import Any

import torch

LEARN_STEPS = 40      # at most this many steps for the layer plans to settle before the blocks start
BLOCK = 4             # steps per block
WARMUP = 1            # rounds (a block per arm) run first and not counted
ROUNDS = 5            # counted blocks per arm
WINS = 4              # counted rounds the converted layers must win (besides the median margin)
MARGIN = 0.99         # the converted layers are kept below this fraction of torch's block time
MAX_RESTARTS = 8      # blocks restarted by steps of another mode before a mode is left unchecked
ARMS = ("tiledispatch", "torch")


@dataclasses.dataclass
class Trial:
    """One mode's check: `phase` is 'learn', 'blocks' or 'done'; `blocks` holds (arm, seconds) per block;
    `verdict` is the arm the mode runs once done; `warmup` holds the uncounted first blocks."""

    phase: str = "learn"
    steps: int = 0
    blocks: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    warmup: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    block_start: float = 0.0
    verdict: str = "tiledispatch"
    learning: tuple = ()      # what the layer plans had learned at the last step (a change: still learning)
    restarts: int = 0         # blocks restarted because another mode's steps ran inside them
    note: str = ""

    def medians(self) -> dict[str, float]:
        return {arm: statistics.median(s for a, s in self.blocks if a == arm)
                for arm in ARMS if any(a == arm for a, _ in self.blocks)}

    def wins(self) -> int:
        """Counted rounds in which the converted layers' block was the faster of the pair."""
        return sum(td < torch_s for (_, td), (_, torch_s) in zip(self.blocks[0::2], self.blocks[1::2]))

    def started(self) -> int:
        """Blocks finished so far, counted or not (their count decides whose turn is next)."""
        return len(self.warmup) + len(self.blocks)


ATTR = "_td_step_check"   # the attribute of the first converted layer holding its model's StepCheck


def run_step_check(layer: torch.nn.Module, args: Any) -> None:
    """The forward pre-hook convert registers on the first converted layer: runs the StepCheck the layer
    holds (ATTR). A plain function rather than the check object itself, so that a compiled model guards on
    nothing mutable here: with the object as the hook, Dynamo could not skip the guards on the path from the
    model to that layer (recursive dict tags, torch 2.11)."""
    if torch.compiler.is_compiling() or torch._C._current_graph_task_id() != -1:
        return   # compiling; or inside a backward: a checkpoint's recomputation, not a new step
    check = layer.__dict__.get(ATTR)
    if check is not None:
        check(layer, args)


def _mode(layer: torch.nn.Module) -> str:
    return f"{'train' if layer.training else 'eval'}/{'grad' if torch.is_grad_enabled() else 'no_grad'}"


class StepCheck:
    """Held by the first converted layer (ATTR) and run by its forward pre-hook run_step_check
    (convert(model, step_check=True)); that layer's train/eval flag and the grad mode make the step's
    mode."""

    def __init__(self, modules: Sequence[tuple[torch.nn.Module, type]]) -> None:
        self.modules = list(modules)          # (converted module, the torch class it swaps back to)
        self.td_classes = [type(m) for m, _ in self.modules]
        self.trials: dict[str, Trial] = {}
        self.arm = "tiledispatch"             # the classes the modules have now
        self.last_mode: str | None = None

    def __call__(self, layer: torch.nn.Module, args: Any) -> None:
        if torch.compiler.is_compiling():
            return
        trial = self.trials.get(mode := _mode(layer))
        if trial is None:
            trial = self.trials[mode] = Trial()
        moved, self.last_mode = self.last_mode != mode, mode
        if trial.phase == "done":
            if self.arm != trial.verdict:
                self._use(trial.verdict)
        elif trial.phase == "learn":
            trial.steps += 1
            self._use("tiledispatch")
            learning, trial.learning = trial.learning, self._learning()
            if trial.steps > LEARN_STEPS or (trial.steps > 2 and learning == trial.learning):
                trial.phase = "blocks"
                self._start_block(trial)
        elif moved:   # another mode's steps ran inside this block: time it again from here
            trial.restarts += 1
            if trial.restarts > MAX_RESTARTS:   # modes interleave step by step: the blocks cannot be timed
                trial.phase, trial.verdict, trial.note = "done", "tiledispatch", "modes interleave: unchecked"
                self._use(trial.verdict)
            else:
                self._start_block(trial)
        else:
            trial.steps += 1
            if trial.steps > BLOCK:
                self._end_block(trial)

    def _start_block(self, trial: Trial) -> None:
        """This step is the first of a block on the arm whose turn it is."""
        self._use(ARMS[trial.started() % 2])
        trial.steps, trial.block_start = 1, self._now()

    def _end_block(self, trial: Trial) -> None:
        """Record the block that ends here; after the last one settle the mode, else start the next."""
        now = self._now()
        counted = trial.blocks if len(trial.warmup) >= 2 * WARMUP else trial.warmup
        counted.append((self.arm, now - trial.block_start))
        if len(trial.blocks) < 2 * ROUNDS:
            self._use(ARMS[trial.started() % 2])
            trial.steps, trial.block_start = 1, now
            return
        medians = trial.medians()
        keep = medians["tiledispatch"] < MARGIN * medians["torch"] and trial.wins() >= WINS
        trial.phase, trial.verdict = "done", "tiledispatch" if keep else "torch"
        self._use(trial.verdict)

    def _learning(self) -> tuple:
        """What the layer plans have learned so far: unchanged over a step means this mode's plans have
        settled (plans of other modes do not change meanwhile)."""
        return tuple((plan.stage, sum(map(len, plan.host["td"].values())),
                      sum(map(len, plan.host["torch"].values())), len(plan.gpu))
                     for module, _ in self.modules for plan in getattr(module, "_td_plans", {}).values())

    def _now(self) -> float:
        """A clock reading after the device (where the modules' weights are now) has finished its work."""
        device = self.modules[0][0].weight.device if self.modules else torch.device("cpu")
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    def _use(self, arm: str) -> None:
        if arm == self.arm:
            return
        for (module, torch_cls), td_cls in zip(self.modules, self.td_classes):
            module.__class__ = td_cls if arm == "tiledispatch" else torch_cls
        self.arm = arm

    def settled(self) -> bool:
        """Whether every mode seen so far has its verdict (False before the first step)."""
        return bool(self.trials) and all(t.phase == "done" for t in self.trials.values())

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per mode: phase, verdict and the block medians (ms) measured so far."""
        return {mode: {"phase": t.phase, "verdict": t.verdict if t.phase == "done" else None,
                       "block_ms": {arm: 1e3 * s for arm, s in t.medians().items()},
                       "wins": t.wins(), "rounds": len(t.blocks) // 2,
                       "warmup_ms": [round(1e3 * s, 3) for _, s in t.warmup],
                       **({"note": t.note} if t.note else {})}
                for mode, t in self.trials.items()}
