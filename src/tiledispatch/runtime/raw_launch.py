"""A compiled kernel's CUDA launch without Triton's Python wrapper around it.

Triton's CudaLauncher wraps its C launch function in Python that, on every launch, asks two allocators for
global and profile scratch and expands each tensor-descriptor argument into the encoded tensor map and the
shape and strides that follow it (make_tensordesc_arg). For a kernel that needs no scratch, RawLaunch calls
the C function itself and expands the descriptors the same way (Triton's encoder, the kernel's own descriptor
metadata), with everything but the base address prepared once per bound launch: a few microseconds less host
time per launch (benchmarks/dispatch_overhead.py). Kernels it cannot prepare for (scratch, descriptors without
metadata, fp4 padding, a launcher of another shape, or a Triton release whose internals it was not written
against: runtime/triton_internals.py) keep Triton's path (raw_launch returns None).
"""
from __future__ import annotations

from typing import Any

from tiledispatch.runtime import triton_internals
from tiledispatch.runtime.descriptors import Geometry


def _c_launch(launcher: Any) -> Any:
    """The C launch function of a CudaLauncher: its `launch`, or the function its descriptor wrapper calls."""
    launch = getattr(launcher, "launch", None)
    code = getattr(launch, "__code__", None)
    if code is None:
        return launch
    closure = getattr(launch, "__closure__", None) or ()
    cells = dict(zip(code.co_freevars, (cell.cell_contents for cell in closure)))
    inner = cells.get("launcher")
    return inner if inner is not None and getattr(inner, "__code__", None) is None else None


def raw_launch(kernel: Any, descs: tuple[tuple[int, Geometry], ...]) -> RawLaunch | None:
    """The raw launch of a loaded CompiledKernel whose descriptor arguments sit at `descs` (position,
    geometry), or None where Triton's own launch path must run."""
    if not triton_internals.known():
        return None
    launcher = kernel.run
    if getattr(launcher, "global_scratch_size", 1) or getattr(launcher, "profile_scratch_size", 1):
        return None
    launch = _c_launch(launcher)
    meta = list(getattr(kernel.metadata, "tensordesc_meta", None) or [])
    if launch is None or len(meta) != len(descs) or any(m is None or m.get("fp4_padded") for m in meta):
        return None
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
    from triton.runtime import driver

    expand = []
    for (position, g), m in zip(descs, meta):
        shape, strides = list(g.shape), list(g.strides)
        params = (m["swizzle"], m["elem_size"], TMA_DTYPE_DEVICE_TO_HOST[m["elem_type"]], m["block_size"],
                  shape, strides, 0)
        expand.append((position, params, (*shape, *strides)))
    return RawLaunch(launch, kernel.function, kernel.packed_metadata, bool(launcher.launch_cooperative_grid),
                     bool(launcher.launch_pdl), driver.active.utils.fill_tma_descriptor,
                     tuple(reversed(expand)))


class RawLaunch:
    """Called with the grid, the raw stream and the kernel's arguments in signature order (descriptor
    positions holding their base tensors, a list it may change)."""

    __slots__ = ("coop", "expand", "fill", "function", "launch", "packed", "pdl")

    def __init__(self, launch: Any, function: Any, packed: Any, coop: bool, pdl: bool, fill: Any,
                 expand: tuple) -> None:
        self.launch, self.function, self.packed, self.coop, self.pdl = launch, function, packed, coop, pdl
        self.fill, self.expand = fill, expand     # expand: last descriptor first, so positions stay valid

    def __call__(self, gx: int, gy: int, gz: int, stream: int, args: list) -> None:
        fill = self.fill
        for position, params, tail in self.expand:
            args[position:position + 1] = (fill(args[position].data_ptr(), *params), *tail)
        self.launch(gx, gy, gz, stream, self.function, self.coop, self.pdl, None, None, self.packed, None,
                    None, None, *args)
