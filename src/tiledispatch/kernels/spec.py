"""Kernel entry specifications: the parameters of a generated @triton.jit function and how to compile it.

An EntrySpec is plain data (picklable, JSON-able): the generated source file embeds it, `build` compiles from
it, and the launcher orders run-time arguments by it.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    ty: str                     # Triton signature type ("*fp16", "i32", "fp32", "constexpr")
    value: Any = None           # the value of a constexpr
    divisible16: bool = False   # compile with tt.divisibility=16 (pointer alignment / stride multiple)

    @property
    def is_constexpr(self) -> bool:
        return self.ty == "constexpr"


@dataclasses.dataclass(frozen=True)
class EntrySpec:
    fn: str
    params: tuple[Param, ...]
    num_warps: int
    num_stages: int

    def signature(self) -> dict[str, str]:
        return {p.name: p.ty for p in self.params}

    def constexprs(self) -> dict[str, Any]:
        return {p.name: p.value for p in self.params if p.is_constexpr}

    def attrs(self) -> dict[tuple[int, ...], list[list[Any]]]:
        return {(i,): [["tt.divisibility", 16]] for i, p in enumerate(self.params) if p.divisible16}

    def to_json(self) -> dict[str, Any]:
        return {"fn": self.fn, "num_warps": self.num_warps, "num_stages": self.num_stages,
                "params": [dataclasses.asdict(p) for p in self.params]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EntrySpec:
        params = tuple(Param(**p) for p in data["params"])
        return cls(data["fn"], params, data["num_warps"], data["num_stages"])

    def arg_names(self) -> list[str]:
        return [p.name for p in self.params]


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """How to launch an instance on one problem: one grid per entry (in entry order), extra scalar arguments
    by parameter name, and scratch buffers to allocate by parameter name -> (elements, dtype name)."""

    grids: tuple[tuple[int, int, int], ...]
    scalars: tuple[tuple[str, Any], ...] = ()
    workspaces: tuple[tuple[str, int, str], ...] = ()
