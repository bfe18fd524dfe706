"""tiledispatch.nn.Conv1d/2d/3d and Linear: torch's constructor, parameters and state_dict (checkpoints load
both ways), what stays on torch and why, and their results against torch's modules (CPU lane)."""
from __future__ import annotations

import contextlib
import inspect
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tiledispatch.nn as tdnn

class _SeenOps(TorchDispatchMode):
    """A dispatch mode that only records the ops it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


PAIRS = [(tdnn.Conv1d, torch.nn.Conv1d), (tdnn.Conv2d, torch.nn.Conv2d), (tdnn.Conv3d, torch.nn.Conv3d),
         (tdnn.Linear, torch.nn.Linear)]


CONV_KWARGS = {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "stride": 2, "padding": 1,
               "dilation": 1, "groups": 2, "bias": False, "padding_mode": "zeros", "device": "cpu",
               "dtype": torch.float16}
LINEAR_KWARGS = {"in_features": 4, "out_features": 6, "bias": False, "device": "cpu", "dtype": torch.float16}


@pytest.mark.parametrize("ours, theirs", PAIRS)
def test_torchs_constructor_keywords_give_the_same_module(ours, theirs):
    kwargs = LINEAR_KWARGS if theirs is torch.nn.Linear else CONV_KWARGS
    assert issubclass(ours, theirs)
    assert set(kwargs) == set(inspect.signature(theirs.__init__).parameters) - {"self"}   # every keyword
    a, b = ours(**kwargs), theirs(**kwargs)
    assert a.extra_repr().startswith(b.extra_repr())   # same configuration, plus where it runs
    assert [(n, p.shape, p.dtype) for n, p in a.named_parameters()] == [
        (n, p.shape, p.dtype) for n, p in b.named_parameters()]


@pytest.mark.parametrize("ours, theirs, args, kwargs", [
    (tdnn.Conv1d, torch.nn.Conv1d, (4, 6, 3), {"stride": 2, "groups": 2}),
    (tdnn.Conv2d, torch.nn.Conv2d, (4, 8, (3, 2)), {"padding": "same", "dilation": 2, "bias": False}),
    (tdnn.Conv3d, torch.nn.Conv3d, (2, 4, 3), {"padding": 1, "groups": 2}),
    (tdnn.Linear, torch.nn.Linear, (5, 3), {}),
])
def test_state_dict_round_trips_with_torchs_modules(ours, theirs, args, kwargs):
    torch.manual_seed(0)
    ref = theirs(*args, **kwargs)
    ours_m = ours(*args, **kwargs)
    assert ours_m.state_dict().keys() == ref.state_dict().keys()
    assert [n for n, _ in ours_m.named_parameters()] == [n for n, _ in ref.named_parameters()]
    ours_m.load_state_dict(ref.state_dict())                       # a torch checkpoint, unchanged
    for key, value in ref.state_dict().items():
        assert torch.equal(ours_m.state_dict()[key], value), key
    back = theirs(*args, **kwargs)
    back.load_state_dict(ours_m.state_dict())                      # and ours into torch's
    for key, value in ours_m.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key


def test_conv_weights_are_kept_channels_last():
    conv = tdnn.Conv2d(3, 8, 3)
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    conv.load_state_dict(torch.nn.Conv2d(3, 8, 3).state_dict())
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    assert tdnn.Conv1d(3, 8, 3).weight.stride() == (3 * 3, 1, 3)


@pytest.mark.parametrize("shape, groups, strides", [((16, 1, 7, 7), 16, (49, 49, 7, 1)),   # depthwise
                                                    ((16, 8, 1, 1), 1, (8, 1, 1, 1)),       # 1x1
                                                    ((16, 1, 3, 3, 3), 16, (27, 27, 9, 3, 1))])
def test_convert_keeps_weights_torch_deems_channels_last(shape, groups, strides):
    """Regression: convert restrided such weights (size-1 dims given other strides), which made torch's
    own conv path (layers left on torch) slower on the GPU host."""
    conv = (torch.nn.Conv2d if len(shape) == 4 else torch.nn.Conv3d)(
        shape[1] * groups, shape[0], shape[2:], groups=groups)
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    assert conv.weight.stride() == strides and conv.weight.is_contiguous(memory_format=fmt)
    model = torch.nn.Sequential(conv)
    tdnn.convert(model)
    assert model[0].weight.stride() == strides


def test_what_stays_on_torch_says_why_and_runs_torch():
    reflect = tdnn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect")
    assert "padding_mode='reflect'" in reflect.td_reason and "runs on torch" in repr(reflect)
    ref = torch.nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect")
    ref.load_state_dict(reflect.state_dict())
    x = torch.randn(1, 2, 5, 5)
    y = reflect(x)
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0" and torch.allclose(y, ref(x))
    conv = tdnn.Conv2d(2, 3, 3)
    assert conv.td_reason is None and "runs on tiledispatch" in repr(conv)
    double = torch.nn.Conv2d(2, 3, 3).double()
    conv.double().load_state_dict(double.state_dict())   # float64: not a tiledispatch dtype, torch runs it
    xd = torch.randn(1, 2, 5, 5, dtype=torch.float64)
    y = conv(xd)
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0" and torch.allclose(y, double(xd))
    linear = tdnn.Linear(4, 2).double()
    assert linear(torch.randn(0, 4, dtype=torch.float64)).shape == (0, 2)


@pytest.mark.slow
@pytest.mark.usefixtures("small_defaults")
@pytest.mark.parametrize("ours, theirs, args, kwargs, x_shape", [
    (tdnn.Conv1d, torch.nn.Conv1d, (6, 6, 5), {"stride": 2, "padding": 2, "groups": 6}, (2, 6, 13)),
    (tdnn.Conv1d, torch.nn.Conv1d, (6, 6, 5), {"stride": 2, "padding": 2, "groups": 6}, (6, 13)),   # no batch
    (tdnn.Conv2d, torch.nn.Conv2d, (8, 6, 3), {"stride": 2, "padding": 1, "groups": 2, "bias": False},
     (2, 8, 7, 9)),
    (tdnn.Conv2d, torch.nn.Conv2d, (3, 5, (3, 2)), {"padding": "same", "dilation": 2}, (1, 3, 8, 7)),
    (tdnn.Conv3d, torch.nn.Conv3d, (4, 6, (3, 1, 1)), {"padding": (1, 0, 0), "bias": False}, (1, 4, 5, 4, 3)),
    (tdnn.Linear, torch.nn.Linear, (7, 4), {}, (2, 3, 7)),
])
@pytest.mark.parametrize("path", ["eager", "ops"])
def test_forward_and_backward_match_torch(ours, theirs, args, kwargs, x_shape, path):
    """Both paths of a module: plain eager (the autograd.Functions of nn/eager.py) and the custom ops, which
    any dispatch mode (torch.compile's tracing, FlopCounterMode, ...) selects; a pass-through mode forces
    them."""
    torch.manual_seed(1)
    ref = theirs(*args, **kwargs).double()
    mod = ours(*args, **kwargs)
    mod.load_state_dict(ref.state_dict())
    x = torch.randn(x_shape)
    rx = x.double().requires_grad_()
    x.requires_grad_()
    grad = torch.randn(ref(rx).shape, dtype=torch.float64)
    mode = _SeenOps() if path == "ops" else contextlib.nullcontext()
    with mode:
        y = mod(x)
        y.backward(grad.float())
    ry = ref(rx)
    ry.backward(grad)
    if path == "ops":
        assert "tiledispatch." in " ".join(mode.seen)   # the mode saw the ops
    else:
        nodes = {type(y.grad_fn).__name__, *(type(f).__name__ for f, _ in y.grad_fn.next_functions)}
        assert nodes & {"ConvBackward", "LinearBackward"}   # the eager Functions (under a view or squeeze)
    got, want = y.detach().double(), ry.detach()
    assert got.shape == want.shape and float((got - want).norm() / want.norm()) < 2e-5
    pairs = [(x.grad, rx.grad), *((p.grad, q.grad) for p, q in zip(mod.parameters(), ref.parameters()))]
    for got, want in pairs:
        assert got.shape == want.shape and float((got.double() - want).norm() / want.norm()) < 2e-5


@pytest.mark.slow
@pytest.mark.usefixtures("small_defaults")
def test_autocast_casts_operands_like_torch():
    """Under autocast the operands run in the autocast dtype (fp16: the interpreter's bf16 dot is wrong)."""
    torch.manual_seed(2)
    conv = tdnn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)
    x = torch.randn(2, 8, 5, 6)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        y = conv(x)
    assert y.dtype == torch.float16
    ref = torch.nn.functional.conv2d(x.double(), conv.weight.double(), None, 1, 1, 1, 2)
    assert float((y.double() - ref).norm() / ref.norm()) < 2e-3


@pytest.mark.slow
@pytest.mark.usefixtures("small_defaults")
@pytest.mark.parametrize("cls, theirs, x_shape", [(tdnn.Conv2d, torch.nn.Conv2d, (1, 4, 5, 6)),
                                                  (tdnn.Linear, torch.nn.Linear, (3, 4))])
def test_eager_double_backward_goes_through_the_ops(cls, theirs, x_shape):
    """create_graph=True: the eager Function's backward runs the differentiable ops (grad of grad)."""
    torch.manual_seed(3)
    args = (4, 6, 3) if cls is tdnn.Conv2d else (4, 6)
    ref = theirs(*args).double()
    mod = cls(*args)
    mod.load_state_dict(ref.state_dict())
    x = torch.randn(x_shape, requires_grad=True)
    rx = x.detach().double().requires_grad_()
    for m, inp in ((mod, x), (ref, rx)):
        (gx,) = torch.autograd.grad((m(inp) ** 2).sum(), inp, create_graph=True)
        (gx ** 2).sum().backward()
    assert float((mod.weight.grad.double() - ref.weight.grad).norm() / ref.weight.grad.norm()) < 1e-4
    assert float((x.grad.double() - rx.grad).norm() / rx.grad.norm()) < 1e-4


def test_eager_path_is_left_for_anything_that_transforms_tensors():
    from tiledispatch.nn import eager

    t = torch.ones(2)
    assert eager.plain(t, torch.nn.Parameter(t), None)
    with _SeenOps():
        assert not eager.plain(t)
    with torch.device("cpu"):            # a torch-function mode
        assert not eager.plain(t)
    assert not torch.func.vmap(lambda v: torch.tensor(eager.plain(v)))(torch.ones(2, 2)).any()
    assert not eager.plain(torch.Tensor._make_subclass(_Sub, t))


class _Sub(torch.Tensor):
    pass


def _small_model(converted: bool) -> torch.nn.Module:
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(4 * 5 * 6, 3))
    if converted:
        tdnn.convert(model, step_check=False)
    return model


