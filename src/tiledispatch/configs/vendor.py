"""VendorConfig: the vendor library (cuBLAS for GEMMs, cuDNN for convolutions, through torch) as a plan.

One config per op and direction; it covers every dtype, layout, shape and epilogue the vendor path takes
(registry/vendor.py says which). Its name (`vendor-cublas-gemm`, `vendor-cudnn-conv-fwd`, ...) is what
selections, tuning DBs and registry JSON hold, as for our kernels; nothing is compiled for it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch.configs.fields import config_from_dict
from tiledispatch.errors import InvalidConfig, InvalidConfigType, bad_choice

VENDOR_OPS = ("gemm", "conv")
# the directions of each op (GEMM has none)
VENDOR_DIRECTIONS = {"gemm": ("none",), "conv": ("fwd", "bwd_data", "bwd_weight")}
LIBRARIES = {"gemm": "cublas", "conv": "cudnn"}
VENDOR_FAMILY = "vendor"


@dataclasses.dataclass(frozen=True)
class VendorConfig:
    op: str = "gemm"
    direction: str = "none"

    family = VENDOR_FAMILY

    def __post_init__(self) -> None:
        for field in ("op", "direction"):
            value = getattr(self, field)
            if not isinstance(value, str):
                raise InvalidConfigType(f"{field}={value!r} ({type(value).__name__}) must be a string",
                                        field=field)
        if self.op not in VENDOR_OPS:
            raise bad_choice(InvalidConfig, "op", self.op, VENDOR_OPS)
        legal = VENDOR_DIRECTIONS[self.op]
        if self.direction not in legal:
            raise InvalidConfig(f"direction={self.direction!r} is not valid for op {self.op!r}; legal "
                                f"values: {', '.join(repr(d) for d in legal)}", field="direction")

    @property
    def library(self) -> str:
        return LIBRARIES[self.op]

    @property
    def name(self) -> str:
        tail = "" if self.op == "gemm" else f"-{self.direction}"
        return f"vendor-{self.library}-{self.op}{tail}"

    def to_dict(self) -> dict[str, Any]:
        return {"family": VENDOR_FAMILY, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> VendorConfig:
        data = {k: v for k, v in data.items() if k not in ("family", "library")}
        return config_from_dict(cls, data)


def vendor_configs() -> list[VendorConfig]:
    """Every vendor plan: the cuBLAS GEMM and cuDNN convolution of each direction."""
    return [VendorConfig(op, direction) for op in VENDOR_OPS for direction in VENDOR_DIRECTIONS[op]]
