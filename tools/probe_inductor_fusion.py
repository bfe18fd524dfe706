"""Which Inductor fusions a converted model loses against stock, on the CPU (no GPU needed).

A hand-built efficientnet_b0 piece (stem conv-BN-SiLU, a depthwise-separable block with squeeze-excitation,
an inverted-residual block with SE and a residual), channels-last, compiled stock and after
tiledispatch.nn.convert: one fwd+bwd step each through torch._inductor.utils.run_and_get_code. Prints per
variant the generated kernels (count, names), the post-grad graph's op counts, and where the names differ.
Variants re-run the converted model with a layout constraint other than the custom-op default (the
tiledispatch ops carry no layout tag, so torch._functorch.config.custom_op_default_layout_constraint applies).

--backend triton (default) emits Inductor's GPU (Triton) code for CPU tensors without compiling or launching
it, with the tiledispatch ops and aten's convs stubbed to allocate only: full-size models in seconds.

Usage:  python tools/probe_inductor_fusion.py [--model block|efficientnet_b0] [--batch 32 --size 224]
        [--variants stock,td,td_flexible] [--backend triton|cpp] [--device cuda] [--phase train|infer]
        [--dump DIR] [--show]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn


class SqueezeExcite(nn.Module):
    """timm's SqueezeExcite: mean over H, W, conv1x1 + bias, SiLU, conv1x1 + bias, sigmoid gate."""

    def __init__(self, channels: int, reduced: int) -> None:
        super().__init__()
        self.conv_reduce = nn.Conv2d(channels, reduced, 1, bias=True)
        self.act = nn.SiLU()
        self.conv_expand = nn.Conv2d(reduced, channels, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.mean((2, 3), keepdim=True)
        return x * self.conv_expand(self.act(self.conv_reduce(s))).sigmoid()


def bn_act(channels: int, act: bool = True) -> nn.Sequential:
    return nn.Sequential(nn.BatchNorm2d(channels), nn.SiLU() if act else nn.Identity())


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, kernel: int, stride: int) -> None:
        super().__init__()
        mid = cin * expand
        self.conv_pw = nn.Conv2d(cin, mid, 1, bias=False) if expand > 1 else nn.Identity()
        self.bn1 = bn_act(mid) if expand > 1 else nn.Identity()
        self.conv_dw = nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False)
        self.bn2 = bn_act(mid)
        self.se = SqueezeExcite(mid, max(1, cin // 4))
        self.conv_pwl = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = bn_act(cout, act=False)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn3(self.conv_pwl(self.se(self.bn2(self.conv_dw(self.bn1(self.conv_pw(x)))))))
        return y + x if self.residual else y


def build(channels: int = 16) -> nn.Module:
    c = channels
    return nn.Sequential(nn.Conv2d(3, c, 3, 2, 1, bias=False), bn_act(c),
                         InvertedResidual(c, c, 1, 3, 1),          # efficientnet_b0's DS block (+ residual)
                         InvertedResidual(c, c, 4, 3, 1),          # an IR block with residual
                         InvertedResidual(c, 2 * c, 4, 5, 2))      # an IR block, stride 2, k5


def timm_model(name: str) -> nn.Module:
    """A timm model definition (no weights), through tools/train_corpus.py's torchvision stub."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import train_corpus

    return train_corpus.import_timm().create_model(name, pretrained=False)


def kernel_names(codes: list[str]) -> list[str]:
    """Generated kernel names (cpp_fused_* / triton_*) in the order they are defined."""
    pattern = r"^(cpp_fused_\w+|triton_\w+) = async_compile"
    names = [n for code in codes for n in re.findall(pattern, code, re.M)]
    return list(dict.fromkeys(names))


_KERNEL_SOURCE = r"^(triton_\w+) = async_compile\.triton\((.*?)^''', device_str"


def kernel_traffic(codes: list[str]) -> dict[str, float]:
    """Inductor's estimate of each Triton kernel's memory traffic (GB; benchmark_kernel puts it in
    inductor_meta), by kernel name."""
    out: dict[str, float] = {}
    for code in codes:
        for m in re.finditer(_KERNEL_SOURCE, code, re.M | re.S):
            gb = re.search(r"'kernel_num_gb': ([0-9.e-]+)", m.group(2))
            if gb:
                out[m.group(1)] = float(gb.group(1))
    return out


def kernel_class(name: str) -> str:
    """The GPU profile's classes: norm (batch-norm kernels), reduction, elementwise."""
    if "native_batch_norm" in name:
        return "norm"
    return "reduction" if name.startswith(("triton_red", "triton_per")) else "elementwise"


def extern_calls(codes: list[str]) -> collections.Counter:
    """Calls of extern kernels / fallback ops in the wrappers (convolutions, custom ops, copies)."""
    count: collections.Counter = collections.Counter()
    for code in codes:
        for m in re.finditer(r"(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?)\(", code):
            count[m.group(1)] += 1
    return count


class _NoKernel:
    """Stands in for a generated Triton kernel on the CPU: launches do nothing (code-only runs)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, *args: Any, **kwargs: Any) -> None:
        pass


def triton_code_only() -> None:
    """Inductor emits Triton (as it would for CUDA) for CPU tensors, without compiling or launching it: the
    fusion decisions and kernel names are Inductor's, the values are garbage."""
    import torch._inductor.async_compile as async_compile
    import torch._inductor.config as iconfig
    import torch.utils._triton as triton_utils

    iconfig.cpu_backend = "triton"
    triton_utils.triton_hash_with_backend = lambda: "code-only"
    async_compile.AsyncCompile.triton = lambda self, name, source, *a, **k: _NoKernel(name)


def stub_td_ops() -> None:
    """CPU kernels for the tiledispatch ops that only allocate their outputs (the fake kernels): a CPU
    registration wins over their CompositeExplicitAutograd one, and tracing uses the fake kernels anyway."""
    from tiledispatch.ops import conv_ops, gemm_ops
    from tiledispatch.ops.registration import _LIB

    for name, fake in (("conv", conv_ops._fake_conv), ("conv_bwd_data", conv_ops._fake_bwd_data),
                       ("conv_bwd_weight", conv_ops._fake_bwd_weight), ("gemm", gemm_ops._fake_gemm)):
        _LIB.impl(name, fake, "CPU", allow_override=True)


_KEEP: list[Any] = []   # the aten override library, kept alive


def stub_aten_convs() -> None:
    """CPU aten.convolution / convolution_backward that only allocate outputs (shapes and strides from the
    meta kernels): with the Triton kernels not launched, stock's steps need no real convolutions either."""
    lib = torch.library.Library("aten", "IMPL")
    _KEEP.append(lib)

    def like(out: Any) -> Any:
        if out is None:
            return None
        return torch.empty_strided(out.shape, out.stride(), dtype=out.dtype)

    def fake_call(op: Any, args: tuple) -> Any:
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode() as mode:   # the strides torch.compile traced with
            return op(*(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args))

    def convolution(*args: Any) -> Any:
        return like(fake_call(torch.ops.aten.convolution.default, args))

    def convolution_backward(*args: Any) -> Any:
        return tuple(like(o) for o in fake_call(torch.ops.aten.convolution_backward.default, args))

    lib.impl("convolution", convolution, "CPU")
    lib.impl("convolution_backward", convolution_backward, "CPU")


@contextlib.contextmanager
def gpu_input_alignment() -> Iterator[None]:
    """Graph inputs taken as 16-byte aligned, as Inductor takes CUDA inputs: for CPU tensors it marks every
    graph input unaligned, and a fallback (custom-op) output with an unaligned input is unaligned too, which
    would drop the divisibility hints of every kernel after a tiledispatch op in the CPU-emitted code."""
    import torch._inductor.graph as igraph

    old = igraph.should_assume_input_aligned
    igraph.should_assume_input_aligned = lambda example: True
    try:
        yield
    finally:
        igraph.should_assume_input_aligned = old


def run_variant(name: str, model: nn.Module, x: torch.Tensor, phase: str = "train") -> dict[str, Any]:
    import torch._dynamo
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    layout = {"td_flexible": "flexible_layout", "td_exact": "needs_exact_strides"}.get(name)
    old = fconfig.custom_op_default_layout_constraint
    if layout:
        fconfig.custom_op_default_layout_constraint = layout
    graphs: list[str] = []

    def capture(graph: Any) -> None:
        graphs.append(graph.owning_module.print_readable(print_output=False))

    def step() -> None:
        if phase == "train":
            compiled(x).float().sum().backward()
        else:   # inference: eval-mode norms, no autograd (as benchmarks/models.py's infer phase)
            with torch.no_grad():
                compiled(x)

    try:
        compiled = torch.compile(model)
        with iconfig.patch(post_grad_custom_post_pass=capture, fx_graph_cache=False, benchmark_kernel=True), \
                gpu_input_alignment():
            _, codes = run_and_get_code(step)
    finally:
        fconfig.custom_op_default_layout_constraint = old
    return {"kernels": kernel_names(codes), "extern": extern_calls(codes), "codes": codes, "graphs": graphs}


def graph_ops(graph: str) -> collections.Counter:
    return collections.Counter(re.findall(r"torch\.ops\.(\w+\.\w+)\.?\w*\(", graph))


def stem(kernel: str) -> str:
    """A kernel name without its index (triton_red_fused_..._60 -> triton_red_fused_...)."""
    return re.sub(r"_\d+$", "", kernel)


def buffer_layouts(codes: list[str]) -> collections.Counter:
    """4-D buffers the wrappers allocate, by layout: channels_last (channel stride 1), nchw (last-dim stride
    1, channel stride > 1) or other; sizes with H = W = 1 count as 'vector'."""
    count: collections.Counter = collections.Counter()
    pattern = r"empty_strided_\w+\(\((\d+), (\d+), (\d+), (\d+)\), \((\d+), (\d+), (\d+), (\d+)\)"
    for code in codes:
        for m in re.finditer(pattern, code):
            size, stride = [int(v) for v in m.groups()[:4]], [int(v) for v in m.groups()[4:]]
            kind = ("vector" if size[2] * size[3] == 1 else "channels_last" if stride[1] == 1
                    else "nchw" if stride[3] == 1 else "other")
            count[kind] += 1
    return count


def report(name: str, res: dict[str, Any], show: bool) -> None:
    kernels = res["kernels"]
    kinds = collections.Counter(k.split("_fused")[0] for k in kernels)
    print(f"== {name}: {len(kernels)} kernels {dict(kinds)}")
    for k in kernels:
        print("   ", k)
    print("   extern:", dict(res["extern"]))
    print("   4-D buffers:", dict(buffer_layouts(res["codes"])))
    traffic = kernel_traffic(res["codes"])
    by_class: collections.Counter = collections.Counter()
    for k, gb in traffic.items():
        by_class[kernel_class(k)] += gb
    print("   estimated GB moved by class:", {k: round(v, 3) for k, v in sorted(by_class.items())})
    for i, g in enumerate(res["graphs"]):
        print(f"   post-grad graph {i} ops:", dict(sorted(graph_ops(g).items())))
    if show:
        for text in res["graphs"] + res["codes"]:
            print(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="stock,td,td_flexible")
    parser.add_argument("--model", default="block", help="block (hand-built) or a timm model name")
    parser.add_argument("--backend", choices=("triton", "cpp"), default="triton",
                        help="triton: Inductor's GPU codegen, emitted but not run (values are garbage)")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--channels", type=int, default=16)
    parser.add_argument("--device", default="cpu", help="cuda: compile and run for real on a GPU")
    parser.add_argument("--phase", choices=("train", "infer"), default="train",
                        help="train: one fwd + bwd step (train mode); infer: one eval-mode forward, no grad")
    parser.add_argument("--real-ops", action="store_true",
                        help="run the tiledispatch ops (slow interpreter); with --backend triton, aten's too")
    parser.add_argument("--show", action="store_true", help="print the generated code and post-grad graphs")
    parser.add_argument("--dump", type=Path, help="write each variant's generated code under this folder")
    args = parser.parse_args(argv)
    import tiledispatch.nn

    on_gpu = args.device != "cpu"
    if args.backend == "triton" and not on_gpu:
        triton_code_only()
    if not args.real_ops and not on_gpu:
        stub_td_ops()
        if args.backend == "triton":
            stub_aten_convs()
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(0)
    base = build(args.channels) if args.model == "block" else timm_model(args.model)
    base = base.to(device=args.device, dtype=dtype, memory_format=torch.channels_last)
    base.train(args.phase == "train")
    x = torch.randn(args.batch, 3, args.size, args.size, dtype=dtype, device=args.device)
    x = x.to(memory_format=torch.channels_last)
    results = {}
    for name in args.variants.split(","):
        model = copy.deepcopy(base)
        if name != "stock":
            tiledispatch.nn.convert(model, step_check=False)
        results[name] = run_variant(name, model, x, args.phase)
        report(name, results[name], args.show)
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            for i, code in enumerate(results[name]["codes"]):
                (args.dump / f"{name}_{i}.py").write_text(code)
    names = list(results)
    for other in names[1:]:
        a = collections.Counter(map(stem, results[names[0]]["kernels"]))
        b = collections.Counter(map(stem, results[other]["kernels"]))
        print(f"== kernel stems only in {names[0]} (vs {other}):", dict(a - b))
        print(f"== kernel stems only in {other} (vs {names[0]}):", dict(b - a))


if __name__ == "__main__":
    main()
