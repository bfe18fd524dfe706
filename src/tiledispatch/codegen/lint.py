"""Checks of generated kernel source for pitfalls of Triton's front end that the interpreter cannot show.

Triton decides which variables a `for` loop carries by comparing each live-in's IR value before and after a
dry visit of the body: a variable whose value is unchanged is not carried. So if two live-ins hold the *same*
value before the loop (`b = a`) and the body assigns `b = a` again before changing `a`, `b` looks unchanged
and every iteration sees its initial value. Python (and so Triton's interpreter) rotates them correctly; the
compiled kernel does not. `loop_carry_aliases` finds such loops in a rendered source; `check_source` raises on
them.
"""
from __future__ import annotations

import ast
import itertools

from tiledispatch.errors import CodegenError


def _stored(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _step(env: dict[str, int], stmt: ast.stmt, fresh: itertools.count) -> None:
    """Apply one statement to `env` (name -> value id): a plain `a = b` copies b's id, anything else (and any
    assignment inside a nested block) makes a fresh one."""
    if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and stmt.value.id in env:
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                env[target.id] = env[stmt.value.id]
        return
    for name in _stored(stmt):
        env[name] = next(fresh)


def _check_loop(loop: ast.For, before: dict[str, int], where: str, found: list[str],
                fresh: itertools.count) -> None:
    after = dict(before)
    for stmt in loop.body:
        _step(after, stmt, fresh)
    changed = {name for name in before if after[name] != before[name]}
    assigned = set().union(*(_stored(stmt) for stmt in loop.body))
    for name in sorted(assigned & before.keys() - changed):
        twins = sorted(other for other in changed if before[other] == before[name])
        if twins:
            found.append(f"{where}: loop at line {loop.lineno} assigns {name} but Triton will not carry it "
                         f"({name} starts as the same value as {', '.join(twins)})")


def _check_block(stmts: list[ast.stmt], env: dict[str, int], where: str, found: list[str],
                 fresh: itertools.count) -> None:
    """Walk a block once, keeping the value ids of its names; check each loop against the ids it starts with
    and the blocks inside it from there."""
    for stmt in stmts:
        if isinstance(stmt, ast.For):
            _check_loop(stmt, env, where, found, fresh)
        for field in ("body", "orelse"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                _check_block(inner, dict(env), where, found, fresh)
        _step(env, stmt, fresh)


def loop_carry_aliases(source: str) -> list[str]:
    """One message per loop of `source` that carries two variables initialised to the same value."""
    found: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            _check_block(node.body, {}, node.name, found, itertools.count())
    return found


def check_source(source: str, name: str) -> None:
    """Raise CodegenError if the generated source of instance `name` has a loop-carry alias."""
    found = loop_carry_aliases(source)
    if found:
        raise CodegenError(f"generated source of {name} would compile wrongly: " + "; ".join(found),
                           field="name")
