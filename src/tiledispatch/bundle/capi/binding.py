"""A ctypes binding of the exported library (tests, tools/capi_gpu_check.py): the C structs, and calls on
torch tensors that fill them from the tensors' shapes and strides.

`CapiLibrary(path)` loads a libtdcapi.so; its gemm / conv / select raise CapiError (with the status code and
td_last_error's message) on a non-zero status. Loading needs no GPU.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from tiledispatch.bundle.capi.problems import CONV_DTYPES, DIRECTIONS, GEMM_DTYPES, OP_CONV, OP_GEMM
from tiledispatch.errors import TileDispatchError

STATUS = ("TD_OK", "TD_ERR_NO_DRIVER", "TD_ERR_CUDA", "TD_ERR_NO_PLAN", "TD_ERR_STRIDES",
          "TD_ERR_BAD_ARGUMENT", "TD_ERR_ALIGNMENT", "TD_ERR_ARCH", "TD_ERR_RESOURCE")
_I64_3, _I64_5 = ctypes.c_int64 * 3, ctypes.c_int64 * 5


class GemmProblemC(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int32), ("batch", ctypes.c_int64), ("m", ctypes.c_int64),
                ("n", ctypes.c_int64), ("k", ctypes.c_int64), ("a_strides", _I64_3), ("b_strides", _I64_3),
                ("out_strides", _I64_3)]


class ConvProblemC(ctypes.Structure):
    _fields_ = [("direction", ctypes.c_int32), ("dtype", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("n", ctypes.c_int64), ("c", ctypes.c_int64), ("k", ctypes.c_int64),
                ("groups", ctypes.c_int64), ("spatial", _I64_3), ("filter", _I64_3), ("stride", _I64_3),
                ("pad_lo", _I64_3), ("pad_hi", _I64_3), ("dilation", _I64_3),
                ("x_strides", _I64_5), ("w_strides", _I64_5), ("y_strides", _I64_5)]


class CapiError(TileDispatchError):
    """A non-zero td_status: `status` is its name (e.g. TD_ERR_NO_PLAN), the message td_last_error's."""

    def __init__(self, status: int, message: str) -> None:
        self.code = status
        self.status = STATUS[status] if 0 <= status < len(STATUS) else f"status {status}"
        super().__init__(f"{self.status}: {message}", field=self.status)


def gemm_problem(dtype: str, m: int, n: int, k: int, a_strides: Any, b_strides: Any, out_strides: Any,
                 batch: int = 1) -> GemmProblemC:
    code = GEMM_DTYPES[dtype] if isinstance(dtype, str) else dtype
    return GemmProblemC(code, batch, m, n, k, _I64_3(*a_strides), _I64_3(*b_strides), _I64_3(*out_strides))


def conv_problem(problem: Any, x_strides: Any, w_strides: Any, y_strides: Any) -> ConvProblemC:
    """The C struct of a td.ConvProblem and the three tensors' strides (torch order)."""
    p = problem
    nd = p.ndim

    def three(values: Any) -> Any:
        return _I64_3(*values, *[0] * (3 - nd))

    def five(values: Any) -> Any:
        return _I64_5(*values, *[0] * (5 - len(values)))

    pads = [three([pad[side] for pad in p.padding]) for side in (0, 1)]
    return ConvProblemC(DIRECTIONS[p.direction], CONV_DTYPES[p.dtype], nd, p.n, p.c, p.k, p.groups,
                        three(p.spatial), three(p.filter), three(p.stride), *pads, three(p.dilation),
                        five(x_strides), five(w_strides), five(y_strides))


def strides3(t: Any) -> tuple[int, int, int]:
    """(batch, row, column) strides of a 2-D or 3-D tensor (batch stride 0 for 2-D)."""
    return (t.stride(0), t.stride(1), t.stride(2)) if t.dim() == 3 else (0, t.stride(0), t.stride(1))


class CapiLibrary:
    """The exported library loaded with ctypes."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        lib = self.lib = ctypes.CDLL(str(self.path))
        ptr = ctypes.c_void_p
        lib.td_gemm.argtypes = [ctypes.POINTER(GemmProblemC), ptr, ptr, ptr, ctypes.c_float, ptr]
        lib.td_conv.argtypes = [ctypes.POINTER(ConvProblemC), ptr, ptr, ptr, ptr]
        lib.td_select.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)]
        for name in ("td_last_error", "td_status_string", "td_arch"):
            getattr(lib, name).restype = ctypes.c_char_p
        lib.td_status_string.argtypes = [ctypes.c_int]
        for name in ("td_gemm", "td_conv", "td_select", "td_init", "td_plan_count"):
            getattr(lib, name).restype = ctypes.c_int
        lib.td_shutdown.restype = None

    def check(self, status: int) -> None:
        if status != 0:
            raise CapiError(status, self.lib.td_last_error().decode())

    def last_error(self) -> str:
        return self.lib.td_last_error().decode()

    def init(self) -> None:
        self.check(self.lib.td_init())

    @property
    def arch(self) -> str:
        return self.lib.td_arch().decode()

    @property
    def plan_count(self) -> int:
        return int(self.lib.td_plan_count())

    def select(self, problem: GemmProblemC | ConvProblemC) -> str:
        name = ctypes.c_char_p()
        op = OP_GEMM if isinstance(problem, GemmProblemC) else OP_CONV
        self.check(self.lib.td_select(op, ctypes.byref(problem), ctypes.byref(name)))
        return (name.value or b"").decode()

    def gemm_raw(self, problem: GemmProblemC, a: int, b: int, out: int, alpha: float = 1.0,
                 stream: int = 0) -> int:
        """td_gemm's status (no raise): the hot-path form timings use."""
        return int(self.lib.td_gemm(ctypes.byref(problem), a, b, out, alpha, stream))

    def gemm(self, a: Any, b: Any, out: Any, dtype: str | None = None, alpha: float = 1.0,
             stream: int = 0) -> Any:
        """out = alpha * a @ b on torch CUDA tensors (2-D, or 3-D batched), through td_gemm."""
        from tiledispatch.dtypes import from_torch

        batch = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
        problem = gemm_problem(dtype or from_torch(a.dtype, "a"), a.shape[-2], b.shape[-1], a.shape[-1],
                               strides3(a), strides3(b), strides3(out), batch)
        self.check(self.gemm_raw(problem, a.data_ptr(), b.data_ptr(), out.data_ptr(), alpha, stream))
        return out

    def conv(self, problem: Any, x: Any, w: Any, y: Any, stream: int = 0) -> None:
        """The direction of td.ConvProblem `problem` on torch tensors by forward role (x input / dx,
        w weight / dw, y output / dy), through td_conv."""
        struct = conv_problem(problem, x.stride(), w.stride(), y.stride())
        self.check(self.lib.td_conv(ctypes.byref(struct), x.data_ptr(), w.data_ptr(), y.data_ptr(), stream))

    def shutdown(self) -> None:
        self.lib.td_shutdown()
