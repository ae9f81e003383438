/* Front end of the RoPE ops (include/ignis/rope.h): validate q/k/outputs, the position source and
 * the configuration, fill ignis_rope_params, dispatch. Host-resident index tensors are range-checked
 * here; device-resident ones cannot be read without a sync, so their contract is documented.
 *
 * The fused RoPE + fp8 forms (rope_quantize_fp8 and its two paged appends) share one checker of
 * the q/k parts, positions and q outputs (check_quant_common); each form adds its k destinations
 * (outputs, or the pages of a GQA or MLA cache), then every destination is checked disjoint from
 * every source and from the others before anything runs. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/backend.h"
#include "core/config.h"
#include "core/paged_kv_check.h"
#include "core/validate.h"
#include "ignis/quant.h"
#include "ignis/rope.h"

#define ROPE_MAX_POSITION (1 << 24) /* positions are exact in f32 below this */

static int64_t index_at(const ignis_tensor *t, int64_t i) {
  const char *base = (const char *)t->data;
  int64_t offset = i * t->strides[0];
  return t->dtype == IGNIS_I32 ? ((const int32_t *)base)[offset] : ((const int64_t *)base)[offset];
}

/* q or k: 3-D [nnz, heads, head_dim], or (head_size > 0) 2-D [nnz, heads * head_size]. */
static ignis_status view_heads(const char *fn, const char *name, const ignis_tensor *t,
                               int64_t head_size, int64_t *heads, int64_t *head_dim,
                               int64_t *stride_token, int64_t *stride_head) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, head_size > 0 ? 2 : 3, 3));
  IGNIS_TRY(ignis_check_float_dtype(fn, name, t));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, name, t));
  *stride_token = t->strides[0];
  if (t->ndim == 3) {
    *heads = t->shape[1];
    *head_dim = t->shape[2];
    *stride_head = t->strides[1];
    if (head_size > 0 && *head_dim != head_size)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.shape[2]=%lld but head_size=%lld",
                             fn, name, (long long)*head_dim, (long long)head_size);
  } else {
    if (t->shape[1] % head_size != 0)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: %s.shape[1]=%lld is not a multiple of head_size=%lld", fn, name,
                             (long long)t->shape[1], (long long)head_size);
    *heads = t->shape[1] / head_size;
    *head_dim = head_size;
    *stride_head = head_size;
  }
  return IGNIS_OK;
}

static ignis_status check_config(const char *fn, const ignis_rope_config *c, int64_t head_dim,
                                 ignis_rope_params *p) {
  if (!c)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config is NULL", fn);
  static const ignis_rope_config defaults = IGNIS_ROPE_CONFIG_INIT;
  ignis_rope_config read;
  IGNIS_TRY(ignis_read_config(fn, "config->size", "IGNIS_ROPE_CONFIG_INIT", &read, &defaults, c, sizeof read,
                              IGNIS_CONFIG_END(ignis_rope_config, old_context_len)));
  c = &read;
  int64_t rotary_dim = c->rotary_dim == 0 ? head_dim : c->rotary_dim;
  if (rotary_dim < 2 || rotary_dim > head_dim || rotary_dim % 2 != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config->rotary_dim=%d must be even and in 2..head_dim=%lld (0 means head_dim)",
                           fn, c->rotary_dim, (long long)head_dim);
  if (c->interleave != 0 && c->interleave != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config->interleave=%d must be 0 or 1", fn,
                           c->interleave);
  if (!(c->rope_scale > 0) || !isfinite(c->rope_scale))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config->rope_scale=%g must be > 0", fn,
                           c->rope_scale);
  if (!(c->rope_theta > 0) || !isfinite(c->rope_theta))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config->rope_theta=%g must be > 0", fn,
                           c->rope_theta);
  p->rotary_dim = rotary_dim;
  p->interleave = c->interleave;
  p->rope_rcp_scale = (float)(1.0 / c->rope_scale);
  p->rope_theta = (float)c->rope_theta;
  p->smooth_a = 0.0f;
  p->smooth_b = 0.0f;
  if (c->llama31) {
    if (!(c->high_freq_factor > c->low_freq_factor) || !isfinite(c->high_freq_factor) ||
        !isfinite(c->low_freq_factor))
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: config->high_freq_factor=%g must be > low_freq_factor=%g", fn,
                             c->high_freq_factor, c->low_freq_factor);
    if (!(c->old_context_len > 0) || !isfinite(c->old_context_len))
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config->old_context_len=%g must be > 0",
                             fn, c->old_context_len);
    double span = c->high_freq_factor - c->low_freq_factor;
    p->smooth_a = (float)(c->old_context_len / (2.0 * 3.14159265358979323846 * span));
    p->smooth_b = (float)(-c->low_freq_factor / span);
  }
  return IGNIS_OK;
}

