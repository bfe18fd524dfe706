"""Launch a built instance: compiled cubins on CUDA tensors, Triton's interpreter on CPU tensors.

The hot path is a `BoundLaunch`: everything one argument signature needs (the loaded kernels, their grids, the
order of their arguments with slots for the per-call tensors and scalars, the output and workspace shapes).
`bind` builds one; callers (Kernel, Registry, td.gemm) memoize it under `call_key`, which holds everything a
launch decision depends on: shapes, strides, dtypes, devices and 16-byte alignment of every tensor, which
optional tensors are present, whether beta is zero, and the caller's own options. alpha and beta are values.
"""
from __future__ import annotations

import contextlib
import operator
import os
import threading
from pathlib import Path
from typing import Any

from tiledispatch import settings
from tiledispatch.build import cache
from tiledispatch.errors import BadInput, CompileError
from tiledispatch.kernels.gemm_common import DOT_F32
from tiledispatch.kernels.spec import EntrySpec, LaunchPlan
from tiledispatch.runtime import descriptors

# Slots of the per-call tuple: (a, b, out, c, bias, alpha, beta, scale_a, scale_b, *d, *workspaces)
A, B, OUT, C, BIAS, ALPHA, BETA, SCALE_A, SCALE_B, D0 = range(10)
_SLOTS = {"a_ptr": A, "b_ptr": B, "out_ptr": OUT, "c_ptr": C, "bias_ptr": BIAS, "alpha": ALPHA, "beta": BETA,
          "scale_a_ptr": SCALE_A, "scale_b_ptr": SCALE_B}
_torch: Any = None


def _import_torch() -> Any:
    global _torch
    if _torch is None:
        import torch

        _torch = torch
    return _torch


def uses_interpreter(device) -> bool:
    return device.type == "cpu" or settings.force_interpreter()


def _env_reader(name: str):
    """A cheap reader of one environment variable (os.environ.get costs ~0.7 µs on a miss)."""
    data = getattr(os.environ, "_data", None)
    if os.name == "posix" and isinstance(data, dict):
        key = os.environ.encodekey(name)
        return lambda: data.get(key)
    return lambda: os.environ.get(name)


interpret_switch = _env_reader("TILEDISPATCH_INTERPRET")


# -- argument signatures ---------------------------------------------------------------------------
def tensor_key(t: Any) -> tuple:
    """What a launch decision reads of one tensor: shape, strides, dtype, device, 16-byte alignment."""
    return (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15)


def call_key(a: Any, b: Any, out: Any, c: Any, bias: Any, d: Any, beta: Any, scale_a: Any, scale_b: Any,
             extra: tuple) -> tuple | None:
    """The memo key of a GEMM call (`extra`: the caller's options), or None when the arguments are not
    plain tensors (such calls take the validating slow path every time)."""
    try:
        if type(d) is not tuple and type(d) is not list:
            return None
        return (tensor_key(a), tensor_key(b), None if out is None else tensor_key(out),
                None if c is None else tensor_key(c), None if bias is None else tensor_key(bias),
                tuple(map(tensor_key, d)) if d else (), bool(beta != 0),
                None if scale_a is None else tensor_key(scale_a),
                None if scale_b is None else tensor_key(scale_b), interpret_switch(), extra)
    # not tensors: the slow path raises BadInput
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return None


# -- CUDA runtime hooks ----------------------------------------------------------------------------
class CudaRuntime:
    """The few torch.cuda calls of a launch, bound once to their cheapest form (tests substitute fakes)."""

    def __init__(self) -> None:
        torch = _import_torch()
        self.get_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.raw_stream = raw or (lambda index: torch.cuda.current_stream(index).cuda_stream)
        self.device = torch.cuda.device
        self.is_initialized = torch.cuda.is_initialized
        self.is_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing",
                                    torch.cuda.is_current_stream_capturing)


_RUNTIME: CudaRuntime | None = None
_SM_COUNTS: dict[int, int] = {}


def cuda_runtime() -> CudaRuntime:
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = CudaRuntime()
    return _RUNTIME


def device_token() -> int:
    """The current CUDA device (-1 before CUDA is initialized): what `auto` selection reads (tuning DB)."""
    rt = _RUNTIME or cuda_runtime()
    return rt.get_device() if rt.is_initialized() else -1


