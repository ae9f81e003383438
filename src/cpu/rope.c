/* CPU backend of RoPE: per token, find its position, compute cos/sin for each rotary pair (or read
 * them from the cos/sin cache), then rotate every q and k head; dimensions past rotary_dim are
 * copied when the output is not the input. The frequency formula is the one in params.h. */
#include <math.h>

#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"

static int64_t index_load(const void *base, ignis_dtype dtype, int64_t i) {
  return dtype == IGNIS_I32 ? ((const int32_t *)base)[i] : ((const int64_t *)base)[i];
}

static int64_t token_position(const ignis_rope_params *p, int64_t t) {
  if (p->position_source == IGNIS_ROPE_POS_IDS)
    return index_load(p->positions, p->index_dtype, t);
  int64_t lo = 0, hi = p->batch_size - 1; /* last request b with indptr[b] <= t */
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (index_load(p->indptr, p->index_dtype, mid) <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return index_load(p->offsets, p->index_dtype, lo) + t - index_load(p->indptr, p->index_dtype, lo);
}

static void rotate_head(const ignis_rope_params *p, const void *in, void *out, const float *cos_v,
                        const float *sin_v) {
  int64_t half = p->rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    int64_t xi = p->interleave ? 2 * i : i;
    int64_t yi = p->interleave ? 2 * i + 1 : i + half;
    float x = ignis_cpu_load(in, p->dtype, xi), y = ignis_cpu_load(in, p->dtype, yi);
    ignis_cpu_store(out, p->dtype, xi, x * cos_v[i] - y * sin_v[i]);
    ignis_cpu_store(out, p->dtype, yi, x * sin_v[i] + y * cos_v[i]);
  }
  if (in != out)
    for (int64_t d = p->rotary_dim; d < p->head_dim; ++d)
      ignis_cpu_store(out, p->dtype, d, ignis_cpu_load(in, p->dtype, d));
}

ignis_status ignis_cpu_rope(const ignis_rope_params *p, int32_t device, void *stream) {
  int64_t half = p->rotary_dim / 2;
  IGNIS_CPU_PARALLEL_FOR(p->nnz * (p->num_q_heads + p->num_k_heads) * p->head_dim)
  for (int64_t t = 0; t < p->nnz; ++t) {
    float cos_v[IGNIS_ROPE_MAX_HEAD_DIM / 2], sin_v[IGNIS_ROPE_MAX_HEAD_DIM / 2];
    int64_t pos = token_position(p, t);
    for (int64_t i = 0; i < half; ++i) {
      if (p->cos_sin_cache) {
        const float *row = p->cos_sin_cache + pos * p->cos_sin_cache_stride;
        cos_v[i] = row[i];
        sin_v[i] = row[half + i];
      } else {
        float f = powf(p->rope_theta, -(float)(2 * i) / (float)p->rotary_dim);
        float s = fminf(fmaxf(f * p->smooth_a + p->smooth_b, 0.0f), 1.0f);
        float freq = (1.0f - s) * f * p->rope_rcp_scale + s * f;
        float angle = (float)pos * freq;
        cos_v[i] = cosf(angle);
        sin_v[i] = sinf(angle);
      }
    }
    for (int64_t h = 0; h < p->num_q_heads; ++h)
      rotate_head(p, ignis_cpu_at(p->q, p->dtype, t * p->q_stride_token + h * p->q_stride_head),
                  ignis_cpu_at_mut(p->q_out, p->dtype, t * p->q_out_stride_token + h * p->q_out_stride_head),
                  cos_v, sin_v);
    for (int64_t h = 0; h < p->num_k_heads; ++h)
      rotate_head(p, ignis_cpu_at(p->k, p->dtype, t * p->k_stride_token + h * p->k_stride_head),
                  ignis_cpu_at_mut(p->k_out, p->dtype, t * p->k_out_stride_token + h * p->k_out_stride_head),
                  cos_v, sin_v);
  }
  return IGNIS_OK;
}
