/* The library's instance of the small-M GEMM kernel (skinny.cuh) and its routing rule
 * (gemm_skinny.h). LIBRARY_CONFIG is the compile-time shape the library runs and PER_SM the
 * resident blocks per SM its split-K aims at; bench/micro/skinny_gemm.cu times the other shapes
 * against this one and cuBLASLt, and a faster shape there becomes the library's by copying its
 * template arguments here. */
#include <limits.h>

#include "cuda/gemm/gemm_skinny.h"
#include "cuda/gemm/skinny.cuh"

/* 16 rows per warp, 4 steps of 32 k per batch, the next batch prefetched, plain L2 policy */
typedef ignis_skinny_config<1, 4, true, IGNIS_SKINNY_LOAD_PLAIN, 2> LIBRARY_CONFIG;
enum { PER_SM = 2 };

/* IGNIS_GEMM_SKINNY: "0" never, "1" wherever the shape fits, otherwise only the products cuBLASLt
 * has no algorithm for (a 16-bit out of the other 16-bit dtype, an f32 bias with a 16-bit out). */
enum skinny_mode { SKINNY_OFF, SKINNY_MIXED_OUT, SKINNY_ALWAYS };

static skinny_mode skinny_setting(void) {
  static const skinny_mode mode = [] {
    const char *value = ignis_env(IGNIS_ENV_GEMM_SKINNY);
    if (value != nullptr && strcmp(value, "0") == 0)
      return SKINNY_OFF;
    if (value != nullptr && strcmp(value, "1") == 0)
      return SKINNY_ALWAYS;
    return SKINNY_MIXED_OUT;
  }();
  return mode;
}

static bool aligned16(const void *ptr, int64_t row_stride, int64_t rows) {
  return (uintptr_t)ptr % 16 == 0 && (rows <= 1 || row_stride % 8 == 0);
}

extern "C" int ignis_cuda_skinny_takes(const ignis_gemm_params *p, int32_t device) {
  if (p->kind != IGNIS_GEMM_PLAIN || p->batch != 1 || p->b_stride_k != 1 || p->m < 1 ||
      p->m > IGNIS_SKINNY_MAX_M || p->k <= 0 || p->k % 8 != 0 || p->n >= INT_MAX || p->k >= INT_MAX)
    return 0;
  if (p->a_dtype != p->b_dtype || (p->a_dtype != IGNIS_BF16 && p->a_dtype != IGNIS_F16))
    return 0;
  if (!aligned16(p->a, p->a_row_stride, p->m) || !aligned16(p->b, p->b_stride_n, p->n))
    return 0;
  const skinny_mode mode = skinny_setting();
  /* what cuBLASLt lacks: a 16-bit out of the other 16-bit dtype, or an f32 bias with a 16-bit out */
  const bool lt_lacks = p->out_dtype != IGNIS_F32 &&
                        (p->out_dtype != p->a_dtype || (p->bias != nullptr && p->bias_dtype == IGNIS_F32));
  if (mode == SKINNY_OFF || (mode == SKINNY_MIXED_OUT && !lt_lacks))
    return 0;
  return ignis_compute_capability(device) >= 80;
}

extern "C" ignis_status ignis_cuda_skinny_gemm(const ignis_gemm_params *p, int32_t device, float *partials,
                                               size_t partial_floats, unsigned *counters, int counters_count,
                                               void *stream) {
  const ignis_skinny_args args = ignis_skinny_args_of(p);
  const int sms = ignis_cuda_sm_count(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  ignis_status status = p->a_dtype == IGNIS_BF16
                            ? ignis_skinny_launch_m<__nv_bfloat16, LIBRARY_CONFIG>(
                                  args, sms, PER_SM, partials, partial_floats, counters, counters_count, s)
                            : ignis_skinny_launch_m<__half, LIBRARY_CONFIG>(
                                  args, sms, PER_SM, partials, partial_floats, counters, counters_count, s);
  if (status != IGNIS_OK)
    return status;
  return ignis_check_launch("ignis GEMM: the small-M kernel");
}
