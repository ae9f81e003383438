/* Front end of the sampling ops (include/ignis/sampling.h): validate the descriptors and scalars,
 * naming the parameter at fault, fill the flat params struct (core/params.h) and hand it to the
 * backend where the tensors live. Nothing is written on an error. */
#include <inttypes.h>
#include <math.h>

#include "core/backend.h"
#include "core/config.h"
#include "core/sampling_split.h"
#include "core/validate.h"
#include "ignis/sampling.h"

#define MAX_VOCAB ((int64_t)INT32_MAX)
#define MAX_MASS_VOCAB ((int64_t)1 << 24) /* summed masses stay exact in 64 bits (core/philox.h) */

static ignis_status invalid(const char *fn, const char *what) {
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s", fn, what);
}

/* A 2-D [rows, vocab] float tensor with a contiguous last dimension and a vocab the op takes. */
static ignis_status check_rows(const char *fn, const char *name, const ignis_tensor *t, int64_t max_vocab) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 2, 2));
  IGNIS_TRY(ignis_check_float_dtype(fn, name, t));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, name, t));
  if (t->shape[1] < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s.shape[1]=%" PRId64 " but the vocabulary must hold >= 1 entry", fn, name,
                           t->shape[1]);
  if (t->shape[1] > max_vocab)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: %s.shape[1]=%" PRId64 " exceeds the largest vocabulary %" PRId64, fn, name,
                           t->shape[1], max_vocab);
  return IGNIS_OK;
}

/* A contiguous 1-D index tensor (i32/i64) of `length` elements. */
static ignis_status check_index_vector(const char *fn, const char *name, const ignis_tensor *t,
                                       int64_t length) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 1, 1));
  IGNIS_TRY(ignis_check_index_dtype(fn, name, t));
  return ignis_check_vector(fn, name, t, length);
}

static ignis_status check_f32_vector(const char *fn, const char *name, const ignis_tensor *t,
                                     int64_t length) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 1, 1));
  if (t->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be f32", fn, name,
                           ignis_dtype_name(t->dtype));
  return ignis_check_vector(fn, name, t, length);
}

/* Seed or offset tensor: i64, 1 or batch elements, contiguous. */
static ignis_status check_rng_tensor(const char *fn, const char *name, const ignis_tensor *t, int64_t batch,
                                     int64_t *len) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 0, 1));
  if (t->dtype != IGNIS_I64)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be i64", fn, name,
                           ignis_dtype_name(t->dtype));
  int64_t n = ignis_tensor_numel(t);
  if (n != 1 && n != batch)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s has %" PRId64 " elements but it must have 1 or batch=%" PRId64, fn, name,
                           n, batch);
  if (t->ndim == 1 && n > 1 && t->strides[0] != 1)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: %s.strides[0]=%" PRId64 " but it must be 1", fn,
                           name, t->strides[0]);
  *len = n;
  return IGNIS_OK;
}

/* Options (NULL: the defaults): the row map and the generator's seed and offset. */
typedef struct sampling_call {
  const ignis_tensor *indices;
  const ignis_tensor *seed_tensor;
  const ignis_tensor *offset_tensor;
  ignis_philox_source rng;
  void *workspace;
  size_t workspace_bytes;
} sampling_call;

