"""GPU lane for kloop 'halo' (kernels/conv_halo.py): every halo instance of the 2-D `_all` presets, in each
dtype and direction, against the fp32 reference on depthwise layers with 3x3, 5x5 and 7x7 filters, odd sizes,
asymmetric padding and stride 2 (fwd), where the instance takes them."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.presets import load_preset
from tiledispatch.testing.reference import check_problems

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _depthwise(direction: str, dtype: str) -> list[td.ConvProblem]:
    cases = [(4, 96, (27, 29), (7, 7), 1, 3), (2, 128, (14, 14), (7, 7), 1, 3),
             (2, 64, (56, 56), (3, 3), 1, 1),
             (3, 40, (13, 19), (5, 5), 1, ((2, 1), (1, 2))), (2, 256, (7, 9), (7, 7), 1, 3),
             (2, 96, (28, 30), (7, 7), 2, 3), (2, 72, (29, 27), (3, 3), 2, 1)]
    return [td.ConvProblem(direction, n, c, c, c, sp, f, s, p, 1, dtype) for n, c, sp, f, s, p in cases]


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
def test_every_halo_instance(direction, dtype):
    reg = td.Registry(td.detect())
    for cfg in load_preset(f"conv_{direction}_{dtype}_2d_all"):
        if cfg.kloop == "halo":
            reg.add(cfg)
    assert reg.kernels, f"no halo instance in conv_{direction}_{dtype}_2d_all"
    report = reg.build()
    assert not report.failed, report.failed
    runs, failures = check_problems(reg.kernels, _depthwise(direction, dtype))
    print(f"halo {direction} {dtype}: {len(reg.kernels)} instances, {runs} runs, {len(failures)} failures")
    assert runs > 0
    assert not failures, "\n".join(failures[:20])


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_halofh_instances(dtype):
    """kloop 'halofh' (kernels/conv_halo_fh.py, in no preset yet): tools/probe_halo_wgrad.py's instances at
    block_k 7 and 3 against the fp32 reference on the same depthwise layers (stride-1 ones)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    from probe_halo_wgrad import new_configs

    arch = td.detect()
    reg = td.Registry(arch)
    for block_k in (7, 3):
        for cfg in new_configs(arch, dtype, block_k):
            reg.add(cfg)
    report = reg.build()
    assert not report.failed, report.failed
    runs, failures = check_problems(reg.kernels, _depthwise("bwd_weight", dtype))
    print(f"halofh {dtype}: {len(reg.kernels)} instances, {runs} runs, {len(failures)} failures")
    assert runs > 0
    assert not failures, "\n".join(failures[:20])
