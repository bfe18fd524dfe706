"""The Registry workflow: declare instances -> build (parallel, cached) -> select (with its ranking) ->
run -> save the registry as JSON and load it back.

    python examples/registry_workflow.py                                 # four small explicit configs
    python examples/registry_workflow.py --preset gemm_fp16_rcr_essential   # a packaged preset
"""
import argparse

import torch

import tiledispatch as td


def declare(registry: td.Registry, preset: str | None) -> None:
    if preset:
        registry.add_preset(preset)
        return
    # Configs by fields, and one by its canonical instance name (td.parse_name turns names into configs).
    fp16_rcr = {"dtype": "fp16", "layout": "rcr", "num_warps": 4}
    registry.add(td.GemmConfig(family="tiled", block_m=32, block_n=32, block_k=32, num_stages=2, align=1,
                               **fp16_rcr))
    registry.add(td.GemmConfig(family="tiled", block_m=64, block_n=64, block_k=32, num_stages=3, align=16,
                               **fp16_rcr))
    registry.add(td.GemmConfig(family="splitk", block_m=32, block_n=32, block_k=32, num_stages=2, split_k=4,
                               align=1, **fp16_rcr))
    registry.add("gemm-tiled-rcr-fp16-fp16-fp32-128x128x32-w4-s3-g8-k1-e1-a16-none-bnone-d0-c0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", help=f"a packaged preset, one of {len(td.list_presets())}, e.g. "
                        "gemm_fp16_rcr_essential")
    options = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"

    registry = td.Registry()          # arch of the visible GPU, else $TILEDISPATCH_ARCH or sm_90
    declare(registry, options.preset)
    print(f"declared {len(registry)} instances for {registry.arch.name}")
    report = registry.build()         # compiles what the cache lacks, in worker processes
    print(f"build: {report}")
    assert not report.failed, report.failed

    # A GEMM with a long K and a short M and N: split-K is a candidate.
    m, n, k = (256, 256, 8192) if device == "cuda" else (40, 24, 200)
    problem = td.GemmProblem(m, n, k, dtype="fp16", layout="rcr")
    print(f"\n{problem.describe()}: supported by the registry? {bool(registry.is_supported(problem))}")
    selection = registry.select(problem)      # strategy="auto": tuning DB, then rules
    print(f"selected {selection.kernel.name} by {selection.strategy}; notes: {selection.notes}")
    print("ranking (estimated microseconds on the reference GPU, lower is better):")
    for name, score in selection.ranking[:5]:
        print(f"  {score:10.2f}  {name}")
    for kernel in registry.kernels:
        support = kernel.is_supported(problem)
        if not support:
            print(f"  not a candidate: {kernel.name}: {support.reason}")

    a = torch.randn(m, k, device=device, dtype=torch.float16)
    b = torch.randn(n, k, device=device, dtype=torch.float16).T
    out = registry.run(problem, a, b)
    ref = a.double() @ b.double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    print(f"\nran on {device}{'' if device == 'cuda' else ' (Triton interpreter)'}: relative error {err:.2e}")
    assert err < 2e-3, err

    # Save the registry (names and arch only) and load it back; building again is served by the cache.
    text = registry.to_json()
    loaded = td.Registry.from_json(text)
    assert [k.name for k in loaded.kernels] == [k.name for k in registry.kernels]
    print(f"to_json/from_json round trip: {len(loaded)} instances; rebuild: {loaded.build()}")
    assert loaded.select(problem).kernel.name == selection.kernel.name


if __name__ == "__main__":
    main()
