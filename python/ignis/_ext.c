/* ignis._ext: the CPython extension behind the ignis package (this file: DLPack, arguments, errors,
 * the module, the library and device facts (version, build, device_info), and the norm,
 * activation, RoPE (with the fused RoPE + fp8 forms), paged-cache, merge and decode bindings;
 * prefill and sampling have their own files, sharing _ext.h).
 *
 * Each op function takes its arguments positionally when there are a few, and by name past the
 * first tensors when there are many (parse_args: a spec table per binding, so the order is
 * written once; a plan config is filled field by field as the header names them). norm.py,
 * activation.py, rope.py, page.py, cascade.py, decode.py, prefill.py and sampling.py give them
 * FlashInfer's names and defaults; a plan travels as a capsule that destroys the plan with it.
 * A binding turns every tensor argument into an ignis_tensor through DLPack, picks the CUDA
 * stream, calls the C API with the GIL released, and turns a failed status into the matching
 * ignis.Error subclass carrying ignis_last_error(). The C enums the Python modules pass are
 * module constants under their C names (add_constants), so Python never writes their values.
 *
 * How a tensor is read, fastest first:
 *   1. The type publishes DLPack's C exchange table (type.__dlpack_c_exchange_api__, a capsule
 *      named "dlpack_exchange_api"; PyTorch has one): dltensor_from_py_object_no_sync fills a
 *      DLTensor on our stack without allocating, and current_work_stream names the framework's
 *      current stream. Used whenever we launch on that current stream (the table never syncs).
 *   2. obj.__dlpack__(max_version=(1, 1)[, stream=s]): a "dltensor_versioned" capsule, or the
 *      legacy "dltensor" one from producers that predate DLPack 1.0 (types that reject max_version
 *      are remembered and asked without it). As the specification asks, the capsule is renamed
 *      "used_dltensor[_versioned]" and its deleter is called once the op has been launched.
 *      obj.__dlpack_device__() is asked first (except for numpy.ndarray, always on the host) so
 *      that CUDA producers get stream=: the stream we launch on (1 for the legacy default stream),
 *      letting them order their pending work before ours. PyTorch gets no stream= when we launch
 *      on its current stream: without the argument it does no synchronization in every 2.x
 *      release (its default is None in early ones, -1 in later ones, where None would sync with
 *      the legacy default stream), which is right and cheapest. PyTorch tensors that require grad
 *      (parameters) are exported through .detach(), as __dlpack__ refuses them.
 *
 * The stream: an explicit stream= (an int, or an object with .cuda_stream or .ptr) wins; else the
 * current stream of the framework that owns the first CUDA tensor (PyTorch and CuPy, looked up in
 * sys.modules, never imported here); else the legacy default stream (0). Host-only calls ignore it.
 *
 * Descriptors: DLPack dtypes map to ignis's (float32/16, bfloat16, float8 e4m3fn/e5m2, int32/64,
 * uint8; others raise a dtype error); kDLCPU and kDLCUDAHost (pinned host memory) become
 * IGNIS_DEVICE_CPU, kDLCUDA becomes IGNIS_DEVICE_CUDA with its ordinal, other devices raise
 * UnsupportedError; byte_offset is added to the data pointer; NULL strides mean row-major.
 *
 * Outputs (writable arguments) must be writable: a read-only or copied versioned export, and JAX
 * arrays (immutable, exported through the legacy capsule that cannot say so), are refused. */
#include "_ext.h"

#include <stdarg.h>
#include <string.h>

/* ---- DLPack ABI (the layouts of the DLPack specification, v1.x) ------------------------------ */
enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3 };
enum {
  DL_INT = 0,
  DL_UINT = 1,
  DL_FLOAT = 2,
  DL_BFLOAT = 4,
  DL_COMPLEX = 5,
  DL_BOOL = 6,
  DL_FLOAT8_E4M3FN = 10,
  DL_FLOAT8_E5M2 = 12
};
#define DL_FLAG_READ_ONLY (UINT64_C(1) << 0)
#define DL_FLAG_IS_COPIED (UINT64_C(1) << 1)

typedef struct {
  int32_t device_type;
  int32_t device_id;
} dl_device;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} dl_dtype;

typedef struct {
  void *data;
  dl_device device;
  int32_t ndim;
  dl_dtype dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
  dl_tensor tensor;
  void *manager_ctx;
  void (*deleter)(struct dl_managed *self);
} dl_managed;

typedef struct {
  uint32_t major;
  uint32_t minor;
} dl_version;

typedef struct dl_managed_versioned {
  dl_version version;
  void *manager_ctx;
  void (*deleter)(struct dl_managed_versioned *self);
  uint64_t flags;
  dl_tensor tensor;
} dl_managed_versioned;

typedef struct dl_exchange_header {
  dl_version version;
  struct dl_exchange_header *prev_api;
} dl_exchange_header;

typedef struct {
  dl_exchange_header header;
  void *managed_tensor_allocator;
  void *managed_tensor_from_py_object_no_sync;
  void *managed_tensor_to_py_object_no_sync;
  int (*dltensor_from_py_object_no_sync)(void *py_object, dl_tensor *out);
  int (*current_work_stream)(int32_t device_type, int32_t device_id, void **out_stream);
} dl_exchange_api;

/* ---- module state ------------------------------------------------------------------------- */
/* The largest status value (IGNIS_STATUS_MAP lists them in order). */
#define IGNIS_LAST_STATUS IGNIS_ERROR_TIMEOUT
/* Error classes, set once by ignis/__init__.py through _set_error_classes. */
static PyObject *error_by_status[IGNIS_LAST_STATUS + 1];
static PyObject *argument_type_error; /* Python-level argument problems (TypeError) */
static PyObject *dtype_error;         /* invalid argument about a dtype (ValueError and TypeError) */

static PyObject *str_dlpack, *str_dlpack_device, *str_exchange_api, *str_cuda_stream, *str_ptr;
static PyObject *kw_max_version, *kw_max_version_stream, *kw_stream, *max_version_value;

/* Facts about a tensor type, looked up once. Types past the cache's size are looked up per call. */
typedef struct {
  PyTypeObject *type;
  const dl_exchange_api *api; /* NULL: use __dlpack__ */
  int always_host;            /* numpy.ndarray: skip __dlpack_device__ */
  int legacy_only;            /* __dlpack__ rejected max_version */
} type_facts;

#define TYPE_CACHE_SIZE 16
static type_facts type_cache[TYPE_CACHE_SIZE];
static int type_cache_len;

/* Framework types found in sys.modules (strong references, kept for the process's life). */
static PyObject *torch_tensor_type, *cupy_ndarray_type, *jax_array_type;

/* ---- errors ------------------------------------------------------------------------------- */
PyObject *status_class(ignis_status status, PyObject *fallback) {
  PyObject *cls =
      status > IGNIS_OK && status <= IGNIS_LAST_STATUS ? error_by_status[status] : NULL;
  return cls ? cls : fallback;
}

#define ARGUMENT_TYPE_ERROR (argument_type_error ? argument_type_error : PyExc_TypeError)
#define DTYPE_ERROR (dtype_error ? dtype_error : PyExc_TypeError)

/* Raise ARGUMENT_TYPE_ERROR (a Python-level argument problem); returns -1. */
int raise_type(const char *format, ...) {
  va_list args;
  va_start(args, format);
  PyErr_FormatV(ARGUMENT_TYPE_ERROR, format, args);
  va_end(args);
  return -1;
}

int raise_status(ignis_status status, const char *message) {
  PyObject *cls = status == IGNIS_ERROR_INVALID_ARGUMENT && strstr(message, "dtype")
                      ? DTYPE_ERROR
                      : status_class(status, PyExc_RuntimeError);
  PyErr_SetString(cls, message);
  return -1;
}

/* The pending exception as a normalized instance (new reference), cleared; NULL if none. */
PyObject *take_exception(void) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  if (!type)
    return NULL;
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback && value)
    PyException_SetTraceback(value, traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  return value;
#endif
}

/* Make exc (stolen; may be NULL) the pending exception again. */
void restore_exception(PyObject *exc) {
  if (!exc)
    return;
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyObject *type = (PyObject *)Py_TYPE(exc);
  Py_INCREF(type);
  PyErr_Restore(type, exc, PyException_GetTraceback(exc));
#endif
}

/* Replace the pending exception by cls("<prefix>: <its message>"), chained as __cause__. */
static int raise_from(PyObject *cls, const char *prefix) {
  PyObject *cause = take_exception();
  if (!cause) {
    PyErr_SetString(cls, prefix);
    return -1;
  }
  PyErr_Format(cls, "%s: %S", prefix, cause);
  PyObject *exc = take_exception();
  if (exc) {
    Py_INCREF(cause);
    PyException_SetContext(exc, cause);
    PyException_SetCause(exc, cause);
    restore_exception(exc);
  } else {
    Py_DECREF(cause);
  }
  return -1;
}

/* ---- framework lookups -------------------------------------------------------------------- */
/* getattr(sys.modules[module], attr), cached in *slot; NULL without error if not imported. */
static PyObject *imported_attr(PyObject **slot, const char *module, const char *attr) {
  if (*slot)
    return *slot;
  PyObject *name = PyUnicode_FromString(module);
  if (!name) {
    PyErr_Clear();
    return NULL;
  }
  PyObject *mod = PyImport_GetModule(name);
  Py_DECREF(name);
  if (!mod) {
    PyErr_Clear();
    return NULL;
  }
  PyObject *value = PyObject_GetAttrString(mod, attr);
  Py_DECREF(mod);
  if (!value)
    PyErr_Clear();
  *slot = value;
  return value;
}

static int is_instance_of(PyObject *obj, PyObject **slot, const char *module, const char *attr) {
  PyObject *type = imported_attr(slot, module, attr);
  if (!type)
    return 0;
  int r = PyObject_IsInstance(obj, type);
  if (r < 0) {
    PyErr_Clear();
    return 0;
  }
  return r;
}

static const dl_exchange_api *find_exchange_api(PyTypeObject *type) {
  PyObject *capsule = PyObject_GetAttr((PyObject *)type, str_exchange_api);
  if (!capsule) {
    PyErr_Clear();
    return NULL;
  }
  const dl_exchange_header *header = NULL;
  if (PyCapsule_IsValid(capsule, "dlpack_exchange_api"))
    header = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
  Py_DECREF(capsule);
  while (header && header->version.major > 1)
    header = header->prev_api;
  if (!header || header->version.major != 1)
    return NULL;
  const dl_exchange_api *api = (const dl_exchange_api *)header;
  return api->dltensor_from_py_object_no_sync && api->current_work_stream ? api : NULL;
}

static type_facts *facts_of(PyTypeObject *type, type_facts *scratch) {
  for (int i = 0; i < type_cache_len; ++i)
    if (type_cache[i].type == type)
      return &type_cache[i];
  type_facts *f = type_cache_len < TYPE_CACHE_SIZE ? &type_cache[type_cache_len++] : scratch;
  f->type = type;
  f->api = find_exchange_api(type);
  f->always_host = strcmp(type->tp_name, "numpy.ndarray") == 0;
  f->legacy_only = 0;
  if (f != scratch)
    Py_INCREF(type);
  return f;
}

/* The framework's current stream on CUDA device `device_id`, for a tensor without the exchange
 * table. Returns 1 and sets *stream when the framework is known, 0 if not, -1 on error. */
static int framework_current_stream(PyObject *obj, int32_t device_id, void **stream) {
  static PyObject *torch_raw_stream, *torch_current_stream, *cupy_current_stream;
  PyObject *result = NULL;
  if (is_instance_of(obj, &torch_tensor_type, "torch", "Tensor")) {
    if (!torch_raw_stream && !torch_current_stream) {
      PyObject *torch = PyImport_ImportModule("torch"); /* already imported: a dict lookup */
      if (!torch)
        return -1;
      PyObject *c = PyObject_GetAttrString(torch, "_C");
      torch_raw_stream = c ? PyObject_GetAttrString(c, "_cuda_getCurrentRawStream") : NULL;
      Py_XDECREF(c);
      if (!torch_raw_stream) {
        PyErr_Clear();
        PyObject *cuda = PyObject_GetAttrString(torch, "cuda");
        torch_current_stream = cuda ? PyObject_GetAttrString(cuda, "current_stream") : NULL;
        Py_XDECREF(cuda);
      }
      Py_DECREF(torch);
      if (!torch_raw_stream && !torch_current_stream)
        return -1;
    }
    if (torch_raw_stream) {
      result = PyObject_CallFunction(torch_raw_stream, "i", (int)device_id);
    } else {
      PyObject *s = PyObject_CallFunction(torch_current_stream, "i", (int)device_id);
      result = s ? PyObject_GetAttr(s, str_cuda_stream) : NULL;
      Py_XDECREF(s);
    }
  } else if (is_instance_of(obj, &cupy_ndarray_type, "cupy", "ndarray")) {
    if (!cupy_current_stream) {
      PyObject *cupy = PyImport_ImportModule("cupy");
      PyObject *cuda = cupy ? PyObject_GetAttrString(cupy, "cuda") : NULL;
      cupy_current_stream = cuda ? PyObject_GetAttrString(cuda, "get_current_stream") : NULL;
      Py_XDECREF(cuda);
      Py_XDECREF(cupy);
      if (!cupy_current_stream)
        return -1;
    }
    PyObject *s = PyObject_CallFunction(cupy_current_stream, "i", (int)device_id);
    if (!s && PyErr_ExceptionMatches(PyExc_TypeError)) { /* CuPy without the device argument */
      PyErr_Clear();
      s = PyObject_CallNoArgs(cupy_current_stream);
    }
    result = s ? PyObject_GetAttr(s, str_ptr) : NULL;
    Py_XDECREF(s);
  } else {
    return 0;
  }
  if (!result)
    return -1;
  *stream = PyLong_AsVoidPtr(result);
  Py_DECREF(result);
  return PyErr_Occurred() ? -1 : 1;
}

