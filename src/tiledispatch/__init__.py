"""tiledispatch: declare, generate, build, select and run Triton GEMM kernels on NVIDIA GPUs."""
from tiledispatch.api import conv, conv_bwd_data, conv_bwd_weight, gemm
from tiledispatch.arch.spec import ArchSpec, detect, get_arch
from tiledispatch.bundle.load import load_bundle
from tiledispatch.configs.conv import ConvConfig
from tiledispatch.configs.gemm import GemmConfig
from tiledispatch.configs.naming import parse_name
from tiledispatch.errors import (BadInput, BundleError, CacheError, CompileError, InvalidConfig,
                                 NoKernelFound, TileDispatchError, UnsupportedProblem)
from tiledispatch.presets import list_presets
from tiledispatch.problems.conv import ConvProblem
from tiledispatch.problems.gemm import Epilogue, GemmProblem
from tiledispatch.registry.kernel import Kernel, Support
from tiledispatch.registry.registry import BuildReport, Registry
from tiledispatch.select.selector import Selection
from tiledispatch.version import __version__

__all__ = [
    "ArchSpec", "BadInput", "BuildReport", "BundleError", "CacheError", "CompileError", "ConvConfig",
    "ConvProblem", "Epilogue", "GemmConfig", "GemmProblem", "InvalidConfig", "Kernel", "NoKernelFound",
    "Registry", "Selection", "Support", "TileDispatchError", "UnsupportedProblem", "__version__", "conv",
    "conv_bwd_data", "conv_bwd_weight", "detect", "gemm", "get_arch", "list_presets", "load_bundle",
    "parse_name",
]
