"""The fixed C of the exported library: table types (PRELUDE, before the generated table) and the runtime
(RUNTIME, after it): key lookup, the CUDA driver loaded with dlopen at first use, per-context modules,
per-(context, stream) workspaces, TMA tensor maps encoded per call, and cuLaunchKernelEx.
"""
from __future__ import annotations

PRELUDE = r"""#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "tiledispatch.h"

enum { TD_ARG_PTR, TD_ARG_NULL, TD_ARG_WS, TD_ARG_CONST, TD_ARG_ALPHA_F32, TD_ARG_ALPHA_I32, TD_ARG_TMA };

typedef struct { uint8_t kind; uint8_t size; uint16_t index; uint64_t bits; } td_arg;
typedef struct {
  uint8_t role, rank, dtype, swizzle;
  uint64_t dims[5];
  uint64_t strides[4];
  uint32_t box[5];
} td_tma;
typedef struct {
  const unsigned char *image;
  const char *function;
  int num_warps, num_ctas, shared, cooperative, pdl;
} td_kernel;
typedef struct { int kernel; uint32_t grid[3]; int first_arg, n_args, first_tma, n_tma, scratch; } td_launch;
typedef struct { uint64_t offset, bytes; int zeroed; } td_workspace;
typedef struct {
  int op, key_at, key_len;
  uint64_t hash;
  const char *instance;
  int first_launch, n_launches, first_ws, n_ws;
  uint64_t ws_bytes;
} td_plan;
"""

