"""GemmConfig: one GEMM kernel instance. Every field changes the generated code; `name` carries them all."""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch.configs.fields import check_field_types, config_from_dict, fill_dtype_defaults
from tiledispatch.problems.gemm import Epilogue

GEMM_FAMILIES = ("tiled", "splitk", "tma_persistent", "tma_ws", "streamk")
# Families that read A and B through Hopper tensor descriptors (TMA) in a persistent grid.
TMA_FAMILIES = ("tma_persistent", "tma_ws", "streamk")


@dataclasses.dataclass(frozen=True)
class GemmConfig:
    family: str = "tiled"
    layout: str = "rcr"
    dtype: str = "fp16"
    out_dtype: str = ""
    acc_dtype: str = ""
    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    num_warps: int = 4
    num_stages: int = 3
    group_m: int = 8
    split_k: int = 1
    subtile: int = 1          # epilogue subtiles along N (tma_persistent): frees shared memory for stages;
                              # 0: stores from registers through pointers (no staging buffer)
    align: int = 16
    activation: str = "none"
    bias: str = "none"
    num_d: int = 0
    with_c: bool = False

    op = "gemm"

    def __post_init__(self) -> None:
        fill_dtype_defaults(self, _IN)
        check_field_types(self)

    @property
    def name(self) -> str:
        return (f"gemm-{self.family}-{self.layout}-{self.dtype}-{self.out_dtype}-{self.acc_dtype}-"
                f"{self.block_m}x{self.block_n}x{self.block_k}-w{self.num_warps}-s{self.num_stages}-"
                f"g{self.group_m}-k{self.split_k}-e{self.subtile}-a{self.align}-{self.activation}-b{self.bias}-"
                f"d{self.num_d}-c{int(self.with_c)}")

    @property
    def epilogue(self) -> Epilogue:
        return Epilogue(self.activation, self.bias, self.num_d, self.with_c)

    def with_epilogue(self, epilogue: Epilogue) -> GemmConfig:
        return dataclasses.replace(self, activation=epilogue.activation, bias=epilogue.bias,
                                   num_d=epilogue.num_d, with_c=epilogue.with_c)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GemmConfig:
        return config_from_dict(cls, data)


_IN = ("fp16", "bf16", "fp32", "tf32", "int8", "fp8e4m3")
