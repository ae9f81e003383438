/* Front end of the fp8 quantization ops (include/ignis/quant.h): validate every descriptor, fill
 * ignis_quant_params (prologue, scale mode, rows, scales) and hand it to the backend where the
 * tensors live. Dynamic per-tensor quantization is three backend steps (zero the scale, fold the
 * absmax in, turn it into the scale) followed by the static quantization. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/validate.h"
#include "ignis/quant.h"

float ignis_fp8_max(ignis_dtype dtype) {
  return dtype == IGNIS_FP8_E4M3 ? 448.0f : dtype == IGNIS_FP8_E5M2 ? 57344.0f : 0.0f;
}

static ignis_status check_fp8_out(const char *fn, const ignis_tensor *out) {
  if (out->dtype != IGNIS_FP8_E4M3 && out->dtype != IGNIS_FP8_E5M2)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: out.dtype=%s but it must be fp8_e4m3 or fp8_e5m2", fn,
                           ignis_dtype_name(out->dtype));
  return IGNIS_OK;
}

/* A per-tensor scale: f32, one element, any ndim <= 2. */
static ignis_status check_scalar_scale(const char *fn, const char *name, const ignis_tensor *scale) {
  IGNIS_TRY(ignis_check_tensor(fn, name, scale, 0, 2));
  if (scale->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be f32", fn, name,
                           ignis_dtype_name(scale->dtype));
  if (ignis_tensor_numel(scale) != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s has %" PRId64 " elements but it must have 1",
                           fn, name, ignis_tensor_numel(scale));
  return IGNIS_OK;
}

static ignis_status check_eps(const char *fn, const char *name, double eps, int positive) {
  if (!isfinite(eps) || eps < 0 || (positive && eps <= 0))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%g must be finite and %s", fn, name, eps,
                           positive ? "> 0" : ">= 0");
  return IGNIS_OK;
}

static ignis_status check_weight(const char *fn, const char *name, const ignis_tensor *w,
                                 const ignis_tensor *input, int64_t hidden) {
  IGNIS_TRY(ignis_check_tensor(fn, name, w, 1, 1));
  if (w->dtype != input->dtype && w->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be %s or f32", fn, name,
                           ignis_dtype_name(w->dtype), ignis_dtype_name(input->dtype));
  return ignis_check_vector(fn, name, w, hidden);
}

/* out has input's leading shape and `width` values per row; both rows contiguous; disjoint. */
static ignis_status check_rows(const char *fn, const ignis_tensor *input, int min_ndim,
                               const ignis_tensor *out, int64_t width) {
  IGNIS_TRY(ignis_check_tensor(fn, "input", input, min_ndim, 3));
  IGNIS_TRY(ignis_check_float_dtype(fn, "input", input));
  IGNIS_TRY(ignis_check_tensor(fn, "out", out, input->ndim, input->ndim));
  IGNIS_TRY(check_fp8_out(fn, out));
  for (int d = 0; d < input->ndim - 1; ++d)
    IGNIS_TRY(ignis_check_dim(fn, "out", out, d, input->shape[d], "the input's"));
  IGNIS_TRY(ignis_check_dim(fn, "out", out, -1, width < 0 ? input->shape[input->ndim - 1] : width,
                            width < 0 ? "input.shape[-1]" : "input.shape[-1]/2"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "input", input));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "out", out));
  return ignis_check_disjoint(fn, "out", out, "input", input);
}

/* A group scale view [rows, groups]: f32, or u8 when ue8m0; entries distinct (a layout, not a
 * broadcast); disjoint from the other tensors. */
static ignis_status check_group_scale(const char *fn, const char *name, const ignis_tensor *scale,
                                      int64_t rows, int64_t groups, int ue8m0) {
  IGNIS_TRY(ignis_check_tensor(fn, name, scale, 2, 2));
  if (scale->dtype != IGNIS_F32 && !(ue8m0 && scale->dtype == IGNIS_U8))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be f32%s", fn, name,
                           ignis_dtype_name(scale->dtype),
                           ue8m0 ? " or u8 (e8m0 bytes)" : " (u8 needs ue8m0)");
  IGNIS_TRY(ignis_check_dim(fn, name, scale, 0, rows, "the rows of input"));
  IGNIS_TRY(ignis_check_dim(fn, name, scale, 1, groups, "input.shape[-1]/group_size"));
  const int64_t sr = llabs(scale->strides[0]), sg = llabs(scale->strides[1]);
  const int distinct = rows <= 1     ? (groups <= 1 || sg > 0)
                       : groups <= 1 ? sr > 0
                                     : (sr >= groups * sg && sg > 0) || (sg >= rows * sr && sr > 0);
  if (!distinct)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s.strides=(%" PRId64 ", %" PRId64 ") make entries overlap", fn, name,
                           scale->strides[0], scale->strides[1]);
  return IGNIS_OK;
}

