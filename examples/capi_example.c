/* The tiledispatch C ABI from C: a bf16 GEMM (rcr) or a bf16 2-D forward convolution (channels-last) through
 * a library written by `tiledispatch export-capi`, checked against a CPU reference, then the host time of one
 * call (median of individually timed calls, no synchronisation inside the timed loop).
 *
 *   cc -O2 examples/capi_example.c -I LIBDIR -I TRITON/backends/nvidia/include -L LIBDIR -ltdcapi \
 *      -Wl,-rpath,LIBDIR -l:libcuda.so.1 -lm -o capi_example
 *   ./capi_example gemm M N K [rounds]
 *   ./capi_example conv N C K H W R S STRIDE PAD [rounds]
 *
 * The problem must be in the library's table (td_select says which kernel serves it). Prints one JSON line.
 * tools/capi_gpu_check.py builds and runs it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>

#include "tiledispatch.h"

#define CHECK_CU(call)                                                           \
  do {                                                                           \
    CUresult r_ = (call);                                                        \
    if (r_ != CUDA_SUCCESS) { fprintf(stderr, "%s failed: %d\n", #call, r_); exit(2); } \
  } while (0)

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);   /* round to nearest even */
  return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static CUdeviceptr upload(const uint16_t *host, size_t n) {
  CUdeviceptr d;
  CHECK_CU(cuMemAlloc(&d, n * 2));
  if (host) CHECK_CU(cuMemcpyHtoD(d, host, n * 2));
  return d;
}

static uint16_t *random_bf16(size_t n, unsigned *seed) {
  uint16_t *h = malloc(n * 2);
  for (size_t i = 0; i < n; i++) h[i] = to_bf16((float)rand_r(seed) / RAND_MAX - 0.5f);
  return h;
}

/* Host time of `rounds` rounds of 100 calls, each call timed alone; the GPU drains between rounds. */
typedef int (*call_fn)(void *ctx);
static void host_times(call_fn call, void *ctx, int rounds, double *median, double *p10, double *p90) {
  int n = rounds * 100;
  double *t = malloc(sizeof(double) * (size_t)n);
  for (int r = 0; r < rounds; r++) {
    for (int i = 0; i < 100; i++) {
      double t0 = now_us();
      int status = call(ctx);
      t[r * 100 + i] = now_us() - t0;
      if (status != TD_OK) { fprintf(stderr, "call failed: %s\n", td_last_error()); exit(1); }
    }
    CHECK_CU(cuCtxSynchronize());
  }
  qsort(t, (size_t)n, sizeof(double), cmp_double);
  *median = t[n / 2]; *p10 = t[n / 10]; *p90 = t[n * 9 / 10];
  free(t);
}

typedef struct { td_gemm_problem p; CUdeviceptr a, b, out; } gemm_ctx;
static int gemm_call(void *c) {
  gemm_ctx *g = c;
  return td_gemm(&g->p, (void *)g->a, (void *)g->b, (void *)g->out, 1.0f, NULL);
}

typedef struct { td_conv_problem p; CUdeviceptr x, w, y; } conv_ctx;
static int conv_call(void *c) {
  conv_ctx *v = c;
  return td_conv(&v->p, (void *)v->x, (void *)v->w, (void *)v->y, NULL);
}

static int run_gemm(long m, long n, long k, int rounds) {
  unsigned seed = 1;
  gemm_ctx g = {.p = {TD_BF16, 1, m, n, k, {m * k, k, 1}, {k * n, 1, k}, {m * n, n, 1}}};
  const char *instance;
  if (td_select(TD_OP_GEMM, &g.p, &instance) != TD_OK) { fprintf(stderr, "%s\n", td_last_error()); return 1; }
  uint16_t *a = random_bf16((size_t)(m * k), &seed), *b = random_bf16((size_t)(k * n), &seed);   /* b: k x n, col-major */
  g.a = upload(a, (size_t)(m * k)); g.b = upload(b, (size_t)(k * n)); g.out = upload(NULL, (size_t)(m * n));
  if (gemm_call(&g) != TD_OK) { fprintf(stderr, "td_gemm: %s\n", td_last_error()); return 1; }
  uint16_t *out = malloc((size_t)(m * n) * 2);
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuMemcpyDtoH(out, g.out, (size_t)(m * n) * 2));
  double worst = 0, scale = 1e-6;
  for (long i = 0; i < m; i++)
    for (long j = 0; j < n; j++) {
      double ref = 0;
      for (long q = 0; q < k; q++) ref += (double)from_bf16(a[i * k + q]) * from_bf16(b[j * k + q]);
      worst = fmax(worst, fabs(ref - from_bf16(out[i * n + j])));
      scale = fmax(scale, fabs(ref));
    }
  gemm_ctx wrong = g;
  wrong.p.k = k + 1;
  int missing = gemm_call(&wrong);   /* not in the table: TD_ERR_NO_PLAN, and the message names it */
  double med, p10, p90;
  host_times(gemm_call, &g, rounds, &med, &p10, &p90);
  printf("{\"op\": \"gemm\", \"m\": %ld, \"n\": %ld, \"k\": %ld, \"instance\": \"%s\", \"max_rel_err\": %.3g, "
         "\"host_us_median\": %.3f, \"host_us_p10\": %.3f, \"host_us_p90\": %.3f, \"unknown_status\": \"%s\"}\n",
         m, n, k, instance, worst / scale, med, p10, p90, td_status_string(missing));
  return worst / scale < 2e-2 ? 0 : 3;
}

