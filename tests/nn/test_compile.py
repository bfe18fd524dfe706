"""torch.compile(fullgraph=True) of converted models on the CPU lane: no graph breaks (fullgraph raises on
one), the custom ops stay in the graph, and the compiled forward and backward match eager."""
from __future__ import annotations

import copy
import operator
import re

import pytest
import torch
from torch import nn

import tiledispatch.nn as tdnn

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("small_defaults")]   # small default registries


def _model() -> nn.Sequential:
    """conv + bn + relu, a depthwise conv, pooling and a linear head (2-D fp32 convs without bias, a linear
    with bias)."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))


def _ops_in(graph_module: torch.fx.GraphModule) -> list[str]:
    return [str(node.target) for node in graph_module.graph.nodes
            if node.op == "call_function" and "tiledispatch" in str(node.target)]


def test_fullgraph_compile_keeps_the_ops_in_one_graph():
    """Dynamo captures the converted model in one graph holding the tiledispatch ops (no kernel runs:
    a backend that only records the graph)."""
    model = _model()
    tdnn.convert(model)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch.compile(model, backend=record, fullgraph=True)(torch.randn(2, 3, 9, 8))
    assert len(graphs) == 1
    assert _ops_in(graphs[0]) == ["tiledispatch.conv.default"] * 2 + ["tiledispatch.gemm.default"]


def _guard_sources_not_tag_safe(model: nn.Module, x: torch.Tensor) -> list[str]:
    """Sources under the model (L['self']...) whose guards Dynamo cannot skip by dict tags: with recursive
    dict tags on (the default of the torch on our GPU machine), a module whose attributes are all immutable
    and unchanged since the last check has its guards skipped; one list attribute makes Dynamo check all
    of them, and those of its parents, on every call."""
    torch._dynamo.reset()
    torch.compile(model, backend="eager", fullgraph=True)(x)
    (entry,) = torch._dynamo.eval_frame._debug_get_cache_entry_list(type(model).forward.__code__)
    sources = (re.search(r"source=(.*?), (accessed_by|type=)", line)
               for line in str(entry.guard_manager).splitlines() if "tag_safe=(False" in line)
    return sorted({found.group(1) for found in sources if found and found.group(1).startswith("L['self']")})


@torch._dynamo.config.patch(use_recursive_dict_tags_for_guards=True)
def test_converted_modules_keep_guards_skippable():
    """Stop 50 (H200): a converted EfficientNet-B0's guard check took 104 us per compiled step against
    stock's 13 us, because each conv's geometry held lists. Converted modules must leave every guard under
    the model skippable, as stock modules do."""
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = _model()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x)

    x = torch.randn(2, 3, 9, 8)
    assert _guard_sources_not_tag_safe(Net(), x) == []
    model = Net()
    tdnn.convert(model, step_check=False)
    assert _guard_sources_not_tag_safe(model, x) == []
    # with the step check: its hook on the first layer is a plain function (stop 51: the check object as
    # the hook left the path from the model to that layer unskippable)
    model = Net()
    tdnn.convert(model)
    assert _guard_sources_not_tag_safe(model, x) == []
    torch._dynamo.reset()


def test_dynamic_shapes_trace_once():
    """With dynamic=True the fake kernels compute shapes and strides symbolically: a new batch and image size
    reuse the one graph."""
    model = _model()
    tdnn.convert(model)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(model, backend=record, fullgraph=True, dynamic=True)
    assert compiled(torch.randn(2, 3, 9, 8)).shape == (2, 5)
    assert compiled(torch.randn(3, 3, 11, 7)).shape == (3, 5)
    assert len(graphs) == 1


def _assert_compiled_matches(reference: nn.Module, model: nn.Module, x: torch.Tensor) -> None:
    """torch.compile(model, fullgraph=True)'s output and gradients (input, parameters) match reference's,
    and every parameter keeps the gradient tensor the compiled backward wrote (AccumulateGrad steals it
    only when its strides match the parameter's; a clone costs a copy per parameter and step)."""
    compiled = torch.compile(model, fullgraph=True)
    written: dict[str, int] = {}
    for name, p in model.named_parameters():
        p.register_hook(lambda g, name=name: written.__setitem__(name, g.data_ptr()))
    xr, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    yr, yc = reference(xr), compiled(xc)
    assert torch.allclose(yc, yr, rtol=1e-4, atol=1e-5)
    grad = torch.randn(yr.shape)
    yr.backward(grad)
    yc.backward(grad)
    assert torch.allclose(xc.grad, xr.grad, rtol=1e-4, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=1e-4, atol=1e-5), name
    cloned = [name for name, p in model.named_parameters() if p.grad.data_ptr() != written[name]]
    assert not cloned, f"AccumulateGrad cloned the gradients of {cloned}"


def test_inductor_fullgraph_matches_eager_forward_and_backward():
    torch.manual_seed(7)
    model = _model()
    tdnn.convert(model)
    _assert_compiled_matches(model, copy.deepcopy(model), torch.randn(2, 3, 9, 8))


def test_conv_bias_is_added_outside_the_op_where_inductor_can_fuse_it():
    """Under compile a conv with bias runs the op without it and adds the bias in the graph (Inductor fuses
    the add into the next kernel); the result matches eager."""
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
    tdnn.convert(model)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randn(2, 3, 6, 5)
    got = torch.compile(model, backend=record, fullgraph=True)(x)
    (conv,) = [n for n in graphs[0].graph.nodes if "tiledispatch.conv" in str(n.target)]
    assert conv.args[2] is None, "bias passed into the opaque op"
    assert any(n.target in (torch.add, operator.add) for n in graphs[0].graph.nodes)
    torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)


