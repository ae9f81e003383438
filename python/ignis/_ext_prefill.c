/* Python bindings of prefill attention (include/ignis/prefill.h), with the argument helpers of
 * _ext.h (op_call, attention_args, paged_run_begin, host_i32, ...). prefill.py gives them
 * FlashInfer's names and passes the configs and options by keyword. A prefill plan travels as a
 * capsule, as a decode plan does; trtllm.py runs block-table prefill (prefill_run_block_table) on one.
 * ext_prefill_methods is the method table the module adds. */
#include "_ext.h"

/* (num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, max_qo_len, max_kv_len) -> bytes */
static PyObject *ext_single_prefill_workspace_size(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.single_prefill_workspace_size";
  static const char *const names[] = {"num_qo_heads", "num_kv_heads", "head_dim_qk", "head_dim_vo", "max_qo_len",
                                      "max_kv_len"};
  int64_t v[6];
  if (check_nargs(fn, nargs, 6) < 0 || parse_int64_args(fn, args, names, 6, v) < 0)
    return NULL;
  size_t bytes = 0;
  return bytes_or_raise(ignis_single_prefill_workspace_size(v[0], v[1], v[2], v[3], v[4], v[5], &bytes), &bytes);
}

static arg_spec single_prefill_spec[] = {ARG(attention_args, q, ARG_REQUIRED),
                                         ARG(attention_args, k, ARG_REQUIRED),
                                         ARG(attention_args, v, ARG_REQUIRED),
                                         ARG(attention_args, out, ARG_REQUIRED),
                                         ARG(attention_args, lse, ARG_OBJECT),
                                         ARG(attention_args, workspace, ARG_OBJECT),
                                         ARG(attention_args, custom_mask, ARG_OBJECT),
                                         ARG(attention_args, kv_layout, ARG_ENUM),
                                         ARG(attention_args, mask_mode, ARG_ENUM),
                                         ARG(attention_args, options, ARG_OPTIONS),
                                         ATTENTION_EXTRA_ARGS};
static arg_table single_prefill_args = ARG_TABLE(single_prefill_spec);

