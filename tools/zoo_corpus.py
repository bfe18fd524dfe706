"""Build the unseen zoo of issue 36: conv problems of public model definitions (timm / torchvision, no
weights) that none of the training tables came from, and GEMMs of LLM configs outside `LLM_PROJECTIONS`, with
every problem whose signature the training corpus holds dropped. The GPU validation of selection runs on it
(benchmarks/rank_space.py --zoo); how it is built: docs/design/problems.md.

Each model is run once on the meta device (shapes only) with tools/extract_model_layers.py's hooks; each
Conv2d / Conv3d becomes the bf16 problem of its layer at every batch of BATCHES (fwd, bwd_data, bwd_weight
of the same layer), within the corpus caps. A seeded round-robin over the models keeps at most --per-direction
layer instances (the same ones in every direction) and --gemms GEMMs, every model represented.

Usage:  python tools/zoo_corpus.py [--out benchmarks/zoo/unseen_zoo.json] [--seed 0] [--models NAME,...]
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import json
import math
import random
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "zoo" / "unseen_zoo.json"
FORMAT = 1
KIND = "tiledispatch-unseen-zoo"
DTYPE = "bf16"
LAYOUT = "rcr"
DIRECTIONS = ("fwd", "bwd_data", "bwd_weight")
BATCHES = {2: (1, 8, 32, 64), 3: (1, 4, 8)}
SHARE_3D = 130                     # of --per-direction: the 3-D layer instances kept at most
GEMM_TOKENS = (1, 16, 128, 512, 2048, 8192)


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """A model definition of the zoo: library, name, input side (2-D, 0: timm's pretrained_cfg) or clip."""

    source: str
    name: str
    side: int = 0
    clip: tuple[int, int, int] | None = None
    kwargs: tuple[tuple[str, Any], ...] = ()


def _tv(name: str, side: int = 224, **kw: Any) -> ZooModel:
    return ZooModel("torchvision", name, side, kwargs=tuple(kw.items()))


def _video(name: str, clip: tuple[int, int, int] = (16, 224, 224)) -> ZooModel:
    return ZooModel("torchvision", name, clip=clip)


# Input sides are the models' evaluation sizes (torchvision weights' transforms, timm's pretrained_cfg).
ZOO_MODELS: tuple[ZooModel, ...] = (
    _tv("alexnet"), _tv("vgg11_bn"), _tv("densenet169"),
    _tv("googlenet", aux_logits=False, init_weights=True),
    _tv("inception_v3", 299, aux_logits=False, init_weights=True), _tv("mnasnet0_5"),
    _tv("shufflenet_v2_x2_0"), _tv("squeezenet1_0"), _tv("regnet_x_3_2gf"), _tv("regnet_y_800mf"),
    _tv("efficientnet_b3", 300), _tv("efficientnet_v2_s", 384), _tv("mobilenet_v3_small"), _tv("maxvit_t"),
    _tv("convnext_large"), _tv("wide_resnet101_2"),
    *(ZooModel("timm", name) for name in (
        "ghostnet_100", "cspdarknet53", "darknet53", "hrnet_w18_small", "dla34", "rexnet_100", "resnest26d",
        "res2net50_26w_4s", "dpn68", "poolformer_s12", "edgenext_small", "mobilevit_s", "efficientvit_b0",
        "repvgg_a2", "nf_resnet26", "resnetv2_50x1_bit", "mixnet_s", "seresnext26d_32x4d", "fastvit_t8",
        "coatnet_0_rw_224", "lcnet_100", "tinynet_a", "hgnetv2_b0", "mobilenetv4_conv_small",
        "inception_next_tiny", "fbnetc_100", "xception41", "gernet_s", "ese_vovnet19b_dw", "selecsls42b",
        "regnetz_b16", "cs3darknet_s", "efficientformer_l1", "tf_efficientnetv2_b0", "convmixer_768_32",
        "nfnet_l0", "resnet26t", "visformer_small")),
    # torchvision.models.video (r3d_18 and r2plus1d_18 are training tables)
    _video("mc3_18", (16, 112, 112)), _video("s3d"), _video("mvit_v1_b"), _video("mvit_v2_s"),
    _video("swin3d_t"), _video("swin3d_s"), _video("swin3d_b"),
)

# The model definitions the training tables came from (problems/models.py CONV_MODELS, conv_suites.py
# suites; docs/design/problems.md), with the names timm / torchvision give the same architectures.
TRAINING_MODELS: tuple[str, ...] = (
    "resnet50", "resnext50_32x4d", "mobilenet_v2", "mobilenetv2_100", "x3d_m", "resnext3d_101", "r3d_18",
    "resnet18", "resnet34", "resnext101_32x8d", "regnet_x_400mf", "regnetx_004", "regnet_y_1_6gf",
    "regnety_016", "efficientnet_b0", "tf_efficientnet_b0", "mobilenet_v3_large", "mobilenetv3_large_100",
    "convnext_tiny", "convnext_base", "convnextv2_nano", "convnext_tiny_det", "conformer", "r2plus1d_18",
    "ir_csn_101", "mobilenet_v2_3d", "wav2vec2", "mamba", "c3d", "i3d", "shufflenet3d",
    "fasterrcnn_resnet50_fpn", "yolov8m",
)

# LLM configs outside LLM_PROJECTIONS: (source, hidden, heads, kv heads, head dim, FFN, vocab, gated), the
# values of each model's published config.json (Hugging Face hub, the named repository).
LLM_CONFIGS: dict[str, tuple[str, int, int, int, int, int, int, bool]] = {
    "gemma2_2b": ("google/gemma-2-2b", 2304, 8, 4, 256, 9216, 256000, True),
    "gemma2_27b": ("google/gemma-2-27b", 4608, 32, 16, 128, 36864, 256000, True),
    "phi3_medium": ("microsoft/Phi-3-medium-4k-instruct", 5120, 40, 10, 128, 17920, 32064, True),
    "falcon_7b": ("tiiuae/falcon-7b", 4544, 71, 1, 64, 18176, 65024, False),
    "falcon_40b": ("tiiuae/falcon-40b", 8192, 128, 8, 64, 32768, 65024, False),
    "olmo_1b": ("allenai/OLMo-1B", 2048, 16, 16, 128, 8192, 50304, True),
    "olmo_7b": ("allenai/OLMo-7B", 4096, 32, 32, 128, 11008, 50304, True),
    "yi_6b": ("01-ai/Yi-6B", 4096, 32, 4, 128, 11008, 64000, True),
    "yi_34b": ("01-ai/Yi-34B", 7168, 56, 8, 128, 20480, 64000, True),
    "qwen2_5_14b": ("Qwen/Qwen2.5-14B", 5120, 40, 8, 128, 13824, 152064, True),
    "qwen2_5_32b": ("Qwen/Qwen2.5-32B", 5120, 40, 8, 128, 27648, 152064, True),
    "mistral_nemo_12b": ("mistralai/Mistral-Nemo-Base-2407", 5120, 32, 8, 128, 14336, 131072, True),
    "tinyllama_1_1b": ("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T", 2048, 32, 4, 64, 5632, 32000,
                       True),
    "stablelm2_1_6b": ("stabilityai/stablelm-2-1_6b", 2048, 32, 32, 64, 5632, 100352, True),
    "internlm2_7b": ("internlm/internlm2-7b", 4096, 32, 8, 128, 14336, 92544, True),
    "starcoder2_3b": ("bigcode/starcoder2-3b", 3072, 24, 2, 128, 12288, 49152, False),
    "opt_1_3b": ("facebook/opt-1.3b", 2048, 32, 32, 64, 8192, 50272, False),
    "llama2_13b": ("meta-llama/Llama-2-13b-hf", 5120, 40, 40, 128, 13824, 32000, True),
    "gemma_2b": ("google/gemma-2b", 2048, 8, 1, 256, 16384, 256000, True),
    "gemma_7b": ("google/gemma-7b", 3072, 16, 16, 256, 24576, 256000, True),
    "phi2": ("microsoft/phi-2", 2560, 32, 32, 80, 10240, 51200, False),
    "qwen2_5_1_5b": ("Qwen/Qwen2.5-1.5B", 1536, 12, 2, 128, 8960, 151936, True),
    "qwen2_5_3b": ("Qwen/Qwen2.5-3B", 2048, 16, 2, 128, 11008, 151936, True),
    "smollm2_1_7b": ("HuggingFaceTB/SmolLM2-1.7B", 2048, 32, 32, 64, 8192, 49152, True),
}
# DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite): multi-head latent attention (no q LoRA, kv LoRA rank 512,
# rope dim 64, nope / v head dims 128, 16 heads), 64 routed experts of FFN 1408 plus 2 shared, a dense first
# layer of FFN 10944; (proj, (N, K)).
DEEPSEEK_V2_LITE: tuple[tuple[str, tuple[int, int]], ...] = (
    ("q", (16 * (128 + 64), 2048)), ("kv_a", (512 + 64, 2048)), ("kv_b", (16 * (128 + 128), 512)),
    ("o", (2048, 16 * 128)), ("dense_gate_up", (2 * 10944, 2048)), ("dense_down", (2048, 10944)),
    ("expert_gate_up", (2 * 1408, 2048)), ("expert_down", (2048, 1408)), ("shared_gate_up", (2 * 2816, 2048)),
    ("shared_down", (2048, 2816)), ("router", (64, 2048)), ("lm_head", (102400, 2048)),
)


def load_tool(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"tools/{name}.py not found")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


def model_key(name: str) -> str:
    """A model name compared across libraries: lower case, without tf_ and separators."""
    return re.sub(r"[^a-z0-9]", "", name.lower().removeprefix("tf_"))


def training_models() -> list[str]:
    """TRAINING_MODELS with every model tag of the training tables (CONV_MODELS, the conv suites)."""
    from tiledispatch.problems import conv_suites as cs
    from tiledispatch.problems.models import CONV_MODELS

    suites = {case.model for name in cs.SUITES + cs.HARD_SUITES for case in cs.suite(name)}
    return sorted(set(TRAINING_MODELS) | set(CONV_MODELS) | suites)


def check_unseen(models: Iterable[ZooModel]) -> None:
    training = {model_key(name) for name in training_models()}
    clash = [m.name for m in models if model_key(m.name) in training]
    if clash:
        raise SystemExit(f"zoo models {clash} are training tables' models")


# ------------------------------------------------------------------------------------------------ extraction

_TV_SHIM: list[Any] = []   # keeps the op definitions of import_torchvision alive


def import_torchvision() -> Any:
    """torchvision; a wheel whose compiled ops do not load (a CUDA build beside a CPU torch) fails while
    registering fake kernels of two ops it never defined: their schemas are defined here and the import
    retried. Only the model definitions are used (no detection ops)."""
    try:
        import torchvision
    except RuntimeError as exc:
        if "torchvision::" not in str(exc):
            raise
        import torch

        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
        lib = torch.library.Library("torchvision", "DEF")
        for op in ("nms", "qnms"):
            lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _TV_SHIM.append(lib)
        import torchvision
    return torchvision


def build(model: ZooModel) -> Any:
    tv = import_torchvision()
    if model.source == "timm":
        import timm

        return timm.create_model(model.name, pretrained=False, **dict(model.kwargs))
    family = tv.models.video if model.clip else tv.models
    return getattr(family, model.name)(weights=None, **dict(model.kwargs))


def input_shape(model: ZooModel, net: Any) -> tuple[int, ...]:
    if model.clip:
        return (1, 3, *model.clip)
    side = model.side or net.pretrained_cfg["input_size"][-1]
    return (1, 3, side, side)


def extract_layers(model: ZooModel, extractor: Any) -> tuple[tuple[int, ...], list[dict[str, Any]]]:
    """The input shape and the distinct conv / linear layers (extract_model_layers records) of one model."""
    import torch

    try:
        with torch.device("meta"):
            net = build(model)
    except NotImplementedError:   # a constructor that reads its weights (torchvision regnets): built on cpu
        net = build(model).to("meta")
    net.eval()
    shape = input_shape(model, net)
    example = torch.empty(shape, device="meta")
    layers, _ = extractor.extract(net, example)
    return shape, layers


_SAME_SUBCLASSES = ("Conv2dSame", "StdConv2dSame", "ScaledStdConv2dSame")
_PLAIN_SUBCLASSES = ("StdConv2d", "ScaledStdConv2d")   # standardized weights, torch's conv otherwise


def _tf_same(size: int, f: int, s: int, d: int) -> tuple[int, int]:
    """TensorFlow 'SAME' padding (timm pad_same): the extra pixel of an odd total goes right."""
    total = max((-(-size // s) - 1) * s + (f - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def layer_problem(record: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The batch-free fields of the forward problem of a recorded Conv2d / Conv3d, or None and why not."""
    if record["op"] not in ("Conv2d", "Conv3d"):
        return None, record["op"]
    cls = record["class"].rsplit(".", 1)[-1]
    if record.get("own_forward") and cls not in _SAME_SUBCLASSES + _PLAIN_SUBCLASSES:
        return None, f"subclass {cls}"
    spatial = list(record["input_shape"][2:])
    f, s, d = record["kernel_size"], record["stride"], record["dilation"]
    pad = record["padding"]
    if cls in _SAME_SUBCLASSES:
        padding = [_tf_same(*args) for args in zip(spatial, f, s, d)]
    elif pad == "valid":
        padding = [(0, 0)] * len(f)
    elif pad == "same":
        padding = [((di * (fi - 1)) // 2, di * (fi - 1) - (di * (fi - 1)) // 2) for fi, di in zip(f, d)]
    else:
        padding = [(p, p) for p in pad]
    if record["padding_mode"] != "zeros":   # padded outside the conv: a larger unpadded input
        spatial = [x + left + right for x, (left, right) in zip(spatial, padding)]
        padding = [(0, 0)] * len(f)
    return {"c": record["in_channels"], "k": record["out_channels"], "groups": record["groups"],
            "spatial": spatial, "filter": f, "stride": s, "padding": padding, "dilation": d}, ""


# ------------------------------------------------------------------------------------------------ training


def training_signatures() -> dict[str, set[str]]:
    """Signatures of every problem the training corpus can hold, per direction and 'gemm': the default conv
    corpora (sweeps take a seeded subset of them: tools/gpu_sweeps.sh --count 1100) for ndims (2, 3) and
    (1, 2, 3), the benchmark suites at their own and the zoo's batches, the default GEMM corpus."""
    from tiledispatch.problems import conv_suites as cs
    from tiledispatch.problems import corpus

    out: dict[str, set[str]] = {}
    batches = sorted({None, *BATCHES[2], *BATCHES[3]}, key=lambda b: -1 if b is None else b)
    for direction in DIRECTIONS:
        sigs = {e.problem.signature() for nd in ((2, 3), (1, 2, 3))
                for e in corpus.conv_corpus(direction, DTYPE, ndims=nd)}
        for name in cs.SUITES + cs.HARD_SUITES:
            for batch in batches:
                sigs |= {case.for_direction(direction).signature() for case in cs.suite(name, DTYPE, batch)}
        out[direction] = sigs
    out["gemm"] = {e.problem.signature() for e in corpus.gemm_corpus(DTYPE, LAYOUT)}
    return out


# --------------------------------------------------------------------------------------------------- convs


def conv_pool(extracted: list[dict[str, Any]], training: dict[str, set[str]]
              ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Layer instances (model, layer, batch, fwd problem) whose three directions are valid, within the
    corpus caps, new to the zoo and none in training; with the counts of what was dropped and why."""
    from tiledispatch.errors import BadInput
    from tiledispatch.problems import corpus
    from tiledispatch.problems.conv import ConvProblem
    from tiledispatch.problems.conv_suites import with_direction

    drops: dict[str, Any] = {"in_training": {d: 0 for d in DIRECTIONS}, "in_training_any": 0,
                             "duplicate": 0, "over_caps": 0, "invalid": 0, "not_conv": {}}
    seen: set[ConvProblem] = set()
    pool = []
    for entry in extracted:
        for record in entry["layers"]:
            fields, why = layer_problem(record)
            if fields is None:
                drops["not_conv"][why] = drops["not_conv"].get(why, 0) + 1
                continue
            for n in BATCHES[len(fields["spatial"])]:
                try:
                    fwd = ConvProblem("fwd", n, dtype=DTYPE, **fields)
                except BadInput:
                    drops["invalid"] += 1
                    continue
                if fwd.flops > corpus.CONV_MAX_FLOPS or fwd.min_bytes > corpus.CONV_MAX_BYTES:
                    drops["over_caps"] += 1
                    continue
                if fwd in seen:
                    drops["duplicate"] += 1
                    continue
                seen.add(fwd)
                hits = [d for d in DIRECTIONS if with_direction(fwd, d).signature() in training[d]]
                for d in hits:
                    drops["in_training"][d] += 1
                if hits:
                    drops["in_training_any"] += 1
                    continue
                pool.append({"model": entry["model"], "layer": record["layer"], "batch": n, "problem": fwd})
    return pool, drops


def round_robin(items: list[dict[str, Any]], limit: int, rng: random.Random) -> list[dict[str, Any]]:
    """At most `limit` items, taken in turn from each model's shuffled items (every model represented while
    limit >= models), in their original order."""
    by_model: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        by_model.setdefault(item["model"], []).append(index)
    for indices in by_model.values():
        rng.shuffle(indices)
    chosen: list[int] = []
    queues = list(by_model.values())
    while len(chosen) < limit and any(queues):
        for queue in queues:
            if queue and len(chosen) < limit:
                chosen.append(queue.pop())
    return [items[i] for i in sorted(chosen)]


def sample_convs(pool: list[dict[str, Any]], per_direction: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    three = [item for item in pool if item["problem"].ndim == 3]
    two = [item for item in pool if item["problem"].ndim == 2]
    kept3 = round_robin(three, min(SHARE_3D, per_direction), rng)
    return round_robin(two, per_direction - len(kept3), rng) + kept3


# ---------------------------------------------------------------------------------------------------- GEMM


def llm_shapes() -> list[tuple[str, str, int, int]]:
    """(model, proj, N, K) of every LLM of LLM_CONFIGS and DeepSeek-V2-Lite."""
    shapes = []
    for model, (_, hidden, heads, kv, head_dim, ffn, vocab, gated) in LLM_CONFIGS.items():
        q, kvd = heads * head_dim, kv * head_dim
        projs = (("qkv", q + 2 * kvd, hidden), ("o", hidden, q),
                 ("gate_up" if gated else "fc1", (2 if gated else 1) * ffn, hidden),
                 ("down" if gated else "fc2", hidden, ffn), ("lm_head", vocab, hidden))
        shapes += [(model, proj, n, k) for proj, n, k in projs]
    shapes += [("deepseek_v2_lite", proj, n, k) for proj, (n, k) in DEEPSEEK_V2_LITE]
    return shapes


def gemm_pool(training: set[str]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    from tiledispatch.problems import corpus
    from tiledispatch.problems.gemm import GemmProblem

    drops = {"in_training": 0, "duplicate": 0, "over_caps": 0}
    seen: set[str] = set()
    pool = []
    for model, proj, n, k in llm_shapes():
        for m in GEMM_TOKENS:
            problem = GemmProblem(m, n, k, dtype=DTYPE, layout=LAYOUT)
            sig = problem.signature()
            if problem.flops > corpus.GEMM_MAX_FLOPS or problem.min_bytes > corpus.GEMM_MAX_BYTES:
                drops["over_caps"] += 1
            elif sig in seen:
                drops["duplicate"] += 1
            elif sig in training:
                drops["in_training"] += 1
            else:
                seen.add(sig)
                pool.append({"model": model, "layer": proj, "tokens": m, "problem": problem})
    return pool, drops


# ---------------------------------------------------------------------------------------------------- file


def _entry(item: dict[str, Any], problem: Any) -> str:
    head = {k: v for k, v in item.items() if k != "problem"}
    return json.dumps({**head, "problem": problem.to_dict()}, separators=(",", ":"))


def write(path: Path, header: dict[str, Any], convs: list[dict[str, Any]], gemms: list[dict[str, Any]]
          ) -> None:
    """One entry a line: the header, conv entries per direction, GEMM entries."""
    from tiledispatch.problems.conv_suites import with_direction

    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + re.sub(r"\s+", " ", m.group(1)) + "]",
                  json.dumps(header, indent=1))   # lists of scalars on one line
    parts = [text[:-2] + ',\n "conv": {']
    for i, direction in enumerate(DIRECTIONS):
        lines = ",\n".join(_entry(item, with_direction(item["problem"], direction)) for item in convs)
        parts.append(f'{"," if i else ""}\n  "{direction}": [\n{lines}\n  ]')
    lines = ",\n".join(_entry(item, item["problem"]) for item in gemms)
    parts.append(f'\n }},\n "gemm": [\n{lines}\n ]\n}}\n')
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(parts))


def _counts(items: list[dict[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item["model"]] = out.get(item["model"], 0) + 1
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-direction", type=int, default=400, help="conv layer instances kept")
    parser.add_argument("--gemms", type=int, default=400, help="GEMMs kept")
    parser.add_argument("--models", help="comma-separated zoo model names (default: all)")
    args = parser.parse_args(argv)
    from tiledispatch.problems.models import LLM_PROJECTIONS

    models = [m for m in ZOO_MODELS if not args.models or m.name in args.models.split(",")]
    check_unseen(models)
    extractor = load_tool("extract_model_layers")
    extracted, failed = [], []
    for model in models:
        try:
            shape, layers = extract_layers(model, extractor)
        except Exception as exc:  # noqa: BLE001 - a third-party model's failure: recorded, the run goes on
            failed.append({"model": f"{model.source}.{model.name}", "error": f"{type(exc).__name__}: {exc}"})
            print(f"{model.name}: FAILED {type(exc).__name__}: {exc}", flush=True)
            continue
        extracted.append({"model": model.name, "source": model.source, "input_shape": list(shape),
                          "layers": layers})
        print(f"{model.name}: {len(layers)} distinct layers at {shape}", flush=True)
    training = training_signatures()
    pool, conv_drops = conv_pool(extracted, training)
    convs = sample_convs(pool, args.per_direction, args.seed)
    gpool, gemm_drops = gemm_pool(training["gemm"])
    gemms = round_robin(gpool, args.gemms, random.Random(args.seed))
    conv_drops["sampled_out"] = len(pool) - len(convs)
    gemm_drops["sampled_out"] = len(gpool) - len(gemms)
    header = {
        "format": FORMAT, "kind": KIND, "generator": "tools/zoo_corpus.py", "seed": args.seed,
        "versions": extractor.versions(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "dtype": DTYPE, "gemm_layout": LAYOUT, "batches": {f"{k}d": v for k, v in BATCHES.items()},
        "gemm_tokens": GEMM_TOKENS,
        "models": {"zoo": {e["model"]: {"source": e["source"], "input_shape": e["input_shape"]}
                           for e in extracted},
                   "training_tables": training_models(), "failed": failed,
                   "llm": {name: cfg[0] for name, cfg in LLM_CONFIGS.items()}
                   | {"deepseek_v2_lite": "deepseek-ai/DeepSeek-V2-Lite"},
                   "llm_training": sorted(LLM_PROJECTIONS)},
        "exclusions": {"conv": conv_drops, "gemm": gemm_drops},
        "counts": {"conv_per_direction": len(convs),
                   "conv_by_ndim": {f"{nd}d": sum(i["problem"].ndim == nd for i in convs) for nd in (2, 3)},
                   "conv_models": len(_counts(convs)), "conv_by_model": _counts(convs),
                   "gemm": len(gemms), "gemm_models": len(_counts(gemms)), "gemm_by_model": _counts(gemms),
                   "training_signatures": {k: len(v) for k, v in training.items()}},
    }
    write(args.out, header, convs, gemms)
    print(json.dumps({k: header[k] for k in ("exclusions", "counts")}, indent=1))
    print(f"{len(extracted)} models ({len(failed)} failed): {len(convs)} conv layer instances per direction, "
          f"{len(gemms)} GEMMs -> {args.out} ({math.ceil(args.out.stat().st_size / 1024)} KiB)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