def test_eager_calls_routed_to_torch_do_not_recompile():
    """A compiled converted model is not traced again when eager calls in between settle layers on torch's
    path (`_td_last` set): the traced forward does not read that attribute, so no guard depends on it."""
    model = _model()
    tdnn.convert(model, step_check=False)
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(model, backend=record, fullgraph=True)
    x = torch.randn(2, 3, 9, 8)
    compiled(x)
    for module in model.modules():
        if hasattr(module, "_td_last"):
            module._td_last = (x.shape, torch.is_grad_enabled())
    compiled(x)
    assert len(graphs) == 1



class _SqueezeExcite(nn.Module):
    """x * sigmoid(conv(relu(conv(mean(x))))): the 1x1-spatial convs get (N, C, 1, 1) tensors whose size-1
    strides are not the canonical channels-last ones (the ops take them as views, ops/layout.py)."""

    def __init__(self, channels: int, act: nn.Module | None = None) -> None:
        super().__init__()
        self.reduce, self.expand = nn.Conv2d(channels, 4, 1), nn.Conv2d(4, channels, 1)
        self.act = nn.ReLU() if act is None else act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * torch.sigmoid(self.expand(self.act(self.reduce(s))))


def test_squeeze_excitation_compiles_and_matches_stock():
    torch.manual_seed(3)
    stock = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _SqueezeExcite(8))
    stock = stock.to(memory_format=torch.channels_last)
    model = copy.deepcopy(stock)
    tdnn.convert(model)
    _assert_compiled_matches(stock, model, torch.randn(2, 3, 6, 5).to(memory_format=torch.channels_last))


def _forward_graph_outputs(model: nn.Module, x: torch.Tensor) -> int:
    """How many values the forward graph of one compiled training step returns (aot_autograd with the
    min-cut partitioner, as Inductor partitions it): each one costs host time per CUDA-graph replay."""
    from functorch.compile import min_cut_rematerialization_partition
    from torch._functorch.aot_autograd import aot_module_simplified

    counts: list[int] = []

    def forward_compiler(gm: torch.fx.GraphModule, example: list) -> object:
        counts.append(len(next(n for n in gm.graph.nodes if n.op == "output").args[0]))
        return gm.forward

    def backend(gm: torch.fx.GraphModule, example: list) -> object:
        return aot_module_simplified(gm, example, fw_compiler=forward_compiler,
                                     bw_compiler=lambda g, _: g.forward,
                                     partition_fn=min_cut_rematerialization_partition)

    torch._dynamo.reset()   # else a Sequential.forward compiled before at other shapes traces dynamic here
    torch.compile(model, backend=backend, fullgraph=True)(x.clone().requires_grad_()).sum().backward()
    torch._dynamo.reset()
    return counts[0]


def test_squeeze_excitation_bias_stays_in_the_op_and_saves_no_more_than_stock():
    """On a 1x1 input the bias goes into the op: added outside, the partitioner saved each SE conv's bias
    as one more forward output (an EfficientNet-B0's forward graph saved 16 more than stock's, stop 54)."""
    torch.manual_seed(4)
    stock = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.SiLU(),
                          _SqueezeExcite(8, nn.SiLU()))   # SiLU's backward needs the conv's output
    stock = stock.to(memory_format=torch.channels_last)
    model = copy.deepcopy(stock)
    tdnn.convert(model)
    x = torch.randn(2, 3, 6, 5).to(memory_format=torch.channels_last)
    assert _forward_graph_outputs(model, x) == _forward_graph_outputs(stock, x)


class _Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4 * 6 * 6, 3)

    def block(self, x: torch.Tensor) -> torch.Tensor:
        return self.c2(torch.relu(self.c1(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=False)
        return self.head(y.flatten(1))


def test_activation_checkpointing_compiles_in_one_graph_and_matches_stock():
    """Under torch.compile a checkpointed converted block is traced into the checkpoint's higher-order op
    with the ops inside; the eager-only checks (torch.func, tracing, saved-tensor hooks) stay out of the
    trace (a warning issued inside it was a side effect Dynamo refused: 'HOP: Unsafe side effect')."""
    torch.manual_seed(6)
    stock = _Checkpointed()
    model = copy.deepcopy(stock)
    tdnn.convert(model)
    _assert_compiled_matches(stock, model, torch.randn(2, 4, 6, 6))