static ignis_status read_options(const char *fn, const ignis_sampling_options *options, sampling_call *call) {
  ignis_philox_source rng = {0};
  call->indices = call->seed_tensor = call->offset_tensor = NULL;
  call->rng = rng;
  call->workspace = NULL;
  call->workspace_bytes = 0;
  if (!options)
    return IGNIS_OK;
  static const ignis_sampling_options defaults = IGNIS_SAMPLING_OPTIONS_INIT;
  ignis_sampling_options read;
  IGNIS_TRY(ignis_read_config(fn, "options.size", "IGNIS_SAMPLING_OPTIONS_INIT", &read, &defaults, options, sizeof read,
                              IGNIS_CONFIG_END(ignis_sampling_options, deterministic)));
  options = &read;
  call->indices = options->indices;
  call->seed_tensor = options->seed_tensor;
  call->offset_tensor = options->offset_tensor;
  call->rng.seed = options->seed;
  call->rng.offset = options->offset;
  if (options->workspace_bytes > 0 && !options->workspace)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: options.workspace is NULL but options.workspace_bytes is %zu", fn,
                           options->workspace_bytes);
  if ((uintptr_t)options->workspace % 16 != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: options.workspace is not 16-byte aligned", fn);
  call->workspace = options->workspace_bytes > 0 ? options->workspace : NULL;
  call->workspace_bytes = call->workspace ? options->workspace_bytes : 0;
  return IGNIS_OK;
}

/* The generator tensors, checked against the batch. */
static ignis_status check_rng(const char *fn, sampling_call *call, int64_t batch) {
  if (call->seed_tensor) {
    IGNIS_TRY(check_rng_tensor(fn, "seed", call->seed_tensor, batch, &call->rng.seed_len));
    call->rng.seed_arr = call->seed_tensor->data;
  }
  if (call->offset_tensor) {
    IGNIS_TRY(check_rng_tensor(fn, "offset", call->offset_tensor, batch, &call->rng.offset_len));
    call->rng.offset_arr = call->offset_tensor->data;
  }
  return IGNIS_OK;
}

/* Thresholds. A per-row array, when given, replaces the scalar (which is then not checked). */
static ignis_status check_top_k(const char *fn, const ignis_tensor *arr, int64_t value, int64_t batch) {
  if (arr)
    return check_index_vector(fn, "top_k_arr", arr, batch);
  if (value < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: top_k=%" PRId64 " but it must be >= 0", fn,
                           value);
  return IGNIS_OK;
}

static ignis_status check_top_p(const char *fn, const ignis_tensor *arr, double value, int64_t batch) {
  if (arr)
    return check_f32_vector(fn, "top_p_arr", arr, batch);
  if (!(value > 0.0 && value <= 1.0))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: top_p=%g but it must be in (0, 1]", fn, value);
  return IGNIS_OK;
}

static ignis_status check_min_p(const char *fn, const ignis_tensor *arr, double value, int64_t batch) {
  if (arr)
    return check_f32_vector(fn, "min_p_arr", arr, batch);
  if (!(value >= 0.0 && value <= 1.0))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: min_p=%g but it must be in [0, 1]", fn, value);
  return IGNIS_OK;
}

/* Everything a filtered-sampling call takes. */
typedef struct sampling_args {
  const char *fn;
  const char *input_name;
  const ignis_tensor *input;
  int logits;
  ignis_sampling_filter filter;
  const ignis_tensor *top_k_arr;
  int64_t top_k_val;
  const ignis_tensor *top_p_arr;
  double top_p_val;
  const ignis_tensor *min_p_arr;
  double min_p_val;
  ignis_tensor *samples;
  const ignis_sampling_options *options;
  void *stream;
} sampling_args;

static int filter_has_top_p(ignis_sampling_filter filter) {
  return filter == IGNIS_SAMPLING_TOP_P || filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
         filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
}

