"""Drop-in torch modules on tiledispatch's kernels, and `convert(model)` to swap a model's layers in place.

    import tiledispatch.nn as tdnn
    report = tdnn.convert(model)   # conv / linear layers now run torch.ops.tiledispatch.*
    print(report)                  # a table: layers taken, layers left on torch and why

Importing this package imports torch and registers the custom ops (tiledispatch.ops).
"""
from __future__ import annotations

from tiledispatch.nn.convert import ConvertReport, Layer, convert
from tiledispatch.nn.modules import Conv1d, Conv2d, Conv3d, Linear

__all__ = ["Conv1d", "Conv2d", "Conv3d", "ConvertReport", "Layer", "Linear", "convert"]
