/* Front end of the grouped GEMM ops (include/ignis/gemm.h: ignis_grouped_mm and
 * ignis_grouped_mm_fp8_blockscale): check shapes, dtypes, layouts and scales, fill
 * ignis_grouped_gemm_params (core/grouped_gemm_params.h) and hand it to the backend where the
 * tensors live. On a host-memory backend the front end also checks the values of m_indptr and
 * weight_indices (they are readable there); a device backend never reads them on the host. */
#include <inttypes.h>

#include "core/backend.h"
#include "core/validate.h"
#include "ignis/gemm.h"

static int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

static int64_t index_at(const void *base, ignis_dtype dtype, int64_t i) {
  return dtype == IGNIS_I32 ? ((const int32_t *)base)[i] : ((const int64_t *)base)[i];
}

/* The host-readable index arrays: offsets non-decreasing within [0, M], weight indices in [0, W). */
static ignis_status check_index_values(const char *fn, const ignis_grouped_gemm_params *p) {
  int64_t prev = 0;
  for (int64_t g = 0; g <= p->groups; ++g) {
    int64_t v = index_at(p->m_indptr, p->index_dtype, g);
    if (v < prev || v > p->m)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: m_indptr[%" PRId64 "]=%" PRId64 " but the offsets must be non-decreasing"
                             " and within [0, a.shape[0]=%" PRId64 "]",
                             fn, g, v, p->m);
    prev = v;
  }
  if (p->weight_indices)
    for (int64_t g = 0; g < p->groups; ++g) {
      int64_t w = index_at(p->weight_indices, p->weight_index_dtype, g);
      if (w < 0 || w >= p->num_weights)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: weight_indices[%" PRId64 "]=%" PRId64
                               " but it must be in [0, b.shape[0]=%" PRId64 ")",
                               fn, g, w, p->num_weights);
    }
  return IGNIS_OK;
}

/* a [M, K], b [W, N, K] (either layout, or NT only when nt_only), out [M, N], m_indptr [G + 1]. */
static ignis_status check_operands(const char *fn, const ignis_tensor *a, const ignis_tensor *b,
                                   const ignis_tensor *m_indptr, const ignis_tensor *out, int nt_only,
                                   ignis_grouped_gemm_params *p) {
  IGNIS_TRY(ignis_check_tensor(fn, "a", a, 2, 2));
  IGNIS_TRY(ignis_check_tensor(fn, "b", b, 3, 3));
  IGNIS_TRY(ignis_check_tensor(fn, "out", out, 2, 2));
  IGNIS_TRY(ignis_check_tensor(fn, "m_indptr", m_indptr, 1, 1));
  IGNIS_TRY(ignis_check_index_dtype(fn, "m_indptr", m_indptr));
  if (m_indptr->shape[0] < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: m_indptr.shape[0]=0 but it must hold G + 1 >= 1 offsets", fn);
  IGNIS_TRY(ignis_check_vector(fn, "m_indptr", m_indptr, m_indptr->shape[0]));
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  if (b->shape[2] != k)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: b.shape[2]=%" PRId64 " but a.shape[1]=%" PRId64
                           ": the shapes do not multiply",
                           fn, b->shape[2], k);
  IGNIS_TRY(ignis_check_dim(fn, "out", out, 0, m, "a.shape[0] (M)"));
  IGNIS_TRY(ignis_check_dim(fn, "out", out, 1, n, "b.shape[1] (N)"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "a", a));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "out", out));
  const ignis_tensor *t[] = {a, b, out};
  const char *names[] = {"a", "b", "out"};
  for (int i = 0; i < 3; ++i)
    for (int d = 0; d < t[i]->ndim; ++d)
      if (t[i]->strides[d] < 0)
        return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: %s.strides[%d]=%" PRId64 " is negative", fn,
                               names[i], d, t[i]->strides[d]);
  if (m > 1 && a->strides[0] < k)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: a.strides[0]=%" PRId64 " but it must be at least %" PRId64
                           " (rows may not overlap)",
                           fn, a->strides[0], k);
  if (m > 1 && out->strides[0] < n)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: out.strides[0]=%" PRId64 " but it must be at least %" PRId64
                           " (rows may not overlap)",
                           fn, out->strides[0], n);
  const int64_t sn = b->strides[1], sk = b->strides[2];
  if (k <= 1 || sk == 1) {
    p->b_stride_k = 1;
    p->b_stride_n = n > 1 ? sn : k;
    if (n > 1 && sn < k && k > 1)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: b.strides[1]=%" PRId64 " but it must be at least K=%" PRId64
                             " (rows may not overlap)",
                             fn, sn, k);
  } else if (!nt_only && (n <= 1 || sn == 1)) {
    p->b_stride_n = 1;
    p->b_stride_k = sk;
    if (sk < n)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: b.strides[2]=%" PRId64 " but it must be at least N=%" PRId64
                             " (rows may not overlap)",
                             fn, sk, n);
  } else {
    return ignis_set_error(
        IGNIS_ERROR_UNSUPPORTED,
        nt_only ? "%s: b.strides=(%" PRId64 ", %" PRId64 ", %" PRId64
                  ") but the weights [G, N, K] must be K-contiguous (b.strides[2] == 1)"
                : "%s: b.strides=(%" PRId64 ", %" PRId64 ", %" PRId64
                  ") but b.strides[2] (weights [W, N, K]) or b.strides[1] ([W, K, N]) must be 1",
        fn, b->strides[0], sn, sk);
  }
  p->groups = m_indptr->shape[0] - 1;
  p->num_weights = b->shape[0];
  p->m = m;
  p->n = n;
  p->k = k;
  p->a_dtype = a->dtype;
  p->out_dtype = out->dtype;
  p->index_dtype = m_indptr->dtype;
  p->a = a->data;
  p->a_row_stride = m > 1 ? a->strides[0] : k;
  p->b = b->data;
  p->b_group_stride = b->strides[0];
  p->out = out->data;
  p->out_row_stride = m > 1 ? out->strides[0] : n;
  p->m_indptr = m_indptr->data;
  return IGNIS_OK;
}

