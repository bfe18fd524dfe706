"""tiledispatch.nn.convert on small models and on torchvision / timm-style layer mixes: what it takes, what it
leaves (and why), that it keeps the module and Parameter objects, shape-level checks under fake tensors (no
kernel runs), and forward + backward against the stock model (CPU lane, interpreter)."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import tiledispatch.nn as tdnn


def small_model() -> nn.Sequential:
    """conv + bn + relu, a grouped conv, a depthwise conv with bias, pooling and a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


class Bottleneck(nn.Module):
    """ResNeXt-style: 1x1, grouped 3x3 stride 2, 1x1, and a strided 1x1 projection shortcut."""

    def __init__(self, c: int = 8, width: int = 8, groups: int = 4) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 2, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, 2 * c, 1, bias=False), nn.BatchNorm2d(2 * c)
        self.down = nn.Sequential(nn.Conv2d(c, 2 * c, 1, 2, bias=False), nn.BatchNorm2d(2 * c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        return torch.relu(self.bn3(self.conv3(y)) + self.down(x))


class InvertedResidual(nn.Module):
    """MobileNetV2-style: 1x1 expand, depthwise 3x3, 1x1 project, with a squeeze-excitation gate (1x1 convs
    with bias on a 1x1 map: the tensors whose size-1 strides once broke the kernels)."""

    def __init__(self, c: int = 8, expand: int = 2) -> None:
        super().__init__()
        hidden = c * expand
        self.expand = nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden, bias=False),
                                nn.BatchNorm2d(hidden), nn.ReLU6())
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(hidden, 4, 1), nn.ReLU(),
                                nn.Conv2d(4, hidden, 1), nn.Sigmoid())
        self.project = nn.Sequential(nn.Conv2d(hidden, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(self.expand(x))
        return x + self.project(y * self.se(y))


class ConvNeXtBlock(nn.Module):
    """ConvNeXt-style: depthwise 7x7 with bias, then LayerNorm and an MLP of Linears on channels-last
    pixels (N, H, W, C), and a residual."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc1, self.fc2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(y))))
        return x + y.permute(0, 3, 1, 2)


def r2plus1d_block(c: int = 4, mid: int = 6) -> nn.Sequential:
    """R(2+1)D-style: a spatial 1x3x3 then a temporal 3x1x1 Conv3d."""
    return nn.Sequential(nn.Conv3d(c, mid, (1, 3, 3), padding=(0, 1, 1), bias=False), nn.BatchNorm3d(mid),
                         nn.ReLU(), nn.Conv3d(mid, c, (3, 1, 1), padding=(1, 0, 0), bias=False))


def mixed_left_model() -> nn.Sequential:
    """Layers convert must leave on torch, one of each reason, around a Conv1d it takes."""
    return nn.Sequential(nn.Conv1d(4, 4, 3, padding=1), nn.Conv1d(4, 4, 3, padding=1, padding_mode="reflect"),
                         nn.ConvTranspose1d(4, 4, 2, stride=2), nn.LazyConv1d(4, 1),
                         nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 4, 1)))


MIXES = [("small", small_model, (2, 3, 9, 8)), ("bottleneck", Bottleneck, (2, 8, 7, 6)),
         ("inverted_residual", InvertedResidual, (2, 8, 5, 6)), ("convnext", ConvNeXtBlock, (1, 8, 5, 4)),
         ("r2plus1d", r2plus1d_block, (1, 4, 3, 4, 5))]


def _layers(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if isinstance(m, (nn.modules.conv._ConvNd, nn.Linear))]


@pytest.mark.parametrize("name, make, x_shape", MIXES)
def test_convert_takes_every_layer_and_keeps_modules_and_parameters(name, make, x_shape):
    model = make()
    modules, params = _layers(model), list(model.parameters())
    report = tdnn.convert(model)
    assert not report.left and len(report.taken) == len(modules)
    assert _layers(model) == modules and all(a is b for a, b in zip(model.parameters(), params))
    assert all(type(m).__module__ == "tiledispatch.nn.modules" for m in modules)
    assert str(report).splitlines()[-1] == f"{len(modules)} layers on tiledispatch, 0 left on torch"
    assert _fake_forward(model, x_shape).shape == make()(torch.zeros(x_shape)).shape


def _fake_forward(model: nn.Module, x_shape: tuple) -> torch.Tensor:
    """A shape-level check of every layer: the model (a copy, in eval mode so nothing is written to its real
    buffers) on a fake input; the ops run their fake kernels, no kernel runs."""
    model = copy.deepcopy(model).eval()
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        return model(mode.from_tensor(torch.empty(x_shape)))


def test_convert_leaves_what_it_cannot_serve_with_reasons():
    model = mixed_left_model()
    hooked = model[0]
    calls = []
    hooked.register_forward_hook(lambda *args: calls.append(1))
    report = tdnn.convert(model, exclude=["4"])
    assert [layer.name for layer in report.taken] == ["0"] and type(model[0]) is tdnn.Conv1d
    reasons = {layer.name: layer.reason for layer in report.left}
    assert "padding_mode='reflect'" in reasons["1"]
    assert "transposed" in reasons["2"] and "lazy" in reasons["3"]
    assert reasons["4"] == "excluded by the caller"
    assert all(type(m) is not tdnn.Conv1d for m in model[1:])
    assert model[0] is hooked and hooked._forward_hooks   # same object, hooks kept
    table = str(report)
    assert "torch: padding_mode='reflect'" in table and "tiledispatch" in table.splitlines()[2]
    again = tdnn.convert(model)                            # converting again reports, changes nothing new
    assert [layer.name for layer in again.taken] == ["0"] and model[0] is hooked
    assert "parametrized" in {layer.name: layer.reason for layer in again.left}["4"]


def test_convert_leaves_float64_layers_and_subclasses_with_their_own_forward():
    class MyConv(nn.Conv2d):
        def forward(self, x):
            return super().forward(x) * 2

    model = nn.Sequential(nn.Conv2d(2, 2, 1).double(), MyConv(2, 2, 1), nn.MultiheadAttention(4, 2))
    report = tdnn.convert(model)
    reasons = {layer.name: layer.reason for layer in report.left}
    assert "torch.float64" in reasons["0"] and "subclass" in reasons["1"]
    assert "MultiheadAttention" in reasons["2.out_proj"]
    assert not report.taken and type(model[0]) is nn.Conv2d


def test_convert_takes_subclasses_that_compute_as_torch_does():
    """Like torchvision's Conv3DSimple: only __init__ differs; converted, it stays an instance of it."""
    class Simple(nn.Conv3d):
        def __init__(self, c_in, c_out):
            super().__init__(c_in, c_out, (1, 3, 3), padding=(0, 1, 1), bias=False)

    class Head(nn.Linear):
        pass

    model = nn.Sequential(Simple(2, 4), nn.Flatten(), Head(4 * 2 * 3 * 3, 5))
    report = tdnn.convert(model)
    assert not report.left and [layer.kind for layer in report.taken] == ["Simple", "Head"], str(report)
    assert isinstance(model[0], Simple) and isinstance(model[0], tdnn.Conv3d) and model[0].td_reason is None
    assert isinstance(model[2], Head) and isinstance(model[2], tdnn.Linear)
    assert tdnn.convert(model).taken == report.taken    # converting again finds them served


def _forward_backward(model: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    """The output, the input gradient and every parameter gradient of one training step, in float64."""
    x = x.to(next(model.parameters()).dtype).requires_grad_()
    y = model(x)
    y.backward(grad.to(y.dtype))
    return [t.detach().double() for t in (y, x.grad, *(p.grad for p in model.parameters()))]


@pytest.mark.slow
@pytest.mark.usefixtures("small_defaults")   # small default registries: what runs, not what selection picks
@pytest.mark.parametrize("name, make, x_shape", MIXES)
def test_converted_model_trains_like_the_stock_one(name, make, x_shape):
    """Forward and backward of the converted model (NCHW input, converted inside the first op) against the
    stock model with the same weights, both fp32, measured against the stock model in float64: the output, the
    input gradient and every parameter gradient are as close as the stock fp32 ones (BatchNorm's weight
    gradients cancel, so fp32 itself is ~1e-3 off there)."""
    torch.manual_seed(5)
    stock = make()
    model, ref = copy.deepcopy(stock), copy.deepcopy(stock).double()
    tdnn.convert(model)
    x = torch.randn(x_shape)
    grad = torch.randn(stock(x).shape)
    want = _forward_backward(ref, x, grad)
    names = ["output", "input grad", *(n for n, _ in stock.named_parameters())]
    ours, fp32s = _forward_backward(model, x, grad), _forward_backward(stock, x, grad)
    for what, got, fp32, exact in zip(names, ours, fp32s, want):
        scale = exact.norm().clamp_min(1e-12)
        ours_err, torch_err = float((got - exact).norm() / scale), float((fp32 - exact).norm() / scale)
        assert ours_err < max(1e-5, 4 * torch_err), (what, ours_err, torch_err)


TORCHVISION = ["resnet18", "resnext50_32x4d", "mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0",
               "regnet_y_400mf", "convnext_tiny", "shufflenet_v2_x0_5"]


@pytest.mark.parametrize("arch", TORCHVISION)
def test_torchvision_models_convert_and_pass_a_shape_check(arch):
    models = pytest.importorskip("torchvision.models")
    model = getattr(models, arch)()
    layers = _layers(model)
    report = tdnn.convert(model)
    assert not report.left and len(report.taken) == len(layers), str(report)
    assert _fake_forward(model, (2, 3, 64, 64)).shape == (2, 1000)


@pytest.mark.parametrize("arch", ["resnet50d", "convnext_nano", "regnety_002", "efficientnet_b0",
                                  "mobilenetv3_small_050", "seresnext26d_32x4d"])
def test_timm_models_convert_and_pass_a_shape_check(arch):
    timm = pytest.importorskip("timm")
    model = timm.create_model(arch, pretrained=False)
    layers = _layers(model)
    report = tdnn.convert(model)
    assert len(report.layers) == len(layers)
    assert all("subclass" in layer.reason for layer in report.left), str(report)   # e.g. timm's Conv2dSame
    assert _fake_forward(model, (2, 3, 64, 64)).shape == (2, model.num_classes)
