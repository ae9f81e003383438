/* CPU backend of RoPE: per token, find its position, compute cos/sin for each rotary pair (or read
 * them from the cos/sin cache), then rotate every q and k head; dimensions past rotary_dim are
 * copied when the output is not the input. The frequency formula is the one in params.h.
 *
 * RoPE + fp8 (ignis_cpu_rope_quant), the plain statement of rope.h's math: per token (skipping
 * padding), its cos/sin row, then every q and k head: rope pairs rotated in f32 (products rounded
 * apart), times the scale, to fp8 with ignis_cpu_to_fp8; nope values and v likewise unrotated.
 * Paged destinations are found from the page table as the header says. */
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

/* ---- RoPE + fp8 quantization ---------------------------------------------------------------- */
static uint8_t *dest_at(const ignis_rope_quant_dest *d, int64_t row, int64_t head) {
  return (uint8_t *)d->data + row + head * d->stride_head;
}

/* n values of src times scale, as fp8 codes. */
static void quantize_values(const ignis_rope_quant_params *p, const void *src, uint8_t *dst, int64_t n,
                            float scale) {
  for (int64_t i = 0; i < n; ++i)
    dst[i] = ignis_cpu_to_fp8(p->out_dtype, ignis_cpu_load(src, p->dtype, i) * scale, p->fp8_max);
}

/* One head's rope part: pairs rotated by cos/sin, times scale, as fp8 codes. */
static void quantize_rotated(const ignis_rope_quant_params *p, const void *src, uint8_t *dst,
                             const float *cos_v, const float *sin_v, float scale) {
  const int64_t half = p->rope_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t xi = p->interleave ? 2 * i : i, yi = p->interleave ? 2 * i + 1 : i + half;
    const float x = ignis_cpu_load(src, p->dtype, xi), y = ignis_cpu_load(src, p->dtype, yi);
    const float xc = x * cos_v[i], ys = y * sin_v[i], xs = x * sin_v[i], yc = y * cos_v[i];
    dst[xi] = ignis_cpu_to_fp8(p->out_dtype, (xc - ys) * scale, p->fp8_max);
    dst[yi] = ignis_cpu_to_fp8(p->out_dtype, (xs + yc) * scale, p->fp8_max);
  }
}

static const void *src_at(const ignis_rope_quant_params *p, const ignis_rope_quant_src *s, int64_t t,
                          int64_t h) {
  return ignis_cpu_at(s->data, p->dtype, t * s->stride_token + h * s->stride_head);
}

ignis_status ignis_cpu_rope_quant(const ignis_rope_quant_params *p, int32_t device, void *stream) {
  const int64_t half = p->rope_dim / 2;
  const int64_t per_token =
      (p->num_q_heads + p->num_k_heads * (p->has_v ? 2 : 1)) * (p->rope_dim + p->nope_dim);
  IGNIS_CPU_PARALLEL_FOR(p->nnz * per_token)
  for (int64_t t = 0; t < p->nnz; ++t) {
    int64_t k_row = t * p->k_rope_out.stride_token, k_nope_row = t * p->k_nope_out.stride_token, v_row = 0;
    if (p->paged) {
      const int64_t b = p->batch_indices[t];
      if (b < 0)
        continue; /* padding */
      const int64_t s = p->positions[t];
      const int64_t page = p->kv_indices[p->kv_indptr[b] + s / p->page_size], slot = s % p->page_size;
      k_row = page * p->k_rope_out.stride_page + slot * p->k_rope_out.stride_token;
      k_nope_row = page * p->k_nope_out.stride_page + slot * p->k_nope_out.stride_token;
      v_row = page * p->v_out.stride_page + slot * p->v_out.stride_token;
    }
    const int64_t pos = index_load(p->pos_ids, p->pos_dtype, t);
    const float *row = p->cos_sin_cache + pos * p->cos_sin_cache_stride;
    const float *cos_v = row, *sin_v = row + half;
    const float sq = p->quant_scale_q, skv = p->quant_scale_kv;
    for (int64_t h = 0; h < p->num_q_heads; ++h) {
      quantize_rotated(p, src_at(p, &p->q_rope, t, h),
                       dest_at(&p->q_rope_out, t * p->q_rope_out.stride_token, h), cos_v, sin_v, sq);
      if (p->nope_dim > 0)
        quantize_values(p, src_at(p, &p->q_nope, t, h),
                        dest_at(&p->q_nope_out, t * p->q_nope_out.stride_token, h), p->nope_dim, sq);
    }
    for (int64_t h = 0; h < p->num_k_heads; ++h) {
      quantize_rotated(p, src_at(p, &p->k_rope, t, h), dest_at(&p->k_rope_out, k_row, h), cos_v, sin_v, skv);
      if (p->nope_dim > 0)
        quantize_values(p, src_at(p, &p->k_nope, t, h), dest_at(&p->k_nope_out, k_nope_row, h), p->nope_dim,
                        skv);
      if (p->has_v)
        quantize_values(p, src_at(p, &p->v, t, h), dest_at(&p->v_out, v_row, h), p->rope_dim + p->nope_dim,
                        skv);
    }
  }
  return IGNIS_OK;
}
