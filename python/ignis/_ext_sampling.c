/* Python bindings of the sampling ops (include/ignis/sampling.h), with the argument helpers of
 * _ext.h (op_call, parse_*), whose conventions they follow: positional arguments in the order
 * sampling.py passes them, tensors through DLPack, None for an absent optional tensor, the stream
 * last. A seed or offset is an int (a value) or a tensor (read by the kernel).
 * ext_sampling_methods is the method table the module adds. */
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

enum { S_INPUT, S_SAMPLES, S_INDICES, S_TOP_K, S_TOP_P, S_MIN_P, S_SEED, S_OFFSET };

/* (kind, input, samples, indices, top_k_arr, top_k_val, top_p_arr, top_p_val, min_p_arr, min_p_val,
 *  joint, seed, offset, stream); kind: 0 probs, 1 logits, 2 top-p, 3 top-k, 4 min-p,
 *  5 top-k/top-p from probs, 6 top-k/top-p from logits. */
static PyObject *ext_sampling(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.sampling";
  int64_t kind, top_k_val, joint;
  double top_p_val, min_p_val;
  uint64_t seed, offset;
  PyObject *seed_obj, *offset_obj;
  if (check_nargs(fn, nargs, 14) < 0 || parse_int64(fn, "kind", args[0], &kind) < 0 ||
      parse_int64(fn, "top_k", args[5], &top_k_val) < 0 ||
      parse_double(fn, "top_p", args[7], &top_p_val) < 0 ||
      parse_double(fn, "min_p", args[9], &min_p_val) < 0 || parse_int64(fn, "joint", args[10], &joint) < 0 ||
      parse_rng_arg(fn, "seed", args[11], &seed, &seed_obj) < 0 ||
      parse_rng_arg(fn, "offset", args[12], &offset, &offset_obj) < 0)
    return NULL;
  sampling_tensors l = {{0}, {0}, {0}, 0, 0};
  st_add(&l, S_INPUT, args[1], kind == 1 || kind == 6 ? "logits" : "probs", 0);
  st_add(&l, S_SAMPLES, args[2], "samples", 1);
  st_add(&l, S_INDICES, args[3], "indices", 0);
  st_add(&l, S_TOP_K, args[4], "top_k_arr", 0);
  st_add(&l, S_TOP_P, args[6], "top_p_arr", 0);
  st_add(&l, S_MIN_P, args[8], "min_p_arr", 0);
  st_add(&l, S_SEED, seed_obj, "seed", 0);
  st_add(&l, S_OFFSET, offset_obj, "offset", 0);
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, l.writable, args[13]) < 0)
    return NULL;
  ignis_sampling_options o = IGNIS_SAMPLING_OPTIONS_INIT;
  o.indices = st_get(&c, &l, S_INDICES);
  o.seed = seed;
  o.offset = offset;
  o.seed_tensor = st_get(&c, &l, S_SEED);
  o.offset_tensor = st_get(&c, &l, S_OFFSET);
  const ignis_tensor *in = st_get(&c, &l, S_INPUT), *karr = st_get(&c, &l, S_TOP_K);
  const ignis_tensor *parr = st_get(&c, &l, S_TOP_P), *marr = st_get(&c, &l, S_MIN_P);
  ignis_tensor *samples = st_get(&c, &l, S_SAMPLES);
  const ignis_filter_apply_order order = joint ? IGNIS_FILTER_JOINT : IGNIS_FILTER_TOP_K_FIRST;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS switch (kind) {
  case 0:
    status = ignis_sampling_from_probs(in, samples, &o, c.stream);
    break;
  case 1:
    status = ignis_sampling_from_logits(in, samples, &o, c.stream);
    break;
  case 2:
    status = ignis_top_p_sampling_from_probs(in, parr, top_p_val, samples, &o, c.stream);
    break;
  case 3:
    status = ignis_top_k_sampling_from_probs(in, karr, top_k_val, samples, &o, c.stream);
    break;
  case 4:
    status = ignis_min_p_sampling_from_probs(in, marr, min_p_val, samples, &o, c.stream);
    break;
  case 5:
    status = ignis_top_k_top_p_sampling_from_probs(in, karr, top_k_val, parr, top_p_val, order, samples, &o,
                                                   c.stream);
    break;
  default:
    status = ignis_top_k_top_p_sampling_from_logits(in, karr, top_k_val, parr, top_p_val, order, samples, &o,
                                                    c.stream);
    break;
  }
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (kind, input, arr_or_None, value, out, stream); kind: 0 top_p_renorm_probs, 1 top_k_renorm_probs,
 * 2 top_k_mask_logits. */
static PyObject *ext_sampling_transform(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.sampling_transform";
  int64_t kind;
  double value;
  if (check_nargs(fn, nargs, 6) < 0 || parse_int64(fn, "kind", args[0], &kind) < 0 ||
      parse_double(fn, kind == 0 ? "top_p" : "top_k", args[3], &value) < 0)
    return NULL;
  sampling_tensors l = {{0}, {0}, {0}, 0, 0};
  st_add(&l, 0, args[1], kind == 2 ? "logits" : "probs", 0);
  st_add(&l, 1, args[4], kind == 2 ? "masked_logits" : "renorm_probs", 1);
  st_add(&l, 2, args[2], kind == 0 ? "top_p_arr" : "top_k_arr", 0);
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, l.writable, args[5]) < 0)
    return NULL;
  const ignis_tensor *in = st_get(&c, &l, 0), *arr = st_get(&c, &l, 2);
  ignis_tensor *out = st_get(&c, &l, 1);
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS if (kind == 0) status = ignis_top_p_renorm_probs(in, arr, value, out, c.stream);
  else if (kind == 1) status = ignis_top_k_renorm_probs(in, arr, (int64_t)value, out, c.stream);
  else status = ignis_top_k_mask_logits(in, arr, (int64_t)value, out, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

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

PyMethodDef ext_sampling_methods[] = {
    FASTCALL(sampling,
             "sampling(kind, input, samples, indices, top_k_arr, top_k, top_p_arr, top_p, min_p_arr, "
             "min_p, joint, seed, offset, stream)"),
    FASTCALL(sampling_transform, "sampling_transform(kind, input, arr, value, out, stream)"),
    FASTCALL(softmax, "softmax(logits, temperature_arr, temperature, probs, stream)"),
    FASTCALL(chain_speculative_sampling,
             "chain_speculative_sampling(draft_probs, draft_token_ids, "
             "target_probs, output_token_ids, accepted, emitted, seed, offset, "
             "stream)"),
    FASTCALL(top_k, "top_k(input, k, sorted, values, indices, stream)"),
    {NULL, NULL, 0, NULL}};
