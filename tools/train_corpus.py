"""Real 2-D conv layers for the training sweeps: bf16 problems of timm model definitions that are neither
the unseen zoo's models (benchmarks/zoo/unseen_zoo.json) nor the training tables' (tools/zoo_corpus.py), so
the cost models meet real layers without the zoo's validation leaking into training.

Candidates: up to --per-module seeded picks of each timm module (or --models); a model with fewer than
MIN_CONVS distinct Conv2d problems is no conv model. Layers are extracted on the meta device and made problems
at the zoo's 2-D batches by tools/zoo_corpus.py; a layer instance is dropped where any direction's signature
is a training one (data/h200 datasets, zoo_corpus.training_signatures) or a zoo one, and where the zoo holds
the same layer at any batch. A seeded round-robin over the models keeps --per-direction instances, the same
in each direction; one problems file (`tiledispatch sweep --problems`) per direction. timm imports
torchvision, which this venv lacks: a stub stands in for it (nothing of it runs on the meta path).

Usage:  python tools/train_corpus.py [--out benchmarks/zoo/train_real2d.json] [--seed 0] [--models A,B]
        writes OUT's stem + _<direction>.json for each of --directions (default: all three)
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.abc
import importlib.machinery
import importlib.util
import json
import random
import sys
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "zoo" / "train_real2d.json"
ZOO = ROOT / "benchmarks" / "zoo" / "unseen_zoo.json"
DATA = ROOT / "data" / "h200"
KIND = "tiledispatch-train-real2d"
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
PER_DIRECTION = 300
PER_MODULE = 3
MIN_CONVS = 8                 # distinct 2-D conv problems (batch 1) a model needs to count as a conv model
# The zoo's torchvision models and the timm names of the same architectures (timm's regnetx_032 is
# torchvision's regnet_x_3_2gf, ...): excluded like the zoo's own names.
ZOO_TWINS: dict[str, tuple[str, ...]] = {
    "regnet_x_3_2gf": ("regnetx_032",), "regnet_y_800mf": ("regnety_008", "regnety_008_tv"),
    "mnasnet0_5": ("mnasnet_050",), "mobilenet_v3_small": ("mobilenetv3_small_100",),
    "maxvit_t": ("maxvit_tiny_tf_224",),
}


def zoo_tool() -> Any:
    """tools/zoo_corpus.py as a module (tools are scripts, not a package: imported from tools/)."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import zoo_corpus

    return zoo_corpus


# ------------------------------------------------------------------------------------------------ models


def excluded_keys(zoo_models: Iterable[str], training_models: Iterable[str]) -> dict[str, str]:
    """Model keys (zoo_corpus.model_key: case, separators and tf_ ignored) that may not be used -> 'zoo' or
    'training'; a zoo model's timm twins (ZOO_TWINS) count as zoo models."""
    key = zoo_tool().model_key
    out = {key(name): "training" for name in training_models}
    for name in zoo_models:
        for alias in (name, *ZOO_TWINS.get(name, ())):
            out[key(alias)] = "zoo"
    return out


def pick_candidates(by_module: Mapping[str, Iterable[str]], excluded: Mapping[str, str], per_module: int,
                    seed: int) -> tuple[list[str], dict[str, int]]:
    """Up to per_module models of each module (seeded, the modules and their names sorted first), none
    excluded and no timm test model; with the counts of the names left out and why."""
    key = zoo_tool().model_key
    rng = random.Random(seed)
    drops = {"zoo": 0, "training": 0, "test_model": 0}
    chosen: list[str] = []
    for module in sorted(by_module):
        allowed = []
        for name in sorted(set(by_module[module])):
            why = "test_model" if name.startswith("test_") else excluded.get(key(name))
            if why:
                drops[why] += 1
            else:
                allowed.append(name)
        chosen += rng.sample(allowed, min(per_module, len(allowed)))
    return sorted(set(chosen)), drops