/* q, k, outputs and their placement; fills the tensor part of p. head_size > 0 allows 2-D views. */
static ignis_status check_qk(const char *fn, const ignis_tensor *q, const ignis_tensor *k,
                             ignis_tensor *q_out, ignis_tensor *k_out, int64_t head_size,
                             ignis_rope_params *p) {
  int64_t q_head_dim = 0, k_head_dim = 0, unused_heads, unused_dim;
  IGNIS_TRY(view_heads(fn, "q", q, head_size, &p->num_q_heads, &q_head_dim, &p->q_stride_token,
                       &p->q_stride_head));
  IGNIS_TRY(view_heads(fn, "k", k, head_size, &p->num_k_heads, &k_head_dim, &p->k_stride_token,
                       &p->k_stride_head));
  IGNIS_TRY(ignis_check_same_dtype(fn, "k", k, "q", q));
  IGNIS_TRY(ignis_check_dim(fn, "k", k, 0, q->shape[0], "q.shape[0]"));
  if (k_head_dim != q_head_dim)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: k head_dim=%lld but q head_dim=%lld", fn,
                           (long long)k_head_dim, (long long)q_head_dim);
  IGNIS_TRY(view_heads(fn, "q_out", q_out, head_size, &unused_heads, &unused_dim,
                       &p->q_out_stride_token, &p->q_out_stride_head));
  IGNIS_TRY(view_heads(fn, "k_out", k_out, head_size, &unused_heads, &unused_dim,
                       &p->k_out_stride_token, &p->k_out_stride_head));
  IGNIS_TRY(ignis_check_same_dtype(fn, "q_out", q_out, "q", q));
  IGNIS_TRY(ignis_check_same_dtype(fn, "k_out", k_out, "q", q));
  IGNIS_TRY(ignis_check_same_shape(fn, "q_out", q_out, "q", q));
  IGNIS_TRY(ignis_check_same_shape(fn, "k_out", k_out, "k", k));
  IGNIS_TRY(ignis_check_alias_or_disjoint(fn, "q_out", q_out, "q", q));
  IGNIS_TRY(ignis_check_alias_or_disjoint(fn, "k_out", k_out, "k", k));
  IGNIS_TRY(ignis_check_disjoint(fn, "q_out", q_out, "k", k));
  IGNIS_TRY(ignis_check_disjoint(fn, "k_out", k_out, "q", q));
  IGNIS_TRY(ignis_check_disjoint(fn, "q_out", q_out, "k_out", k_out));
  if (q_head_dim > IGNIS_ROPE_MAX_HEAD_DIM)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: head_dim=%lld but at most %d is supported", fn,
                           (long long)q_head_dim, IGNIS_ROPE_MAX_HEAD_DIM);
  p->nnz = q->shape[0];
  p->head_dim = q_head_dim;
  p->dtype = q->dtype;
  p->q = q->data;
  p->k = k->data;
  p->q_out = q_out->data;
  p->k_out = k_out->data;
  return IGNIS_OK;
}

static ignis_status dispatch(const ignis_rope_params *p, const ignis_target *target, void *stream) {
  if (p->nnz == 0 || (p->num_q_heads == 0 && p->num_k_heads == 0))
    return IGNIS_OK;
  return target->backend->rope(p, target->device.id, stream);
}

static ignis_status check_host_positions(const char *fn, const char *name, const ignis_tensor *t,
                                         const ignis_target *target, int64_t limit) {
  if (!target->backend->host_memory)
    return IGNIS_OK;
  for (int64_t i = 0; i < t->shape[0]; ++i) {
    int64_t pos = index_at(t, i);
    if (pos < 0 || pos >= limit)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s[%lld]=%lld outside [0, %lld)", fn,
                             name, (long long)i, (long long)pos, (long long)limit);
  }
  return IGNIS_OK;
}

ignis_status ignis_apply_rope_pos_ids(const ignis_tensor *q, const ignis_tensor *k,
                                      const ignis_tensor *pos_ids, const ignis_rope_config *config,
                                      ignis_tensor *q_out, ignis_tensor *k_out, void *stream) {
  const char *fn = "ignis_apply_rope_pos_ids";
  ignis_clear_error();
  ignis_rope_params p = {0};
  IGNIS_TRY(check_qk(fn, q, k, q_out, k_out, 0, &p));
  IGNIS_TRY(check_config(fn, config, p.head_dim, &p));
  IGNIS_TRY(ignis_check_tensor(fn, "pos_ids", pos_ids, 1, 1));
  IGNIS_TRY(ignis_check_index_dtype(fn, "pos_ids", pos_ids));
  IGNIS_TRY(ignis_check_vector(fn, "pos_ids", pos_ids, p.nnz));
  const ignis_tensor *tensors[] = {q, k, q_out, k_out, pos_ids};
  const char *names[] = {"q", "k", "q_out", "k_out", "pos_ids"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 5, &target));
  IGNIS_TRY(check_host_positions(fn, "pos_ids", pos_ids, &target, ROPE_MAX_POSITION));
  p.position_source = IGNIS_ROPE_POS_IDS;
  p.index_dtype = pos_ids->dtype;
  p.positions = pos_ids->data;
  return dispatch(&p, &target, stream);
}