static PyObject *ext_single_prefill(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames) {
  static const char *const fn = "ignis.single_prefill_with_kv_cache";
  attention_args a;
  if (parse_attention_args(fn, &single_prefill_args, args, nargs, kwnames, &a) < 0)
    return NULL;
  op_call c;
  kv_pair_slots s;
  void *ws;
  size_t ws_bytes;
  if (kv_pair_call_begin(fn, &a, &c, &s, &ws, &ws_bytes) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_single_prefill(&c.tensors[s.q], &c.tensors[s.k], &c.tensors[s.v], a.kv_layout, a.mask_mode,
                           s.custom_mask >= 0 ? &c.tensors[s.custom_mask] : NULL, &a.options, &a.extras,
                           &c.tensors[s.out], s.lse >= 0 ? &c.tensors[s.lse] : NULL, ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

#define PREFILL_PLAN_CAPSULE "ignis.prefill_plan"

static void prefill_plan_free(void *plan) {
  ignis_prefill_plan_destroy(plan);
}

static const plan_kind prefill_plan_kind = {PREFILL_PLAN_CAPSULE, "prefill plan made by prefill_plan_create",
                                            prefill_plan_free};

static ignis_prefill_plan *prefill_plan_of(const char *fn, PyObject *obj) {
  return plan_capsule_of(fn, obj, &prefill_plan_kind);
}

/* The fields of ignis_prefill_plan_config, by their names in prefill.h. */
static arg_spec prefill_plan_spec[] = {DEVICE_ARGS(ignis_prefill_plan_config, device),
                                       ARG(ignis_prefill_plan_config, kv_kind, ARG_ENUM),
                                       ARG(ignis_prefill_plan_config, kv_layout, ARG_ENUM),
                                       ARG(ignis_prefill_plan_config, num_qo_heads, ARG_INT64),
                                       ARG(ignis_prefill_plan_config, num_kv_heads, ARG_INT64),
                                       ARG(ignis_prefill_plan_config, head_dim_qk, ARG_INT64),
                                       ARG(ignis_prefill_plan_config, head_dim_vo, ARG_INT64),
                                       ARG(ignis_prefill_plan_config, page_size, ARG_INT64),
                                       ARG(ignis_prefill_plan_config, q_dtype, ARG_ENUM),
                                       ARG(ignis_prefill_plan_config, kv_dtype, ARG_ENUM),
                                       ARG(ignis_prefill_plan_config, mask_mode, ARG_ENUM),
                                       ARG(ignis_prefill_plan_config, max_batch_size, ARG_INT64),
                                       ARG(ignis_prefill_plan_config, max_qo_tokens, ARG_INT64),
                                       ARG(ignis_prefill_plan_config, max_kv_len, ARG_INT64),
                                       ARG(ignis_prefill_plan_config, disable_split_kv, ARG_BOOL),
                                       ARG(ignis_prefill_plan_config, fixed_split_size, ARG_INT64),
                                       ARG(ignis_prefill_plan_config, options, ARG_OPTIONS),
                                       ARG(ignis_prefill_plan_config, o_dtype, ARG_ENUM)};
static arg_table prefill_plan_args = ARG_TABLE(prefill_plan_spec);

/* (**config) -> plan capsule; fields not given keep IGNIS_PREFILL_PLAN_CONFIG_INIT's values. */
static PyObject *ext_prefill_plan_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                         PyObject *kwnames) {
  static const char *const fn = "ignis.BatchPrefillWrapper.plan";
  ignis_prefill_plan_config config = IGNIS_PREFILL_PLAN_CONFIG_INIT;
  if (check_nargs(fn, nargs, 0) < 0 ||
      parse_args(fn, &prefill_plan_args, args, 0, kwnames, &config) < 0)
    return NULL;
  ignis_prefill_plan *plan = NULL;
  ignis_status status = ignis_prefill_plan_create(&config, &plan);
  return plan_capsule_new(&prefill_plan_kind, status, plan);
}

/* (plan) -> the device workspace bytes the plan needs (ignis_prefill_workspace_size; 0 on the CPU). */
static PyObject *ext_prefill_workspace_size(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.BatchPrefillWithPagedKVCacheWrapper.workspace_size";
  if (check_nargs(fn, nargs, 1) < 0)
    return NULL;
  ignis_prefill_plan *plan = prefill_plan_of(fn, args[0]);
  if (!plan)
    return NULL;
  size_t bytes = 0;
  return bytes_or_raise(ignis_prefill_workspace_size(plan, &bytes), &bytes);
}

/* (plan, qo_indptr, kv_indptr, kv_last_page_len_or_None, workspace_or_None, stream): the index
 * arrays must be 1-D contiguous int32 host arrays (prefill.py converts them). */
static PyObject *ext_prefill_plan_update(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.BatchPrefillWrapper.plan";
  static const char *const array_names[] = {"qo_indptr", "kv_indptr", "kv_last_page_len"};
  if (check_nargs(fn, nargs, 6) < 0)
    return NULL;
  ignis_prefill_plan *plan = prefill_plan_of(fn, args[0]);
  if (!plan)
    return NULL;
  host_i32 arrays[3];
  int taken = 0;
  PyObject *result = NULL;
  for (; taken < 3; ++taken) {
    if (taken == 2 && args[3] == Py_None)
      break;
    if (!read_host_i32(args[1 + taken], 0, &arrays[taken])) {
      raise_type("%s: %s must be a 1-D contiguous int32 host array", fn, array_names[taken]);
      goto done;
    }
  }
  int64_t batch = arrays[0].len - 1;
  if (batch < 0 || arrays[1].len != batch + 1 || (taken == 3 && arrays[2].len != batch)) {
    PyErr_Format(INVALID_ARGUMENT_ERROR,
                 "%s: qo_indptr has %lld entries, kv_indptr %lld%s: they must describe the same batch", fn,
                 (long long)arrays[0].len, (long long)arrays[1].len, taken == 3 ? " and kv_last_page_len more" : "");
    goto done;
  }
  void *ws, *stream;
  size_t ws_bytes;
  op_call c;
  if (plan_update_workspace(fn, args[4], args[5], &c, &ws, &ws_bytes, &stream) < 0)
    goto done;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_prefill_plan_update(plan, arrays[0].data, arrays[1].data,
                                                            taken == 3 ? arrays[2].data : NULL, batch, ws, ws_bytes,
                                                            stream);
  Py_END_ALLOW_THREADS if (c.count) op_call_release(&c);
  if (status != IGNIS_OK)
    raise_status(status, ignis_last_error());
  else
    result = PyLong_FromLongLong(batch);
done:
  while (taken-- > 0)
    host_i32_release(&arrays[taken]);
  return result;
}

/* The custom mask of a paged run, read in a second op_call (the run's other tensors fill the first)
 * on the stream the first one chose; none (side->count 0, *mask_t NULL) when mask is None. */
static int prefill_mask_call(const char *fn, PyObject *mask, void *stream, op_call *side,
                             const ignis_tensor **mask_t) {
  static const char *const name[] = {"custom_mask"};
  side->count = 0;
  *mask_t = NULL;
  if (mask == Py_None)
    return 0;
  PyObject *stream_obj = stream ? PyLong_FromVoidPtr(stream) : Py_None;
  if (!stream_obj)
    return -1;
  int r = op_call_begin(side, fn, &mask, name, 1, 0, stream_obj);
  if (stream)
    Py_DECREF(stream_obj);
  if (r < 0) {
    side->count = 0;
    return -1;
  }
  *mask_t = &side->tensors[0];
  return 0;
}

static arg_spec prefill_ragged_run_spec[] = {ARG(attention_args, plan, ARG_REQUIRED),
                                             ARG(attention_args, q, ARG_REQUIRED),
                                             ARG(attention_args, k, ARG_REQUIRED),
                                             ARG(attention_args, v, ARG_REQUIRED),
                                             ARG(attention_args, out, ARG_REQUIRED),
                                             ARG(attention_args, custom_mask, ARG_OBJECT),
                                             ARG(attention_args, lse, ARG_OBJECT),
                                             ARG(attention_args, workspace, ARG_OBJECT),
                                             ATTENTION_EXTRA_ARGS};
static arg_table prefill_ragged_run_args = ARG_TABLE(prefill_ragged_run_spec);

static PyObject *ext_prefill_ragged_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames) {
  static const char *const fn = "ignis.BatchPrefillWithRaggedKVCacheWrapper.run";
  attention_args a;
  if (parse_attention_args(fn, &prefill_ragged_run_args, args, nargs, kwnames, &a) < 0)
    return NULL;
  ignis_prefill_plan *plan = prefill_plan_of(fn, a.plan);
  if (!plan)
    return NULL;
  op_call c;
  kv_pair_slots s;
  void *ws;
  size_t ws_bytes;
  if (kv_pair_call_begin(fn, &a, &c, &s, &ws, &ws_bytes) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_prefill_ragged_run(
      plan, &c.tensors[s.q], &c.tensors[s.k], &c.tensors[s.v],
      s.custom_mask >= 0 ? &c.tensors[s.custom_mask] : NULL, &a.extras, &c.tensors[s.out],
      s.lse >= 0 ? &c.tensors[s.lse] : NULL, ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* k_cache is the combined [pages, 2, ...] cache when v_cache is None. */
static arg_spec prefill_paged_run_spec[] = {ARG(attention_args, plan, ARG_REQUIRED),
                                            ARG(attention_args, q, ARG_REQUIRED),
                                            ARG_NAMED("k_cache", attention_args, k, ARG_REQUIRED),
                                            ARG_NAMED("v_cache", attention_args, v, ARG_OBJECT),
                                            ARG(attention_args, out, ARG_REQUIRED),
                                            ARG(attention_args, kv_indptr, ARG_REQUIRED),
                                            ARG(attention_args, kv_indices, ARG_REQUIRED),
                                            ARG(attention_args, kv_last_page_len, ARG_REQUIRED),
                                            ARG(attention_args, custom_mask, ARG_OBJECT),
                                            ARG(attention_args, lse, ARG_OBJECT),
                                            ARG(attention_args, workspace, ARG_OBJECT),
                                            ARG(attention_args, kv_layout, ARG_ENUM),
                                            ATTENTION_EXTRA_ARGS};
static arg_table prefill_paged_run_args = ARG_TABLE(prefill_paged_run_spec);

static PyObject *ext_prefill_paged_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                       PyObject *kwnames) {
  static const char *const fn = "ignis.BatchPrefillWithPagedKVCacheWrapper.run";
  attention_args a;
  if (parse_attention_args(fn, &prefill_paged_run_args, args, nargs, kwnames, &a) < 0)
    return NULL;
  ignis_prefill_plan *plan = prefill_plan_of(fn, a.plan);
  if (!plan)
    return NULL;
  op_call c, side;
  paged_run_slots s;
  ignis_paged_kv_cache cache;
  void *ws;
  size_t ws_bytes;
  const ignis_tensor *mask;
  if (paged_run_begin(fn, &a, &c, &s, &cache, &ws, &ws_bytes) < 0)
    return NULL;
  if (prefill_mask_call(fn, a.custom_mask, c.stream, &side, &mask) < 0) {
    op_call_release(&c);
    return NULL;
  }
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_prefill_paged_run(plan, &c.tensors[s.q], &cache, mask, &a.extras, &c.tensors[s.out],
                              s.lse >= 0 ? &c.tensors[s.lse] : NULL, ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS if (side.count) op_call_release(&side);
  return op_call_finish(&c, status);
}

/* The block-table run (ignis_prefill_run_block_table): k_cache is the combined [pages, 2, ...] cache
 * when v_cache is None. FlashInfer's cum_seq_lens_q and max_q_len ride in attention_args' kv_indptr
 * and max_seq_len fields (the args struct is shared by every attention binding). */
static arg_spec prefill_block_table_spec[] = {ARG(attention_args, plan, ARG_REQUIRED),
                                              ARG(attention_args, q, ARG_REQUIRED),
                                              ARG_NAMED("k_cache", attention_args, k, ARG_REQUIRED),
                                              ARG_NAMED("v_cache", attention_args, v, ARG_OBJECT),
                                              ARG(attention_args, out, ARG_REQUIRED),
                                              ARG(attention_args, block_tables, ARG_REQUIRED),
                                              ARG(attention_args, seq_lens, ARG_REQUIRED),
                                              ARG_NAMED("cum_seq_lens_q", attention_args, kv_indptr, ARG_REQUIRED),
                                              ARG_NAMED("max_q_len", attention_args, max_seq_len, ARG_INT64),
                                              ARG(attention_args, lse, ARG_OBJECT),
                                              ARG(attention_args, workspace, ARG_OBJECT),
                                              ARG(attention_args, kv_layout, ARG_ENUM),
                                              ATTENTION_EXTRA_ARGS};
static arg_table prefill_block_table_args = ARG_TABLE(prefill_block_table_spec);

static PyObject *ext_prefill_run_block_table(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                             PyObject *kwnames) {
  static const char *const fn = "ignis.prefill_run_block_table";
  attention_args a;
  if (parse_attention_args(fn, &prefill_block_table_args, args, nargs, kwnames, &a) < 0)
    return NULL;
  ignis_prefill_plan *plan = prefill_plan_of(fn, a.plan);
  if (!plan)
    return NULL;
  op_call c;
  block_table_slots s;
  ignis_block_table_kv_cache cache;
  void *ws;
  size_t ws_bytes;
  if (block_table_run_begin(fn, &a, a.kv_indptr, &c, &s, &cache, &ws, &ws_bytes) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_prefill_run_block_table(
      plan, &c.tensors[s.q], &cache, &c.tensors[s.cum_seq_lens_q], a.max_seq_len, &a.extras, &c.tensors[s.out],
      s.lse >= 0 ? &c.tensors[s.lse] : NULL, ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

PyMethodDef ext_prefill_methods[] = {
    FASTCALL(single_prefill_workspace_size, "single_prefill_workspace_size(num_qo_heads, num_kv_heads, "
                                            "head_dim_qk, head_dim_vo, max_qo_len, max_kv_len)"),
    FASTCALL_KW(single_prefill, "single_prefill(q, k, v, out, **arguments): ignis_single_prefill "
                                "(single_prefill_args)"),
    FASTCALL_KW(prefill_plan_create,
                "prefill_plan_create(**config) -> plan: the fields of ignis_prefill_plan_config by name"),
    FASTCALL(prefill_workspace_size, "prefill_workspace_size(plan) -> bytes: ignis_prefill_workspace_size"),
    FASTCALL(prefill_plan_update, "prefill_plan_update(plan, qo_indptr, kv_indptr, kv_last_page_len, "
                                  "workspace, stream) -> batch size"),
    FASTCALL_KW(prefill_ragged_run, "prefill_ragged_run(plan, q, k, v, out, **arguments): "
                                    "ignis_prefill_ragged_run (prefill_ragged_run_args)"),
    FASTCALL_KW(prefill_paged_run, "prefill_paged_run(plan, q, k_cache, v_cache, out, **arguments): "
                                   "ignis_prefill_paged_run (prefill_paged_run_args)"),
    FASTCALL_KW(prefill_run_block_table,
                "prefill_run_block_table(plan, q, k_cache, v_cache, out, block_tables, seq_lens, cum_seq_lens_q, "
                "max_q_len, **arguments): ignis_prefill_run_block_table (prefill_block_table_args)"),
    {NULL, NULL, 0, NULL}};
