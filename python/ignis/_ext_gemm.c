/* Python bindings of the GEMM ops (include/ignis/gemm.h), one per C function and under its name,
 * positional with the stream last (gemm.py passes every argument): tensors through DLPack, None for
 * an absent bias or weight_indices; the fp8 forms take a_view / b_view for NumPy fp8 arrays passed as uint8
 * views. ext_gemm_methods is the method table the module adds. */
#include "_ext.h"

/* (a, b, bias, out, stream) */
static PyObject *ext_mm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  const char *fn = "ignis.mm";
  if (check_nargs(fn, nargs, 5) < 0)
    return NULL;
  tensor_list l = {0};
  int a = tensor_list_add(&l, args[0], "a"), b = tensor_list_add(&l, args[1], "b");
  int bias = tensor_list_add(&l, args[2], "bias"), out = tensor_list_add(&l, args[3], "out");
  if (a < 0 || b < 0 || out < 0)
    return raise_type("%s: a, b and out must be arrays, not None", fn) < 0 ? NULL : NULL;
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, slot_bit(out), args[4]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_mm(&c.tensors[a], &c.tensors[b], bias >= 0 ? &c.tensors[bias] : NULL, &c.tensors[out], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

typedef ignis_status (*scaled_fn)(const ignis_tensor *, const ignis_tensor *, const ignis_tensor *,
                                  const ignis_tensor *, ignis_tensor *, void *);

/* A NumPy fp8 array arrives as its uint8 view (DLPack cannot carry ml_dtypes' types): view is the
 * ignis dtype to read it as, or -1. */
static int apply_view(const char *fn, const char *name, PyObject *view_arg, ignis_tensor *t) {
  int64_t view;
  if (view_arg == Py_None)
    return 0;
  if (parse_int64(fn, name, view_arg, &view) < 0)
    return -1;
  if (view != IGNIS_FP8_E4M3 && view != IGNIS_FP8_E5M2)
    return raise_type("%s: %s=%lld must be None or an fp8 dtype", fn, name, (long long)view);
  if (t->dtype != IGNIS_U8)
    return raise_type("%s: %s is given but the array is not the uint8 view of fp8 data", fn, name);
  t->dtype = (ignis_dtype)view;
  return 0;
}

/* (a, b, a_scale, b_scale, out, a_view, b_view, stream) */
static PyObject *run_scaled(const char *fn, scaled_fn f, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const names[] = {"a", "b", "a_scale", "b_scale", "out"};
  if (check_nargs(fn, nargs, 8) < 0)
    return NULL;
  op_call c;
  if (op_call_begin(&c, fn, args, names, 5, 1u << 4, args[7]) < 0)
    return NULL;
  if (apply_view(fn, "a_view", args[5], &c.tensors[0]) < 0 ||
      apply_view(fn, "b_view", args[6], &c.tensors[1]) < 0) {
    op_call_release(&c);
    return NULL;
  }
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      f(&c.tensors[0], &c.tensors[1], &c.tensors[2], &c.tensors[3], &c.tensors[4], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

static PyObject *ext_mm_fp8(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_scaled("ignis.mm_fp8", ignis_mm_fp8, args, nargs);
}

static PyObject *ext_mm_fp8_blockscale(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_scaled("ignis.mm_fp8_blockscale", ignis_mm_fp8_blockscale, args, nargs);
}

/* (a, b, m_indptr, weight_indices, out, stream) */
static PyObject *ext_grouped_mm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  const char *fn = "ignis.grouped_mm";
  if (check_nargs(fn, nargs, 6) < 0)
    return NULL;
  tensor_list l = {0};
  int a = tensor_list_add(&l, args[0], "a"), b = tensor_list_add(&l, args[1], "b");
  int ind = tensor_list_add(&l, args[2], "m_indptr"), wi = tensor_list_add(&l, args[3], "weight_indices");
  int out = tensor_list_add(&l, args[4], "out");
  if (a < 0 || b < 0 || ind < 0 || out < 0)
    return raise_type("%s: a, b, m_indptr and out must be arrays, not None", fn) < 0 ? NULL : NULL;
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, slot_bit(out), args[5]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_grouped_mm(&c.tensors[a], &c.tensors[b], &c.tensors[ind], wi >= 0 ? &c.tensors[wi] : NULL,
                       &c.tensors[out], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (a, b, a_scale, b_scale, m_indptr, out, a_view, b_view, stream) */
static PyObject *ext_grouped_mm_fp8_blockscale(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const names[] = {"a", "b", "a_scale", "b_scale", "m_indptr", "out"};
  const char *fn = "ignis.grouped_mm_fp8_blockscale";
  if (check_nargs(fn, nargs, 9) < 0)
    return NULL;
  op_call c;
  if (op_call_begin(&c, fn, args, names, 6, 1u << 5, args[8]) < 0)
    return NULL;
  if (apply_view(fn, "a_view", args[6], &c.tensors[0]) < 0 ||
      apply_view(fn, "b_view", args[7], &c.tensors[1]) < 0) {
    op_call_release(&c);
    return NULL;
  }
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_grouped_mm_fp8_blockscale(
      &c.tensors[0], &c.tensors[1], &c.tensors[2], &c.tensors[3], &c.tensors[4], &c.tensors[5], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

PyMethodDef ext_gemm_methods[] = {
    FASTCALL(mm, "mm(a, b, bias, out, stream)"),
    FASTCALL(mm_fp8, "mm_fp8(a, b, a_scale, b_scale, out, a_view, b_view, stream)"),
    FASTCALL(mm_fp8_blockscale, "mm_fp8_blockscale(a, b, a_scale, b_scale, out, a_view, b_view, stream)"),
    FASTCALL(grouped_mm, "grouped_mm(a, b, m_indptr, weight_indices, out, stream)"),
    FASTCALL(grouped_mm_fp8_blockscale,
             "grouped_mm_fp8_blockscale(a, b, a_scale, b_scale, m_indptr, out, a_view, b_view, stream)"),
    {NULL, NULL, 0, NULL},
};
