/* Front end of the RoPE ops (include/ignis/rope.h): validate q/k/outputs, the position source and
 * the configuration, fill ignis_rope_params, dispatch. Host-resident index tensors are range-checked
 * here; device-resident ones cannot be read without a sync, so their contract is documented. */
#include <math.h>
#include <stddef.h>

#include "core/backend.h"
#include "core/config.h"
#include "ignis/rope.h"
#include "core/validate.h"

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