static int run_conv(long nb, long c, long kk, long h, long w, long r, long s, long stride, long pad, int rounds) {
  unsigned seed = 2;
  long oh = (h + 2 * pad - r) / stride + 1, ow = (w + 2 * pad - s) / stride + 1;
  conv_ctx v = {.p = {TD_FWD, TD_BF16, 2, nb, c, kk, 1, {h, w}, {r, s}, {stride, stride}, {pad, pad}, {pad, pad},
                      {1, 1}, {h * w * c, 1, w * c, c}, {r * s * c, 1, s * c, c}, {oh * ow * kk, 1, ow * kk, kk}}};
  const char *instance;
  if (td_select(TD_OP_CONV, &v.p, &instance) != TD_OK) { fprintf(stderr, "%s\n", td_last_error()); return 1; }
  size_t nx = (size_t)(nb * h * w * c), nw = (size_t)(kk * r * s * c), ny = (size_t)(nb * oh * ow * kk);
  uint16_t *x = random_bf16(nx, &seed), *wt = random_bf16(nw, &seed), *y = malloc(ny * 2);
  v.x = upload(x, nx); v.w = upload(wt, nw); v.y = upload(NULL, ny);
  if (conv_call(&v) != TD_OK) { fprintf(stderr, "td_conv: %s\n", td_last_error()); return 1; }
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuMemcpyDtoH(y, v.y, ny * 2));
  double worst = 0, scale = 1e-6;
  for (long b = 0; b < nb; b++) for (long i = 0; i < oh; i++) for (long j = 0; j < ow; j++)
    for (long o = 0; o < kk; o++) {
      double ref = 0;
      for (long u = 0; u < r; u++) for (long q = 0; q < s; q++) {
        long hi = i * stride - pad + u, wi = j * stride - pad + q;
        if (hi < 0 || hi >= h || wi < 0 || wi >= w) continue;
        for (long ch = 0; ch < c; ch++)
          ref += (double)from_bf16(x[((b * h + hi) * w + wi) * c + ch]) * from_bf16(wt[((o * r + u) * s + q) * c + ch]);
      }
      worst = fmax(worst, fabs(ref - from_bf16(y[((b * oh + i) * ow + j) * kk + o])));
      scale = fmax(scale, fabs(ref));
    }
  double med, p10, p90;
  host_times(conv_call, &v, rounds, &med, &p10, &p90);
  printf("{\"op\": \"conv_fwd\", \"n\": %ld, \"c\": %ld, \"k\": %ld, \"h\": %ld, \"w\": %ld, \"r\": %ld, \"s\": %ld, "
         "\"instance\": \"%s\", \"max_rel_err\": %.3g, \"host_us_median\": %.3f, \"host_us_p10\": %.3f, "
         "\"host_us_p90\": %.3f}\n", nb, c, kk, h, w, r, s, instance, worst / scale, med, p10, p90);
  return worst / scale < 2e-2 ? 0 : 3;
}

int main(int argc, char **argv) {
  CUdevice dev;
  CUcontext ctx;
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  if (td_init() != TD_OK) { fprintf(stderr, "%s\n", td_last_error()); return 1; }
  if (argc >= 5 && strcmp(argv[1], "gemm") == 0)
    return run_gemm(atol(argv[2]), atol(argv[3]), atol(argv[4]), argc > 5 ? atoi(argv[5]) : 20);
  if (argc >= 11 && strcmp(argv[1], "conv") == 0)
    return run_conv(atol(argv[2]), atol(argv[3]), atol(argv[4]), atol(argv[5]), atol(argv[6]), atol(argv[7]),
                    atol(argv[8]), atol(argv[9]), atol(argv[10]), argc > 11 ? atoi(argv[11]) : 20);
  fprintf(stderr, "usage: %s gemm M N K [rounds] | conv N C K H W R S STRIDE PAD [rounds]\n", argv[0]);
  return 64;
}
