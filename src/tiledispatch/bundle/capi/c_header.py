"""The C header of the exported library (tiledispatch.h): the ABI integrators compile against.

Kept as text here (not a package-data file) so that an installed package carries it without packaging
rules; codegen writes it beside the generated source.
"""
from __future__ import annotations

ABI_VERSION = 1

HEADER = r"""/* tiledispatch C ABI: GEMM and convolution plans exported ahead of time from a bundle.
 *
 * The library holds a table of exact problems (sizes, dtype and the strides they were bound for), each with
 * the kernel tiledispatch selected for it and its compiled cubin. A call looks its problem up and launches on
 * the given stream; a problem not in the table returns TD_ERR_NO_PLAN. Every function returns a td_status;
 * td_last_error() gives the calling thread's message for the last failure. Pointers are device pointers
 * (CUdeviceptr or the runtime API's void *), 16-byte aligned; strides are in elements; `stream` is a
 * CUstream / cudaStream_t (NULL: the legacy default stream). Calls use the CUDA context current on the
 * calling thread (without one, device 0's primary context). See docs/design/bundle_capi.md.
 */
#ifndef TILEDISPATCH_H
#define TILEDISPATCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TD_ABI_VERSION 1

typedef enum td_status {
  TD_OK = 0,
  TD_ERR_NO_DRIVER = 1,     /* libcuda.so.1 cannot be loaded (no NVIDIA driver on this machine) */
  TD_ERR_CUDA = 2,          /* a CUDA driver call failed (the message names it and its error) */
  TD_ERR_NO_PLAN = 3,       /* the problem is not in the library's table */
  TD_ERR_STRIDES = 4,       /* the problem is in the table, but bound for other strides */
  TD_ERR_BAD_ARGUMENT = 5,  /* a NULL pointer, a size < 1, or an unknown op / dtype / direction / ndim */
  TD_ERR_ALIGNMENT = 6,     /* a tensor pointer is not 16-byte aligned */
  TD_ERR_ARCH = 7,          /* the device is not the arch the kernels were compiled for */
  TD_ERR_RESOURCE = 8       /* host memory, or more CUDA contexts than the library tracks */
} td_status;

typedef enum td_dtype { TD_F16 = 1, TD_BF16 = 2, TD_F32 = 3, TD_TF32 = 4 } td_dtype;
typedef enum td_direction { TD_FWD = 0, TD_BWD_DATA = 1, TD_BWD_WEIGHT = 2 } td_direction;
typedef enum td_op { TD_OP_GEMM = 0, TD_OP_CONV = 1 } td_op;

/* out (batch x m x n) = alpha * a (batch x m x k) @ b (batch x k x n). a, b and out have the dtype
 * (TD_TF32: fp32 tensors multiplied in tf32). Strides (batch, row, column) in elements; batch stride 0
 * shares an operand across the batch. */
typedef struct td_gemm_problem {
  int32_t dtype;
  int64_t batch, m, n, k;
  int64_t a_strides[3];
  int64_t b_strides[3];
  int64_t out_strides[3];
} td_gemm_problem;

/* A grouped convolution, as torch's conv{1,2,3}d: x (N, C, *spatial), w (K, C/groups, *filter),
 * y (N, K, *out). Per direction the written tensor is y (fwd), x (= dx, bwd_data) or w (= dw, bwd_weight);
 * y is dy in the backward directions. Strides in torch's dim order, in elements (channels-last tensors
 * have channel stride 1). Entries past ndim are ignored. */
typedef struct td_conv_problem {
  int32_t direction;
  int32_t dtype;            /* TD_F16, TD_BF16 or TD_F32 */
  int32_t ndim;             /* 1, 2 or 3 */
  int64_t n, c, k, groups;
  int64_t spatial[3], filter[3], stride[3], pad_lo[3], pad_hi[3], dilation[3];
  int64_t x_strides[5], w_strides[5], y_strides[5];
} td_conv_problem;

/* Load the CUDA driver (libcuda.so.1, at run time). Optional: the first launch does it. */
int td_init(void);
int td_gemm(const td_gemm_problem *problem, const void *a, const void *b, void *out, float alpha,
            void *stream);
int td_conv(const td_conv_problem *problem, const void *x, const void *w, void *y, void *stream);
/* The instance name of the kernel the table holds for a problem (op: td_op; problem: a td_gemm_problem or
 * td_conv_problem). Needs no GPU. *instance points to static storage. */
int td_select(int op, const void *problem, const char **instance);
const char *td_last_error(void);
const char *td_status_string(int status);
const char *td_arch(void);              /* e.g. "sm_90" */
int td_plan_count(void);
/* Free the workspaces and unload the kernels (no call may be in flight). */
void td_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* TILEDISPATCH_H */
"""
