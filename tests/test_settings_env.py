"""Every TILEDISPATCH_* variable is read lazily and validated."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import tiledispatch as td
from tiledispatch import settings


def test_session_cache_is_isolated_from_the_home_cache(isolated_cache):
    assert settings.cache_dir() == Path(os.environ["TILEDISPATCH_CACHE_DIR"]) == isolated_cache
    assert Path.home() / ".cache" / "tiledispatch" != settings.cache_dir()


def test_cache_dir_default_and_override(monkeypatch, tmp_path):
    monkeypatch.delenv("TILEDISPATCH_CACHE_DIR")
    assert settings.cache_dir() == Path.home() / ".cache" / "tiledispatch"
    monkeypatch.setenv("TILEDISPATCH_CACHE_DIR", str(tmp_path))
    assert settings.cache_dir() == tmp_path


@pytest.mark.parametrize("value", ["abc", "0", "-3"])
def test_max_workers_rejects_bad_values(monkeypatch, value):
    monkeypatch.setenv("TILEDISPATCH_MAX_WORKERS", value)
    with pytest.raises(td.BadInput) as info:
        settings.max_workers()
    assert info.value.field == "TILEDISPATCH_MAX_WORKERS"


def test_max_workers_default_and_value(monkeypatch):
    assert settings.max_workers() == max(1, os.cpu_count() or 1)
    monkeypatch.setenv("TILEDISPATCH_MAX_WORKERS", "3")
    assert settings.max_workers() == 3


def test_other_variables(monkeypatch, tmp_path):
    assert settings.tuning_db_path() is None and settings.default_arch() == "sm_90"
    assert settings.force_interpreter() is False
    monkeypatch.setenv("TILEDISPATCH_TUNING_DB", str(tmp_path / "db.json"))
    monkeypatch.setenv("TILEDISPATCH_ARCH", "sm_80")
    monkeypatch.setenv("TILEDISPATCH_INTERPRET", "1")
    monkeypatch.setenv("TILEDISPATCH_PROGRESS", "0")
    assert settings.tuning_db_path() == tmp_path / "db.json"
    assert settings.default_arch() == "sm_80"
    assert settings.force_interpreter() is True
    assert settings.progress_enabled() is False
    assert set(settings.ENV_VARS) >= {"TILEDISPATCH_CACHE_DIR", "TILEDISPATCH_TUNING_DB", "TILEDISPATCH_ARCH"}


def test_progress_bar_is_silent_unless_enabled(capsys):
    from tiledispatch.progress import progress_bar

    with progress_bar("work", 3) as advance:          # TILEDISPATCH_PROGRESS=0 in the test session
        advance()
    with progress_bar("work", 0, enabled=True) as advance:
        advance()
    assert capsys.readouterr().err == ""
    with progress_bar("work", 2, enabled=True) as advance:
        advance()
        advance()
    assert "work" in capsys.readouterr().err


def test_cpu_timer_returns_a_positive_median():
    import time

    import torch

    from tiledispatch.bench.timer import time_ms

    calls = []
    ms = time_ms(lambda: (calls.append(1), time.sleep(0.002)), torch.device("cpu"))
    assert ms >= 1.5 and len(calls) == 4


def test_rank_space_setting(monkeypatch):
    monkeypatch.delenv("TILEDISPATCH_RANK_SPACE", raising=False)
    assert settings.rank_space() is None
    for value, expected in (("1", True), ("on", True), ("0", False), ("false", False)):
        monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", value)
        assert settings.rank_space() is expected
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "maybe")
    with pytest.raises(td.BadInput) as info:
        settings.rank_space()
    assert info.value.field == "TILEDISPATCH_RANK_SPACE" and "'1', '0'" in str(info.value)


def test_measure_top_k_defaults_per_op_and_the_variable_overrides_both(monkeypatch):
    monkeypatch.delenv("TILEDISPATCH_MEASURE_TOP_K", raising=False)
    assert (settings.measure_top_k("conv"), settings.measure_top_k("gemm")) == (5, 3)
    monkeypatch.setenv("TILEDISPATCH_MEASURE_TOP_K", "2")
    assert (settings.measure_top_k("conv"), settings.measure_top_k("gemm")) == (2, 2)
    monkeypatch.setenv("TILEDISPATCH_MEASURE_TOP_K", "0")
    with pytest.raises(td.BadInput):
        settings.measure_top_k("conv")


def test_snapshot_records_the_set_variables_only(monkeypatch):
    for name in settings.ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TILEDISPATCH_RANK_SPACE", "1")
    monkeypatch.setenv("TILEDISPATCH_MEASURE", "")          # empty counts as unset, as everywhere in settings
    monkeypatch.setenv("TILEDISPATCH_UNKNOWN_THING", "x")   # not a setting of the project
    assert settings.snapshot() == {"TILEDISPATCH_RANK_SPACE": "1"}
