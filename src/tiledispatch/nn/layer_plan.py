"""LayerPlan: per converted module and input signature, whether the layer runs td's path or torch's own layer.

A layer costs a step its path's host time and its kernels' GPU time, and a pipelined step pays roughly the
larger of the two per part (forward; backward). On the first calls the plan learns td's pick per direction
and the GPU times `auto` measured for that pick and the vendor plan; it then samples the host time of a few
calls on td's path and a few on torch's, and keeps td's path only where its summed per-part max(host, GPU)
is lower by a margin.
Where td picked the vendor in every direction torch's own layer wins outright (same kernels, less host);
where td chose without timing the vendor, td's choice is trusted.
"""
from __future__ import annotations

import statistics
import time
from typing import Any

from tiledispatch.configs.vendor import VendorConfig
from tiledispatch.select.selector import measured_pair

SAMPLES = 5          # host-time samples per path and part
TD_MARGIN = 0.97     # td's path is kept below this fraction of torch's cost (host samples are noisy)
clock = time.perf_counter


class LayerPlan:
    """What one argument signature of a module runs. `stage`: 'td' (learning td's picks, then timing its
    host path), 'torch' (timing torch's layer), 'settled' (`on_torch` says which path runs)."""

    __slots__ = ("needs", "op", "vendor", "gpu", "host", "stage", "on_torch")

    def __init__(self, needs: tuple[bool, bool], op: str = "conv") -> None:
        self.needs = needs                    # (dx, dw) wanted by this signature's backward
        self.op = op                          # 'conv' or 'gemm' (a Linear's three products)
        self.vendor: dict[str, bool] = {}     # direction -> td picked the vendor plan
        self.gpu: dict[str, tuple[float, float] | None] = {}   # direction -> (td's, vendor's) µs or None
        self.host: dict[str, dict[str, list[float]]] = {"td": {}, "torch": {}}   # path -> part -> µs
        self.stage = "td"
        self.on_torch = False

    @property
    def directions(self) -> tuple[str, ...]:
        wanted = (("bwd_data",) if self.needs[0] else ()) + (("bwd_weight",) if self.needs[1] else ())
        return ("fwd", *wanted)

    @property
    def parts(self) -> tuple[str, ...]:
        return ("fwd", "bwd") if any(self.needs) else ("fwd",)

    @property
    def vendor_backward(self) -> bool:
        return self.vendor.get("bwd_data", False) and self.vendor.get("bwd_weight", False)

    def learned(self) -> bool:
        return all(d in self.gpu for d in self.directions)

    def timing(self, path: str) -> bool:
        """Whether this call's host time on `path` is to be sampled."""
        return self.stage == path and (path == "torch" or self.learned())

    def learn(self, direction: str, selection: Any) -> None:
        """Record td's selection for a direction (None: no remembered decision, nothing learned)."""
        if selection is None or direction in self.gpu:
            return
        vendor = selection.kernel.config.family == "vendor"
        name = VendorConfig("conv", direction).name if self.op == "conv" else VendorConfig("gemm").name
        pair = measured_pair(selection, name)
        self.vendor[direction] = vendor
        if pair is None and vendor:
            self.gpu[direction] = (0.0, 0.0)    # the same kernel on either path: host time decides
        else:
            self.gpu[direction] = None if pair is None else (1e3 * pair[0], 1e3 * pair[1])
        if self.learned():
            if all(self.vendor[d] for d in self.directions):
                self._settle(True)      # the vendor's kernels either way: torch's layer has less host time
            elif any(self.gpu[d] is None for d in self.directions):
                self._settle(False)     # td chose without timing the vendor: trust its choice

    def sample(self, path: str, part: str, start: float) -> None:
        """Record one host time (from `start`, a perf_counter reading, to now) of `part` on `path`."""
        self.host[path].setdefault(part, []).append((clock() - start) * 1e6)
        if self.stage == path and all(len(self.host[path].get(p, ())) >= SAMPLES for p in self.parts):
            if path == "td":
                self.stage = "torch"
            else:
                self._settle(self.cost("td") >= TD_MARGIN * self.cost("torch"))

    def cost(self, path: str) -> float:
        """Summed per-part max(median host µs, GPU µs) of a path (what it costs a pipelined step)."""
        side = 0 if path == "td" else 1
        total = 0.0
        for part in self.parts:
            directions = ("fwd",) if part == "fwd" else self.directions[1:]
            gpu = sum(self.gpu[d][side] for d in directions)   # type: ignore[index]
            total += max(statistics.median(self.host[path][part]), gpu)
        return total

    def _settle(self, on_torch: bool) -> None:
        self.stage, self.on_torch = "settled", on_torch

    def summary(self) -> dict[str, Any]:
        """What the plan learned and decided (benchmarks and probes print it)."""
        host = {path: {part: round(statistics.median(v), 1) for part, v in parts.items() if v}
                for path, parts in self.host.items()}
        costs = ({path: round(self.cost(path), 1) for path in ("td", "torch")}
                 if self.stage == "settled" and all(self.host[p] for p in ("td", "torch")) else {})
        gpu = {d: None if g is None else [round(g[0], 1), round(g[1], 1)] for d, g in self.gpu.items()}
        return {"on_torch": self.on_torch, "stage": self.stage, "vendor": dict(self.vendor), "gpu_us": gpu,
                "host_us": host, "cost_us": costs}