def sm_count(index: int) -> int:
    """Streaming multiprocessors of CUDA device `index` (cached: persistent grids read it per signature)."""
    if index not in _SM_COUNTS:
        _SM_COUNTS[index] = _import_torch().cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNTS[index]


# -- global scratch (device-side tensor descriptors) -------------------------------------------------
class ScratchAllocator:
    """Triton's global-scratch allocator (`triton.set_allocator`): Triton calls it on every launch of a
    kernel with `global_scratch_size > 0` (device-side tensor descriptors) as fn(size, alignment, stream).

    It returns one cached torch uint8 CUDA buffer per (device, stream), grown geometrically when a launch
    needs more. A buffer that is replaced is retained, never freed: a CUDA graph captured earlier may still
    address it (growth by doubling bounds what is retained by the size of the live buffer). Under graph
    capture an existing buffer that is large enough is reused, so nothing is allocated; a new one is allocated
    through torch on the capturing stream, so it lands in the graph's private pool. Kernels on one stream run
    in order, so they share the buffer safely; do not replay a graph on another stream concurrently with
    kernels that use the capture stream's buffer.
    """

    def __init__(self, device_type: str = "cuda") -> None:
        self.device_type = device_type
        self._buffers: dict[tuple[int, int], tuple[int, int, Any]] = {}   # -> (capacity, address, tensor)
        self._retired: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, size: int, alignment: int, stream: int | None) -> Any:
        if _FRESH.depth:   # nothing kept (fresh_workspaces): a buffer for this launch only
            torch = _import_torch()
            raw = torch.empty(size + alignment, dtype=torch.uint8,
                              device=torch.device(self.device_type, cuda_runtime().get_device()))
            start = -raw.data_ptr() % max(alignment, 1)
            return raw[start:start + size]
        key = (cuda_runtime().get_device(), stream or 0)
        hit = self._buffers.get(key)
        if hit is not None and hit[0] >= size and hit[1] % max(alignment, 1) == 0:
            return hit[2]
        return self._grow(key, size, max(alignment, 1))

    def _grow(self, key: tuple[int, int], size: int, alignment: int) -> Any:
        torch = _import_torch()
        with self._lock:
            old = self._buffers.get(key)
            capacity = max(1 << max(size - 1, 0).bit_length(), 2 * old[0] if old else 0)
            raw = torch.empty(capacity + alignment, dtype=torch.uint8,
                              device=torch.device(self.device_type, key[0]))
            start = -raw.data_ptr() % alignment
            view = raw[start:start + capacity]
            if old is not None:
                self._retired.append(old[2])
            self._buffers[key] = (capacity, view.data_ptr(), view)
            return view

    def buffers(self) -> dict[tuple[int, int], int]:
        """Capacity in bytes of the live buffer of each (device, stream)."""
        return {key: value[0] for key, value in self._buffers.items()}


SCRATCH = ScratchAllocator()
_ALLOCATOR_VAR: Any = None     # triton.runtime._allocation._allocator (a ContextVar), bound lazily
_NULL_ALLOCATOR: Any = None


def ensure_scratch_allocator() -> None:
    """Install SCRATCH as this thread's (this context's) Triton allocator unless one is already set there.
    The allocator is a ContextVar, so each thread gets it on its first launch of a scratch-using kernel.
    Our launches do not use this where Triton's allocator variable is known: they set SCRATCH for the
    launch alone and restore the caller's allocator, so that neither an allocator set by torch.compile or the
    user changes where our kernels' scratch lives (a CUDA graph relies on SCRATCH keeping it), nor do we
    change the allocator of the process's other Triton kernels."""
    var = _ALLOCATOR_VAR
    if var is not None:
        current = var.get()
        if current is SCRATCH or current is not _NULL_ALLOCATOR:
            return
    import triton

    triton.set_allocator(SCRATCH)


def _bind_allocator_var() -> None:
    global _ALLOCATOR_VAR, _NULL_ALLOCATOR
    try:
        from triton.runtime import _allocation

        _ALLOCATOR_VAR, _NULL_ALLOCATOR = _allocation._allocator, _allocation._NULL_ALLOCATOR
    except (ImportError, AttributeError):   # another Triton: set it on every launch that needs it
        _ALLOCATOR_VAR = None


# -- entries -------------------------------------------------------------------------------------------
class WorkspaceSlot:
    """Stands for a per-call workspace tensor in the argument values handed to `bind`."""

    def __init__(self, index: int) -> None:
        self.index = index