/* ---- arguments ---------------------------------------------------------------------------- */
int parse_stream(const char *fn, PyObject *arg, void **stream) {
  PyObject *value;
  if (PyLong_Check(arg)) {
    value = arg;
    Py_INCREF(value);
  } else {
    value = PyObject_GetAttr(arg, str_cuda_stream);
    if (!value) {
      PyErr_Clear();
      value = PyObject_GetAttr(arg, str_ptr);
    }
    if (!value || !PyLong_Check(value)) {
      PyErr_Clear();
      Py_XDECREF(value);
      return raise_type("%s: stream must be None, an int (a cudaStream_t) or an object with "
                        ".cuda_stream or .ptr, not %.100s",
                        fn, Py_TYPE(arg)->tp_name);
    }
  }
  unsigned long long bits = PyLong_AsUnsignedLongLong(value);
  Py_DECREF(value);
  if (bits == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: stream must be a non-negative 64-bit value", fn);
    return -1;
  }
  *stream = (void *)(uintptr_t)bits;
  return 0;
}

int parse_double(const char *fn, const char *name, PyObject *arg, double *out) {
  *out = PyFloat_AsDouble(arg);
  if (*out == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    return raise_type("%s: %s must be a number, not %.100s", fn, name, Py_TYPE(arg)->tp_name);
  }
  return 0;
}

int parse_int64(const char *fn, const char *name, PyObject *arg, int64_t *out) {
  if (PyFloat_Check(arg))
    return raise_type("%s: %s must be an int, not float", fn, name);
  long long v = PyLong_AsLongLong(arg);
  if (v == -1 && PyErr_Occurred()) {
    int overflow = PyErr_ExceptionMatches(PyExc_OverflowError);
    PyErr_Clear();
    if (overflow) {
      PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: %s is out of the 64-bit range", fn, name);
      return -1;
    }
    return raise_type("%s: %s must be an int, not %.100s", fn, name, Py_TYPE(arg)->tp_name);
  }
  *out = v;
  return 0;
}

/* args[0 .. count-1] as integers named names[i] (the configuration arguments of the plan bindings). */
int parse_int64_args(const char *fn, PyObject *const *args, const char *const *names, int count,
                     int64_t *out) {
  for (int i = 0; i < count; ++i)
    if (parse_int64(fn, names[i], args[i], &out[i]) < 0)
      return -1;
  return 0;
}

/* A size query's answer: *bytes as a Python int (read only after the query ran), or the status raised. */
PyObject *bytes_or_raise(ignis_status status, const size_t *bytes) {
  if (status != IGNIS_OK) {
    raise_status(status, ignis_last_error());
    return NULL;
  }
  return PyLong_FromSize_t(*bytes);
}

/* The interned names of a table, made at its first use (single-phase module, under the GIL). */
static int intern_table(arg_table *t) {
  if (t->count > 64)
    return raise_type("arg_table: %d entries, at most 64", t->count);
  for (int i = 0; i < t->count; ++i)
    if (!t->spec[i].key && !(t->spec[i].key = PyUnicode_InternFromString(t->spec[i].name)))
      return -1;
  t->interned = 1;
  return 0;
}

/* The entry named `key`: by pointer first (call sites' keywords are interned constants). */
static int spec_index(const arg_table *t, PyObject *key) {
  for (int i = 0; i < t->count; ++i)
    if (t->spec[i].key == key)
      return i;
  for (int i = 0; i < t->count; ++i)
    if (PyUnicode_Check(key) && PyUnicode_Compare(t->spec[i].key, key) == 0)
      return i;
  return -1;
}

/* The fields of ignis_attention_options, by their names in decode.h (ARG_OPTIONS: one dict). */
static arg_spec attention_option_spec[] = {
    ARG(ignis_attention_options, sm_scale, ARG_DOUBLE),     ARG(ignis_attention_options, logits_soft_cap, ARG_DOUBLE),
    ARG(ignis_attention_options, window_left, ARG_INT32),   ARG(ignis_attention_options, lse_base, ARG_ENUM),
    ARG(ignis_attention_options, pos_encoding_mode, ARG_ENUM), ARG(ignis_attention_options, rope_scale, ARG_DOUBLE),
    ARG(ignis_attention_options, rope_theta, ARG_DOUBLE)};
static arg_table attention_option_args = ARG_TABLE(attention_option_spec);

static int store_scalar(const char *fn, const arg_spec *a, PyObject *value, void *dst);

/* An ARG_OPTIONS dict into the ignis_attention_options at dst (fields not in it keep their values). */
static int store_options(const char *fn, PyObject *dict, void *dst) {
  if (!PyDict_Check(dict))
    return raise_type("%s: options must be a dict of ignis_attention_options fields, not %.100s", fn,
                      Py_TYPE(dict)->tp_name);
  if (!attention_option_args.interned && intern_table(&attention_option_args) < 0)
    return -1;
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    int i = spec_index(&attention_option_args, key);
    if (i < 0)
      return raise_type("%s: options has an unexpected field %R", fn, key);
    if (store_scalar(fn, &attention_option_spec[i], value, dst) < 0)
      return -1;
  }
  return 0;
}

/* A scalar argument (not an object) into dst. */
static int store_scalar(const char *fn, const arg_spec *a, PyObject *value, void *dst) {
  char *at = (char *)dst + a->offset;
  if (value == Py_None) /* a scalar given as None keeps its default */
    return 0;
  int64_t i64;
  switch (a->kind) {
  case ARG_OPTIONS:
    return store_options(fn, value, at);
  case ARG_DOUBLE: {
    double d;
    if (parse_double(fn, a->name, value, &d) < 0)
      return -1;
    memcpy(at, &d, sizeof d);
    return 0;
  }
  case ARG_BOOL: {
    int32_t flag = PyObject_IsTrue(value);
    if (flag < 0)
      return -1;
    memcpy(at, &flag, sizeof flag);
    return 0;
  }
  case ARG_INT64:
    if (parse_int64(fn, a->name, value, &i64) < 0)
      return -1;
    memcpy(at, &i64, sizeof i64);
    return 0;
  default: /* ARG_INT32, ARG_ENUM, ARG_POSITIVE: a C int */
    if (parse_int64(fn, a->name, value, &i64) < 0)
      return -1;
    if (a->kind == ARG_POSITIVE && i64 < 1) {
      PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: %s=%lld must be positive (or None)", fn, a->name,
                   (long long)i64);
      return -1;
    }
    if (i64 < INT32_MIN || i64 > INT32_MAX) {
      PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: %s=%lld is out of range", fn, a->name, (long long)i64);
      return -1;
    }
    int32_t i32 = (int32_t)i64;
    memcpy(at, &i32, sizeof i32);
    return 0;
  }
}

/* One argument into dst: objects (most of a run's arguments) without a call. */
static inline int store_arg(const char *fn, const arg_spec *a, PyObject *value, void *dst) {
  if (a->kind > ARG_OBJECT)
    return store_scalar(fn, a, value, dst);
  if (a->kind == ARG_REQUIRED && value == Py_None)
    return raise_type("%s: %s must not be None", fn, a->name);
  memcpy((char *)dst + a->offset, &value, sizeof value);
  return 0;
}

/* The entries of kwnames' keywords, from the table's cache when kwnames is the tuple of its last
 * call (a call site's constant: a hot call pays no name lookups), else looked up and cached. */
static const int8_t *keyword_entries(const char *fn, arg_table *t, PyObject *kwnames) {
  if (kwnames == t->kwnames)
    return t->entry;
  Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  if (nkw > 64) {
    raise_type("%s: %zd keyword arguments, at most 64", fn, nkw);
    return NULL;
  }
  int8_t entry[64];
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, k);
    int i = spec_index(t, key);
    if (i < 0) {
      raise_type("%s: unexpected argument %U", fn, key);
      return NULL;
    }
    entry[k] = (int8_t)i;
  }
  Py_INCREF(kwnames); /* held, so that a new tuple cannot reuse its address */
  Py_XSETREF(t->kwnames, kwnames);
  memcpy(t->entry, entry, (size_t)nkw);
  return t->entry;
}

int parse_args(const char *fn, arg_table *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               void *dst) {
  uint64_t given = 0;
  if (!t->interned && intern_table(t) < 0)
    return -1;
  if (nargs > t->count)
    return raise_type("%s: expected at most %d arguments, got %zd", fn, t->count, nargs);
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (store_arg(fn, &t->spec[i], args[i], dst) < 0)
      return -1;
    given |= UINT64_C(1) << i;
  }
  if (kwnames && PyTuple_GET_SIZE(kwnames) > 0) {
    const int8_t *entry = keyword_entries(fn, t, kwnames);
    if (!entry)
      return -1;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); ++k) {
      int i = entry[k];
      if (given >> i & 1)
        return raise_type("%s: argument %s given twice", fn, t->spec[i].name);
      if (store_arg(fn, &t->spec[i], args[nargs + k], dst) < 0)
        return -1;
      given |= UINT64_C(1) << i;
    }
  }
  for (int i = 0; i < t->count; ++i) {
    if (given >> i & 1)
      continue;
    if (t->spec[i].kind == ARG_REQUIRED)
      return raise_type("%s: missing argument %s", fn, t->spec[i].name);
    if (t->spec[i].kind == ARG_OBJECT) {
      PyObject *none = Py_None;
      memcpy((char *)dst + t->spec[i].offset, &none, sizeof none);
    }
  }
  return 0;
}

/* ---- tensors ------------------------------------------------------------------------------ */
/* DLPack (code, bits) -> ignis dtype, lanes 1. */
static const struct {
  uint8_t code, bits;
  ignis_dtype dtype;
} dtype_table[] = {{DL_FLOAT, 32, IGNIS_F32},
                   {DL_FLOAT, 16, IGNIS_F16},
                   {DL_BFLOAT, 16, IGNIS_BF16},
                   {DL_FLOAT8_E4M3FN, 8, IGNIS_FP8_E4M3},
                   {DL_FLOAT8_E5M2, 8, IGNIS_FP8_E5M2},
                   {DL_INT, 32, IGNIS_I32},
                   {DL_INT, 64, IGNIS_I64},
                   {DL_UINT, 8, IGNIS_U8}};

static int map_dtype(const char *fn, const char *name, dl_dtype t, ignis_dtype *out) {
  for (size_t i = 0; i < sizeof dtype_table / sizeof dtype_table[0]; ++i)
    if (t.lanes == 1 && t.code == dtype_table[i].code && t.bits == dtype_table[i].bits) {
      *out = dtype_table[i].dtype;
      return 0;
    }
  static const char *const kinds[] = {"int", "uint", "float", "handle", "bfloat", "complex", "bool"};
  char described[64];
  if (t.code < sizeof kinds / sizeof kinds[0])
    snprintf(described, sizeof described, "%s%d", kinds[t.code], (int)t.bits);
  else
    snprintf(described, sizeof described, "DLPack type code %d (%d bits)", (int)t.code, (int)t.bits);
  if (t.lanes != 1)
    snprintf(described + strlen(described), sizeof described - strlen(described), "x%d", (int)t.lanes);
  PyErr_Format(DTYPE_ERROR,
               "%s: %s.dtype=%s is not supported: ignis takes f32, f16, bf16, fp8 e4m3fn, fp8 e5m2, "
               "i32, i64 and u8",
               fn, name, described);
  return -1;
}

/* DLTensor -> ignis_tensor: dtype, device, byte_offset, strides (NULL means row-major). */
static int describe(const char *fn, const char *name, const dl_tensor *dl, ignis_tensor *t) {
  if (dl->ndim < 0 || dl->ndim > IGNIS_MAX_DIMS) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: %s.ndim=%d but ignis tensors have at most %d dimensions", fn,
                 name, (int)dl->ndim, IGNIS_MAX_DIMS);
    return -1;
  }
  if (map_dtype(fn, name, dl->dtype, &t->dtype) < 0)
    return -1;
  if (dl->device.device_type == DL_CPU || dl->device.device_type == DL_CUDA_HOST) {
    t->device.type = IGNIS_DEVICE_CPU;
    t->device.id = 0;
  } else if (dl->device.device_type == DL_CUDA) {
    t->device.type = IGNIS_DEVICE_CUDA;
    t->device.id = dl->device.device_id;
  } else {
    PyErr_Format(UNSUPPORTED_ERROR,
                 "%s: %s is on DLPack device type %d; ignis takes host (kDLCPU, "
                 "kDLCUDAHost) and CUDA (kDLCUDA) tensors",
                 fn, name, (int)dl->device.device_type);
    return -1;
  }
  t->ndim = dl->ndim;
  t->data = dl->data ? (char *)dl->data + dl->byte_offset : NULL;
  int empty = 0;
  for (int d = 0; d < dl->ndim; ++d)
    empty |= dl->shape[d] == 0;
  /* Strides NULL: row-major. An empty tensor addresses nothing: producers may report any strides
   * (NumPy reports zeros), so it is described as row-major too. */
  int64_t stride = 1;
  for (int d = dl->ndim - 1; d >= 0; --d) {
    t->shape[d] = dl->shape[d];
    t->strides[d] = dl->strides && !empty ? dl->strides[d] : stride;
    stride *= dl->shape[d] > 1 ? dl->shape[d] : 1;
  }
  return 0;
}

