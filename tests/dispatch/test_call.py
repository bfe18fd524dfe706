"""The dispatch call path on CPU tensors (Triton's interpreter): a first call derives and checks its problem
once and selects once; a repeated call is a memo hit; a changed stamp (kernel added, build) decides again."""
from __future__ import annotations

import pytest
import torch

import tiledispatch as td
from tiledispatch.dispatch import call, decide, defaults
from tiledispatch.memo import Memo
from tiledispatch.runtime.arguments import GemmArgs
from tiledispatch.testing import check_against_reference, matrix, suites

TILED_A16, _, _, TILED_A1 = suites.aligned_configs()


class Count:
    """Counts calls of module.name (keeps calling the original)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
        self.calls = 0
        original = getattr(module, name)

        def counted(*args: object, **kwargs: object) -> object:
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


@pytest.fixture
def gemm_default(build_registry):
    registry = build_registry([TILED_A16, TILED_A1])
    defaults.install(("gemm", "fp16", "rcr", td.Epilogue()), registry)
    yield registry
    defaults.reset()


def test_first_td_gemm_derives_and_checks_its_problem_once(gemm_default, monkeypatch):
    derive = Count(monkeypatch, call, "problem_from_args")
    choose = Count(monkeypatch, decide, "_choose")
    a, b = matrix(48, 32, dtype="fp16"), matrix(32, 40, letter="c", dtype="fp16")
    check_against_reference(td.gemm(a, b), GemmArgs(a, b), "fp16")
    assert (derive.calls, choose.calls) == (1, 1)
    a2, b2 = matrix(48, 32, dtype="fp16"), matrix(32, 40, letter="c", dtype="fp16")
    check_against_reference(td.gemm(a2, b2), GemmArgs(a2, b2), "fp16")   # a memo hit: nothing derived
    assert (derive.calls, choose.calls) == (1, 1)


def test_a_changed_stamp_decides_again(gemm_default, monkeypatch):
    choose = Count(monkeypatch, decide, "_choose")
    a, b = matrix(48, 32, dtype="fp16"), matrix(32, 40, letter="c", dtype="fp16")
    td.gemm(a, b)
    stamp = gemm_default.stamp()
    names = {k.name for k in gemm_default.kernels}
    gemm_default.add(next(c for c in suites.fuzz_configs() if c.name not in names))
    assert gemm_default.stamp() != stamp
    td.gemm(a, b)
    assert choose.calls == 2


def test_decisions_of_a_site_name_the_caller_arguments():
    site = call.Site(Memo(), lambda problem: pytest.fail("no registry is needed to refuse bad tensors"))
    w = torch.zeros(4, 2, 3, 3)
    with pytest.raises(td.BadInput) as info:
        call.conv(site, "bwd_data", [[1.0]], w, ("bwd_data", (1, 4, 5, 5), w.shape, 1, 0, 1, 2), None, None, None,
                  "auto")
    assert info.value.field == "dy"
    with pytest.raises(td.BadInput) as info:
        call.conv(site, "bwd_weight", torch.zeros(1, 4, 5, 5), w.half(), ("bwd_weight", (1, 4, 5, 5), (4, 2, 3, 3),
                  1, 0, 1, 2), None, None, None, "auto")
    assert info.value.field == "dy"