class EntryLauncher:
    """Launches one entry (one @triton.jit function) of a built instance."""

    def __init__(self, entry_dir: Path, spec: EntrySpec, fingerprint: str) -> None:
        self.entry_dir = entry_dir
        self.spec = spec
        self.fingerprint = fingerprint
        self._compiled: dict[int, Any] = {}

    def _compiled_kernel(self, device_index: int):
        """The CompiledKernel loaded on device `device_index` (loaded once per device)."""
        if device_index not in self._compiled:
            rt = cuda_runtime()
            with rt.device(device_index):
                self._compiled[device_index] = self._load()
        return self._compiled[device_index]

    def _load(self):
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime.errors import OutOfResources

        from tiledispatch.build.loader import import_source

        module = import_source(self.entry_dir / cache.SOURCE, interpret=False)
        fn = self.spec.fn
        src = self.spec.ast_source(module)
        group = {f"{fn}.json": str(self.entry_dir / f"{fn}.json"),
                 f"{fn}.cubin": str(self.entry_dir / f"{fn}.cubin")}
        kernel = CompiledKernel(src, group, self.fingerprint)
        try:
            kernel._init_handles()
        except OutOfResources as exc:
            raise CompileError(f"{fn} of {self.entry_dir.parent.name} cannot load on this device: {exc}",
                               field="kernel") from exc
        return kernel

    def _interpreted(self):
        from tiledispatch.build.loader import import_source

        if self.spec.dialect != "triton":
            raise BadInput(f"{self.entry_dir.parent.name} is a {self.spec.dialect} kernel, which Triton's "
                           f"interpreter cannot run: call it with CUDA tensors", field="device")
        return getattr(import_source(self.entry_dir / cache.SOURCE, interpret=True), self.spec.fn)

    def order(self, values: dict[str, Any], dyn: tuple, n_dyn: int, interpret: bool, slot_of: Any = None
              ) -> tuple[list[int], list[Any], bool, tuple]:
        """Where each parameter's value comes from: an index into (per-call values + constants), the
        constants, whether the order is reusable (every tensor argument comes from its per-call slot), and the
        descriptor parameters as (argument position, Geometry): their picked value is the base tensor, which
        each launch describes. slot_of(name, len(dyn)) gives a parameter's per-call slot (default: the GEMM
        slots)."""
        slot_of = slot_of or _slot_of
        picks, consts, reusable, descs = [], [], True, []
        for p in self.spec.params:
            slot, name = None, p.name
            if p.is_constexpr:
                value = True if (interpret and p.name == DOT_F32) else p.value
            else:
                geometry = descriptors.geometry(p, values) if descriptors.is_descriptor(p) else None
                name = geometry.base if geometry is not None else p.name
                value = values[name]
                slot = value.index if isinstance(value, WorkspaceSlot) else slot_of(name, len(dyn))
                if hasattr(value, "data_ptr") and (slot is None or dyn[slot] is not value):
                    # a stand-in for an absent optional tensor (unit fp8 scale) is a constant of the
                    # signature; any other tensor that is not a per-call argument makes the order single-use
                    reusable = reusable and slot is not None and dyn[slot] is None
                    slot = None
                # made from the call's base tensor at each launch (runtime/descriptors)
                if geometry is not None:
                    descs.append((len(picks), geometry))
            if slot is None:
                picks.append(n_dyn + len(consts))
                consts.append(value)
            else:
                picks.append(slot)
        return picks, consts, reusable, tuple(descs)

    def bind(self, grid: tuple[int, int, int], values: dict[str, Any], dyn: tuple, n_dyn: int,
             device_index: int | None, slot_of: Any = None) -> tuple[Any, bool]:
        """One entry's launch for a signature; device_index None runs it on the interpreter."""
        picks, consts, reusable, descs = self.order(values, dyn, n_dyn, device_index is None, slot_of)
        if device_index is None:
            return _InterpretedEntry(self._interpreted(), grid, picks, consts, descs), reusable
        return _CudaEntry(self._compiled_kernel(device_index), grid, picks, consts, descs), reusable


def _slot_of(name: str, n_args: int) -> int | None:
    """The per-call slot of a parameter (d<i>_ptr: the i-th D tensor), None for a constant."""
    slot = _SLOTS.get(name)
    if slot is None and name.startswith("d") and name.endswith("_ptr") and name[1:-4].isdigit():
        slot = D0 + int(name[1:-4])
        return slot if slot < n_args else None
    return slot


