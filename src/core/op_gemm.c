/* Front end of the GEMM ops (include/ignis/gemm.h): check the operands' shapes, dtypes, layouts and
 * scales, fill ignis_gemm_params (core/gemm_params.h) with strides normalized (a dimension of size
 * 1 gets the stride of a dense layout, so a backend reads every leading stride as a real one), and
 * hand it to the backend where the tensors live. */
#include <inttypes.h>

#include "core/backend.h"
#include "core/validate.h"
#include "ignis/gemm.h"

static int is_half(ignis_dtype d) {
  return d == IGNIS_F16 || d == IGNIS_BF16;
}

static int is_fp8(ignis_dtype d) {
  return d == IGNIS_FP8_E4M3 || d == IGNIS_FP8_E5M2;
}

static int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

static ignis_status check_dtype_in(const char *fn, const char *name, const ignis_tensor *t, int ok,
                                   const char *allowed) {
  if (ok)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be %s", fn, name,
                         ignis_dtype_name(t->dtype), allowed);
}

/* A leading stride of a matrix: when the dimension has one entry its stride is never used, so it
 * becomes `dense`; otherwise it must be at least `span` (rows may not overlap). */
static ignis_status leading_stride(const char *fn, const char *name, int dim, int64_t size, int64_t stride,
                                   int64_t span, int64_t *out) {
  if (size <= 1) {
    *out = span;
    return IGNIS_OK;
  }
  if (stride < span)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s.strides[%d]=%" PRId64 " but it must be at least %" PRId64
                           " (rows may not overlap)",
                           fn, name, dim, stride, span);
  *out = stride;
  return IGNIS_OK;
}

/* The shared part of every form: a [.., M, K], b [.., K, N] (both layouts, or only the NT one when
 * b_is_weight: then b is given as the [N, K] weight itself), out [.., M, N]. max_ndim 3 allows the
 * batch form. Fills the shape, dtypes and operand fields of p. */
static ignis_status check_operands(const char *fn, const ignis_tensor *a, const ignis_tensor *b,
                                   const ignis_tensor *out, int max_ndim, int b_is_weight,
                                   ignis_gemm_params *p) {
  IGNIS_TRY(ignis_check_tensor(fn, "a", a, 2, max_ndim));
  IGNIS_TRY(ignis_check_tensor(fn, "b", b, 2, max_ndim));
  IGNIS_TRY(ignis_check_tensor(fn, "out", out, 2, max_ndim));
  if (b->ndim != a->ndim || out->ndim != a->ndim)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: a.ndim=%d, b.ndim=%d and out.ndim=%d must be equal", fn, a->ndim, b->ndim,
                           out->ndim);
  int nd = a->ndim;
  int64_t batch = nd == 3 ? a->shape[0] : 1;
  if (nd == 3) {
    IGNIS_TRY(ignis_check_dim(fn, "b", b, 0, batch, "a.shape[0] (batch)"));
    IGNIS_TRY(ignis_check_dim(fn, "out", out, 0, batch, "a.shape[0] (batch)"));
  }
  int64_t m = a->shape[nd - 2], k = a->shape[nd - 1];
  int64_t n = b_is_weight ? b->shape[nd - 2] : b->shape[nd - 1];
  int64_t b_k = b_is_weight ? b->shape[nd - 1] : b->shape[nd - 2];
  if (b_k != k)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: b.shape[%d]=%" PRId64 " but a.shape[%d]=%" PRId64
                           ": the shapes do not multiply",
                           fn, b_is_weight ? nd - 1 : nd - 2, b_k, nd - 1, k);
  IGNIS_TRY(ignis_check_dim(fn, "out", out, nd - 2, m, "a.shape[-2] (M)"));
  IGNIS_TRY(ignis_check_dim(fn, "out", out, nd - 1, n, b_is_weight ? "b.shape[-2] (N)" : "b.shape[-1] (N)"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "a", a));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "out", out));
  for (int d = 0; d < nd; ++d) {
    const ignis_tensor *t[] = {a, b, out};
    const char *names[] = {"a", "b", "out"};
    for (int i = 0; i < 3; ++i)
      if (t[i]->strides[d] < 0)
        return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: %s.strides[%d]=%" PRId64 " is negative", fn,
                               names[i], d, t[i]->strides[d]);
  }

  p->batch = batch;
  p->m = m;
  p->n = n;
  p->k = k;
  p->a_dtype = a->dtype;
  p->b_dtype = b->dtype;
  p->out_dtype = out->dtype;
  p->a = a->data;
  p->b = b->data;
  p->out = out->data;
  p->a_batch_stride = nd == 3 ? a->strides[0] : 0;
  p->b_batch_stride = nd == 3 ? b->strides[0] : 0;
  p->out_batch_stride = nd == 3 ? out->strides[0] : 0;
  IGNIS_TRY(leading_stride(fn, "a", nd - 2, m, a->strides[nd - 2], k, &p->a_row_stride));
  IGNIS_TRY(leading_stride(fn, "out", nd - 2, m, out->strides[nd - 2], n, &p->out_row_stride));
  if (batch > 1 && p->out_batch_stride < (m - 1) * p->out_row_stride + n)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: out.strides[0]=%" PRId64 " but it must be at least %" PRId64
                           " (the batch entries of out may not overlap)",
                           fn, p->out_batch_stride, (m - 1) * p->out_row_stride + n);
  if (b_is_weight) {
    if (k > 1 && b->strides[nd - 1] != 1)
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                             "%s: b.strides[%d]=%" PRId64 " but the weight [N, K] must be K-contiguous", fn,
                             nd - 1, b->strides[nd - 1]);
    p->b_stride_k = 1;
    return leading_stride(fn, "b", nd - 2, n, b->strides[nd - 2], k, &p->b_stride_n);
  }
  int64_t sk = b->strides[nd - 2], sn = b->strides[nd - 1];
  if ((k <= 1 || sk == 1) && !(sn == 1 && n > 1 && k > 1)) {
    p->b_stride_k = 1; /* NT: the weight [N, K] row-major, transposed */
    return leading_stride(fn, "b", nd - 1, n, sn, k, &p->b_stride_n);
  }
  if (n <= 1 || sn == 1) {
    p->b_stride_n = 1;
    return leading_stride(fn, "b", nd - 2, k, sk, n, &p->b_stride_k);
  }
  return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                         "%s: b.strides=(%" PRId64 ", %" PRId64
                         ") but one of its last two dimensions must be contiguous (stride 1)",
                         fn, sk, sn);
}