ignis_status ignis_apply_rope(const ignis_tensor *q, const ignis_tensor *k, const ignis_tensor *indptr,
                              const ignis_tensor *offsets, const ignis_rope_config *config,
                              ignis_tensor *q_out, ignis_tensor *k_out, void *stream) {
  const char *fn = "ignis_apply_rope";
  ignis_clear_error();
  ignis_rope_params p = {0};
  IGNIS_TRY(check_qk(fn, q, k, q_out, k_out, 0, &p));
  IGNIS_TRY(check_config(fn, config, p.head_dim, &p));
  IGNIS_TRY(ignis_check_tensor(fn, "indptr", indptr, 1, 1));
  IGNIS_TRY(ignis_check_index_dtype(fn, "indptr", indptr));
  if (indptr->shape[0] < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: indptr.shape[0]=0 but it must be batch+1",
                           fn);
  int64_t batch = indptr->shape[0] - 1;
  IGNIS_TRY(ignis_check_vector(fn, "indptr", indptr, batch + 1));
  IGNIS_TRY(ignis_check_tensor(fn, "offsets", offsets, 1, 1));
  IGNIS_TRY(ignis_check_same_dtype(fn, "offsets", offsets, "indptr", indptr));
  IGNIS_TRY(ignis_check_vector(fn, "offsets", offsets, batch));
  const ignis_tensor *tensors[] = {q, k, q_out, k_out, indptr, offsets};
  const char *names[] = {"q", "k", "q_out", "k_out", "indptr", "offsets"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 6, &target));
  if (target.backend->host_memory) {
    if (index_at(indptr, 0) != 0)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: indptr[0]=%lld but it must be 0", fn,
                             (long long)index_at(indptr, 0));
    for (int64_t b = 0; b < batch; ++b) {
      int64_t start = index_at(indptr, b), end = index_at(indptr, b + 1), offset = index_at(offsets, b);
      if (end < start)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: indptr is not monotonic: indptr[%lld]=%lld > indptr[%lld]=%lld", fn,
                               (long long)b, (long long)start, (long long)(b + 1), (long long)end);
      if (offset < 0 || offset + (end - start) > ROPE_MAX_POSITION)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: offsets[%lld]=%lld puts positions outside [0, 2^24)", fn,
                               (long long)b, (long long)offset);
    }
    if (index_at(indptr, batch) != p.nnz)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: indptr[%lld]=%lld but q.shape[0]=%lld",
                             fn, (long long)batch, (long long)index_at(indptr, batch), (long long)p.nnz);
  }
  p.position_source = IGNIS_ROPE_POS_INDPTR;
  p.index_dtype = indptr->dtype;
  p.indptr = indptr->data;
  p.offsets = offsets->data;
  p.batch_size = batch;
  return dispatch(&p, &target, stream);
}

ignis_status ignis_apply_rope_with_cos_sin_cache(const ignis_tensor *positions, const ignis_tensor *q,
                                                 const ignis_tensor *k, int64_t head_size,
                                                 const ignis_tensor *cos_sin_cache, int32_t is_neox,
                                                 ignis_tensor *q_out, ignis_tensor *k_out, void *stream) {
  const char *fn = "ignis_apply_rope_with_cos_sin_cache";
  ignis_clear_error();
  if (head_size <= 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: head_size=%lld must be > 0", fn,
                           (long long)head_size);
  ignis_rope_params p = {0};
  IGNIS_TRY(check_qk(fn, q, k, q_out, k_out, head_size, &p));
  IGNIS_TRY(ignis_check_tensor(fn, "cos_sin_cache", cos_sin_cache, 2, 2));
  if (cos_sin_cache->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: cos_sin_cache.dtype=%s but it must be f32",
                           fn, ignis_dtype_name(cos_sin_cache->dtype));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "cos_sin_cache", cos_sin_cache));
  int64_t rotary_dim = cos_sin_cache->shape[1];
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_size)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: cos_sin_cache.shape[1]=%lld (the rotary dim) must be even and in 2..head_size=%lld",
                           fn, (long long)rotary_dim, (long long)head_size);
  if (is_neox != 0 && is_neox != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: is_neox=%d must be 0 or 1", fn, is_neox);
  IGNIS_TRY(ignis_check_tensor(fn, "positions", positions, 1, 1));
  IGNIS_TRY(ignis_check_index_dtype(fn, "positions", positions));
  IGNIS_TRY(ignis_check_vector(fn, "positions", positions, p.nnz));
  const ignis_tensor *tensors[] = {q, k, q_out, k_out, positions, cos_sin_cache};
  const char *names[] = {"q", "k", "q_out", "k_out", "positions", "cos_sin_cache"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 6, &target));
  IGNIS_TRY(check_host_positions(fn, "positions", positions, &target, cos_sin_cache->shape[0]));
  p.rotary_dim = rotary_dim;
  p.interleave = is_neox ? 0 : 1;
  p.position_source = IGNIS_ROPE_POS_IDS;
  p.index_dtype = positions->dtype;
  p.positions = positions->data;
  p.cos_sin_cache = (const float *)cos_sin_cache->data;
  p.cos_sin_cache_stride = cos_sin_cache->strides[0];
  p.max_position = cos_sin_cache->shape[0];
  return dispatch(&p, &target, stream);
}

/* ---- RoPE + fp8 quantization ------------------------------------------------------------------- */
#define QUANT_MAX_TENSORS 16

/* The tensors of one call by role, for the overlap checks and the placement. */
typedef struct quant_tensors {
  const ignis_tensor *sources[QUANT_MAX_TENSORS];
  const char *source_names[QUANT_MAX_TENSORS];
  int num_sources;
  const ignis_tensor *dests[QUANT_MAX_TENSORS];
  const char *dest_names[QUANT_MAX_TENSORS];
  int num_dests;
} quant_tensors;

