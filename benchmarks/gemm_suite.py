"""The GEMM benchmark suite: shapes shared by `benchmarks/gemm.py`, sweeps and `tools/derive_presets.py`.

Each shape is (M, N, K) with a short `why` tag: `square`, `llm:<model>.<proj>` (out = x @ W^T of a public
model's projection, M = tokens in flight), `small_k`, `unaligned`. Importing this module does no work.
"""
from __future__ import annotations

import dataclasses

M_VALUES = (1, 16, 64, 256, 1024, 4096, 16384)


@dataclasses.dataclass(frozen=True)
class Shape:
    m: int
    n: int
    k: int
    why: str

    @property
    def key(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


# (model.proj) -> (N, K) and the M values benchmarked for it. Llama-3-8B: hidden 4096, 32 q / 8 kv heads of
# 128, FFN 14336; Qwen2.5-7B: hidden 3584, 28 q / 4 kv heads of 128, FFN 18944; Llama-3-70B: hidden 8192,
# 64 q / 8 kv heads, FFN 28672. gate+up and q/k/v are fused. Llama-3-8B carries every M value.
LLM_PROJECTIONS: tuple[tuple[str, tuple[int, int], tuple[int, ...]], ...] = (
    ("llama3_8b.qkv", (6144, 4096), M_VALUES),
    ("llama3_8b.o", (4096, 4096), (1, 64, 1024, 16384)),
    ("llama3_8b.gate_up", (28672, 4096), M_VALUES),
    ("llama3_8b.down", (4096, 14336), M_VALUES),
    ("qwen2.5_7b.o", (3584, 3584), (16, 256, 4096)),
    ("qwen2.5_7b.gate_up", (37888, 3584), (1, 64, 1024)),
    ("qwen2.5_7b.down", (3584, 18944), (16, 256, 4096)),
    ("llama3_70b.gate_up", (57344, 8192), (1, 256)),
    ("llama3_70b.down", (8192, 28672), (16, 4096)),
)
SQUARES = (256, 512, 1024, 2048, 4096, 8192, 16384)
SMALL_K = (64, 128, 256, 512)
UNALIGNED = ((3000, 5000, 700), (1000, 1000, 1000), (777, 1234, 555), (4095, 4097, 1023))
# The `small` subset: every shape below this many FLOPs (a quick run, a few seconds per combo).
SMALL_FLOPS = 2**34


def suite() -> list[Shape]:
    """Every shape of the default run, in a stable order (squares, LLM projections, small K, unaligned)."""
    shapes = [Shape(s, s, s, "square") for s in SQUARES]
    for tag, (n, k), ms in LLM_PROJECTIONS:
        shapes += [Shape(m, n, k, f"llm:{tag}") for m in ms]
    shapes += [Shape(4096, 4096, k, "small_k") for k in SMALL_K]
    shapes += [Shape(m, n, k, "unaligned") for m, n, k in UNALIGNED]
    return shapes


def small_suite() -> list[Shape]:
    return [s for s in suite() if s.flops < SMALL_FLOPS]


def smoke_suite() -> list[Shape]:
    """Two tiny shapes for the CPU interpreter: one aligned to 16, one not."""
    return [Shape(32, 48, 64, "smoke"), Shape(17, 33, 40, "smoke:unaligned")]


def parse_shapes(spec: str) -> list[Shape]:
    """`small`, `all`, or a comma list of MxNxK (a shape of the suite keeps its tag, others are `custom`)."""
    if spec == "all":
        return suite()
    if spec == "small":
        return small_suite()
    known = {s.key: s for s in suite()}
    shapes = []
    for item in spec.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"--shapes item {item!r} is not MxNxK with positive integers (or 'small' / 'all')")
        m, n, k = (int(p) for p in parts)
        shapes.append(known.get(f"{m}x{n}x{k}", Shape(m, n, k, "custom")))
    return shapes


def categories(m: int, n: int, k: int, *, compute_min: int = 1024, memory_max_m: int = 64,
               memory_max_k: int = 512, latency_flops: int = 2**30) -> list[str]:
    """The preset subsets a shape belongs to (possibly several, possibly none):
    compute: M, N >= compute_min and K >= compute_min; memory: M <= memory_max_m or K <= memory_max_k;
    latency: 2*M*N*K < latency_flops."""
    out = []
    if m >= compute_min and n >= compute_min and k >= compute_min:
        out.append("compute")
    if m <= memory_max_m or k <= memory_max_k:
        out.append("memory")
    if 2 * m * n * k < latency_flops:
        out.append("latency")
    return out
