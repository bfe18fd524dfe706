"""runtime/raw_launch.py without a GPU: finding the C launch function behind Triton's launcher, refusing kernels
it cannot prepare for, and expanding descriptor arguments in place (stand-ins for the encoder and the C launch;
the GPU lane runs every TMA family through the real ones)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from tiledispatch.runtime.descriptors import Geometry
from tiledispatch.runtime.raw_launch import RawLaunch, _c_launch, raw_launch

C_LAUNCH = len    # a builtin: what Triton's compiled launcher module exposes


def _wrapped(c_launch):
    launcher = c_launch

    def inner(*args):     # the shape of Triton's descriptor wrapper: the C function is its free variable
        return launcher(*args)
    return inner


def test_the_c_launch_is_found_directly_or_behind_the_wrapper():
    assert _c_launch(SimpleNamespace(launch=C_LAUNCH)) is C_LAUNCH
    assert _c_launch(SimpleNamespace(launch=_wrapped(C_LAUNCH))) is C_LAUNCH
    assert _c_launch(SimpleNamespace(launch=lambda *a: None)) is None      # a wrapper of another shape


META = {"swizzle": 3, "elem_size": 2, "elem_type": 10, "block_size": [64, 64], "fp4_padded": False}
GEOMETRY = Geometry("a_ptr", (100, 200), (200, 1), (64, 64))


def _kernel(scratch=0, meta=(META,)):
    launcher = SimpleNamespace(launch=C_LAUNCH, global_scratch_size=scratch, profile_scratch_size=0,
                               launch_cooperative_grid=False, launch_pdl=False)
    return SimpleNamespace(run=launcher, function=7, packed_metadata="packed",
                           metadata=SimpleNamespace(tensordesc_meta=list(meta)))


@pytest.mark.parametrize("kernel, why", [
    (_kernel(scratch=512), "global scratch: Triton's launcher allocates it"),
    (_kernel(meta=()), "a descriptor without metadata"),
    (_kernel(meta=(dict(META, fp4_padded=True),)), "fp4 padding doubles the inner size"),
])
def test_kernels_it_cannot_prepare_for_keep_tritons_path(kernel, why):
    assert raw_launch(kernel, ((1, GEOMETRY),)) is None, why


def test_descriptor_arguments_expand_into_map_shape_and_strides():
    calls = []
    def fill(ptr, *params):     # the encoder's stand-in
        return ("map", ptr, params)

    raw = RawLaunch(lambda *args: calls.append(args), 7, "packed", False, False, fill,
                    ((3, ("p3",), (5, 6, 6, 1)), (1, ("p1",), (100, 200, 200, 1))))
    base = SimpleNamespace(data_ptr=lambda: 4096)
    other = SimpleNamespace(data_ptr=lambda: 8192)
    raw(2, 1, 1, 99, ["x", base, 1.5, other, 64])
    (args,) = calls
    assert args[:13] == (2, 1, 1, 99, 7, False, False, None, None, "packed", None, None, None)
    assert args[13:] == ("x", ("map", 4096, ("p1",)), 100, 200, 200, 1, 1.5, ("map", 8192, ("p3",)), 5, 6, 6, 1,
                         64)
