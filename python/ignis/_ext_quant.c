/* Python bindings of fp8 quantization (include/ignis/quant.h), one per C function and under its
 * name, positional, with the helpers of _ext.h: tensors through DLPack (None for the block form's
 * absent normed_out), then out_view and the stream last. out_view is -1, or the ignis dtype of an fp8
 * `out` handed over as its uint8 view (NumPy arrays of ml_dtypes' fp8 types, which DLPack cannot
 * carry). ext_quant_methods is the method table the module adds. */
#include "_ext.h"

/* Read the call's tensors (bit i of writable: an output), then give `out` (slot out_slot) its fp8
 * dtype when it came as a uint8 view. */
static int quant_begin(op_call *c, const char *fn, PyObject *const *objs, const char *const *names, int count,
                       unsigned writable, int out_slot, PyObject *view_arg, PyObject *stream_arg) {
  int64_t view;
  if (parse_int64(fn, "out_view", view_arg, &view) < 0)
    return -1;
  if (view != -1 && view != IGNIS_FP8_E4M3 && view != IGNIS_FP8_E5M2) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: out_view=%lld must be -1 or an fp8 dtype", fn, (long long)view);
    return -1;
  }
  if (op_call_begin(c, fn, objs, names, count, writable, stream_arg) < 0)
    return -1;
  if (view >= 0) {
    if (c->tensors[out_slot].dtype != IGNIS_U8) {
      op_call_release(c);
      PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: out must be the uint8 view of an fp8 array", fn);
      return -1;
    }
    c->tensors[out_slot].dtype = (ignis_dtype)view;
  }
  return 0;
}

static int parse_flag(const char *fn, const char *name, PyObject *arg, int *out) {
  *out = PyObject_IsTrue(arg);
  return *out < 0 ? -1 : 0;
}

typedef ignis_status (*scaled_fn)(const ignis_tensor *, const ignis_tensor *, ignis_tensor *, void *);

