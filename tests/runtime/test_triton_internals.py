"""runtime/triton_internals.py: the raw launch and the host descriptor follow Triton's private launcher only
under the releases they were written against; under any other the launch takes Triton's public path."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from tiledispatch.runtime import descriptors, triton_internals
from tiledispatch.runtime.raw_launch import RawLaunch, raw_launch

GEOMETRY = descriptors.Geometry("a_ptr", (64, 64), (64, 1), (32, 32))


@pytest.fixture
def pretend_triton(monkeypatch):
    """pretend_triton("3.7.1"): the installed Triton reports that version (known() is read again)."""
    def pretend(version: str) -> None:
        monkeypatch.setattr(triton, "__version__", version)
        triton_internals.known.cache_clear()

    yield pretend
    triton_internals.known.cache_clear()


@pytest.mark.parametrize("version, want", [
    ("3.6.0", (3, 6)), ("3.7.1", (3, 7)), ("3.6.0+git1a2b3c", (3, 6)), ("10.12.0rc1", (10, 12)),
    ("main", None),
])
def test_release_of_a_version_string(version, want):
    assert triton_internals.release(version) == want


def _launchable_kernel():
    """A compiled kernel raw_launch accepts: no scratch, no descriptors, a C launch function (a builtin)."""
    launcher = SimpleNamespace(launch=len, global_scratch_size=0, profile_scratch_size=0,
                               launch_cooperative_grid=False, launch_pdl=False)
    return SimpleNamespace(run=launcher, function=7, packed_metadata="packed",
                           metadata=SimpleNamespace(tensordesc_meta=[]))


@pytest.fixture
def fake_driver(monkeypatch):
    """Triton's active driver, which raw_launch asks for the descriptor encoder (none without a GPU)."""
    import triton.runtime

    utils = SimpleNamespace(fill_tma_descriptor=lambda *args: None)
    monkeypatch.setattr(triton.runtime, "driver", SimpleNamespace(active=SimpleNamespace(utils=utils)))


@pytest.mark.parametrize("version, raw", [("3.6.0", True), ("3.7.1", False), ("4.0.0", False)])
def test_the_raw_launch_runs_only_under_a_known_release(pretend_triton, fake_driver, version, raw):
    pretend_triton(version)
    assert isinstance(raw_launch(_launchable_kernel(), ()), RawLaunch) is raw


@pytest.mark.parametrize("version, kind", [("3.6.0", descriptors.HostDescriptor),
                                           ("3.7.1", TensorDescriptor)])
def test_host_descriptors_become_tritons_own_under_another_release(pretend_triton, version, kind):
    pretend_triton(version)
    base = torch.zeros(64, 64, dtype=torch.float16)
    desc = descriptors.HostDescriptor(base, GEOMETRY)
    assert type(desc) is kind
    assert desc.base is base and list(desc.shape) == [64, 64] and list(desc.strides) == [64, 1]
    assert list(desc.block_shape) == [32, 32] and desc.padding == "zero"