static void add_source(quant_tensors *l, const ignis_tensor *t, const char *name) {
  if (t) {
    l->sources[l->num_sources] = t;
    l->source_names[l->num_sources++] = name;
  }
}

static void add_dest(quant_tensors *l, const ignis_tensor *t, const char *name) {
  if (t) {
    l->dests[l->num_dests] = t;
    l->dest_names[l->num_dests++] = name;
  }
}

/* Every destination disjoint from every source and from the other destinations. */
static ignis_status check_quant_overlaps(const char *fn, const quant_tensors *l) {
  for (int d = 0; d < l->num_dests; ++d) {
    for (int s = 0; s < l->num_sources; ++s)
      IGNIS_TRY(ignis_check_disjoint(fn, l->dest_names[d], l->dests[d], l->source_names[s], l->sources[s]));
    for (int e = 0; e < d; ++e)
      IGNIS_TRY(ignis_check_disjoint(fn, l->dest_names[d], l->dests[d], l->dest_names[e], l->dests[e]));
  }
  return IGNIS_OK;
}

static ignis_status resolve_quant_target(const char *fn, const quant_tensors *l, ignis_target *target) {
  const ignis_tensor *all[2 * QUANT_MAX_TENSORS];
  const char *names[2 * QUANT_MAX_TENSORS];
  int n = 0;
  for (int i = 0; i < l->num_sources; ++i, ++n) {
    all[n] = l->sources[i];
    names[n] = l->source_names[i];
  }
  for (int i = 0; i < l->num_dests; ++i, ++n) {
    all[n] = l->dests[i];
    names[n] = l->dest_names[i];
  }
  return ignis_resolve_target(fn, all, names, n, target);
}

/* A part of q, k or v: [nnz, heads, width] (ndim 3) or [nnz, width] (ndim 2), last dim contiguous.
 * width_what names where the width comes from. */
static ignis_status check_part(const char *fn, const char *name, const ignis_tensor *t, int ndim, int64_t nnz,
                               int64_t heads, const char *heads_what, int64_t width, const char *width_what) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, ndim, ndim));
  IGNIS_TRY(ignis_check_dim(fn, name, t, 0, nnz, "q_rope.shape[0] (nnz)"));
  if (ndim == 3)
    IGNIS_TRY(ignis_check_dim(fn, name, t, 1, heads, heads_what));
  IGNIS_TRY(ignis_check_dim(fn, name, t, ndim - 1, width, width_what));
  return ignis_check_last_dim_contiguous(fn, name, t);
}

static ignis_rope_quant_src quant_src(const ignis_tensor *t) {
  ignis_rope_quant_src s = {0};
  if (t && ignis_tensor_numel(t) > 0) {
    s.data = t->data;
    s.stride_token = t->strides[0];
    s.stride_head = t->ndim == 3 ? t->strides[1] : 0;
  }
  return s;
}

static ignis_rope_quant_dest quant_dest(const ignis_tensor *t) {
  ignis_rope_quant_dest d = {0};
  if (t && ignis_tensor_numel(t) > 0) {
    d.data = t->data;
    d.stride_token = t->strides[0];
    d.stride_head = t->ndim == 3 ? t->strides[1] : 0;
  }
  return d;
}

static ignis_status check_source_dtype(const char *fn, const char *name, const ignis_tensor *t) {
  if (t->dtype == IGNIS_F16 || t->dtype == IGNIS_BF16)
    return IGNIS_OK;
  return ignis_set_error(t->dtype == IGNIS_F32 ? IGNIS_ERROR_UNSUPPORTED : IGNIS_ERROR_INVALID_ARGUMENT,
                         "%s: %s.dtype=%s but it must be f16 or bf16", fn, name, ignis_dtype_name(t->dtype));
}

static ignis_status check_fp8_dtype(const char *fn, const char *name, const ignis_tensor *t) {
  if (t->dtype == IGNIS_FP8_E4M3 || t->dtype == IGNIS_FP8_E5M2)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be fp8_e4m3 or fp8_e5m2",
                         fn, name, ignis_dtype_name(t->dtype));
}

static ignis_status check_scale(const char *fn, const char *name, float scale) {
  if (isfinite(scale) && scale > 0.0f)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%g but it must be finite and > 0", fn, name,
                         (double)scale);
}

/* A nope part, source or destination: NULL stands for width 0. */
static ignis_status check_nope(const char *fn, const char *name, const ignis_tensor *t, int ndim, int64_t nnz,
                               int64_t heads, const char *heads_what, int64_t nope_dim) {
  if (!t) {
    if (nope_dim == 0)
      return IGNIS_OK;
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s is NULL but q_nope.shape[2]=%" PRId64 " (no_rope_dim)", fn, name,
                           nope_dim);
  }
  return check_part(fn, name, t, ndim, nnz, heads, heads_what, nope_dim, "q_nope.shape[2] (no_rope_dim)");
}

/* The sources, positions, scales and q outputs of every form; k_ndim 0 takes k_rope's (2 or 3),
 * else requires it. Clears the last error, then fills p and lists the tensors in l (both zeroed
 * first). */
