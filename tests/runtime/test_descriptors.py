"""Host-built tensor descriptors (runtime/descriptors.py): the geometry a descriptor parameter names, read
from a launch's argument values, and what each launch of a TMA kernel passes in its place (through the
launcher's compiled-kernel branch with fake kernels: tests/runtime/test_launch_cuda_path.py)."""
from __future__ import annotations

import pytest
import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from tiledispatch.errors import BadInput
from tiledispatch.kernels import tma_common
from tiledispatch.kernels.spec import Param
from tiledispatch.runtime import descriptors, triton_internals
from tiledispatch.testing import matrix, suites

from test_launch_cuda_path import fake_cuda  # noqa: F401  (fixture)

# subtile 1: the output goes through a descriptor too
TMA_RCR = suites.small_config("tma_persistent", "rcr", "fp16", block=(32, 64, 32), align=16, subtile=1)


def test_geometry_of_a_batched_operand_and_of_one_shared_by_every_batch():
    a = tma_common.descriptor_param("a", "fp16", "M", "K", 64, 32, "stride_ar", "stride_ab")
    assert a.ty == "tensordesc<fp16[1, 64, 32]>" and a.name == "a_desc"
    values = {"M": 40, "K": 48, "stride_ar": 56, "stride_ab": 40 * 56, "BATCH": 3}
    g = descriptors.geometry(a, values)
    assert (g.base, g.shape, g.strides, g.block) == ("a_ptr", (3, 40, 48), (2240, 56, 1), (1, 64, 32))
    shared = descriptors.geometry(a, {**values, "stride_ab": 0})   # a 2-D operand of a batched GEMM
    assert shared.shape == (1, 40, 48) and shared.strides == (descriptors.SHARED_BATCH_STRIDE, 56, 1)


def test_geometry_of_a_rank2_descriptor_and_of_the_output():
    b = tma_common.descriptor_param("b", "bf16", "N", "K", 128, 64, "stride_bc", "stride_bb", rank=2)
    g = descriptors.geometry(b, {"N": 100, "K": 64, "stride_bc": 72})
    assert b.ty == "tensordesc<bf16[128, 64]>"
    assert (g.shape, g.strides, g.block) == ((100, 64), (72, 1), (128, 64))
    out = tma_common.matrix_descriptor("out", "fp16", 32, 16)
    assert out.value == "out_ptr,M,N,stride_or,stride_ob"      # the output's strides are stride_o*


def test_a_parameter_that_is_not_a_descriptor_is_refused():
    with pytest.raises(BadInput, match="not a tensor descriptor"):
        descriptors.geometry(Param("a_ptr", "*fp16", "a_ptr,M,K,stride_ar"), {})


def _fields(desc) -> tuple[tuple[int, ...], ...]:
    """Shape, strides and box as tuples (TensorDescriptor holds lists, HostDescriptor tuples)."""
    return tuple(desc.shape), tuple(desc.strides), tuple(desc.block_shape)


def test_each_launch_describes_its_own_tensors(build_registry, fake_cuda):  # noqa: F811
    """A batched A and a B shared by every batch: every call passes descriptors of that call's A, B and out
    (new tensors each call), with the signature's shapes and strides."""
    _, launches, _ = fake_cuda
    # Triton's public TensorDescriptor where raw_launch does not know the installed Triton's launcher
    expected = descriptors.HostDescriptor if triton_internals.known() else TensorDescriptor
    kernel = build_registry([TMA_RCR]).get(TMA_RCR.name)
    spec = kernel.launchers()[0].spec
    position = {p.name: i for i, p in enumerate(spec.params)}
    for _ in range(2):
        a, b = matrix(40, 48, dtype="fp16", batch=3), matrix(48, 24, letter="c", dtype="fp16")
        out = kernel.run(a, b)
        args = launches[-1].args
        a_desc, b_desc, out_desc = (args[position[n]] for n in ("a_desc", "b_desc", "out_desc"))
        assert all(type(d) is expected for d in (a_desc, b_desc, out_desc))
        assert a_desc.base is a and _fields(a_desc)[:2] == ((3, 40, 48), (40 * 48, 48, 1))
        assert b_desc.base is b and _fields(b_desc)[:2] == ((1, 24, 48), (16, 48, 1))
        assert out_desc.base is out and out.shape == (3, 40, 24)
        assert _fields(out_desc) == ((3, 40, 24), (40 * 24, 24, 1), (1, 32, 64))
        assert a_desc.padding == "zero" and torch.equal(args[position["a_ptr"]], a)
