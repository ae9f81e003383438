/* Python bindings of the sampling ops (include/ignis/sampling.h) and the fused top-k transforms
 * (include/ignis/topk.h), one per C function and under its name, with the argument helpers of _ext.h
 * (op_call, parse_*), whose conventions they follow: the sampling calls take their input and samples first
 * and the rest by name (sampling_spec), the short ones positionally with the stream last; tensors through
 * DLPack, None for an absent optional tensor. A seed or offset is an int (a value) or a tensor (read by the
 * kernel). ext_sampling_methods is the method table the module adds. */
#include "_ext.h"

/* The tensors of one call, optional ones skipped when None; key -> slot in the op_call. */
typedef struct {
  PyObject *objs[MAX_TENSORS];
  const char *names[MAX_TENSORS];
  int slot[MAX_TENSORS];
  int count;
  unsigned writable;
} sampling_tensors;

static void st_add(sampling_tensors *l, int key, PyObject *obj, const char *name, int writable) {
  if (obj == Py_None) {
    l->slot[key] = -1;
    return;
  }
  l->slot[key] = l->count;
  l->objs[l->count] = obj;
  l->names[l->count] = name;
  if (writable)
    l->writable |= 1u << l->count;
  l->count++;
}

static ignis_tensor *st_get(op_call *c, const sampling_tensors *l, int key) {
  return l->slot[key] < 0 ? NULL : &c->tensors[l->slot[key]];
}

/* seed / offset: an int is a value (taken modulo 2^64), anything else a tensor. */
static int parse_rng_arg(const char *fn, const char *name, PyObject *arg, uint64_t *value,
                         PyObject **tensor) {
  *value = 0;
  *tensor = Py_None;
  if (arg == Py_None)
    return 0;
  if (PyLong_Check(arg)) {
    *value = (uint64_t)PyLong_AsUnsignedLongLongMask(arg);
    if (PyErr_Occurred())
      return raise_type("%s: %s must be an int or a tensor", fn, name);
    return 0;
  }
  *tensor = arg;
  return 0;
}

/* The arguments of the sampling bindings, by name (sampling.py passes input and samples first);
 * a threshold's value is used where its array (one value per row) is None. */
typedef struct {
  PyObject *input, *samples, *indices, *top_k_arr, *top_p_arr, *min_p_arr, *seed, *offset, *workspace, *stream;
  int64_t top_k;
  double top_p, min_p;
  ignis_filter_apply_order filter_apply_order;
} sampling_args;

static arg_spec sampling_spec[] = {
    ARG(sampling_args, input, ARG_REQUIRED), ARG(sampling_args, samples, ARG_REQUIRED),
    ARG(sampling_args, indices, ARG_OBJECT), ARG(sampling_args, top_k_arr, ARG_OBJECT),
    ARG(sampling_args, top_k, ARG_INT64),    ARG(sampling_args, top_p_arr, ARG_OBJECT),
    ARG(sampling_args, top_p, ARG_DOUBLE),   ARG(sampling_args, min_p_arr, ARG_OBJECT),
    ARG(sampling_args, min_p, ARG_DOUBLE),   ARG(sampling_args, filter_apply_order, ARG_ENUM),
    ARG(sampling_args, seed, ARG_OBJECT),    ARG(sampling_args, offset, ARG_OBJECT),
    ARG(sampling_args, workspace, ARG_OBJECT), ARG(sampling_args, stream, ARG_OBJECT)};
static arg_table sampling_table = ARG_TABLE(sampling_spec);

/* Which sampling call a binding makes (the bindings are one per C function; this picks the call). */
typedef enum {
  FROM_PROBS,
  FROM_LOGITS,
  TOP_P_FROM_PROBS,
  TOP_K_FROM_PROBS,
  MIN_P_FROM_PROBS,
  TOP_K_TOP_P_FROM_PROBS,
  TOP_K_TOP_P_FROM_LOGITS
} sampling_call;