def test_torch_func_transforms_run_torchs_layers_and_say_so(monkeypatch):
    """torch.func.grad and vmap over a converted model give stock's results: the custom ops have no
    functorch rules (grad raised "must override the setup_context staticmethod" from torch.library's
    autograd Function), so under a transform the modules run torch's layers, with one warning."""
    from tiledispatch.nn import eager

    monkeypatch.setattr(eager, "_warned", set(), raising=False)
    stock, model = _small_model(False), _small_model(True)
    x = torch.randn(2, 3, 5, 6)

    def loss(m: torch.nn.Module, params: dict) -> torch.Tensor:
        return torch.func.functional_call(m, params, (x,)).square().sum()

    params = {k: v.detach() for k, v in stock.named_parameters()}
    with pytest.warns(UserWarning, match="torch.func transform") as seen:
        got = torch.func.grad(lambda p: loss(model, p))(params)
        batched = torch.func.vmap(lambda xi: model(xi.unsqueeze(0)))(x)
    assert len([w for w in seen if "torch.func transform" in str(w.message)]) == 1
    want = torch.func.grad(lambda p: loss(stock, p))(params)
    for name in want:
        torch.testing.assert_close(got[name], want[name])
    torch.testing.assert_close(batched.squeeze(1), stock(x))


@pytest.mark.slow
@pytest.mark.usefixtures("small_defaults")
@pytest.mark.parametrize("cls, args, x_shape, torch_node", [
    (tdnn.Conv2d, (4, 6, 3), (1, 4, 5, 6), "ConvolutionBackward0"),
    (tdnn.Linear, (4, 6), (3, 4), "AddmmBackward0")])
