"""The compiled-kernel branch of the launcher, on CPU: CPU tensors are routed through the CUDA code path with
fake compiled kernels (recording CompiledKernel.run calls) and a fake CUDA runtime (current device, raw
stream, device switch). Checks the argument order per call, fresh outputs per call, kept small workspaces, the device
switch, the global-scratch allocator and the per-device SM count cache."""
from __future__ import annotations

import contextlib
import contextvars
import threading
from types import SimpleNamespace

import pytest
import torch

from tiledispatch.kernels.family import family_module
from tiledispatch.registry import kernel as kernel_mod
from tiledispatch.runtime import launcher
from tiledispatch.runtime.arguments import GemmArgs, argument_values, problem_from_args
from tiledispatch.testing import matrix, suites

TILED_A16, _, _, _ = suites.aligned_configs()
# more splits than the partial kernel sums itself: a partial and a reduce launch sharing the workspace
SPLITK_A16 = suites.small_config("splitk", "rcr", "fp16", align=16, split_k=32)
STREAM = 7000


class FakeRuntime:
    def __init__(self) -> None:
        self.current = 0
        self.switches: list[int] = []

    def get_device(self) -> int:
        return self.current

    def raw_stream(self, index: int) -> int:
        return STREAM + index

    @contextlib.contextmanager
    def device(self, index: int):
        previous, self.current = self.current, index
        self.switches.append(index)
        try:
            yield
        finally:
            self.current = previous

    def is_initialized(self) -> bool:
        return True

    capturing = False

    def is_capturing(self) -> bool:
        return self.capturing


class FakeCompiled:
    def __init__(self, fn: str, launches: list, scratch: int) -> None:
        self.fn, self.launches = fn, launches
        self.function, self.packed_metadata = f"function:{fn}", ("packed", fn)
        self.metadata = SimpleNamespace(global_scratch_size=scratch)

    def run(self, gx, gy, gz, stream, function, packed, launch_metadata, enter_hook, exit_hook, *args):
        assert (function, packed, launch_metadata, enter_hook, exit_hook) == (self.function, self.packed_metadata,
                                                                             None, None, None)
        self.launches.append(SimpleNamespace(fn=self.fn, grid=(gx, gy, gz), stream=stream, args=args,
                                             device=launcher._RUNTIME.current))


@pytest.fixture
def fake_cuda(monkeypatch):
    """Route launches through the compiled-kernel branch with fakes; returns (runtime, launches, options)."""
    runtime, launches, options = FakeRuntime(), [], {"scratch": 0}
    monkeypatch.setattr(launcher, "_RUNTIME", runtime)
    monkeypatch.setattr(launcher, "uses_interpreter", lambda device: False)
    monkeypatch.setattr(kernel_mod, "uses_interpreter", lambda device: False)
    monkeypatch.setattr(kernel_mod, "check_device_arch", lambda device, arch: None)
    monkeypatch.setattr(launcher, "_SM_COUNTS", {0: 132, 1: 114})
    monkeypatch.setattr(launcher.EntryLauncher, "_compiled_kernel",
                        lambda self, index: FakeCompiled(self.spec.fn, launches, options["scratch"]))
    return runtime, launches, options


def expected_args(kernel, args: GemmArgs, entry: int, workspace=None) -> list:
    """The argument list of entry `entry` as the spec orders it (compiled: DOT_F32 stays False)."""
    spec = kernel.launchers()[entry].spec
    problem = problem_from_args(args, prefer_layout=kernel.config.layout)
    plan = family_module(kernel.config).launch_plan(kernel.config, problem.m, problem.n, problem.k, problem.batch,
                                                    132)
    extra = dict(plan.scalars)
    extra.update({name: workspace for name, _, _ in plan.workspaces})
    values = argument_values(args, problem.m, problem.n, problem.k, extra)
    return [p.value if p.is_constexpr else values[p.name] for p in spec.params]


def same(got, want) -> bool:
    return all((g is w) if hasattr(w, "data_ptr") else (g == w) for g, w in zip(got, want, strict=True))


def test_each_call_passes_its_own_tensors_in_spec_order(build_registry, fake_cuda):
    _, launches, _ = fake_cuda
    kernel = build_registry([TILED_A16]).get(TILED_A16.name)
    for alpha in (1.0, -0.5, 3.0):
        a, b = matrix(64, 32, dtype="fp16"), matrix(32, 48, letter="c", dtype="fp16")
        out = torch.empty(64, 48, dtype=torch.float16)
        assert kernel.run(a, b, out=out, alpha=alpha) is out
        call = launches[-1]
        assert call.stream == STREAM and call.grid == (4, 1, 1) and call.fn == "gemm_tiled_kernel"
        assert same(call.args, expected_args(kernel, GemmArgs(a, b, out, alpha=alpha), 0))
    assert len(launches) == 3 and len(kernel.launches) == 1