static ignis_status check_quant_common(const char *fn, const ignis_tensor *q_rope, const ignis_tensor *k_rope,
                                       const ignis_tensor *q_nope, const ignis_tensor *k_nope,
                                       const ignis_tensor *cos_sin_cache, const ignis_tensor *pos_ids,
                                       int32_t is_neox, float quant_scale_q, float quant_scale_kv,
                                       const ignis_tensor *q_rope_out, const ignis_tensor *q_nope_out,
                                       int k_ndim, ignis_rope_quant_params *p, quant_tensors *l) {
  ignis_clear_error();
  memset(p, 0, sizeof *p);
  memset(l, 0, sizeof *l);
  IGNIS_TRY(ignis_check_tensor(fn, "q_rope", q_rope, 3, 3));
  IGNIS_TRY(check_source_dtype(fn, "q_rope", q_rope));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "q_rope", q_rope));
  const int64_t nnz = q_rope->shape[0], hq = q_rope->shape[1], rope_dim = q_rope->shape[2];
  if (rope_dim < 2 || rope_dim % 2 != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: q_rope.shape[2]=%" PRId64 " (rope_dim) must be even and >= 2", fn, rope_dim);
  if (rope_dim > IGNIS_ROPE_MAX_HEAD_DIM)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: q_rope.shape[2]=%" PRId64 " (rope_dim) but at most %d "
                           "is supported",
                           fn, rope_dim, IGNIS_ROPE_MAX_HEAD_DIM);
  IGNIS_TRY(ignis_check_tensor(fn, "k_rope", k_rope, 2, 3));
  if (k_ndim && k_rope->ndim != k_ndim)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: k_rope.ndim=%d but it must be %d (%s)", fn,
                           k_rope->ndim, k_ndim,
                           k_ndim == 2 ? "MLA: [nnz, rope_dim]" : "[nnz, heads, rope_dim]");
  k_ndim = k_rope->ndim;
  const int64_t hk = k_ndim == 3 ? k_rope->shape[1] : 1;
  IGNIS_TRY(ignis_check_same_dtype(fn, "k_rope", k_rope, "q_rope", q_rope));
  IGNIS_TRY(check_part(fn, "k_rope", k_rope, k_ndim, nnz, hk, "k_rope.shape[1]", rope_dim,
                       "q_rope.shape[2] (rope_dim)"));
  int64_t nope_dim = 0;
  if (q_nope) {
    IGNIS_TRY(ignis_check_tensor(fn, "q_nope", q_nope, 3, 3));
    nope_dim = q_nope->shape[2];
    IGNIS_TRY(ignis_check_same_dtype(fn, "q_nope", q_nope, "q_rope", q_rope));
    IGNIS_TRY(check_part(fn, "q_nope", q_nope, 3, nnz, hq, "q_rope.shape[1] (num_q_heads)", nope_dim,
                         "q_nope.shape[2]"));
  }
  if (k_nope) {
    IGNIS_TRY(ignis_check_tensor(fn, "k_nope", k_nope, k_ndim, k_ndim));
    IGNIS_TRY(ignis_check_same_dtype(fn, "k_nope", k_nope, "q_rope", q_rope));
  }
  IGNIS_TRY(check_nope(fn, "k_nope", k_nope, k_ndim, nnz, hk, "k_rope.shape[1] (num_k_heads)", nope_dim));

  IGNIS_TRY(ignis_check_tensor(fn, "cos_sin_cache", cos_sin_cache, 2, 2));
  if (cos_sin_cache->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: cos_sin_cache.dtype=%s but it must be f32", fn,
                           ignis_dtype_name(cos_sin_cache->dtype));
  IGNIS_TRY(ignis_check_dim(fn, "cos_sin_cache", cos_sin_cache, 1, rope_dim, "q_rope.shape[2] (rope_dim)"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "cos_sin_cache", cos_sin_cache));
  IGNIS_TRY(ignis_check_tensor(fn, "pos_ids", pos_ids, 1, 1));
  IGNIS_TRY(ignis_check_index_dtype(fn, "pos_ids", pos_ids));
  IGNIS_TRY(ignis_check_vector(fn, "pos_ids", pos_ids, nnz));
  if (is_neox != 0 && is_neox != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: is_neox=%d must be 0 or 1", fn, is_neox);
  IGNIS_TRY(check_scale(fn, "quant_scale_q", quant_scale_q));
  IGNIS_TRY(check_scale(fn, "quant_scale_kv", quant_scale_kv));

  IGNIS_TRY(ignis_check_tensor(fn, "q_rope_out", q_rope_out, 3, 3));
  IGNIS_TRY(check_fp8_dtype(fn, "q_rope_out", q_rope_out));
  IGNIS_TRY(check_part(fn, "q_rope_out", q_rope_out, 3, nnz, hq, "q_rope.shape[1] (num_q_heads)", rope_dim,
                       "q_rope.shape[2] (rope_dim)"));
  if (q_nope_out) {
    IGNIS_TRY(ignis_check_tensor(fn, "q_nope_out", q_nope_out, 3, 3));
    IGNIS_TRY(ignis_check_same_dtype(fn, "q_nope_out", q_nope_out, "q_rope_out", q_rope_out));
  }
  IGNIS_TRY(check_nope(fn, "q_nope_out", q_nope_out, 3, nnz, hq, "q_rope.shape[1] (num_q_heads)", nope_dim));

  add_source(l, q_rope, "q_rope");
  add_source(l, k_rope, "k_rope");
  add_source(l, q_nope, "q_nope");
  add_source(l, k_nope, "k_nope");
  add_source(l, cos_sin_cache, "cos_sin_cache");
  add_source(l, pos_ids, "pos_ids");
  add_dest(l, q_rope_out, "q_rope_out");
  add_dest(l, q_nope_out, "q_nope_out");

  p->nnz = nnz;
  p->num_q_heads = hq;
  p->num_k_heads = hk;
  p->rope_dim = rope_dim;
  p->nope_dim = nope_dim;
  p->interleave = is_neox ? 0 : 1;
  p->dtype = q_rope->dtype;
  p->out_dtype = q_rope_out->dtype;
  p->fp8_max = ignis_fp8_max(q_rope_out->dtype);
  p->quant_scale_q = quant_scale_q;
  p->quant_scale_kv = quant_scale_kv;
  p->q_rope = quant_src(q_rope);
  p->k_rope = quant_src(k_rope);
  p->q_nope = quant_src(q_nope);
  p->k_nope = quant_src(k_nope);
  p->q_rope_out = quant_dest(q_rope_out);
  p->q_nope_out = quant_dest(q_nope_out);
  p->cos_sin_cache = (const float *)cos_sin_cache->data;
  p->cos_sin_cache_stride = cos_sin_cache->strides[0];
  p->max_position = cos_sin_cache->shape[0];
  p->pos_dtype = pos_ids->dtype;
  p->pos_ids = pos_ids->data;
  return IGNIS_OK;
}