@pytest.mark.parametrize("vendor_ms, on_torch", [(1.0, True), (1e3, False)])
def test_a_layer_plan_samples_both_paths_then_runs_the_cheaper(cls, args, x_shape, torch_node, vendor_ms,
                                                               on_torch, monkeypatch):
    """First training call: td's picks (their GPU times stand-ins here: td 1 ms, the vendor `vendor_ms`);
    then SAMPLES calls timed on td's path and SAMPLES on torch's layer; then the cheaper path for good. On the
    interpreter td's host time dwarfs torch's, so equal GPU times settle on torch and a 1000x faster td kernel
    keeps td. Results match torch's throughout; a new signature learns again."""
    from tiledispatch.nn import layer_plan

    monkeypatch.setattr(layer_plan, "measured_pair", lambda selection, name: (1.0, vendor_ms))
    torch.manual_seed(4)
    mod = cls(*args)
    x = torch.randn(x_shape, requires_grad=True)
    functional = torch.nn.functional.conv2d if cls is tdnn.Conv2d else torch.nn.functional.linear
    ref = functional(x, mod.weight, mod.bias)
    nodes = []
    for _ in range(2 + 2 * layer_plan.SAMPLES):
        y = mod(x)
        y.sum().backward()
        nodes.append(type(y.grad_fn).__name__)
        assert torch.allclose(y, ref, atol=1e-4)
    samples = layer_plan.SAMPLES
    assert torch_node not in nodes[:1 + samples]                       # learning, then td's host samples
    assert nodes[1 + samples:1 + 2 * samples] == [torch_node] * samples   # torch's host samples
    (plan,) = mod._td_plans.values()
    assert plan.stage == "settled" and plan.on_torch is on_torch
    assert (nodes[-1] == torch_node) is on_torch
    bigger = mod(torch.randn((2, *x_shape[1:]), requires_grad=True))
    assert type(bigger.grad_fn).__name__ != torch_node


