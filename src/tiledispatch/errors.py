"""The one exception hierarchy of tiledispatch.

Every error names the offending field and, where there is a closed set, the legal values. Errors about an
argument's value also subclass ValueError, about its Python type TypeError (BadInputType, InvalidConfigType),
about a missing kernel LookupError, so callers may catch either family.
"""
from __future__ import annotations

from collections.abc import Iterable


class TileDispatchError(Exception):
    """Base of every error tiledispatch raises on purpose."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InvalidConfig(TileDispatchError, ValueError):
    """A kernel configuration, name or config file is malformed or invalid for the target."""


class InvalidConfigType(InvalidConfig, TypeError):
    """A kernel configuration field of the wrong Python type (a float tile size, a non-string dtype)."""


class UnsupportedProblem(TileDispatchError):
    """No kernel can compute this problem exactly (not even after exact padding)."""


class NoKernelFound(TileDispatchError, LookupError):
    """A registry holds no (built) kernel for the requested problem or name."""


class CompileError(TileDispatchError):
    """Compiling a kernel instance failed (recorded per instance during builds)."""


class CodegenError(TileDispatchError):
    """Generated kernel source breaks a rule of Triton's front end (a bug of tiledispatch, never skipped)."""


class BadInput(TileDispatchError, ValueError):
    """Tensors or arguments given to a run do not match what the call needs."""


class BadInputType(BadInput, TypeError):
    """An argument of the wrong Python type: a float, bool or string where an int is needed, a list or NumPy
    array where a torch tensor is."""


class CacheError(TileDispatchError):
    """The on-disk cache or tuning database is unusable (version mismatch, unreadable)."""


class BundleError(TileDispatchError, ValueError):
    """A deployment bundle is refused: unreadable, tampered with (a hash or file differs from its manifest),
    written for another arch, Triton or tiledispatch version, or lacking a kernel a strict load needs.
    `field` names what did not match."""


def legal(values: Iterable[object]) -> str:
    """Format a closed set of legal values for an error message."""
    return ", ".join(repr(v) for v in values)


def bad_choice(kind: type[TileDispatchError], field: str, value: object,
               choices: Iterable[object]) -> TileDispatchError:
    """Build the standard 'field has an illegal value' error."""
    return kind(f"{field}={value!r} is not valid; legal values: {legal(choices)}", field=field)
