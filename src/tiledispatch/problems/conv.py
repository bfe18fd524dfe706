"""ConvProblem: what a grouped convolution call computes (forward, backward-data or backward-weight),
1D/2D/3D, independent of any kernel. Tensors are channels-last: input N(D)(H)W·G·C/G, weight
G·K/G·(Z)(Y)X·C/G, output N(D)(H)W·G·K/G (torch `channels_last` / `channels_last_3d`)."""
from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Iterable
from typing import Any

from tiledispatch.dtypes import default_acc_dtype, default_out_dtype, get_dtype
from tiledispatch.errors import BadInput, BadInputType, bad_choice
from tiledispatch.problems.bounds import as_int, check_elements, mapping, size, unknown_keys
from tiledispatch.problems.gemm import ACTIVATIONS

DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
CONV_DTYPES = ("fp16", "bf16", "fp32")
NDIMS = (1, 2, 3)
CONV_ALIGNS = (1, 2, 4, 8)


def channel_align(*channels: int) -> int:
    """The largest of CONV_ALIGNS dividing every channel total: with channels-last tensors of their own
    allocation, every non-unit activation stride is then a multiple of it too."""
    return max(a for a in CONV_ALIGNS if all(c % a == 0 for c in channels))


def _values(field: str, value: Any, count: int, what: str) -> tuple[Any, ...]:
    """One value for all `count` entries (an int), or exactly `count` of them (any non-string iterable)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (value,) * count
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise BadInputType(f"{field}={value!r} must be an int or {what}", field=field)
    values = tuple(value)
    if len(values) != count:
        raise BadInput(f"{field}={value!r} must be an int or {what}", field=field)
    return values


def _per_dim(field: str, value: Any, ndim: int, minimum: int) -> tuple[int, ...]:
    """One int for every dim, or exactly one per dim; each in [minimum, MAX_SIZE]."""
    return tuple(size(v, field, minimum) for v in _values(field, value, ndim, f"{ndim} ints (one per dim)"))


def _padding(value: Any, ndim: int) -> tuple[tuple[int, int], ...]:
    """An int, one int per dim (symmetric), or one (left, right) pair per dim; never negative."""
    pairs = []
    for item in _values("padding", value, ndim, f"{ndim} ints or {ndim} (left, right) pairs (one per dim)"):
        left, right = _values("padding", item, 2, "a (left, right) pair of ints")
        pairs.append((size(left, "padding", 0), size(right, "padding", 0)))
    return tuple(pairs)


def _sizes(field: str, value: Any) -> tuple[int, ...]:
    """A tuple of sizes (each an int in [1, MAX_SIZE]) from any non-string iterable."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise BadInputType(f"{field}={value!r} must be a tuple of 1, 2 or 3 ints", field=field)
    return tuple(size(v, field) for v in value)


