"""The cost model: train one on a committed sweep dataset, validate it on the problems held out of training, and
select kernels with it.

Training on the full GEMM bf16 dataset takes about a minute on a few CPU cores; `--problems N` trains on the
first N problems only (faster, less accurate). No GPU is needed: selection ranks kernels without running them.

    python examples/ml_heuristic.py [--data data/h200/gemm_bf16_rcr] [--problems 200]
"""
import argparse
import tempfile
from pathlib import Path

import tiledispatch as td
from tiledispatch.bench.dataset import Dataset
from tiledispatch.ml.model import CostModel
from tiledispatch.ml.train import train
from tiledispatch.ml.validate import validate
from tiledispatch.select.selector import Plan

ROOT = Path(__file__).resolve().parent.parent


def sample(data: Path, problems: int, out: Path) -> Path:
    """A copy of the dataset holding its first `problems` problems."""
    source = Dataset(data)
    frame = source.frame()
    keep = frame["problem"].drop_duplicates().head(problems)
    manifest = source.manifest()
    target = Dataset(out)
    target.open(manifest["op"], manifest["direction"], manifest["dtype"], manifest["gpu"], resume=False, extra={})
    target.append(frame[frame["problem"].isin(set(keep))].to_dict("records"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(ROOT / "data/h200/gemm_bf16_rcr"))
    parser.add_argument("--problems", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = sample(Path(args.data), args.problems, Path(tmp) / "data")
        report = train(data, Path(tmp) / "model")
        print(f"trained a {report['kind']} on {report['rows']} rows of {report['problems']} problems "
              f"({report['holdout_problems']} held out) in {report['seconds']:.1f} s")
        result = validate(Path(tmp) / "model", data)
        for name in ("model", "model_top5", "rules"):
            s = result["strategies"][name]
            print(f"  {name:<10} mean efficiency {s['mean']:.3f}  P10 {s['p10']:.3f}  top-1 hit {s['hit']:.2f}")

        model = CostModel.load(Path(tmp) / "model", arch="sm_90")
        registry = td.Registry("sm_90")
        registry.add_preset("gemm_bf16_rcr_candidates")   # ranked only: nothing is built or run here
        problem = td.GemmProblem(4096, 1024, 4096, dtype="bf16")
        plans = [Plan(k, problem) for k in registry.kernels if k.is_supported(problem)]
        scores = model.scores(problem, [p.kernel.config for p in plans], registry.arch)
        ranked = sorted(zip(scores, plans), key=lambda pair: pair[0])
        print(f"top 3 of {len(plans)} kernels for {problem.describe()}:")
        for score, plan in ranked[:3]:
            print(f"  {score:8.3f}  {plan.kernel.name}")


if __name__ == "__main__":
    main()
