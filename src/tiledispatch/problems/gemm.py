"""GemmProblem: what a GEMM call computes, independent of any kernel."""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch.dtypes import (ACC_DTYPES, INPUT_DTYPES, OUTPUT_DTYPES, default_acc_dtype,
                                 default_out_dtype, get_dtype, legal_out_dtypes)
from tiledispatch.errors import BadInput, BadInputType, bad_choice
from tiledispatch.problems.bounds import as_int, check_elements, mapping, size, unknown_keys

LAYOUTS = ("rcr", "rrr", "crr", "ccr")
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh")
BIAS_MODES = ("none", "row", "col")
MAX_D = 2
PROBLEM_ALIGNS = (1, 8, 16)


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """Fused epilogue: out = act(alpha*A@B + beta*C + bias + D0 + D1), cast to the output dtype.

    bias="row" adds bias[m] (one value per output row), "col" adds bias[n] (one per column).
    with_c says whether beta*C is read (beta itself is a run-time scalar).
    """

    activation: str = "none"
    bias: str = "none"
    num_d: int = 0
    with_c: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            raise bad_choice(BadInput, "epilogue.activation", self.activation, ACTIVATIONS)
        if not isinstance(self.bias, str) or self.bias not in BIAS_MODES:
            raise bad_choice(BadInput, "epilogue.bias", self.bias, BIAS_MODES)
        num_d = as_int(self.num_d, "epilogue.num_d")
        if not 0 <= num_d <= MAX_D:
            raise bad_choice(BadInput, "epilogue.num_d", self.num_d, range(MAX_D + 1))
        object.__setattr__(self, "num_d", num_d)
        if not isinstance(self.with_c, bool):
            raise BadInputType(f"epilogue.with_c={self.with_c!r} must be True or False",
                               field="epilogue.with_c")

    @property
    def is_identity(self) -> bool:
        return self == Epilogue()


def contiguous_dims(layout: str) -> tuple[str, ...]:
    """The sizes that run along a unit stride in some operand: K for a row-major A (M for a column-major one),
    N for a row-major B (K for a column-major one), N for the row-major output. Aligned kernels vectorize
    along these, so only these (not, e.g., M of a row-major A) must be multiples of 16."""
    dims = ("K" if layout[0] == "r" else "M", "N" if layout[1] == "r" else "K", "N")
    return tuple(sorted(set(dims)))


def contiguous_sizes(layout: str, m: int, n: int, k: int) -> tuple[int, ...]:
    return tuple({"M": m, "N": n, "K": k}[d] for d in contiguous_dims(layout))


