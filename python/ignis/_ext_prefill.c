/* Python bindings of prefill attention (include/ignis/prefill.h), with the argument helpers of
 * _ext.h (op_call, tensor_list, parse_attention_options, host_i32, ...). prefill.py gives them
 * FlashInfer's names. A prefill plan travels as a capsule, as a decode plan does.
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

/* (q, k, v, layout, mask_mode, custom_mask_or_None, <7 options>, k_scale, v_scale, sinks_or_None,
 *  kv_view, out, lse_or_None, workspace_or_None, stream) */
static PyObject *ext_single_prefill(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.single_prefill_with_kv_cache";
  enum { EXTRAS = 6 + ATTENTION_OPTION_ARGS, OUT = EXTRAS + 4 };
  int64_t layout, mask_mode, kv_view;
  ignis_attention_options options;
  ignis_attention_extras extras;
  if (check_nargs(fn, nargs, OUT + 4) < 0 || parse_int64(fn, "kv_layout", args[3], &layout) < 0 ||
      parse_int64(fn, "mask_mode", args[4], &mask_mode) < 0 || parse_attention_options(fn, args + 6, &options) < 0 ||
      parse_attention_scales(fn, args + EXTRAS, &extras) < 0 || parse_kv_view(fn, args[EXTRAS + 3], &kv_view) < 0)
    return NULL;
  tensor_list l = {.count = 0};
  int q_at = tensor_list_add(&l, args[0], "q"), k_at = tensor_list_add(&l, args[1], "k");
  int v_at = tensor_list_add(&l, args[2], "v"), mask_at = tensor_list_add(&l, args[5], "custom_mask");
  int out_at = tensor_list_add(&l, args[OUT], "out"), lse_at = tensor_list_add(&l, args[OUT + 1], "lse");
  int ws_at = tensor_list_add(&l, args[OUT + 2], "workspace");
  int sinks_at = tensor_list_add(&l, args[EXTRAS + 2], "sinks");
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, slot_bit(out_at) | slot_bit(lse_at), args[OUT + 3]) < 0)
    return NULL;
  void *ws;
  size_t ws_bytes;
  if (kv_pair_inputs(fn, &c, ws_at, kv_view, k_at, v_at, &ws, &ws_bytes) < 0)
    return NULL;
  extras.sinks = sinks_at >= 0 ? &c.tensors[sinks_at] : NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_single_prefill(
      &c.tensors[q_at], &c.tensors[k_at], &c.tensors[v_at], (ignis_kv_layout)layout, (ignis_mask_mode)mask_mode,
      mask_at >= 0 ? &c.tensors[mask_at] : NULL, &options, &extras, &c.tensors[out_at],
      lse_at >= 0 ? &c.tensors[lse_at] : NULL, ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

#define PREFILL_PLAN_CAPSULE "ignis.prefill_plan"

static void prefill_plan_capsule_destroy(PyObject *capsule) {
  ignis_prefill_plan *plan = PyCapsule_GetPointer(capsule, PREFILL_PLAN_CAPSULE);
  if (!plan) {
    PyErr_Clear();
    return;
  }
  ignis_prefill_plan_destroy(plan);
}

static ignis_prefill_plan *prefill_plan_of(const char *fn, PyObject *obj) {
  return plan_capsule_of(fn, obj, PREFILL_PLAN_CAPSULE, "prefill plan made by prefill_plan_create");
}

/* (device_type, device_id, kv_kind, kv_layout, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo,
 *  page_size, q_dtype, kv_dtype, mask_mode, max_batch_size, max_qo_tokens, max_kv_len,
 *  disable_split_kv, fixed_split_size, <7 options>) -> plan capsule */
static PyObject *ext_prefill_plan_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.BatchPrefillWrapper.plan";
  static const char *const names[] = {"device_type",  "device_id",    "kv_kind",          "kv_layout",
                                      "num_qo_heads", "num_kv_heads", "head_dim_qk",      "head_dim_vo",
                                      "page_size",    "q_data_type",  "kv_data_type",     "mask_mode",
                                      "max_batch_size", "max_qo_tokens", "max_kv_len",    "disable_split_kv",
                                      "fixed_split_size"};
  enum { COUNT = sizeof names / sizeof names[0] };
  int64_t v[COUNT];
  if (check_nargs(fn, nargs, COUNT + ATTENTION_OPTION_ARGS) < 0 || parse_int64_args(fn, args, names, COUNT, v) < 0)
    return NULL;
  ignis_prefill_plan_config config = IGNIS_PREFILL_PLAN_CONFIG_INIT;
  if (parse_attention_options(fn, args + COUNT, &config.options) < 0)
    return NULL;
  config.device.type = v[0] ? IGNIS_DEVICE_CUDA : IGNIS_DEVICE_CPU;
  config.device.id = (int32_t)v[1];
  config.kv_kind = (ignis_prefill_kv_kind)v[2];
  config.kv_layout = (ignis_kv_layout)v[3];
  config.num_qo_heads = v[4];
  config.num_kv_heads = v[5];
  config.head_dim_qk = v[6];
  config.head_dim_vo = v[7];
  config.page_size = v[8];
  config.q_dtype = (ignis_dtype)v[9];
  config.kv_dtype = (ignis_dtype)v[10];
  config.mask_mode = (ignis_mask_mode)v[11];
  config.max_batch_size = v[12];
  config.max_qo_tokens = v[13];
  config.max_kv_len = v[14];
  config.disable_split_kv = v[15] != 0;
  config.fixed_split_size = v[16];
  ignis_prefill_plan *plan = NULL;
  ignis_status status = ignis_prefill_plan_create(&config, &plan);
  if (status != IGNIS_OK) {
    raise_status(status, ignis_last_error());
    return NULL;
  }
  PyObject *capsule = PyCapsule_New(plan, PREFILL_PLAN_CAPSULE, prefill_plan_capsule_destroy);
  if (!capsule)
    ignis_prefill_plan_destroy(plan);
  return capsule;
}