static ignis_status check_scalar_scale(const char *fn, const char *name, const ignis_tensor *s) {
  IGNIS_TRY(ignis_check_tensor(fn, name, s, 0, 1));
  if (s->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be f32", fn, name,
                           ignis_dtype_name(s->dtype));
  if (ignis_tensor_numel(s) != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s has %" PRId64 " elements but a per-tensor scale has exactly 1", fn, name,
                           ignis_tensor_numel(s));
  return IGNIS_OK;
}

/* A block-scale tensor: 2-D [rows, cols], f32 or u8 (UE8M0); any strides. */
static ignis_status check_block_scale(const char *fn, const char *name, const ignis_tensor *s, int64_t rows,
                                      int64_t cols, const char *rows_rule, const char *cols_rule) {
  IGNIS_TRY(ignis_check_tensor(fn, name, s, 2, 2));
  if (s->dtype != IGNIS_F32 && s->dtype != IGNIS_U8)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s.dtype=%s but it must be f32 or u8 (UE8M0 exponents)", fn, name,
                           ignis_dtype_name(s->dtype));
  IGNIS_TRY(ignis_check_dim(fn, name, s, 0, rows, rows_rule));
  return ignis_check_dim(fn, name, s, 1, cols, cols_rule);
}

static ignis_status check_out_disjoint(const char *fn, const ignis_tensor *out,
                                       const ignis_tensor *const *inputs, const char *const *names,
                                       int count) {
  for (int i = 0; i < count; ++i)
    if (inputs[i])
      IGNIS_TRY(ignis_check_disjoint(fn, "out", out, names[i], inputs[i]));
  return IGNIS_OK;
}

/* tensors: the op's inputs (NULL: absent) then out, last; out must be apart from each input. */
static ignis_status dispatch(const ignis_gemm_params *p, const ignis_tensor *const *tensors,
                             const char *const *names, int count, const char *fn, void *stream) {
  IGNIS_TRY(check_out_disjoint(fn, tensors[count - 1], tensors, names, count - 1));
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, count, &target));
  if (p->batch == 0 || p->m == 0 || p->n == 0)
    return IGNIS_OK;
  return target.backend->gemm(p, target.device.id, stream);
}

ignis_status ignis_mm(const ignis_tensor *a, const ignis_tensor *b, const ignis_tensor *bias,
                      ignis_tensor *out, void *stream) {
  const char *fn = "ignis_mm";
  ignis_clear_error();
  ignis_gemm_params p = {0};
  p.kind = IGNIS_GEMM_PLAIN;
  IGNIS_TRY(check_operands(fn, a, b, out, 3, 0, &p));
  IGNIS_TRY(check_dtype_in(fn, "a", a, is_half(a->dtype), "f16 or bf16"));
  IGNIS_TRY(check_dtype_in(fn, "b", b, b->dtype == a->dtype, ignis_dtype_name(a->dtype)));
  IGNIS_TRY(
      check_dtype_in(fn, "out", out, is_half(out->dtype) || out->dtype == IGNIS_F32, "f16, bf16 or f32"));
  if (bias) {
    IGNIS_TRY(ignis_check_tensor(fn, "bias", bias, 1, 1));
    IGNIS_TRY(check_dtype_in(fn, "bias", bias, bias->dtype == out->dtype || bias->dtype == IGNIS_F32,
                             out->dtype == IGNIS_F32 ? "f32" : "out's dtype or f32"));
    IGNIS_TRY(ignis_check_vector(fn, "bias", bias, p.n));
    p.bias = bias->data;
    p.bias_dtype = bias->dtype;
  }
  const ignis_tensor *tensors[] = {a, b, bias, out};
  const char *names[] = {"a", "b", "bias", "out"};
  return dispatch(&p, tensors, names, 4, fn, stream);
}