static ignis_status check_group_size(const char *fn, int64_t group_size, int64_t width) {
  if (group_size < 1 || width % group_size != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: group_size=%" PRId64 " must be >= 1 and divide the row length %" PRId64, fn,
                           group_size, width);
  return IGNIS_OK;
}

/* The fields every call shares. */
static ignis_quant_params base_params(ignis_quant_prologue prologue, const ignis_tensor *input,
                                      ignis_tensor *out) {
  ignis_quant_params p = {0};
  p.prologue = prologue;
  p.hidden = out->shape[out->ndim - 1];
  p.dtype = input->dtype;
  p.out_dtype = out->dtype;
  p.fp8_max = ignis_fp8_max(out->dtype);
  p.input = input->data;
  ignis_row_view(input, &p.num_rows_outer, &p.num_rows_inner, &p.input_layout);
  int64_t outer, inner;
  ignis_row_view(out, &outer, &inner, &p.out_layout);
  p.out = out->data;
  return p;
}

static void set_static_scale(ignis_quant_params *p, const ignis_tensor *scale) {
  p->scale_mode = IGNIS_QUANT_SCALE_STATIC;
  p->scale = scale->data;
  p->scale_dtype = IGNIS_F32;
}

static void set_group_scale(ignis_quant_params *p, ignis_tensor *scale, int64_t group_size, double eps,
                            int ue8m0) {
  p->scale_mode = IGNIS_QUANT_SCALE_GROUP;
  p->scale = scale->data;
  p->scale_dtype = scale->dtype;
  p->scale_stride_row = scale->strides[0];
  p->scale_stride_group = scale->strides[1];
  p->group_size = group_size;
  p->min_absmax = (float)eps;
  p->ue8m0 = ue8m0 != 0;
}

static ignis_status dispatch(const ignis_quant_params *p, const ignis_target *target, void *stream) {
  if (p->num_rows_outer * p->num_rows_inner == 0 || p->hidden == 0)
    return IGNIS_OK;
  return target->backend->quant(p, target->device.id, stream);
}

static ignis_status resolve(const char *fn, const ignis_tensor *const *tensors, const char *const *names,
                            int count, ignis_target *target) {
  return ignis_resolve_target(fn, tensors, names, count, target);
}

/* The target of the ops on input, scale and out alone. */
static ignis_status resolve_input_scale_out(const char *fn, const ignis_tensor *input,
                                            const ignis_tensor *scale, const ignis_tensor *out,
                                            ignis_target *target) {
  const ignis_tensor *tensors[] = {input, scale, out};
  const char *names[] = {"input", "scale", "out"};
  return resolve(fn, tensors, names, 3, target);
}

/* A scale the op writes: apart from input and out. */
static ignis_status check_scale_apart(const char *fn, const ignis_tensor *scale, const ignis_tensor *input,
                                      const ignis_tensor *out) {
  IGNIS_TRY(ignis_check_disjoint(fn, "scale", scale, "input", input));
  return ignis_check_disjoint(fn, "scale", scale, "out", out);
}

