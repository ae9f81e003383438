/* Python bindings of MLA attention and the latent-cache append (include/ignis/mla.h), positional
 * with the stream last (mla.py passes every argument): a plan travels as a capsule that destroys
 * the plan with it; index arrays of a plan update are contiguous int32 host arrays (mla.py makes
 * them so); tensors through DLPack, None for an absent lse or workspace. ext_mla_methods is the
 * method table the module adds. */
#include "_ext.h"

#define MLA_PLAN_CAPSULE "ignis.mla_plan"

static void mla_plan_free(void *plan) {
  ignis_mla_plan_destroy(plan);
}

static const plan_kind mla_plan_kind = {MLA_PLAN_CAPSULE, "plan made by mla_plan_create", mla_plan_free};

static ignis_mla_plan *mla_plan_of(const char *fn, PyObject *obj) {
  return plan_capsule_of(fn, obj, &mla_plan_kind);
}

/* (device_type, device_id, num_heads, head_dim_ckv, head_dim_kpe, page_size, q_dtype, kv_dtype,
 *  causal, sm_scale, lse_base, max_batch_size, max_q_tokens, max_kv_len) -> plan capsule */
static PyObject *ext_mla_plan_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.BatchMLAPagedAttentionWrapper.plan";
  static const char *const names[] = {"device_type",  "device_id", "num_heads", "head_dim_ckv",
                                      "head_dim_kpe", "page_size", "q_dtype",   "kv_dtype",
                                      "causal",       "sm_scale",  "lse_base",  "max_batch_size",
                                      "max_q_tokens", "max_kv_len"};
  if (check_nargs(fn, nargs, 14) < 0)
    return NULL;
  int64_t v[14];
  double sm_scale = 0.0;
  for (int i = 0; i < 14; ++i) {
    if (i == 9 ? parse_double(fn, names[i], args[i], &sm_scale) < 0
               : parse_int64(fn, names[i], args[i], &v[i]) < 0)
      return NULL;
  }
  ignis_mla_plan_config config = IGNIS_MLA_PLAN_CONFIG_INIT;
  config.device.type = (ignis_device_type)v[0];
  config.device.id = (int32_t)v[1];
  config.num_heads = v[2];
  config.head_dim_ckv = v[3];
  config.head_dim_kpe = v[4];
  config.page_size = v[5];
  config.q_dtype = (ignis_dtype)v[6];
  config.kv_dtype = (ignis_dtype)v[7];
  config.causal = (int32_t)v[8];
  config.sm_scale = sm_scale;
  config.lse_base = (ignis_lse_base)v[10];
  config.max_batch_size = v[11];
  config.max_q_tokens = v[12];
  config.max_kv_len = v[13];
  ignis_mla_plan *plan = NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_mla_plan_create(&config, &plan);
  Py_END_ALLOW_THREADS return plan_capsule_new(&mla_plan_kind, status, plan);
}

/* (plan) -> bytes */
static PyObject *ext_mla_workspace_size(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.mla_workspace_size";
  if (check_nargs(fn, nargs, 1) < 0)
    return NULL;
  ignis_mla_plan *plan = mla_plan_of(fn, args[0]);
  if (!plan)
    return NULL;
  size_t bytes = 0;
  return bytes_or_raise(ignis_mla_workspace_size(plan, &bytes), &bytes);
}

/* (plan) -> (num_work, num_merged_tokens) of the last update */
static PyObject *ext_mla_plan_info(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.mla_plan_info";
  if (check_nargs(fn, nargs, 1) < 0)
    return NULL;
  ignis_mla_plan *plan = mla_plan_of(fn, args[0]);
  if (!plan)
    return NULL;
  int64_t work = 0, merged = 0;
  ignis_status status = ignis_mla_plan_info(plan, &work, &merged);
  if (status != IGNIS_OK) {
    raise_status(status, ignis_last_error());
    return NULL;
  }
  return Py_BuildValue("(LL)", (long long)work, (long long)merged);
}

/* (plan, qo_indptr, kv_indptr, kv_len, workspace_or_None, stream): host int32 arrays. */
static PyObject *ext_mla_plan_update(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.BatchMLAPagedAttentionWrapper.plan";
  static const char *const names[] = {"qo_indptr", "kv_indptr", "kv_len_arr"};
  if (check_nargs(fn, nargs, 6) < 0)
    return NULL;
  ignis_mla_plan *plan = mla_plan_of(fn, args[0]);
  if (!plan)
    return NULL;
  host_i32 arrays[3];
  int read = 0;
  for (; read < 3; ++read)
    if (!read_host_i32(args[1 + read], 0, &arrays[read]))
      break;
  PyObject *result = NULL;
  if (read < 3) {
    raise_type("%s: %s must be a contiguous 1-D int32 host array", fn, names[read]);
    goto done;
  }
  const int64_t batch = arrays[0].len - 1;
  if (batch < 0 || arrays[1].len != batch + 1 || arrays[2].len < batch) {
    PyErr_Format(
        INVALID_ARGUMENT_ERROR,
        "%s: qo_indptr has %lld entries, kv_indptr %lld and kv_len_arr %lld, but they must describe one "
        "batch ([batch + 1], [batch + 1], [batch])",
        fn, (long long)arrays[0].len, (long long)arrays[1].len, (long long)arrays[2].len);
    goto done;
  }
  void *ws, *stream;
  size_t ws_bytes;
  op_call c;
  if (plan_update_workspace(fn, args[4], args[5], &c, &ws, &ws_bytes, &stream) < 0)
    goto done;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_mla_plan_update(plan, arrays[0].data, arrays[1].data, arrays[2].data,
                                                        batch, ws, ws_bytes, stream);
  Py_END_ALLOW_THREADS if (c.count) op_call_release(&c);
  if (status != IGNIS_OK)
    raise_status(status, ignis_last_error());
  else
    result = PyLong_FromLongLong(batch);
done:
  for (int i = 0; i < read; ++i)
    host_i32_release(&arrays[i]);
  return result;
}