static ignis_status run_sampling(const sampling_args *a) {
  const char *fn = a->fn;
  ignis_clear_error();
  sampling_call call;
  IGNIS_TRY(read_options(fn, a->options, &call));
  IGNIS_TRY(check_rows(fn, a->input_name, a->input, MAX_MASS_VOCAB)); /* the sample sums masses */
  const int64_t rows = a->input->shape[0];
  int64_t batch = rows;
  if (call.indices) {
    IGNIS_TRY(ignis_check_tensor(fn, "indices", call.indices, 1, 1));
    batch = call.indices->shape[0];
    IGNIS_TRY(check_index_vector(fn, "indices", call.indices, batch));
    if (batch > 0 && rows == 0)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: %s has no rows but indices has %" PRId64 " entries", fn, a->input_name,
                             batch);
  }
  if (!a->samples)
    return invalid(fn, "samples is NULL");
  IGNIS_TRY(check_index_vector(fn, "samples", a->samples, batch));
  if (a->filter == IGNIS_SAMPLING_TOP_K || a->filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
      a->filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P)
    IGNIS_TRY(check_top_k(fn, a->top_k_arr, a->top_k_val, batch));
  if (filter_has_top_p(a->filter))
    IGNIS_TRY(check_top_p(fn, a->top_p_arr, a->top_p_val, batch));
  if (a->filter == IGNIS_SAMPLING_MIN_P)
    IGNIS_TRY(check_min_p(fn, a->min_p_arr, a->min_p_val, batch));
  IGNIS_TRY(check_rng(fn, &call, batch));
  IGNIS_TRY(ignis_check_disjoint(fn, "samples", a->samples, a->input_name, a->input));
  const ignis_tensor *tensors[] = {a->input,     a->samples,   call.indices,     a->top_k_arr,
                                   a->top_p_arr, a->min_p_arr, call.seed_tensor, call.offset_tensor};
  const char *names[] = {a->input_name, "samples",   "indices", "top_k_arr",
                         "top_p_arr",   "min_p_arr", "seed",    "offset"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 8, &target));

  ignis_sampling_params p = {0};
  p.filter = a->filter;
  p.output = IGNIS_SAMPLING_OUT_SAMPLE;
  p.logits = a->logits;
  p.batch_size = batch;
  p.num_rows = rows;
  p.vocab_size = a->input->shape[1];
  p.dtype = a->input->dtype;
  p.input = a->input->data;
  p.input_row_stride = a->input->strides[0];
  p.indices = call.indices ? call.indices->data : NULL;
  p.indices_dtype = call.indices ? call.indices->dtype : IGNIS_I32;
  p.top_k_arr = a->top_k_arr ? a->top_k_arr->data : NULL;
  p.top_k_dtype = a->top_k_arr ? a->top_k_arr->dtype : IGNIS_I64;
  p.top_k_val = a->top_k_val;
  p.top_p_arr = a->top_p_arr ? a->top_p_arr->data : NULL;
  p.top_p_val = a->top_p_val;
  p.min_p_arr = a->min_p_arr ? a->min_p_arr->data : NULL;
  p.min_p_val = (float)a->min_p_val;
  p.rng = call.rng;
  p.samples = a->samples->data;
  p.samples_dtype = a->samples->dtype;
  p.workspace = call.workspace;
  p.workspace_bytes = call.workspace_bytes;
  if (batch == 0)
    return IGNIS_OK;
  return target.backend->sampling(&p, target.device.id, a->stream);
}

ignis_status ignis_sampling_workspace_size(int64_t batch, int64_t vocab_size, size_t *bytes) {
  const char *fn = "ignis_sampling_workspace_size";
  ignis_clear_error();
  if (!bytes)
    return invalid(fn, "bytes is NULL");
  if (batch < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: batch=%" PRId64 " but it must be >= 0", fn, batch);
  if (vocab_size < 0 || vocab_size > MAX_MASS_VOCAB)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: vocab_size=%" PRId64 " but it must be in [0, %" PRId64 "]", fn, vocab_size,
                           MAX_MASS_VOCAB);
  *bytes = batch > 0 && batch <= IGNIS_SAMPLING_SPLIT_MAX_ROWS && vocab_size >= IGNIS_SPLIT_MIN_VOCAB
               ? ignis_split_layout_of(batch, vocab_size).bytes
               : 0;
  return IGNIS_OK;
}

static sampling_args sampling_base(const char *fn, const char *input_name, const ignis_tensor *input,
                                   int logits, ignis_sampling_filter filter, ignis_tensor *samples,
                                   const ignis_sampling_options *options, void *stream) {
  sampling_args a = {0};
  a.fn = fn;
  a.input_name = input_name;
  a.input = input;
  a.logits = logits;
  a.filter = filter;
  a.top_p_val = 1.0;
  a.samples = samples;
  a.options = options;
  a.stream = stream;
  return a;
}

