"""A convolution registry: declare instances -> build -> select per problem -> run -> save it as JSON and load
it back (the loaded registry builds from the cache and selects the same kernels).

    python examples/conv_registry_json.py                                      # three explicit configs
    python examples/conv_registry_json.py --preset conv_fwd_fp16_2d_essential   # a packaged preset
"""
import argparse

import torch

import tiledispatch as td
from tiledispatch.testing.reference import make_conv_args, validate_conv


def declare(registry: td.Registry, preset: str | None) -> None:
    if preset:
        registry.add_preset(preset)
        return
    # A 1x1 convolution as a GEMM over the pixels (family "gemm"), and direct kernels (CUDA-core FMAs over
    # channels) for depthwise and few channels per group, aligned and unaligned; one is given by its name.
    registry.add(td.ConvConfig(family="gemm", direction="fwd", ndim=2, dtype="fp16", block_m=64, block_n=64,
                               block_k=32, num_stages=3, align=8))
    registry.add(td.ConvConfig(family="direct", direction="fwd", ndim=2, dtype="fp16", block_m=64, block_n=32,
                               block_k=1, align=8))
    registry.add("conv-direct-fwd-2d-fp16-fp16-fp32-64x32x1-g1-w4-s2-k0-tap-a1-none-b0")


def problems(device: str) -> list[td.ConvProblem]:
    """A pointwise (1x1) layer and a depthwise 3x3 one; tiny on the CPU (the interpreter runs in Python)."""
    n, c, size = (32, 256, 28) if device == "cuda" else (2, 16, 5)
    return [td.ConvProblem("fwd", n, c, 2 * c, 1, (size, size), (1, 1), dtype="fp16"),
            td.ConvProblem("fwd", n, c, c, c, (size, size), (3, 3), padding=1, dtype="fp16")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", help="a packaged conv preset, e.g. conv_fwd_fp16_2d_essential")
    options = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"

    registry = td.Registry()          # arch of the visible GPU, else $TILEDISPATCH_ARCH or sm_90
    declare(registry, options.preset)
    report = registry.build()         # compiles what the cache lacks, in worker processes
    print(f"declared {len(registry)} conv instances for {registry.arch.name}; build: {report}")
    assert not report.failed, report.failed

    chosen = {}
    for problem in problems(device):
        selection = registry.select(problem)
        chosen[problem] = selection.kernel.name
        args = make_conv_args(problem, device, poison=True)   # output NaN-filled: every element is written
        y = registry.run_conv(problem, args.x, args.w, out=args.y)
        check = validate_conv(y, problem, args)
        print(f"{problem.describe()}\n  -> {selection.kernel.name} ({selection.strategy}); "
              f"rel_err vs float64 {check['rel_err']:.2e} on {device}")
        assert check["passed"], check

    # Save the registry (arch and instance names) and load it back; building again is served by the cache.
    text = registry.to_json()
    loaded = td.Registry.from_json(text)
    assert [k.name for k in loaded.kernels] == [k.name for k in registry.kernels]
    print(f"to_json/from_json round trip: {len(loaded)} instances; rebuild: {loaded.build()}")
    for problem, name in chosen.items():
        assert loaded.select(problem).kernel.name == name


if __name__ == "__main__":
    main()