/* (plan, q_nope, q_pe, ckv_cache, kpe_cache, kv_indices, ckv_scale, kpe_scale, kv_view, out, lse_or_None,
 *  workspace_or_None, stream): kv_view, the ignis dtype to read uint8 caches as (NumPy fp8), or -1 */
static PyObject *ext_mla_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.BatchMLAPagedAttentionWrapper.run";
  if (check_nargs(fn, nargs, 13) < 0)
    return NULL;
  double ckv_scale = 1.0, kpe_scale = 1.0;
  int64_t kv_view = -1;
  if (parse_double(fn, "ckv_scale", args[6], &ckv_scale) < 0 ||
      parse_double(fn, "kpe_scale", args[7], &kpe_scale) < 0 ||
      parse_int64(fn, "kv_view", args[8], &kv_view) < 0)
    return NULL;
  ignis_mla_plan *plan = mla_plan_of(fn, args[0]);
  if (!plan)
    return NULL;
  tensor_list l = {0};
  const int q_nope = tensor_list_add(&l, args[1], "q_nope"), q_pe = tensor_list_add(&l, args[2], "q_pe");
  const int ckv = tensor_list_add(&l, args[3], "ckv_cache"), kpe = tensor_list_add(&l, args[4], "kpe_cache");
  const int indices = tensor_list_add(&l, args[5], "kv_indices"), out = tensor_list_add(&l, args[9], "out");
  const int lse = tensor_list_add(&l, args[10], "lse"),
            ws = tensor_list_add(&l, args[11], "float_workspace_buffer");
  if (q_nope < 0 || q_pe < 0 || ckv < 0 || kpe < 0 || indices < 0 || out < 0)
    return raise_type("%s: q_nope, q_pe, ckv_cache, kpe_cache, kv_indices and out must be arrays", fn) < 0
               ? NULL
               : NULL;
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, slot_bit(out) | slot_bit(lse) | slot_bit(ws),
                    args[12]) < 0)
    return NULL;
  void *ws_data = NULL;
  size_t ws_bytes = 0;
  if (apply_fp8_view(fn, kv_view, &c.tensors[ckv], "ckv_cache") < 0 ||
      apply_fp8_view(fn, kv_view, &c.tensors[kpe], "kpe_cache") < 0 ||
      (ws >= 0 && workspace_of(fn, &c.tensors[ws], &ws_data, &ws_bytes) < 0)) {
    op_call_release(&c);
    return NULL;
  }
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_mla_run(
      plan, &c.tensors[q_nope], &c.tensors[q_pe], &c.tensors[ckv], &c.tensors[kpe], &c.tensors[indices],
      ckv_scale, kpe_scale, &c.tensors[out], lse >= 0 ? &c.tensors[lse] : NULL, ws_data, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (append_ckv, append_kpe, batch_indices, positions, ckv_cache, kpe_cache, kv_indices, kv_indptr,
 *  kv_last_page_len, kv_view, stream): kv_view as for mla_run, applied to the rows and the caches */
static PyObject *ext_append_paged_mla_kv_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.append_paged_mla_kv_cache";
  static const char *const names[] = {"append_ckv", "append_kpe", "batch_indices",
                                      "positions",  "ckv_cache",  "kpe_cache",
                                      "kv_indices", "kv_indptr",  "kv_last_page_len"};
  int64_t kv_view = -1;
  if (check_nargs(fn, nargs, 11) < 0 || parse_int64(fn, "kv_view", args[9], &kv_view) < 0)
    return NULL;
  op_call c;
  if (op_call_begin(&c, fn, args, names, 9, (1u << 4) | (1u << 5), args[10]) < 0)
    return NULL;
  for (int i = 0; i < 6; ++i)
    if (i != 2 && i != 3 && apply_fp8_view(fn, kv_view, &c.tensors[i], names[i]) < 0) {
      op_call_release(&c);
      return NULL;
    }
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_append_paged_mla_kv_cache(
      &c.tensors[0], &c.tensors[1], &c.tensors[2], &c.tensors[3], &c.tensors[4], &c.tensors[5], &c.tensors[6],
      &c.tensors[7], &c.tensors[8], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

PyMethodDef ext_mla_methods[] = {
    FASTCALL(mla_plan_create,
             "mla_plan_create(device_type, device_id, num_heads, head_dim_ckv, head_dim_kpe, "
             "page_size, q_dtype, kv_dtype, causal, sm_scale, lse_base, max_batch_size, "
             "max_q_tokens, max_kv_len)"),
    FASTCALL(mla_workspace_size, "mla_workspace_size(plan)"),
    FASTCALL(mla_plan_info, "mla_plan_info(plan)"),
    FASTCALL(mla_plan_update, "mla_plan_update(plan, qo_indptr, kv_indptr, kv_len_arr, workspace, stream)"),
    FASTCALL(mla_run, "mla_run(plan, q_nope, q_pe, ckv_cache, kpe_cache, kv_indices, ckv_scale, kpe_scale, "
                      "kv_view, out, lse, "
                      "workspace, stream)"),
    FASTCALL(append_paged_mla_kv_cache,
             "append_paged_mla_kv_cache(append_ckv, append_kpe, batch_indices, positions, "
             "ckv_cache, kpe_cache, kv_indices, kv_indptr, kv_last_page_len, kv_view, stream)"),
    {NULL, NULL, 0, NULL},
};
