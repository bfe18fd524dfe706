"""tools/essential_holdout.py: the essential presets' efficiency on the shipped models' held-out problems."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tool(load_script):
    return load_script("tools/essential_holdout.py")


def test_held_out_efficiencies_of_the_essential_preset_and_of_every_kernel(tool):
    # every shipped conv model is trained on 98% of its problems since stop 58 (bwd_data held out 20% before):
    # 42 held-out bwd_data problems of 2,093 with an ok kernel
    result = tool.efficiencies("bwd_data", tool.ROOT / "data" / "h200")
    every, essential = result["all"], result["essential"]
    assert len(every["top1"]) == len(every["top5"]) >= 40
    for values in (every["top1"], every["top5"], essential["top1"], essential["top5"]):
        assert all(0 < v <= 1 for v in values)
    assert all(t5 >= t1 for t1, t5 in zip(every["top1"], every["top5"]))   # the top 5 hold the top 1
    assert 0 < len(essential["top1"]) <= len(every["top1"]) and essential["instances"] > 20
