"""Whether the installed Triton's launcher internals are those the fast launch path was written against.

runtime/raw_launch.py calls the C launch function inside Triton's CUDA launcher and its TMA descriptor
encoder, and runtime/descriptors.HostDescriptor stands in for the descriptor object that launcher reads.
Both follow private code that changes between minor releases (3.7 changed the C function's arguments,
renamed the encoder and reads one more descriptor field), so they run only under the releases listed here;
under any other the launches take Triton's public path: CompiledKernel.run with Triton's TensorDescriptor.
"""
from __future__ import annotations

import functools
import re

# (major, minor) releases whose launcher internals raw_launch and HostDescriptor follow (checked on the GPU).
KNOWN_RELEASES = ((3, 6),)


def release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as "3.6.0" or "3.7.1+git1234"; None if it has neither."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


@functools.cache
def known() -> bool:
    """True where the installed Triton is one of KNOWN_RELEASES (read once per process)."""
    import triton

    return release(triton.__version__) in KNOWN_RELEASES
