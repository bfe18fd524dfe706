"""ConvConfig: one convolution kernel instance. Every field changes the generated code; `name` carries all."""
from __future__ import annotations

import dataclasses
from typing import Any

from tiledispatch.configs.fields import check_field_types, config_from_dict, fill_dtype_defaults

# igemm: implicit GEMM on tensor cores (several groups per program when channels per group are few);
# direct: CUDA-core FMAs vectorized over channels (depthwise, very few channels per group);
# gemm: 1x1 convolutions (stride 1, no padding, one group) as a GEMM over the pixels (every direction), and
#       any convolution of one group through a column workspace and a GEMM (kloop "im2col");
# tma: implicit GEMM of stride-1 fwd / bwd_data whose operand tiles are tensor-copy boxes (zero-filled
#      padding).
CONV_FAMILIES = ("igemm", "direct", "gemm", "tma")
# How the implicit GEMM walks its reduction: "tap" loops over filter taps, then channels of one tap in
# block_k chunks; "flat" walks (tap, channel) pairs flattened, so one block_k chunk spans several taps
# (channels per group below block_k); "diag" (C/G == K/G == block_k, many small groups) does one dot per tap
# against the block-diagonal weight of the block_n / block_k groups of a channel tile ("diagrow", bwd_weight
# only: the same over the taps of a filter row at once, kernels/conv_wgrad.py; "taprow", bwd_weight only:
# "tap" over a filter row at once). The direct family walks
# taps ("tap": one activation tile per tap) or, depthwise, "roll"s down the rows (kernels/conv_roll.py: each
# source row loaded once per filter column into three rolling accumulators) or, depthwise 2-D (fwd; bwd_data
# and bwd_weight at stride 1), slides a "halo" window along W in registers (kernels/conv_halo.py: each input
# column loaded once per filter row and added into every output column it reaches, or, bwd_weight, paired
# with the dy columns; "halofh", bwd_weight only: the filter rows in the tile, kernels/conv_halo_fh.py, each
# dy row loaded once). Family gemm runs 1x1 convolutions
# ("tap") or any filter through an explicit column workspace, "im2col" (kernels/conv_im2col.py: the copy then
# the GEMM for fwd / bwd_weight, the GEMM then a col2im gather for bwd_data).
KLOOPS = ("tap", "flat", "diag", "diagrow", "taprow", "roll", "halo", "halofh", "im2col")


@dataclasses.dataclass(frozen=True)
class ConvConfig:
    family: str = "igemm"
    direction: str = "fwd"
    ndim: int = 2
    dtype: str = "bf16"
    out_dtype: str = ""
    acc_dtype: str = ""
    block_m: int = 128       # rows of the implicit GEMM (pixels; bwd_weight: output channels per group)
    block_n: int = 64        # columns (output channels per group; bwd_weight: taps x input channels)
    block_k: int = 32        # reduction chunk (tma bwd_weight: output pixels per box; direct: taps unrolled
                             # or accumulated per program, kernels/conv_direct)
    groups_per_program: int = 1
    num_warps: int = 4
    num_stages: int = 2      # igemm / gemm: pipeline stages of the dot operands; direct: stages of the
                             # pipelined loads of the main loop (1: a plain loop; conv_common.loop_range)
    split_k: int = 0         # igemm bwd_weight: reduction splits over pixels (0: chosen per problem at
                             # launch); igemm and tma fwd / bwd_data: >= 2 splits the reduction into at most
                             # split_k ranges;
                             # gemm im2col: the GEMM's fixed split count; gemm 1x1: the GEMM (0
                             # tma_persistent, 1 tiled, >= 2 split-K with that split count;
                             # kernels/conv_gemm.gemm_config)
    kloop: str = "tap"
    align: int = 8
    activation: str = "none"
    bias: bool = False

    op = "conv"

    def __post_init__(self) -> None:
        fill_dtype_defaults(self, _IN)
        check_field_types(self)

    @property
    def name(self) -> str:
        return (f"conv-{self.family}-{self.direction}-{self.ndim}d-{self.dtype}-{self.out_dtype}-"
                f"{self.acc_dtype}-{self.block_m}x{self.block_n}x{self.block_k}-g{self.groups_per_program}-w{self.num_warps}-"
                f"s{self.num_stages}-k{self.split_k}-{self.kloop}-a{self.align}-{self.activation}-"
                f"b{int(self.bias)}")

    def with_epilogue(self, activation: str, bias: bool) -> ConvConfig:
        return dataclasses.replace(self, activation=activation, bias=bias)

    def to_dict(self) -> dict[str, Any]:
        return {"op": "conv", **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConvConfig:
        return config_from_dict(cls, data)


_IN = ("fp16", "bf16", "fp32")