static ignis_status dispatch(const char *fn, ignis_grouped_gemm_params *p, const ignis_tensor *const *tensors,
                             const char *const *names, int count, const ignis_tensor *out, void *stream) {
  for (int i = 0; i < count; ++i)
    if (tensors[i] && tensors[i] != out)
      IGNIS_TRY(ignis_check_disjoint(fn, "out", out, names[i], tensors[i]));
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, count, &target));
  if (target.backend->host_memory)
    IGNIS_TRY(check_index_values(fn, p));
  if (p->groups == 0 || p->m == 0 || p->n == 0)
    return IGNIS_OK;
  return target.backend->grouped_gemm(p, target.device.id, stream);
}

ignis_status ignis_grouped_mm(const ignis_tensor *a, const ignis_tensor *b, const ignis_tensor *m_indptr,
                              const ignis_tensor *weight_indices, ignis_tensor *out, void *stream) {
  const char *fn = "ignis_grouped_mm";
  ignis_clear_error();
  ignis_grouped_gemm_params p = {0};
  IGNIS_TRY(check_operands(fn, a, b, m_indptr, out, 0, &p));
  if (a->dtype != IGNIS_F16 && a->dtype != IGNIS_BF16)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: a.dtype=%s but it must be f16 or bf16", fn,
                           ignis_dtype_name(a->dtype));
  if (b->dtype != a->dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: b.dtype=%s but it must be a.dtype=%s", fn,
                           ignis_dtype_name(b->dtype), ignis_dtype_name(a->dtype));
  if (out->dtype != IGNIS_F16 && out->dtype != IGNIS_BF16 && out->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: out.dtype=%s but it must be f16, bf16 or f32",
                           fn, ignis_dtype_name(out->dtype));
  if (weight_indices) {
    IGNIS_TRY(ignis_check_tensor(fn, "weight_indices", weight_indices, 1, 1));
    IGNIS_TRY(ignis_check_index_dtype(fn, "weight_indices", weight_indices));
    IGNIS_TRY(ignis_check_vector(fn, "weight_indices", weight_indices, p.groups));
    p.weight_indices = weight_indices->data;
    p.weight_index_dtype = weight_indices->dtype;
  } else if (p.num_weights != p.groups) {
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: b.shape[0]=%" PRId64 " but without weight_indices it must be the group count "
                           "m_indptr.shape[0] - 1=%" PRId64,
                           fn, p.num_weights, p.groups);
  }
  const ignis_tensor *tensors[] = {a, b, m_indptr, weight_indices, out};
  const char *names[] = {"a", "b", "m_indptr", "weight_indices", "out"};
  return dispatch(fn, &p, tensors, names, 5, out, stream);
}