def _picker(picks: list[int]):
    if len(picks) == 1:
        return lambda values: (values[picks[0]],)
    return operator.itemgetter(*picks)


def _described(args: tuple, descs: tuple, make: Any) -> tuple:
    """The picked arguments with each descriptor position's base tensor replaced by its descriptor."""
    if not descs:
        return args
    out = list(args)
    for position, geometry in descs:
        out[position] = make(out[position], geometry)
    return tuple(out)


class _CudaEntry:
    """One entry's launch: through its RawLaunch (runtime/raw_launch.py) where it has one, else through
    Triton's launcher with host descriptor objects."""

    __slots__ = ("consts", "descs", "function", "gx", "gy", "gz", "packed", "pick", "raw", "run", "scratch")

    def __init__(self, kernel: Any, grid: tuple[int, int, int], picks: list[int], consts: list[Any],
                 descs: tuple = ()) -> None:
        from tiledispatch.runtime.raw_launch import raw_launch

        self.gx, self.gy, self.gz = grid
        self.pick, self.consts, self.descs = _picker(picks), tuple(consts), descs
        self.run, self.function, self.packed = kernel.run, kernel.function, kernel.packed_metadata
        self.scratch = getattr(kernel.metadata, "global_scratch_size", 0) > 0
        self.raw = raw_launch(kernel, descs)    # None with scratch, among others
        if self.scratch:
            _bind_allocator_var()

    def fire(self, dyn: tuple, stream: int) -> None:
        if self.raw is not None:
            self.raw(self.gx, self.gy, self.gz, stream, list(self.pick(dyn + self.consts)))
            return
        args = (self.gx, self.gy, self.gz, stream, self.function, self.packed, None, None, None,
                *_described(self.pick(dyn + self.consts), self.descs, descriptors.HostDescriptor))
        if self.scratch and _ALLOCATOR_VAR is not None:   # SCRATCH for this launch only
            token = _ALLOCATOR_VAR.set(SCRATCH)            # (see ensure_scratch_allocator)
            try:
                self.run(*args)
            finally:
                _ALLOCATOR_VAR.reset(token)
            return
        if self.scratch:   # a Triton whose allocator variable is unknown: the process-wide allocator
            ensure_scratch_allocator()
        self.run(*args)


class _InterpretedEntry:
    __slots__ = ("consts", "descs", "grid", "jit", "pick")

    def __init__(self, jit: Any, grid: tuple[int, int, int], picks: list[int], consts: list[Any],
                 descs: tuple = ()) -> None:
        self.jit, self.grid, self.pick = jit, grid, _picker(picks)
        self.consts, self.descs = tuple(consts), descs

    def fire(self, dyn: tuple, stream: int) -> None:
        args = _described(self.pick(dyn + self.consts), self.descs, descriptors.checked)
        with _library_callable_in_interpreter():
            self.jit[self.grid](*args)


# -- bound launches ------------------------------------------------------------------------------------
# Workspaces of at most this many bytes (all of a launch's together) are allocated once per (CUDA stream, host
# thread) and kept by the bound launch: allocating them cost a few us of host time per call on the H200's
# host, as much as a split-K GEMV's kernels take. One thread's calls on one stream run in order, so they share
# them safely (a buffer per thread: two threads' launch pairs may interleave on a stream); a call under
# CUDA-graph capture allocates its own (in the graph's private pool), so a replay never shares a buffer with
# eager calls. Larger workspaces are allocated per call (cheap beside their kernels, and nothing large stays
# held).
KEPT_WORKSPACE_BYTES = 4 << 20
KEPT_WORKSPACE_KEYS = 16      # (stream, thread) pairs kept per bound launch; beyond that the oldest go
_KEPT_LOCK = threading.Lock()


class _Fresh(threading.local):
    depth = 0


_FRESH = _Fresh()


def keeping_buffers() -> bool:
    """Whether this thread's launches may keep buffers across calls (False inside fresh_workspaces)."""
    return not _FRESH.depth


@contextlib.contextmanager
def fresh_workspaces() -> Any:
    """Within it, this thread's launches allocate every workspace anew and keep none: for callers whose
    allocations a CUDA-graph pool may own without a capture (torch.compile's cudagraph trees route a thread's
    allocations to the graph's pool while warming up, and refuse tensors that outlive the run there)."""
    _FRESH.depth += 1
    try:
        yield
    finally:
        _FRESH.depth -= 1
