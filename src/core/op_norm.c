/* Front end of the norm ops (include/ignis/norm.h): validate the descriptors, fill
 * ignis_norm_params, and hand it to the backend where the tensors live. */
#include <math.h>

#include "core/backend.h"
#include "ignis/norm.h"
#include "core/validate.h"

static ignis_status check_weight(const char *fn, const char *name, const ignis_tensor *w,
                                 const ignis_tensor *input, int64_t hidden) {
  IGNIS_TRY(ignis_check_tensor(fn, name, w, 1, 1));
  if (w->dtype != input->dtype && w->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be %s or f32", fn,
                           name, ignis_dtype_name(w->dtype), ignis_dtype_name(input->dtype));
  return ignis_check_vector(fn, name, w, hidden);
}

static ignis_status check_eps(const char *fn, double eps) {
  if (!isfinite(eps) || eps < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: eps=%g must be finite and >= 0", fn, eps);
  return IGNIS_OK;
}

static ignis_status dispatch(const char *fn, const ignis_norm_params *p, const ignis_target *target,
                             void *stream) {
  if (p->num_rows_outer * p->num_rows_inner == 0 || p->hidden == 0)
    return IGNIS_OK;
  return target->backend->norm(p, target->device.id, stream);
}

/* The fields every norm shares: kind, scalars, dtypes, the input rows and the weight. */
static ignis_norm_params norm_params(ignis_norm_kind kind, double eps, float weight_offset,
                                     const ignis_tensor *input, const ignis_tensor *weight) {
  ignis_norm_params p = {0};
  p.kind = kind;
  p.eps = (float)eps;
  p.weight_offset = weight_offset;
  p.hidden = input->shape[input->ndim - 1];
  p.dtype = input->dtype;
  p.weight_dtype = weight->dtype;
  p.input = input->data;
  ignis_row_view(input, &p.num_rows_outer, &p.num_rows_inner, &p.input_layout);
  p.weight = weight->data;
  return p;
}

/* rmsnorm, gemma_rmsnorm and layernorm (bias != NULL means layernorm). */
static ignis_status norm_out_of_place(const char *fn, ignis_norm_kind kind, float weight_offset,
                                      const ignis_tensor *input, const ignis_tensor *weight,
                                      const char *weight_name, const ignis_tensor *bias, double eps,
                                      ignis_tensor *out, void *stream) {
  ignis_clear_error();
  IGNIS_TRY(ignis_check_tensor(fn, "input", input, 2, 3));
  IGNIS_TRY(ignis_check_float_dtype(fn, "input", input));
  IGNIS_TRY(ignis_check_tensor(fn, "out", out, 2, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "out", out, "input", input));
  IGNIS_TRY(ignis_check_same_shape(fn, "out", out, "input", input));
  int64_t hidden = input->shape[input->ndim - 1];
  IGNIS_TRY(check_weight(fn, weight_name, weight, input, hidden));
  if (kind == IGNIS_NORM_LAYER) {
    IGNIS_TRY(check_weight(fn, "beta", bias, input, hidden));
    IGNIS_TRY(ignis_check_same_dtype(fn, "beta", bias, weight_name, weight));
  }
  IGNIS_TRY(check_eps(fn, eps));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "input", input));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "out", out));
  IGNIS_TRY(ignis_check_alias_or_disjoint(fn, "out", out, "input", input));
  const ignis_tensor *tensors[] = {input, weight, bias, out};
  const char *names[] = {"input", weight_name, "beta", "out"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 4, &target));

  ignis_norm_params p = norm_params(kind, eps, weight_offset, input, weight);
  int64_t outer, inner;
  ignis_row_view(out, &outer, &inner, &p.out_layout);
  p.out = out->data;
  p.bias = bias ? bias->data : NULL;
  return dispatch(fn, &p, &target, stream);
}

static ignis_status fused_add(const char *fn, float weight_offset, ignis_tensor *input,
                              ignis_tensor *residual, const ignis_tensor *weight, double eps,
                              void *stream) {
  ignis_clear_error();
  IGNIS_TRY(ignis_check_tensor(fn, "input", input, 2, 3));
  IGNIS_TRY(ignis_check_float_dtype(fn, "input", input));
  IGNIS_TRY(ignis_check_tensor(fn, "residual", residual, 2, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "residual", residual, "input", input));
  IGNIS_TRY(ignis_check_same_shape(fn, "residual", residual, "input", input));
  int64_t hidden = input->shape[input->ndim - 1];
  IGNIS_TRY(check_weight(fn, "weight", weight, input, hidden));
  IGNIS_TRY(check_eps(fn, eps));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "input", input));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "residual", residual));
  IGNIS_TRY(ignis_check_disjoint(fn, "residual", residual, "input", input));
  const ignis_tensor *tensors[] = {input, residual, weight};
  const char *names[] = {"input", "residual", "weight"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 3, &target));

  ignis_norm_params p = norm_params(IGNIS_NORM_RMS, eps, weight_offset, input, weight);
  p.out = input->data;
  p.out_layout = p.input_layout;
  int64_t outer, inner;
  ignis_row_view(residual, &outer, &inner, &p.residual_layout);
  p.residual = residual->data;
  return dispatch(fn, &p, &target, stream);
}

ignis_status ignis_rmsnorm(const ignis_tensor *input, const ignis_tensor *weight, double eps,
                           ignis_tensor *out, void *stream) {
  return norm_out_of_place("ignis_rmsnorm", IGNIS_NORM_RMS, 0.0f, input, weight, "weight", NULL, eps,
                           out, stream);
}

ignis_status ignis_gemma_rmsnorm(const ignis_tensor *input, const ignis_tensor *weight, double eps,
                                 ignis_tensor *out, void *stream) {
  return norm_out_of_place("ignis_gemma_rmsnorm", IGNIS_NORM_RMS, 1.0f, input, weight, "weight", NULL,
                           eps, out, stream);
}

ignis_status ignis_layernorm(const ignis_tensor *input, const ignis_tensor *gamma,
                             const ignis_tensor *beta, double eps, ignis_tensor *out, void *stream) {
  if (!beta) {
    ignis_clear_error();
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_layernorm: beta is NULL");
  }
  return norm_out_of_place("ignis_layernorm", IGNIS_NORM_LAYER, 0.0f, input, gamma, "gamma", beta, eps,
                           out, stream);
}

ignis_status ignis_fused_add_rmsnorm(ignis_tensor *input, ignis_tensor *residual,
                                     const ignis_tensor *weight, double eps, void *stream) {
  return fused_add("ignis_fused_add_rmsnorm", 0.0f, input, residual, weight, eps, stream);
}

ignis_status ignis_gemma_fused_add_rmsnorm(ignis_tensor *input, ignis_tensor *residual,
                                           const ignis_tensor *weight, double eps, void *stream) {
  return fused_add("ignis_gemma_fused_add_rmsnorm", 1.0f, input, residual, weight, eps, stream);
}