/* (input, scale, out, out_view, stream) */
static PyObject *run_scaled(const char *fn, scaled_fn f, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const names[] = {"input", "scale", "out"};
  op_call c;
  if (check_nargs(fn, nargs, 5) < 0 || quant_begin(&c, fn, args, names, 3, 1u << 2, 2, args[3], args[4]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = f(&c.tensors[0], &c.tensors[1], &c.tensors[2], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

static PyObject *ext_fp8_quantize(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_scaled("ignis.fp8_quantize", ignis_fp8_quantize, args, nargs);
}

typedef ignis_status (*eps_fn)(const ignis_tensor *, double, ignis_tensor *, ignis_tensor *, void *);

/* (input, eps, out, scale, out_view, stream) */
static PyObject *run_eps(const char *fn, eps_fn f, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const names[] = {"input", "out", "scale"};
  double eps;
  if (check_nargs(fn, nargs, 6) < 0 || parse_double(fn, "eps", args[1], &eps) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[2], args[3]};
  op_call c;
  if (quant_begin(&c, fn, objs, names, 3, 1u << 1 | 1u << 2, 1, args[4], args[5]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = f(&c.tensors[0], eps, &c.tensors[1], &c.tensors[2], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

static PyObject *ext_fp8_quantize_dynamic(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_eps("ignis.fp8_quantize_dynamic", ignis_fp8_quantize_dynamic, args, nargs);
}

static PyObject *ext_fp8_quantize_per_token(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_eps("ignis.fp8_quantize_per_token", ignis_fp8_quantize_per_token, args, nargs);
}

typedef ignis_status (*group_fn)(const ignis_tensor *, int64_t, double, int, ignis_tensor *, ignis_tensor *,
                                 void *);

/* (input, group_size, eps, ue8m0, out, scale, out_view, stream) */
static PyObject *run_group(const char *fn, group_fn f, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const names[] = {"input", "out", "scale"};
  int64_t group_size;
  double eps;
  int ue8m0;
  if (check_nargs(fn, nargs, 8) < 0 || parse_int64(fn, "group_size", args[1], &group_size) < 0 ||
      parse_double(fn, "eps", args[2], &eps) < 0 || parse_flag(fn, "ue8m0", args[3], &ue8m0) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[4], args[5]};
  op_call c;
  if (quant_begin(&c, fn, objs, names, 3, 1u << 1 | 1u << 2, 1, args[6], args[7]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      f(&c.tensors[0], group_size, eps, ue8m0, &c.tensors[1], &c.tensors[2], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

static PyObject *ext_fp8_quantize_per_token_group(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_group("ignis.fp8_quantize_per_token_group", ignis_fp8_quantize_per_token_group, args, nargs);
}

static PyObject *ext_silu_and_mul_quant_per_token_group(PyObject *self, PyObject *const *args,
                                                        Py_ssize_t nargs) {
  return run_group("ignis.silu_and_mul_quant_per_token_group", ignis_silu_and_mul_quant_per_token_group, args,
                   nargs);
}

/* (input, weight, scale, eps, out, out_view, stream) */
static PyObject *ext_rmsnorm_quant(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char fn[] = "ignis.rmsnorm_quant";
  static const char *const names[] = {"input", "weight", "scale", "out"};
  double eps;
  if (check_nargs(fn, nargs, 7) < 0 || parse_double(fn, "eps", args[3], &eps) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[2], args[4]};
  op_call c;
  if (quant_begin(&c, fn, objs, names, 4, 1u << 3, 3, args[5], args[6]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_rmsnorm_quant(&c.tensors[0], &c.tensors[1], &c.tensors[2], eps, &c.tensors[3], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (input, residual, weight, scale, eps, out, out_view, stream) */
static PyObject *ext_fused_add_rmsnorm_quant(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char fn[] = "ignis.fused_add_rmsnorm_quant";
  static const char *const names[] = {"input", "residual", "weight", "scale", "out"};
  double eps;
  if (check_nargs(fn, nargs, 8) < 0 || parse_double(fn, "eps", args[4], &eps) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[2], args[3], args[5]};
  op_call c;
  if (quant_begin(&c, fn, objs, names, 5, 1u << 1 | 1u << 4, 4, args[6], args[7]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_fused_add_rmsnorm_quant(&c.tensors[0], &c.tensors[1], &c.tensors[2],
                                                                &c.tensors[3], eps, &c.tensors[4], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (input, gamma, beta, scale, eps, out, out_view, stream) */
static PyObject *ext_layernorm_quant(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char fn[] = "ignis.layernorm_quant";
  static const char *const names[] = {"input", "gemma", "beta", "scale", "out"};
  double eps;
  if (check_nargs(fn, nargs, 8) < 0 || parse_double(fn, "eps", args[4], &eps) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[2], args[3], args[5]};
  op_call c;
  if (quant_begin(&c, fn, objs, names, 5, 1u << 4, 4, args[6], args[7]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_layernorm_quant(&c.tensors[0], &c.tensors[1], &c.tensors[2],
                                                        &c.tensors[3], eps, &c.tensors[4], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (input, residual, weight, eps, group_size, quant_eps, ue8m0, out, block_scale, normed_out, out_view,
 * stream); normed_out may be None. */
static PyObject *ext_fused_add_rmsnorm_fp8_block_quant(PyObject *self, PyObject *const *args,
                                                       Py_ssize_t nargs) {
  static const char fn[] = "ignis.fused_add_rmsnorm_fp8_block_quant";
  static const char *const names[] = {"input", "residual", "weight", "out", "block_scale", "normed_out"};
  double eps, quant_eps;
  int64_t group_size;
  int ue8m0;
  if (check_nargs(fn, nargs, 12) < 0 || parse_double(fn, "eps", args[3], &eps) < 0 ||
      parse_int64(fn, "group_size", args[4], &group_size) < 0 ||
      parse_double(fn, "quant_eps", args[5], &quant_eps) < 0 || parse_flag(fn, "ue8m0", args[6], &ue8m0) < 0)
    return NULL;
  const int with_normed = args[9] != Py_None;
  PyObject *objs[] = {args[0], args[1], args[2], args[7], args[8], args[9]};
  op_call c;
  if (quant_begin(&c, fn, objs, names, 5 + with_normed, 1u << 1 | 1u << 3 | 1u << 4 | 1u << 5, 3, args[10],
                  args[11]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_fused_add_rmsnorm_fp8_block_quant(
      &c.tensors[0], &c.tensors[1], &c.tensors[2], eps, group_size, quant_eps, ue8m0, &c.tensors[3],
      &c.tensors[4], with_normed ? &c.tensors[5] : NULL, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

static PyObject *ext_silu_and_mul_quant(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_scaled("ignis.silu_and_mul_quant", ignis_silu_and_mul_quant, args, nargs);
}

PyMethodDef ext_quant_methods[] = {
    FASTCALL(fp8_quantize, "fp8_quantize(input, scale, out, out_view, stream)"),
    FASTCALL(fp8_quantize_dynamic, "fp8_quantize_dynamic(input, eps, out, scale, out_view, stream)"),
    FASTCALL(fp8_quantize_per_token, "fp8_quantize_per_token(input, eps, out, scale, out_view, stream)"),
    FASTCALL(fp8_quantize_per_token_group,
             "fp8_quantize_per_token_group(input, group_size, eps, ue8m0, out, scale, out_view, stream)"),
    FASTCALL(rmsnorm_quant, "rmsnorm_quant(input, weight, scale, eps, out, out_view, stream)"),
    FASTCALL(fused_add_rmsnorm_quant,
             "fused_add_rmsnorm_quant(input, residual, weight, scale, eps, out, out_view, stream)"),
    FASTCALL(layernorm_quant, "layernorm_quant(input, gamma, beta, scale, eps, out, out_view, stream)"),
    FASTCALL(
        fused_add_rmsnorm_fp8_block_quant,
        "fused_add_rmsnorm_fp8_block_quant(input, residual, weight, eps, group_size, quant_eps, ue8m0, out, "
        "block_scale, normed_out, out_view, stream)"),
    FASTCALL(silu_and_mul_quant, "silu_and_mul_quant(input, scale, out, out_view, stream)"),
    FASTCALL(
        silu_and_mul_quant_per_token_group,
        "silu_and_mul_quant_per_token_group(input, group_size, eps, ue8m0, out, scale, out_view, stream)"),
    {NULL, NULL, 0, NULL},
};
