"""Record every conv / linear layer of public model definitions (timm, torchvision; no weights) with the input
shape it sees, for the CPU-lane model-zoo check (tests/nn/test_model_zoo_layers.py: each layer converts and
each of its problems has a kernel, without compiling).

Each model of MODELS is built (pretrained=False), run once on a small input with forward hooks on every
nn.Conv1d/2d/3d, ConvTranspose and nn.Linear (and their subclasses), and each layer is recorded with its
class, input shape and hyper-parameters (channels, kernel, stride, padding incl. 'same' / padding_mode,
dilation, groups, bias, dtype), deduplicated per model by those fields (`count` layers share them). Layers the
forward never calls are listed per model. A model that fails to build or run is recorded under `failed`.

Usage:  python tools/extract_model_layers.py --out tests/data/model_layers.json [--device cpu|meta]
            [--models NAME,...] [--size 64] [--video 4x32x32] [--list]
--device meta runs shapes only (no data; any size is free); cpu runs real small tensors.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FORMAT = 1


@dataclasses.dataclass(frozen=True)
class ModelDef:
    """A public model definition: `source` (timm / torchvision / project), the name its library knows, and
    the input it needs: 2-D images (min_size: smallest square side it accepts, 0: --size) or video clips."""

    source: str
    name: str
    video: bool = False
    min_size: int = 0
    kwargs: tuple[tuple[str, Any], ...] = ()
    clip: tuple[int, int, int] | None = None   # a video net's fixed clip size (None: --video)

    @property
    def key(self) -> str:
        return f"{self.source}.{self.name}"


def _tv(name: str, **kw: Any) -> ModelDef:
    return ModelDef("torchvision", name, kwargs=tuple(kw.items()))


def _timm(name: str, min_size: int = 0) -> ModelDef:
    return ModelDef("timm", name, min_size=min_size)


MODELS: tuple[ModelDef, ...] = (
    # torchvision, image classification
    _tv("resnet18"), _tv("resnet50"), _tv("resnext50_32x4d"), _tv("wide_resnet50_2"),
    _tv("regnet_x_1_6gf"), _tv("regnet_y_1_6gf"), _tv("regnet_y_800mf"),
    _tv("mobilenet_v2"), _tv("mobilenet_v3_large"), _tv("mobilenet_v3_small"),
    _tv("efficientnet_b0"), _tv("efficientnet_v2_s"), _tv("convnext_tiny"),
    _tv("densenet121"), _tv("shufflenet_v2_x1_0"), _tv("squeezenet1_1"), _tv("mnasnet1_0"),
    _tv("googlenet", aux_logits=False, init_weights=True),
    dataclasses.replace(_tv("inception_v3", aux_logits=False, init_weights=True), min_size=75),
    dataclasses.replace(_tv("vit_b_16"), min_size=224),   # patch embedding: a 16x16 stride-16 Conv2d
    _tv("swin_t"),
    # torchvision, video
    ModelDef("torchvision", "r3d_18", video=True), ModelDef("torchvision", "r2plus1d_18", video=True),
    ModelDef("torchvision", "mc3_18", video=True),
    ModelDef("torchvision", "s3d", video=True, clip=(16, 224, 224)),   # its last pool is a fixed 2x7x7
    # timm
    _timm("convnext_nano"), _timm("convnextv2_nano"), _timm("regnety_016"), _timm("regnetx_016"),
    _timm("efficientnet_b0"), _timm("tf_efficientnet_b0"), _timm("mobilenetv3_large_100"),
    _timm("ghostnet_100"), _timm("cspdarknet53"), _timm("cspresnet50"), _timm("darknet53"),
    _timm("hrnet_w18_small"), _timm("resnet50d"), _timm("seresnext26d_32x4d"), _timm("mixnet_s"),
    _timm("dla34"), _timm("rexnet_100"), _timm("resnest26d"), _timm("res2net50_26w_4s"),
    _timm("dpn68"), _timm("poolformer_s12"), _timm("edgenext_small"), _timm("mobilevit_s"),
    _timm("efficientvit_b0"), _timm("repvgg_a2"), _timm("nf_resnet26"), _timm("resnetv2_50x1_bit"),
    _timm("vit_small_patch16_224", min_size=224), _timm("levit_128s", min_size=224),
    # this project: X3D-M (src/tiledispatch/testing/x3d.py)
    ModelDef("project", "x3d_m", video=True),
)


def build(model: ModelDef) -> Any:
    """The model of a definition, without weights (timm / torchvision imported here, not at import time)."""
    kwargs = dict(model.kwargs)
    if model.source == "timm":
        import timm

        return timm.create_model(model.name, pretrained=False, **kwargs)
    if model.source == "torchvision":
        import torchvision

        family = torchvision.models.video if model.video else torchvision.models
        return getattr(family, model.name)(weights=None, **kwargs)
    if model.source == "project" and model.name == "x3d_m":
        from tiledispatch.testing.x3d import x3d_m

        return x3d_m()
    raise KeyError(f"no builder for {model.key}")


def input_shape(model: ModelDef, size: int, video: tuple[int, int, int]) -> tuple[int, ...]:
    """Batch 1: (1, 3, S, S) with S = max(size, min_size), or (1, 3, T, H, W) for video nets."""
    if model.video:
        return (1, 3, *(model.clip or video))
    side = max(size, model.min_size)
    return (1, 3, side, side)


def _torch_classes() -> tuple[type, ...]:
    import torch

    return (torch.nn.modules.conv._ConvNd, torch.nn.Linear)


def _base_name(module: Any) -> str:
    """The torch class a layer is (or derives from): Conv1d / Conv2d / Conv3d / ConvTranspose2d / Linear."""
    import torch

    nn = torch.nn
    bases = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
             nn.Linear)
    for base in bases:
        if isinstance(module, base):
            return base.__name__
    return type(module).__mro__[1].__name__


def layer_fields(module: Any, x: Any) -> dict[str, Any]:
    """The recorded fields of one conv / linear module called on input x (everything but its name)."""
    import torch

    cls = type(module)
    fields: dict[str, Any] = {"op": _base_name(module), "class": f"{cls.__module__}.{cls.__qualname__}",
                              "input_shape": list(x.shape),
                              "dtype": str(module.weight.dtype).removeprefix("torch.")}
    base = getattr(torch.nn, fields["op"])
    if cls is not base:   # a subclass: whether it computes differently from torch's layer
        fields["own_forward"] = any(getattr(cls, name, None) is not getattr(base, name, None)
                                    for name in ("forward", "_conv_forward"))
    if hasattr(module, "in_features"):
        fields.update(in_features=module.in_features, out_features=module.out_features,
                      bias=module.bias is not None)
        return fields
    padding = module.padding if isinstance(module.padding, str) else list(module.padding)
    fields.update(in_channels=module.in_channels, out_channels=module.out_channels,
                  kernel_size=list(module.kernel_size), stride=list(module.stride), padding=padding,
                  padding_mode=module.padding_mode, dilation=list(module.dilation), groups=module.groups,
                  bias=module.bias is not None, transposed=bool(module.transposed))
    if module.transposed:
        fields["output_padding"] = list(module.output_padding)
    return fields


def extract(model: Any, example: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Run model(example) once with hooks; returns the layers (deduplicated by their fields, in call order,
    each with the first layer's name and a count) and the names of conv / linear layers never called."""
    import torch

    seen: dict[str, dict[str, Any]] = {}
    called: set[str] = set()
    handles = []

    def hook(name: str) -> Callable[..., None]:
        def record(module: Any, args: tuple, _output: Any) -> None:
            called.add(name)
            if not args or not isinstance(args[0], torch.Tensor):
                raise TypeError(f"{name}: first argument is {type(args[0]).__name__ if args else 'missing'}, "
                                "not a tensor")
            fields = layer_fields(module, args[0])
            key = json.dumps(fields, sort_keys=True)
            if key in seen:
                seen[key]["count"] += 1
            else:
                seen[key] = {"layer": name, **fields, "count": 1}
        return record

    layers: list[tuple[str, Any]] = [(name, m) for name, m in model.named_modules()
                                     if isinstance(m, _torch_classes())]
    try:
        for name, module in layers:
            handles.append(module.register_forward_hook(hook(name)))
        with torch.no_grad():
            model(example)
    finally:
        for handle in handles:
            handle.remove()
    return list(seen.values()), [name for name, _ in layers if name not in called]


