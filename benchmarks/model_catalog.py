"""The models benchmarks/models.py measures: public model definitions (timm / torchvision, no weights), the
project's X3D-M, the loss comparison's small models and the CPU smoke models, each with the libraries it may
come from in order of preference, its input shape and its summary group.

Importing this module does no work (the libraries are imported by `build`)."""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A benchmarked model: `choices` (source, name) tried in order, the first whose library imports wins;
    `input` the per-sample shape; `group` for summaries ('2d-dw-grouped' is the issue's geomean group)."""

    name: str
    choices: tuple[tuple[str, str], ...]
    input: tuple[int, ...] = (3, 224, 224)
    group: str = "2d-dense"

    @property
    def video(self) -> bool:
        return len(self.input) == 4


VIDEO = (3, 16, 112, 112)
MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("convnext_nano", (("timm", "convnext_nano"), ("torchvision", "convnext_tiny")),
              group="2d-dw-grouped"),
    ModelSpec("regnety_016", (("timm", "regnety_016"), ("torchvision", "regnet_y_1_6gf")),
              group="2d-dw-grouped"),
    ModelSpec("mobilenet_v2", (("torchvision", "mobilenet_v2"),), group="2d-dw-grouped"),
    ModelSpec("efficientnet_b0", (("timm", "efficientnet_b0"), ("torchvision", "efficientnet_b0")),
              group="2d-dw-grouped"),
    ModelSpec("resnext50_32x4d", (("torchvision", "resnext50_32x4d"),), group="2d-dw-grouped"),
    ModelSpec("resnet50", (("torchvision", "resnet50"),)),
    ModelSpec("mobilenet_v3_large", (("torchvision", "mobilenet_v3_large"),), group="2d-se"),
    ModelSpec("r2plus1d_18", (("torchvision.models.video", "r2plus1d_18"),), VIDEO, "3d-dense"),
    ModelSpec("r3d_18", (("torchvision.models.video", "r3d_18"),), VIDEO, "3d-dense"),
    ModelSpec("x3d_m", (("project", "x3d_m"),), (3, 16, 224, 224), "3d-depthwise"),
)
# compiled passes take the models in this order (the reduce-overhead references first)
COMPILE_ORDER = ("x3d_m", "resnet50", "convnext_nano", "regnety_016", "mobilenet_v2", "efficientnet_b0",
                 "resnext50_32x4d", "r2plus1d_18", "mobilenet_v3_large", "r3d_18", "smoke_cnn", "x3d_tiny")
# --loss-model may also name these (small models: 100 steps stay cheap)
LOSS_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("resnet18", (("torchvision", "resnet18"),)),
    ModelSpec("mobilenet_v3_small", (("torchvision", "mobilenet_v3_small"),), group="2d-se"),
)
# --smoke: what builds here (no timm / torchvision next to the CPU torch wheel), at tiny sizes
SMOKE_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("smoke_cnn", (("project", "smoke_cnn"),), (3, 16, 16), "2d-dw-grouped"),
    ModelSpec("x3d_tiny", (("project", "x3d_tiny"),), (3, 2, 4, 4), "3d-depthwise"),
)


# -- builders ------------------------------------------------------------------------------------------------
def _smoke_cnn() -> Any:
    """A small 2-D net with what the zoo has: strided stem, depthwise 3x3, squeeze-excitation 1x1 convs with
    bias on a 1x1 map, a strided 1x1, a linear head."""
    from torch import nn

    class SmokeCNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
            self.dw = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8),
                                    nn.SiLU())
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(8, 8, 1), nn.ReLU(),
                                    nn.Conv2d(8, 8, 1), nn.Sigmoid())
            self.down = nn.Sequential(nn.Conv2d(8, 16, 1, 2, bias=False), nn.BatchNorm2d(16), nn.ReLU())
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

        def forward(self, x: Any) -> Any:
            y = self.dw(self.stem(x))
            return self.head(self.down(y * self.se(y)))

    return SmokeCNN()


def build(spec: ModelSpec) -> tuple[Any, str]:
    """The model (fp32, CPU, no weights) and the 'source.name' it came from (first importable choice)."""
    import importlib

    errors = []
    for source, name in spec.choices:
        if source == "project":
            from tiledispatch.testing import x3d

            builders = {"x3d_m": x3d.x3d_m, "smoke_cnn": _smoke_cnn,
                        "x3d_tiny": lambda: x3d.X3D(widths=(4,), depths=(2,), expansion=1.0, num_classes=10)}
            return builders[name](), f"project.{name}"
        try:
            module = importlib.import_module(source)
        except ImportError as exc:
            errors.append(f"{source}: {exc}")
            continue
        if source == "timm":
            return module.create_model(name, pretrained=False), f"timm.{name}"
        family = module if source.startswith("torchvision.models") else module.models
        return getattr(family, name)(weights=None), f"{source}.{name}"
    raise ImportError(f"{spec.name}: no library for {spec.choices}: {'; '.join(errors)}")