def test_outputs_are_fresh_per_call_and_small_workspaces_kept_per_stream_and_thread(build_registry, fake_cuda):
    runtime, launches, _ = fake_cuda
    kernel = build_registry([SPLITK_A16]).get(SPLITK_A16.name)
    a, b = matrix(32, 64, dtype="fp16"), matrix(64, 32, letter="c", dtype="fp16")
    outs = [kernel.run(a, b) for _ in range(2)]
    assert outs[0] is not outs[1] and outs[0].shape == (32, 32) and outs[0].dtype == torch.float16
    partial1, reduce1, partial2, reduce2 = launches
    spec = kernel.launchers()[0].spec
    ws = spec.arg_names().index("ws_ptr")
    assert partial1.args[ws] is reduce1.args[0] and partial2.args[ws] is reduce2.args[0]
    assert partial1.args[ws] is partial2.args[ws]          # 8 KB: kept for this stream and thread
    assert partial1.args[ws].numel() == 32 * 32 * 32 and partial1.args[ws].dtype == torch.float32
    other = threading.Thread(target=kernel.run, args=(a, b))
    other.start()
    other.join()
    assert launches[-2].args[ws] is not partial1.args[ws]  # another thread: its own (launch pairs may interleave)
    runtime.capturing = True
    kernel.run(a, b)
    assert launches[-2].args[ws] is not partial1.args[ws]  # under graph capture: the graph's own
    runtime.capturing = False
    kernel.run(a, b)
    assert launches[-2].args[ws] is partial1.args[ws]
    for call, out in ((partial2, outs[1]), (reduce2, outs[1])):
        entry = 0 if call is partial2 else 1
        assert same(call.args, expected_args(kernel, GemmArgs(a, b, out), entry, call.args[ws if entry == 0 else 0]))


def test_workspaces_above_the_kept_size_are_fresh_per_call(build_registry, fake_cuda, monkeypatch):
    _, launches, _ = fake_cuda
    monkeypatch.setattr(launcher, "KEPT_WORKSPACE_BYTES", 1024)   # the 128 KB workspace below is larger
    kernel = build_registry([SPLITK_A16]).get(SPLITK_A16.name)
    a, b = matrix(32, 64, dtype="fp16"), matrix(64, 32, letter="c", dtype="fp16")
    kernel.run(a, b)
    kernel.run(a, b)
    ws = kernel.launchers()[0].spec.arg_names().index("ws_ptr")
    assert launches[0].args[ws] is not launches[2].args[ws] and launches[2].args[ws] is launches[3].args[0]


def test_counters_are_zeroed_once_and_kept_while_large_workspaces_are_fresh(build_registry, fake_cuda,
                                                                          monkeypatch):
    """A split tma_persistent launch: its fp32 slots (over the kept size here) come fresh per call, its arrival
    counters are allocated zeroed once per stream and thread and kept, since the kernel leaves them zero; under
    graph capture both are the graph's own (counters zeroed by a captured memset)."""
    runtime, launches, _ = fake_cuda
    monkeypatch.setattr(launcher, "KEPT_WORKSPACE_BYTES", 1024)
    cfg = suites.small_config("tma_persistent", "rcr", "fp16", align=16, split_k=2)   # 32x32 tiles
    kernel = build_registry([cfg]).get(cfg.name)
    a, b = matrix(64, 64, dtype="fp16"), matrix(64, 64, letter="c", dtype="fp16")
    names = kernel.launchers()[0].spec.arg_names()
    ws, count = names.index("ws_ptr"), names.index("count_ptr")
    for _ in range(2):
        kernel.run(a, b)
    first, second = launches
    assert first.args[ws] is not second.args[ws] and first.args[ws].numel() == 4 * 2 * 32 * 32
    assert first.args[count] is second.args[count]
    assert first.args[count].dtype == torch.int32 and not first.args[count].any()
    runtime.capturing = True
    kernel.run(a, b)
    assert launches[-1].args[count] is not first.args[count] and not launches[-1].args[count].any()


def test_a_device_switch_only_when_the_current_device_differs(build_registry, fake_cuda):
    runtime, launches, _ = fake_cuda
    kernel = build_registry([TILED_A16]).get(TILED_A16.name)
    a, b = matrix(32, 32, dtype="fp16"), matrix(32, 32, letter="c", dtype="fp16")
    kernel.run(a, b)
    assert runtime.switches == [] and launches[-1].device == 0
    runtime.current = 1
    kernel.run(a, b)
    assert runtime.switches == [0] and launches[-1].device == 0 and launches[-1].stream == STREAM
    assert runtime.current == 1


