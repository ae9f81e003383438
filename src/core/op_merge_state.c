/* Front end of the attention-state merges (include/ignis/merge_state.h): validate v/s tensors,
 * fill ignis_merge_state_params (core/params.h) and dispatch to the backend where they live. */
#include <inttypes.h>

#include "core/backend.h"
#include "core/validate.h"
#include "ignis/merge_state.h"

static ignis_status check_base(const char *fn, ignis_lse_base base, float *log2_scale) {
  if (base == IGNIS_LSE_BASE2) {
    *log2_scale = 1.0f;
    return IGNIS_OK;
  }
  if (base == IGNIS_LSE_NATURAL) {
    *log2_scale = 1.4426950408889634f;
    return IGNIS_OK;
  }
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: base=%d is not an ignis_lse_base", fn, (int)base);
}

/* v: [seq, H, D] (states_dim: [seq, S, H, D]) of a float dtype, last dim contiguous. */
static ignis_status check_v(const char *fn, const char *name, const ignis_tensor *v, int ndim) {
  IGNIS_TRY(ignis_check_tensor(fn, name, v, ndim, ndim));
  IGNIS_TRY(ignis_check_float_dtype(fn, name, v));
  return ignis_check_last_dim_contiguous(fn, name, v);
}

/* s: f32 with the leading shape of v (v's dims without the last). */
static ignis_status check_s(const char *fn, const char *name, const ignis_tensor *s, const char *v_name,
                            const ignis_tensor *v) {
  IGNIS_TRY(ignis_check_tensor(fn, name, s, v->ndim - 1, v->ndim - 1));
  if (s->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be f32", fn, name,
                           ignis_dtype_name(s->dtype));
  for (int d = 0; d < s->ndim; ++d)
    if (s->shape[d] != v->shape[d])
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.shape[%d]=%" PRId64 " but %s.shape[%d]=%" PRId64,
                             fn, name, d, s->shape[d], v_name, d, v->shape[d]);
  return IGNIS_OK;
}

/* [seq, H, ...] layout of a 3-D v or 2-D s. */
static ignis_state_layout pair_layout(const ignis_tensor *t) {
  ignis_state_layout l = {t->strides[0], t->strides[1], 0};
  return l;
}

/* [seq, S, H, ...] layout of a 4-D v or 3-D s. */
static ignis_state_layout states_layout(const ignis_tensor *t) {
  ignis_state_layout l = {t->strides[0], t->strides[2], t->strides[1]};
  return l;
}

/* A state v (and, when s_name is not NULL, its LSE s) shaped and typed like the reference v. */
static ignis_status check_state_like(const char *fn, const char *v_name, const ignis_tensor *v, const char *s_name,
                                     const ignis_tensor *s, const char *ref_name, const ignis_tensor *ref) {
  IGNIS_TRY(check_v(fn, v_name, v, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, v_name, v, ref_name, ref));
  IGNIS_TRY(ignis_check_same_shape(fn, v_name, v, ref_name, ref));
  return s_name ? check_s(fn, s_name, s, v_name, v) : IGNIS_OK;
}

/* The two input states of the pair forms (v_a, s_a) and (v_b, s_b). */
static void set_pair_inputs(ignis_merge_state_params *p, const ignis_tensor *v_a, const ignis_tensor *s_a,
                            const ignis_tensor *v_b, const ignis_tensor *s_b) {
  p->seq_len = v_a->shape[0];
  p->num_heads = v_a->shape[1];
  p->head_dim = v_a->shape[2];
  p->num_states = 2;
  p->pair = 1;
  p->dtype = v_a->dtype;
  p->v_a = v_a->data;
  p->v_a_layout = pair_layout(v_a);
  p->s_a = (const float *)s_a->data;
  p->s_a_layout = pair_layout(s_a);
  p->v_b = v_b->data;
  p->v_b_layout = pair_layout(v_b);
  p->s_b = (const float *)s_b->data;
  p->s_b_layout = pair_layout(s_b);
}

static ignis_status dispatch(const ignis_merge_state_params *p, const ignis_target *target, void *stream) {
  if (p->seq_len == 0 || p->num_heads == 0)
    return IGNIS_OK;
  return target->backend->merge_state(p, target->device.id, stream);
}

ignis_status ignis_merge_state(const ignis_tensor *v_a, const ignis_tensor *s_a, const ignis_tensor *v_b,
                               const ignis_tensor *s_b, ignis_lse_base base, ignis_tensor *v_out,
                               ignis_tensor *s_out, void *stream) {
  static const char fn[] = "ignis_merge_state";
  ignis_clear_error();
  ignis_merge_state_params p = {0};
  IGNIS_TRY(check_v(fn, "v_a", v_a, 3));
  IGNIS_TRY(check_s(fn, "s_a", s_a, "v_a", v_a));
  IGNIS_TRY(check_state_like(fn, "v_b", v_b, "s_b", s_b, "v_a", v_a));
  IGNIS_TRY(check_state_like(fn, "v_out", v_out, s_out ? "s_out" : NULL, s_out, "v_a", v_a));
  IGNIS_TRY(check_base(fn, base, &p.log2_scale));
  const ignis_tensor *inputs[] = {v_a, s_a, v_b, s_b};
  const char *input_names[] = {"v_a", "s_a", "v_b", "s_b"};
  for (int i = 0; i < 4; ++i) {
    IGNIS_TRY(ignis_check_disjoint(fn, "v_out", v_out, input_names[i], inputs[i]));
    if (s_out)
      IGNIS_TRY(ignis_check_disjoint(fn, "s_out", s_out, input_names[i], inputs[i]));
  }
  if (s_out)
    IGNIS_TRY(ignis_check_disjoint(fn, "s_out", s_out, "v_out", v_out));
  const ignis_tensor *tensors[] = {v_a, s_a, v_b, s_b, v_out, s_out};
  const char *names[] = {"v_a", "s_a", "v_b", "s_b", "v_out", "s_out"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 6, &target));

  set_pair_inputs(&p, v_a, s_a, v_b, s_b);
  p.v_out = v_out->data;
  p.v_out_layout = pair_layout(v_out);
  if (s_out) {
    p.s_out = (float *)s_out->data;
    p.s_out_layout = pair_layout(s_out);
  }
  return dispatch(&p, &target, stream);
}