ignis_status ignis_sampling_from_probs(const ignis_tensor *probs, ignis_tensor *samples,
                                       const ignis_sampling_options *options, void *stream) {
  sampling_args a = sampling_base("ignis_sampling_from_probs", "probs", probs, 0, IGNIS_SAMPLING_ALL, samples,
                                  options, stream);
  return run_sampling(&a);
}

ignis_status ignis_sampling_from_logits(const ignis_tensor *logits, ignis_tensor *samples,
                                        const ignis_sampling_options *options, void *stream) {
  sampling_args a = sampling_base("ignis_sampling_from_logits", "logits", logits, 1, IGNIS_SAMPLING_ALL,
                                  samples, options, stream);
  return run_sampling(&a);
}

ignis_status ignis_top_p_sampling_from_probs(const ignis_tensor *probs, const ignis_tensor *top_p_arr,
                                             double top_p_val, ignis_tensor *samples,
                                             const ignis_sampling_options *options, void *stream) {
  sampling_args a = sampling_base("ignis_top_p_sampling_from_probs", "probs", probs, 0, IGNIS_SAMPLING_TOP_P,
                                  samples, options, stream);
  a.top_p_arr = top_p_arr;
  a.top_p_val = top_p_val;
  return run_sampling(&a);
}

ignis_status ignis_top_k_sampling_from_probs(const ignis_tensor *probs, const ignis_tensor *top_k_arr,
                                             int64_t top_k_val, ignis_tensor *samples,
                                             const ignis_sampling_options *options, void *stream) {
  sampling_args a = sampling_base("ignis_top_k_sampling_from_probs", "probs", probs, 0, IGNIS_SAMPLING_TOP_K,
                                  samples, options, stream);
  a.top_k_arr = top_k_arr;
  a.top_k_val = top_k_val;
  return run_sampling(&a);
}

ignis_status ignis_min_p_sampling_from_probs(const ignis_tensor *probs, const ignis_tensor *min_p_arr,
                                             double min_p_val, ignis_tensor *samples,
                                             const ignis_sampling_options *options, void *stream) {
  sampling_args a = sampling_base("ignis_min_p_sampling_from_probs", "probs", probs, 0, IGNIS_SAMPLING_MIN_P,
                                  samples, options, stream);
  a.min_p_arr = min_p_arr;
  a.min_p_val = min_p_val;
  return run_sampling(&a);
}

static ignis_status top_k_top_p(const char *fn, const char *input_name, const ignis_tensor *input, int logits,
                                const ignis_tensor *top_k_arr, int64_t top_k_val,
                                const ignis_tensor *top_p_arr, double top_p_val,
                                ignis_filter_apply_order order, ignis_tensor *samples,
                                const ignis_sampling_options *options, void *stream) {
  if (order != IGNIS_FILTER_TOP_K_FIRST && order != IGNIS_FILTER_JOINT) {
    ignis_clear_error();
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: filter_apply_order=%d but it must be IGNIS_FILTER_TOP_K_FIRST (0) or "
                           "IGNIS_FILTER_JOINT (1)",
                           fn, (int)order);
  }
  sampling_args a = sampling_base(fn, input_name, input, logits,
                                  order == IGNIS_FILTER_JOINT ? IGNIS_SAMPLING_TOP_K_TOP_P
                                                              : IGNIS_SAMPLING_TOP_K_THEN_TOP_P,
                                  samples, options, stream);
  a.top_k_arr = top_k_arr;
  a.top_k_val = top_k_val;
  a.top_p_arr = top_p_arr;
  a.top_p_val = top_p_val;
  return run_sampling(&a);
}