class Workspaces:
    """The workspace tensors of a bound launch, (elements, torch dtype, zeroed) each: called with the raw
    stream of a launch, returns them. Small ones (see KEPT_WORKSPACE_BYTES) are kept per stream and thread,
    larger ones allocated per call. Zeroed ones are counters the kernels leave at zero (LaunchPlan.counters):
    allocated zeroed and always kept, so no call pays a memset; under CUDA-graph capture every buffer is
    allocated anew (counters zeroed by a captured memset, which each replay repeats)."""

    def __init__(self, shapes: tuple[tuple[int, Any, bool], ...], device: Any, rt: Any) -> None:
        torch = _import_torch()
        self.shapes, self.device, self.empty, self.zeros = shapes, device, torch.empty, torch.zeros
        self.capturing = rt.is_capturing if rt is not None else (lambda: False)
        size = sum(n * torch.empty((), dtype=dtype).element_size()
                   for n, dtype, zeroed in shapes if not zeroed)
        self.keep = tuple(zeroed or size <= KEPT_WORKSPACE_BYTES for _, _, zeroed in shapes)
        self.kept: dict[tuple[int, int], tuple[Any, ...]] = {}   # (raw stream, thread) -> its kept workspaces

    def __call__(self, stream: int) -> tuple[Any, ...]:
        if not any(self.keep) or _FRESH.depth or self.capturing():
            return tuple(self._allocate(shape) for shape in self.shapes)
        key = (stream, threading.get_ident())
        kept = self.kept.get(key)
        if kept is None:
            with _KEPT_LOCK:
                while len(self.kept) >= KEPT_WORKSPACE_KEYS:
                    self.kept.pop(next(iter(self.kept)))
                kept = self.kept[key] = tuple(self._allocate(s)
                                              for s, keep in zip(self.shapes, self.keep) if keep)
        if all(self.keep):
            return kept
        held = iter(kept)
        return tuple(next(held) if keep else self._allocate(s) for s, keep in zip(self.shapes, self.keep))

    def _allocate(self, shape: tuple[int, Any, bool]) -> Any:
        n, dtype, zeroed = shape
        return (self.zeros if zeroed else self.empty)(n, dtype=dtype, device=self.device)


class EntryLaunches:
    """The launch step shared by the bound launches (GEMM's BoundLaunch, conv's ConvBound): fire every entry
    on the current stream of the instance's device with the call's arguments and its workspaces (Workspaces),
    switching the CUDA device only when another one is current."""

    def __init__(self, entries: list, device: Any, device_index: int | None,
                 workspaces: tuple[tuple[int, Any, bool], ...]) -> None:
        self.entries, self.device = tuple(entries), device
        self.index, self.workspaces = device_index, workspaces
        rt = cuda_runtime() if device_index is not None else None
        self.rt = rt
        self.get_device = rt.get_device if rt is not None else (lambda: None)
        self.raw_stream = rt.raw_stream if rt is not None else (lambda index: 0)
        self.take_workspaces = Workspaces(workspaces, device, rt)

    def launch(self, dyn: tuple) -> None:
        if self.get_device() == self.index:   # the device is current (always on the interpreter)
            self._fire(dyn, self.raw_stream(self.index))
        else:
            with self.rt.device(self.index):
                self._fire(dyn, self.raw_stream(self.index))

    def _fire(self, dyn: tuple, stream: int) -> None:
        if self.workspaces:
            dyn += self.take_workspaces(stream)
        for entry in self.entries:
            entry.fire(dyn, stream)


class BoundLaunch(EntryLaunches):
    """Every launch of an instance for one argument signature. Call it with the tensors and scalars of a
    call of that signature; it allocates the output (when out is None) and launches (EntryLaunches)."""

    def __init__(self, entries: list, device: Any, device_index: int | None, out_shape: tuple[int, ...],
                 out_dtype: Any, workspaces: tuple[tuple[int, Any, bool], ...], integral: bool,
                 reusable: bool) -> None:
        super().__init__(entries, device, device_index, workspaces)
        self.out_shape, self.out_dtype = out_shape, out_dtype
        self.integral, self.reusable = integral, reusable
        self.empty = _import_torch().empty

    def __call__(self, a: Any, b: Any, out: Any, c: Any, bias: Any, d: Any, alpha: Any, beta: Any,
                 scale_a: Any = None, scale_b: Any = None) -> Any:
        if self.integral:
            alpha, beta = integral("alpha", alpha), integral("beta", beta)
        if out is None:
            out = self.empty(self.out_shape, dtype=self.out_dtype, device=self.device)
        dyn = ((a, b, out, c, bias, alpha, beta, scale_a, scale_b, *d) if d
               else (a, b, out, c, bias, alpha, beta, scale_a, scale_b))
        self.launch(dyn)
        return out


