"""Tensor descriptors built on the host for each launch (the `tensordesc` parameters of the TMA families).

A descriptor parameter (kernels/tma_common.descriptor_param) names the parameters that give its base tensor,
rows, columns, row stride and (rank 3) batch stride. At bind time `geometry` reads the shape and strides from
the launch's argument values (fixed for an argument signature); each launch wraps that call's base tensor
(`describe`), and Triton's launcher encodes the tensor map from it and passes it as a kernel parameter, so no
program builds descriptors in global memory (on the H200 that start-up cost small GEMMs 1.5-2 us:
tools/probe_host_descriptors.py). The interpreter takes Triton's TensorDescriptor.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from tiledispatch.errors import BadInput
from tiledispatch.kernels.spec import Param
from tiledispatch.runtime import triton_internals

_BLOCK = re.compile(r"tensordesc<[^\[]*\[([^\]]*)\](>|,)")   # Gluon's types go on with the box's layout
SHARED_BATCH_STRIDE = 16   # the batch stride of a 1-deep operand (any multiple of 16 bytes: never stepped)


def is_descriptor(param: Param) -> bool:
    return param.ty.startswith("tensordesc")


@dataclasses.dataclass(frozen=True)
class Geometry:
    """The shape, strides and box of one descriptor parameter for one argument signature, and the name of the
    parameter whose tensor is its base."""

    base: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block: tuple[int, ...]


def geometry(param: Param, values: dict[str, Any]) -> Geometry:
    """A descriptor parameter's geometry from the launch's argument values: [rows, cols] with strides
    [row stride, 1], and for rank 3 a leading batch axis of BATCH (1 for an operand shared by every batch,
    whose batch stride is 0)."""
    base, rows, cols, row_stride, *batch = param.value.split(",")
    match = _BLOCK.match(param.ty)
    if match is None:
        raise BadInput(f"parameter {param.name} has type {param.ty!r}: not a tensor descriptor",
                       field=param.name)
    block = tuple(int(x) for x in match.group(1).split(","))
    shape, strides = [int(values[rows]), int(values[cols])], [int(values[row_stride]), 1]
    if batch:
        shared = int(values[batch[0]]) == 0
        shape.insert(0, 1 if shared else int(values["BATCH"]))
        strides.insert(0, SHARED_BATCH_STRIDE if shared else int(values[batch[0]]))
    return Geometry(base, tuple(shape), tuple(strides), block)


class HostDescriptor:
    """What Triton's CUDA launcher reads of a host descriptor argument (base tensor, shape, strides, padding):
    cheaper to make per launch than Triton's TensorDescriptor, which validates its fields each time (what it
    checks, 16-byte aligned bases and strides, is what a TMA kernel's is_supported already requires). Under a
    Triton release whose launcher it was not written for (runtime/triton_internals.py) it makes Triton's
    TensorDescriptor instead (`checked`)."""

    __slots__ = ("base", "block_shape", "padding", "shape", "strides")

    def __new__(cls, base: Any, g: Geometry) -> Any:
        if not triton_internals.known():
            return checked(base, g)
        return super().__new__(cls)

    def __init__(self, base: Any, g: Geometry) -> None:
        self.base, self.shape, self.strides = base, g.shape, g.strides
        self.block_shape, self.padding = g.block, "zero"


def checked(base: Any, g: Geometry) -> Any:
    """Triton's TensorDescriptor of `base` (validates alignment, strides and box): the interpreter's form."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(base, list(g.shape), list(g.strides), list(g.block))