ignis_status ignis_top_k_top_p_sampling_from_probs(const ignis_tensor *probs, const ignis_tensor *top_k_arr,
                                                   int64_t top_k_val, const ignis_tensor *top_p_arr,
                                                   double top_p_val, ignis_filter_apply_order order,
                                                   ignis_tensor *samples,
                                                   const ignis_sampling_options *options, void *stream) {
  return top_k_top_p("ignis_top_k_top_p_sampling_from_probs", "probs", probs, 0, top_k_arr, top_k_val,
                     top_p_arr, top_p_val, order, samples, options, stream);
}

ignis_status ignis_top_k_top_p_sampling_from_logits(const ignis_tensor *logits, const ignis_tensor *top_k_arr,
                                                    int64_t top_k_val, const ignis_tensor *top_p_arr,
                                                    double top_p_val, ignis_filter_apply_order order,
                                                    ignis_tensor *samples,
                                                    const ignis_sampling_options *options, void *stream) {
  return top_k_top_p("ignis_top_k_top_p_sampling_from_logits", "logits", logits, 1, top_k_arr, top_k_val,
                     top_p_arr, top_p_val, order, samples, options, stream);
}

/* ---- renorm and mask: [rows, vocab] in, the same shape and dtype out ---------------------------- */
static ignis_status run_row_transform(const char *fn, const char *in_name, const ignis_tensor *input,
                                      const char *out_name, ignis_tensor *out, ignis_sampling_filter filter,
                                      ignis_sampling_output output, const ignis_tensor *top_k_arr,
                                      int64_t top_k_val, const ignis_tensor *top_p_arr, double top_p_val,
                                      void *stream) {
  ignis_clear_error();
  IGNIS_TRY(check_rows(fn, in_name, input, output == IGNIS_SAMPLING_OUT_MASK ? MAX_VOCAB : MAX_MASS_VOCAB));
  if (!out)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, out_name);
  IGNIS_TRY(ignis_check_tensor(fn, out_name, out, 2, 2));
  IGNIS_TRY(ignis_check_same_dtype(fn, out_name, out, in_name, input));
  IGNIS_TRY(ignis_check_same_shape(fn, out_name, out, in_name, input));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, out_name, out));
  const int64_t rows = input->shape[0];
  if (filter == IGNIS_SAMPLING_TOP_K)
    IGNIS_TRY(check_top_k(fn, top_k_arr, top_k_val, rows));
  else
    IGNIS_TRY(check_top_p(fn, top_p_arr, top_p_val, rows));
  IGNIS_TRY(ignis_check_alias_or_disjoint(fn, out_name, out, in_name, input));
  const ignis_tensor *tensors[] = {input, out, top_k_arr, top_p_arr};
  const char *names[] = {in_name, out_name, "top_k_arr", "top_p_arr"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 4, &target));

  ignis_sampling_params p = {0};
  p.filter = filter;
  p.output = output;
  p.logits = output == IGNIS_SAMPLING_OUT_MASK;
  p.batch_size = rows;
  p.num_rows = rows;
  p.vocab_size = input->shape[1];
  p.dtype = input->dtype;
  p.input = input->data;
  p.input_row_stride = input->strides[0];
  p.top_k_arr = top_k_arr ? top_k_arr->data : NULL;
  p.top_k_dtype = top_k_arr ? top_k_arr->dtype : IGNIS_I64;
  p.top_k_val = top_k_val;
  p.top_p_arr = top_p_arr ? top_p_arr->data : NULL;
  p.top_p_val = top_p_val;
  p.out = out->data;
  p.out_row_stride = out->strides[0];
  if (rows == 0)
    return IGNIS_OK;
  return target.backend->sampling(&p, target.device.id, stream);
}

ignis_status ignis_top_p_renorm_probs(const ignis_tensor *probs, const ignis_tensor *top_p_arr,
                                      double top_p_val, ignis_tensor *renorm_probs, void *stream) {
  return run_row_transform("ignis_top_p_renorm_probs", "probs", probs, "renorm_probs", renorm_probs,
                           IGNIS_SAMPLING_TOP_P, IGNIS_SAMPLING_OUT_RENORM, NULL, 0, top_p_arr, top_p_val,
                           stream);
}