@pytest.mark.parametrize("cls, args, x_shape", [(tdnn.Conv2d, (4, 6, 3), (1, 4, 5, 6)),
                                                (tdnn.Linear, (4, 6), (3, 4))])
def test_a_call_like_the_last_one_settled_on_torch_skips_the_signature(cls, args, x_shape, monkeypatch):
    """Host time: once a plan has sent a call to torch's layer, the next call with the same input shape and
    grad mode goes there without building its signature; any other call takes the full path."""
    from tiledispatch.nn import eager
    from tiledispatch.nn.layer_plan import LayerPlan

    mod = cls(*args)
    x = torch.randn(x_shape)
    with torch.no_grad():
        plan = mod._td_plans[eager.signature(x, mod.weight, mod.bias)] = LayerPlan((False, False))
        plan.stage, plan.on_torch = "settled", True
        mod(x)                                        # the full path: the plan sends it to torch's layer

        def no_signature(*args):
            raise AssertionError("signature built")

        monkeypatch.setattr(eager, "signature", no_signature)
        assert torch.allclose(mod(x), (torch.nn.functional.conv2d if cls is tdnn.Conv2d
                                       else torch.nn.functional.linear)(x, mod.weight, mod.bias))
        with pytest.raises(AssertionError, match="signature built"):
            mod(torch.randn((2, *x_shape[1:])))       # another shape
    with pytest.raises(AssertionError, match="signature built"):
        mod(x)                                        # grad mode on


@pytest.mark.slow
@pytest.mark.usefixtures("small_defaults")
@pytest.mark.parametrize("grad", [True, False])
def test_weights_re_laid_after_convert_still_run(grad):
    """A converted conv whose weight the user re-lays afterwards (model.to(memory_format=
    torch.contiguous_format), or weight.data = an NCHW tensor) raised BadInput ("kernels read channels-last
    tensors") on the eager path; it runs as stock's does, the weight copied channels-last per call."""
    import copy

    torch.manual_seed(4)
    stock = torch.nn.Conv2d(3, 4, 3, padding=1)
    model = copy.deepcopy(stock)
    tdnn.convert(model, step_check=False)
    model.to(memory_format=torch.contiguous_format)
    assert not model.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 5, 6)
    with torch.set_grad_enabled(grad):
        got, want = model(x), stock(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    if grad:
        got.square().sum().backward()
        want.square().sum().backward()
        torch.testing.assert_close(model.weight.grad, stock.weight.grad, rtol=1e-4, atol=1e-4)


def test_forward_mode_ad_runs_torchs_layers(monkeypatch):
    """Under a forward-AD dual level a converted layer raised NotImplementedError (the eager Functions have
    no jvp); it runs torch's layer (warned once) and its tangent is stock's."""
    import torch.autograd.forward_ad as fwad

    from tiledispatch.nn import eager

    monkeypatch.setattr(eager, "_warned", set(), raising=False)
    stock, model = _small_model(False), _small_model(True)
    x, tangent = torch.randn(2, 3, 5, 6), torch.randn(2, 3, 5, 6)
    tangents = []
    with pytest.warns(UserWarning, match="forward-mode AD"):
        for m in (stock, model):
            with fwad.dual_level():
                tangents.append(fwad.unpack_dual(m(fwad.make_dual(x, tangent))).tangent)
    torch.testing.assert_close(tangents[1], tangents[0])


@pytest.mark.slow
@pytest.mark.usefixtures("small_defaults")
def test_batched_gradients_match_stock():
    """jacobian(vectorize=True) and autograd.grad(is_grads_batched=True) run the backward under vmap: the
    eager Functions' backward got a batched grad and td's kernels raised 'Cannot access data pointer of
    Tensor that doesn't have storage'. Such a backward now goes through the ops."""
    stock, model = _small_model(False), _small_model(True)
    x = torch.randn(1, 3, 5, 6)
    want = torch.autograd.functional.jacobian(stock, x, vectorize=True)
    torch.testing.assert_close(torch.autograd.functional.jacobian(model, x, vectorize=True), want,
                               rtol=1e-4, atol=1e-5)
    xs, xm = x.clone().requires_grad_(), x.clone().requires_grad_()
    seeds = torch.eye(3).view(3, 1, 3)
    (got,) = torch.autograd.grad(model(xm), xm, seeds, is_grads_batched=True)
    (ref,) = torch.autograd.grad(stock(xs), xs, seeds, is_grads_batched=True)
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)