def test_sm_count_is_read_once_per_device(monkeypatch):
    reads = []
    fake_torch = SimpleNamespace(cuda=SimpleNamespace(
        get_device_properties=lambda i: reads.append(i) or SimpleNamespace(multi_processor_count=100 + i)))
    monkeypatch.setattr(launcher, "_torch", fake_torch)
    monkeypatch.setattr(launcher, "_SM_COUNTS", {})
    assert [launcher.sm_count(i) for i in (0, 1, 0, 1, 0)] == [100, 101, 100, 101, 100]
    assert reads == [0, 1]


def test_scratch_kernels_launch_with_scratch_under_any_allocator(build_registry, fake_cuda, monkeypatch):
    """Stop 50 (H200 GPU lane): after the nn tests had run torch.compile in the process, a tma_ws kernel took
    its scratch from another allocator, not SCRATCH, so a captured graph's scratch was no longer ours. Our
    launches now use SCRATCH in every thread and under any allocator set before, and leave that allocator
    as it was."""
    from triton.runtime import _allocation

    _, launches, options = fake_cuda
    options["scratch"] = 384
    kernel = build_registry([TILED_A16]).get(TILED_A16.name)
    a, b = matrix(32, 32, dtype="fp16"), matrix(32, 32, letter="c", dtype="fp16")
    during = []
    fake_run = FakeCompiled.run

    def run(self, *args):
        during.append(_allocation._allocator.get())
        fake_run(self, *args)

    monkeypatch.setattr(FakeCompiled, "run", run)
    seen = {}

    def launch_in(name: str, preset=None):
        if preset is not None:
            _allocation._allocator.set(preset)
        before = _allocation._allocator.get()
        kernel.run(a, b)
        seen[name] = (before, _allocation._allocator.get())

    contextvars.copy_context().run(launch_in, "main")
    worker = threading.Thread(target=launch_in, args=("thread",))
    worker.start()
    worker.join()
    mine = object()
    contextvars.copy_context().run(launch_in, "user", mine)
    assert during == [launcher.SCRATCH] * 3
    null = _allocation._NULL_ALLOCATOR
    assert seen == {"main": (null, null), "thread": (null, null), "user": (mine, mine)}
    assert len(launches) == 3


def test_kernels_without_scratch_leave_the_allocator_alone(build_registry, fake_cuda):
    from triton.runtime import _allocation

    kernel = build_registry([TILED_A16]).get(TILED_A16.name)
    a, b = matrix(32, 32, dtype="fp16"), matrix(32, 32, letter="c", dtype="fp16")

    def launch():
        kernel.run(a, b)
        return _allocation._allocator.get()

    assert contextvars.copy_context().run(launch) is _allocation._NULL_ALLOCATOR


@pytest.fixture
def cpu_scratch(monkeypatch):
    runtime = FakeRuntime()
    monkeypatch.setattr(launcher, "_RUNTIME", runtime)
    return runtime, launcher.ScratchAllocator(device_type="cpu")


def test_scratch_buffer_is_reused_while_large_enough(cpu_scratch):
    _, alloc = cpu_scratch
    first = alloc(1000, 128, 5)
    assert first.dtype == torch.uint8 and first.numel() >= 1000 and first.data_ptr() % 128 == 0
    assert alloc(1000, 128, 5) is first and alloc(10, 128, 5) is first and alloc(1024, 64, 5) is first
    assert alloc.buffers() == {(0, 5): 1024}


def test_scratch_grows_geometrically_and_retains_replaced_buffers(cpu_scratch):
    _, alloc = cpu_scratch
    small = alloc(1000, 128, 5)
    small_ptr = small.data_ptr()
    big = alloc(1500, 128, 5)
    assert big is not small and big.numel() == 2048 and big.data_ptr() % 128 == 0
    assert any(t is small for t in alloc._retired) and small.data_ptr() == small_ptr
    assert alloc(5000, 128, 5).numel() == 8192


def test_scratch_is_per_device_and_stream(cpu_scratch):
    runtime, alloc = cpu_scratch
    on_5 = alloc(256, 128, 5)
    on_6 = alloc(256, 128, 6)
    runtime.current = 1
    on_5_dev1 = alloc(256, 128, 5)
    assert len({id(on_5), id(on_6), id(on_5_dev1)}) == 3
    assert set(alloc.buffers()) == {(0, 5), (0, 6), (1, 5)}
    assert alloc(256, 128, None) is not on_5


def test_scratch_honours_a_larger_alignment(cpu_scratch):
    _, alloc = cpu_scratch
    alloc(256, 16, 5)
    assert alloc(256, 4096, 5).data_ptr() % 4096 == 0

