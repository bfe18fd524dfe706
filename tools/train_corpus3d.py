"""Real-architecture 3-D conv layers for the training sweeps: the 2-D timm layers of tools/train_corpus.py
(same models and exclusions) inflated to video convs the way I3D, R(2+1)D / S3D and X3D nets are built, so
the cost models meet video layers without the unseen zoo's torchvision video nets feeding training.

Each model gets a seeded plan: input side (SIDES), style (i3d: k x k -> t x k x k; separable: 1 x k x k plus
a t x 1 x 1 temporal conv), temporal schedule (constant, or halving with each stage from 1/8 resolution
like I3D / R3D) and stem temporal stride 1 or 2. A layer's clip length follows from the stage of its 2-D
input (CLIPS at the network input); t in {1, 3} per layer (seeded), stems 3 / 5, patchify t = temporal
stride; groups, spatial strides and padding kept, temporal padding 'same'. Instances at every clip and batch
within the corpus caps, without zoo / training signatures (train_corpus.exclude); a seeded round-robin over
the models keeps --per-direction, the same in each direction; one problems file per direction.

Usage:  python tools/train_corpus3d.py [--out benchmarks/zoo/train_real3d.json] [--seed 0] [--models A,B]
        writes OUT's stem + _<direction>.json for each of --directions (default: all three)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "zoo" / "train_real3d.json"
KIND = "tiledispatch-train-real3d"
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
SIDES = (112, 160, 224)
CLIPS = (8, 16, 32)
BATCHES = (1, 2, 4, 8, 16)       # with the zoo's 3-D batches (unseen_zoo.json 'batches')
STYLES = ("i3d", "separable")
SCHEDULES = ("constant", "follow")
P_SEPARABLE = 0.35
P_TEMPORAL = 0.5                 # t = 3 for a k x k (k >= 2) layer past the stem
P_TEMPORAL_POINTWISE = 0.2       # t = 3 for a 1 x 1 layer (SlowFast's res4 / res5 style)
FOLLOW_FROM = 2                  # 'follow': one more temporal halving per spatial halving past 1/4


def train_tool() -> Any:
    """tools/train_corpus.py as a module (tools/ on sys.path, as it imports zoo_corpus)."""
    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    import train_corpus

    return train_corpus


# ------------------------------------------------------------------------------------------------ plans


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one 2-D model is inflated: input side, style, temporal schedule, stem temporal stride."""

    side: int
    style: str
    schedule: str
    stem_stride: int

    def halvings(self, level: int) -> int:
        """Temporal halvings before a layer whose input is `level` spatial halvings below the input."""
        if level <= 0:
            return 0
        follow = max(0, level - FOLLOW_FROM) if self.schedule == "follow" else 0
        return (self.stem_stride == 2) + follow


def plan_for(model: str, seed: int) -> Plan:
    rng = random.Random(f"{seed}/{model}/plan")
    return Plan(rng.choice(SIDES), "separable" if rng.random() < P_SEPARABLE else "i3d",
                rng.choice(SCHEDULES), rng.choice((1, 2)))