ignis_status ignis_mm_fp8(const ignis_tensor *a, const ignis_tensor *b, const ignis_tensor *a_scale,
                          const ignis_tensor *b_scale, ignis_tensor *out, void *stream) {
  const char *fn = "ignis_mm_fp8";
  ignis_clear_error();
  ignis_gemm_params p = {0};
  p.kind = IGNIS_GEMM_FP8_TENSOR;
  IGNIS_TRY(check_operands(fn, a, b, out, 3, 0, &p));
  IGNIS_TRY(check_dtype_in(fn, "a", a, is_fp8(a->dtype), "fp8_e4m3 or fp8_e5m2"));
  IGNIS_TRY(check_dtype_in(fn, "b", b, is_fp8(b->dtype), "fp8_e4m3 or fp8_e5m2"));
  if (a->dtype == IGNIS_FP8_E5M2 && b->dtype == IGNIS_FP8_E5M2)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: a.dtype and b.dtype are both fp8_e5m2; one of them must be fp8_e4m3", fn);
  IGNIS_TRY(check_dtype_in(fn, "out", out, is_half(out->dtype), "bf16 or f16"));
  IGNIS_TRY(check_scalar_scale(fn, "a_scale", a_scale));
  IGNIS_TRY(check_scalar_scale(fn, "b_scale", b_scale));
  p.a_scale = a_scale->data;
  p.b_scale = b_scale->data;
  p.scale_dtype = IGNIS_F32;
  const ignis_tensor *tensors[] = {a, b, a_scale, b_scale, out};
  const char *names[] = {"a", "b", "a_scale", "b_scale", "out"};
  return dispatch(&p, tensors, names, 5, fn, stream);
}

ignis_status ignis_mm_fp8_blockscale(const ignis_tensor *a, const ignis_tensor *b,
                                     const ignis_tensor *a_scale, const ignis_tensor *b_scale,
                                     ignis_tensor *out, void *stream) {
  const char *fn = "ignis_mm_fp8_blockscale";
  ignis_clear_error();
  ignis_gemm_params p = {0};
  p.kind = IGNIS_GEMM_FP8_BLOCK;
  IGNIS_TRY(check_operands(fn, a, b, out, 2, 1, &p));
  IGNIS_TRY(check_dtype_in(fn, "a", a, a->dtype == IGNIS_FP8_E4M3, "fp8_e4m3"));
  IGNIS_TRY(check_dtype_in(fn, "b", b, b->dtype == IGNIS_FP8_E4M3, "fp8_e4m3"));
  IGNIS_TRY(check_dtype_in(fn, "out", out, is_half(out->dtype), "bf16 or f16"));
  int64_t k_blocks = ceil_div(p.k, IGNIS_GEMM_SCALE_BLOCK);
  IGNIS_TRY(check_block_scale(fn, "a_scale", a_scale, p.m, k_blocks, "a.shape[0] (M)", "ceil(K / 128)"));
  /* b_scale: 128x128 blocks [ceil(N/128), KB], or one 1x128 scale per weight row [N, KB] */
  p.b_scale_block_n =
      b_scale && b_scale->ndim == 2 && b_scale->shape[0] == p.n && p.n > 1 ? 1 : IGNIS_GEMM_SCALE_BLOCK;
  IGNIS_TRY(check_block_scale(fn, "b_scale", b_scale, ceil_div(p.n, p.b_scale_block_n), k_blocks,
                              "ceil(N / 128), or N for per-row scales", "ceil(K / 128)"));
  IGNIS_TRY(check_dtype_in(fn, "b_scale", b_scale, b_scale->dtype == a_scale->dtype,
                           ignis_dtype_name(a_scale->dtype)));
  p.scale_dtype = a_scale->dtype;
  p.a_scale = a_scale->data;
  p.b_scale = b_scale->data;
  p.a_scale_stride_m = a_scale->strides[0];
  p.a_scale_stride_k = a_scale->strides[1];
  p.b_scale_stride_n = b_scale->strides[0];
  p.b_scale_stride_k = b_scale->strides[1];
  const ignis_tensor *tensors[] = {a, b, a_scale, b_scale, out};
  const char *names[] = {"a", "b", "a_scale", "b_scale", "out"};
  return dispatch(&p, tensors, names, 5, fn, stream);
}
