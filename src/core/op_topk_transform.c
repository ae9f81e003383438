/* Front end of the fused top-k transforms (include/ignis/topk.h): validate the descriptors and
 * scalars, naming the parameter at fault, resolve FlashInfer's defaults (the page-table start falls
 * back to row_starts when page_size is 1), fill the flat params struct (core/params.h) and hand it
 * to the backend where the tensors live. Nothing is written on an error. The per-row values
 * (lengths, starts, batch indices) live in the op's memory and are not read here: the backends
 * clamp them (the header says how). */
#include <inttypes.h>

#include "core/backend.h"
#include "core/validate.h"
#include "ignis/topk.h"

#define MAX_LEN ((int64_t)INT32_MAX) /* local indices and slots are i32 */
#define MAX_PAGE_SIZE ((int64_t)1 << 30)

static ignis_status check_i32(const char *fn, const char *name, const ignis_tensor *t) {
  if (t->dtype != IGNIS_I32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be i32", fn, name,
                           ignis_dtype_name(t->dtype));
  return IGNIS_OK;
}

/* A contiguous i32 [rows] vector. */
static ignis_status check_row_vector(const char *fn, const char *name, const ignis_tensor *t, int64_t rows) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 1, 1));
  IGNIS_TRY(check_i32(fn, name, t));
  return ignis_check_vector(fn, name, t, rows);
}

/* An i32 [rows, k] output with a contiguous last dimension. */
static ignis_status check_output(const char *fn, const char *name, const ignis_tensor *t, int64_t rows,
                                 int64_t k) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 2, 2));
  IGNIS_TRY(check_i32(fn, name, t));
  IGNIS_TRY(ignis_check_dim(fn, name, t, 0, rows, "input.shape[0]"));
  IGNIS_TRY(ignis_check_dim(fn, name, t, 1, k, "k"));
  return ignis_check_last_dim_contiguous(fn, name, t);
}

/* Everything either transform takes; the page-table fields are NULL / 1 for the ragged one. */
typedef struct transform_args {
  const char *fn;
  ignis_topk_transform_kind kind;
  const ignis_tensor *input, *lengths, *row_starts, *offsets;
  const ignis_tensor *page_table, *row_to_batch, *page_table_row_starts;
  int64_t k, page_size;
  ignis_topk_tie_break tie_break;
  ignis_tensor *out, *raw_out;
  void *stream;
} transform_args;

static ignis_status check_page_table(const transform_args *a, int64_t rows) {
  const char *fn = a->fn;
  IGNIS_TRY(ignis_check_tensor(fn, "src_page_table", a->page_table, 2, 2));
  IGNIS_TRY(check_i32(fn, "src_page_table", a->page_table));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "src_page_table", a->page_table));
  if (a->row_to_batch)
    IGNIS_TRY(check_row_vector(fn, "row_to_batch", a->row_to_batch, rows));
  else if (a->page_table->shape[0] != rows)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: src_page_table.shape[0]=%" PRId64 " but without row_to_batch it must be "
                           "input.shape[0]=%" PRId64,
                           fn, a->page_table->shape[0], rows);
  if (a->page_size < 1 || a->page_size > MAX_PAGE_SIZE || (a->page_size & (a->page_size - 1)) != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: page_size=%" PRId64 " but it must be a power of two in [1, 2^30]", fn,
                           a->page_size);
  if (a->page_size > 1 && a->row_starts && !a->page_table_row_starts)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: page_table_row_starts is NULL but it is required with page_size=%" PRId64
                           " > 1 and row_starts (the two starts are in different units)",
                           fn, a->page_size);
  if (a->page_table_row_starts)
    IGNIS_TRY(check_row_vector(fn, "page_table_row_starts", a->page_table_row_starts, rows));
  return IGNIS_OK;
}

static ignis_status check_disjoint_from_inputs(const transform_args *a, const char *name,
                                               const ignis_tensor *t) {
  const ignis_tensor *inputs[] = {a->input,      a->lengths,      a->row_starts,           a->offsets,
                                  a->page_table, a->row_to_batch, a->page_table_row_starts};
  const char *names[] = {"input",          "lengths",      "row_starts",           "offsets",
                         "src_page_table", "row_to_batch", "page_table_row_starts"};
  for (int i = 0; i < 7; ++i)
    if (inputs[i])
      IGNIS_TRY(ignis_check_disjoint(a->fn, name, t, names[i], inputs[i]));
  return IGNIS_OK;
}