def check_allowed(names: Iterable[str], excluded: Mapping[str, str]) -> None:
    key = zoo_tool().model_key
    clash = {name: excluded[key(name)] for name in names if key(name) in excluded}
    if clash:
        raise SystemExit(f"--models: {clash} are zoo or training tables' models")


class _StubMeta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__name__}.{name}")


def _stub_class(name: str) -> type:
    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"torchvision is not installed: {name} is a stub (tools/train_corpus.py)")
    return _StubMeta(name, (), {"__init__": refuse})


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name)
        module.__path__ = []
        classes: dict[str, type] = {}

        def attribute(name: str) -> type:
            if name.startswith("__"):
                raise AttributeError(name)
            return classes.setdefault(name, _stub_class(f"{spec.name}.{name}"))
        module.__getattr__ = attribute   # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _StubFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, _StubLoader(), is_package=True)
        return None


def import_timm() -> Any:
    """timm; where torchvision is not installed, a stub module tree stands in for the names timm imports
    (its classes refuse to be built), last on sys.meta_path so that a real torchvision always wins."""
    if importlib.util.find_spec("torchvision") is None and not any(
            isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.append(_StubFinder())
    import timm

    return timm


def versions() -> dict[str, str]:
    import torch

    timm = import_timm()
    real = not isinstance(importlib.util.find_spec("torchvision").loader, _StubLoader)  # type: ignore[union-attr]
    return {"torch": torch.__version__, "timm": timm.__version__,
            "torchvision": "installed" if real else "stub (not installed)"}


def extract_models(names: Iterable[str]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """zoo_corpus.extract_layers of each timm model (its pretrained_cfg input size), failures recorded."""
    zc = zoo_tool()
    import_timm()
    extractor = zc.load_tool("extract_model_layers")
    extracted, failed = [], []
    for name in names:
        try:
            shape, layers = zc.extract_layers(zc.ZooModel("timm", name), extractor)
        except Exception as exc:  # noqa: BLE001 - a third-party model's failure: recorded, the run goes on
            failed.append({"model": name, "error": f"{type(exc).__name__}: {exc}"})
            print(f"{name}: FAILED {type(exc).__name__}: {exc}", flush=True)
            continue
        extracted.append({"model": name, "source": "timm", "input_shape": list(shape), "layers": layers})
    return extracted, failed


def conv_layers(entry: Mapping[str, Any]) -> int:
    """Distinct 2-D conv problems of one extracted model (at batch 1)."""
    from tiledispatch.errors import BadInput
    from tiledispatch.problems.conv import ConvProblem

    layer_problem = zoo_tool().layer_problem
    problems = set()
    for record in entry["layers"]:
        fields, _ = layer_problem(record)
        if fields is not None and len(fields["spatial"]) == 2:
            try:
                problems.add(ConvProblem("fwd", 1, dtype="bf16", **fields))
            except BadInput:
                continue
    return len(problems)


# ------------------------------------------------------------------------------------------------ signatures


def layer_key(problem: Any) -> str:
    """A conv problem's signature at batch 1 (the same layer at any batch has the same key)."""
    return dataclasses.replace(problem, n=1).signature()


def zoo_signatures(zoo: Mapping[str, Any]) -> tuple[dict[str, set[str]], set[str]]:
    """The signatures of the zoo's conv problems per direction, and the layer keys of its fwd problems."""
    from tiledispatch.problems.conv import ConvProblem

    sigs = {d: {ConvProblem.from_dict(e["problem"]).signature() for e in zoo["conv"][d]} for d in DIRECTIONS}
    layers = {layer_key(ConvProblem.from_dict(e["problem"])) for e in zoo["conv"]["fwd"]}
    return sigs, layers


def dataset_signatures(data: Path) -> dict[str, set[str]]:
    """The problems (signatures) of the conv datasets data/<gpu>/conv_<direction>_bf16 that exist."""
    from tiledispatch.bench.dataset import Dataset

    out: dict[str, set[str]] = {}
    for direction in DIRECTIONS:
        dataset = Dataset(data / f"conv_{direction}_bf16")
        out[direction] = set(dataset.frame(["problem"])["problem"]) if dataset.exists() else set()
    return out


def exclude(pool: list[dict[str, Any]], zoo: Mapping[str, set[str]], zoo_layers: set[str],
            training: Mapping[str, set[str]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pool's layer instances (zoo_corpus.conv_pool items) none of whose directions' signatures is a zoo
    or a training one and whose layer the zoo holds at no batch; with the counts of those dropped (per
    direction for signatures; an instance dropped for several reasons counts once under 'any')."""
    from tiledispatch.problems.conv_suites import with_direction

    drops: dict[str, Any] = {"zoo_signature": dict.fromkeys(DIRECTIONS, 0), "zoo_layer_other_batch": 0,
                             "training_signature": dict.fromkeys(DIRECTIONS, 0), "any": 0}
    kept = []
    for item in pool:
        sigs = {d: with_direction(item["problem"], d).signature() for d in DIRECTIONS}
        in_zoo = [d for d in DIRECTIONS if sigs[d] in zoo[d]]
        in_training = [d for d in DIRECTIONS if sigs[d] in training[d]]
        for d in in_zoo:
            drops["zoo_signature"][d] += 1
        for d in in_training:
            drops["training_signature"][d] += 1
        other_batch = not in_zoo and layer_key(item["problem"]) in zoo_layers
        drops["zoo_layer_other_batch"] += other_batch
        if in_zoo or in_training or other_batch:
            drops["any"] += 1
        else:
            kept.append(item)
    return kept, drops


def select(pool: list[dict[str, Any]], per_direction: int, seed: int) -> list[dict[str, Any]]:
    """zoo_corpus.round_robin over the models: every model represented while per_direction >= models."""
    return zoo_tool().round_robin(pool, per_direction, random.Random(seed))


# ------------------------------------------------------------------------------------------------ files


def paths(out: Path, directions: Iterable[str]) -> dict[str, Path]:
    """One problems file per direction: OUT's stem + _<direction>.json."""
    return {d: out.with_name(f"{out.stem}_{d}.json") for d in directions}


def write(out: Path, directions: Iterable[str], items: list[dict[str, Any]], meta: dict[str, Any]
          ) -> dict[str, Path]:
    """The problems file of each direction (corpus.save_problems), tagged model/layer@n<batch>."""
    from tiledispatch.problems.conv_suites import with_direction
    from tiledispatch.problems.corpus import CorpusEntry, save_problems

    files = paths(out, directions)
    for direction, path in files.items():
        entries = [CorpusEntry(f"{i['model']}/{i['layer']}@n{i['batch']}",
                               with_direction(i["problem"], direction)) for i in items]
        path.parent.mkdir(parents=True, exist_ok=True)
        save_problems(path, entries, {**meta, "direction": direction})
    return files


def _counts(items: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item["model"]] = out.get(item["model"], 0) + 1
    return dict(sorted(out.items()))


def corpus_items(extracted: list[dict[str, Any]], zoo: Mapping[str, Any], training: Mapping[str, set[str]],
                 per_direction: int, seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The layer instances kept of the extracted models (conv models only: MIN_CONVS), deduplicated
    (zoo_corpus.conv_pool), without zoo or training problems (`exclude`), at most per_direction of them
    (`select`); with what was dropped and why."""
    sizes = {e["model"]: conv_layers(e) for e in extracted}
    conv = [e for e in extracted if sizes[e["model"]] >= MIN_CONVS]
    pool, pool_drops = zoo_tool().conv_pool(conv, dict.fromkeys(DIRECTIONS, set()))
    del pool_drops["in_training"], pool_drops["in_training_any"]     # nothing is passed as training there
    zoo_sigs, zoo_layers = zoo_signatures(zoo)
    kept, drops = exclude(pool, zoo_sigs, zoo_layers, training)
    items = select(kept, per_direction, seed)
    return items, {"not_conv": {m: n for m, n in sizes.items() if n < MIN_CONVS},
                   "no_layer_kept": sorted({e["model"] for e in conv} - set(_counts(items))),
                   "layers": {**pool_drops, **drops}, "sampled_out": len(kept) - len(items),
                   "zoo": {d: len(s) for d, s in zoo_sigs.items()}, "zoo_layers": len(zoo_layers)}


def build(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The kept layer instances and the files' meta."""
    zc = zoo_tool()
    zoo = json.loads(args.zoo.read_text())
    zoo_models = sorted(zoo["models"]["zoo"])
    training_models = sorted(set(zc.training_models()) | set(zoo["models"]["training_tables"]))
    excluded = excluded_keys(zoo_models, training_models)
    timm = import_timm()
    if args.models:
        names = sorted({n.strip() for n in args.models.split(",") if n.strip()})
        check_allowed(names, excluded)
        name_drops: dict[str, int] = {}
    else:
        by_module = {m: timm.list_models(module=m) for m in timm.list_modules()}
        names, name_drops = pick_candidates(by_module, excluded, args.per_module, args.seed)
    extracted, failed = extract_models(names)
    generated, datasets = zc.training_signatures(), dataset_signatures(args.data)
    training = {d: generated[d] | datasets[d] for d in DIRECTIONS}
    items, found = corpus_items(extracted, zoo, training, args.per_direction, args.seed)
    meta = {
        "generator": "tools/train_corpus.py", "kind": KIND, "seed": args.seed, "versions": versions(),
        "dtype": "bf16", "batches": list(zc.BATCHES[2]), "per_direction": args.per_direction,
        "per_module": None if args.models else args.per_module, "min_convs": MIN_CONVS,
        "zoo": str(args.zoo.relative_to(ROOT)) if args.zoo.is_relative_to(ROOT) else str(args.zoo),
        "models": {"used": _counts(items), "candidates": names, "failed": failed,
                   "not_conv": found["not_conv"], "no_layer_kept": found["no_layer_kept"],
                   "zoo": zoo_models, "training_tables": training_models},
        "exclusions": {"model_names": name_drops, "layers": found["layers"],
                       "sampled_out": found["sampled_out"]},
        "signatures": {"zoo": found["zoo"], "zoo_layers": found["zoo_layers"],
                       "training": {d: len(s) for d, s in training.items()},
                       "training_datasets": {d: len(s) for d, s in datasets.items()}},
    }
    return items, meta


def run_cli(argv: list[str] | None, doc: str | None, out: Path, build_items: Any, shown: tuple[str, ...]
            ) -> int:
    """The command line of a corpus tool (this one, tools/train_corpus3d.py): parse, `build_items(args)` ->
    (items, meta), write one problems file per direction under `out`'s stem, print meta's `shown` keys."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=out, help="stem of the files (+ _<direction>.json)")
    parser.add_argument("--zoo", type=Path, default=ZOO)
    parser.add_argument("--data", type=Path, default=DATA, help="directory of the conv training datasets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-direction", type=int, default=PER_DIRECTION, help="layer instances kept")
    parser.add_argument("--per-module", type=int, default=PER_MODULE, help="candidates per timm module")
    parser.add_argument("--models", help="comma-separated timm model names (default: picked per module)")
    parser.add_argument("--directions", default=",".join(DIRECTIONS), help="comma-separated, default all")
    args = parser.parse_args(argv)
    directions = [d.strip() for d in args.directions.split(",") if d.strip()]
    if not directions or set(directions) - set(DIRECTIONS):
        raise SystemExit(f"--directions {args.directions!r}: choose among {', '.join(DIRECTIONS)}")
    items, meta = build_items(args)
    if not items:
        raise SystemExit("no layer instance left after the exclusions")
    files = write(args.out, directions, items, meta)
    print(json.dumps({k: meta[k] for k in shown}, indent=1))
    print(f"{len(meta['models']['used'])} models of {len(meta['models']['candidates'])} candidates, "
          f"{len(items)} layer instances per direction -> {', '.join(str(p) for p in files.values())}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_cli(argv, __doc__, OUT, build, ("exclusions", "signatures"))


if __name__ == "__main__":
    sys.exit(main())
