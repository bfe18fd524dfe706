"""TILEDISPATCH_VENDOR: parsed strictly, and with it off, selection (pure, over plans that include the vendor
library's) never takes a vendor plan."""
from __future__ import annotations

import pytest

import tiledispatch as td
from tiledispatch import settings
from tiledispatch.configs.vendor import VendorConfig
from tiledispatch.registry.kernel import Kernel
from tiledispatch.registry.vendor import VendorKernel
from tiledispatch.select.selector import choose, db_winner, fastest, is_vendor, plans_of
from tiledispatch.testing import small_config

ARCH = td.get_arch("sm_90")
PROBLEM = td.GemmProblem(40, 48, 72, dtype="fp16")


def kernels() -> list[Kernel]:
    """The vendor GEMM first (first_fit would take it), then two of ours."""
    return [VendorKernel(VendorConfig("gemm"), ARCH), Kernel(small_config("tiled", "rcr", "fp16"), ARCH),
            Kernel(small_config("tiled", "rcr", "fp16", block=(16, 64, 32)), ARCH)]


@pytest.mark.parametrize("value, on", [(None, True), ("1", True), ("on", True), ("0", False),
                                       ("false", False), ("OFF", False)])
def test_setting_parses(monkeypatch, value: str | None, on: bool) -> None:
    if value is None:
        monkeypatch.delenv("TILEDISPATCH_VENDOR", raising=False)
    else:
        monkeypatch.setenv("TILEDISPATCH_VENDOR", value)
    assert settings.vendor_plans() is on
    assert "TILEDISPATCH_VENDOR" in settings.ENV_VARS


def test_bad_value_names_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("TILEDISPATCH_VENDOR", "cudnn")
    with pytest.raises(td.BadInput) as info:
        settings.vendor_plans()
    assert info.value.field == "TILEDISPATCH_VENDOR" and "'0'" in str(info.value)


@pytest.mark.parametrize("strategy", ["first_fit", "rules", "auto"])
def test_off_selection_never_takes_the_vendor_plan(monkeypatch, strategy: str) -> None:
    vendor = lambda selection: selection.kernel.config.family == "vendor"    # noqa: E731
    monkeypatch.delenv("TILEDISPATCH_VENDOR", raising=False)
    plans = plans_of(kernels(), PROBLEM)
    assert sum(map(is_vendor, plans)) == 1
    assert vendor(choose(plans, PROBLEM, "first_fit", ARCH))                          # on: first_fit takes it
    assert vendor(choose(plans, PROBLEM, "auto", ARCH, tuned="vendor-cublas-gemm"))   # and auto the DB's pick
    monkeypatch.setenv("TILEDISPATCH_VENDOR", "0")
    plans = plans_of(kernels(), PROBLEM)
    assert len(plans) == 2 and not any(map(is_vendor, plans))
    assert not vendor(choose(plans, PROBLEM, strategy, ARCH, tuned="vendor-cublas-gemm"))


def _timed(ours_ms: float, vendor_ms: float) -> tuple[list, dict[str, float]]:
    plans = plans_of(kernels(), PROBLEM)
    ours = [plan for plan in plans if not is_vendor(plan)]
    timings = {plan.label: ours_ms + 0.5 * ours.index(plan) if plan in ours else vendor_ms for plan in plans}
    return plans, timings


@pytest.mark.parametrize("ours_ms, vendor_ms, margin, vendor_wins", [
    (0.98, 1.0, 0.03, True),     # 2% faster: inside the margin, the vendor keeps it
    (0.96, 1.0, 0.03, False),    # 4% faster: ours
    (0.98, 1.0, 0.0, False),     # no margin: the plain fastest
    (1.20, 1.0, 0.03, True),     # the vendor is simply faster
])
def test_fastest_gives_ties_to_the_vendor(ours_ms: float, vendor_ms: float, margin: float,
                                          vendor_wins: bool) -> None:
    plans, timings = _timed(ours_ms, vendor_ms)
    assert is_vendor(fastest(plans, timings, margin)) is vendor_wins


def test_fastest_without_a_vendor_plan_is_the_minimum() -> None:
    plans, timings = _timed(1.0, 0.5)
    ours = [plan for plan in plans if not is_vendor(plan)]
    assert fastest(ours, timings, 0.5).label == min(ours, key=lambda p: timings[p.label]).label


@pytest.mark.parametrize("value, expected", [(None, 0.03), ("0", 0.0), ("0.1", 0.1)])
def test_margin_setting(monkeypatch, value: str | None, expected: float) -> None:
    if value is None:
        monkeypatch.delenv("TILEDISPATCH_VENDOR_MARGIN", raising=False)
    else:
        monkeypatch.setenv("TILEDISPATCH_VENDOR_MARGIN", value)
    assert settings.vendor_margin() == expected


@pytest.mark.parametrize("value", ["abc", "-0.1", "1.5"])
def test_bad_margin_names_the_variable(monkeypatch, value: str) -> None:
    monkeypatch.setenv("TILEDISPATCH_VENDOR_MARGIN", value)
    with pytest.raises(td.BadInput) as info:
        settings.vendor_margin()
    assert info.value.field == "TILEDISPATCH_VENDOR_MARGIN"


def test_a_vendor_kept_by_the_margin_says_so() -> None:
    from tiledispatch.select.selector import measured

    plans, timings = _timed(0.98, 1.0)
    winner = fastest(plans, timings, 0.03)
    notes = measured(winner, timings, "db").notes
    assert is_vendor(winner) and any("kept the vendor plan" in n for n in notes)
    ours = min((p for p in plans if not is_vendor(p)), key=lambda p: timings[p.label])
    assert not any("kept the vendor" in n for n in measured(ours, timings, "db").notes)


def _entry(kernel: str, ours_ms: float, vendor_ms: float) -> dict:
    return {"kernel": kernel, "timings_ms": {"gemm-a": ours_ms, "gemm-b": ours_ms + 1.0,
                                            "vendor-cublas-gemm": vendor_ms}}


@pytest.mark.parametrize("margin, vendor_on, want", [(0.03, True, "gemm-a"), (0.10, True, "vendor-cublas-gemm"),
                                                     (0.10, False, "gemm-a")])
def test_db_winner_decides_the_kept_timings_again(margin: float, vendor_on: bool, want: str) -> None:
    # stored under margin 0.03, where ours (0.95 ms) beat the vendor (1.0 ms): a larger margin or the vendor
    # switched off decide again from the same timings
    assert db_winner(_entry("gemm-a", 0.95, 1.0), margin, vendor_on) == want
    assert db_winner(_entry("vendor-cublas-gemm", 0.5, 1.0), 0.10, False) == "gemm-a"


def test_db_winner_without_timings_of_ours_keeps_the_stored_label() -> None:
    assert db_winner({"kernel": "vendor-cublas-gemm", "timings_ms": {"vendor-cublas-gemm": 1.0}},
                     0.03, False) == "vendor-cublas-gemm"
    assert db_winner({"kernel": "gemm-a"}, 0.03, True) == "gemm-a"