static ignis_status run_transform(const transform_args *a) {
  const char *fn = a->fn;
  ignis_clear_error();
  IGNIS_TRY(ignis_check_tensor(fn, "input", a->input, 2, 2));
  IGNIS_TRY(ignis_check_float_dtype(fn, "input", a->input));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "input", a->input));
  const int64_t rows = a->input->shape[0], max_len = a->input->shape[1];
  if (max_len > MAX_LEN)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: input.shape[1]=%" PRId64 " exceeds the longest row %" PRId64, fn, max_len,
                           MAX_LEN);
  if (a->k < 1 || a->k > MAX_LEN)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: k=%" PRId64 " but it must be in [1, %" PRId64 "]", fn, a->k, MAX_LEN);
  if (a->tie_break != IGNIS_TOPK_TIE_BREAK_NONE && a->tie_break != IGNIS_TOPK_TIE_BREAK_SMALL &&
      a->tie_break != IGNIS_TOPK_TIE_BREAK_LARGE)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: tie_break=%d but it must be IGNIS_TOPK_TIE_BREAK_NONE (0), _SMALL (1) or "
                           "_LARGE (2)",
                           fn, (int)a->tie_break);
  IGNIS_TRY(check_row_vector(fn, "lengths", a->lengths, rows));
  if (a->row_starts)
    IGNIS_TRY(check_row_vector(fn, "row_starts", a->row_starts, rows));
  if (a->kind == IGNIS_TOPK_TRANSFORM_RAGGED)
    IGNIS_TRY(check_row_vector(fn, "offsets", a->offsets, rows));
  else
    IGNIS_TRY(check_page_table(a, rows));
  IGNIS_TRY(check_output(fn, "out", a->out, rows, a->k));
  if (a->raw_out)
    IGNIS_TRY(check_output(fn, "out_raw_indices", a->raw_out, rows, a->k));
  IGNIS_TRY(check_disjoint_from_inputs(a, "out", a->out));
  if (a->raw_out) {
    IGNIS_TRY(check_disjoint_from_inputs(a, "out_raw_indices", a->raw_out));
    IGNIS_TRY(ignis_check_disjoint(fn, "out_raw_indices", a->raw_out, "out", a->out));
  }
  const ignis_tensor *tensors[] = {a->input,
                                   a->lengths,
                                   a->row_starts,
                                   a->offsets,
                                   a->page_table,
                                   a->row_to_batch,
                                   a->page_table_row_starts,
                                   a->out,
                                   a->raw_out};
  const char *names[] = {"input",
                         "lengths",
                         "row_starts",
                         "offsets",
                         "src_page_table",
                         "row_to_batch",
                         "page_table_row_starts",
                         "out",
                         "out_raw_indices"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 9, &target));

  ignis_topk_transform_params p = {0};
  p.kind = a->kind;
  p.num_rows = rows;
  p.max_len = max_len;
  p.k = a->k;
  p.prefer_large = a->tie_break == IGNIS_TOPK_TIE_BREAK_LARGE;
  p.dtype = a->input->dtype;
  p.input = a->input->data;
  p.input_row_stride = a->input->strides[0];
  p.lengths = a->lengths->data;
  p.row_starts = a->row_starts ? a->row_starts->data : NULL;
  p.offsets = a->offsets ? a->offsets->data : NULL;
  p.page_size = 1;
  if (a->kind == IGNIS_TOPK_TRANSFORM_PAGE_TABLE) {
    p.page_table = a->page_table->data;
    p.page_table_rows = a->page_table->shape[0];
    p.page_table_width = a->page_table->shape[1];
    p.page_table_row_stride = a->page_table->strides[0];
    p.row_to_batch = a->row_to_batch ? a->row_to_batch->data : NULL;
    p.page_table_row_starts = a->page_table_row_starts ? a->page_table_row_starts->data
                              : a->page_size == 1      ? p.row_starts
                                                       : NULL;
    p.page_size = a->page_size;
    while (((int64_t)1 << p.page_shift) < a->page_size)
      ++p.page_shift;
  }
  p.out = a->out->data;
  p.out_row_stride = a->out->strides[0];
  p.raw_out = a->raw_out ? a->raw_out->data : NULL;
  p.raw_out_row_stride = a->raw_out ? a->raw_out->strides[0] : 0;
  if (rows == 0)
    return IGNIS_OK;
  return target.backend->topk_transform(&p, target.device.id, a->stream);
}

ignis_status ignis_top_k_page_table_transform(const ignis_tensor *input, const ignis_tensor *src_page_table,
                                              const ignis_tensor *lengths, int64_t k,
                                              const ignis_tensor *row_to_batch,
                                              const ignis_tensor *row_starts,
                                              const ignis_tensor *page_table_row_starts, int64_t page_size,
                                              ignis_topk_tie_break tie_break, ignis_tensor *out,
                                              ignis_tensor *out_raw_indices, void *stream) {
  transform_args a = {0};
  a.fn = "ignis_top_k_page_table_transform";
  a.kind = IGNIS_TOPK_TRANSFORM_PAGE_TABLE;
  a.input = input;
  a.page_table = src_page_table;
  a.lengths = lengths;
  a.k = k;
  a.row_to_batch = row_to_batch;
  a.row_starts = row_starts;
  a.page_table_row_starts = page_table_row_starts;
  a.page_size = page_size;
  a.tie_break = tie_break;
  a.out = out;
  a.raw_out = out_raw_indices;
  a.stream = stream;
  return run_transform(&a);
}

ignis_status ignis_top_k_ragged_transform(const ignis_tensor *input, const ignis_tensor *offsets,
                                          const ignis_tensor *lengths, int64_t k,
                                          const ignis_tensor *row_starts, ignis_topk_tie_break tie_break,
                                          ignis_tensor *out, void *stream) {
  transform_args a = {0};
  a.fn = "ignis_top_k_ragged_transform";
  a.kind = IGNIS_TOPK_TRANSFORM_RAGGED;
  a.input = input;
  a.offsets = offsets;
  a.lengths = lengths;
  a.k = k;
  a.row_starts = row_starts;
  a.page_size = 1;
  a.tie_break = tie_break;
  a.out = out;
  a.stream = stream;
  return run_transform(&a);
}