ignis_status ignis_merge_state_in_place(ignis_tensor *v, ignis_tensor *s, const ignis_tensor *v_other,
                                        const ignis_tensor *s_other, const ignis_tensor *mask, ignis_lse_base base,
                                        void *stream) {
  static const char fn[] = "ignis_merge_state_in_place";
  ignis_clear_error();
  ignis_merge_state_params p = {0};
  IGNIS_TRY(check_v(fn, "v", v, 3));
  IGNIS_TRY(check_s(fn, "s", s, "v", v));
  IGNIS_TRY(check_state_like(fn, "v_other", v_other, "s_other", s_other, "v", v));
  if (mask) {
    IGNIS_TRY(ignis_check_tensor(fn, "mask", mask, 1, 1));
    if (mask->dtype != IGNIS_U8)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: mask.dtype=%s but it must be u8", fn,
                             ignis_dtype_name(mask->dtype));
    IGNIS_TRY(ignis_check_dim(fn, "mask", mask, 0, v->shape[0], "v.shape[0]"));
  }
  IGNIS_TRY(check_base(fn, base, &p.log2_scale));
  IGNIS_TRY(ignis_check_disjoint(fn, "s", s, "v", v));
  const ignis_tensor *inputs[] = {v_other, s_other, mask};
  const char *input_names[] = {"v_other", "s_other", "mask"};
  for (int i = 0; i < 3; ++i)
    if (inputs[i]) {
      IGNIS_TRY(ignis_check_disjoint(fn, "v", v, input_names[i], inputs[i]));
      IGNIS_TRY(ignis_check_disjoint(fn, "s", s, input_names[i], inputs[i]));
    }
  const ignis_tensor *tensors[] = {v, s, v_other, s_other, mask};
  const char *names[] = {"v", "s", "v_other", "s_other", "mask"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 5, &target));

  set_pair_inputs(&p, v, s, v_other, s_other);
  p.v_out = v->data;
  p.v_out_layout = p.v_a_layout;
  p.s_out = (float *)s->data;
  p.s_out_layout = p.s_a_layout;
  if (mask) {
    p.mask = (const uint8_t *)mask->data;
    p.mask_stride = mask->strides[0];
  }
  return dispatch(&p, &target, stream);
}

ignis_status ignis_merge_states(const ignis_tensor *v, const ignis_tensor *s, ignis_lse_base base,
                                ignis_tensor *v_out, ignis_tensor *s_out, void *stream) {
  static const char fn[] = "ignis_merge_states";
  ignis_clear_error();
  ignis_merge_state_params p = {0};
  IGNIS_TRY(check_v(fn, "v", v, 4));
  IGNIS_TRY(check_s(fn, "s", s, "v", v));
  IGNIS_TRY(check_v(fn, "v_out", v_out, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "v_out", v_out, "v", v));
  IGNIS_TRY(ignis_check_dim(fn, "v_out", v_out, 0, v->shape[0], "v.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "v_out", v_out, 1, v->shape[2], "v.shape[2]"));
  IGNIS_TRY(ignis_check_dim(fn, "v_out", v_out, 2, v->shape[3], "v.shape[3]"));
  if (s_out)
    IGNIS_TRY(check_s(fn, "s_out", s_out, "v_out", v_out));
  IGNIS_TRY(check_base(fn, base, &p.log2_scale));
  IGNIS_TRY(ignis_check_disjoint(fn, "v_out", v_out, "v", v));
  IGNIS_TRY(ignis_check_disjoint(fn, "v_out", v_out, "s", s));
  if (s_out) {
    IGNIS_TRY(ignis_check_disjoint(fn, "s_out", s_out, "v", v));
    IGNIS_TRY(ignis_check_disjoint(fn, "s_out", s_out, "s", s));
    IGNIS_TRY(ignis_check_disjoint(fn, "s_out", s_out, "v_out", v_out));
  }
  const ignis_tensor *tensors[] = {v, s, v_out, s_out};
  const char *names[] = {"v", "s", "v_out", "s_out"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 4, &target));

  p.seq_len = v->shape[0];
  p.num_states = v->shape[1];
  p.num_heads = v->shape[2];
  p.head_dim = v->shape[3];
  p.pair = 0;
  p.dtype = v->dtype;
  p.v_a = v->data;
  p.v_a_layout = states_layout(v);
  p.s_a = (const float *)s->data;
  p.s_a_layout = states_layout(s);
  p.v_out = v_out->data;
  p.v_out_layout = pair_layout(v_out);
  if (s_out) {
    p.s_out = (float *)s_out->data;
    p.s_out_layout = pair_layout(s_out);
  }
  return dispatch(&p, &target, stream);
}
