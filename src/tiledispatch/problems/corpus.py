"""The problem corpus: the problem sets sweeps run over (`gemm_corpus`, `conv_corpus`, `named_suite`) and
their JSON files. Sets are de-duplicated, deterministic for a seed and tagged with where each problem came
from; what each set holds: docs/design/problems.md."""
from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tiledispatch.dtypes import INPUT_DTYPES
from tiledispatch.errors import BadInput, bad_choice
from tiledispatch.fsutil import atomic_write_text
from tiledispatch.problems import conv_suites as cs
from tiledispatch.problems import models
from tiledispatch.problems.conv import CONV_DTYPES, DIRECTIONS, NDIMS, ConvProblem
from tiledispatch.problems.gemm import Epilogue, GemmProblem

Problem = GemmProblem | ConvProblem

FORMAT = 1
KIND = "tiledispatch-problems"
OPS = ("gemm", "conv")

GEMM_M_VALUES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GEMM_SQUARES = (64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
GEMM_SMALL_K = (16, 32, 64, 128, 256, 512)
GEMM_LARGE_K = (4096, 8192, 16384, 32768, 65536)
GEMM_MAX_FLOPS = 2**37
GEMM_MAX_BYTES = 2**31
GEMM_RANDOM = 500                 # random problems of the default GEMM corpus
CONV_BATCHES = {1: (1, 4, 16, 64), 2: (1, 2, 4, 8, 16, 32, 64), 3: (1, 2, 4, 8)}
CONV_MAX_FLOPS = 2**36
CONV_MAX_BYTES = 2**30
CONV_RANDOM = 500                 # random problems of each default conv corpus
ODD_FRACTION = 0.3                # share of random sizes left unrounded (most then not multiples of 8)
_ATTEMPTS = 50                    # random draws allowed per wanted problem before giving up


@dataclasses.dataclass(frozen=True)
class CorpusEntry:
    """One problem of a set and where it came from."""

    tag: str
    problem: Problem

    @property
    def op(self) -> str:
        return op_of(self.problem)


def op_of(problem: Problem) -> str:
    if isinstance(problem, GemmProblem):
        return "gemm"
    if isinstance(problem, ConvProblem):
        return "conv"
    raise BadInput(f"problem must be a GemmProblem or ConvProblem, got {type(problem).__name__}",
                   field="problem")


def tag_prefix(tag: str) -> str:
    """The source part of a tag: the model (`llama3_8b`, `resnet50`) or the kind (`random`, `square`)."""
    return re.split(r"[/.@]", tag, maxsplit=1)[0]


def breakdown(entries: Iterable[CorpusEntry]) -> dict[str, int]:
    """Problems per tag prefix, in order of first appearance."""
    counts: dict[str, int] = {}
    for entry in entries:
        prefix = tag_prefix(entry.tag)
        counts[prefix] = counts.get(prefix, 0) + 1
    return counts


# ------------------------------------------------------------------------------------------------ sampling


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return max(lo, min(hi, round(math.exp(rng.uniform(math.log(lo), math.log(hi))))))


def _size(rng: random.Random, lo: int, hi: int, odd_fraction: float = ODD_FRACTION) -> int:
    """A log-uniform size in [lo, hi]: kept as drawn for `odd_fraction` of the draws, else rounded to a
    multiple of 8, 16 or 64 (at least that multiple)."""
    value = _log_uniform(rng, lo, hi)
    if rng.random() < odd_fraction:
        return value
    q = rng.choice((8, 16, 16, 64))
    return max(q, round(value / q) * q)


def _check_common(count: int | None, seed: int, max_flops: int, max_bytes: int) -> None:
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count <= 0):
        raise BadInput(f"count={count!r} must be a positive integer (or None for the default size)",
                       field="count")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise BadInput(f"seed={seed!r} must be an integer", field="seed")
    for field, value in (("max_flops", max_flops), ("max_bytes", max_bytes)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise BadInput(f"{field}={value!r} must be a positive integer", field=field)


Draw = Callable[[random.Random], Problem | None]


def _assemble(structured: list[CorpusEntry], draw: Draw, count: int | None, default_random: int, seed: int,
              within: Callable[[Problem], bool]) -> list[CorpusEntry]:
    """Model-derived entries, then random ones (default_random of them, or enough to reach `count`); a
    `count` below that size keeps a seeded subset of the whole (order kept). Caps so tight that random draws
    keep failing give fewer problems than asked (after _ATTEMPTS draws per wanted problem)."""
    rng = random.Random(seed)
    entries = cs.dedupe(structured)
    wanted = default_random if count is None else max(default_random, count - len(entries))
    seen = {entry.problem for entry in entries}
    for problem in _random_problems(rng, draw, wanted, seen, within):
        entries.append(CorpusEntry("random", problem))
    if count is not None and count < len(entries):
        keep = sorted(rng.sample(range(len(entries)), count))
        entries = [entries[i] for i in keep]
    return entries


def _random_problems(rng: random.Random, draw: Draw, wanted: int,
                     seen: set[Problem], within: Callable[[Problem], bool]) -> Iterator[Problem]:
    found = 0
    for _ in range(wanted * _ATTEMPTS):
        if found == wanted:
            return
        problem = draw(rng)
        if problem is None or problem in seen or not within(problem):
            continue
        seen.add(problem)
        found += 1
        yield problem


# ---------------------------------------------------------------------------------------------------- GEMM


def _gemm_shapes() -> Iterator[tuple[str, int, int, int]]:
    """(tag, M, N, K) of the model-derived and structured GEMM shapes, in a stable order."""
    for model, projections in models.LLM_PROJECTIONS.items():
        for proj, (n, k) in projections:
            for m in GEMM_M_VALUES:
                yield f"{model}.{proj}@m{m}", m, n, k
    for s in GEMM_SQUARES:
        yield "square", s, s, s
    for s in GEMM_SQUARES[::2]:
        yield from (("squareish", s, 2 * s, s), ("squareish", s, s, 2 * s), ("squareish", 2 * s, s, s),
                    ("squareish", s, s, s // 2))
    for mn in (512, 1024, 2048, 4096, 8192, 16384):
        for k in GEMM_SMALL_K:
            yield "small_k", mn, mn, k
    for mn in (16, 64, 128, 256, 512, 1024):
        for k in GEMM_LARGE_K:
            yield "large_k", mn, mn, k


def _draw_gemm(dtype: str, layout: str) -> Callable[[random.Random], GemmProblem]:
    def draw(rng: random.Random) -> GemmProblem:
        m = _size(rng, 1, 16384)
        return GemmProblem(m, _size(rng, 8, 65536), _size(rng, 8, 65536), dtype=dtype, layout=layout)
    return draw


def gemm_corpus(dtype: str = "bf16", layout: str = "rcr", count: int | None = None, seed: int = 0,
                max_flops: int = GEMM_MAX_FLOPS, max_bytes: int = GEMM_MAX_BYTES) -> list[CorpusEntry]:
    """GEMM problems of one dtype and layout: LLM projections at every M of GEMM_M_VALUES, squares,
    square-ish, small-K and large-K shapes, then GEMM_RANDOM log-uniform random ones (about a third with sizes
    that are not multiples of 8). Only problems with at most max_flops FLOPs and max_bytes bytes (A, B, out)
    are kept.
    count: the number of problems (None: all model-derived ones plus GEMM_RANDOM random ones)."""
    if dtype not in INPUT_DTYPES:
        raise bad_choice(BadInput, "dtype", dtype, INPUT_DTYPES)
    _check_common(count, seed, max_flops, max_bytes)

    def within(p: Problem) -> bool:
        return p.flops <= max_flops and p.min_bytes <= max_bytes

    structured = [CorpusEntry(tag, p) for tag, m, n, k in _gemm_shapes()
                  if within(p := GemmProblem(m, n, k, dtype=dtype, layout=layout))]
    return _assemble(structured, _draw_gemm(dtype, layout), count, GEMM_RANDOM, seed, within)


# ---------------------------------------------------------------------------------------------------- conv


def _check_ndims(ndims: Iterable[int]) -> tuple[int, ...]:
    values = tuple(ndims)
    if not values or any(v not in NDIMS for v in values):
        raise BadInput(f"ndims={values!r} must be a non-empty selection of {NDIMS}", field="ndims")
    return tuple(sorted(set(values)))


def _model_convs(direction: str, dtype: str, ndims: tuple[int, ...]) -> Iterator[CorpusEntry]:
    for model, layers in models.CONV_MODELS.items():
        for layer in layers():
            nd = len(layer.spatial)
            if nd not in ndims:
                continue
            for n in CONV_BATCHES[nd]:
                problem = cs.with_direction(cs.problem_of(layer, n, dtype), direction)
                yield CorpusEntry(f"{model}/{layer.name}@n{n}", problem)


def _channels(rng: random.Random) -> tuple[int, int, int]:
    """(c, k, groups): dense 40%, grouped 30% (2..64 groups of 1..64 channels), depthwise 30% (a channel
    multiplier of 2 now and then)."""
    kind = rng.random()
    if kind < 0.4:
        return _size(rng, 1, 1024), _size(rng, 1, 1024), 1
    if kind < 0.7:
        g, cg = _log_uniform(rng, 2, 64), _log_uniform(rng, 1, 64)
        kg = cg if rng.random() < 0.6 else _log_uniform(rng, 1, 64)
        return g * cg, g * kg, g
    c = _size(rng, 8, 1024)
    return c, c * (2 if rng.random() < 0.15 else 1), c


def _spatial(rng: random.Random, nd: int) -> tuple[int, ...]:
    if nd == 1:
        return (_log_uniform(rng, 8, 8192),)
    if nd == 2:
        h = _log_uniform(rng, 3, 224)
        return (h, h if rng.random() < 0.7 else _log_uniform(rng, 3, 224))
    h = _log_uniform(rng, 3, 112)
    return (_log_uniform(rng, 1, 32), h, h if rng.random() < 0.8 else _log_uniform(rng, 3, 112))


def _filter(rng: random.Random, nd: int) -> tuple[int, ...]:
    def pick() -> int:
        return rng.choices((1, 2, 3, 4, 5, 6, 7), weights=(3, 1, 5, 1, 2, 1, 2))[0]

    if rng.random() < 0.75:
        f = pick()
        if nd == 3 and rng.random() < 0.2:           # (2+1)D-style factored filters
            return rng.choice(((1, f, f), (f, 1, 1)))
        return (f,) * nd
    return tuple(pick() for _ in range(nd))


def _padding(rng: random.Random, reach: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """'same'-style 60%, none 20%, asymmetric (each side 0..reach) 20%; reach = dilation * (filter - 1)."""
    mode = rng.random()
    if mode < 0.6:
        return tuple((r // 2, r // 2) for r in reach)
    if mode < 0.8:
        return tuple((0, 0) for _ in reach)
    return tuple((rng.randint(0, r), rng.randint(0, r)) for r in reach)


def _draw_conv(direction: str, dtype: str, ndims: tuple[int, ...]) -> Draw:
    def draw(rng: random.Random) -> ConvProblem | None:
        nd = rng.choice(ndims)
        c, k, groups = _channels(rng)
        spatial, filt = _spatial(rng, nd), _filter(rng, nd)
        stride = (2,) * nd if rng.random() < 0.3 else (1,) * nd
        dilation = tuple(rng.choice((2, 3)) if f > 1 and rng.random() < 0.1 else 1 for f in filt)
        reach = tuple(d * (f - 1) for d, f in zip(dilation, filt))
        padding = _padding(rng, reach)
        if any(size + left + right <= r for size, (left, right), r in zip(spatial, padding, reach)):
            return None                              # no output pixel
        n = _log_uniform(rng, 1, 16 if nd == 3 else 64)
        return ConvProblem(direction, n, c, k, groups, spatial, filt, stride=stride, padding=padding,
                           dilation=dilation, dtype=dtype)
    return draw


def conv_corpus(direction: str, dtype: str = "bf16", ndims: Iterable[int] = (2, 3), count: int | None = None,
                seed: int = 0, max_flops: int = CONV_MAX_FLOPS,
                max_bytes: int = CONV_MAX_BYTES) -> list[CorpusEntry]:
    """Conv problems of one direction and dtype: every layer of `models.CONV_MODELS` whose ndim is in ndims at
    each batch size of CONV_BATCHES, then CONV_RANDOM random valid ones (ndim among ndims). Only problems with
    at most max_flops FLOPs and max_bytes bytes (input, weight, output) are kept.
    count: the number of problems (None: all model-derived ones plus CONV_RANDOM random ones)."""
    if direction not in DIRECTIONS:
        raise bad_choice(BadInput, "direction", direction, DIRECTIONS)
    if dtype not in CONV_DTYPES:
        raise bad_choice(BadInput, "dtype", dtype, CONV_DTYPES)
    ndims = _check_ndims(ndims)
    _check_common(count, seed, max_flops, max_bytes)

    def within(p: Problem) -> bool:
        return p.flops <= max_flops and p.min_bytes <= max_bytes

    structured = [e for e in _model_convs(direction, dtype, ndims) if within(e.problem)]
    return _assemble(structured, _draw_conv(direction, dtype, ndims), count, CONV_RANDOM, seed, within)


# ---------------------------------------------------------------------------------------------------- smoke


def smoke_gemm(dtype: str = "bf16", layout: str = "rcr") -> list[CorpusEntry]:
    """Six tiny GEMMs for Triton's CPU interpreter (sizes <= 64; three unaligned ones, tagged smoke.odd)."""
    shapes = ((32, 48, 64), (17, 33, 40), (1, 64, 64), (64, 16, 48), (5, 7, 9), (33, 64, 17))
    return [CorpusEntry("smoke" if p.align == 16 else "smoke.odd", p)
            for p in (GemmProblem(m, n, k, dtype=dtype, layout=layout) for m, n, k in shapes)]


def smoke_conv(direction: str, dtype: str = "bf16") -> list[CorpusEntry]:
    """Six tiny convs for Triton's CPU interpreter (sizes <= 64): dense, grouped stride 2, depthwise with
    asymmetric padding, 3D, 1D with odd channels and dilation, 1x1."""
    if direction not in DIRECTIONS:
        raise bad_choice(BadInput, "direction", direction, DIRECTIONS)
    # (tag, n, c, k, groups, spatial, filter, stride, padding, dilation)
    cases = (("smoke.dense2d", 2, 8, 16, 1, (9, 9), (3, 3), 1, 1, 1),
             ("smoke.grouped", 1, 12, 12, 3, (11, 11), (3, 3), 2, 1, 1),
             ("smoke.depthwise", 2, 8, 8, 8, (7, 10), (5, 5), 1, ((2, 1), (0, 2)), 1),
             ("smoke.dense3d", 1, 4, 8, 1, (3, 5, 5), (3, 3, 3), 1, 1, 1),
             ("smoke.dense1d", 2, 5, 7, 1, (17,), (3,), 1, 2, 2),
             ("smoke.pointwise", 1, 16, 24, 1, (6, 6), (1, 1), 1, 0, 1))
    return [CorpusEntry(tag, ConvProblem(direction, n, c, k, g, spatial, filt, stride=s, padding=p,
                                         dilation=d, dtype=dtype))
            for tag, n, c, k, g, spatial, filt, s, p, d in cases]


# ------------------------------------------------------------------------------------------------- by name


def _benchmark_suite(name: str) -> Callable[..., list[CorpusEntry]]:
    def build(dtype: str = "bf16", batch: int | None = None, direction: str = "fwd") -> list[CorpusEntry]:
        cases = cs.suite(name, dtype, batch)
        return cs.dedupe(CorpusEntry(f"{case.name}@n{case.problem.n}", case.for_direction(direction))
                      for case in cases)
    return build


def _conv_named(direction: str) -> Callable[..., list[CorpusEntry]]:
    return lambda **kw: conv_corpus(direction, **kw)


def _smoke_conv_named(direction: str) -> Callable[..., list[CorpusEntry]]:
    return lambda **kw: smoke_conv(direction, **kw)


_CORPUS_OPTIONS = ("count", "seed", "max_flops", "max_bytes")
# name -> (op, builder, keyword options it takes, description)
_SUITES: dict[str, tuple[str, Callable[..., list[CorpusEntry]], tuple[str, ...], str]] = {
    "gemm": ("gemm", gemm_corpus, ("dtype", "layout", *_CORPUS_OPTIONS),
             "LLM projections at many token counts, squares, small/large K, log-uniform random"),
    **{f"conv_{d}": ("conv", _conv_named(d), ("dtype", "ndims", *_CORPUS_OPTIONS),
                     f"conv {d}: model layers at several batch sizes, log-uniform random")
       for d in DIRECTIONS},
    **{name: ("conv", _benchmark_suite(name), ("dtype", "batch", "direction"), f"conv benchmark suite {name}")
       for name in cs.SUITES},
    "smoke_gemm": ("gemm", smoke_gemm, ("dtype", "layout"), "six tiny GEMMs for the CPU interpreter"),
    **{f"smoke_conv_{d}": ("conv", _smoke_conv_named(d), ("dtype",),
                           f"six tiny convs ({d}) for the CPU interpreter") for d in DIRECTIONS},
}
SUITE_NAMES = tuple(_SUITES)


def _suite(name: str) -> tuple[str, Callable[..., list[CorpusEntry]], tuple[str, ...], str]:
    if name not in _SUITES:
        raise bad_choice(BadInput, "suite", name, SUITE_NAMES)
    return _SUITES[name]


def suite_op(name: str) -> str:
    """gemm or conv."""
    return _suite(name)[0]


def suite_options(name: str) -> tuple[str, ...]:
    """The keyword options `named_suite(name, ...)` takes."""
    return _suite(name)[2]


def suite_description(name: str) -> str:
    return _suite(name)[3]


def named_suite(name: str, **kw: Any) -> list[CorpusEntry]:
    """The entries of a named set (SUITE_NAMES); kw are that set's options (see `suite_options`)."""
    _, build, options, _ = _suite(name)
    for key in kw:
        if key not in options:
            raise BadInput(f"{key} does not apply to suite {name!r}; its options: {', '.join(options)}",
                           field=key)
    return build(**kw)


# ---------------------------------------------------------------------------------------------------- files


def save_problems(path: str | Path, entries: Iterable[CorpusEntry], meta: dict[str, Any]) -> None:
    """Write entries of one op as a problems file (atomically), one problem per line."""
    entries = list(entries)
    if not entries:
        raise BadInput("entries: nothing to save (an empty problem set)", field="problems")
    ops = {entry.op for entry in entries}
    if len(ops) != 1:
        raise BadInput(f"problems: one op per file, got {sorted(ops)}", field="op")
    if not isinstance(meta, dict):
        raise BadInput(f"meta must be a dict, got {type(meta).__name__}", field="meta")
    head = json.dumps({"format": FORMAT, "kind": KIND, "op": ops.pop(), "meta": meta, "problems": []})
    lines = ",\n".join(json.dumps({"tag": e.tag, "problem": e.problem.to_dict()}) for e in entries)
    atomic_write_text(path, head[:-2] + "\n" + lines + "\n]}\n")     # head ends with "[]}"


def load_problems(path: str | Path) -> tuple[list[CorpusEntry], dict[str, Any]]:
    """(entries, meta) of a problems file; a malformed file raises BadInput naming the field."""
    try:
        doc = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: not a JSON problems file ({exc})", field="file") from None
    if not isinstance(doc, dict):
        raise BadInput(f"{path}: a problems file is a JSON object, got {type(doc).__name__}", field="file")
    if doc.get("format") != FORMAT:
        raise BadInput(f"{path}: format={doc.get('format')!r}, this version reads format {FORMAT}",
                       field="format")
    if doc.get("kind") != KIND:
        raise BadInput(f"{path}: kind={doc.get('kind')!r} is not {KIND!r}", field="kind")
    op = doc.get("op")
    if op not in OPS:
        raise bad_choice(BadInput, "op", op, OPS)
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise BadInput(f"{path}: meta must be an object", field="meta")
    items = doc.get("problems")
    if not isinstance(items, list):
        raise BadInput(f"{path}: problems must be a list", field="problems")
    return [_entry(op, item, f"problems[{i}]") for i, item in enumerate(items)], meta


def _entry(op: str, item: Any, where: str) -> CorpusEntry:
    if not isinstance(item, dict) or set(item) != {"tag", "problem"}:
        raise BadInput(f"{where} must be an object with exactly 'tag' and 'problem'", field=where)
    if not isinstance(item["tag"], str):
        raise BadInput(f"{where}.tag must be a string", field=f"{where}.tag")
    data = item["problem"]
    cls = GemmProblem if op == "gemm" else ConvProblem
    _check_fields(cls, data, f"{where}.problem")
    if op == "gemm" and data.get("epilogue") is not None:
        _check_fields(Epilogue, data["epilogue"], f"{where}.problem.epilogue")
    try:
        return CorpusEntry(item["tag"], cls.from_dict(data))
    except BadInput as exc:
        field = f"{where}.problem.{exc.field}" if exc.field else f"{where}.problem"
        raise BadInput(f"{field}: {exc}", field=field) from None


def _check_fields(cls: type, data: Any, where: str) -> None:
    """data is an object with only fields of cls and every field cls requires."""
    if not isinstance(data, dict):
        raise BadInput(f"{where} must be an object", field=where)
    fields = dataclasses.fields(cls)
    unknown = sorted(set(data) - {f.name for f in fields})
    if unknown:
        raise BadInput(f"{where}: unknown field(s) {unknown}", field=f"{where}.{unknown[0]}")
    missing = [f.name for f in fields if f.default is dataclasses.MISSING and f.name not in data]
    if missing:
        raise BadInput(f"{where}: missing field(s) {missing}", field=f"{where}.{missing[0]}")
