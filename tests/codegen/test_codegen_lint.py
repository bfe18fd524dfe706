"""The loop-carry lint (codegen/lint.py): Triton's front end does not carry a loop variable whose value looks
unchanged after the body, which happens when it starts as the same value as another carried variable and the body
copies that one into it (a rotating ring such as `b = a; a = new`). The interpreter runs such code correctly, so
only this check (or a GPU run) can catch it."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch.codegen import render_source
from tiledispatch.codegen.lint import check_source, loop_carry_aliases
from tiledispatch.errors import CodegenError
from tiledispatch.kernels.family import family_module


def _fn(*lines: str) -> str:
    return "def k():\n" + "".join(f"    {line}\n" for line in lines)


RING = ("a = 1", "b = a", "for t in range(3):", "    b = a", "    a = t")


def test_a_ring_started_from_one_value_is_flagged():
    found = loop_carry_aliases(_fn(*RING))
    assert len(found) == 1 and "assigns b" in found[0] and "same value as a" in found[0]


def test_nested_loops_are_checked():
    src = _fn("x = 1", "for i in range(2):", "    y = x", "    z = y", "    for j in range(2):", "        z = y",
              "        y = j")
    assert ["assigns z" in f for f in loop_carry_aliases(src)] == [True]


@pytest.mark.parametrize("lines", [
    ("a = 1", "b = 2", "for t in range(3):", "    b = a", "    a = t"),     # distinct starting values
    ("a = 1", "b = a", "for t in range(3):", "    b = b + 1"),             # b changes by itself
    ("a = 1", "b = a", "for t in range(3):", "    b = a"),                 # a never changes: b stays a, rightly
    ("a = 1", "b = a", "a = 2", "for t in range(3):", "    b = a", "    a = t"),   # a was reassigned before
], ids=["distinct", "self-update", "constant", "reassigned"])
def test_correct_loops_pass(lines):
    assert loop_carry_aliases(_fn(*lines)) == []


def test_check_source_raises_naming_the_instance():
    with pytest.raises(CodegenError, match="inst-x.*assigns b"):
        check_source(_fn(*RING), "inst-x")


def test_the_roll_weight_gradient_ring_starts_from_two_zero_tiles():
    """The stride-1 weight-gradient walk rotates the last three dy tiles (dv_2 = dv_1; dv_1 = dv_0); started from
    one shared zero tile, the compiled kernel never carried dv_2 and dropped filter row 2 (seen on the H200)."""
    cfg = td.parse_name("conv-direct-bwd_weight-2d-bf16-bf16-fp32-32x32x3-g1-w4-s2-k0-roll-a8-none-b0")
    body = family_module(cfg).render(cfg)
    assert loop_carry_aliases(body) == []
    zero = "dv_2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
    assert zero in body
    assert any("assigns dv_2" in f for f in loop_carry_aliases(body.replace(zero, "dv_2 = dv_1")))


@pytest.mark.parametrize("direction", ["fwd", "bwd_data", "bwd_weight"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.slow
def test_every_direct_instance_of_the_all_presets_renders(direction, ndim):
    """Every direct (tap and roll) instance of the bf16 `_all` presets passes the check."""
    reg = td.Registry(td.detect("sm_90"))
    reg.add_preset(f"conv_{direction}_bf16_{ndim}d_all")
    direct = [k.config for k in reg.kernels if k.config.family == "direct"]
    assert direct
    for cfg in direct:
        assert loop_carry_aliases(render_source(cfg)) == [], cfg.name


def test_a_build_checks_each_source_before_compiling(monkeypatch, tmp_path):
    """Registry.build runs the check on every instance it is about to compile, and raises (never skips)."""
    from tiledispatch.registry import store as registry_module

    reg = td.Registry(td.detect("sm_90"), cache_dir=tmp_path)
    cfg = td.parse_name("conv-direct-bwd_weight-2d-bf16-bf16-fp32-32x32x3-g1-w4-s2-k0-roll-a8-none-b0")
    reg.add(cfg.name)
    zero = "dv_2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"
    monkeypatch.setattr(registry_module, "render_source", lambda c: render_source(c).replace(zero, "dv_2 = dv_1"))
    with pytest.raises(CodegenError, match="assigns dv_2"):
        reg.build(max_workers=1, progress=False)