/* (plan) -> workspace bytes */
static PyObject *ext_prefill_workspace_size(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.prefill_workspace_size";
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
  static const char *const ws_name[] = {"float_workspace_buffer"};
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
  void *ws = NULL, *stream = NULL;
  size_t ws_bytes = 0;
  op_call c = {.count = 0};
  if (args[4] != Py_None) {
    if (op_call_begin(&c, fn, args + 4, ws_name, 1, 0, args[5]) < 0)
      goto done;
    stream = c.stream;
    if (workspace_of(fn, &c.tensors[0], &ws, &ws_bytes) < 0) {
      op_call_release(&c);
      goto done;
    }
  } else if (args[5] != Py_None && parse_stream(fn, args[5], &stream) < 0) {
    goto done;
  }
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

/* The custom mask and the workspace of a run, read in a second op_call (a paged run has more
 * tensors than one holds), on the stream the first one chose. */
static int prefill_run_side(const char *fn, PyObject *mask, PyObject *workspace, void *stream, op_call *side,
                            const ignis_tensor **mask_t, void **ws, size_t *ws_bytes) {
  tensor_list l = {.count = 0};
  int mask_at = tensor_list_add(&l, mask, "custom_mask"), ws_at = tensor_list_add(&l, workspace, "workspace");
  side->count = 0;
  *mask_t = NULL;
  *ws = NULL;
  *ws_bytes = 0;
  if (l.count == 0)
    return 0;
  PyObject *stream_obj = stream ? PyLong_FromVoidPtr(stream) : Py_None;
  if (!stream_obj)
    return -1;
  int r = op_call_begin(side, fn, l.objs, l.names, l.count, 0, stream_obj);
  if (stream)
    Py_DECREF(stream_obj);
  if (r < 0)
    return -1;
  if (ws_at >= 0 && workspace_of(fn, &side->tensors[ws_at], ws, ws_bytes) < 0) {
    op_call_release(side);
    side->count = 0;
    return -1;
  }
  *mask_t = mask_at >= 0 ? &side->tensors[mask_at] : NULL;
  return 0;
}

/* (plan, q, k, v, custom_mask_or_None, out, lse_or_None, workspace_or_None, k_scale, v_scale,
 *  sinks_or_None, kv_view, stream) */
static PyObject *ext_prefill_ragged_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.BatchPrefillWithRaggedKVCacheWrapper.run";
  int64_t kv_view;
  ignis_attention_extras extras;
  if (check_nargs(fn, nargs, 13) < 0 || parse_attention_scales(fn, args + 8, &extras) < 0 ||
      parse_kv_view(fn, args[11], &kv_view) < 0)
    return NULL;
  ignis_prefill_plan *plan = prefill_plan_of(fn, args[0]);
  if (!plan)
    return NULL;
  tensor_list l = {.count = 0};
  int q_at = tensor_list_add(&l, args[1], "q"), k_at = tensor_list_add(&l, args[2], "k");
  int v_at = tensor_list_add(&l, args[3], "v"), mask_at = tensor_list_add(&l, args[4], "custom_mask");
  int out_at = tensor_list_add(&l, args[5], "out"), lse_at = tensor_list_add(&l, args[6], "lse");
  int ws_at = tensor_list_add(&l, args[7], "workspace"), sinks_at = tensor_list_add(&l, args[10], "sinks");
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, slot_bit(out_at) | slot_bit(lse_at), args[12]) < 0)
    return NULL;
  void *ws;
  size_t ws_bytes;
  if (kv_pair_inputs(fn, &c, ws_at, kv_view, k_at, v_at, &ws, &ws_bytes) < 0)
    return NULL;
  extras.sinks = sinks_at >= 0 ? &c.tensors[sinks_at] : NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_prefill_ragged_run(
      plan, &c.tensors[q_at], &c.tensors[k_at], &c.tensors[v_at], mask_at >= 0 ? &c.tensors[mask_at] : NULL, &extras,
      &c.tensors[out_at], lse_at >= 0 ? &c.tensors[lse_at] : NULL, ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (plan, q, k_cache_or_combined, v_cache_or_None, kv_indptr, kv_indices, kv_last_page_len, layout,
 *  custom_mask_or_None, out, lse_or_None, workspace_or_None, k_scale, v_scale, sinks_or_None, kv_view,
 *  stream) */
static PyObject *ext_prefill_paged_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.BatchPrefillWithPagedKVCacheWrapper.run";
  int64_t layout, kv_view;
  ignis_attention_extras extras;
  if (check_nargs(fn, nargs, 17) < 0 || parse_int64(fn, "kv_layout", args[7], &layout) < 0 ||
      parse_attention_scales(fn, args + 12, &extras) < 0 || parse_kv_view(fn, args[15], &kv_view) < 0)
    return NULL;
  ignis_prefill_plan *plan = prefill_plan_of(fn, args[0]);
  if (!plan)
    return NULL;
  int combined = args[3] == Py_None;
  tensor_list l = {.count = 0};
  int q_at = tensor_list_add(&l, args[1], "q");
  int k_at = tensor_list_add(&l, args[2], combined ? "paged_kv_cache" : "k_cache");
  int v_at = tensor_list_add(&l, args[3], "v_cache");
  int indptr_at = tensor_list_add(&l, args[4], "kv_indptr"), indices_at = tensor_list_add(&l, args[5], "kv_indices");
  int last_at = tensor_list_add(&l, args[6], "kv_last_page_len");
  int out_at = tensor_list_add(&l, args[9], "out"), lse_at = tensor_list_add(&l, args[10], "lse");
  int sinks_at = tensor_list_add(&l, args[14], "sinks");
  op_call c, side;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, slot_bit(out_at) | slot_bit(lse_at), args[16]) < 0)
    return NULL;
  const ignis_tensor *mask = NULL;
  void *ws = NULL;
  size_t ws_bytes = 0;
  if (prefill_run_side(fn, args[8], args[11], c.stream, &side, &mask, &ws, &ws_bytes) < 0) {
    op_call_release(&c);
    return NULL;
  }
  ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT;
  cache.layout = (ignis_kv_layout)layout;
  if (paged_kv_tensors(fn, &c, kv_view, k_at, l.names[k_at], v_at, combined, &cache) < 0) {
    if (side.count)
      op_call_release(&side);
    op_call_release(&c);
    return NULL;
  }
  cache.indptr = c.tensors[indptr_at];
  cache.indices = c.tensors[indices_at];
  cache.last_page_len = c.tensors[last_at];
  extras.sinks = sinks_at >= 0 ? &c.tensors[sinks_at] : NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_prefill_paged_run(plan, &c.tensors[q_at], &cache, mask, &extras,
                                                          &c.tensors[out_at], lse_at >= 0 ? &c.tensors[lse_at] : NULL,
                                                          ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS if (side.count) op_call_release(&side);
  return op_call_finish(&c, status);
}

