"""One problem of a C library -> its plan: the kernel selection chose among the bundle's kernels, and the
launches td would make for it, as data the generated C replays (cubin, grid, an argument recipe).

The launches are taken from td's own binding: the chosen kernel is bound (Kernel.bound_launch) to CPU
tensors of the problem's exact shapes and strides (allocated, never touched: no memory is committed), which
gives Triton-interpreter entries holding each launch's grid, argument order and constants. Each argument
becomes a recipe item: a per-call pointer (by role), a constant, alpha, a workspace, or a TMA tensor map the C
encodes per call from the base pointer (cuTensorMapEncodeTiled, with the encoding recorded here).
"""
from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiledispatch.bundle.capi.problems import ConvSpec, GemmSpec, ProblemSpec
from tiledispatch.errors import BundleError
from tiledispatch.runtime import launcher as rt

if TYPE_CHECKING:
    from tiledispatch.arch.spec import ArchSpec
    from tiledispatch.registry.kernel import Kernel
    from tiledispatch.select.selector import Selection

# GEMM per-call slots (runtime/launcher.py) -> C roles; conv slots are (x, w, y, bias) = roles 0..3
_GEMM_ROLES = {rt.A: 0, rt.B: 1, rt.OUT: 2}
_INT_SIZES = {"i1": 1, "i8": 1, "u1": 1, "u8": 1, "i16": 2, "u16": 2, "i32": 4, "u32": 4, "i64": 8, "u64": 8}
_FLOAT_FORMATS = {"fp32": "<f", "f32": "<f", "fp64": "<d", "fp16": "<e"}
SELECT_STRATEGIES = ("auto", "ml", "rules", "first_fit")


@dataclasses.dataclass
class CapiPlan:
    """A problem's plan: the selection's kernel and its launches as recipes (to_dict: the JSON form)."""

    spec: ProblemSpec
    instance: str
    strategy: str
    notes: list[str]
    launches: list[dict[str, Any]]
    workspaces: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.spec.op, "problem": self.spec.describe(), "key": self.spec.key(),
                "instance": self.instance, "strategy": self.strategy, "notes": self.notes,
                "launches": self.launches, "workspaces": self.workspaces}


def bundle_kernels(bundle: Any, arch: ArchSpec) -> list[Kernel]:
    """Kernel objects for every kernel of the bundle, pointed at its entries (nothing is compiled)."""
    from tiledispatch.configs.conv import ConvConfig
    from tiledispatch.configs.gemm import GemmConfig
    from tiledispatch.configs.naming import parse_name
    from tiledispatch.registry.kernel import make_kernel

    kernels = []
    for name, row in sorted(bundle.kernels.items()):
        cfg = parse_name(name)
        if isinstance(cfg, (GemmConfig, ConvConfig)):
            kernels.append(make_kernel(cfg, arch))
            kernels[-1].entry_dir = Path(bundle.path) / row["path"]
    return kernels


def plan_problem(spec: ProblemSpec, kernels: list[Kernel], arch: ArchSpec, strategy: str = "auto"
                 ) -> CapiPlan:
    """The plan of one problem: selection among the kernels that run it directly (no padded copies, no
    vendor library), then the bound launch read as recipes. A chosen kernel the C ABI cannot replay
    (BundleError with field 'kernel') gives way to the next choice, noted in the plan; raises BundleError
    naming the problem when none is left."""
    args, problem = _arguments(spec)
    plans = _candidates(spec, problem, kernels)
    passed: list[str] = []
    while True:
        selection = _select(spec, problem, plans, arch, strategy)
        try:
            plan = _replay(spec, selection, args)
        except BundleError as exc:
            if exc.field != "kernel" or spec.instance is not None or len(plans) == 1:
                raise
            passed.append(f"passed over {selection.kernel.name}: {exc}")
            plans = [p for p in plans if p.kernel is not selection.kernel]
            continue
        plan.notes = passed + plan.notes
        return plan


def _replay(spec: ProblemSpec, selection: Selection, args: Any) -> CapiPlan:
    """The selection's bound launch as recipes."""
    kernel = selection.kernel
    bound = kernel.bound_launch(args, selection.problem)
    if not bound.reusable:
        raise BundleError(f"{spec.describe()}: {kernel.name} binds a tensor constant into its launch, which "
                          "the C ABI cannot replay", field="kernel")
    n_call = 9 if isinstance(spec, GemmSpec) else 4
    workspaces = [{"bytes": n * _itemsize(dtype), "zeroed": zeroed} for n, dtype, zeroed in bound.workspaces]
    specs = {launcher.spec.fn: launcher for launcher in kernel.launchers()}
    launches = []
    for entry in bound.entries:
        launcher = specs[entry.jit.fn.__name__]
        launches.append(_launch(spec, kernel.name, launcher, entry, n_call, len(bound.workspaces),
                                workspaces))
    return CapiPlan(spec, kernel.name, selection.strategy, list(selection.notes), launches, workspaces)