RUNTIME = r"""
#define TD_GEMM_KEY 15
#define TD_CONV_KEY 41
#define TD_GEMM_STRIDES 6
#define TD_CONV_STRIDES 26
#define TD_MAX_CONTEXTS 16

/* ---- errors ---------------------------------------------------------------------------------------- */
static _Thread_local char td_message[1024];

static int td_fail(int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(td_message, sizeof td_message, fmt, ap);
  va_end(ap);
  return status;
}

const char *td_last_error(void) { return td_message; }
const char *td_arch(void) { return TD_ARCH; }
int td_plan_count(void) { return TD_N_PLANS; }

const char *td_status_string(int status) {
  static const char *names[] = {"TD_OK", "TD_ERR_NO_DRIVER", "TD_ERR_CUDA", "TD_ERR_NO_PLAN",
                                "TD_ERR_STRIDES", "TD_ERR_BAD_ARGUMENT", "TD_ERR_ALIGNMENT", "TD_ERR_ARCH",
                                "TD_ERR_RESOURCE"};
  return status >= 0 && status <= TD_ERR_RESOURCE ? names[status] : "TD_ERR_UNKNOWN";
}

/* ---- the CUDA driver, loaded at run time -------------------------------------------------------------- */
#define TD_XSTR(x) #x
#define TD_STR(x) TD_XSTR(x)   /* the exported symbol of a versioned name: cuMemAlloc -> "cuMemAlloc_v2" */
static struct {
  CUresult (*Init)(unsigned int);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*DeviceGetAttribute)(int *, CUdevice_attribute, CUdevice);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*FuncGetAttribute)(int *, CUfunction_attribute, CUfunction);
  CUresult (*FuncSetAttribute)(CUfunction, CUfunction_attribute, int);
  CUresult (*FuncSetCacheConfig)(CUfunction, CUfunc_cache);
  CUresult (*LaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*TensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                   const cuuint64_t *, const cuuint32_t *, const cuuint32_t *,
                                   CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                   CUtensorMapFloatOOBfill);
} cu;

static pthread_once_t td_once = PTHREAD_ONCE_INIT;
static int td_driver_status = TD_ERR_NO_DRIVER;
static char td_driver_message[512];
static void *td_libcuda;

static void *td_symbol(const char *name) {
  void *fn = dlsym(td_libcuda, name);
  if (fn == NULL && td_driver_status == TD_OK) {
    td_driver_status = TD_ERR_NO_DRIVER;
    snprintf(td_driver_message, sizeof td_driver_message,
             "libcuda.so.1 lacks %s (the driver is older than the CUDA 12 API this library calls)", name);
  }
  return fn;
}

#define TD_LOAD(field, name) \
  do { void *td_sym = td_symbol(TD_STR(name)); memcpy(&cu.field, &td_sym, sizeof td_sym); } while (0)

static void td_load_driver(void) {
  td_libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (td_libcuda == NULL) {
    const char *why = dlerror();
    snprintf(td_driver_message, sizeof td_driver_message,
             "no CUDA driver found: dlopen(\"libcuda.so.1\") failed (%s); the library needs an NVIDIA GPU "
             "and its driver", why ? why : "unknown reason");
    return;
  }
  td_driver_status = TD_OK;
  TD_LOAD(Init, cuInit); TD_LOAD(GetErrorName, cuGetErrorName); TD_LOAD(GetErrorString, cuGetErrorString);
  TD_LOAD(CtxGetCurrent, cuCtxGetCurrent); TD_LOAD(CtxSetCurrent, cuCtxSetCurrent);
  TD_LOAD(CtxGetDevice, cuCtxGetDevice); TD_LOAD(DeviceGet, cuDeviceGet);
  TD_LOAD(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
  TD_LOAD(DeviceGetAttribute, cuDeviceGetAttribute);
  TD_LOAD(ModuleLoadData, cuModuleLoadData); TD_LOAD(ModuleUnload, cuModuleUnload);
  TD_LOAD(ModuleGetFunction, cuModuleGetFunction); TD_LOAD(FuncGetAttribute, cuFuncGetAttribute);
  TD_LOAD(FuncSetAttribute, cuFuncSetAttribute); TD_LOAD(FuncSetCacheConfig, cuFuncSetCacheConfig);
  TD_LOAD(LaunchKernelEx, cuLaunchKernelEx); TD_LOAD(MemAlloc, cuMemAlloc); TD_LOAD(MemFree, cuMemFree);
  TD_LOAD(MemsetD8Async, cuMemsetD8Async); TD_LOAD(TensorMapEncodeTiled, cuTensorMapEncodeTiled);
  if (td_driver_status != TD_OK) return;
  CUresult r = cu.Init(0);
  if (r != CUDA_SUCCESS) {
    const char *name = "?";
    cu.GetErrorName(r, &name);
    td_driver_status = TD_ERR_NO_DRIVER;
    snprintf(td_driver_message, sizeof td_driver_message, "cuInit failed: %s (no usable GPU)", name);
  }
}

int td_init(void) {
  pthread_once(&td_once, td_load_driver);
  if (td_driver_status != TD_OK) return td_fail(td_driver_status, "%s", td_driver_message);
  return TD_OK;
}

static int td_cuda(CUresult r, const char *call) {
  const char *name = "?", *text = "";
  if (cu.GetErrorName) cu.GetErrorName(r, &name);
  if (cu.GetErrorString) cu.GetErrorString(r, &text);
  return td_fail(TD_ERR_CUDA, "%s failed: %s (%s)", call, name, text);
}

#define TD_CHECK(call) \
  do { CUresult td_r = (call); if (td_r != CUDA_SUCCESS) return td_cuda(td_r, #call); } while (0)

/* ---- problem keys ------------------------------------------------------------------------------------ */
static uint64_t td_hash(const int64_t *key, int n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int i = 0; i < n; i++) h = (h ^ (uint64_t)key[i]) * 0x100000001B3ull;
  return h;
}

static void td_normalize(int64_t *strides, const int64_t *sizes, int n) {
  for (int i = 0; i < n; i++) if (sizes[i] == 1) strides[i] = 0;   /* never stepped: not part of a key */
}

static int td_positive(const int64_t *values, int n, const char *what) {
  for (int i = 0; i < n; i++)
    if (values[i] < 1)
      return td_fail(TD_ERR_BAD_ARGUMENT, "%s=%lld must be >= 1", what, (long long)values[i]);
  return TD_OK;
}

static int td_gemm_key(const td_gemm_problem *p, int64_t *key) {
  if (p == NULL) return td_fail(TD_ERR_BAD_ARGUMENT, "problem is NULL");
  if (p->dtype < TD_F16 || p->dtype > TD_TF32)
    return td_fail(TD_ERR_BAD_ARGUMENT, "dtype=%d is not a td_dtype; legal: TD_F16 (1), TD_BF16 (2), "
                   "TD_F32 (3), TD_TF32 (4)", (int)p->dtype);
  const int64_t dims[4] = {p->batch, p->m, p->n, p->k};
  if (td_positive(dims, 4, "batch/m/n/k")) return TD_ERR_BAD_ARGUMENT;
  int64_t sizes[9] = {p->batch, p->m, p->k, p->batch, p->k, p->n, p->batch, p->m, p->n};
  key[0] = TD_OP_GEMM; key[1] = p->dtype; key[2] = p->batch; key[3] = p->m; key[4] = p->n; key[5] = p->k;
  memcpy(key + 6, p->a_strides, 3 * sizeof(int64_t));
  memcpy(key + 9, p->b_strides, 3 * sizeof(int64_t));
  memcpy(key + 12, p->out_strides, 3 * sizeof(int64_t));
  td_normalize(key + 6, sizes, 9);
  return TD_OK;
}

static int td_conv_key(const td_conv_problem *p, int64_t *key) {
  if (p == NULL) return td_fail(TD_ERR_BAD_ARGUMENT, "problem is NULL");
  if (p->direction < TD_FWD || p->direction > TD_BWD_WEIGHT)
    return td_fail(TD_ERR_BAD_ARGUMENT, "direction=%d is not a td_direction; legal: TD_FWD (0), "
                   "TD_BWD_DATA (1), TD_BWD_WEIGHT (2)", (int)p->direction);
  if (p->dtype < TD_F16 || p->dtype > TD_F32)
    return td_fail(TD_ERR_BAD_ARGUMENT, "dtype=%d is not a convolution dtype; legal: TD_F16 (1), "
                   "TD_BF16 (2), TD_F32 (3)", (int)p->dtype);
  if (p->ndim < 1 || p->ndim > 3)
    return td_fail(TD_ERR_BAD_ARGUMENT, "ndim=%d must be 1, 2 or 3", (int)p->ndim);
  const int64_t dims[4] = {p->n, p->c, p->k, p->groups};
  if (td_positive(dims, 4, "n/c/k/groups") || td_positive(p->spatial, p->ndim, "spatial")
      || td_positive(p->filter, p->ndim, "filter") || td_positive(p->stride, p->ndim, "stride")
      || td_positive(p->dilation, p->ndim, "dilation")) return TD_ERR_BAD_ARGUMENT;
  if (p->c % p->groups || p->k % p->groups)
    return td_fail(TD_ERR_BAD_ARGUMENT, "groups=%lld must divide c=%lld and k=%lld", (long long)p->groups,
                   (long long)p->c, (long long)p->k);
  int nd = p->ndim;
  int64_t out[3] = {0, 0, 0};
  for (int i = 0; i < nd; i++) {
    if (p->pad_lo[i] < 0 || p->pad_hi[i] < 0) return td_fail(TD_ERR_BAD_ARGUMENT, "padding must be >= 0");
    int64_t span = p->spatial[i] + p->pad_lo[i] + p->pad_hi[i] - p->dilation[i] * (p->filter[i] - 1) - 1;
    if (span < 0) return td_fail(TD_ERR_BAD_ARGUMENT, "the output of spatial dim %d is empty", i);
    out[i] = span / p->stride[i] + 1;
  }
  memset(key, 0, TD_CONV_KEY * sizeof(int64_t));
  key[0] = TD_OP_CONV; key[1] = p->direction; key[2] = p->dtype; key[3] = nd;
  key[4] = p->n; key[5] = p->c; key[6] = p->k; key[7] = p->groups;
  const int64_t *geometry[6] = {p->spatial, p->filter, p->stride, p->pad_lo, p->pad_hi, p->dilation};
  for (int g = 0; g < 6; g++) for (int i = 0; i < nd; i++) key[8 + 3 * g + i] = geometry[g][i];
  int64_t shapes[3][5] = {{p->n, p->c}, {p->k, p->c / p->groups}, {p->n, p->k}};
  const int64_t *strides[3] = {p->x_strides, p->w_strides, p->y_strides};
  for (int i = 0; i < nd; i++) {
    shapes[0][2 + i] = p->spatial[i]; shapes[1][2 + i] = p->filter[i]; shapes[2][2 + i] = out[i];
  }
  for (int t = 0; t < 3; t++) {
    memcpy(key + TD_CONV_STRIDES + 5 * t, strides[t], (size_t)(nd + 2) * sizeof(int64_t));
    td_normalize(key + TD_CONV_STRIDES + 5 * t, shapes[t], nd + 2);
  }
  return TD_OK;
}

static const char *td_dtype_name(int64_t code) {
  static const char *names[] = {"?", "fp16", "bf16", "fp32", "tf32"};
  return code >= 1 && code <= 4 ? names[code] : "?";
}

static void td_list(char *buf, size_t size, const int64_t *values, int n) {
  size_t at = strlen(buf);
  for (int i = 0; i < n && at + 24 < size; i++)
    at += (size_t)snprintf(buf + at, size - at, "%s%lld", i ? ", " : "(", (long long)values[i]);
  if (at + 2 < size) strcat(buf, ")");
}

/* A problem key as text: "gemm bf16 batch=1 m=.. n=.. k=.. strides a(..) b(..) out(..)" or the conv form. */
static void td_describe(const int64_t *key, char *buf, size_t size) {
  buf[0] = 0;
  if (key[0] == TD_OP_GEMM) {
    snprintf(buf, size, "gemm %s batch=%lld m=%lld n=%lld k=%lld strides a", td_dtype_name(key[1]),
             (long long)key[2], (long long)key[3], (long long)key[4], (long long)key[5]);
    td_list(buf, size, key + 6, 3); strncat(buf, " b", size - strlen(buf) - 1);
    td_list(buf, size, key + 9, 3); strncat(buf, " out", size - strlen(buf) - 1);
    td_list(buf, size, key + 12, 3);
    return;
  }
  static const char *dirs[] = {"fwd", "bwd_data", "bwd_weight"};
  int nd = (int)key[3];
  snprintf(buf, size, "conv %s %s %dd n=%lld c=%lld k=%lld groups=%lld spatial", dirs[key[1]],
           td_dtype_name(key[2]), nd, (long long)key[4], (long long)key[5], (long long)key[6],
           (long long)key[7]);
  static const char *names[] = {" filter", " stride", " pad_lo", " pad_hi", " dilation"};
  td_list(buf, size, key + 8, nd);
  for (int g = 0; g < 5; g++) {
    strncat(buf, names[g], size - strlen(buf) - 1);
    td_list(buf, size, key + 11 + 3 * g, nd);
  }
  static const char *roles[] = {" strides x", " w", " y"};
  for (int t = 0; t < 3; t++) {
    strncat(buf, roles[t], size - strlen(buf) - 1);
    td_list(buf, size, key + TD_CONV_STRIDES + 5 * t, nd + 2);
  }
}

static _Thread_local int td_last_hit = -1;

static int td_find(const int64_t *key, int n, int strides_at, const td_plan **found) {
  int last = td_last_hit;
  if (last >= 0 && td_plans[last].key_len == n && memcmp(td_keys + td_plans[last].key_at, key,
                                                         (size_t)n * sizeof(int64_t)) == 0) {
    *found = &td_plans[last];
    return TD_OK;
  }
  uint64_t h = td_hash(key, n);
  int near = -1;
  for (int i = 0; i < TD_N_PLANS; i++) {
    const td_plan *p = &td_plans[i];
    if (p->key_len != n || p->op != key[0]) continue;
    const int64_t *k = td_keys + p->key_at;
    if (p->hash == h && memcmp(k, key, (size_t)n * sizeof(int64_t)) == 0) {
      td_last_hit = i;
      *found = p;
      return TD_OK;
    }
    if (near < 0 && memcmp(k, key, (size_t)strides_at * sizeof(int64_t)) == 0) near = i;
  }
  char want[512], have[512];
  td_describe(key, want, sizeof want);
  if (near >= 0) {
    td_describe(td_keys + td_plans[near].key_at, have, sizeof have);
    return td_fail(TD_ERR_STRIDES, "no plan for %s: the library's plan of these sizes is bound for other "
                   "strides (%s); pass tensors of those strides or export a plan for these", want, have);
  }
  return td_fail(TD_ERR_NO_PLAN, "no plan for %s: the library holds %d exact problems (add it to the "
                 "problems file and export the library again)", want, TD_N_PLANS);
}

int td_select(int op, const void *problem, const char **instance) {
  int64_t key[TD_CONV_KEY];
  const td_plan *plan = NULL;
  int status;
  if (instance == NULL) return td_fail(TD_ERR_BAD_ARGUMENT, "instance (the out pointer) is NULL");
  if (op == TD_OP_GEMM)
    status = td_gemm_key(problem, key) ? TD_ERR_BAD_ARGUMENT
                                       : td_find(key, TD_GEMM_KEY, TD_GEMM_STRIDES, &plan);
  else if (op == TD_OP_CONV)
    status = td_conv_key(problem, key) ? TD_ERR_BAD_ARGUMENT
                                       : td_find(key, TD_CONV_KEY, TD_CONV_STRIDES, &plan);
  else
    return td_fail(TD_ERR_BAD_ARGUMENT, "op=%d is not a td_op; legal: TD_OP_GEMM (0), TD_OP_CONV (1)", op);
  if (status != TD_OK) return status;
  *instance = plan->instance;
  return TD_OK;
}

/* ---- contexts, modules, workspaces ------------------------------------------------------------------- */
typedef struct td_ws_node {
  struct td_ws_node *next;
  CUstream stream;
  int plan;
  CUdeviceptr base;
} td_ws_node;

typedef struct {
  CUcontext ctx;
  CUmodule modules[TD_N_KERNELS];
  CUfunction functions[TD_N_KERNELS];
  td_ws_node *workspaces;
} td_context;

static pthread_mutex_t td_lock = PTHREAD_MUTEX_INITIALIZER;
static td_context td_contexts[TD_MAX_CONTEXTS];
static int td_n_contexts;

static int td_check_arch(void) {
  CUdevice dev;
  int major = 0, minor = 0;
  TD_CHECK(cu.CtxGetDevice(&dev));
  TD_CHECK(cu.DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  TD_CHECK(cu.DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  if (major * 10 + minor != TD_ARCH_CC)
    return td_fail(TD_ERR_ARCH, "the current device is sm_%d%d; this library's kernels are compiled for %s "
                   "(export a bundle and library for sm_%d%d)", major, minor, TD_ARCH, major, minor);
  return TD_OK;
}

/* The calling thread's context (device 0's primary context made current when there is none). */
static int td_context_of(td_context **out) {
  CUcontext ctx = NULL;
  TD_CHECK(cu.CtxGetCurrent(&ctx));
  if (ctx == NULL) {
    CUdevice dev;
    TD_CHECK(cu.DeviceGet(&dev, 0));
    TD_CHECK(cu.DevicePrimaryCtxRetain(&ctx, dev));
    TD_CHECK(cu.CtxSetCurrent(ctx));
  }
  for (int i = 0; i < td_n_contexts; i++)
    if (td_contexts[i].ctx == ctx) { *out = &td_contexts[i]; return TD_OK; }
  if (td_n_contexts == TD_MAX_CONTEXTS)
    return td_fail(TD_ERR_RESOURCE, "more than %d CUDA contexts called the library", TD_MAX_CONTEXTS);
  int status = td_check_arch();
  if (status != TD_OK) return status;
  td_context *c = &td_contexts[td_n_contexts++];
  memset(c, 0, sizeof *c);
  c->ctx = ctx;
  *out = c;
  return TD_OK;
}

static int td_function(td_context *c, int k, CUfunction *out) {
  if (c->functions[k] != NULL) { *out = c->functions[k]; return TD_OK; }
  const td_kernel *kernel = &td_kernels[k];
  CUmodule module;
  CUfunction fn;
  TD_CHECK(cu.ModuleLoadData(&module, kernel->image));
  CUresult r = cu.ModuleGetFunction(&fn, module, kernel->function);
  if (r != CUDA_SUCCESS) { cu.ModuleUnload(module); return td_cuda(r, "cuModuleGetFunction"); }
  if (kernel->shared > 49152) {   /* opt in to the dynamic shared memory above 48 KiB, as Triton does */
    CUdevice dev;
    int optin = 0, fixed = 0;
    TD_CHECK(cu.CtxGetDevice(&dev));
    TD_CHECK(cu.DeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev));
    if (optin > 49152) {
      TD_CHECK(cu.FuncSetCacheConfig(fn, CU_FUNC_CACHE_PREFER_SHARED));
      TD_CHECK(cu.FuncGetAttribute(&fixed, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn));
      TD_CHECK(cu.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, optin - fixed));
    }
  }
  if (kernel->num_ctas == 16)
    TD_CHECK(cu.FuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
  c->modules[k] = module;
  c->functions[k] = fn;
  *out = fn;
  return TD_OK;
}

/* The plan's workspaces on this stream: allocated on first use, zeroed ones cleared on the stream, kept. */
static int td_plan_workspaces(td_context *c, int plan, CUstream stream, CUdeviceptr *base) {
  for (td_ws_node *w = c->workspaces; w != NULL; w = w->next)
    if (w->plan == plan && w->stream == stream) { *base = w->base; return TD_OK; }
  const td_plan *p = &td_plans[plan];
  td_ws_node *w = calloc(1, sizeof *w);
  if (w == NULL) return td_fail(TD_ERR_RESOURCE, "out of host memory");
  CUresult r = cu.MemAlloc(&w->base, (size_t)p->ws_bytes);
  if (r != CUDA_SUCCESS) { free(w); return td_cuda(r, "cuMemAlloc (workspace)"); }
  for (int i = 0; i < p->n_ws; i++) {
    const td_workspace *ws = &td_workspaces_table[p->first_ws + i];
    r = ws->zeroed ? cu.MemsetD8Async(w->base + ws->offset, 0, (size_t)ws->bytes, stream) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS) { cu.MemFree(w->base); free(w); return td_cuda(r, "cuMemsetD8Async (workspace)"); }
  }
  w->plan = plan;
  w->stream = stream;
  w->next = c->workspaces;
  c->workspaces = w;
  *base = w->base;
  return TD_OK;
}

void td_shutdown(void) {
  if (td_driver_status != TD_OK) return;
  pthread_mutex_lock(&td_lock);
  for (int i = 0; i < td_n_contexts; i++) {
    td_context *c = &td_contexts[i];
    cu.CtxSetCurrent(c->ctx);
    for (td_ws_node *w = c->workspaces, *next; w != NULL; w = next) {
      next = w->next;
      cu.MemFree(w->base);
      free(w);
    }
    for (int k = 0; k < TD_N_KERNELS; k++) if (c->modules[k] != NULL) cu.ModuleUnload(c->modules[k]);
  }
  td_n_contexts = 0;
  td_last_hit = -1;
  pthread_mutex_unlock(&td_lock);
}

/* ---- launches ----------------------------------------------------------------------------------------- */
static int td_prepare(const td_plan *plan, CUstream stream, CUfunction *functions, CUdeviceptr *ws) {
  td_context *c = NULL;
  int status = td_context_of(&c);
  for (int i = 0; status == TD_OK && i < plan->n_launches; i++)
    status = td_function(c, td_launches[plan->first_launch + i].kernel, &functions[i]);
  *ws = 0;
  if (status == TD_OK && plan->n_ws > 0) status = td_plan_workspaces(c, (int)(plan - td_plans), stream, ws);
  return status;
}

static int td_fire(const td_launch *l, CUfunction fn, const uint64_t *ptrs, float alpha, CUdeviceptr ws,
                   CUstream stream) {
  const td_kernel *kernel = &td_kernels[l->kernel];
  uint64_t store[TD_MAX_ARGS + 2];
  void *params[TD_MAX_ARGS + 2];
  CUtensorMap maps[TD_MAX_TMA + 1];
  for (int t = 0; t < l->n_tma; t++) {
    const td_tma *d = &td_tmas[l->first_tma + t];
    static const cuuint32_t unit[5] = {1, 1, 1, 1, 1};
    CUresult r = cu.TensorMapEncodeTiled(&maps[t], (CUtensorMapDataType)d->dtype, d->rank,
                                         (void *)ptrs[d->role], d->dims, d->strides, d->box, unit,
                                         CU_TENSOR_MAP_INTERLEAVE_NONE,
                                         (CUtensorMapSwizzle)d->swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return td_cuda(r, "cuTensorMapEncodeTiled");
  }
  int n = l->n_args;
  for (int i = 0; i < n; i++) {
    const td_arg *a = &td_args[l->first_arg + i];
    params[i] = &store[i];
    switch (a->kind) {
      case TD_ARG_PTR: store[i] = ptrs[a->index]; break;
      case TD_ARG_NULL: store[i] = 0; break;
      case TD_ARG_WS: store[i] = ws + td_workspaces_table[a->index].offset; break;
      case TD_ARG_CONST: store[i] = a->bits; break;
      case TD_ARG_ALPHA_F32: { uint32_t bits; memcpy(&bits, &alpha, 4); store[i] = bits; break; }
      case TD_ARG_ALPHA_I32: store[i] = (uint32_t)(int32_t)alpha; break;
      default: params[i] = &maps[a->index]; break;   /* TD_ARG_TMA */
    }
  }
  store[n] = l->scratch >= 0 ? ws + td_workspaces_table[l->scratch].offset : 0;   /* global scratch */
  store[n + 1] = 0;                                                                /* profile scratch */
  params[n] = &store[n];
  params[n + 1] = &store[n + 1];
  CUlaunchAttribute attrs[4];
  CUlaunchConfig config;
  memset(&config, 0, sizeof config);
  memset(attrs, 0, sizeof attrs);
  config.gridDimX = l->grid[0] * (uint32_t)kernel->num_ctas;
  config.gridDimY = l->grid[1];
  config.gridDimZ = l->grid[2];
  config.blockDimX = 32u * (uint32_t)kernel->num_warps;
  config.blockDimY = 1;
  config.blockDimZ = 1;
  config.sharedMemBytes = (unsigned int)kernel->shared;
  config.hStream = stream;
  config.attrs = attrs;
  unsigned int na = 0;
  if (kernel->pdl) {
    attrs[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[na++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (kernel->cooperative) {
    attrs[na].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[na++].value.cooperative = 1;
  }
  if (kernel->num_ctas != 1) {
    attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[na].value.clusterDim.x = (unsigned int)kernel->num_ctas;
    attrs[na].value.clusterDim.y = 1;
    attrs[na++].value.clusterDim.z = 1;
    attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    attrs[na++].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
  }
  config.numAttrs = na;
  CUresult r = cu.LaunchKernelEx(&config, fn, params, NULL);
  if (r != CUDA_SUCCESS) return td_cuda(r, "cuLaunchKernelEx");
  return TD_OK;
}

static int td_run(const td_plan *plan, const uint64_t *ptrs, int n_ptrs, float alpha, void *stream) {
  static const char *roles[2][3] = {{"a", "b", "out"}, {"x", "w", "y"}};
  for (int i = 0; i < n_ptrs; i++) {
    if (ptrs[i] == 0) return td_fail(TD_ERR_BAD_ARGUMENT, "%s is NULL", roles[plan->op][i]);
    if (ptrs[i] & 15)
      return td_fail(TD_ERR_ALIGNMENT, "%s=%p is not 16-byte aligned (the plans are bound for aligned "
                     "tensors)",
                     roles[plan->op][i], (void *)ptrs[i]);
  }
  int status = td_init();
  if (status != TD_OK) return status;
  CUfunction functions[TD_MAX_LAUNCHES];
  CUdeviceptr ws;
  pthread_mutex_lock(&td_lock);
  status = td_prepare(plan, (CUstream)stream, functions, &ws);
  pthread_mutex_unlock(&td_lock);
  for (int i = 0; status == TD_OK && i < plan->n_launches; i++)
    status = td_fire(&td_launches[plan->first_launch + i], functions[i], ptrs, alpha, ws, (CUstream)stream);
  return status;
}

int td_gemm(const td_gemm_problem *problem, const void *a, const void *b, void *out, float alpha,
            void *stream) {
  int64_t key[TD_GEMM_KEY];
  const td_plan *plan = NULL;
  if (td_gemm_key(problem, key) != TD_OK) return TD_ERR_BAD_ARGUMENT;
  int status = td_find(key, TD_GEMM_KEY, TD_GEMM_STRIDES, &plan);
  if (status != TD_OK) return status;
  const uint64_t ptrs[4] = {(uint64_t)(uintptr_t)a, (uint64_t)(uintptr_t)b, (uint64_t)(uintptr_t)out, 0};
  return td_run(plan, ptrs, 3, alpha, stream);
}

int td_conv(const td_conv_problem *problem, const void *x, const void *w, void *y, void *stream) {
  int64_t key[TD_CONV_KEY];
  const td_plan *plan = NULL;
  if (td_conv_key(problem, key) != TD_OK) return TD_ERR_BAD_ARGUMENT;
  int status = td_find(key, TD_CONV_KEY, TD_CONV_STRIDES, &plan);
  if (status != TD_OK) return status;
  const uint64_t ptrs[4] = {(uint64_t)(uintptr_t)x, (uint64_t)(uintptr_t)w, (uint64_t)(uintptr_t)y, 0};
  return td_run(plan, ptrs, 3, 1.0f, stream);
}
"""