/* The values per out row: input.shape[-1], or half of it (which must be even) for silu_and_mul. */
static ignis_status out_width(const char *fn, ignis_quant_prologue prologue, const ignis_tensor *input,
                              int min_ndim, int max_ndim, int64_t *width) {
  IGNIS_TRY(ignis_check_tensor(fn, "input", input, min_ndim, max_ndim));
  *width = input->shape[input->ndim - 1];
  if (prologue != IGNIS_QUANT_SILU_MUL)
    return IGNIS_OK;
  if (*width % 2 != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: input.shape[-1]=%" PRId64 " must be even (2H: gate then up)", fn, *width);
  *width /= 2;
  return IGNIS_OK;
}

/* fp8_quantize and silu_and_mul_quant: a static per-tensor scale. */
static ignis_status static_quant(const char *fn, ignis_quant_prologue prologue, const ignis_tensor *input,
                                 const ignis_tensor *scale, ignis_tensor *out, void *stream) {
  ignis_clear_error();
  int64_t width;
  IGNIS_TRY(out_width(fn, prologue, input, 1, 3, &width));
  IGNIS_TRY(check_rows(fn, input, 1, out, prologue == IGNIS_QUANT_SILU_MUL ? width : -1));
  IGNIS_TRY(check_scalar_scale(fn, "scale", scale));
  IGNIS_TRY(ignis_check_disjoint(fn, "out", out, "scale", scale));
  ignis_target target;
  IGNIS_TRY(resolve_input_scale_out(fn, input, scale, out, &target));
  ignis_quant_params p = base_params(prologue, input, out);
  set_static_scale(&p, scale);
  return dispatch(&p, &target, stream);
}

ignis_status ignis_fp8_quantize(const ignis_tensor *input, const ignis_tensor *scale, ignis_tensor *out,
                                void *stream) {
  return static_quant("ignis_fp8_quantize", IGNIS_QUANT_PLAIN, input, scale, out, stream);
}

ignis_status ignis_fp8_quantize_dynamic(const ignis_tensor *input, double eps, ignis_tensor *out,
                                        ignis_tensor *scale, void *stream) {
  static const char fn[] = "ignis_fp8_quantize_dynamic";
  ignis_clear_error();
  IGNIS_TRY(check_rows(fn, input, 1, out, -1));
  IGNIS_TRY(check_eps(fn, "eps", eps, 1));
  IGNIS_TRY(check_scalar_scale(fn, "scale", scale));
  IGNIS_TRY(check_scale_apart(fn, scale, input, out));
  ignis_target target;
  IGNIS_TRY(resolve_input_scale_out(fn, input, scale, out, &target));
  ignis_quant_params p = base_params(IGNIS_QUANT_PLAIN, input, out);
  p.scale_mode = IGNIS_QUANT_SCALE_ABSMAX;
  p.scale = scale->data;
  p.scale_dtype = IGNIS_F32;
  const ignis_backend *b = target.backend;
  IGNIS_TRY(b->quant_absmax_begin((float *)scale->data, target.device.id, stream));
  IGNIS_TRY(dispatch(&p, &target, stream));
  IGNIS_TRY(b->quant_absmax_finish((float *)scale->data, (float)eps, p.fp8_max, target.device.id, stream));
  p.scale_mode = IGNIS_QUANT_SCALE_STATIC;
  return dispatch(&p, &target, stream);
}

static ignis_status group_quant(const char *fn, ignis_quant_prologue prologue, const ignis_tensor *input,
                                int64_t group_size, double eps, int ue8m0, ignis_tensor *out,
                                ignis_tensor *scale, void *stream) {
  ignis_clear_error();
  int64_t width;
  IGNIS_TRY(out_width(fn, prologue, input, 2, 2, &width));
  IGNIS_TRY(check_rows(fn, input, 2, out, prologue == IGNIS_QUANT_SILU_MUL ? width : -1));
  IGNIS_TRY(check_group_size(fn, group_size, width));
  IGNIS_TRY(check_eps(fn, "eps", eps, 1));
  IGNIS_TRY(check_group_scale(fn, "scale", scale, input->shape[0], width / group_size, ue8m0));
  IGNIS_TRY(check_scale_apart(fn, scale, input, out));
  ignis_target target;
  IGNIS_TRY(resolve_input_scale_out(fn, input, scale, out, &target));
  ignis_quant_params p = base_params(prologue, input, out);
  set_group_scale(&p, scale, group_size, eps, ue8m0);
  return dispatch(&p, &target, stream);
}

ignis_status ignis_fp8_quantize_per_token_group(const ignis_tensor *input, int64_t group_size, double eps,
                                                int ue8m0, ignis_tensor *out, ignis_tensor *scale,
                                                void *stream) {
  return group_quant("ignis_fp8_quantize_per_token_group", IGNIS_QUANT_PLAIN, input, group_size, eps, ue8m0,
                     out, scale, stream);
}

ignis_status ignis_fp8_quantize_per_token(const ignis_tensor *input, double eps, ignis_tensor *out,
                                          ignis_tensor *scale, void *stream) {
  static const char fn[] = "ignis_fp8_quantize_per_token";
  ignis_clear_error();
  IGNIS_TRY(ignis_check_tensor(fn, "input", input, 2, 2));
  IGNIS_TRY(ignis_check_tensor(fn, "scale", scale, 1, 2));
  if (scale->ndim == 2)
    IGNIS_TRY(ignis_check_dim(fn, "scale", scale, 1, 1, "1"));
  ignis_tensor view = *scale; /* [M] or [M, 1] as the [M, 1] group view */
  view.ndim = 2;
  view.shape[1] = 1;
  view.strides[1] = 1;
  const int64_t width = input->shape[1];
  return group_quant(fn, IGNIS_QUANT_PLAIN, input, width > 0 ? width : 1, eps, 0, out, &view, stream);
}

/* rmsnorm_quant, fused_add_rmsnorm_quant, layernorm_quant and the block-quant form. */
typedef struct norm_quant_args {
  ignis_norm_kind kind;
  int block;     /* the block form: block_scale instead of scale */
  int fused_add; /* residual required */
  const ignis_tensor *input;
  ignis_tensor *residual;
  const ignis_tensor *weight;
  const char *weight_name;
  const ignis_tensor *bias;
  const ignis_tensor *scale; /* static scale; unused by the block form */
  double eps;
  ignis_tensor *out;
  /* block form */
  ignis_tensor *block_scale;
  ignis_tensor *normed_out;
  int64_t group_size;
  double quant_eps;
  int ue8m0;
} norm_quant_args;

/* t (named name) is laid out as input: its dtype and shape, rows contiguous, apart from it. */
static ignis_status check_like_input(const char *fn, const char *name, const ignis_tensor *t, int max_ndim,
                                     const ignis_tensor *input) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 2, max_ndim));
  IGNIS_TRY(ignis_check_same_dtype(fn, name, t, "input", input));
  IGNIS_TRY(ignis_check_same_shape(fn, name, t, "input", input));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, name, t));
  return ignis_check_disjoint(fn, name, t, "input", input);
}

