"""The C ABI over a bundle: `export_capi` writes a shared library (generated C, compiled with the system C
compiler) whose td_gemm / td_conv / td_select serve an exact list of problems with the kernels selection chose
for them ahead of time (cuDNN-style serialized plans). problems.py: the problem list and keys; plan.py: one
problem's selection and launch recipe; codegen.py / c_runtime.py / c_header.py: the C; export.py: the
whole export; binding.py: a ctypes binding (tests, tools). Design: docs/design/bundle_capi.md.

Key layout (int64 words, as the C builds it from a td_gemm_problem / td_conv_problem):
    GEMM: 0, dtype, batch, m, n, k, a strides (3), b strides (3), out strides (3)                  15 words
    conv: 1, direction, dtype, ndim, n, c, k, groups, spatial, filter, stride, pad_lo, pad_hi, dilation
          (3 each, zero past ndim), x, w, y strides (5 each, zero past ndim + 2)                   41 words
with the stride of every size-1 dimension set to 0.
"""