/* Host: pos_ids of the tokens that are not padding within the cos/sin cache. */
static ignis_status check_host_quant_positions(const char *fn, const ignis_tensor *pos_ids,
                                               const ignis_rope_quant_params *p) {
  for (int64_t t = 0; t < p->nnz; ++t) {
    if (p->batch_indices && p->batch_indices[t] < 0)
      continue;
    int64_t pos = index_at(pos_ids, t);
    if (pos < 0 || pos >= p->max_position)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: pos_ids[%" PRId64 "]=%" PRId64 " outside [0, %" PRId64
                             ") (cos_sin_cache.shape[0])",
                             fn, t, pos, p->max_position);
  }
  return IGNIS_OK;
}

/* Host: the paged destinations of every token that is not padding (kv_indptr and page numbers
 * already checked). */
static ignis_status check_host_pages(const char *fn, const ignis_rope_quant_params *p,
                                     const char *indices_name) {
  for (int64_t t = 0; t < p->nnz; ++t) {
    const int64_t b = p->batch_indices[t], s = p->positions[t];
    if (b < 0)
      continue;
    if (b >= p->batch_size)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: batch_indices[%" PRId64 "]=%" PRId64 " but the batch has %" PRId64
                             " requests",
                             fn, t, b, p->batch_size);
    const int64_t pages = (int64_t)p->kv_indptr[b + 1] - p->kv_indptr[b];
    if (s < 0 || s / p->page_size >= pages)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: positions[%" PRId64 "]=%" PRId64 " but request %" PRId64 " has %" PRId64
                             " pages of %" PRId64 " tokens",
                             fn, t, s, b, pages, p->page_size);
    const int64_t entry = p->kv_indptr[b] + s / p->page_size;
    const int32_t page = p->kv_indices[entry];
    if (page < 0 || page >= p->num_pages)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: %s[%" PRId64 "]=%d but the cache has %" PRId64 " pages", fn, indices_name,
                             entry, (int)page, p->num_pages);
  }
  return IGNIS_OK;
}

/* batch_indices, positions ([nnz] i32) and the page table (indptr [B + 1], indices). */
static ignis_status check_page_table(const char *fn, const ignis_tensor *batch_indices,
                                     const ignis_tensor *positions, const ignis_tensor *indptr,
                                     const char *indptr_name, const ignis_tensor *indices,
                                     const char *indices_name, ignis_rope_quant_params *p, quant_tensors *l) {
  IGNIS_TRY(ignis_check_index_vector(fn, "batch_indices", batch_indices, p->nnz, 0));
  IGNIS_TRY(ignis_check_index_vector(fn, "positions", positions, p->nnz, 0));
  IGNIS_TRY(ignis_check_index_vector(fn, indptr_name, indptr, -1, 1));
  IGNIS_TRY(ignis_check_index_vector(fn, indices_name, indices, -1, 0));
  add_source(l, batch_indices, "batch_indices");
  add_source(l, positions, "positions");
  add_source(l, indptr, indptr_name);
  add_source(l, indices, indices_name);
  p->paged = 1;
  p->batch_indices = (const int32_t *)batch_indices->data;
  p->positions = (const int32_t *)positions->data;
  p->kv_indptr = (const int32_t *)indptr->data;
  p->kv_indices = (const int32_t *)indices->data;
  p->batch_size = indptr->shape[0] - 1;
  p->num_page_entries = indices->shape[0];
  return IGNIS_OK;
}