/* The pointers a form requires, named in its parameter order. */
static ignis_status check_required(const char *fn, const norm_quant_args *a) {
  const char *missing = !a->block && !a->scale                    ? "scale"
                        : a->fused_add && !a->residual            ? "residual"
                        : a->kind == IGNIS_NORM_LAYER && !a->bias ? "beta"
                                                                  : NULL;
  return missing ? ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, missing) : IGNIS_OK;
}

static ignis_status norm_quant(const char *fn, const norm_quant_args *a, void *stream) {
  ignis_clear_error();
  IGNIS_TRY(check_required(fn, a));
  const int block = a->block;
  IGNIS_TRY(check_rows(fn, a->input, 2, a->out, -1));
  if (block && a->input->ndim != 2)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: input.ndim=%d but it must be 2", fn,
                           a->input->ndim);
  const int64_t hidden = a->input->shape[a->input->ndim - 1];
  IGNIS_TRY(check_weight(fn, a->weight_name, a->weight, a->input, hidden));
  if (a->kind == IGNIS_NORM_LAYER) {
    IGNIS_TRY(check_weight(fn, "beta", a->bias, a->input, hidden));
    IGNIS_TRY(ignis_check_same_dtype(fn, "beta", a->bias, a->weight_name, a->weight));
  }
  IGNIS_TRY(check_eps(fn, "eps", a->eps, 0));
  if (a->residual) {
    IGNIS_TRY(check_like_input(fn, "residual", a->residual, 3, a->input));
    IGNIS_TRY(ignis_check_disjoint(fn, "residual", a->residual, "out", a->out));
  }
  if (block) {
    if (!a->block_scale)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: block_scale is NULL", fn);
    IGNIS_TRY(check_group_size(fn, a->group_size, hidden));
    IGNIS_TRY(check_eps(fn, "quant_eps", a->quant_eps, 1));
    IGNIS_TRY(check_group_scale(fn, "block_scale", a->block_scale, a->input->shape[0], hidden / a->group_size,
                                a->ue8m0));
    IGNIS_TRY(ignis_check_disjoint(fn, "block_scale", a->block_scale, "input", a->input));
    IGNIS_TRY(ignis_check_disjoint(fn, "block_scale", a->block_scale, "out", a->out));
    IGNIS_TRY(ignis_check_disjoint(fn, "block_scale", a->block_scale, "residual", a->residual));
    if (a->normed_out) {
      IGNIS_TRY(check_like_input(fn, "normed_out", a->normed_out, 2, a->input));
      IGNIS_TRY(ignis_check_disjoint(fn, "normed_out", a->normed_out, "residual", a->residual));
      IGNIS_TRY(ignis_check_disjoint(fn, "normed_out", a->normed_out, "out", a->out));
      IGNIS_TRY(ignis_check_disjoint(fn, "normed_out", a->normed_out, "block_scale", a->block_scale));
    }
  } else {
    IGNIS_TRY(check_scalar_scale(fn, "scale", a->scale));
    IGNIS_TRY(ignis_check_disjoint(fn, "out", a->out, "scale", a->scale));
    if (a->residual)
      IGNIS_TRY(ignis_check_disjoint(fn, "residual", a->residual, "scale", a->scale));
  }
  const ignis_tensor *tensors[] = {a->input, a->residual, a->weight,      a->bias,
                                   a->scale, a->out,      a->block_scale, a->normed_out};
  const char *names[] = {"input", "residual", a->weight_name, "beta",
                         "scale", "out",      "block_scale",  "normed_out"};
  ignis_target target;
  IGNIS_TRY(resolve(fn, tensors, names, 8, &target));

  ignis_quant_params p = base_params(IGNIS_QUANT_NORM, a->input, a->out);
  p.norm_kind = a->kind;
  p.eps = (float)a->eps;
  p.weight = a->weight->data;
  p.weight_dtype = a->weight->dtype;
  p.bias = a->bias ? a->bias->data : NULL;
  if (a->residual) {
    int64_t outer, inner;
    ignis_row_view(a->residual, &outer, &inner, &p.residual_layout);
    p.residual = a->residual->data;
  }
  if (block) {
    set_group_scale(&p, a->block_scale, a->group_size, a->quant_eps, a->ue8m0);
    if (a->normed_out) {
      int64_t outer, inner;
      ignis_row_view(a->normed_out, &outer, &inner, &p.normed_layout);
      p.normed_out = a->normed_out->data;
    }
  } else {
    set_static_scale(&p, a->scale);
  }
  return dispatch(&p, &target, stream);
}