def test_jit_trace_records_torchs_layers_and_jit_script_says_what_to_do(monkeypatch, tmp_path):
    """torch.jit.trace of a converted model raised BadInputType (traced sizes are tensors, td's checks take
    ints); it now records torch's own layers, so the traced module saves, loads and runs as stock's does.
    torch.jit.script failed on an annotation deep in the dispatch; it now names the module and what to
    do instead."""
    from tiledispatch.errors import BadInputType
    from tiledispatch.nn import eager

    monkeypatch.setattr(eager, "_warned", set(), raising=False)
    stock, model = _small_model(False).eval(), _small_model(True).eval()
    x = torch.randn(2, 3, 5, 6)
    with pytest.warns(UserWarning, match="torch.jit.trace"):
        traced = torch.jit.trace(model, x, check_trace=False)   # the check would run the eager path too
    path = tmp_path / "traced.pt"
    torch.jit.save(traced, str(path))
    torch.testing.assert_close(torch.jit.load(str(path))(x), stock(x))
    assert not any("tiledispatch" in str(node.kind()) for node in traced.inlined_graph.nodes())
    with pytest.raises(BadInputType, match="script the model before tdnn.convert"):
        torch.jit.script(model)


class _Checkpointed(torch.nn.Module):
    """Two convs under torch.utils.checkpoint (the first converted layer, which carries the step check's
    hook, among them), then a linear head outside it."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.c1, self.c2 = torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.Conv2d(4, 4, 3, padding=1)
        self.head = torch.nn.Linear(4 * 6 * 6, 3)
        self.reentrant = reentrant

    def block(self, x: torch.Tensor) -> torch.Tensor:
        return self.c2(torch.relu(self.c1(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=self.reentrant)
        return self.head(y.flatten(1))


@pytest.mark.slow
@pytest.mark.usefixtures("small_defaults")
@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_trains_like_stock_while_the_plans_learn(reentrant, monkeypatch):
    """A non-reentrant checkpoint recomputes the forward inside the backward and needs it to save the same
    tensors: while a layer plan learned, its calls alternated td's path and torch's layer, and step 3 raised
    CheckpointError ("a different number of tensors was saved", 7 vs 5). Under saved-tensor hooks the
    layers run torch's path, and the step check does not count a recomputation as a step."""
    import copy

    from tiledispatch.nn import eager

    monkeypatch.setattr(eager, "_warned", set())
    torch.manual_seed(2)
    stock = _Checkpointed(reentrant)
    model = copy.deepcopy(stock)
    tdnn.convert(model)
    x = torch.randn(2, 4, 6, 6, requires_grad=True)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(16):
            for m in (stock, model):
                m.zero_grad(set_to_none=True)
                m(x).square().sum().backward()
    said = [w for w in seen if "saved-tensor hooks" in str(w.message)]
    assert len(said) == (0 if reentrant else 1)   # reentrant: no hooks (its forward runs without grad)
    for (name, p), q in zip(model.named_parameters(), stock.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