/* The overlaps, the placement, the host contents (page table names for messages), the launch. */
static ignis_status dispatch_quant(const char *fn, const quant_tensors *l, const ignis_tensor *pos_ids,
                                   const ignis_rope_quant_params *p, const char *indptr_name,
                                   const char *indices_name, void *stream) {
  IGNIS_TRY(check_quant_overlaps(fn, l));
  ignis_target target;
  IGNIS_TRY(resolve_quant_target(fn, l, &target));
  if (target.backend->host_memory) {
    if (p->paged) {
      char limit[64];
      snprintf(limit, sizeof limit, "%s.shape[0]", indices_name);
      IGNIS_TRY(ignis_check_indptr_contents(fn, indptr_name, p->kv_indptr, p->batch_size, p->num_page_entries,
                                            limit));
      IGNIS_TRY(check_host_pages(fn, p, indices_name));
    }
    IGNIS_TRY(check_host_quant_positions(fn, pos_ids, p));
  }
  if (p->nnz == 0)
    return IGNIS_OK;
  return target.backend->rope_quant(p, target.device.id, stream);
}

ignis_status ignis_rope_quantize_fp8(const ignis_tensor *q_rope, const ignis_tensor *k_rope,
                                     const ignis_tensor *q_nope, const ignis_tensor *k_nope,
                                     const ignis_tensor *cos_sin_cache, const ignis_tensor *pos_ids,
                                     int32_t is_neox, float quant_scale_q, float quant_scale_kv,
                                     ignis_tensor *q_rope_out, ignis_tensor *k_rope_out,
                                     ignis_tensor *q_nope_out, ignis_tensor *k_nope_out, void *stream) {
  static const char fn[] = "ignis_rope_quantize_fp8";
  ignis_rope_quant_params p;
  quant_tensors l;
  IGNIS_TRY(check_quant_common(fn, q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox,
                               quant_scale_q, quant_scale_kv, q_rope_out, q_nope_out, 0, &p, &l));
  const int k_ndim = k_rope->ndim;
  IGNIS_TRY(ignis_check_tensor(fn, "k_rope_out", k_rope_out, k_ndim, k_ndim));
  IGNIS_TRY(ignis_check_same_dtype(fn, "k_rope_out", k_rope_out, "q_rope_out", q_rope_out));
  IGNIS_TRY(check_part(fn, "k_rope_out", k_rope_out, k_ndim, p.nnz, p.num_k_heads,
                       "k_rope.shape[1] (num_k_heads)", p.rope_dim, "q_rope.shape[2] (rope_dim)"));
  if (k_nope_out) {
    IGNIS_TRY(ignis_check_tensor(fn, "k_nope_out", k_nope_out, k_ndim, k_ndim));
    IGNIS_TRY(ignis_check_same_dtype(fn, "k_nope_out", k_nope_out, "q_rope_out", q_rope_out));
  }
  IGNIS_TRY(check_nope(fn, "k_nope_out", k_nope_out, k_ndim, p.nnz, p.num_k_heads,
                       "k_rope.shape[1] (num_k_heads)", p.nope_dim));
  add_dest(&l, k_rope_out, "k_rope_out");
  add_dest(&l, k_nope_out, "k_nope_out");
  p.k_rope_out = quant_dest(k_rope_out);
  p.k_nope_out = quant_dest(k_nope_out);
  return dispatch_quant(fn, &l, pos_ids, &p, NULL, NULL, stream);
}