static void release_slot(export_slot *s) {
  if (!s->managed)
    return;
  if (s->versioned) {
    dl_managed_versioned *m = s->managed;
    if (m->deleter)
      m->deleter(m);
  } else {
    dl_managed *m = s->managed;
    if (m->deleter)
      m->deleter(m);
  }
  s->managed = NULL;
}

/* Release every export, keeping any pending exception intact across the producers' deleters. */
void op_call_release(op_call *c) {
  PyObject *pending = take_exception();
  for (int i = 0; i < c->count; ++i)
    release_slot(&c->slots[i]);
  restore_exception(pending);
}

/* obj.__dlpack__(...) -> the tensor in slot; the capsule is consumed (renamed). */
static int export_dlpack(const char *fn, const char *name, PyObject *obj, type_facts *facts,
                         PyObject *stream_value, export_slot *slot, ignis_tensor *t) {
  PyObject *stack[4] = {NULL, obj, NULL, NULL};
  PyObject *capsule = NULL;
  size_t nargs = 1 | PY_VECTORCALL_ARGUMENTS_OFFSET;
  if (!facts->legacy_only) {
    stack[2] = max_version_value;
    stack[3] = stream_value;
    capsule = PyObject_VectorcallMethod(str_dlpack, stack + 1, nargs,
                                        stream_value ? kw_max_version_stream : kw_max_version);
    if (!capsule && PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      stack[2] = stream_value;
      capsule = PyObject_VectorcallMethod(str_dlpack, stack + 1, nargs, stream_value ? kw_stream : NULL);
      facts->legacy_only = capsule != NULL;
    }
  } else {
    stack[2] = stream_value;
    capsule = PyObject_VectorcallMethod(str_dlpack, stack + 1, nargs, stream_value ? kw_stream : NULL);
  }
  if (!capsule) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
      PyErr_Clear();
      return raise_type("%s: %s is a %.100s, which does not support DLPack (no __dlpack__)", fn, name,
                        Py_TYPE(obj)->tp_name);
    }
    char message[256];
    snprintf(message, sizeof message, "%s: %s (a %.100s) could not be exported through DLPack", fn, name,
             Py_TYPE(obj)->tp_name);
    return raise_from(ARGUMENT_TYPE_ERROR, message);
  }
  const dl_tensor *dl;
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    dl_managed_versioned *m = PyCapsule_GetPointer(capsule, "dltensor_versioned");
    PyCapsule_SetName(capsule, "used_dltensor_versioned");
    slot->managed = m;
    slot->versioned = 1;
    if (m->version.major != 1) {
      Py_DECREF(capsule);
      release_slot(slot);
      return raise_type("%s: %s was exported with DLPack %u.%u; ignis reads DLPack 1.x", fn, name,
                        m->version.major, m->version.minor);
    }
    slot->flags = m->flags;
    dl = &m->tensor;
  } else if (PyCapsule_IsValid(capsule, "dltensor")) {
    dl_managed *m = PyCapsule_GetPointer(capsule, "dltensor");
    PyCapsule_SetName(capsule, "used_dltensor");
    slot->managed = m;
    slot->versioned = 0;
    slot->legacy = 1;
    dl = &m->tensor;
  } else {
    Py_DECREF(capsule);
    return raise_type("%s: %s.__dlpack__() did not return a DLPack capsule", fn, name);
  }
  Py_DECREF(capsule);
  return describe(fn, name, dl, t);
}

static int check_writable(op_call *c, int i, PyObject *obj, const char *name) {
  export_slot *s = &c->slots[i];
  if (s->flags & (DL_FLAG_READ_ONLY | DL_FLAG_IS_COPIED)) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: %s is %s, but ignis writes to it", c->fn, name,
                 (s->flags & DL_FLAG_READ_ONLY) ? "read-only" : "a copy made by its producer");
    return -1;
  }
  if (s->legacy && is_instance_of(obj, &jax_array_type, "jax", "Array"))
    return raise_type("%s: %s is a JAX array, which is immutable, but ignis writes to it: pass a "
                      "writable array (NumPy, PyTorch, CuPy)",
                      c->fn, name);
  return 0;
}

/* Read objs[0..count) into c->tensors and choose c->stream. Bit i of writable marks an output.
 * On failure everything taken is released and an exception is set. */
int op_call_begin(op_call *c, const char *fn, PyObject *const *objs, const char *const *names, int count,
                  unsigned writable, PyObject *stream_arg) {
  type_facts scratch[MAX_TENSORS];
  type_facts *facts[MAX_TENSORS];
  int done[MAX_TENSORS] = {0};
  int first_cuda = -1;
  PyObject *stream_value = NULL; /* the stream= passed to CUDA producers, made when first needed */
  c->fn = fn;
  c->count = count;
  c->stream = NULL;
  memset(c->slots, 0, sizeof c->slots);

  /* Pass 1: where each tensor lives; exchange-table tensors are read right away. */
  for (int i = 0; i < count; ++i) {
    PyObject *obj = objs[i];
    int same = -1;
    for (int j = 0; j < i && same < 0; ++j)
      if (objs[j] == obj)
        same = j;
    if (same >= 0) {
      facts[i] = facts[same];
      if (done[same]) {
        c->tensors[i] = c->tensors[same];
        done[i] = 1;
      } else {
        c->tensors[i].device = c->tensors[same].device;
      }
      continue;
    }
    facts[i] = facts_of(Py_TYPE(obj), &scratch[i]);
    if (facts[i]->api) {
      dl_tensor dl;
      if (facts[i]->api->dltensor_from_py_object_no_sync(obj, &dl) != 0) {
        char message[256];
        snprintf(message, sizeof message, "%s: %s (a %.100s) could not be exported through DLPack", fn,
                 names[i], Py_TYPE(obj)->tp_name);
        raise_from(ARGUMENT_TYPE_ERROR, message);
        goto fail;
      }
      if (describe(fn, names[i], &dl, &c->tensors[i]) < 0)
        goto fail;
      done[i] = 1;
    } else if (facts[i]->always_host) {
      c->tensors[i].device.type = IGNIS_DEVICE_CPU;
    } else {
      PyObject *dev = PyObject_CallMethodNoArgs(obj, str_dlpack_device);
      if (!dev) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
          PyErr_Clear();
          raise_type("%s: %s is a %.100s, which does not support DLPack (no __dlpack_device__)", fn, names[i],
                     Py_TYPE(obj)->tp_name);
        }
        goto fail;
      }
      long type = -1, id = -1;
      if (PyTuple_Check(dev) && PyTuple_GET_SIZE(dev) == 2) {
        type = PyLong_AsLong(PyTuple_GET_ITEM(dev, 0));
        id = PyLong_AsLong(PyTuple_GET_ITEM(dev, 1));
      }
      Py_DECREF(dev);
      if (PyErr_Occurred() || type < 0) {
        PyErr_Clear();
        raise_type("%s: %s.__dlpack_device__() did not return (device_type, device_id)", fn, names[i]);
        goto fail;
      }
      c->tensors[i].device.type = type == DL_CUDA ? IGNIS_DEVICE_CUDA : IGNIS_DEVICE_CPU;
      c->tensors[i].device.id = (int32_t)id;
      if (type != DL_CPU && type != DL_CUDA && type != DL_CUDA_HOST) {
        PyErr_Format(UNSUPPORTED_ERROR,
                     "%s: %s is on DLPack device type %ld; ignis takes host (kDLCPU, "
                     "kDLCUDAHost) and CUDA (kDLCUDA) tensors",
                     fn, names[i], type);
        goto fail;
      }
    }
    if (first_cuda < 0 && c->tensors[i].device.type == IGNIS_DEVICE_CUDA)
      first_cuda = i;
  }

  /* The stream (an explicit one is checked even when every tensor is on the host). */
  int explicit_stream = stream_arg != Py_None;
  if (explicit_stream && parse_stream(fn, stream_arg, &c->stream) < 0)
    goto fail;
  if (first_cuda >= 0 && !explicit_stream) {
    int32_t device_id = c->tensors[first_cuda].device.id;
    if (facts[first_cuda]->api) {
      if (facts[first_cuda]->api->current_work_stream(DL_CUDA, device_id, &c->stream) != 0)
        goto fail;
    } else if (framework_current_stream(objs[first_cuda], device_id, &c->stream) < 0) {
      goto fail;
    }
  }

  /* Pass 2: the rest through __dlpack__; exchange-table CUDA tensors are re-read through it when an
   * explicit stream differs from their framework's current one, so the producer orders its work. */
  for (int i = 0; i < count; ++i) {
    PyObject *obj = objs[i];
    int cuda = c->tensors[i].device.type == IGNIS_DEVICE_CUDA;
    if (done[i] && cuda && explicit_stream) {
      void *current = NULL;
      if (facts[i]->api->current_work_stream(DL_CUDA, c->tensors[i].device.id, &current) != 0)
        goto fail;
      done[i] = current == c->stream;
    }
    if (done[i]) {
      continue;
    }
    int same = -1;
    for (int j = 0; j < i && same < 0; ++j)
      if (objs[j] == obj)
        same = j;
    if (same >= 0) {
      c->tensors[i] = c->tensors[same];
      c->slots[i].flags = c->slots[same].flags;
      c->slots[i].legacy = c->slots[same].legacy;
      continue;
    }
    /* PyTorch without the exchange table: its __dlpack__ refuses tensors that require grad
     * (parameters), which ignis only reads or writes as data: export a detached alias instead. */
    int is_torch = !facts[i]->always_host && is_instance_of(obj, &torch_tensor_type, "torch", "Tensor");
    PyObject *detached = NULL;
    if (is_torch) {
      PyObject *requires_grad = PyObject_GetAttrString(obj, "requires_grad");
      int needs_detach = requires_grad ? PyObject_IsTrue(requires_grad) : -1;
      Py_XDECREF(requires_grad);
      detached = needs_detach > 0 ? PyObject_CallMethod(obj, "detach", NULL) : NULL;
      if (needs_detach < 0 || (needs_detach > 0 && !detached))
        goto fail;
    }
    PyObject *value = NULL;
    /* PyTorch without an explicit stream: its default (no stream=) does not synchronize. */
    if (cuda && (explicit_stream || !is_torch)) {
      if (!stream_value) {
        stream_value = c->stream ? PyLong_FromVoidPtr(c->stream) : PyLong_FromLong(1);
        if (!stream_value) {
          Py_XDECREF(detached);
          goto fail;
        }
      }
      value = stream_value;
    }
    int exported =
        export_dlpack(fn, names[i], detached ? detached : obj, facts[i], value, &c->slots[i], &c->tensors[i]);
    Py_XDECREF(detached);
    if (exported < 0)
      goto fail;
  }
  Py_CLEAR(stream_value);

  for (int i = 0; i < count; ++i)
    if ((writable >> i) & 1)
      if (check_writable(c, i, objs[i], names[i]) < 0)
        goto fail;
  return 0;

fail:
  Py_XDECREF(stream_value);
  op_call_release(c);
  return -1;
}

/* After the C call: release the exports, then return None or raise the status. */
PyObject *op_call_finish(op_call *c, ignis_status status) {
  char message[1024];
  if (status != IGNIS_OK)
    snprintf(message, sizeof message, "%s", ignis_last_error());
  op_call_release(c);
  if (status != IGNIS_OK) {
    raise_status(status, message[0] ? message : ignis_status_message(status));
    return NULL;
  }
  Py_RETURN_NONE;
}

int check_nargs(const char *fn, Py_ssize_t nargs, Py_ssize_t expected) {
  if (nargs == expected)
    return 0;
  return raise_type("%s: expected %zd arguments, got %zd", fn, expected, nargs);
}

/* ---- norm ---------------------------------------------------------------------------------- */
typedef ignis_status (*norm_fn)(const ignis_tensor *, const ignis_tensor *, double, ignis_tensor *, void *);
typedef ignis_status (*fused_norm_fn)(ignis_tensor *, ignis_tensor *, const ignis_tensor *, double, void *);