enum { S_INPUT, S_SAMPLES, S_INDICES, S_TOP_K, S_TOP_P, S_MIN_P, S_SEED, S_OFFSET, S_WORKSPACE };

static PyObject *run_sampling(const char *fn, sampling_call call, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
  /* the C defaults: no filtering (top_k 0, top_p 1, min_p 0); parse_args sets the objects */
  sampling_args a = {.top_k = 0, .top_p = 1.0, .min_p = 0.0, .filter_apply_order = IGNIS_FILTER_TOP_K_FIRST};
  uint64_t seed, offset;
  PyObject *seed_obj, *offset_obj;
  if (parse_args(fn, &sampling_table, args, nargs, kwnames, &a) < 0 ||
      parse_rng_arg(fn, "seed", a.seed, &seed, &seed_obj) < 0 ||
      parse_rng_arg(fn, "offset", a.offset, &offset, &offset_obj) < 0)
    return NULL;
  int logits = call == FROM_LOGITS || call == TOP_K_TOP_P_FROM_LOGITS;
  sampling_tensors l = {{0}, {0}, {0}, 0, 0};
  st_add(&l, S_INPUT, a.input, logits ? "logits" : "probs", 0);
  st_add(&l, S_SAMPLES, a.samples, "samples", 1);
  st_add(&l, S_INDICES, a.indices, "indices", 0);
  st_add(&l, S_TOP_K, a.top_k_arr, "top_k_arr", 0);
  st_add(&l, S_TOP_P, a.top_p_arr, "top_p_arr", 0);
  st_add(&l, S_MIN_P, a.min_p_arr, "min_p_arr", 0);
  st_add(&l, S_SEED, seed_obj, "seed", 0);
  st_add(&l, S_OFFSET, offset_obj, "offset", 0);
  st_add(&l, S_WORKSPACE, a.workspace, "workspace", 1);
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, l.writable, a.stream) < 0)
    return NULL;
  ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
  const ignis_tensor *ws = st_get(&c, &l, S_WORKSPACE);
  if (ws && workspace_of(fn, ws, &o.workspace, &o.workspace_bytes) < 0) {
    op_call_release(&c);
    return NULL;
  }
  o.indices = st_get(&c, &l, S_INDICES);
  o.seed = seed;
  o.offset = offset;
  o.seed_tensor = st_get(&c, &l, S_SEED);
  o.offset_tensor = st_get(&c, &l, S_OFFSET);
  const ignis_tensor *in = st_get(&c, &l, S_INPUT), *karr = st_get(&c, &l, S_TOP_K);
  const ignis_tensor *parr = st_get(&c, &l, S_TOP_P), *marr = st_get(&c, &l, S_MIN_P);
  ignis_tensor *samples = st_get(&c, &l, S_SAMPLES);
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS switch (call) {
  case FROM_PROBS:
    status = ignis_sampling_from_probs(in, samples, &o, c.stream);
    break;
  case FROM_LOGITS:
    status = ignis_sampling_from_logits(in, samples, &o, c.stream);
    break;
  case TOP_P_FROM_PROBS:
    status = ignis_top_p_sampling_from_probs(in, parr, a.top_p, samples, &o, c.stream);
    break;
  case TOP_K_FROM_PROBS:
    status = ignis_top_k_sampling_from_probs(in, karr, a.top_k, samples, &o, c.stream);
    break;
  case MIN_P_FROM_PROBS:
    status = ignis_min_p_sampling_from_probs(in, marr, a.min_p, samples, &o, c.stream);
    break;
  case TOP_K_TOP_P_FROM_PROBS:
    status = ignis_top_k_top_p_sampling_from_probs(in, karr, a.top_k, parr, a.top_p, a.filter_apply_order,
                                                   samples, &o, c.stream);
    break;
  default:
    status = ignis_top_k_top_p_sampling_from_logits(in, karr, a.top_k, parr, a.top_p, a.filter_apply_order,
                                                    samples, &o, c.stream);
    break;
  }
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (batch, vocab_size) -> bytes of the multi-block path's workspace */
static PyObject *ext_sampling_workspace_size(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.sampling_workspace_size";
  static const char *const names[] = {"batch", "vocab_size"};
  int64_t v[2];
  if (check_nargs(fn, nargs, 2) < 0 || parse_int64_args(fn, args, names, 2, v) < 0)
    return NULL;
  size_t bytes = 0;
  return bytes_or_raise(ignis_sampling_workspace_size(v[0], v[1], &bytes), &bytes);
}