def _arguments(spec: ProblemSpec) -> tuple[Any, Any]:
    """td's arguments of the problem (CPU tensors of its strides) and the checked problem they make."""
    from tiledispatch.dtypes import torch_dtype
    from tiledispatch.registry.kernel import prepare
    from tiledispatch.runtime.arguments import GemmArgs, problem_from_args
    from tiledispatch.runtime.conv_args import ConvArgs

    if isinstance(spec, GemmSpec):
        dtype = torch_dtype("fp32" if spec.dtype == "tf32" else spec.dtype)
        a = _tensor((spec.batch, spec.m, spec.k), spec.a_strides, dtype, spec.batch)
        b = _tensor((spec.batch, spec.k, spec.n), spec.b_strides, dtype, spec.batch)
        out = _tensor((spec.batch, spec.m, spec.n), spec.out_strides, dtype, spec.batch, output=True)
        args = GemmArgs(a, b, out, allow_tf32=spec.dtype == "tf32")
        return args, problem_from_args(args, prefer_layout=spec.layout)
    p = spec.problem
    dtype = torch_dtype(p.dtype)
    shapes = {"x": (p.n, p.c, *p.spatial), "w": (p.k, p.c_per_group, *p.filter), "y": (p.n, p.k, *p.output)}
    strides = {"x": spec.x_strides, "w": spec.w_strides, "y": spec.y_strides}
    tensors = {role: _strided(shapes[role], strides[role], dtype) for role in shapes}
    conv_args = ConvArgs(tensors["x"], tensors["w"], tensors["y"])
    return conv_args, prepare(p, conv_args)


def _tensor(shape: tuple[int, int, int], strides: tuple[int, int, int], dtype: Any, batch: int,
            output: bool = False) -> Any:
    """A (batch, rows, cols) operand as td takes it: 2-D when batch is 1 or (an input) shared by every
    batch."""
    if batch == 1 or (strides[0] == 0 and not output):
        return _strided(shape[1:], strides[1:], dtype)
    return _strided(shape, strides, dtype)


def _strided(shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any) -> Any:
    import torch

    return torch.empty_strided(shape, strides, dtype=dtype, device="cpu")


def _itemsize(dtype: Any) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


def _candidates(spec: ProblemSpec, problem: Any, kernels: list[Kernel]) -> list[Any]:
    """The plans of the bundle's kernels that run the problem directly (the pinned instance alone when the
    problem names one)."""
    from tiledispatch.select.selector import is_vendor, plans_of

    found = plans_of(kernels, problem)
    plans = [plan for plan in found if not plan.padded and not is_vendor(plan)]
    if spec.instance is not None:
        plans = [plan for plan in plans if plan.kernel.name == spec.instance]
        if not plans:
            where = "is not in the bundle" if all(k.name != spec.instance for k in kernels) else \
                "does not run it directly"
            raise BundleError(f"{spec.describe()}: the pinned instance {spec.instance} {where}",
                              field="instance")
    if not plans:
        why = (f"only on zero-padded copies ({len(found)} plan(s)), which the C ABI does not make" if found
               else "no kernel of the bundle runs it")
        raise BundleError(f"{spec.describe()}: {why}; export the bundle with a preset that covers it",
                          field="problem")
    return plans


def _select(spec: ProblemSpec, problem: Any, plans: list[Any], arch: ArchSpec, strategy: str
            ) -> Selection:
    from tiledispatch.select import cost_model
    from tiledispatch.select.selector import choose

    model, why_not = (cost_model.shipped_model(arch.name, problem) if strategy in ("auto", "ml")
                      else (None, "not asked"))
    return choose(plans, problem, strategy, arch, model=model, why_not=why_not)


