/* Front end of the gated activations (include/ignis/activation.h): validate, fill
 * ignis_activation_params, dispatch. */
#include "core/backend.h"
#include "ignis/activation.h"
#include "core/validate.h"

static ignis_status gated(const char *fn, ignis_activation_kind kind, const ignis_tensor *input,
                          ignis_tensor *out, void *stream) {
  ignis_clear_error();
  IGNIS_TRY(ignis_check_tensor(fn, "input", input, 1, 3));
  IGNIS_TRY(ignis_check_float_dtype(fn, "input", input));
  IGNIS_TRY(ignis_check_tensor(fn, "out", out, 1, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "out", out, "input", input));
  int64_t width = input->shape[input->ndim - 1];
  if (width % 2 != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: input.shape[-1]=%lld must be even (2H: gate then up)", fn,
                           (long long)width);
  if (out->ndim != input->ndim)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: out.ndim=%d but input.ndim=%d", fn,
                           out->ndim, input->ndim);
  for (int d = 0; d < input->ndim - 1; ++d)
    IGNIS_TRY(ignis_check_dim(fn, "out", out, d, input->shape[d], "the input's"));
  IGNIS_TRY(ignis_check_dim(fn, "out", out, -1, width / 2, "input.shape[-1]/2"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "input", input));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "out", out));
  IGNIS_TRY(ignis_check_disjoint(fn, "out", out, "input", input));
  const ignis_tensor *tensors[] = {input, out};
  const char *names[] = {"input", "out"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 2, &target));

  ignis_activation_params p = {0};
  p.kind = kind;
  p.hidden = width / 2;
  p.dtype = input->dtype;
  p.input = input->data;
  ignis_row_view(input, &p.num_rows_outer, &p.num_rows_inner, &p.input_layout);
  int64_t outer, inner;
  ignis_row_view(out, &outer, &inner, &p.out_layout);
  p.out = out->data;
  if (p.num_rows_outer * p.num_rows_inner == 0 || p.hidden == 0)
    return IGNIS_OK;
  return target.backend->activation(&p, target.device.id, stream);
}

ignis_status ignis_silu_and_mul(const ignis_tensor *input, ignis_tensor *out, void *stream) {
  return gated("ignis_silu_and_mul", IGNIS_ACT_SILU, input, out, stream);
}

ignis_status ignis_gelu_and_mul(const ignis_tensor *input, ignis_tensor *out, void *stream) {
  return gated("ignis_gelu_and_mul", IGNIS_ACT_GELU, input, out, stream);
}

ignis_status ignis_gelu_tanh_and_mul(const ignis_tensor *input, ignis_tensor *out, void *stream) {
  return gated("ignis_gelu_tanh_and_mul", IGNIS_ACT_GELU_TANH, input, out, stream);
}
