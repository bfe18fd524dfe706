"""name <-> config. `parse_name(cfg.name) == cfg` for every config any preset or space can produce."""
from __future__ import annotations

import re

from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.configs.vendor import VendorConfig
from tiledispatch.errors import InvalidConfig

_GEMM_PATTERN = re.compile(
    r"gemm-(?P<family>[a-z_]+)-(?P<layout>[rc]{3})-(?P<dtype>[a-z0-9]+)-(?P<out_dtype>[a-z0-9]+)-"
    r"(?P<acc_dtype>[a-z0-9]+)-(?P<block_m>\d+)x(?P<block_n>\d+)x(?P<block_k>\d+)-w(?P<num_warps>\d+)-"
    r"s(?P<num_stages>\d+)-g(?P<group_m>\d+)-k(?P<split_k>\d+)-e(?P<subtile>\d+)-a(?P<align>\d+)-(?P<activation>[a-z_]+)-"
    r"b(?P<bias>[a-z]+)-d(?P<num_d>\d+)-c(?P<with_c>[01])"
)
_GEMM_TEMPLATE = ("gemm-<family>-<layout>-<dtype>-<out_dtype>-<acc_dtype>-<BMxBNxBK>-w<warps>-s<stages>-"
                  "g<group_m>-k<split_k>-e<subtile>-a<align>-<activation>-b<bias>-d<num_d>-c<0|1>")
_INT_FIELDS = ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m", "split_k", "subtile",
               "align", "num_d")


def parse_name(name: str) -> GemmConfig | ConvConfig | VendorConfig:
    """Parse a canonical instance name back into its config (raises InvalidConfig naming the problem)."""
    if not isinstance(name, str):
        raise InvalidConfig(f"kernel name must be a string, got {type(name).__name__}", field="name")
    if name.startswith("conv-"):
        return _parse_conv_name(name)
    if name.startswith("vendor-"):
        return _parse_vendor_name(name)
    if not name.startswith("gemm-"):
        raise InvalidConfig(f"name {name!r}: unknown op prefix; legal prefixes: 'gemm', 'conv', 'vendor'",
                            field="name")
    return _parse(name, GemmConfig, _GEMM_PATTERN, _GEMM_TEMPLATE, _INT_FIELDS, "with_c")


def _parse(name: str, cls: type, pattern: re.Pattern, template: str, int_fields: tuple[str, ...],
           flag: str) -> GemmConfig | ConvConfig:
    """The config of `name` by `pattern` (ints converted, `flag` from 0/1); refuses non-canonical names."""
    match = pattern.fullmatch(name)
    if match is None:
        raise InvalidConfig(f"name {name!r} is malformed; expected {template}", field="name")
    groups: dict[str, str] = match.groupdict()
    fields: dict[str, object] = dict(groups)
    for key in int_fields:
        fields[key] = int(groups[key])
    fields[flag] = fields[flag] == "1"
    cfg = cls(**fields)
    if cfg.name != name:
        raise InvalidConfig(f"name {name!r} is not canonical; canonical form: {cfg.name!r}", field="name")
    return cfg


_CONV_PATTERN = re.compile(
    r"conv-(?P<family>[a-z_]+)-(?P<direction>fwd|bwd_data|bwd_weight)-(?P<ndim>\d)d-(?P<dtype>[a-z0-9]+)-"
    r"(?P<out_dtype>[a-z0-9]+)-(?P<acc_dtype>[a-z0-9]+)-(?P<block_m>\d+)x(?P<block_n>\d+)x(?P<block_k>\d+)-"
    r"g(?P<groups_per_program>\d+)-w(?P<num_warps>\d+)-s(?P<num_stages>\d+)-k(?P<split_k>\d+)-(?P<kloop>[a-z0-9]+)-"
    r"a(?P<align>\d+)-(?P<activation>[a-z_]+)-b(?P<bias>[01])"
)
_CONV_TEMPLATE = ("conv-<family>-<direction>-<ndim>d-<dtype>-<out_dtype>-<acc_dtype>-<BMxBNxBK>-g<groups>-"
                  "w<warps>-s<stages>-k<split_k>-<kloop>-a<align>-<activation>-b<0|1>")
_CONV_INT_FIELDS = ("ndim", "block_m", "block_n", "block_k", "groups_per_program", "num_warps", "num_stages",
                    "split_k", "align")


def _parse_conv_name(name: str) -> ConvConfig:
    return _parse(name, ConvConfig, _CONV_PATTERN, _CONV_TEMPLATE, _CONV_INT_FIELDS, "bias")  # type: ignore[return-value]


_VENDOR_PATTERN = re.compile(r"vendor-(?P<library>[a-z]+)-(?P<op>[a-z]+)(?:-(?P<direction>[a-z_]+))?")
_VENDOR_TEMPLATE = "vendor-cublas-gemm or vendor-cudnn-conv-<fwd|bwd_data|bwd_weight>"


def _parse_vendor_name(name: str) -> VendorConfig:
    match = _VENDOR_PATTERN.fullmatch(name)
    if match is None:
        raise InvalidConfig(f"name {name!r} is malformed; expected {_VENDOR_TEMPLATE}", field="name")
    try:
        cfg = VendorConfig(match["op"], match["direction"] or "none")
    except InvalidConfig as exc:
        raise InvalidConfig(f"name {name!r}: {exc}; expected {_VENDOR_TEMPLATE}", field="name") from exc
    if cfg.name != name:
        raise InvalidConfig(f"name {name!r} is not canonical; canonical form: {cfg.name!r}", field="name")
    return cfg