def extract_model(model: ModelDef, device: str, size: int, video: tuple[int, int, int]) -> dict[str, Any]:
    import torch

    shape = input_shape(model, size, video)
    with torch.device(device):
        net = build(model).eval()
        example = torch.randn(shape)
    layers, uncalled = extract(net, example)
    return {"model": model.key, "source": model.source, "input_shape": list(shape), "layers": layers,
            "layer_count": sum(layer["count"] for layer in layers), "uncalled": uncalled}


def versions() -> dict[str, str | None]:
    import torch

    out: dict[str, str | None] = {"torch": torch.__version__}
    for name in ("torchvision", "timm"):
        try:
            out[name] = __import__(name).__version__
        except ImportError:
            out[name] = None
    return out


def run(models: list[ModelDef], device: str, size: int, video: tuple[int, int, int], out: Path
        ) -> dict[str, Any]:
    """Extract every model (a failure is recorded and the run goes on), writing `out` after each."""
    data: dict[str, Any] = {"format": FORMAT, "kind": "extracted",
                            "generator": "tools/extract_model_layers.py", "device": device, "size": size,
                            "video": list(video), "versions": versions(),
                            "date": datetime.datetime.now().isoformat(timespec="seconds"), "models": [],
                            "failed": []}
    for model in models:
        start = time.perf_counter()
        try:
            entry = extract_model(model, device, size, video)
        except Exception as exc:  # noqa: BLE001 - a third-party model's failure: recorded, the run goes on
            data["failed"].append({"model": model.key, "error": f"{type(exc).__name__}: {exc}",
                                   "traceback": traceback.format_exc(limit=-3)})
            print(f"{model.key}: FAILED {type(exc).__name__}: {exc}", flush=True)
        else:
            data["models"].append(entry)
            print(f"{model.key}: {len(entry['layers'])} distinct of {entry['layer_count']} layers called, "
                  f"{len(entry['uncalled'])} uncalled ({time.perf_counter() - start:.1f} s)", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1) + "\n")
    return data