PyMethodDef ext_prefill_methods[] = {
    FASTCALL(single_prefill_workspace_size, "single_prefill_workspace_size(num_qo_heads, num_kv_heads, "
             "head_dim_qk, head_dim_vo, max_qo_len, max_kv_len)"),
    FASTCALL(single_prefill, "single_prefill(q, k, v, layout, mask_mode, custom_mask, sm_scale, "
             "logits_soft_cap, window_left, lse_base, pos_encoding_mode, rope_scale, "
             "rope_theta, k_scale, v_scale, sinks, kv_view, out, lse, workspace, stream)"),
    FASTCALL(prefill_plan_create, "prefill_plan_create(device_type, device_id, kv_kind, kv_layout, "
             "num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, page_size, "
             "q_dtype, kv_dtype, mask_mode, max_batch_size, max_qo_tokens, "
             "max_kv_len, disable_split_kv, fixed_split_size, <7 options>)"),
    FASTCALL(prefill_workspace_size, "prefill_workspace_size(plan)"),
    FASTCALL(prefill_plan_update, "prefill_plan_update(plan, qo_indptr, kv_indptr, kv_last_page_len, "
             "workspace, stream) -> batch size"),
    FASTCALL(prefill_ragged_run, "prefill_ragged_run(plan, q, k, v, custom_mask, out, lse, workspace, "
             "k_scale, v_scale, sinks, kv_view, stream)"),
    FASTCALL(prefill_paged_run, "prefill_paged_run(plan, q, k_cache, v_cache, kv_indptr, kv_indices, "
             "kv_last_page_len, layout, custom_mask, out, lse, workspace, k_scale, "
             "v_scale, sinks, kv_view, stream)"),
    {NULL, NULL, 0, NULL}};
