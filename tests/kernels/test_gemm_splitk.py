"""The one-launch split-K of family `splitk` (split_k <= SERIAL_SPLITS) on Triton's CPU interpreter: the
program that arrives last at a tile sums the slots and runs the epilogue, and leaves the tile's counter at zero.

Shape 40x72x500 with 32x32x32 tiles: ragged tiles in M and N, and K = 500 cut into ranges of whole K blocks
but the last (shorter), every one of 16 splits non-empty, over a batch of 2 (counters indexed by batch and
tile)."""
from __future__ import annotations

import pytest
import torch

from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.testing import check_against_reference, matrix, poisoned, small_config


@pytest.mark.parametrize("split, epilogue", [(2, {}), (3, dict(bias="col", activation="relu")), (16, {})])
def test_serial_split_is_correct_and_the_same_on_every_call(build_registry, split, epilogue):
    """Three calls with a poisoned output, on inputs X, Y, X: were a call to leave a counter counted up, in
    the next call a program that is not the last would run the epilogue over a slot still holding the previous
    call's partial (or none would, leaving the output poisoned). The slots are summed in split order whoever
    arrives last, so the calls on X give the same bits."""
    cfg = small_config("splitk", "rcr", "fp16", block=(32, 32, 32), split_k=split, **epilogue)
    kernel = build_registry([cfg]).get(cfg.name)
    gen = torch.Generator().manual_seed(split)
    inputs = [(matrix(40, 500, dtype="fp16", batch=2, generator=gen),
               matrix(500, 72, letter="c", dtype="fp16", batch=2, generator=gen)) for _ in range(2)]
    bias = torch.randn(72, generator=gen).to(torch.float16) if cfg.bias != "none" else None
    outs = []
    for a, b in (inputs[0], inputs[1], inputs[0]):
        out = poisoned((2, 40, 72), "fp16")
        outs.append(kernel.run(a, b, out=out, bias=bias, alpha=0.5))
        args = GemmArgs(a, b, out, None, bias, cfg.bias, (), 0.5, 0.0, cfg.activation, "fp16")
        check_against_reference(outs[-1], args, "fp16")
    assert torch.equal(outs[0], outs[2])
