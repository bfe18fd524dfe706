"""Random valid convolution problems for fuzzing (seeded, deterministic): every direction, 1-3 spatial dims,
dense / grouped / depthwise (with channel multipliers), strides, dilations, asymmetric padding, odd sizes."""
from __future__ import annotations

import random
from typing import Any

from tiledispatch.errors import BadInput
from tiledispatch.problems.conv import ConvProblem

KINDS = ("dense", "grouped", "depthwise")


def _channels(rng: random.Random, kind: str, max_channels: int) -> tuple[int, int, int]:
    """(c, k, groups) of one kind."""
    if kind == "depthwise":
        c = rng.choice([rng.randint(1, max_channels), 8 * rng.randint(1, max(1, max_channels // 8))])
        return c, c * rng.choice((1, 1, 1, 2)), c
    if kind == "grouped":
        groups = rng.choice((2, 3, 4, 8, 16, 32))
        cg = rng.choice((1, 2, 4, 8, 16, 3, 5))
        kg = rng.choice((cg, cg, 2 * cg, 4, 8, 16))
        return groups * cg, groups * kg, groups
    return rng.randint(1, max_channels), rng.randint(1, max_channels), 1


def random_problem(rng: random.Random, direction: str, dtype: str, *, max_pixels: int = 4096,
                   max_channels: int = 96, max_batch: int = 4, ndims: tuple[int, ...] = (1, 2, 2, 3)
                   ) -> ConvProblem:
    """One random valid problem; shapes are drawn until the output size is positive; its number of spatial
    dims is drawn from `ndims`."""
    while True:
        ndim = rng.choice(ndims)
        kind = rng.choice(KINDS)
        c, k, groups = _channels(rng, kind, max_channels)
        filt = tuple(rng.choice((1, 1, 2, 3, 3, 5)) for _ in range(ndim))
        side = max(1, int(max_pixels ** (1.0 / ndim)))
        spatial = tuple(rng.randint(1, side) for _ in range(ndim))
        stride = tuple(rng.choice((1, 1, 2, 3)) for _ in range(ndim))
        dilation = tuple(rng.choice((1, 1, 1, 2)) for _ in range(ndim))
        padding = tuple((rng.randint(0, f), rng.randint(0, f)) for f in filt)
        try:
            return ConvProblem(direction, rng.randint(1, max_batch), c, k, groups, spatial, filt, stride,
                               padding, dilation, dtype)
        except BadInput:   # output size <= 0: draw again
            continue


def random_problems(count: int, direction: str, dtype: str, seed: int = 0,
                    **limits: Any) -> list[ConvProblem]:
    rng = random.Random(f"{seed}-{direction}-{dtype}")
    return [random_problem(rng, direction, dtype, **limits) for _ in range(count)]


def call_api(problem: ConvProblem, args: Any) -> Any:
    """The problem's direction through the one-call API (td.conv, td.conv_bwd_data, td.conv_bwd_weight) on the
    tensors of `args` (runtime.conv_args.ConvArgs; y is dy in the backward directions)."""
    import tiledispatch as td

    p = problem
    geometry = dict(stride=p.stride, padding=p.padding, dilation=p.dilation, groups=p.groups)
    if p.direction == "fwd":
        return td.conv(args.x, args.w, args.bias, activation=p.activation, **geometry)
    if p.direction == "bwd_data":
        return td.conv_bwd_data(args.y, args.w, (p.n, p.c, *p.spatial), **geometry)
    return td.conv_bwd_weight(args.x, args.y, (p.k, p.c_per_group, *p.filter), **geometry)