def clip_after(t0: int, halvings: int) -> int:
    """The clip length after `halvings` stride-2 steps (ceil, as a padded conv gives), never below 2."""
    t = t0
    for _ in range(halvings):
        t = t if t <= 2 else -(-t // 2)
    return t


# ------------------------------------------------------------------------------------------------ inflation


def _level(ratio: float) -> int:
    return max(0, round(math.log2(ratio))) if ratio > 0 else 0


def _choices(rng: random.Random, stem: bool, kmax: int) -> tuple[int, bool]:
    """(temporal filter, whether the layer gets one) of a layer: drawn in a fixed order whatever the clip."""
    draw, stem_t = rng.random(), rng.choice((3, 5))
    if stem:
        return (stem_t if kmax >= 5 else 3 if kmax >= 2 else 1), kmax >= 2
    p = P_TEMPORAL if kmax >= 2 else P_TEMPORAL_POINTWISE
    return (3 if draw < p else 1), draw < p


def _fields(base: Mapping[str, Any], clip: int, fields: Mapping[str, Any], t: int, ts: int, pad: int
            ) -> dict[str, Any]:
    """ConvProblem fields: a 2-D conv's with a temporal dim first (filter t, stride ts, padding pad)."""
    return {**base, "spatial": [clip, *fields["spatial"]], "filter": [t, *fields["filter"]],
            "stride": [ts, *fields["stride"]], "padding": [(pad, pad), *map(tuple, fields["padding"])],
            "dilation": [1, *fields["dilation"]]}


def inflate(model: str, record: Mapping[str, Any], fields: Mapping[str, Any], plan: Plan, t0: int,
            seed: int) -> list[tuple[str, dict[str, Any]]]:
    """The 3-D convs (layer-name suffix, ConvProblem fields) of one 2-D conv at input clip t0."""
    f2, s2 = list(fields["filter"]), list(fields["stride"])
    level = _level(plan.side / max(record["input_shape"][2:]))
    t_in = clip_after(t0, plan.halvings(level))
    ts = 2 if plan.halvings(level + _level(max(s2))) > plan.halvings(level) and t_in > 2 else 1
    kmax = max(f2)
    t, temporal = _choices(random.Random(f"{seed}/{model}/{record['layer']}"), level == 0, kmax)
    base = {"c": fields["c"], "k": fields["k"], "groups": fields["groups"]}
    if kmax > 1 and f2 == s2 and all(tuple(p) == (0, 0) for p in fields["padding"]):   # patchify
        return [("", _fields(base, t_in, fields, ts, ts, 0))]
    if plan.style == "i3d" or kmax == 1:
        return [("", _fields(base, t_in, fields, t, ts, (t - 1) // 2))]
    convs = [("", _fields(base, t_in, fields, 1, 1, 0))]
    if temporal or ts == 2:      # separable: the temporal conv on the spatial conv's output
        t = max(t, 3)
        flat = {"spatial": output_size(fields), "filter": [1, 1], "stride": [1, 1], "padding": [(0, 0)] * 2,
                "dilation": [1, 1]}
        convs.append((".temporal", _fields({**base, "c": fields["k"]}, t_in, flat, t, ts, (t - 1) // 2)))
    return convs


def output_size(fields: Mapping[str, Any]) -> list[int]:
    """The output spatial size of a 2-D conv's fields."""
    return [(x + lo + hi - d * (f - 1) - 1) // s + 1 for x, f, s, (lo, hi), d in
            zip(fields["spatial"], fields["filter"], fields["stride"], fields["padding"], fields["dilation"])]


# ------------------------------------------------------------------------------------------------ pool


def conv_pool(extracted: list[dict[str, Any]], plans: Mapping[str, Plan], batches: Iterable[int],
              seed: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Layer instances (model, layer@t<clip>, batch, fwd problem) of the inflated 2-D convs at every clip
    and batch, valid, within the corpus caps and deduplicated; with the counts of what was dropped."""
    from tiledispatch.errors import BadInput
    from tiledispatch.problems import corpus
    from tiledispatch.problems.conv import ConvProblem

    layer_problem = train_tool().zoo_tool().layer_problem
    drops: dict[str, Any] = {"duplicate": 0, "over_caps": 0, "invalid": 0, "not_conv2d": {}}
    seen: set[ConvProblem] = set()
    pool = []
    for entry in extracted:
        model = entry["model"]
        for record in entry["layers"]:
            fields, why = layer_problem(record)
            if fields is not None and len(fields["spatial"]) != 2:
                fields, why = None, record["op"]
            if fields is None:
                drops["not_conv2d"][why] = drops["not_conv2d"].get(why, 0) + 1
                continue
            for t0 in CLIPS:
                for suffix, f3 in inflate(model, record, fields, plans[model], t0, seed):
                    for n in batches:
                        try:
                            fwd = ConvProblem("fwd", n, dtype="bf16", **f3)
                        except BadInput:
                            drops["invalid"] += 1
                            continue
                        if fwd.flops > corpus.CONV_MAX_FLOPS or fwd.min_bytes > corpus.CONV_MAX_BYTES:
                            drops["over_caps"] += 1
                        elif fwd in seen:
                            drops["duplicate"] += 1
                        else:
                            seen.add(fwd)
                            pool.append({"model": model, "layer": f"{record['layer']}{suffix}@t{t0}",
                                         "batch": n, "problem": fwd})
    return pool, drops


def corpus_items(extracted: list[dict[str, Any]], plans: Mapping[str, Plan], zoo: Mapping[str, Any],
                 training: Mapping[str, set[str]], batches: Iterable[int], per_direction: int, seed: int
                 ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The kept instances of the extracted conv models (train_corpus.MIN_CONVS): pooled, without zoo or
    training problems (train_corpus.exclude), at most per_direction (train_corpus.select)."""
    tc = train_tool()
    sizes = {e["model"]: tc.conv_layers(e) for e in extracted}
    conv = [e for e in extracted if sizes[e["model"]] >= tc.MIN_CONVS]
    pool, pool_drops = conv_pool(conv, plans, batches, seed)
    zoo_sigs, zoo_layers = tc.zoo_signatures(zoo)
    kept, drops = tc.exclude(pool, zoo_sigs, zoo_layers, training)
    items = tc.select(kept, per_direction, seed)
    return items, {"not_conv": {m: n for m, n in sizes.items() if n < tc.MIN_CONVS},
                   "no_layer_kept": sorted({e["model"] for e in conv} - {i["model"] for i in items}),
                   "layers": {**pool_drops, **drops}, "pool": len(pool),
                   "sampled_out": len(kept) - len(items)}


# ------------------------------------------------------------------------------------------------ models


def extract_models(names: Iterable[str], seed: int
                   ) -> tuple[list[dict[str, Any]], dict[str, Plan], list[dict[str, str]]]:
    """zoo_corpus.extract_layers of each timm model at its plan's side, else the other SIDES, else with
    img_size=side (fixed-size models); the plan's side is then the one that ran. Failures recorded."""
    zc = train_tool().zoo_tool()
    train_tool().import_timm()
    extractor = zc.load_tool("extract_model_layers")
    extracted, plans, failed = [], {}, []
    for name in names:
        plan = plan_for(name, seed)
        errors = []
        sides = (plan.side, *(s for s in SIDES if s != plan.side))
        for side, kwargs in [(s, ()) for s in sides] + [(s, (("img_size", s),)) for s in sides]:
            try:
                shape, layers = zc.extract_layers(zc.ZooModel("timm", name, side, kwargs=kwargs), extractor)
            except Exception as exc:  # noqa: BLE001 - a third-party model's failure: recorded, the run goes on
                how = f"{side}{' img_size' if kwargs else ''}"
                errors.append(f"{how}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            extracted.append({"model": name, "source": "timm", "input_shape": list(shape), "layers": layers})
            plans[name] = dataclasses.replace(plan, side=side)
            break
        else:
            failed.append({"model": name, "error": "; ".join(errors)})
            print(f"{name}: FAILED {errors[0]}", flush=True)
    return extracted, plans, failed


def distribution(items: list[dict[str, Any]], plans: Mapping[str, Plan]) -> dict[str, Any]:
    """Counts of the kept instances by filter, groups kind, batch, input clip, stride and plan."""
    def count(values: Iterable[Any]) -> dict[str, int]:
        return {str(k): v for k, v in sorted(Counter(values).items(), key=lambda kv: (-kv[1], str(kv[0])))}

    problems = [i["problem"] for i in items]
    kinds = ["dense" if p.groups == 1 else "depthwise" if p.is_depthwise else "grouped" for p in problems]
    used = [plans[m] for m in sorted({i["model"] for i in items})]
    return {"filter": count("x".join(map(str, p.filter)) for p in problems), "groups": count(kinds),
            "batch": count(p.n for p in problems),
            "clip_in": count(i["layer"].rsplit("@t", 1)[1] for i in items),
            "stride": count("x".join(map(str, p.stride)) for p in problems),
            "t": count(p.spatial[0] for p in problems),
            "plans": {"side": count(p.side for p in used), "style": count(p.style for p in used),
                      "schedule": count(p.schedule for p in used),
                      "stem_stride": count(p.stem_stride for p in used)}}


def build(args: argparse.Namespace) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The kept layer instances and the files' meta."""
    tc = train_tool()
    zc = tc.zoo_tool()
    zoo = json.loads(args.zoo.read_text())
    zoo_models = sorted(zoo["models"]["zoo"])
    training_models = sorted(set(zc.training_models()) | set(zoo["models"]["training_tables"]))
    excluded = tc.excluded_keys(zoo_models, training_models)
    batches = sorted(set(BATCHES) | set(zoo.get("batches", {}).get("3d", ())))
    timm = tc.import_timm()
    if args.models:
        names = sorted({n.strip() for n in args.models.split(",") if n.strip()})
        tc.check_allowed(names, excluded)
        name_drops: dict[str, int] = {}
    else:
        by_module = {m: timm.list_models(module=m) for m in timm.list_modules()}
        names, name_drops = tc.pick_candidates(by_module, excluded, args.per_module, args.seed)
    extracted, plans, failed = extract_models(names, args.seed)
    generated, datasets = zc.training_signatures(), tc.dataset_signatures(args.data)
    training = {d: generated[d] | datasets[d] for d in DIRECTIONS}
    items, found = corpus_items(extracted, plans, zoo, training, batches, args.per_direction, args.seed)
    used = Counter(i["model"] for i in items)
    meta = {
        "generator": "tools/train_corpus3d.py", "kind": KIND, "seed": args.seed, "versions": tc.versions(),
        "dtype": "bf16", "batches": batches, "clips": list(CLIPS), "sides": list(SIDES),
        "per_direction": args.per_direction, "per_module": None if args.models else args.per_module,
        "min_convs": tc.MIN_CONVS,
        "zoo": str(args.zoo.relative_to(ROOT)) if args.zoo.is_relative_to(ROOT) else str(args.zoo),
        "models": {"used": dict(sorted(used.items())), "candidates": names, "failed": failed,
                   "plans": {m: dataclasses.asdict(plans[m]) for m in sorted(used)},
                   "not_conv": found["not_conv"], "no_layer_kept": found["no_layer_kept"],
                   "zoo": zoo_models, "training_tables": training_models},
        "exclusions": {"model_names": name_drops, "layers": found["layers"], "pool": found["pool"],
                       "sampled_out": found["sampled_out"]},
        "distribution": distribution(items, plans),
        "signatures": {"training": {d: len(s) for d, s in training.items()},
                       "training_datasets": {d: len(s) for d, s in datasets.items()}},
    }
    return items, meta


def main(argv: list[str] | None = None) -> int:
    return train_tool().run_cli(argv, __doc__, OUT, build, ("exclusions", "distribution", "signatures"))


if __name__ == "__main__":
    sys.exit(main())
