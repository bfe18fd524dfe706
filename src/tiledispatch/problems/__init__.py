from tiledispatch.problems.gemm import ACTIVATIONS, BIAS_MODES, LAYOUTS, Epilogue, GemmProblem

__all__ = ["ACTIVATIONS", "BIAS_MODES", "LAYOUTS", "Epilogue", "GemmProblem"]