/* A scale tensor: f32 or u8 (UE8M0), the given shape, any strides. */
static ignis_status check_scale(const char *fn, const char *name, const ignis_tensor *s, int ndim,
                                const int64_t *shape, const char *const *rules) {
  IGNIS_TRY(ignis_check_tensor(fn, name, s, ndim, ndim));
  if (s->dtype != IGNIS_F32 && s->dtype != IGNIS_U8)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s.dtype=%s but it must be f32 or u8 (UE8M0 exponents)", fn, name,
                           ignis_dtype_name(s->dtype));
  for (int d = 0; d < ndim; ++d) {
    IGNIS_TRY(ignis_check_dim(fn, name, s, d, shape[d], rules[d]));
    if (s->strides[d] < 0)
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: %s.strides[%d]=%" PRId64 " is negative", fn, name,
                             d, s->strides[d]);
  }
  return IGNIS_OK;
}

ignis_status ignis_grouped_mm_fp8_blockscale(const ignis_tensor *a, const ignis_tensor *b,
                                             const ignis_tensor *a_scale, const ignis_tensor *b_scale,
                                             const ignis_tensor *m_indptr, ignis_tensor *out, void *stream) {
  const char *fn = "ignis_grouped_mm_fp8_blockscale";
  ignis_clear_error();
  ignis_grouped_gemm_params p = {0};
  p.fp8 = 1;
  IGNIS_TRY(check_operands(fn, a, b, m_indptr, out, 1, &p));
  if (a->dtype != IGNIS_FP8_E4M3)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: a.dtype=%s but it must be fp8_e4m3", fn,
                           ignis_dtype_name(a->dtype));
  if (b->dtype != IGNIS_FP8_E4M3)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: b.dtype=%s but it must be fp8_e4m3", fn,
                           ignis_dtype_name(b->dtype));
  if (out->dtype != IGNIS_F16 && out->dtype != IGNIS_BF16)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: out.dtype=%s but it must be bf16 or f16", fn,
                           ignis_dtype_name(out->dtype));
  if (p.num_weights != p.groups)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: b.shape[0]=%" PRId64
                           " but it must be the group count m_indptr.shape[0] - 1=%" PRId64,
                           fn, p.num_weights, p.groups);
  const int64_t kb = ceil_div(p.k, IGNIS_GEMM_SCALE_BLOCK), nb = ceil_div(p.n, IGNIS_GEMM_SCALE_BLOCK);
  const int64_t a_shape[] = {p.m, kb}, b_shape[] = {p.groups, nb, kb};
  const char *const a_rules[] = {"a.shape[0] (M)", "ceil(K / 128)"};
  const char *const b_rules[] = {"the group count", "ceil(N / 128)", "ceil(K / 128)"};
  IGNIS_TRY(check_scale(fn, "a_scale", a_scale, 2, a_shape, a_rules));
  IGNIS_TRY(check_scale(fn, "b_scale", b_scale, 3, b_shape, b_rules));
  if (b_scale->dtype != a_scale->dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: b_scale.dtype=%s but it must be a_scale.dtype=%s", fn,
                           ignis_dtype_name(b_scale->dtype), ignis_dtype_name(a_scale->dtype));
  p.scale_dtype = a_scale->dtype;
  p.a_scale = a_scale->data;
  p.b_scale = b_scale->data;
  p.a_scale_stride_m = a_scale->strides[0];
  p.a_scale_stride_k = a_scale->strides[1];
  p.b_scale_stride_g = b_scale->strides[0];
  p.b_scale_stride_n = b_scale->strides[1];
  p.b_scale_stride_k = b_scale->strides[2];
  const ignis_tensor *tensors[] = {a, b, a_scale, b_scale, m_indptr, out};
  const char *names[] = {"a", "b", "a_scale", "b_scale", "m_indptr", "out"};
  return dispatch(fn, &p, tensors, names, 6, out, stream);
}