@dataclasses.dataclass(frozen=True)
class GemmProblem:
    """out[b] = epilogue(A[b] @ B[b]) with A: M x K, B: K x N, out: M x N.

    layout letters give the major order of A, B and out: r = row-major, c = column-major.
    align=16 guarantees 16-byte aligned base pointers, leading dimensions that are multiples of 16 elements,
    and the same of every size that runs along a unit stride (`contiguous_dims`: e.g. N and K for rcr; M may
    be anything); align=8 guarantees the same with multiples of 8. Aligned (a16) kernels need 16-byte rows of
    the input type: align 8 for 2-byte types (and fp32), 16 for 1-byte ones (configs/validity.py
    gemm_problem_mismatch); align=1 guarantees nothing. By default it is
    derived from the sizes as for freshly allocated contiguous tensors.
    """

    m: int
    n: int
    k: int
    batch: int = 1
    dtype: str = "bf16"
    out_dtype: str | None = None
    acc_dtype: str | None = None
    layout: str = "rcr"
    epilogue: Epilogue = Epilogue()
    align: int | None = None

    def __post_init__(self) -> None:
        for field in ("m", "n", "k", "batch"):
            object.__setattr__(self, field, size(getattr(self, field), field))
        self._check_elements()
        if self.dtype not in INPUT_DTYPES:
            raise bad_choice(BadInput, "dtype", self.dtype, INPUT_DTYPES)
        if self.out_dtype is None:
            object.__setattr__(self, "out_dtype", default_out_dtype(self.dtype))
        if self.out_dtype not in OUTPUT_DTYPES:
            raise bad_choice(BadInput, "out_dtype", self.out_dtype, OUTPUT_DTYPES)
        if self.out_dtype not in legal_out_dtypes(self.dtype):
            raise bad_choice(BadInput, "out_dtype", self.out_dtype, legal_out_dtypes(self.dtype))
        if self.acc_dtype is None:
            object.__setattr__(self, "acc_dtype", default_acc_dtype(self.dtype))
        if self.acc_dtype not in ACC_DTYPES:
            raise bad_choice(BadInput, "acc_dtype", self.acc_dtype, ACC_DTYPES)
        if self.acc_dtype != default_acc_dtype(self.dtype):
            raise bad_choice(BadInput, "acc_dtype", self.acc_dtype, (default_acc_dtype(self.dtype),))
        if self.layout not in LAYOUTS:
            raise bad_choice(BadInput, "layout", self.layout, LAYOUTS)
        if not isinstance(self.epilogue, Epilogue):
            raise BadInput(f"epilogue must be an Epilogue, got {type(self.epilogue).__name__}",
                           field="epilogue")
        if self.align is None:
            object.__setattr__(self, "align", self.natural_align())
        object.__setattr__(self, "align", as_int(self.align, "align"))
        if self.align not in PROBLEM_ALIGNS:
            raise bad_choice(BadInput, "align", self.align, PROBLEM_ALIGNS)

    def _check_elements(self) -> None:
        """A, B and the output within MAX_ELEMENTS (problems/bounds.py)."""
        b, m, n, k = self.batch, self.m, self.n, self.k
        check_elements("a", {"batch": b, "m": m, "k": k})
        check_elements("b", {"batch": b, "k": k, "n": n})
        check_elements("the output", {"batch": b, "m": m, "n": n})

    def leading_dims(self) -> tuple[int, int, int]:
        """Leading dimensions (elements) of contiguous A, B and out in this layout."""
        a_row, b_row, o_row = (letter == "r" for letter in self.layout)
        return (self.k if a_row else self.m, self.n if b_row else self.k, self.n if o_row else self.m)

    def natural_align(self) -> int:
        """16 when the contiguous sizes and every leading dimension are multiples of 16 (contiguous tensors
        assumed); see `contiguous_sizes`."""
        dims = (*contiguous_sizes(self.layout, self.m, self.n, self.k), *self.leading_dims())
        return max(a for a in PROBLEM_ALIGNS if all(x % a == 0 for x in dims))

    def padded(self, align: int = 16) -> GemmProblem:
        """The same computation on zero-padded operands: every size that runs along a unit stride
        (`contiguous_dims`, which include every leading dimension) rounded up to a multiple of `align`, the
        others kept (exact: padded K contributes zeros, padded output rows and columns are dropped). A size
        left alone needs no copy of the operands it spans: M of a row-major A and output is never padded."""
        if align not in PROBLEM_ALIGNS:
            raise bad_choice(BadInput, "align", align, PROBLEM_ALIGNS)
        dims = contiguous_dims(self.layout)
        up = lambda x, d: -(-x // align) * align if d in dims else x  # noqa: E731
        return dataclasses.replace(self, m=up(self.m, "M"), n=up(self.n, "N"), k=up(self.k, "K"), align=align)

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def min_bytes(self) -> int:
        """Bytes that must move at least: A, B and out once (plus C, bias and D when read)."""
        in_b = get_dtype(self.dtype).bytes
        out_b = get_dtype(self.out_dtype).bytes
        mn = self.batch * self.m * self.n
        extra = mn * out_b * (self.epilogue.num_d + int(self.epilogue.with_c))
        return self.batch * (self.m * self.k + self.k * self.n) * in_b + mn * out_b + extra

    def signature(self) -> str:
        """A stable key for tuning databases."""
        e = self.epilogue
        return (f"gemm:{self.m}x{self.n}x{self.k}:b{self.batch}:"
                f"{self.dtype}-{self.out_dtype}-{self.acc_dtype}:"
                f"{self.layout}:a{self.align}:{e.activation}-{e.bias}-d{e.num_d}-c{int(e.with_c)}")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GemmProblem:
        """The problem of a to_dict() result (an unknown key raises BadInput naming it)."""
        data = dict(mapping(data, "problem"))
        unknown_keys(data, {f.name for f in dataclasses.fields(cls)}, "GemmProblem")
        epi = mapping(data.pop("epilogue", None) or {}, "epilogue")
        unknown_keys(epi, {f.name for f in dataclasses.fields(Epilogue)}, "Epilogue", "epilogue.")
        return cls(**data, epilogue=Epilogue(**epi))

    def describe(self) -> str:
        batch = f" batch={self.batch}" if self.batch > 1 else ""
        epi = "" if self.epilogue.is_identity else f" epilogue={self.signature().rsplit(':', 1)[1]}"
        return f"GEMM {self.m}x{self.n}x{self.k}{batch} {self.dtype}->{self.out_dtype} {self.layout}{epi}"