ignis_status ignis_top_k_renorm_probs(const ignis_tensor *probs, const ignis_tensor *top_k_arr,
                                      int64_t top_k_val, ignis_tensor *renorm_probs, void *stream) {
  return run_row_transform("ignis_top_k_renorm_probs", "probs", probs, "renorm_probs", renorm_probs,
                           IGNIS_SAMPLING_TOP_K, IGNIS_SAMPLING_OUT_RENORM, top_k_arr, top_k_val, NULL, 1.0,
                           stream);
}

ignis_status ignis_top_k_mask_logits(const ignis_tensor *logits, const ignis_tensor *top_k_arr,
                                     int64_t top_k_val, ignis_tensor *masked_logits, void *stream) {
  return run_row_transform("ignis_top_k_mask_logits", "logits", logits, "masked_logits", masked_logits,
                           IGNIS_SAMPLING_TOP_K, IGNIS_SAMPLING_OUT_MASK, top_k_arr, top_k_val, NULL, 1.0,
                           stream);
}

/* ---- softmax ---------------------------------------------------------------------------------- */
ignis_status ignis_softmax(const ignis_tensor *logits, const ignis_tensor *temperature_arr,
                           double temperature_val, ignis_tensor *probs, void *stream) {
  const char *fn = "ignis_softmax";
  ignis_clear_error();
  IGNIS_TRY(check_rows(fn, "logits", logits, MAX_VOCAB));
  if (!probs)
    return invalid(fn, "probs is NULL");
  IGNIS_TRY(ignis_check_tensor(fn, "probs", probs, 2, 2));
  if (probs->dtype != IGNIS_F32 && probs->dtype != logits->dtype)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: probs.dtype=%s but it must be f32 or %s", fn,
                           ignis_dtype_name(probs->dtype), ignis_dtype_name(logits->dtype));
  IGNIS_TRY(ignis_check_same_shape(fn, "probs", probs, "logits", logits));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "probs", probs));
  const int64_t rows = logits->shape[0];
  if (temperature_arr)
    IGNIS_TRY(check_f32_vector(fn, "temperature_arr", temperature_arr, rows));
  else if (!(isfinite(temperature_val) && temperature_val > 0.0))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: temperature=%g but it must be finite and > 0",
                           fn, temperature_val);
  if (probs->dtype == logits->dtype)
    IGNIS_TRY(ignis_check_alias_or_disjoint(fn, "probs", probs, "logits", logits));
  else
    IGNIS_TRY(ignis_check_disjoint(fn, "probs", probs, "logits", logits));
  const ignis_tensor *tensors[] = {logits, probs, temperature_arr};
  const char *names[] = {"logits", "probs", "temperature_arr"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 3, &target));

  ignis_softmax_params p = {0};
  p.num_rows = rows;
  p.vocab_size = logits->shape[1];
  p.dtype = logits->dtype;
  p.out_dtype = probs->dtype;
  p.logits = logits->data;
  p.logits_row_stride = logits->strides[0];
  p.probs = probs->data;
  p.probs_row_stride = probs->strides[0];
  p.temperature_arr = temperature_arr ? temperature_arr->data : NULL;
  p.temperature_val = (float)temperature_val;
  if (rows == 0)
    return IGNIS_OK;
  return target.backend->softmax(&p, target.device.id, stream);
}