#define SAMPLING_BINDING(name, call)                                                                         \
  static PyObject *ext_##name(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {  \
    return run_sampling("ignis." #name, call, args, nargs, kwnames);                                         \
  }
SAMPLING_BINDING(sampling_from_probs, FROM_PROBS)
SAMPLING_BINDING(sampling_from_logits, FROM_LOGITS)
SAMPLING_BINDING(top_p_sampling_from_probs, TOP_P_FROM_PROBS)
SAMPLING_BINDING(top_k_sampling_from_probs, TOP_K_FROM_PROBS)
SAMPLING_BINDING(min_p_sampling_from_probs, MIN_P_FROM_PROBS)
SAMPLING_BINDING(top_k_top_p_sampling_from_probs, TOP_K_TOP_P_FROM_PROBS)
SAMPLING_BINDING(top_k_top_p_sampling_from_logits, TOP_K_TOP_P_FROM_LOGITS)

/* Which renormalizing or masking call a binding makes. */
typedef enum { TOP_P_RENORM, TOP_K_RENORM, TOP_K_MASK } transform_call;

/* (input, arr_or_None, value, out, stream): value is a number (top_k truncated to an int). */
static PyObject *run_transform(const char *fn, transform_call call, PyObject *const *args, Py_ssize_t nargs) {
  double value;
  if (check_nargs(fn, nargs, 5) < 0 ||
      parse_double(fn, call == TOP_P_RENORM ? "top_p" : "top_k", args[2], &value) < 0)
    return NULL;
  sampling_tensors l = {{0}, {0}, {0}, 0, 0};
  st_add(&l, 0, args[0], call == TOP_K_MASK ? "logits" : "probs", 0);
  st_add(&l, 1, args[3], call == TOP_K_MASK ? "masked_logits" : "renorm_probs", 1);
  st_add(&l, 2, args[1], call == TOP_P_RENORM ? "top_p_arr" : "top_k_arr", 0);
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, l.writable, args[4]) < 0)
    return NULL;
  const ignis_tensor *in = st_get(&c, &l, 0), *arr = st_get(&c, &l, 2);
  ignis_tensor *out = st_get(&c, &l, 1);
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS switch (call) {
  case TOP_P_RENORM:
    status = ignis_top_p_renorm_probs(in, arr, value, out, c.stream);
    break;
  case TOP_K_RENORM:
    status = ignis_top_k_renorm_probs(in, arr, (int64_t)value, out, c.stream);
    break;
  default:
    status = ignis_top_k_mask_logits(in, arr, (int64_t)value, out, c.stream);
    break;
  }
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

#define TRANSFORM_BINDING(name, call)                                                                        \
  static PyObject *ext_##name(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {                     \
    return run_transform("ignis." #name, call, args, nargs);                                                 \
  }
TRANSFORM_BINDING(top_p_renorm_probs, TOP_P_RENORM)
TRANSFORM_BINDING(top_k_renorm_probs, TOP_K_RENORM)
TRANSFORM_BINDING(top_k_mask_logits, TOP_K_MASK)

