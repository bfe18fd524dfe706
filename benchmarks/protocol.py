"""The timing protocol shared by the benchmarks (gemm.py, conv.py): CUDA-event timer with an L2 flush before
every call, the CPU interpreter's wall-clock timer, the HBM copy bandwidth, the run's environment.

Importing this module does no work (torch and triton are imported inside the functions)."""
from __future__ import annotations

import dataclasses
import datetime
import math
import platform
import re
import statistics
from collections.abc import Callable
from typing import Any

from tiledispatch.bench.timer import FLUSH_MB, quantile


@dataclasses.dataclass(frozen=True)
class Protocol:
    warmup_ms: float = 2.0        # warm-up calls until about this much kernel time (1 to 25 calls)
    min_samples: int = 10
    min_total_ms: float = 20.0    # keep sampling until this much summed sample time ...
    max_samples: int = 200        # ... or this many samples
    flush_mb: int = FLUSH_MB      # L2 flush: zero_() a buffer this large before every timed call
    screen_ratio: float = 1.3     # a plan whose warm-up estimate is this much slower than the best so far ...
    screen_samples: int = 3       # ... only gets this many samples (it cannot win; marked `screened`)

    def describe(self, cuda: bool, vendor: str = "cublas") -> str:
        if not cuda:
            return "CPU smoke run on Triton's interpreter: time.perf_counter, 1 warm-up, median of 3 (not GPU times)"
        return (f"CUDA events around each call, L2 flushed before each call (zero_ of a {self.flush_mb} MB buffer, "
                "outside the events; runs of 16 samples queued behind a sleep kernel so the host's enqueue never "
                f"lands inside the events); warm-up ~{self.warmup_ms:g} ms; samples until >= {self.min_samples} and "
                f">= {self.min_total_ms:g} ms summed, at most {self.max_samples}; median (p20/p80 reported); plans "
                f"estimated > {self.screen_ratio:g}x the best so far get {self.screen_samples} samples (`screened`); "
                "random normal inputs; each output validated vs an fp32 reference before timing; "
                f"ratio = {vendor}_ms / ours_ms")

    def brief(self) -> str:
        """One line for a secondary (shorter) protocol."""
        return (f"warm-up ~{self.warmup_ms:g} ms, >= {self.min_samples} samples and >= {self.min_total_ms:g} ms "
                f"summed (at most {self.max_samples}), screened at {self.screen_ratio:g}x with "
                f"{self.screen_samples} samples")


@dataclasses.dataclass
class Timing:
    ms: float                     # median
    p20_ms: float
    p80_ms: float
    samples: int
    screened: bool = False

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _timing(samples: list[float], screened: bool = False) -> Timing:
    return Timing(statistics.median(samples), quantile(samples, 0.2), quantile(samples, 0.8), len(samples),
                  screened)