/* ---- chain speculative sampling ------------------------------------------------------------------ */
ignis_status ignis_chain_speculative_sampling(
    const ignis_tensor *draft_probs, const ignis_tensor *draft_token_ids, const ignis_tensor *target_probs,
    ignis_tensor *output_token_ids, ignis_tensor *output_accepted_token_num,
    ignis_tensor *output_emitted_draft_token_num, const ignis_sampling_options *options, void *stream) {
  const char *fn = "ignis_chain_speculative_sampling";
  ignis_clear_error();
  sampling_call call;
  IGNIS_TRY(read_options(fn, options, &call));
  if (call.indices)
    return invalid(fn, "options.indices must be NULL (each request has its own rows)");
  IGNIS_TRY(ignis_check_tensor(fn, "draft_probs", draft_probs, 3, 3));
  IGNIS_TRY(ignis_check_float_dtype(fn, "draft_probs", draft_probs));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "draft_probs", draft_probs));
  const int64_t batch = draft_probs->shape[0], n = draft_probs->shape[1], vocab = draft_probs->shape[2];
  if (vocab < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: draft_probs.shape[2]=%" PRId64 " but the vocabulary must hold >= 1 entry", fn,
                           vocab);
  if (vocab > MAX_MASS_VOCAB)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: draft_probs.shape[2]=%" PRId64 " exceeds the largest vocabulary %" PRId64, fn,
                           vocab, MAX_MASS_VOCAB);
  IGNIS_TRY(ignis_check_tensor(fn, "draft_token_ids", draft_token_ids, 2, 2));
  IGNIS_TRY(ignis_check_index_dtype(fn, "draft_token_ids", draft_token_ids));
  IGNIS_TRY(ignis_check_dim(fn, "draft_token_ids", draft_token_ids, 0, batch, "draft_probs.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "draft_token_ids", draft_token_ids, 1, n, "draft_probs.shape[1]"));
  IGNIS_TRY(ignis_check_tensor(fn, "target_probs", target_probs, 3, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "target_probs", target_probs, "draft_probs", draft_probs));
  IGNIS_TRY(ignis_check_dim(fn, "target_probs", target_probs, 0, batch, "draft_probs.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "target_probs", target_probs, 1, n + 1, "draft_probs.shape[1] + 1"));
  IGNIS_TRY(ignis_check_dim(fn, "target_probs", target_probs, 2, vocab, "draft_probs.shape[2]"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "target_probs", target_probs));
  if (!output_token_ids)
    return invalid(fn, "output_token_ids is NULL");
  IGNIS_TRY(ignis_check_tensor(fn, "output_token_ids", output_token_ids, 2, 2));
  IGNIS_TRY(ignis_check_index_dtype(fn, "output_token_ids", output_token_ids));
  IGNIS_TRY(ignis_check_dim(fn, "output_token_ids", output_token_ids, 0, batch, "draft_probs.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "output_token_ids", output_token_ids, 1, n + 1, "draft_probs.shape[1] + 1"));
  if (!output_accepted_token_num)
    return invalid(fn, "output_accepted_token_num is NULL");
  IGNIS_TRY(check_index_vector(fn, "output_accepted_token_num", output_accepted_token_num, batch));
  if (!output_emitted_draft_token_num)
    return invalid(fn, "output_emitted_draft_token_num is NULL");
  IGNIS_TRY(check_index_vector(fn, "output_emitted_draft_token_num", output_emitted_draft_token_num, batch));
  IGNIS_TRY(check_rng(fn, &call, batch));
  IGNIS_TRY(
      ignis_check_disjoint(fn, "output_token_ids", output_token_ids, "draft_token_ids", draft_token_ids));
  IGNIS_TRY(ignis_check_disjoint(fn, "output_accepted_token_num", output_accepted_token_num,
                                 "output_emitted_draft_token_num", output_emitted_draft_token_num));
  IGNIS_TRY(ignis_check_disjoint(fn, "output_accepted_token_num", output_accepted_token_num,
                                 "output_token_ids", output_token_ids));
  IGNIS_TRY(ignis_check_disjoint(fn, "output_emitted_draft_token_num", output_emitted_draft_token_num,
                                 "output_token_ids", output_token_ids));
  const ignis_tensor *tensors[] = {
      draft_probs,      draft_token_ids,           target_probs,
      output_token_ids, output_accepted_token_num, output_emitted_draft_token_num,
      call.seed_tensor, call.offset_tensor};
  const char *names[] = {"draft_probs",
                         "draft_token_ids",
                         "target_probs",
                         "output_token_ids",
                         "output_accepted_token_num",
                         "output_emitted_draft_token_num",
                         "seed",
                         "offset"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 8, &target));

  ignis_speculative_params p = {0};
  p.batch_size = batch;
  p.num_draft = n;
  p.vocab_size = vocab;
  p.dtype = draft_probs->dtype;
  p.draft_probs = draft_probs->data;
  p.draft_stride_batch = draft_probs->strides[0];
  p.draft_stride_pos = draft_probs->strides[1];
  p.draft_ids = draft_token_ids->data;
  p.draft_ids_dtype = draft_token_ids->dtype;
  p.draft_ids_stride_batch = draft_token_ids->strides[0];
  p.draft_ids_stride_pos = draft_token_ids->strides[1];
  p.target_probs = target_probs->data;
  p.target_stride_batch = target_probs->strides[0];
  p.target_stride_pos = target_probs->strides[1];
  p.output_ids = output_token_ids->data;
  p.output_ids_dtype = output_token_ids->dtype;
  p.output_stride_batch = output_token_ids->strides[0];
  p.output_stride_pos = output_token_ids->strides[1];
  p.accepted = output_accepted_token_num->data;
  p.accepted_dtype = output_accepted_token_num->dtype;
  p.emitted = output_emitted_draft_token_num->data;
  p.emitted_dtype = output_emitted_draft_token_num->dtype;
  p.rng = call.rng;
  if (batch == 0)
    return IGNIS_OK;
  return target.backend->speculative(&p, target.device.id, stream);
}

/* ---- top-k selection ------------------------------------------------------------------------------- */
ignis_status ignis_top_k(const ignis_tensor *input, int64_t k, int sorted, ignis_tensor *values,
                         ignis_tensor *indices, void *stream) {
  const char *fn = "ignis_top_k";
  ignis_clear_error();
  IGNIS_TRY(check_rows(fn, "input", input, MAX_VOCAB));
  const int64_t rows = input->shape[0], vocab = input->shape[1];
  if (k < 0 || k > vocab)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: k=%" PRId64 " but it must be in [0, vocab=%" PRId64 "]", fn, k, vocab);
  if (!values)
    return invalid(fn, "values is NULL");
  if (!indices)
    return invalid(fn, "indices is NULL");
  IGNIS_TRY(ignis_check_tensor(fn, "values", values, 2, 2));
  IGNIS_TRY(ignis_check_same_dtype(fn, "values", values, "input", input));
  IGNIS_TRY(ignis_check_dim(fn, "values", values, 0, rows, "input.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "values", values, 1, k, "k"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "values", values));
  IGNIS_TRY(ignis_check_tensor(fn, "indices", indices, 2, 2));
  IGNIS_TRY(ignis_check_index_dtype(fn, "indices", indices));
  IGNIS_TRY(ignis_check_dim(fn, "indices", indices, 0, rows, "input.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, "indices", indices, 1, k, "k"));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "indices", indices));
  IGNIS_TRY(ignis_check_disjoint(fn, "values", values, "input", input));
  IGNIS_TRY(ignis_check_disjoint(fn, "indices", indices, "input", input));
  IGNIS_TRY(ignis_check_disjoint(fn, "indices", indices, "values", values));
  const ignis_tensor *tensors[] = {input, values, indices};
  const char *names[] = {"input", "values", "indices"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 3, &target));

  ignis_top_k_params p = {0};
  p.num_rows = rows;
  p.vocab_size = vocab;
  p.k = k;
  p.sorted = sorted != 0;
  p.dtype = input->dtype;
  p.input = input->data;
  p.input_row_stride = input->strides[0];
  p.values = values->data;
  p.values_row_stride = values->strides[0];
  p.indices = indices->data;
  p.indices_dtype = indices->dtype;
  p.indices_row_stride = indices->strides[0];
  if (rows == 0 || k == 0)
    return IGNIS_OK;
  return target.backend->top_k(&p, target.device.id, stream);
}
