/* The library's instances of the small-M grouped GEMM kernel (grouped_skinny.cuh) and its routing
 * rule (grouped_skinny.h). LIBRARY_CONFIG is the compile-time shape the library runs and PER_SM
 * the blocks per SM its plan aims at; bench/micro/grouped_skinny.cu times other shapes against
 * this one and the 128x128 grouped kernel, and a faster shape there becomes the library's by
 * copying its template arguments here. */
#include <limits.h>

#include "cuda/gemm/grouped_skinny.cuh"
#include "cuda/gemm/grouped_skinny.h"

/* 16 weight rows per warp, 4 steps of 64 bytes of K per batch (fp8: 2, one 128-wide scale block,
 * which keeps its scales' registers within 2 blocks per SM), the next batch prefetched, plain L2
 * policy, 2 blocks per SM */
typedef ignis_grouped_skinny_config<1, 4, true, IGNIS_SKINNY_LOAD_PLAIN, 2> LIBRARY_CONFIG;
typedef ignis_grouped_skinny_config<1, 2, true, IGNIS_SKINNY_LOAD_PLAIN, 2> LIBRARY_CONFIG_FP8;
enum { PER_SM = 4 };
/* the most splits of K a dense product takes (split-K needs the GEMM's workspace: the grouped ops
 * have none and never split) */
enum { MAX_SPLITS = 8 };

static bool grouped_skinny_enabled(void) {
  static const bool enabled = [] {
    const char *value = ignis_env(IGNIS_ENV_GEMM_GROUPED_SKINNY);
    return value == nullptr || strcmp(value, "0") != 0;
  }();
  return enabled;
}

static bool aligned16(const void *ptr, int64_t stride_bytes) {
  return (uintptr_t)ptr % 16 == 0 && stride_bytes % 16 == 0;
}

/* The shape, alignment and device rules both entry points share. */
static int shape_takes(const ignis_grouped_gemm_params *p, int32_t device) {
  const int64_t es = p->fp8 ? 1 : 2, out_es = (int64_t)ignis_dtype_size(p->out_dtype);
  if (p->b_stride_k != 1 || p->groups < 1 || p->m < 1)
    return 0;
  if (p->k <= 0 || (p->k * es) % 16 != 0 || p->n % 8 != 0 || p->n > INT_MAX / 2 || p->k > INT_MAX / 2 ||
      p->groups > INT_MAX / 2 || p->num_weights > INT_MAX / 2)
    return 0;
  if (p->n > 65535LL * 16) /* the grid's y dimension: slices of at least 16 rows */
    return 0;
  if (!aligned16(p->a, p->a_row_stride * es) || !aligned16(p->b, p->b_stride_n * es) ||
      p->b_group_stride * es % 16 != 0 || !aligned16(p->out, p->out_row_stride * out_es))
    return 0;
  return grouped_skinny_enabled() && ignis_compute_capability(device) >= (p->fp8 ? 89 : 80);
}

extern "C" int ignis_cuda_grouped_skinny_takes(const ignis_grouped_gemm_params *p, int32_t device) {
  if (p->m > IGNIS_GROUPED_SKINNY_MAX_M || p->m > IGNIS_GROUPED_SKINNY_MAX_AVERAGE_ROWS * p->groups)
    return 0;
  return shape_takes(p, device);
}

extern "C" int ignis_cuda_gemm_grouped_skinny_takes(const ignis_gemm_params *p, int32_t device) {
  if (p->kind != IGNIS_GEMM_FP8_BLOCK || p->batch != 1 || p->b_scale_block_n != IGNIS_GEMM_SCALE_BLOCK ||
      p->m > IGNIS_GROUPED_SKINNY_MAX_DENSE_M || p->a_dtype != IGNIS_FP8_E4M3 || p->b_dtype != IGNIS_FP8_E4M3 ||
      (p->out_dtype != IGNIS_BF16 && p->out_dtype != IGNIS_F16))
    return 0;
  const ignis_grouped_gemm_params g = ignis_grouped_params_of_dense(p);
  return shape_takes(&g, device);
}

/* Plan and launch on the library's shapes; room may be NULL (no split-K). */
static ignis_status launch(const ignis_grouped_gemm_params *p, int32_t device, void *stream,
                           const ignis_grouped_skinny_split_room *room) {
  IGNIS_CUDA_ON_DEVICE(device);
  const ignis_grouped_skinny_args args = ignis_grouped_skinny_args_of(p);
  const int sms = ignis_cuda_sm_count(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  ignis_status status;
  if (p->fp8)
    status = ignis_grouped_skinny_launch<ignis_grouped_skinny_e4m3, LIBRARY_CONFIG_FP8>(args, sms, PER_SM, s,
                                                                                      nullptr, 0, room);
  else if (p->a_dtype == IGNIS_BF16)
    status = ignis_grouped_skinny_launch<__nv_bfloat16, LIBRARY_CONFIG>(args, sms, PER_SM, s, nullptr, 0, room);
  else
    status = ignis_grouped_skinny_launch<__half, LIBRARY_CONFIG>(args, sms, PER_SM, s, nullptr, 0, room);
  if (status != IGNIS_OK)
    return status;
  return ignis_check_launch(p->fp8 ? "ignis_grouped_mm_fp8_blockscale: the small-M kernel"
                                   : "ignis_grouped_mm: the small-M kernel");
}

extern "C" ignis_status ignis_cuda_grouped_skinny(const ignis_grouped_gemm_params *p, int32_t device,
                                                  void *stream) {
  return launch(p, device, stream, nullptr);
}

extern "C" ignis_status ignis_cuda_gemm_grouped_skinny(const ignis_gemm_params *p, int32_t device, void *stream,
                                                       float *partials, size_t partial_floats, unsigned *counters,
                                                       int counters_count) {
  const ignis_grouped_gemm_params g = ignis_grouped_params_of_dense(p);
  const ignis_grouped_skinny_split_room room = {partials, partial_floats, counters, counters_count, MAX_SPLITS};
  return launch(&g, device, stream, &room);
}