def buffer_slots(plan: LaunchPlan, first: int
                 ) -> tuple[dict[str, WorkspaceSlot], tuple[tuple[int, Any, bool], ...]]:
    """The plan's buffers (workspaces, then counters) as WorkspaceSlots by parameter name, numbered from
    `first` (the slot after the call's own tensors), and their shapes for Workspaces (elements, torch dtype,
    zeroed)."""
    from tiledispatch.dtypes import torch_dtype

    buffers = plan.buffers()
    slots = {name: WorkspaceSlot(first + i) for i, (name, _, _, _) in enumerate(buffers)}
    return slots, tuple((elements, torch_dtype(dtype), zeroed) for _, elements, dtype, zeroed in buffers)


def bind(launchers: list[EntryLauncher], plan: LaunchPlan, args: Any, sizes: tuple[int, int, int],
         out_shape: tuple[int, ...], out_dtype: Any, integral_scalars: bool) -> BoundLaunch:
    """A BoundLaunch for `args` (a GemmArgs whose `out` is allocated) of problem sizes (M, N, K)."""
    from tiledispatch.runtime.arguments import argument_values

    device = args.a.device
    index = None if uses_interpreter(device) else (device.index if device.index is not None
                                                   else cuda_runtime().get_device())
    dyn = (args.a, args.b, args.out, args.c, args.bias, args.alpha, args.beta, getattr(args, "scale_a", None),
           getattr(args, "scale_b", None), *args.d)
    slots, workspaces = buffer_slots(plan, len(dyn))
    values = argument_values(args, *sizes, {**dict(plan.scalars), **slots})
    n_dyn = len(dyn) + len(slots)
    bound = [launcher.bind(grid, values, dyn, n_dyn, index) for launcher, grid in zip(launchers, plan.grids)]
    return BoundLaunch([entry for entry, _ in bound], device, index, out_shape, out_dtype, workspaces,
                       integral_scalars, all(ok for _, ok in bound))


def integral(field: str, value: float) -> int:
    if float(value) != int(value):
        raise BadInput(f"{field}={value} must be an integer for int8 GEMMs (exact int32 epilogue)",
                       field=field)
    return int(value)


_INTERP_LOCK = threading.Lock()


@contextlib.contextmanager
def _library_callable_in_interpreter():
    """Make Triton's library helpers (tl.zeros, tl.cdiv, ...) callable from an interpreted kernel.

    They are @jit functions built when Triton was imported; unless TRITON_INTERPRET was set before that import
    they refuse to be called outside a compiled kernel. For the duration of an interpreted launch they are
    replaced by interpreted versions of themselves.
    """
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    with _INTERP_LOCK:
        saved = {name: obj for name, obj in vars(tl).items() if isinstance(obj, JITFunction)}
        try:
            for name, obj in saved.items():
                setattr(tl, name, InterpretedFunction(obj.fn))
            yield
        finally:
            for name, obj in saved.items():
                setattr(tl, name, obj)


def load_launchers(entry_dir: Path) -> list[EntryLauncher]:
    manifest = cache.read_entry(entry_dir)
    if manifest is None:
        raise CompileError(f"cache entry {entry_dir} is missing or corrupt; rebuild the registry",
                           field="cache")
    module_entries = _entries_of(entry_dir / cache.SOURCE)
    return [EntryLauncher(entry_dir, spec, manifest["fingerprint"]) for spec in module_entries]


def _entries_of(source: Path) -> list[EntrySpec]:
    """Read ENTRIES from a generated file without executing it (it is a literal)."""
    import ast

    tree = ast.parse(source.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "ENTRIES" for t in node.targets):
            return [EntrySpec.from_json(e) for e in ast.literal_eval(node.value)]
    raise BadInput(f"{source} has no ENTRIES literal", field="source")