/* (logits, temperature_arr_or_None, temperature_val, probs, stream) */
static PyObject *ext_softmax(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.softmax";
  double value;
  if (check_nargs(fn, nargs, 5) < 0 || parse_double(fn, "temperature", args[2], &value) < 0)
    return NULL;
  sampling_tensors l = {{0}, {0}, {0}, 0, 0};
  st_add(&l, 0, args[0], "logits", 0);
  st_add(&l, 1, args[3], "probs", 1);
  st_add(&l, 2, args[1], "temperature_arr", 0);
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, l.writable, args[4]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_softmax(st_get(&c, &l, 0), st_get(&c, &l, 2), value, st_get(&c, &l, 1), c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (draft_probs, draft_token_ids, target_probs, output_token_ids, accepted, emitted, seed, offset,
 *  stream) */
static PyObject *ext_chain_speculative_sampling(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.chain_speculative_sampling";
  uint64_t seed, offset;
  PyObject *seed_obj, *offset_obj;
  if (check_nargs(fn, nargs, 9) < 0 || parse_rng_arg(fn, "seed", args[6], &seed, &seed_obj) < 0 ||
      parse_rng_arg(fn, "offset", args[7], &offset, &offset_obj) < 0)
    return NULL;
  sampling_tensors l = {{0}, {0}, {0}, 0, 0};
  st_add(&l, 0, args[0], "draft_probs", 0);
  st_add(&l, 1, args[1], "draft_token_ids", 0);
  st_add(&l, 2, args[2], "target_probs", 0);
  st_add(&l, 3, args[3], "output_token_ids", 1);
  st_add(&l, 4, args[4], "output_accepted_token_num", 1);
  st_add(&l, 5, args[5], "output_emitted_draft_token_num", 1);
  st_add(&l, 6, seed_obj, "seed", 0);
  st_add(&l, 7, offset_obj, "offset", 0);
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, l.writable, args[8]) < 0)
    return NULL;
  ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
  o.seed = seed;
  o.offset = offset;
  o.seed_tensor = st_get(&c, &l, 6);
  o.offset_tensor = st_get(&c, &l, 7);
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_chain_speculative_sampling(st_get(&c, &l, 0), st_get(&c, &l, 1), st_get(&c, &l, 2),
                                       st_get(&c, &l, 3), st_get(&c, &l, 4), st_get(&c, &l, 5), &o, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (input, k, sorted, values, indices, stream) */
static PyObject *ext_top_k(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.top_k";
  static const char *const names[] = {"input", "values", "indices"};
  int64_t k, sorted;
  if (check_nargs(fn, nargs, 6) < 0 || parse_int64(fn, "k", args[1], &k) < 0 ||
      parse_int64(fn, "sorted", args[2], &sorted) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[3], args[4]};
  op_call c;
  if (op_call_begin(&c, fn, objs, names, 3, 1u << 1 | 1u << 2, args[5]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_top_k(&c.tensors[0], k, (int)sorted, &c.tensors[1], &c.tensors[2], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (input, src_page_table, lengths, k, row_to_batch, row_starts, page_table_row_starts, page_size,
 *  tie_break, out, out_raw_indices, stream): None for an absent optional tensor. */
static PyObject *ext_top_k_page_table_transform(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.top_k_page_table_transform";
  int64_t k, page_size, tie_break;
  if (check_nargs(fn, nargs, 12) < 0 || parse_int64(fn, "k", args[3], &k) < 0 ||
      parse_int64(fn, "page_size", args[7], &page_size) < 0 ||
      parse_int64(fn, "tie_break", args[8], &tie_break) < 0)
    return NULL;
  sampling_tensors l = {{0}, {0}, {0}, 0, 0};
  st_add(&l, 0, args[0], "input", 0);
  st_add(&l, 1, args[1], "src_page_table", 0);
  st_add(&l, 2, args[2], "lengths", 0);
  st_add(&l, 3, args[4], "row_to_batch", 0);
  st_add(&l, 4, args[5], "row_starts", 0);
  st_add(&l, 5, args[6], "page_table_row_starts", 0);
  st_add(&l, 6, args[9], "out", 1);
  st_add(&l, 7, args[10], "out_raw_indices", 1);
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, l.writable, args[11]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_top_k_page_table_transform(
      st_get(&c, &l, 0), st_get(&c, &l, 1), st_get(&c, &l, 2), k, st_get(&c, &l, 3), st_get(&c, &l, 4),
      st_get(&c, &l, 5), page_size, (ignis_topk_tie_break)tie_break, st_get(&c, &l, 6), st_get(&c, &l, 7),
      c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (input, offsets, lengths, k, row_starts, tie_break, out, stream) */
static PyObject *ext_top_k_ragged_transform(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.top_k_ragged_transform";
  int64_t k, tie_break;
  if (check_nargs(fn, nargs, 8) < 0 || parse_int64(fn, "k", args[3], &k) < 0 ||
      parse_int64(fn, "tie_break", args[5], &tie_break) < 0)
    return NULL;
  sampling_tensors l = {{0}, {0}, {0}, 0, 0};
  st_add(&l, 0, args[0], "input", 0);
  st_add(&l, 1, args[1], "offsets", 0);
  st_add(&l, 2, args[2], "lengths", 0);
  st_add(&l, 3, args[4], "row_starts", 0);
  st_add(&l, 4, args[6], "out", 1);
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, l.writable, args[7]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_top_k_ragged_transform(
      st_get(&c, &l, 0), st_get(&c, &l, 1), st_get(&c, &l, 2), k, st_get(&c, &l, 3),
      (ignis_topk_tie_break)tie_break, st_get(&c, &l, 4), c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

#define SAMPLING_DOC(name) #name "(input, samples, **arguments): ignis_" #name " (sampling_spec)"
#define TRANSFORM_DOC(name) #name "(input, arr, value, out, stream): ignis_" #name
PyMethodDef ext_sampling_methods[] = {
    FASTCALL_KW(sampling_from_probs, SAMPLING_DOC(sampling_from_probs)),
    FASTCALL_KW(sampling_from_logits, SAMPLING_DOC(sampling_from_logits)),
    FASTCALL_KW(top_p_sampling_from_probs, SAMPLING_DOC(top_p_sampling_from_probs)),
    FASTCALL_KW(top_k_sampling_from_probs, SAMPLING_DOC(top_k_sampling_from_probs)),
    FASTCALL_KW(min_p_sampling_from_probs, SAMPLING_DOC(min_p_sampling_from_probs)),
    FASTCALL_KW(top_k_top_p_sampling_from_probs, SAMPLING_DOC(top_k_top_p_sampling_from_probs)),
    FASTCALL_KW(top_k_top_p_sampling_from_logits, SAMPLING_DOC(top_k_top_p_sampling_from_logits)),
    FASTCALL(top_p_renorm_probs, TRANSFORM_DOC(top_p_renorm_probs)),
    FASTCALL(top_k_renorm_probs, TRANSFORM_DOC(top_k_renorm_probs)),
    FASTCALL(top_k_mask_logits, TRANSFORM_DOC(top_k_mask_logits)),
    FASTCALL(softmax, "softmax(logits, temperature_arr, temperature, probs, stream)"),
    FASTCALL(sampling_workspace_size, "sampling_workspace_size(batch, vocab_size)"),
    FASTCALL(
        chain_speculative_sampling,
        "chain_speculative_sampling(draft_probs, draft_token_ids, target_probs, output_token_ids, accepted, "
        "emitted, seed, offset, stream)"),
    FASTCALL(top_k, "top_k(input, k, sorted, values, indices, stream)"),
    FASTCALL(top_k_page_table_transform,
             "top_k_page_table_transform(input, src_page_table, lengths, k, row_to_batch, row_starts, "
             "page_table_row_starts, page_size, tie_break, out, out_raw_indices, stream)"),
    FASTCALL(top_k_ragged_transform,
             "top_k_ragged_transform(input, offsets, lengths, k, row_starts, tie_break, out, stream)"),
    {NULL, NULL, 0, NULL}};
