"""ArchSpec: the facts about a GPU architecture that validity rules and selection read."""
from __future__ import annotations

import dataclasses
import functools
import json
from importlib import resources

from tiledispatch import settings
from tiledispatch.errors import BadInput, bad_choice


@dataclasses.dataclass(frozen=True)
class ArchSpec:
    name: str
    cc: int
    reference_gpu: str
    sm_count: int
    smem_per_block: int
    smem_per_sm: int
    registers_per_sm: int
    max_registers_per_thread: int
    max_warps_per_block: int
    max_warps_per_sm: int
    l2_bytes: int
    tma: bool
    wgmma: bool
    fp8: bool
    dtypes: tuple[str, ...]
    peak_tflops_fp16: float
    hbm_gbps: float

    def supports_dtype(self, dtype: str) -> bool:
        return dtype in self.dtypes

    def with_device(self, sm_count: int, device_name: str) -> ArchSpec:
        """The same arch with the SM count of the device actually present."""
        return dataclasses.replace(self, sm_count=sm_count, reference_gpu=device_name)


@functools.cache
def _table() -> dict[str, dict]:
    text = resources.files("tiledispatch.arch").joinpath("specs.json").read_text()
    return json.loads(text)["archs"]


def known_archs() -> tuple[str, ...]:
    return tuple(_table())


def normalize_arch(name: str | int) -> str:
    """Accept 'sm_90', 'sm90', '90' or 90 and return 'sm_90'."""
    text = str(name).strip().lower().replace("sm_", "").replace("sm", "")
    if text.endswith("a"):
        text = text[:-1]
    arch = f"sm_{text}"
    if arch not in _table():
        raise bad_choice(BadInput, "gpu_target", name, known_archs())
    return arch


@functools.cache
def get_arch(name: str | int) -> ArchSpec:
    arch = normalize_arch(name)
    row = dict(_table()[arch])
    row["dtypes"] = tuple(row["dtypes"])
    return ArchSpec(name=arch, **row)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def detect(device: int | None = None) -> ArchSpec:
    """The arch of the visible GPU (with its real SM count), or the configured default without one."""
    if not cuda_available():
        return get_arch(settings.default_arch())
    import torch

    index = torch.cuda.current_device() if device is None else device
    props = torch.cuda.get_device_properties(index)
    spec = get_arch(props.major * 10 + props.minor)
    return spec.with_device(props.multi_processor_count, props.name)
