"""Data type names used in problems, configs and names, and their torch / Triton counterparts."""
from __future__ import annotations

import dataclasses

from tiledispatch.errors import BadInput, bad_choice


@dataclasses.dataclass(frozen=True)
class DType:
    name: str
    torch_name: str     # attribute of the torch module holding the storage dtype
    triton: str         # Triton signature type of a pointer element
    bytes: int
    is_float: bool


# "tf32" stores fp32 and multiplies with tf32 tensor-core precision; it is an explicit opt-in.
DTYPES: dict[str, DType] = {
    "fp16": DType("fp16", "float16", "fp16", 2, True),
    "bf16": DType("bf16", "bfloat16", "bf16", 2, True),
    "fp32": DType("fp32", "float32", "fp32", 4, True),
    "tf32": DType("tf32", "float32", "fp32", 4, True),
    "int8": DType("int8", "int8", "i8", 1, False),
    "fp8e4m3": DType("fp8e4m3", "float8_e4m3fn", "fp8e4nv", 1, True),
    "int32": DType("int32", "int32", "i32", 4, False),
}
INPUT_DTYPES = ("fp16", "bf16", "fp32", "tf32", "int8", "fp8e4m3")
# fp8 operands carry one fp32 scale each (out = scale_a * scale_b * A@B, then the epilogue)
SCALED_DTYPES = ("fp8e4m3",)
OUTPUT_DTYPES = ("fp16", "bf16", "fp32", "int32")
ACC_DTYPES = ("fp32", "int32")


def get_dtype(name: str, field: str = "dtype") -> DType:
    if name not in DTYPES:
        raise bad_choice(BadInput, field, name, DTYPES)
    return DTYPES[name]


def default_out_dtype(in_dtype: str) -> str:
    return {"fp16": "fp16", "bf16": "bf16", "fp32": "fp32", "tf32": "fp32", "int8": "int32",
            "fp8e4m3": "bf16"}[in_dtype]


def legal_out_dtypes(in_dtype: str) -> tuple[str, ...]:
    """The output dtypes a GEMM of this input dtype may write: int32 for int8, a float type otherwise."""
    return ("int32",) if in_dtype == "int8" else ("fp16", "bf16", "fp32")


def default_acc_dtype(in_dtype: str) -> str:
    return "int32" if in_dtype == "int8" else "fp32"


def torch_dtype(name: str):  # -> torch.dtype (torch imported lazily)
    import torch

    return getattr(torch, get_dtype(name).torch_name)


def from_torch(dtype, field: str = "dtype", allow_tf32: bool = False) -> str:
    import torch

    table = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.int8: "int8",
             torch.int32: "int32", torch.float8_e4m3fn: "fp8e4m3"}
    if dtype not in table:
        raise BadInput(f"{field}={dtype} is not supported; legal torch dtypes: float16, bfloat16, float32, "
                       "int8, float8_e4m3fn", field=field)
    name = table[dtype]
    return "tf32" if (name == "fp32" and allow_tf32) else name