@dataclasses.dataclass(frozen=True)
class ConvProblem:
    """A grouped convolution. `c` and `k` are total input and output channels (as torch's in/out channels),
    `groups` divides both. `spatial` is the input size and `filter` the filter size, one entry per spatial dim
    (their length is the ndim). stride, dilation: an int or one per dim; padding: an int, one per dim, or a
    (left, right) pair per dim. Normalized to tuples on construction.

    bias (one value per output channel) and activation are the fused forward epilogue (fwd only).
    align=8 guarantees 16-byte aligned base pointers of the activation tensors (input and output), channel
    totals C and K that are multiples of 8, and every non-unit stride of those tensors a multiple of 8
    elements: what channel-vectorized kernels need. align=1 guarantees nothing. By default it is derived from
    C and K as for freshly allocated channels-last tensors."""

    direction: str
    n: int
    c: int
    k: int
    groups: int
    spatial: tuple[int, ...]
    filter: tuple[int, ...]
    stride: Any = 1
    padding: Any = 0
    dilation: Any = 1
    dtype: str = "bf16"
    out_dtype: str | None = None
    acc_dtype: str | None = None
    bias: bool = False
    activation: str = "none"
    align: int | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise bad_choice(BadInput, "direction", self.direction, DIRECTIONS)
        for field in ("n", "c", "k", "groups"):
            object.__setattr__(self, field, size(getattr(self, field), field))
        spatial = _sizes("spatial", self.spatial)
        filt = _sizes("filter", self.filter)
        if len(spatial) not in NDIMS:
            raise BadInput(f"spatial={self.spatial!r} must have 1, 2 or 3 sizes (the ndim)", field="spatial")
        if len(filt) != len(spatial):
            raise BadInput(f"filter={self.filter!r} must have {len(spatial)} sizes, like spatial",
                           field="filter")
        for field in ("c", "k"):
            if getattr(self, field) % self.groups:
                raise BadInput(f"groups={self.groups} does not divide {field}={getattr(self, field)}",
                               field="groups")
        if self.dtype not in CONV_DTYPES:
            raise bad_choice(BadInput, "dtype", self.dtype, CONV_DTYPES)
        ndim = len(spatial)
        object.__setattr__(self, "spatial", spatial)
        object.__setattr__(self, "filter", filt)
        object.__setattr__(self, "stride", _per_dim("stride", self.stride, ndim, 1))
        object.__setattr__(self, "dilation", _per_dim("dilation", self.dilation, ndim, 1))
        object.__setattr__(self, "padding", _padding(self.padding, ndim))
        object.__setattr__(self, "out_dtype", self.out_dtype or default_out_dtype(self.dtype))
        object.__setattr__(self, "acc_dtype", self.acc_dtype or default_acc_dtype(self.dtype))
        if self.out_dtype not in CONV_DTYPES:
            raise bad_choice(BadInput, "out_dtype", self.out_dtype, CONV_DTYPES)
        self._check_epilogue()
        if self.align is None:
            object.__setattr__(self, "align", channel_align(self.c, self.k))
        object.__setattr__(self, "align", as_int(self.align, "align"))
        if self.align not in CONV_ALIGNS:
            raise bad_choice(BadInput, "align", self.align, CONV_ALIGNS)
        if any(o <= 0 for o in self.output):
            raise BadInput(f"output size {self.output} is not positive: spatial {self.spatial}, filter "
                           f"{self.filter}, stride {self.stride}, padding {self.padding}, dilation "
                           f"{self.dilation}",
                           field="spatial")
        self._check_elements()

    def _check_elements(self) -> None:
        """Input, weight and output within MAX_ELEMENTS (problems/bounds.py)."""
        check_elements("the input", {"n": self.n, "c": self.c, "spatial": math.prod(self.spatial)})
        check_elements("the weight", {"k": self.k, "c": self.c_per_group, "filter": math.prod(self.filter)})
        check_elements("the output", {"n": self.n, "k": self.k, "spatial": math.prod(self.output)})

    def _check_epilogue(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise bad_choice(BadInput, "activation", self.activation, ACTIVATIONS)
        if not isinstance(self.bias, bool):
            raise BadInput(f"bias={self.bias!r} must be True or False", field="bias")
        if self.direction != "fwd" and (self.bias or self.activation != "none"):
            field = "bias" if self.bias else "activation"
            raise BadInput(f"{field}: the fused epilogue (bias, activation) exists for direction 'fwd' only, "
                           f"not {self.direction!r}", field=field)

    @property
    def ndim(self) -> int:
        return len(self.spatial)

    @property
    def output(self) -> tuple[int, ...]:
        """Output spatial size of the forward convolution (the dy size of the backward directions)."""
        return tuple((size + left + right - d * (f - 1) - 1) // s + 1
                     for size, f, s, (left, right), d in zip(self.spatial, self.filter, self.stride,
                                                             self.padding, self.dilation))

    @property
    def c_per_group(self) -> int:
        return self.c // self.groups

    @property
    def k_per_group(self) -> int:
        return self.k // self.groups

    @property
    def is_depthwise(self) -> bool:
        return self.groups == self.c and self.c_per_group == 1

    @property
    def flops(self) -> int:
        """2 * N * K * out-pixels * (C/G) * filter taps: the same for every direction."""
        return 2 * self.n * self.k * math.prod(self.output) * self.c_per_group * math.prod(self.filter)

    def tensor_elements(self) -> dict[str, int]:
        return {"input": self.n * self.c * math.prod(self.spatial),
                "weight": self.k * self.c_per_group * math.prod(self.filter),
                "output": self.n * self.k * math.prod(self.output)}

    @property
    def min_bytes(self) -> int:
        """Input, weight and output once each (read two, write the third), in the storage dtypes."""
        sizes = self.tensor_elements()
        in_b, out_b = get_dtype(self.dtype).bytes, get_dtype(self.out_dtype).bytes
        written = {"fwd": "output", "bwd_data": "input", "bwd_weight": "weight"}[self.direction]
        return sum(n * (out_b if name == written else in_b) for name, n in sizes.items())

    def implicit_gemm(self) -> tuple[int, int, int]:
        """(M, N, K) of the GEMM one group computes: fwd out-pixels x K/G x (C/G * taps); bwd_data
        in-pixels x C/G x (K/G * taps); bwd_weight K/G x (C/G * taps) x out-pixels. For bwd_data with a
        stride above 1 this is the dense (zero-inserted) view: only about taps/prod(stride) of the taps
        meet an output pixel, so it overstates `flops` by up to prod(stride)."""
        taps = math.prod(self.filter)
        out_px, in_px = self.n * math.prod(self.output), self.n * math.prod(self.spatial)
        if self.direction == "fwd":
            return out_px, self.k_per_group, self.c_per_group * taps
        if self.direction == "bwd_data":
            return in_px, self.c_per_group, self.k_per_group * taps
        return self.k_per_group, self.c_per_group * taps, out_px

    def signature(self) -> str:
        """A stable key for tuning databases."""
        join = lambda values: "x".join(map(str, values))  # noqa: E731
        pads = "_".join(f"{left}-{right}" for left, right in self.padding)
        return (f"conv:{self.direction}:{self.ndim}d:n{self.n}c{self.c}k{self.k}g{self.groups}:"
                f"{join(self.spatial)}:f{join(self.filter)}:s{join(self.stride)}:p{pads}:d{join(self.dilation)}:"
                f"{self.dtype}-{self.out_dtype}-{self.acc_dtype}:a{self.align}:{self.activation}-b{int(self.bias)}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConvProblem:
        """The problem of a to_dict() result (lists as JSON gives them back); an unknown key raises
        BadInput."""
        unknown_keys(mapping(data, "problem"), {f.name for f in dataclasses.fields(cls)}, "ConvProblem")
        return cls(**data)

    def describe(self) -> str:
        dims = "x".join(map(str, self.spatial))
        return (f"conv {self.direction} {self.ndim}d N{self.n} C{self.c} K{self.k} G{self.groups} {dims} "
                f"filter {'x'.join(map(str, self.filter))} stride {self.stride} padding {self.padding} "
                f"dilation {self.dilation} {self.dtype}")