ignis_status ignis_rmsnorm_quant(const ignis_tensor *input, const ignis_tensor *weight,
                                 const ignis_tensor *scale, double eps, ignis_tensor *out, void *stream) {
  norm_quant_args a = {.kind = IGNIS_NORM_RMS,
                       .input = input,
                       .weight = weight,
                       .weight_name = "weight",
                       .scale = scale,
                       .eps = eps,
                       .out = out};
  return norm_quant("ignis_rmsnorm_quant", &a, stream);
}

ignis_status ignis_fused_add_rmsnorm_quant(const ignis_tensor *input, ignis_tensor *residual,
                                           const ignis_tensor *weight, const ignis_tensor *scale, double eps,
                                           ignis_tensor *out, void *stream) {
  norm_quant_args a = {.kind = IGNIS_NORM_RMS,
                       .fused_add = 1,
                       .input = input,
                       .residual = residual,
                       .weight = weight,
                       .weight_name = "weight",
                       .scale = scale,
                       .eps = eps,
                       .out = out};
  return norm_quant("ignis_fused_add_rmsnorm_quant", &a, stream);
}

ignis_status ignis_layernorm_quant(const ignis_tensor *input, const ignis_tensor *gamma,
                                   const ignis_tensor *beta, const ignis_tensor *scale, double eps,
                                   ignis_tensor *out, void *stream) {
  norm_quant_args a = {.kind = IGNIS_NORM_LAYER,
                       .input = input,
                       .weight = gamma,
                       .weight_name = "gamma",
                       .bias = beta,
                       .scale = scale,
                       .eps = eps,
                       .out = out};
  return norm_quant("ignis_layernorm_quant", &a, stream);
}

ignis_status ignis_fused_add_rmsnorm_fp8_block_quant(const ignis_tensor *input, ignis_tensor *residual,
                                                     const ignis_tensor *weight, double eps,
                                                     int64_t group_size, double quant_eps, int ue8m0,
                                                     ignis_tensor *out, ignis_tensor *block_scale,
                                                     ignis_tensor *normed_out, void *stream) {
  norm_quant_args a = {.kind = IGNIS_NORM_RMS,
                       .block = 1,
                       .fused_add = 1,
                       .input = input,
                       .residual = residual,
                       .weight = weight,
                       .weight_name = "weight",
                       .eps = eps,
                       .out = out,
                       .block_scale = block_scale,
                       .normed_out = normed_out,
                       .group_size = group_size,
                       .quant_eps = quant_eps,
                       .ue8m0 = ue8m0};
  return norm_quant("ignis_fused_add_rmsnorm_fp8_block_quant", &a, stream);
}

ignis_status ignis_silu_and_mul_quant(const ignis_tensor *input, const ignis_tensor *scale, ignis_tensor *out,
                                      void *stream) {
  return static_quant("ignis_silu_and_mul_quant", IGNIS_QUANT_SILU_MUL, input, scale, out, stream);
}

ignis_status ignis_silu_and_mul_quant_per_token_group(const ignis_tensor *input, int64_t group_size,
                                                      double eps, int ue8m0, ignis_tensor *out,
                                                      ignis_tensor *scale, void *stream) {
  return group_quant("ignis_silu_and_mul_quant_per_token_group", IGNIS_QUANT_SILU_MUL, input, group_size, eps,
                     ue8m0, out, scale, stream);
}