def _video(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"--video {text!r}: expected TxHxW, e.g. 4x32x32")
    return parts[0], parts[1], parts[2]


def select(names: str | None) -> list[ModelDef]:
    if not names:
        return list(MODELS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    chosen = [m for m in MODELS if m.key in wanted or m.name in wanted]
    missing = [n for n in wanted if not any(n in (m.key, m.name) for m in MODELS)]
    if missing:
        raise SystemExit(f"unknown models {missing}; --list shows them")
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "model_layers.json")
    parser.add_argument("--device", choices=("cpu", "meta"), default="cpu")
    parser.add_argument("--models", help="comma-separated names (resnet50 or torchvision.resnet50)")
    parser.add_argument("--size", type=int, default=64, help="side of the 2-D input (models' minimum wins)")
    parser.add_argument("--video", type=_video, default=(4, 32, 32), help="video clip TxHxW")
    parser.add_argument("--list", action="store_true", help="print the model names and exit")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(m.key for m in MODELS))
        return 0
    data = run(select(args.models), args.device, args.size, args.video, args.out)
    layers = sum(len(m["layers"]) for m in data["models"])
    print(f"{len(data['models'])} models ({layers} distinct layers), {len(data['failed'])} failed "
          f"-> {args.out}")
    return 1 if data["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
