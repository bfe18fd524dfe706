"""Kernel entry specifications: the parameters of a generated @triton.jit function and how to compile it.

An EntrySpec is plain data (picklable, JSON-able): the generated source file embeds it, `build` compiles from
it, and the launcher orders run-time arguments by it.
"""
from __future__ import annotations

import dataclasses
from typing import Any

ALIGN_BYTES = 16   # what aligned kernels assume of their pointers (vector loads, tensor descriptors)


def aligned16(aligned: bool) -> int:
    """The divisibility of a pointer that is 16-byte aligned when `aligned` (else nothing is known)."""
    return ALIGN_BYTES if aligned else 1


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    ty: str                     # Triton signature type ("*fp16", "i32", "fp32", "constexpr")
    value: Any = None           # the value of a constexpr
    divisibility: int = 1       # compiled with tt.divisibility=N when N > 1: a pointer's alignment in bytes,
                                # an integer's known factor (a size or stride in elements)

    @property
    def is_constexpr(self) -> bool:
        return self.ty == "constexpr"


@dataclasses.dataclass(frozen=True)
class EntrySpec:
    fn: str
    params: tuple[Param, ...]
    num_warps: int
    num_stages: int
    dialect: str = "triton"     # "gluon": a Gluon kernel (compiled from GluonASTSource; no interpreter)

    def signature(self) -> dict[str, str]:
        return {p.name: p.ty for p in self.params}

    def constexprs(self) -> dict[str, Any]:
        return {p.name: p.value for p in self.params if p.is_constexpr}

    def attrs(self) -> dict[tuple[int, ...], list[list[Any]]]:
        return {(i,): [["tt.divisibility", p.divisibility]] for i, p in enumerate(self.params)
                if p.divisibility > 1}

    def to_json(self) -> dict[str, Any]:
        out = {"fn": self.fn, "num_warps": self.num_warps, "num_stages": self.num_stages,
               "params": [dataclasses.asdict(p) for p in self.params]}
        if self.dialect != "triton":   # Triton entries keep the form their golden files have
            out["dialect"] = self.dialect
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EntrySpec:
        params = tuple(Param(**p) for p in data["params"])
        return cls(data["fn"], params, data["num_warps"], data["num_stages"], data.get("dialect", "triton"))

    def ast_source(self, module: Any) -> Any:
        """The compiler's source object of this entry's function in `module` (an imported generated file)."""
        fn = getattr(module, self.fn)
        if self.dialect == "gluon":
            from triton.experimental.gluon._runtime import GluonASTSource

            return GluonASTSource(fn, self.signature(), self.constexprs(), self.attrs())
        from triton.compiler import ASTSource

        return ASTSource(fn, self.signature(), self.constexprs(), self.attrs())

    def arg_names(self) -> list[str]:
        return [p.name for p in self.params]


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """How to launch an instance on one problem: one grid per entry (in entry order), extra scalar arguments
    by parameter name, scratch buffers to allocate by parameter name -> (elements, dtype name), and int32
    counters by parameter name -> elements: zero when a launch starts, and left zero by the kernels (each
    counter that a launch counts up is set back by the program that sees the last count)."""

    grids: tuple[tuple[int, int, int], ...]
    scalars: tuple[tuple[str, Any], ...] = ()
    workspaces: tuple[tuple[str, int, str], ...] = ()
    counters: tuple[tuple[str, int], ...] = ()

    def buffers(self) -> tuple[tuple[str, int, str, bool], ...]:
        """Every buffer the launcher provides, workspaces then counters: (name, elements, dtype, zeroed)."""
        return (tuple((name, n, dtype, False) for name, n, dtype in self.workspaces)
                + tuple((name, n, "int32", True) for name, n in self.counters))


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one program of an instance holds, as its family estimates it: shared memory in bytes, accumulator
    values per thread (the registers its validity rules bound) and the warps holding the accumulator."""

    shared_memory: int
    accumulators: int
    warps: int