def _launch(spec: ProblemSpec, instance: str, launcher: Any, entry: Any, n_call: int, n_ws: int,
            workspaces: list[dict[str, Any]]) -> dict[str, Any]:
    """One entry's launch: its kernel's launch metadata, grid and argument recipe."""
    meta = json.loads((launcher.entry_dir / f"{launcher.spec.fn}.json").read_text())
    if meta.get("profile_scratch_size", 0):
        raise BundleError(f"{instance}: {launcher.spec.fn} needs profile scratch (instrumented build); the "
                          "C ABI launches uninstrumented kernels", field="kernel")
    n_dyn = n_call + n_ws
    consts = entry.consts
    picks = entry.pick(tuple(range(n_dyn + len(consts))))
    descs = dict(entry.descs)
    tma_meta = iter(meta.get("tensordesc_meta") or [])
    args: list[list[Any]] = []
    tmas: list[dict[str, Any]] = []
    for position, (param, pick) in enumerate(zip(launcher.spec.params, picks)):
        if param.is_constexpr:
            continue
        value = pick if pick < n_dyn else consts[pick - n_dyn]
        if position in descs:
            args += _descriptor(spec, instance, pick, descs[position], next(tma_meta, None), tmas, n_call)
        elif pick < n_call:
            args.append(_call_slot(spec, instance, param, pick))
        elif pick < n_dyn:
            args.append(["ws", pick - n_call])
        else:
            args.append(_constant(instance, param, value))
    grid = list(entry.grid)
    scratch = -1
    if meta.get("global_scratch_size", 0):
        scratch = len(workspaces)
        ctas = meta.get("num_ctas", 1)
        workspaces.append({"bytes": grid[0] * grid[1] * grid[2] * ctas * meta["global_scratch_size"],
                           "zeroed": False})
    return {"kernel": f"{instance}/{launcher.spec.fn}", "function": meta["name"],
            "cubin": str(launcher.entry_dir / f"{launcher.spec.fn}.cubin"), "grid": grid,
            "num_warps": meta["num_warps"], "num_ctas": meta.get("num_ctas", 1), "shared": meta["shared"],
            "cooperative": bool(meta.get("launch_cooperative_grid")), "pdl": bool(meta.get("launch_pdl")),
            "scratch": scratch, "args": args, "tma": tmas}


def _call_slot(spec: ProblemSpec, instance: str, param: Any, slot: int) -> list[Any]:
    """A per-call argument: a pointer by role, alpha, beta (0), or a null pointer for an absent tensor."""
    if isinstance(spec, ConvSpec):
        return ["ptr", slot] if slot < 3 else ["null"]
    if slot in _GEMM_ROLES:
        return ["ptr", _GEMM_ROLES[slot]]
    if slot == rt.ALPHA:
        return ["alpha", _width(instance, param)]
    if slot == rt.BETA:
        return _constant(instance, param, 0)
    return ["null"]


def _constant(instance: str, param: Any, value: Any) -> list[Any]:
    """["const", bytes, bits]: a scalar of the signature, little-endian bits of its parameter type."""
    if hasattr(value, "data_ptr") or param.ty.startswith("*"):
        raise BundleError(f"{instance}: parameter {param.name} is bound to a constant tensor, which the C "
                          "ABI cannot replay", field="kernel")
    ty = param.ty
    if ty in _INT_SIZES:
        size = _INT_SIZES[ty]
        return ["const", size, int(value) & ((1 << (8 * size)) - 1)]
    if ty in _FLOAT_FORMATS:
        raw = struct.pack(_FLOAT_FORMATS[ty], float(value))
        return ["const", len(raw), int.from_bytes(raw, "little")]
    if ty == "bf16":
        return ["const", 2, int.from_bytes(struct.pack("<f", float(value)), "little") >> 16]
    raise BundleError(f"{instance}: parameter {param.name} has type {ty!r}, which the C ABI does not pass",
                      field="kernel")


def _width(instance: str, param: Any) -> str:
    if param.ty not in ("fp32", "f32", "i32"):
        raise BundleError(f"{instance}: alpha has type {param.ty!r}; the C ABI passes fp32 or i32",
                          field="kernel")
    return "f32" if param.ty != "i32" else "i32"


def _descriptor(spec: ProblemSpec, instance: str, pick: int, geometry: Any, meta: dict[str, Any] | None,
                tmas: list[dict[str, Any]], n_call: int) -> list[list[Any]]:
    """The arguments a tensor-descriptor parameter expands to (Triton 3.6's launcher): a tensor map encoded
    per call plus its shape (i32) and strides (i64); without descriptor metadata, the base pointer, shape,
    strides, padding flag, shape and strides (the kernel then builds the descriptor in global scratch)."""
    if pick >= n_call:
        raise BundleError(f"{instance}: a tensor descriptor over a workspace; the C ABI describes call "
                          "tensors only", field="kernel")
    base = ["ptr", pick] if isinstance(spec, ConvSpec) else ["ptr", _GEMM_ROLES[pick]]
    shape, strides = list(geometry.shape), list(geometry.strides)
    tail = [["const", 4, v & 0xFFFFFFFF] for v in shape] + [["const", 8, v & (2**64 - 1)] for v in strides]
    if meta is None:
        longs = [["const", 8, v & (2**64 - 1)] for v in (*shape, *strides)]
        return [base, *longs, ["const", 1, 0], *tail]
    if meta.get("fp4_padded"):
        raise BundleError(f"{instance}: fp4-padded tensor descriptors are not passed by the C ABI",
                          field="kernel")
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

    rank, elem = len(shape), int(meta["elem_size"])
    tmas.append({"role": base[1], "dtype": TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]], "rank": rank,
                 "dims": shape[::-1], "strides": [s * elem for s in strides[:-1]][::-1],
                 "box": list(meta["block_size"])[::-1], "swizzle": int(meta["swizzle"]), "elem_size": elem})
    return [["tma", len(tmas) - 1], *tail]