class CudaTimer:
    """CUDA-event timer with an L2 flush before every timed call (the flush buffer is allocated on first use)."""

    def __init__(self, protocol: Protocol, device: Any) -> None:
        self.protocol = protocol
        self.device = device
        self._flush: Any = None

    def with_protocol(self, protocol: Protocol) -> CudaTimer:
        """A timer of another protocol sharing this one's flush buffer."""
        other = CudaTimer(protocol, self.device)
        other._flush = self._flush
        return other

    def _samples(self, fn: Callable[[], object], count: int) -> list[float]:
        import torch

        from tiledispatch.bench.timer import flushed_event_samples

        if self._flush is None:
            self._flush = torch.empty(self.protocol.flush_mb * 2**20, dtype=torch.int8, device=self.device)
        return flushed_event_samples(fn, count, self._flush, self.device)

    def _warm(self, fn: Callable[[], object]) -> float:
        """A 3-sample estimate of fn's time in ms, then warm-up calls for about warmup_ms."""
        estimate = statistics.median(self._samples(fn, 3))
        self._samples(fn, max(1, min(25, math.ceil(self.protocol.warmup_ms / max(estimate, 1e-3)))))
        return estimate

    def time_ms(self, fn: Callable[[], object], screen_ms: float | None = None) -> Timing:
        """Median time of fn() in ms. With `screen_ms` (the best time so far), a plan estimated slower than
        screen_ratio x screen_ms gets only `screen_samples` samples."""
        p = self.protocol
        estimate = self._warm(fn)
        if screen_ms is not None and estimate > p.screen_ratio * screen_ms:
            return _timing(self._samples(fn, p.screen_samples), screened=True)
        samples: list[float] = []
        while len(samples) < p.min_samples or (sum(samples) < p.min_total_ms and len(samples) < p.max_samples):
            per_call = statistics.median(samples) if samples else estimate
            want = max(p.min_samples - len(samples), math.ceil((p.min_total_ms - sum(samples)) / max(per_call, 1e-3)))
            samples += self._samples(fn, max(1, min(want, p.max_samples - len(samples))))
        return _timing(samples)

    def paired_ms(self, fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, Timing]:
        """Median times of several callables measured together in `rounds` alternating rounds (each round takes
        every callable's next share of samples, starting one further along each time), so each sees the same
        clocks and temperature: a reference timed seconds before the other (under another thermal state) would
        bias their ratio. Each callable gets at least min_samples and about min_total_ms of samples in all."""
        p = self.protocol
        names = list(fns)
        per_round: dict[str, int] = {}
        for name in names:
            estimate = self._warm(fns[name])
            want = max(p.min_samples, math.ceil(p.min_total_ms / max(estimate, 1e-3)))
            per_round[name] = max(1, min(-(-want // rounds), p.max_samples // rounds))
        samples: dict[str, list[float]] = {name: [] for name in names}
        for r in range(rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                samples[name] += self._samples(fns[name], per_round[name])
        return {name: _timing(values) for name, values in samples.items()}


class CpuTimer:
    """Wall-clock timer for the interpreter smoke run: 1 warm-up, median of 3."""

    def with_protocol(self, protocol: Protocol) -> CpuTimer:
        return self

    def time_ms(self, fn: Callable[[], object], screen_ms: float | None = None) -> Timing:
        from tiledispatch.bench.timer import wall_samples_ms

        return _timing(wall_samples_ms(fn))

    def paired_ms(self, fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, Timing]:
        return {name: self.time_ms(fn) for name, fn in fns.items()}


def hbm_copy_gbps(timer: CudaTimer, gib: int = 2) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written per copy) of a `gib` GiB fp32 buffer,
    timed with `timer`."""
    import torch

    src = torch.randn(gib * 2**28, device=timer.device)   # gib GiB of fp32, read once and written once per copy
    dst = torch.empty_like(src)
    copy = timer.time_ms(lambda: dst.copy_(src))
    return 2 * gib * 2**30 / copy.ms / 1e6


def geomean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200', 'NVIDIA H100 80GB HBM3' -> 'h100_80gb_hbm3'."""
    name = re.sub(r"^nvidia\s+", "", name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_") or "gpu"


def environment(device: Any) -> dict[str, Any]:
    """GPU name, SM count, versions of tiledispatch / triton / torch / CUDA / Python and the date."""
    import torch
    import triton

    import tiledispatch as td

    cuda = device.type == "cuda"
    return {"gpu": torch.cuda.get_device_name(device) if cuda else "cpu (Triton interpreter)",
            "sm_count": torch.cuda.get_device_properties(device).multi_processor_count if cuda else None,
            "tiledispatch": td.__version__, "triton": triton.__version__, "torch": torch.__version__,
            "cuda": torch.version.cuda, "python": platform.python_version(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "cost_models": cost_model_digests()}


def cost_model_digests() -> dict[str, str]:
    """'arch/key' -> the first 12 hex digits of the sha256 of each packaged cost model's booster text (the
    decompressed model.txt.gz, as earlier results hashed model.txt): which models ranked the plans of a run
    (a result records them; the models change between commits)."""
    import hashlib

    from tiledispatch.ml.model import MODEL_FILE, model_text
    from tiledispatch.select.cost_model import models_root

    return {f"{path.parent.parent.name}/{path.parent.name}":
            hashlib.sha256(model_text(path.parent).encode()).hexdigest()[:12]
            for path in sorted(models_root().glob(f"*/*/{MODEL_FILE}"))}