/* (input, weight, eps, out, stream) */
static PyObject *run_norm(const char *fn, norm_fn f, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const names[] = {"input", "weight", "out"};
  double eps;
  if (check_nargs(fn, nargs, 5) < 0 || parse_double(fn, "eps", args[2], &eps) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[3]};
  op_call c;
  if (op_call_begin(&c, fn, objs, names, 3, 1u << 2, args[4]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = f(&c.tensors[0], &c.tensors[1], eps, &c.tensors[2], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (input, residual, weight, eps, stream) */
static PyObject *run_fused_norm(const char *fn, fused_norm_fn f, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const names[] = {"input", "residual", "weight"};
  double eps;
  if (check_nargs(fn, nargs, 5) < 0 || parse_double(fn, "eps", args[3], &eps) < 0)
    return NULL;
  op_call c;
  if (op_call_begin(&c, fn, args, names, 3, 1u << 0 | 1u << 1, args[4]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = f(&c.tensors[0], &c.tensors[1], &c.tensors[2], eps, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

static PyObject *ext_rmsnorm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_norm("ignis.rmsnorm", ignis_rmsnorm, args, nargs);
}

static PyObject *ext_gemma_rmsnorm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_norm("ignis.gemma_rmsnorm", ignis_gemma_rmsnorm, args, nargs);
}

static PyObject *ext_fused_add_rmsnorm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_fused_norm("ignis.fused_add_rmsnorm", ignis_fused_add_rmsnorm, args, nargs);
}

static PyObject *ext_gemma_fused_add_rmsnorm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_fused_norm("ignis.gemma_fused_add_rmsnorm", ignis_gemma_fused_add_rmsnorm, args, nargs);
}

/* (input, gamma, beta, eps, out, stream) */
static PyObject *ext_layernorm(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.layernorm";
  static const char *const names[] = {"input", "gemma", "beta", "out"};
  double eps;
  if (check_nargs(fn, nargs, 6) < 0 || parse_double(fn, "eps", args[3], &eps) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[2], args[4]};
  op_call c;
  if (op_call_begin(&c, fn, objs, names, 4, 1u << 3, args[5]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_layernorm(&c.tensors[0], &c.tensors[1], &c.tensors[2], eps, &c.tensors[3], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* ---- activation ---------------------------------------------------------------------------- */
typedef ignis_status (*activation_fn)(const ignis_tensor *, ignis_tensor *, void *);

/* (input, out, stream) */
static PyObject *run_activation(const char *fn, activation_fn f, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const names[] = {"input", "out"};
  if (check_nargs(fn, nargs, 3) < 0)
    return NULL;
  op_call c;
  if (op_call_begin(&c, fn, args, names, 2, 1u << 1, args[2]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = f(&c.tensors[0], &c.tensors[1], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

static PyObject *ext_silu_and_mul(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_activation("ignis.silu_and_mul", ignis_silu_and_mul, args, nargs);
}

static PyObject *ext_gelu_and_mul(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_activation("ignis.gelu_and_mul", ignis_gelu_and_mul, args, nargs);
}

static PyObject *ext_gelu_tanh_and_mul(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  return run_activation("ignis.gelu_tanh_and_mul", ignis_gelu_tanh_and_mul, args, nargs);
}

/* ---- rope ---------------------------------------------------------------------------------- */
/* The arguments of the RoPE bindings, by name: the tensors, then ignis_rope_config's fields
 * (rotary_dim None: the head dim), then the stream. */
typedef struct {
  PyObject *q, *k, *indptr, *offsets, *pos_ids, *q_out, *k_out, *stream;
  ignis_rope_config config;
} rope_args;

#define ROPE_CONFIG_ARGS                                                                                     \
  ARG_NAMED("rotary_dim", rope_args, config.rotary_dim, ARG_POSITIVE),                                       \
      ARG_NAMED("interleave", rope_args, config.interleave, ARG_BOOL),                                       \
      ARG_NAMED("rope_scale", rope_args, config.rope_scale, ARG_DOUBLE),                                     \
      ARG_NAMED("rope_theta", rope_args, config.rope_theta, ARG_DOUBLE),                                     \
      ARG_NAMED("llama31", rope_args, config.llama31, ARG_BOOL),                                             \
      ARG_NAMED("low_freq_factor", rope_args, config.low_freq_factor, ARG_DOUBLE),                           \
      ARG_NAMED("high_freq_factor", rope_args, config.high_freq_factor, ARG_DOUBLE),                         \
      ARG_NAMED("old_context_len", rope_args, config.old_context_len, ARG_DOUBLE),                           \
      ARG(rope_args, stream, ARG_OBJECT)

static arg_spec apply_rope_spec[] = {ARG(rope_args, q, ARG_REQUIRED),
                                     ARG(rope_args, k, ARG_REQUIRED),
                                     ARG(rope_args, indptr, ARG_REQUIRED),
                                     ARG(rope_args, offsets, ARG_REQUIRED),
                                     ARG(rope_args, q_out, ARG_REQUIRED),
                                     ARG(rope_args, k_out, ARG_REQUIRED),
                                     ROPE_CONFIG_ARGS};
static arg_table apply_rope_args = ARG_TABLE(apply_rope_spec);

static arg_spec apply_rope_pos_ids_spec[] = {
    ARG(rope_args, q, ARG_REQUIRED),       ARG(rope_args, k, ARG_REQUIRED),
    ARG(rope_args, pos_ids, ARG_REQUIRED), ARG(rope_args, q_out, ARG_REQUIRED),
    ARG(rope_args, k_out, ARG_REQUIRED),   ROPE_CONFIG_ARGS};
static arg_table apply_rope_pos_ids_args = ARG_TABLE(apply_rope_pos_ids_spec);

/* The tensors of a RoPE call read into c (indptr and offsets, or pos_ids), and the config. */
static int rope_call_begin(const char *fn, arg_table *t, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames, rope_args *a, op_call *c) {
  ignis_rope_config init = IGNIS_ROPE_CONFIG_INIT;
  a->config = init;
  a->pos_ids = a->indptr = a->offsets = Py_None;
  if (parse_args(fn, t, args, nargs, kwnames, a) < 0)
    return -1;
  tensor_list l = {.count = 0};
  tensor_list_add(&l, a->q, "q");
  tensor_list_add(&l, a->k, "k");
  tensor_list_add(&l, a->indptr, "indptr");
  tensor_list_add(&l, a->offsets, "offsets");
  tensor_list_add(&l, a->pos_ids, "pos_ids");
  int q_out_at = tensor_list_add(&l, a->q_out, "q_out"), k_out_at = tensor_list_add(&l, a->k_out, "k_out");
  return op_call_begin(c, fn, l.objs, l.names, l.count, slot_bit(q_out_at) | slot_bit(k_out_at), a->stream);
}

static PyObject *ext_apply_rope(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const fn = "ignis.apply_rope";
  rope_args a;
  op_call c;
  if (rope_call_begin(fn, &apply_rope_args, args, nargs, kwnames, &a, &c) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_apply_rope(&c.tensors[0], &c.tensors[1], &c.tensors[2], &c.tensors[3],
                                                   &a.config, &c.tensors[4], &c.tensors[5], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

static PyObject *ext_apply_rope_pos_ids(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames) {
  static const char *const fn = "ignis.apply_rope_pos_ids";
  rope_args a;
  op_call c;
  if (rope_call_begin(fn, &apply_rope_pos_ids_args, args, nargs, kwnames,
                      &a, &c) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_apply_rope_pos_ids(&c.tensors[0], &c.tensors[1], &c.tensors[2],
                                                           &a.config, &c.tensors[3], &c.tensors[4], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (positions, query, key, head_size, cos_sin_cache, is_neox, query_out, key_out, stream) */
static PyObject *ext_apply_rope_with_cos_sin_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.apply_rope_with_cos_sin_cache";
  static const char *const names[] = {"positions", "query", "key", "cos_sin_cache", "query_out", "key_out"};
  int64_t head_size;
  if (check_nargs(fn, nargs, 9) < 0 || parse_int64(fn, "head_size", args[3], &head_size) < 0)
    return NULL;
  int is_neox = PyObject_IsTrue(args[5]);
  if (is_neox < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[2], args[4], args[6], args[7]};
  op_call c;
  if (op_call_begin(&c, fn, objs, names, 6, 1u << 4 | 1u << 5, args[8]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_apply_rope_with_cos_sin_cache(&c.tensors[0], &c.tensors[1], &c.tensors[2], head_size,
                                          &c.tensors[3], is_neox, &c.tensors[4], &c.tensors[5], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* ---- rope + fp8 quantization --------------------------------------------------------------- */
/* The scalars of a fused call (is_neox, quant_scale_q, quant_scale_kv at args[at..]) and out_view
 * (-1, or the fp8 dtype of outputs and caches handed over as uint8 views). */
typedef struct {
  int is_neox;
  double scale_q, scale_kv;
  int64_t view;
} rope_quant_scalars;

static int parse_rope_quant_scalars(const char *fn, PyObject *const *args, Py_ssize_t at, PyObject *view_arg,
                                    rope_quant_scalars *r) {
  r->is_neox = PyObject_IsTrue(args[at]);
  if (r->is_neox < 0 || parse_double(fn, "quant_scale_q", args[at + 1], &r->scale_q) < 0 ||
      parse_double(fn, "quant_scale_kv", args[at + 2], &r->scale_kv) < 0 ||
      parse_int64(fn, "out_view", view_arg, &r->view) < 0)
    return -1;
  if (r->view != -1 && r->view != IGNIS_FP8_E4M3 && r->view != IGNIS_FP8_E5M2) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: out_view=%lld must be -1 or an fp8 dtype", fn,
                 (long long)r->view);
    return -1;
  }
  return 0;
}

/* Read the listed tensors (None left out), then give the fp8 ones (bit i of fp8_slots, listed
 * slots) out_view's dtype when they came as uint8 views. *slots gets each object's slot (-1: None). */
static int rope_quant_begin(op_call *c, const char *fn, PyObject *const *objs, const char *const *names,
                            int count, unsigned writable_objs, unsigned fp8_objs, int64_t view,
                            PyObject *stream, int *slots) {
  tensor_list l = {.count = 0};
  unsigned writable = 0;
  for (int i = 0; i < count; ++i) {
    slots[i] = tensor_list_add(&l, objs[i], names[i]);
    if (writable_objs >> i & 1u)
      writable |= slot_bit(slots[i]);
  }
  if (op_call_begin(c, fn, l.objs, l.names, l.count, writable, stream) < 0)
    return -1;
  for (int i = 0; i < count; ++i)
    if ((fp8_objs >> i & 1u) && slots[i] >= 0 &&
        apply_fp8_view(fn, view, &c->tensors[slots[i]], names[i]) < 0) {
      op_call_release(c);
      return -1;
    }
  return 0;
}

#define RQ_TENSOR(i) (slots[i] >= 0 ? &c.tensors[slots[i]] : NULL)

/* (q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox, quant_scale_q, quant_scale_kv,
 *  q_rope_out, k_rope_out, q_nope_out, k_nope_out, out_view, stream); nope parts may be None */
static PyObject *ext_rope_quantize_fp8(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.rope_quantize_fp8";
  static const char *const names[] = {"q_rope",  "k_rope",     "q_nope",     "k_nope",     "cos_sin_cache",
                                      "pos_ids", "q_rope_out", "k_rope_out", "q_nope_out", "k_nope_out"};
  rope_quant_scalars r;
  if (check_nargs(fn, nargs, 15) < 0 || parse_rope_quant_scalars(fn, args, 6, args[13], &r) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[2],  args[3],  args[4],
                      args[5], args[9], args[10], args[11], args[12]};
  int slots[10];
  op_call c;
  if (rope_quant_begin(&c, fn, objs, names, 10, 0x3C0u, 0x3C0u, r.view, args[14], slots) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_rope_quantize_fp8(
      RQ_TENSOR(0), RQ_TENSOR(1), RQ_TENSOR(2), RQ_TENSOR(3), RQ_TENSOR(4), RQ_TENSOR(5), r.is_neox,
      (float)r.scale_q, (float)r.scale_kv, RQ_TENSOR(6), RQ_TENSOR(7), RQ_TENSOR(8), RQ_TENSOR(9), c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids, batch_indices, positions, k_cache,
 *  v_cache, kv_indices, kv_indptr, layout, is_neox, quant_scale_q, quant_scale_kv, q_rope_out,
 *  q_nope_out, out_view, stream); layout 0 NHD, 1 HND */
static PyObject *ext_rope_quantize_fp8_append_paged_kv_cache(PyObject *self, PyObject *const *args,
                                                             Py_ssize_t nargs) {
  static const char *const fn = "ignis.rope_quantize_fp8_append_paged_kv_cache";
  static const char *const names[] = {"q_rope",    "k_rope",        "q_nope",    "k_nope",
                                      "v",         "cos_sin_cache", "pos_ids",   "batch_indices",
                                      "positions", "k_cache",       "v_cache",   "kv_indices",
                                      "kv_indptr", "q_rope_out",    "q_nope_out"};
  rope_quant_scalars r;
  int64_t layout;
  if (check_nargs(fn, nargs, 21) < 0 || parse_int64(fn, "kv_layout", args[13], &layout) < 0 ||
      parse_rope_quant_scalars(fn, args, 14, args[19], &r) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[2],  args[3],  args[4],  args[5],  args[6], args[7],
                      args[8], args[9], args[10], args[11], args[12], args[17], args[18]};
  int slots[15];
  op_call c;
  const unsigned writable = 1u << 9 | 1u << 10 | 1u << 13 | 1u << 14;
  if (rope_quant_begin(&c, fn, objs, names, 15, writable, writable, r.view, args[20], slots) < 0)
    return NULL;
  ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT;
  cache.layout = (ignis_kv_layout)layout;
  cache.k_cache = *RQ_TENSOR(9);
  cache.v_cache = *RQ_TENSOR(10);
  cache.indices = *RQ_TENSOR(11);
  cache.indptr = *RQ_TENSOR(12);
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_rope_quantize_fp8_append_paged_kv_cache(
      RQ_TENSOR(0), RQ_TENSOR(1), RQ_TENSOR(2), RQ_TENSOR(3), RQ_TENSOR(4), RQ_TENSOR(5), RQ_TENSOR(6),
      RQ_TENSOR(7), RQ_TENSOR(8), &cache, r.is_neox, (float)r.scale_q, (float)r.scale_kv, RQ_TENSOR(13),
      RQ_TENSOR(14), c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, batch_indices, positions, ckv_cache,
 *  kpe_cache, kv_indices, kv_indptr, is_neox, quant_scale_q, quant_scale_kv, q_rope_out,
 *  q_nope_out, out_view, stream) */
static PyObject *ext_rope_quantize_fp8_append_paged_mla_kv_cache(PyObject *self, PyObject *const *args,
                                                                 Py_ssize_t nargs) {
  static const char *const fn = "ignis.rope_quantize_fp8_append_paged_mla_kv_cache";
  static const char *const names[] = {
      "q_rope",    "k_rope",    "q_nope",    "k_nope",     "cos_sin_cache", "pos_ids",    "batch_indices",
      "positions", "ckv_cache", "kpe_cache", "kv_indices", "kv_indptr",     "q_rope_out", "q_nope_out"};
  rope_quant_scalars r;
  if (check_nargs(fn, nargs, 19) < 0 || parse_rope_quant_scalars(fn, args, 12, args[17], &r) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[2], args[3],  args[4],  args[5],  args[6],
                      args[7], args[8], args[9], args[10], args[11], args[15], args[16]};
  int slots[14];
  op_call c;
  const unsigned writable = 1u << 8 | 1u << 9 | 1u << 12 | 1u << 13;
  if (rope_quant_begin(&c, fn, objs, names, 14, writable, writable, r.view, args[18], slots) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_rope_quantize_fp8_append_paged_mla_kv_cache(
      RQ_TENSOR(0), RQ_TENSOR(1), RQ_TENSOR(2), RQ_TENSOR(3), RQ_TENSOR(4), RQ_TENSOR(5), RQ_TENSOR(6),
      RQ_TENSOR(7), RQ_TENSOR(8), RQ_TENSOR(9), RQ_TENSOR(10), RQ_TENSOR(11), r.is_neox, (float)r.scale_q,
      (float)r.scale_kv, RQ_TENSOR(12), RQ_TENSOR(13), c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

#undef RQ_TENSOR

/* ---- paged KV cache ------------------------------------------------------------------------ */
/* FlashInfer's single cache tensor [pages, 2, ...] as two 4-D views: K at index 0 of dim 1, V at 1. */
static int split_combined_cache(const char *fn, const ignis_tensor *combined, ignis_tensor *k, ignis_tensor *v) {
  if (combined->ndim != 5 || combined->shape[1] != 2) {
    PyErr_Format(INVALID_ARGUMENT_ERROR,
                 "%s: paged_kv_cache must be a [num_pages, 2, ...] tensor (5-D) or a (k_cache, v_cache) "
                 "tuple, not a %d-D tensor with shape[1]=%lld",
                 fn, (int)combined->ndim, combined->ndim > 1 ? (long long)combined->shape[1] : -1LL);
    return -1;
  }
  *k = *combined;
  k->ndim = 4;
  for (int d = 1; d < 4; ++d) {
    k->shape[d] = combined->shape[d + 1];
    k->strides[d] = combined->strides[d + 1];
  }
  *v = *k;
  if (v->data)
    v->data = (char *)v->data + combined->strides[1] * (int64_t)ignis_dtype_size(combined->dtype);
  return 0;
}

/* (append_key, append_value, batch_indices, positions, k_cache_or_combined, v_cache_or_None,
 *  kv_indices, kv_indptr, kv_last_page_len, layout, stream); layout 0 NHD, 1 HND. */
static PyObject *ext_append_paged_kv_cache(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.append_paged_kv_cache";
  static const char *const names_split[] = {"append_key", "append_value", "batch_indices", "positions", "k_cache",
                                            "v_cache", "kv_indices", "kv_indptr", "kv_last_page_len"};
  static const char *const names_combined[] = {"append_key", "append_value", "batch_indices", "positions",
                                               "paged_kv_cache", "kv_indices", "kv_indptr", "kv_last_page_len"};
  int64_t layout = 0;
  if (check_nargs(fn, nargs, 11) < 0 || parse_int64(fn, "kv_layout", args[9], &layout) < 0)
    return NULL;
  int combined = args[5] == Py_None;
  PyObject *objs[9];
  int count = 0;
  for (int i = 0; i < 9; ++i)
    if (!(combined && i == 5))
      objs[count++] = args[i];
  unsigned writable = combined ? 1u << 4 : (1u << 4 | 1u << 5);
  op_call c;
  if (op_call_begin(&c, fn, objs, combined ? names_combined : names_split, count, writable, args[10]) < 0)
    return NULL;
  ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT;
  cache.layout = (ignis_kv_layout)layout;
  int tail = combined ? 5 : 6;
  if (combined) {
    if (split_combined_cache(fn, &c.tensors[4], &cache.k_cache, &cache.v_cache) < 0) {
      op_call_release(&c);
      return NULL;
    }
  } else {
    cache.k_cache = c.tensors[4];
    cache.v_cache = c.tensors[5];
  }
  cache.indices = c.tensors[tail];
  cache.indptr = c.tensors[tail + 1];
  cache.last_page_len = c.tensors[tail + 2];
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_append_paged_kv_cache(&c.tensors[0], &c.tensors[1], &c.tensors[2], &c.tensors[3], &cache, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (append_indptr, seq_lens, batch_indices, positions, stream) */
static PyObject *ext_get_batch_indices_positions(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.get_batch_indices_positions";
  static const char *const names[] = {"append_indptr", "seq_lens", "batch_indices", "positions"};
  if (check_nargs(fn, nargs, 5) < 0)
    return NULL;
  op_call c;
  if (op_call_begin(&c, fn, args, names, 4, 1u << 2 | 1u << 3, args[4]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_get_batch_indices_positions(&c.tensors[0], &c.tensors[1], &c.tensors[2], &c.tensors[3], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (kv_indptr, kv_last_page_len, page_size, seq_lens, stream) */
static PyObject *ext_get_seq_lens(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.get_seq_lens";
  static const char *const names[] = {"kv_indptr", "kv_last_page_len", "seq_lens"};
  int64_t page_size = 0;
  if (check_nargs(fn, nargs, 5) < 0 || parse_int64(fn, "page_size", args[2], &page_size) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[3]};
  op_call c;
  if (op_call_begin(&c, fn, objs, names, 3, 1u << 2, args[4]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_get_seq_lens(&c.tensors[0], &c.tensors[1], page_size, &c.tensors[2], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* ---- cascade: merging attention states ------------------------------------------------------ */
static int parse_lse_base(const char *fn, PyObject *arg, ignis_lse_base *base) {
  int64_t value;
  if (parse_int64(fn, "lse_base", arg, &value) < 0)
    return -1;
  *base = (ignis_lse_base)value;
  return 0;
}

/* (v_a, s_a, v_b, s_b, lse_base, v_out, s_out, stream) */
static PyObject *ext_merge_state(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.merge_state";
  static const char *const names[] = {"v_a", "s_a", "v_b", "s_b", "v_out", "s_out"};
  ignis_lse_base base;
  if (check_nargs(fn, nargs, 8) < 0 || parse_lse_base(fn, args[4], &base) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[2], args[3], args[5], args[6]};
  op_call c;
  if (op_call_begin(&c, fn, objs, names, 6, 1u << 4 | 1u << 5, args[7]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_merge_state(&c.tensors[0], &c.tensors[1], &c.tensors[2], &c.tensors[3], base,
                                                    &c.tensors[4], &c.tensors[5], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (v, s, v_other, s_other, mask_or_None, lse_base, stream) */
static PyObject *ext_merge_state_in_place(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.merge_state_in_place";
  static const char *const names[] = {"v", "s", "v_other", "s_other", "mask"};
  ignis_lse_base base;
  if (check_nargs(fn, nargs, 7) < 0 || parse_lse_base(fn, args[5], &base) < 0)
    return NULL;
  int has_mask = args[4] != Py_None;
  op_call c;
  if (op_call_begin(&c, fn, args, names, has_mask ? 5 : 4, 1u << 0 | 1u << 1, args[6]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_merge_state_in_place(&c.tensors[0], &c.tensors[1], &c.tensors[2], &c.tensors[3],
                                                             has_mask ? &c.tensors[4] : NULL, base, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (v, s, lse_base, v_out, s_out, stream) */
static PyObject *ext_merge_states(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.merge_states";
  static const char *const names[] = {"v", "s", "v_out", "s_out"};
  ignis_lse_base base;
  if (check_nargs(fn, nargs, 6) < 0 || parse_lse_base(fn, args[2], &base) < 0)
    return NULL;
  PyObject *objs[] = {args[0], args[1], args[3], args[4]};
  op_call c;
  if (op_call_begin(&c, fn, objs, names, 4, 1u << 2 | 1u << 3, args[5]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_merge_states(&c.tensors[0], &c.tensors[1], base, &c.tensors[2], &c.tensors[3], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* ---- decode attention ------------------------------------------------------------------------ */
_Static_assert(sizeof(ignis_dtype) == sizeof(int32_t) && sizeof(ignis_device_type) == sizeof(int32_t) &&
                   sizeof(ignis_kv_layout) == sizeof(int32_t) && sizeof(ignis_lse_base) == sizeof(int32_t) &&
                   sizeof(ignis_pos_encoding) == sizeof(int32_t) &&
                   sizeof(ignis_mask_mode) == sizeof(int32_t) &&
                   sizeof(ignis_prefill_kv_kind) == sizeof(int32_t) &&
                   sizeof(ignis_filter_apply_order) == sizeof(int32_t),
               "ARG_ENUM stores an int32_t");

/* K/V (or q) handed over as a uint8 view of fp8 data: the view must be an fp8 dtype (-1: none). */
static int check_fp8_view(const char *fn, const char *name, int64_t view) {
  if (view != -1 && view != IGNIS_FP8_E4M3 && view != IGNIS_FP8_E5M2) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: %s=%lld must be None or an fp8 dtype", fn, name, (long long)view);
    return -1;
  }
  return 0;
}

int parse_attention_args(const char *fn, arg_table *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                         attention_args *a) {
  ignis_attention_options options = IGNIS_ATTENTION_OPTIONS_INIT;
  ignis_attention_extras extras = IGNIS_ATTENTION_EXTRAS_INIT;
  *a = (attention_args){.kv_layout = IGNIS_KV_LAYOUT_NHD,
                        .mask_mode = IGNIS_MASK_NONE,
                        .kv_view = -1,
                        .q_view = -1,
                        .options = options,
                        .extras = extras};
  a->plan = a->q = a->k = a->v = a->out = a->lse = a->workspace = a->custom_mask = a->kv_indptr =
      a->kv_indices = a->kv_last_page_len = a->block_tables = a->seq_lens = a->sinks = a->stream = Py_None;
  if (parse_args(fn, t, args, nargs, kwnames, a) < 0)
    return -1;
  return check_fp8_view(fn, "kv_view", a->kv_view) < 0 ? -1 : check_fp8_view(fn, "q_view", a->q_view);
}

/* Append obj (unless None); returns its slot, or -1 for None. */
int tensor_list_add(tensor_list *l, PyObject *obj, const char *name) {
  if (obj == Py_None)
    return -1;
  l->objs[l->count] = obj;
  l->names[l->count] = name;
  return l->count++;
}

int apply_fp8_view(const char *fn, int64_t view, ignis_tensor *t, const char *name) {
  if (view < 0 || !t)
    return 0;
  if (t->dtype != IGNIS_U8) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: %s must be the uint8 view of an fp8 array", fn, name);
    return -1;
  }
  t->dtype = (ignis_dtype)view;
  return 0;
}

/* Bytes of a contiguous workspace tensor (0 for None). */
int workspace_of(const char *fn, const ignis_tensor *t, void **data, size_t *bytes) {
  if (!ignis_tensor_is_contiguous(t)) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: the workspace buffer must be contiguous", fn);
    return -1;
  }
  *data = t->data;
  *bytes = (size_t)ignis_tensor_numel(t) * ignis_dtype_size(t->dtype);
  return 0;
}

/* Contiguous k / v of an attention call: the workspace (slot ws_at, -1: none) and the fp8 views of
 * q and of k and v. On error the call is released and -1 returned. */
static int kv_pair_inputs(const char *fn, op_call *c, int ws_at, int64_t kv_view, int64_t q_view, int q_at,
                          int k_at, int v_at, void **ws, size_t *ws_bytes) {
  *ws = NULL;
  *ws_bytes = 0;
  if ((ws_at >= 0 && workspace_of(fn, &c->tensors[ws_at], ws, ws_bytes) < 0) ||
      apply_fp8_view(fn, q_view, &c->tensors[q_at], "q") < 0 ||
      apply_fp8_view(fn, kv_view, &c->tensors[k_at], "k") < 0 ||
      apply_fp8_view(fn, kv_view, &c->tensors[v_at], "v") < 0) {
    op_call_release(c);
    return -1;
  }
  return 0;
}

static kv_pair_slots kv_pair_tensors(tensor_list *l, const attention_args *a) {
  kv_pair_slots s;
  s.q = tensor_list_add(l, a->q, "q");
  s.k = tensor_list_add(l, a->k, "k");
  s.v = tensor_list_add(l, a->v, "v");
  s.custom_mask = tensor_list_add(l, a->custom_mask, "custom_mask");
  s.out = tensor_list_add(l, a->out, "out");
  s.lse = tensor_list_add(l, a->lse, "lse");
  s.workspace = tensor_list_add(l, a->workspace, "workspace");
  s.sinks = tensor_list_add(l, a->sinks, "sinks");
  return s;
}

int kv_pair_call_begin(const char *fn, attention_args *a, op_call *c, kv_pair_slots *s, void **ws,
                       size_t *ws_bytes) {
  tensor_list l = {.count = 0};
  *s = kv_pair_tensors(&l, a);
  if (op_call_begin(c, fn, l.objs, l.names, l.count, slot_bit(s->out) | slot_bit(s->lse), a->stream) < 0 ||
      kv_pair_inputs(fn, c, s->workspace, a->kv_view, a->q_view, s->q, s->k, s->v, ws, ws_bytes) < 0)
    return -1;
  a->extras.sinks = s->sinks >= 0 ? &c->tensors[s->sinks] : NULL;
  return 0;
}

/* Add a paged-cache run's tensors from *a to l (its workspace and custom mask are the caller's). */
static paged_run_slots paged_run_tensors(tensor_list *l, const attention_args *a) {
  paged_run_slots s;
  s.combined = a->v == Py_None;
  s.q = tensor_list_add(l, a->q, "q");
  s.k = tensor_list_add(l, a->k, s.combined ? "paged_kv_cache" : "k_cache");
  s.v = tensor_list_add(l, a->v, "v_cache");
  s.indptr = tensor_list_add(l, a->kv_indptr, "kv_indptr");
  s.indices = tensor_list_add(l, a->kv_indices, "kv_indices");
  s.last_page_len = tensor_list_add(l, a->kv_last_page_len, "kv_last_page_len");
  s.out = tensor_list_add(l, a->out, "out");
  s.lse = tensor_list_add(l, a->lse, "lse");
  s.sinks = tensor_list_add(l, a->sinks, "sinks");
  return s;
}

/* The K / V tensors of a paged cache: k_at the combined cache (combined) or the K cache beside the
 * V cache at v_at, with the fp8 view applied. Returns -1 with the error set (the caller releases). */
int paged_kv_tensors(const char *fn, op_call *c, int64_t kv_view, int k_at, const char *k_name, int v_at, int combined,
                     ignis_paged_kv_cache *cache) {
  if (apply_fp8_view(fn, kv_view, &c->tensors[k_at], k_name) < 0 ||
      (v_at >= 0 && apply_fp8_view(fn, kv_view, &c->tensors[v_at], "v_cache") < 0))
    return -1;
  if (combined)
    return split_combined_cache(fn, &c->tensors[k_at], &cache->k_cache, &cache->v_cache);
  cache->k_cache = c->tensors[k_at];
  cache->v_cache = c->tensors[v_at];
  return 0;
}

int paged_run_begin(const char *fn, attention_args *a, op_call *c, paged_run_slots *s,
                    ignis_paged_kv_cache *cache, void **ws, size_t *ws_bytes) {
  static const ignis_paged_kv_cache init = IGNIS_PAGED_KV_CACHE_INIT;
  tensor_list l = {.count = 0};
  *s = paged_run_tensors(&l, a);
  int ws_at = tensor_list_add(&l, a->workspace, "workspace");
  if (op_call_begin(c, fn, l.objs, l.names, l.count, slot_bit(s->out) | slot_bit(s->lse), a->stream) < 0)
    return -1;
  *cache = init;
  cache->layout = a->kv_layout;
  *ws = NULL;
  *ws_bytes = 0;
  if (apply_fp8_view(fn, a->q_view, &c->tensors[s->q], "q") < 0 ||
      paged_kv_tensors(fn, c, a->kv_view, s->k, l.names[s->k], s->v, s->combined, cache) < 0 ||
      (ws_at >= 0 && workspace_of(fn, &c->tensors[ws_at], ws, ws_bytes) < 0)) {
    op_call_release(c);
    return -1;
  }
  cache->indices = c->tensors[s->indices];
  if (s->indptr >= 0 && s->last_page_len >= 0) {
    cache->indptr = c->tensors[s->indptr];
    cache->last_page_len = c->tensors[s->last_page_len];
  }
  a->extras.sinks = s->sinks >= 0 ? &c->tensors[s->sinks] : NULL;
  return 0;
}

int plan_update_workspace(const char *fn, PyObject *workspace, PyObject *stream_arg, op_call *c, void **ws,
                          size_t *ws_bytes, void **stream) {
  static const char *const name[] = {"float_workspace_buffer"};
  c->count = 0;
  *ws = NULL;
  *ws_bytes = 0;
  *stream = NULL;
  if (workspace == Py_None)
    return stream_arg == Py_None ? 0 : parse_stream(fn, stream_arg, stream);
  if (op_call_begin(c, fn, &workspace, name, 1, 0, stream_arg) < 0) {
    c->count = 0;
    return -1;
  }
  *stream = c->stream;
  if (workspace_of(fn, &c->tensors[0], ws, ws_bytes) < 0) {
    op_call_release(c);
    c->count = 0;
    return -1;
  }
  return 0;
}

/* (num_qo_heads, head_dim, max_kv_len) -> bytes */
static PyObject *ext_single_decode_workspace_size(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.single_decode_workspace_size";
  static const char *const names[] = {"num_qo_heads", "head_dim", "max_kv_len"};
  int64_t v[3];
  if (check_nargs(fn, nargs, 3) < 0 || parse_int64_args(fn, args, names, 3, v) < 0)
    return NULL;
  size_t bytes = 0;
  return bytes_or_raise(ignis_single_decode_workspace_size(v[0], v[1], v[2], &bytes), &bytes);
}

static arg_spec single_decode_spec[] = {ARG(attention_args, q, ARG_REQUIRED),
                                        ARG(attention_args, k, ARG_REQUIRED),
                                        ARG(attention_args, v, ARG_REQUIRED),
                                        ARG(attention_args, out, ARG_REQUIRED),
                                        ARG(attention_args, lse, ARG_OBJECT),
                                        ARG(attention_args, workspace, ARG_OBJECT),
                                        ARG(attention_args, kv_layout, ARG_ENUM),
                                        ARG(attention_args, options, ARG_OPTIONS),
                                        ATTENTION_EXTRA_ARGS};
static arg_table single_decode_args = ARG_TABLE(single_decode_spec);

static PyObject *ext_single_decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames) {
  static const char *const fn = "ignis.single_decode_with_kv_cache";
  attention_args a;
  if (parse_attention_args(fn, &single_decode_args, args, nargs, kwnames, &a) < 0)
    return NULL;
  op_call c;
  kv_pair_slots s;
  void *ws;
  size_t ws_bytes;
  if (kv_pair_call_begin(fn, &a, &c, &s, &ws, &ws_bytes) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_single_decode(
      &c.tensors[s.q], &c.tensors[s.k], &c.tensors[s.v], a.kv_layout, &a.options, &a.extras,
      &c.tensors[s.out], s.lse >= 0 ? &c.tensors[s.lse] : NULL, ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* A decode plan travels as a capsule holding the plan and the maxima it was made for, so that
 * decode_plan_update can tell a batch past them (the caller builds a larger plan) from a bad one. */
#define DECODE_PLAN_CAPSULE "ignis.decode_plan"

typedef struct {
  ignis_decode_plan *plan;
  int64_t page_size;
  int64_t max_batch_size;
  int64_t max_kv_len;
} decode_plan_handle;

/* A plan capsule's destructor: its plan_kind rides in the capsule's context. */
static void plan_capsule_destroy(PyObject *capsule) {
  const plan_kind *kind = PyCapsule_GetContext(capsule);
  void *plan = kind ? PyCapsule_GetPointer(capsule, kind->capsule_name) : NULL;
  if (!plan) {
    PyErr_Clear();
    return;
  }
  kind->destroy(plan);
}

PyObject *plan_capsule_new(const plan_kind *kind, ignis_status status, void *plan) {
  if (status != IGNIS_OK) {
    raise_status(status, ignis_last_error());
    return NULL;
  }
  PyObject *capsule = PyCapsule_New(plan, kind->capsule_name, NULL);
  if (!capsule) {
    kind->destroy(plan);
    return NULL;
  }
  PyCapsule_SetContext(capsule, (void *)kind);
  PyCapsule_SetDestructor(capsule, plan_capsule_destroy);
  return capsule;
}

void *plan_capsule_of(const char *fn, PyObject *obj, const plan_kind *kind) {
  void *ptr = PyCapsule_IsValid(obj, kind->capsule_name) ? PyCapsule_GetPointer(obj, kind->capsule_name) : NULL;
  if (!ptr)
    raise_type("%s: plan must be a %s", fn, kind->maker);
  return ptr;
}

static void decode_plan_free(void *plan) {
  decode_plan_handle *handle = plan;
  ignis_decode_plan_destroy(handle->plan);
  PyMem_RawFree(handle);
}

static const plan_kind decode_plan_kind = {DECODE_PLAN_CAPSULE, "decode plan made by decode_plan_create",
                                           decode_plan_free};

static decode_plan_handle *decode_plan_of(const char *fn, PyObject *obj) {
  return plan_capsule_of(fn, obj, &decode_plan_kind);
}

/* The fields of ignis_decode_plan_config, by their names in decode.h. */
static arg_spec decode_plan_spec[] = {DEVICE_ARGS(ignis_decode_plan_config, device),
                                      ARG(ignis_decode_plan_config, num_qo_heads, ARG_INT64),
                                      ARG(ignis_decode_plan_config, num_kv_heads, ARG_INT64),
                                      ARG(ignis_decode_plan_config, head_dim, ARG_INT64),
                                      ARG(ignis_decode_plan_config, page_size, ARG_INT64),
                                      ARG(ignis_decode_plan_config, q_dtype, ARG_ENUM),
                                      ARG(ignis_decode_plan_config, kv_dtype, ARG_ENUM),
                                      ARG(ignis_decode_plan_config, q_len_per_req, ARG_INT64),
                                      ARG(ignis_decode_plan_config, max_batch_size, ARG_INT64),
                                      ARG(ignis_decode_plan_config, max_kv_len, ARG_INT64),
                                      ARG(ignis_decode_plan_config, disable_split_kv, ARG_BOOL),
                                      ARG(ignis_decode_plan_config, fixed_split_size, ARG_INT64),
                                      ARG(ignis_decode_plan_config, options, ARG_OPTIONS),
                                      ARG(ignis_decode_plan_config, o_dtype, ARG_ENUM)};
static arg_table decode_plan_args = ARG_TABLE(decode_plan_spec);

/* A decode plan config from keywords (fields not given keep IGNIS_DECODE_PLAN_CONFIG_INIT's values). */
static int parse_decode_plan_config(const char *fn, PyObject *const *kwargs, PyObject *kwnames,
                                    ignis_decode_plan_config *config) {
  ignis_decode_plan_config init = IGNIS_DECODE_PLAN_CONFIG_INIT;
  *config = init;
  return parse_args(fn, &decode_plan_args, kwargs, 0, kwnames, config);
}

/* (**config) -> plan capsule */
static PyObject *ext_decode_plan_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                        PyObject *kwnames) {
  static const char *const fn = "ignis.BatchDecodeWithPagedKVCacheWrapper.plan";
  ignis_decode_plan_config config;
  if (check_nargs(fn, nargs, 0) < 0 || parse_decode_plan_config(fn, args, kwnames, &config) < 0)
    return NULL;
  decode_plan_handle *handle = PyMem_RawCalloc(1, sizeof *handle);
  if (!handle)
    return PyErr_NoMemory();
  ignis_status status = ignis_decode_plan_create(&config, &handle->plan);
  if (status != IGNIS_OK) {
    PyMem_RawFree(handle);
    raise_status(status, ignis_last_error());
    return NULL;
  }
  handle->page_size = config.page_size;
  handle->max_batch_size = config.max_batch_size;
  handle->max_kv_len = config.max_kv_len;
  return plan_capsule_new(&decode_plan_kind, IGNIS_OK, handle);
}

/* (workspace_bytes, **config) -> the largest max_kv_len whose plan fits (-1: none) */
static PyObject *ext_decode_max_kv_len_for_workspace(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                                     PyObject *kwnames) {
  static const char *const fn = "ignis.BatchDecodeWithPagedKVCacheWrapper.plan";
  ignis_decode_plan_config config;
  int64_t bytes = 0, max_kv_len = 0;
  if (check_nargs(fn, nargs, 1) < 0 || parse_int64(fn, "workspace_bytes", args[0], &bytes) < 0 ||
      parse_decode_plan_config(fn, args + 1, kwnames, &config) < 0)
    return NULL;
  if (bytes < 0) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: workspace_bytes=%lld must be >= 0", fn, (long long)bytes);
    return NULL;
  }
  ignis_status status = ignis_decode_max_kv_len_for_workspace(&config, (size_t)bytes, &max_kv_len);
  if (status != IGNIS_OK) {
    raise_status(status, ignis_last_error());
    return NULL;
  }
  return PyLong_FromLongLong(max_kv_len);
}

void host_i32_release(host_i32 *a) {
  if (a->has_buffer)
    PyBuffer_Release(&a->buffer);
  a->has_buffer = 0;
}

static int is_native_i32_format(const char *format, Py_ssize_t itemsize) {
  if (itemsize != 4 || !format)
    return 0;
  if (*format == '@' || *format == '=' || (*format == '<' && PY_LITTLE_ENDIAN) ||
      (*format == '>' && !PY_LITTLE_ENDIAN))
    ++format;
  return (format[0] == 'i' || format[0] == 'l') && format[1] == '\0';
}

/* 1: read into *a; 0: obj is not such an array (another device, dtype, shape or type: the caller
 * converts it). */
int read_host_i32(PyObject *obj, int writable, host_i32 *a) {
  type_facts scratch;
  type_facts *facts = facts_of(Py_TYPE(obj), &scratch);
  a->has_buffer = 0;
  if (facts->api) {
    dl_tensor dl;
    if (facts->api->dltensor_from_py_object_no_sync(obj, &dl) != 0) {
      PyErr_Clear();
      return 0;
    }
    int host = dl.device.device_type == DL_CPU || dl.device.device_type == DL_CUDA_HOST;
    if (!host || dl.ndim != 1 || dl.dtype.code != DL_INT || dl.dtype.bits != 32 || dl.dtype.lanes != 1 ||
        (dl.strides && dl.shape[0] > 1 && dl.strides[0] != 1))
      return 0;
    a->data = (int32_t *)((char *)dl.data + dl.byte_offset);
    a->len = dl.shape[0];
    return 1;
  }
  if (!PyObject_CheckBuffer(obj))
    return 0;
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, &a->buffer, flags) != 0) {
    PyErr_Clear();
    return 0;
  }
  a->has_buffer = 1;
  if (a->buffer.ndim != 1 || !is_native_i32_format(a->buffer.format, a->buffer.itemsize)) {
    host_i32_release(a);
    return 0;
  }
  a->data = a->buffer.buf;
  a->len = a->buffer.shape[0];
  return 1;
}

/* What decode_plan_update answers when it did nothing: _ext.PlanUpdateDeclined(host_copy_needed,
 * batch_size, longest_kv_len). host_copy_needed: an index array is not a contiguous int32 host
 * array (convert it and call again; the sizes are -1, unread); else the batch is past the plan's
 * maxima (make a larger plan). Planned batches answer a plain int, so that plan()'s fast path
 * tests one type. */
static PyTypeObject *plan_update_declined_type;

static PyStructSequence_Field plan_update_declined_fields[] = {
    {"host_copy_needed", "an index array must first be copied to the host as int32"},
    {"batch_size", "the batch's requests (-1 with host_copy_needed)"},
    {"longest_kv_len", "the batch's longest request in keys (-1 with host_copy_needed)"},
    {NULL, NULL}};

static PyStructSequence_Desc plan_update_declined_desc = {"ignis._ext.PlanUpdateDeclined",
                                                          "Why decode_plan_update planned nothing.",
                                                          plan_update_declined_fields, 3};

static PyObject *plan_update_declined(int host_copy_needed, int64_t batch, int64_t longest) {
  PyObject *result = PyStructSequence_New(plan_update_declined_type);
  if (!result)
    return NULL;
  PyObject *flag = PyBool_FromLong(host_copy_needed), *b = PyLong_FromLongLong(batch);
  PyObject *l = PyLong_FromLongLong(longest);
  if (!b || !l) {
    Py_XDECREF(b);
    Py_XDECREF(l);
    Py_DECREF(flag);
    Py_DECREF(result);
    return NULL;
  }
  PyStructSequence_SetItem(result, 0, flag);
  PyStructSequence_SetItem(result, 1, b);
  PyStructSequence_SetItem(result, 2, l);
  return result;
}

/* (plan, kv_indptr, kv_last_page_len, workspace_or_None, graph_buffers_or_None, stream): plan_update
 * straight from host arrays (the fast path of plan()). kv_indptr and kv_last_page_len are read in
 * place when they are 1-D contiguous int32 host arrays; graph_buffers, a CUDA-graph wrapper's
 * (indptr_buffer, last_page_len_buffer) device tensors, receive the planned arrays by
 * ignis_decode_plan_copy_index_arrays on the update's stream. Returns the batch size when planned,
 * else a PlanUpdateDeclined (nothing done). */
static PyObject *ext_decode_plan_update(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.BatchDecodeWithPagedKVCacheWrapper.plan";
  if (check_nargs(fn, nargs, 6) < 0)
    return NULL;
  decode_plan_handle *handle = decode_plan_of(fn, args[0]);
  if (!handle)
    return NULL;
  host_i32 indptr, last;
  if (!read_host_i32(args[1], 0, &indptr))
    return plan_update_declined(1, -1, -1);
  if (!read_host_i32(args[2], 0, &last)) {
    host_i32_release(&indptr);
    return plan_update_declined(1, -1, -1);
  }
  PyObject *result = NULL;
  int64_t batch = indptr.len - 1;
  if (batch < 0 || last.len != batch) {
    PyErr_Format(INVALID_ARGUMENT_ERROR,
                 "%s: last_page_len has %lld entries but indptr (%lld entries) describes %lld requests", fn,
                 (long long)last.len, (long long)indptr.len, (long long)(batch < 0 ? 0 : batch));
    goto done;
  }
  int64_t longest = ignis_paged_kv_longest(indptr.data, last.data, batch, handle->page_size);
  if (batch > handle->max_batch_size || longest > handle->max_kv_len) {
    result = plan_update_declined(0, batch, longest);
    goto done;
  }
  void *ws, *stream;
  size_t ws_bytes;
  op_call c, buffers;
  buffers.count = 0;
  if (args[4] != Py_None) {
    static const char *const names[] = {"paged_kv_indptr_buffer", "paged_kv_last_page_len_buffer"};
    PyObject *objs[2];
    if (!PyTuple_Check(args[4]) || PyTuple_GET_SIZE(args[4]) != 2) {
      raise_type("%s: graph_buffers must be a (indptr_buffer, last_page_len_buffer) tuple", fn);
      goto done;
    }
    objs[0] = PyTuple_GET_ITEM(args[4], 0);
    objs[1] = PyTuple_GET_ITEM(args[4], 1);
    if (op_call_begin(&buffers, fn, objs, names, 2, 3u, args[5]) < 0) {
      buffers.count = 0;
      goto done;
    }
  }
  if (plan_update_workspace(fn, args[3], args[5], &c, &ws, &ws_bytes, &stream) < 0) {
    if (buffers.count)
      op_call_release(&buffers);
    goto done;
  }
  PyThreadState *thread = PyEval_SaveThread();
  ignis_status status =
      ignis_decode_plan_update(handle->plan, indptr.data, last.data, batch, ws, ws_bytes, stream);
  if (status == IGNIS_OK && buffers.count)
    status = ignis_decode_plan_copy_index_arrays(handle->plan, &buffers.tensors[0], &buffers.tensors[1], stream);
  PyEval_RestoreThread(thread);
  if (c.count)
    op_call_release(&c);
  if (buffers.count)
    op_call_release(&buffers);
  if (status != IGNIS_OK)
    raise_status(status, ignis_last_error());
  else
    result = PyLong_FromLongLong(batch);
done:
  host_i32_release(&last);
  host_i32_release(&indptr);
  return result;
}

/* k_cache is the combined [pages, 2, ...] cache when v_cache is None; kv_indptr and
 * kv_last_page_len None: the plan's copies in the workspace, uploaded with the schedule. */
static arg_spec decode_run_spec[] = {ARG(attention_args, plan, ARG_REQUIRED),
                                     ARG(attention_args, q, ARG_REQUIRED),
                                     ARG_NAMED("k_cache", attention_args, k, ARG_REQUIRED),
                                     ARG_NAMED("v_cache", attention_args, v, ARG_OBJECT),
                                     ARG(attention_args, out, ARG_REQUIRED),
                                     ARG(attention_args, kv_indices, ARG_REQUIRED),
                                     ARG(attention_args, kv_indptr, ARG_OBJECT),
                                     ARG(attention_args, kv_last_page_len, ARG_OBJECT),
                                     ARG(attention_args, lse, ARG_OBJECT),
                                     ARG(attention_args, workspace, ARG_OBJECT),
                                     ARG(attention_args, kv_layout, ARG_ENUM),
                                     ATTENTION_EXTRA_ARGS};
static arg_table decode_run_args = ARG_TABLE(decode_run_spec);

static PyObject *ext_decode_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const fn = "ignis.BatchDecodeWithPagedKVCacheWrapper.run";
  attention_args a;
  if (parse_attention_args(fn, &decode_run_args, args, nargs, kwnames, &a) < 0)
    return NULL;
  decode_plan_handle *handle = decode_plan_of(fn, a.plan);
  if (!handle)
    return NULL;
  op_call c;
  paged_run_slots s;
  ignis_paged_kv_cache cache;
  void *ws;
  size_t ws_bytes;
  if (paged_run_begin(fn, &a, &c, &s, &cache, &ws, &ws_bytes) < 0)
    return NULL;
  ignis_status status = IGNIS_OK;
  if (s.indptr < 0 || s.last_page_len < 0) /* the plan's copies in the workspace */
    status = ignis_decode_plan_index_views(handle->plan, ws, ws_bytes, &cache.indptr, &cache.last_page_len);
  if (status != IGNIS_OK)
    return op_call_finish(&c, status);
  Py_BEGIN_ALLOW_THREADS status =
      ignis_decode_run(handle->plan, &c.tensors[s.q], &cache, &a.extras, &c.tensors[s.out],
                       s.lse >= 0 ? &c.tensors[s.lse] : NULL, ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* The block-table run (ignis_decode_run_block_table): k_cache is the combined [pages, 2, ...]
 * cache when v_cache is None. */
static arg_spec decode_block_table_spec[] = {ARG(attention_args, plan, ARG_REQUIRED),
                                             ARG(attention_args, q, ARG_REQUIRED),
                                             ARG_NAMED("k_cache", attention_args, k, ARG_REQUIRED),
                                             ARG_NAMED("v_cache", attention_args, v, ARG_OBJECT),
                                             ARG(attention_args, out, ARG_REQUIRED),
                                             ARG(attention_args, block_tables, ARG_REQUIRED),
                                             ARG(attention_args, seq_lens, ARG_REQUIRED),
                                             ARG(attention_args, max_seq_len, ARG_INT64),
                                             ARG(attention_args, lse, ARG_OBJECT),
                                             ARG(attention_args, workspace, ARG_OBJECT),
                                             ARG(attention_args, kv_layout, ARG_ENUM),
                                             ATTENTION_EXTRA_ARGS};
static arg_table decode_block_table_args = ARG_TABLE(decode_block_table_spec);

/* Gathers a block-table run's tensors (decode's; prefill's also takes `cum_seq_lens_q`, else
 * NULL), begins the op call, and fills `cache`, the workspace and a->extras.sinks. On failure it
 * returns -1 with the call released and the error set. */
int block_table_run_begin(const char *fn, attention_args *a, PyObject *cum_seq_lens_q, op_call *c,
                          block_table_slots *s, ignis_block_table_kv_cache *cache, void **ws, size_t *ws_bytes) {
  static const ignis_block_table_kv_cache init = IGNIS_BLOCK_TABLE_KV_CACHE_INIT;
  tensor_list l = {.count = 0};
  const int combined = a->v == Py_None;
  s->q = tensor_list_add(&l, a->q, "q");
  const int k = tensor_list_add(&l, a->k, combined ? "kv_cache" : "k_cache");
  const int v = tensor_list_add(&l, a->v, "v_cache");
  s->out = tensor_list_add(&l, a->out, "out");
  const int table = tensor_list_add(&l, a->block_tables, "block_tables");
  const int lens = tensor_list_add(&l, a->seq_lens, "seq_lens");
  s->cum_seq_lens_q = cum_seq_lens_q ? tensor_list_add(&l, cum_seq_lens_q, "cum_seq_lens_q") : -1;
  s->lse = tensor_list_add(&l, a->lse, "lse");
  const int sinks = tensor_list_add(&l, a->sinks, "sinks"), ws_at = tensor_list_add(&l, a->workspace, "workspace");
  if (op_call_begin(c, fn, l.objs, l.names, l.count, slot_bit(s->out) | slot_bit(s->lse), a->stream) < 0)
    return -1;
  ignis_paged_kv_cache kv = IGNIS_PAGED_KV_CACHE_INIT;
  *ws = NULL;
  *ws_bytes = 0;
  if (apply_fp8_view(fn, a->q_view, &c->tensors[s->q], "q") < 0 ||
      paged_kv_tensors(fn, c, a->kv_view, k, l.names[k], v, combined, &kv) < 0 ||
      (ws_at >= 0 && workspace_of(fn, &c->tensors[ws_at], ws, ws_bytes) < 0)) {
    op_call_release(c);
    return -1;
  }
  *cache = init;
  cache->layout = a->kv_layout;
  cache->k_cache = kv.k_cache;
  cache->v_cache = kv.v_cache;
  cache->block_tables = c->tensors[table];
  cache->seq_lens = c->tensors[lens];
  a->extras.sinks = sinks >= 0 ? &c->tensors[sinks] : NULL;
  return 0;
}

static PyObject *ext_decode_run_block_table(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                            PyObject *kwnames) {
  static const char *const fn = "ignis.decode_run_block_table";
  attention_args a;
  if (parse_attention_args(fn, &decode_block_table_args, args, nargs, kwnames, &a) < 0)
    return NULL;
  decode_plan_handle *handle = decode_plan_of(fn, a.plan);
  if (!handle)
    return NULL;
  op_call c;
  block_table_slots s;
  ignis_block_table_kv_cache cache;
  void *ws;
  size_t ws_bytes;
  if (block_table_run_begin(fn, &a, NULL, &c, &s, &cache, &ws, &ws_bytes) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_decode_run_block_table(handle->plan, &c.tensors[s.q], &cache, a.max_seq_len, &a.extras, &c.tensors[s.out],
                                   s.lse >= 0 ? &c.tensors[s.lse] : NULL, ws, ws_bytes, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* ---- library facts and setup ---------------------------------------------------------------- */
static PyObject *ext_version(PyObject *self, PyObject *unused) {
  return PyUnicode_FromString(ignis_version_string());
}

static PyObject *ext_build_info(PyObject *self, PyObject *unused) {
  return PyUnicode_FromString(ignis_build_info());
}

static PyObject *ext_cuda_device_count(PyObject *self, PyObject *unused) {
  return PyLong_FromLong(ignis_cuda_device_count());
}

/* (device_type, device_id) -> dict of ignis_device_info's fields by name (device_type an
 * ignis_device_type value). */
static PyObject *ext_device_info(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.device_info";
  int64_t type = 0, id = 0;
  if (check_nargs(fn, nargs, 2) < 0 || parse_int64(fn, "device_type", args[0], &type) < 0 ||
      parse_int64(fn, "device_id", args[1], &id) < 0)
    return NULL;
  if ((type != IGNIS_DEVICE_CPU && type != IGNIS_DEVICE_CUDA) || id < 0 || id > INT32_MAX) {
    raise_status(IGNIS_ERROR_INVALID_ARGUMENT, "ignis.device_info: no such device (device_type, device_id)");
    return NULL;
  }
  ignis_device device = {(ignis_device_type)type, (int32_t)id};
  ignis_device_info info = IGNIS_DEVICE_INFO_INIT;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_get_device_info(device, &info);
  Py_END_ALLOW_THREADS if (status != IGNIS_OK) {
    raise_status(status, ignis_last_error());
    return NULL;
  }
  return Py_BuildValue("{s:s,s:i,s:i,s:L,s:L,s:L}", "name", info.name, "compute_capability",
                       (int)info.compute_capability, "multiprocessor_count", (int)info.multiprocessor_count,
                       "l2_cache_bytes", (long long)info.l2_cache_bytes, "shared_memory_per_block_optin",
                       (long long)info.shared_memory_per_block_optin, "global_memory_bytes",
                       (long long)info.global_memory_bytes);
}

/* The status value of a C status name ("IGNIS_ERROR_CUDA"), or -1. */
static int status_named(const char *name) {
#define STATUS_NAMED(status, value, message)                                                                 \
  if (strcmp(name, #status) == 0)                                                                            \
    return status;
  IGNIS_STATUS_MAP(STATUS_NAMED)
#undef STATUS_NAMED
  return -1;
}

/* _set_error_classes(classes, argument_type_error, dtype_error): each class in the tuple is raised
 * for the status its `status` attribute names (ignis/_errors.py). */
static PyObject *ext_set_error_classes(PyObject *self, PyObject *args) {
  PyObject *classes, *arg_error, *dt_error;
  if (!PyArg_ParseTuple(args, "O!OO", &PyTuple_Type, &classes, &arg_error, &dt_error))
    return NULL;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(classes); ++i) {
    PyObject *cls = PyTuple_GET_ITEM(classes, i);
    PyObject *name = PyObject_GetAttrString(cls, "status");
    const char *text = name && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    int status = text ? status_named(text) : -1;
    Py_XDECREF(name);
    if (status <= IGNIS_OK || status > IGNIS_LAST_STATUS) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "%R.status must name an IGNIS_ERROR_* status", cls);
      return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(error_by_status[status], cls);
  }
  Py_INCREF(arg_error);
  Py_XSETREF(argument_type_error, arg_error);
  Py_INCREF(dt_error);
  Py_XSETREF(dtype_error, dt_error);
  Py_RETURN_NONE;
}

static PyMethodDef ext_methods[] = {
    FASTCALL(rmsnorm, "rmsnorm(input, weight, eps, out, stream)"),
    FASTCALL(gemma_rmsnorm, "gemma_rmsnorm(input, weight, eps, out, stream)"),
    FASTCALL(fused_add_rmsnorm, "fused_add_rmsnorm(input, residual, weight, eps, stream)"),
    FASTCALL(gemma_fused_add_rmsnorm, "gemma_fused_add_rmsnorm(input, residual, weight, eps, stream)"),
    FASTCALL(layernorm, "layernorm(input, gamma, beta, eps, out, stream)"),
    FASTCALL(silu_and_mul, "silu_and_mul(input, out, stream)"),
    FASTCALL(gelu_and_mul, "gelu_and_mul(input, out, stream)"),
    FASTCALL(gelu_tanh_and_mul, "gelu_tanh_and_mul(input, out, stream)"),
    FASTCALL_KW(apply_rope, "apply_rope(q, k, indptr, offsets, q_out, k_out, **config): ignis_apply_rope, "
                            "the fields of ignis_rope_config by name"),
    FASTCALL_KW(apply_rope_pos_ids, "apply_rope_pos_ids(q, k, pos_ids, q_out, k_out, **config): "
                                    "ignis_apply_rope_pos_ids, the fields of ignis_rope_config by name"),
    FASTCALL(apply_rope_with_cos_sin_cache,
             "apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache, "
             "is_neox, query_out, key_out, stream)"),
    FASTCALL(
        rope_quantize_fp8,
        "rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox, quant_scale_q, "
        "quant_scale_kv, q_rope_out, k_rope_out, q_nope_out, k_nope_out, out_view, stream)"),
    FASTCALL(
        rope_quantize_fp8_append_paged_kv_cache,
        "rope_quantize_fp8_append_paged_kv_cache(q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids, "
        "batch_indices, positions, k_cache, v_cache, kv_indices, kv_indptr, layout, is_neox, quant_scale_q, "
        "quant_scale_kv, q_rope_out, q_nope_out, out_view, stream)"),
    FASTCALL(
        rope_quantize_fp8_append_paged_mla_kv_cache,
        "rope_quantize_fp8_append_paged_mla_kv_cache(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, "
        "batch_indices, positions, ckv_cache, kpe_cache, kv_indices, kv_indptr, is_neox, quant_scale_q, "
        "quant_scale_kv, q_rope_out, q_nope_out, out_view, stream)"),
    FASTCALL(append_paged_kv_cache,
             "append_paged_kv_cache(append_key, append_value, batch_indices, positions, k_cache_or_combined, "
             "v_cache_or_None, kv_indices, kv_indptr, kv_last_page_len, layout, stream)"),
    FASTCALL(get_batch_indices_positions,
             "get_batch_indices_positions(append_indptr, seq_lens, batch_indices, positions, stream)"),
    FASTCALL(get_seq_lens, "get_seq_lens(kv_indptr, kv_last_page_len, page_size, seq_lens, stream)"),
    FASTCALL(merge_state, "merge_state(v_a, s_a, v_b, s_b, lse_base, v_out, s_out, stream)"),
    FASTCALL(merge_state_in_place, "merge_state_in_place(v, s, v_other, s_other, mask, lse_base, stream)"),
    FASTCALL(merge_states, "merge_states(v, s, lse_base, v_out, s_out, stream)"),
    FASTCALL(single_decode_workspace_size,
             "single_decode_workspace_size(num_qo_heads, head_dim, max_kv_len)"),
    FASTCALL_KW(single_decode,
                "single_decode(q, k, v, out, **arguments): ignis_single_decode (single_decode_args)"),
    FASTCALL_KW(decode_plan_create,
                "decode_plan_create(**config) -> plan: the fields of ignis_decode_plan_config by name"),
    FASTCALL_KW(decode_max_kv_len_for_workspace,
                "decode_max_kv_len_for_workspace(workspace_bytes, **config): "
                "ignis_decode_max_kv_len_for_workspace (config as for decode_plan_create)"),
    FASTCALL(decode_plan_update,
             "decode_plan_update(plan, kv_indptr, kv_last_page_len, workspace, staging, stream) -> batch "
             "size, or PlanUpdateDeclined"),
    FASTCALL_KW(decode_run, "decode_run(plan, q, k_cache, v_cache, out, **arguments): ignis_decode_run "
                            "(decode_run_args)"),
    FASTCALL_KW(decode_run_block_table,
                "decode_run_block_table(plan, q, k_cache, v_cache, out, block_tables, seq_lens, max_seq_len, "
                "**arguments): ignis_decode_run_block_table (decode_block_table_args)"),
    {"version", ext_version, METH_NOARGS, "The library's version string."},
    {"build_info", ext_build_info, METH_NOARGS, "How the library was built."},
    {"cuda_device_count", ext_cuda_device_count, METH_NOARGS, "CUDA devices usable by this build."},
    FASTCALL(device_info, "device_info(device_type, device_id): the fields of ignis_get_device_info"),
    {"_set_error_classes", ext_set_error_classes, METH_VARARGS, "Register ignis's exception classes."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef ext_module = {
    PyModuleDef_HEAD_INIT, .m_name = "ignis._ext",   .m_doc = "The C extension behind the ignis package.",
    .m_size = -1,          .m_methods = ext_methods,
};

static int intern_all(void) {
  str_dlpack = PyUnicode_InternFromString("__dlpack__");
  str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__");
  str_exchange_api = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
  str_cuda_stream = PyUnicode_InternFromString("cuda_stream");
  str_ptr = PyUnicode_InternFromString("ptr");
  kw_max_version = Py_BuildValue("(s)", "max_version");
  kw_max_version_stream = Py_BuildValue("(ss)", "max_version", "stream");
  kw_stream = Py_BuildValue("(s)", "stream");
  max_version_value = Py_BuildValue("(ii)", 1, 1);
  return str_dlpack && str_dlpack_device && str_exchange_api && str_cuda_stream && str_ptr &&
                 kw_max_version && kw_max_version_stream && kw_stream && max_version_value
             ? 0
             : -1;
}

/* The C enum values the Python modules pass, under their C names, so that Python never restates
 * a value (ignis/_common.py maps FlashInfer's strings onto them); DLPACK_CUDA is DLPack's kDLCUDA,
 * the device type __dlpack_device__ reports for CUDA memory. */
static int add_constants(PyObject *module) {
#define ADD_CONSTANT(name)                                                                                   \
  if (PyModule_AddIntConstant(module, #name, name) < 0)                                                      \
    return -1;
#define ADD_STATUS(name, value, message) ADD_CONSTANT(name)
#define ADD_DTYPE(name, value, text, bytes) ADD_CONSTANT(name)
  IGNIS_STATUS_MAP(ADD_STATUS)
  IGNIS_DTYPE_MAP(ADD_DTYPE)
  ADD_CONSTANT(IGNIS_DTYPE_OF_Q)
  ADD_CONSTANT(IGNIS_DEVICE_CPU)
  ADD_CONSTANT(IGNIS_DEVICE_CUDA)
  ADD_CONSTANT(IGNIS_KV_LAYOUT_NHD)
  ADD_CONSTANT(IGNIS_KV_LAYOUT_HND)
  ADD_CONSTANT(IGNIS_LSE_BASE2)
  ADD_CONSTANT(IGNIS_LSE_NATURAL)
  ADD_CONSTANT(IGNIS_POS_ENCODING_NONE)
  ADD_CONSTANT(IGNIS_POS_ENCODING_ROPE_LLAMA)
  ADD_CONSTANT(IGNIS_POS_ENCODING_ALIBI)
  ADD_CONSTANT(IGNIS_MASK_NONE)
  ADD_CONSTANT(IGNIS_MASK_CAUSAL)
  ADD_CONSTANT(IGNIS_MASK_CUSTOM)
  ADD_CONSTANT(IGNIS_PREFILL_RAGGED)
  ADD_CONSTANT(IGNIS_PREFILL_PAGED)
  ADD_CONSTANT(IGNIS_FILTER_TOP_K_FIRST)
  ADD_CONSTANT(IGNIS_FILTER_JOINT)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_DEFAULT)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_RENORMALIZE)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_DEEPSEEK_V3)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_LLAMA4)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_RENORMALIZE_NAIVE)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_TOPK)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_SIGMOID_RENORM)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_MINIMAX2)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_SIGMOID)
  ADD_CONSTANT(IGNIS_MOE_ROUTING_TOPK_SIGMOID)
#undef ADD_DTYPE
#undef ADD_STATUS
#undef ADD_CONSTANT
  return PyModule_AddIntConstant(module, "DLPACK_CUDA", DL_CUDA);
}

static int add_plan_update_declined(PyObject *module) {
  plan_update_declined_type = PyStructSequence_NewType(&plan_update_declined_desc);
  if (!plan_update_declined_type)
    return -1;
  Py_INCREF(plan_update_declined_type); /* the module's reference; ours is kept for the process */
  if (PyModule_AddObject(module, "PlanUpdateDeclined", (PyObject *)plan_update_declined_type) < 0) {
    Py_DECREF(plan_update_declined_type);
    return -1;
  }
  return 0;
}

PyMODINIT_FUNC PyInit__ext(void) {
  if (ignis_version() != IGNIS_VERSION_NUMBER) {
    PyErr_Format(PyExc_ImportError, "ignis._ext was built against ignis %s but loaded libignis %s",
                 IGNIS_VERSION_STRING, ignis_version_string());
    return NULL;
  }
  if (intern_all() < 0)
    return NULL;
  PyObject *module = PyModule_Create(&ext_module);
  if (module && (PyModule_AddFunctions(module, ext_sampling_methods) < 0 ||
                 PyModule_AddFunctions(module, ext_gemm_methods) < 0 ||
                 PyModule_AddFunctions(module, ext_mla_methods) < 0 ||
                 PyModule_AddFunctions(module, ext_prefill_methods) < 0 ||
                 PyModule_AddFunctions(module, ext_quant_methods) < 0 ||
                 PyModule_AddFunctions(module, ext_moe_methods) < 0 ||
                 PyModule_AddFunctions(module, ext_moe_pipeline_methods) < 0 ||
                 PyModule_AddFunctions(module, ext_comm_methods) < 0 || ext_comm_constants(module) < 0 ||
                 ext_moe_pipeline_constants(module) < 0 || add_constants(module) < 0 ||
                 add_plan_update_declined(module) < 0))
    Py_CLEAR(module);
  return module;
}