ignis_status ignis_rope_quantize_fp8_append_paged_kv_cache(
    const ignis_tensor *q_rope, const ignis_tensor *k_rope, const ignis_tensor *q_nope,
    const ignis_tensor *k_nope, const ignis_tensor *v, const ignis_tensor *cos_sin_cache,
    const ignis_tensor *pos_ids, const ignis_tensor *batch_indices, const ignis_tensor *positions,
    const ignis_paged_kv_cache *cache, int32_t is_neox, float quant_scale_q, float quant_scale_kv,
    ignis_tensor *q_rope_out, ignis_tensor *q_nope_out, void *stream) {
  static const char fn[] = "ignis_rope_quantize_fp8_append_paged_kv_cache";
  ignis_rope_quant_params p;
  quant_tensors l;
  IGNIS_TRY(check_quant_common(fn, q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox,
                               quant_scale_q, quant_scale_kv, q_rope_out, q_nope_out, 3, &p, &l));
  if (!cache)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  static const ignis_paged_kv_cache defaults = IGNIS_PAGED_KV_CACHE_INIT;
  ignis_paged_kv_cache read;
  IGNIS_TRY(ignis_read_config(fn, "cache.size", "IGNIS_PAGED_KV_CACHE_INIT", &read, &defaults, cache,
                              sizeof read, IGNIS_CONFIG_END(ignis_paged_kv_cache, last_page_len)));
  ignis_paged_kv_params kv;
  memset(&kv, 0, sizeof kv);
  IGNIS_TRY(ignis_check_paged_kv_tensors(fn, read.layout, &read.k_cache, &read.v_cache, &kv));
  IGNIS_TRY(ignis_check_same_dtype(fn, "cache.k_cache", &read.k_cache, "q_rope_out", q_rope_out));
  const int64_t head_dim = p.rope_dim + p.nope_dim;
  if (kv.num_kv_heads != p.num_k_heads || kv.head_dim != head_dim)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: cache.k_cache holds %" PRId64 " heads of %" PRId64 " but k has %" PRId64
                           " heads of %" PRId64 " (rope_dim + no_rope_dim)",
                           fn, kv.num_kv_heads, kv.head_dim, p.num_k_heads, head_dim);
  IGNIS_TRY(ignis_check_tensor(fn, "v", v, 3, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "v", v, "q_rope", q_rope));
  IGNIS_TRY(check_part(fn, "v", v, 3, p.nnz, p.num_k_heads, "k_rope.shape[1] (num_k_heads)", head_dim,
                       "rope_dim + no_rope_dim"));
  add_source(&l, v, "v");
  IGNIS_TRY(check_page_table(fn, batch_indices, positions, &read.indptr, "cache.indptr", &read.indices,
                             "cache.indices", &p, &l));
  add_dest(&l, &read.k_cache, "cache.k_cache");
  add_dest(&l, &read.v_cache, "cache.v_cache");
  p.has_v = 1;
  p.v = quant_src(v);
  p.num_pages = kv.num_pages;
  p.page_size = kv.page_size;
  ignis_rope_quant_dest k_dest = {kv.k_cache, kv.k_stride_page, kv.k_stride_token, kv.k_stride_head};
  ignis_rope_quant_dest v_dest = {kv.v_cache, kv.v_stride_page, kv.v_stride_token, kv.v_stride_head};
  p.k_rope_out = k_dest;
  p.k_nope_out = k_dest;
  p.k_nope_out.data = p.nope_dim > 0 ? (uint8_t *)kv.k_cache + p.rope_dim : NULL; /* fp8: a byte each */
  p.v_out = v_dest;
  return dispatch_quant(fn, &l, pos_ids, &p, "cache.indptr", "cache.indices", stream);
}

ignis_status ignis_rope_quantize_fp8_append_paged_mla_kv_cache(
    const ignis_tensor *q_rope, const ignis_tensor *k_rope, const ignis_tensor *q_nope,
    const ignis_tensor *k_nope, const ignis_tensor *cos_sin_cache, const ignis_tensor *pos_ids,
    const ignis_tensor *batch_indices, const ignis_tensor *positions, ignis_tensor *ckv_cache,
    ignis_tensor *kpe_cache, const ignis_tensor *kv_indices, const ignis_tensor *kv_indptr, int32_t is_neox,
    float quant_scale_q, float quant_scale_kv, ignis_tensor *q_rope_out, ignis_tensor *q_nope_out,
    void *stream) {
  static const char fn[] = "ignis_rope_quantize_fp8_append_paged_mla_kv_cache";
  ignis_rope_quant_params p;
  quant_tensors l;
  IGNIS_TRY(check_quant_common(fn, q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox,
                               quant_scale_q, quant_scale_kv, q_rope_out, q_nope_out, 2, &p, &l));
  IGNIS_TRY(ignis_check_tensor(fn, "kpe_cache", kpe_cache, 3, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "kpe_cache", kpe_cache, "q_rope_out", q_rope_out));
  const int64_t num_pages = kpe_cache->shape[0], page_size = kpe_cache->shape[1];
  IGNIS_TRY(ignis_check_page_size(fn, "kpe_cache.shape[1] (page_size)", page_size));
  IGNIS_TRY(ignis_check_dim(fn, "kpe_cache", kpe_cache, 2, p.rope_dim, "q_rope.shape[2] (rope_dim)"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "kpe_cache", kpe_cache));
  IGNIS_TRY(ignis_check_tensor(fn, "ckv_cache", ckv_cache, 3, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "ckv_cache", ckv_cache, "q_rope_out", q_rope_out));
  IGNIS_TRY(ignis_check_dim(fn, "ckv_cache", ckv_cache, 0, num_pages, "kpe_cache.shape[0] (pages)"));
  IGNIS_TRY(ignis_check_dim(fn, "ckv_cache", ckv_cache, 1, page_size, "kpe_cache.shape[1] (page_size)"));
  IGNIS_TRY(ignis_check_dim(fn, "ckv_cache", ckv_cache, 2, p.nope_dim, "q_nope.shape[2] (no_rope_dim)"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "ckv_cache", ckv_cache));
  IGNIS_TRY(check_page_table(fn, batch_indices, positions, kv_indptr, "kv_indptr", kv_indices, "kv_indices",
                             &p, &l));
  add_dest(&l, ckv_cache, "ckv_cache");
  add_dest(&l, kpe_cache, "kpe_cache");
  p.num_pages = num_pages;
  p.page_size = page_size;
  ignis_rope_quant_dest kpe = {kpe_cache->data, kpe_cache->strides[0], kpe_cache->strides[1], 0};
  ignis_rope_quant_dest ckv = {p.nope_dim > 0 ? ckv_cache->data : NULL, ckv_cache->strides[0],
                               ckv_cache->strides[1], 0};
  p.k_rope_out = kpe;
  p.k_nope_out = ckv;
  return dispatch_quant(fn, &l, pos_ids, &p, "kv_indptr", "kv_indices", stream);
}
