/* Python binding of tensor-parallel communication (include/ignis/comm.h): the communicator as a
 * capsule ("ignis.comm") that destroys it with itself, all-reduce and fused all-reduce, all
 * positional with the stream last (comm.py passes every argument). ext_comm_methods is the method
 * table the module adds; ext_comm_constants adds the algorithm and pattern enums.
 *
 * Ranks may be threads of one Python process, so every call that waits for peers runs with the
 * GIL released: comm_create (the GIL is taken back only inside the exchange callback, which calls
 * the Python callable `exchange(bytes) -> bytes` of world_size * len(bytes)), allreduce,
 * allreduce_fusion and comm_destroy. An exception raised by the callable makes the callback fail;
 * ignis_comm_create then fails every rank, and this rank re-raises the callable's exception. */
#include "_ext.h"

#include <string.h>

static const char *const capsule_name = "ignis.comm";

/* What the capsule holds: the communicator, NULL once destroyed. */
typedef struct {
  ignis_comm *comm;
} comm_holder;

static void comm_capsule_free(PyObject *capsule) {
  comm_holder *h = PyCapsule_GetPointer(capsule, capsule_name);
  if (!h)
    return;
  if (h->comm) {
    Py_BEGIN_ALLOW_THREADS ignis_comm_destroy(h->comm);
    Py_END_ALLOW_THREADS
  }
  PyMem_RawFree(h);
}

/* The live communicator of a capsule; NULL with the error set. */
static ignis_comm *comm_of(const char *fn, PyObject *capsule) {
  comm_holder *h =
      PyCapsule_IsValid(capsule, capsule_name) ? PyCapsule_GetPointer(capsule, capsule_name) : NULL;
  if (!h) {
    raise_type("%s: comm must be a communicator made by comm_create", fn);
    return NULL;
  }
  if (!h->comm) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: the communicator was destroyed", fn);
    return NULL;
  }
  return h->comm;
}

/* The exchange callback's context: the Python callable and the first exception it raised. */
typedef struct {
  PyObject *exchange;
  PyObject *error;
  int32_t world_size;
} exchange_context;

static int exchange_trampoline(const void *send, void *recv, size_t bytes, void *user) {
  exchange_context *x = user;
  PyGILState_STATE gil = PyGILState_Ensure();
  int failed = 1;
  PyObject *sent = PyBytes_FromStringAndSize(send, (Py_ssize_t)bytes);
  PyObject *got = sent ? PyObject_CallOneArg(x->exchange, sent) : NULL;
  Py_buffer view;
  if (got && PyObject_GetBuffer(got, &view, PyBUF_SIMPLE) == 0) {
    if ((size_t)view.len == bytes * (size_t)x->world_size) {
      memcpy(recv, view.buf, (size_t)view.len);
      failed = 0;
    } else {
      PyErr_Format(INVALID_ARGUMENT_ERROR,
                   "ignis.comm_create: exchange returned %zd bytes but it must return world_size * %zu = %zu",
                   view.len, bytes, bytes * (size_t)x->world_size);
    }
    PyBuffer_Release(&view);
  } else if (got) {
    PyErr_Clear();
    raise_type("ignis.comm_create: exchange must return bytes, not %.100s", Py_TYPE(got)->tp_name);
  }
  if (failed && !x->error)
    x->error = take_exception();
  PyErr_Clear();
  Py_XDECREF(got);
  Py_XDECREF(sent);
  PyGILState_Release(gil);
  return failed;
}

/* (world_size, rank, device_type, device_id, capacity, timeout_s, exchange) -> communicator */
static PyObject *ext_comm_create(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.comm_create";
  static const char *const names[] = {"world_size", "rank", "device_type", "device_id", "capacity"};
  int64_t v[5];
  double timeout_s;
  if (check_nargs(fn, nargs, 7) < 0 || parse_int64_args(fn, args, names, 5, v) < 0 ||
      parse_double(fn, "timeout_s", args[5], &timeout_s) < 0)
    return NULL;
  if (!PyCallable_Check(args[6]))
    return raise_type("%s: exchange must be callable", fn) < 0 ? NULL : NULL;
  for (int i = 0; i < 4; ++i)
    if (v[i] < INT32_MIN || v[i] > INT32_MAX) {
      PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: %s=%lld is out of range", fn, names[i], (long long)v[i]);
      return NULL;
    }
  if (v[4] < 0) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: capacity=%lld must be >= 0", fn, (long long)v[4]);
    return NULL;
  }
  ignis_comm_config config = IGNIS_COMM_CONFIG_INIT;
  config.world_size = (int32_t)v[0];
  config.rank = (int32_t)v[1];
  config.device.type = (ignis_device_type)v[2];
  config.device.id = (int32_t)v[3];
  config.capacity = (size_t)v[4];
  config.timeout_s = timeout_s;
  comm_holder *h = PyMem_RawMalloc(sizeof *h);
  if (!h)
    return PyErr_NoMemory();
  h->comm = NULL;
  exchange_context x = {args[6], NULL, config.world_size > 0 ? config.world_size : 1};
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_comm_create(&config, exchange_trampoline, &x, &h->comm);
  Py_END_ALLOW_THREADS if (status != IGNIS_OK) {
    PyMem_RawFree(h);
    if (x.error) {
      restore_exception(x.error);
      return NULL;
    }
    raise_status(status, ignis_last_error());
    return NULL;
  }
  Py_XDECREF(x.error);
  PyObject *capsule = PyCapsule_New(h, capsule_name, comm_capsule_free);
  if (!capsule) {
    ignis_comm_destroy(h->comm);
    PyMem_RawFree(h);
  }
  return capsule;
}

/* (comm): release this rank's communicator now (the capsule then refuses every call). */
static PyObject *ext_comm_destroy(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.comm_destroy";
  if (check_nargs(fn, nargs, 1) < 0)
    return NULL;
  comm_holder *h =
      PyCapsule_IsValid(args[0], capsule_name) ? PyCapsule_GetPointer(args[0], capsule_name) : NULL;
  if (!h)
    return raise_type("%s: comm must be a communicator made by comm_create", fn) < 0 ? NULL : NULL;
  ignis_comm *comm = h->comm;
  h->comm = NULL;
  ignis_status status = IGNIS_OK;
  if (comm) {
    Py_BEGIN_ALLOW_THREADS status = ignis_comm_destroy(comm);
    Py_END_ALLOW_THREADS
  }
  if (status != IGNIS_OK)
    return raise_status(status, ignis_last_error()) < 0 ? NULL : NULL;
  Py_RETURN_NONE;
}

/* (comm): raise the failure an earlier call recorded (a CUDA kernel that timed out), if any. */
static PyObject *ext_comm_check(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.comm_check";
  ignis_comm *comm;
  if (check_nargs(fn, nargs, 1) < 0 || !(comm = comm_of(fn, args[0])))
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_comm_check(comm);
  Py_END_ALLOW_THREADS if (status != IGNIS_OK) {
    raise_status(status, ignis_last_error());
    return NULL;
  }
  Py_RETURN_NONE;
}

/* (comm) -> (world_size, rank, capacity) */
static PyObject *ext_comm_info(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.comm_info";
  ignis_comm *comm;
  if (check_nargs(fn, nargs, 1) < 0 || !(comm = comm_of(fn, args[0])))
    return NULL;
  int32_t world_size, rank;
  size_t capacity;
  ignis_status status = ignis_comm_info(comm, &world_size, &rank, &capacity);
  if (status != IGNIS_OK)
    return raise_status(status, ignis_last_error()) < 0 ? NULL : NULL;
  return Py_BuildValue("(iin)", (int)world_size, (int)rank, (Py_ssize_t)capacity);
}

/* (comm, bytes) -> the ignis_allreduce_algo AUTO runs for a message of that size */
static PyObject *ext_allreduce_choose(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.allreduce_choose";
  ignis_comm *comm;
  int64_t bytes;
  if (check_nargs(fn, nargs, 2) < 0 || !(comm = comm_of(fn, args[0])) ||
      parse_int64(fn, "bytes", args[1], &bytes) < 0)
    return NULL;
  if (bytes < 0) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: bytes=%lld must be >= 0", fn, (long long)bytes);
    return NULL;
  }
  return PyLong_FromLong((long)ignis_allreduce_choose(comm, (size_t)bytes));
}

/* (comm, input, output, algo, stream) */
static PyObject *ext_allreduce(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.allreduce";
  ignis_comm *comm;
  int64_t algo;
  if (check_nargs(fn, nargs, 5) < 0 || !(comm = comm_of(fn, args[0])) ||
      parse_int64(fn, "algo", args[3], &algo) < 0)
    return NULL;
  tensor_list l = {0};
  const int input = tensor_list_add(&l, args[1], "input"), output = tensor_list_add(&l, args[2], "output");
  if (input < 0 || output < 0)
    return raise_type("%s: input and output must be arrays, not None", fn) < 0 ? NULL : NULL;
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, slot_bit(output), args[4]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status =
      ignis_allreduce(comm, &c.tensors[input], &c.tensors[output], (ignis_allreduce_algo)algo, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

/* (comm, pattern, algo, input, output, residual_in, residual_out, norm_out, quant_out, rms_gamma,
 *  scale_factor, rms_eps, weight_bias, stream); None for a tensor the call does not pass. */
static PyObject *ext_allreduce_fusion(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.allreduce_fusion";
  static const char *const enum_names[] = {"pattern", "algo"};
  static const char *const tensor_names[] = {"input",    "output",    "residual_in", "residual_out",
                                             "norm_out", "quant_out", "rms_gamma",   "scale_factor"};
  ignis_comm *comm;
  int64_t enums[2];
  ignis_allreduce_fusion_args a = IGNIS_ALLREDUCE_FUSION_ARGS_INIT;
  if (check_nargs(fn, nargs, 14) < 0 || !(comm = comm_of(fn, args[0])) ||
      parse_int64_args(fn, args + 1, enum_names, 2, enums) < 0 ||
      parse_double(fn, "rms_eps", args[11], &a.rms_eps) < 0 ||
      parse_double(fn, "weight_bias", args[12], &a.weight_bias) < 0)
    return NULL;
  tensor_list l = {0};
  int slot[8];
  for (int i = 0; i < 8; ++i)
    slot[i] = tensor_list_add(&l, args[3 + i], tensor_names[i]);
  if (slot[0] < 0)
    return raise_type("%s: input must be an array, not None", fn) < 0 ? NULL : NULL;
  const unsigned writable = slot_bit(slot[1]) | slot_bit(slot[3]) | slot_bit(slot[4]) | slot_bit(slot[5]);
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, writable, args[13]) < 0)
    return NULL;
#define TENSOR_AT(i) (slot[i] >= 0 ? &c.tensors[slot[i]] : NULL)
  a.pattern = (ignis_allreduce_fusion_pattern)enums[0];
  a.algo = (ignis_allreduce_algo)enums[1];
  a.input = TENSOR_AT(0);
  a.output = TENSOR_AT(1);
  a.residual_in = TENSOR_AT(2);
  a.residual_out = TENSOR_AT(3);
  a.norm_out = TENSOR_AT(4);
  a.quant_out = TENSOR_AT(5);
  a.rms_gamma = TENSOR_AT(6);
  a.scale_factor = TENSOR_AT(7);
#undef TENSOR_AT
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_allreduce_fusion(comm, &a, c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

int ext_comm_constants(PyObject *module) {
#define ADD_CONSTANT(name)                                                                                   \
  if (PyModule_AddIntConstant(module, #name, name) < 0)                                                      \
    return -1;
  ADD_CONSTANT(IGNIS_COMM_MAX_WORLD)
  ADD_CONSTANT(IGNIS_ALLREDUCE_AUTO)
  ADD_CONSTANT(IGNIS_ALLREDUCE_ONESHOT)
  ADD_CONSTANT(IGNIS_ALLREDUCE_TWOSHOT)
  ADD_CONSTANT(IGNIS_ALLREDUCE_NCCL)
  ADD_CONSTANT(IGNIS_AR_FUSION_ALLREDUCE)
  ADD_CONSTANT(IGNIS_AR_FUSION_RESIDUAL_RMSNORM)
  ADD_CONSTANT(IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP8)
  ADD_CONSTANT(IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP4)
  ADD_CONSTANT(IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8)
  ADD_CONSTANT(IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP4)
#undef ADD_CONSTANT
  return 0;
}

PyMethodDef ext_comm_methods[] = {
    FASTCALL(comm_create,
             "comm_create(world_size, rank, device_type, device_id, capacity, timeout_s, exchange) "
             "-> communicator (collective; exchange(bytes) -> bytes of world_size * len)"),
    FASTCALL(comm_destroy, "comm_destroy(comm): release this rank's communicator now"),
    FASTCALL(comm_check, "comm_check(comm): raise a failure an earlier call recorded"),
    FASTCALL(comm_info, "comm_info(comm) -> (world_size, rank, capacity)"),
    FASTCALL(allreduce_choose, "allreduce_choose(comm, bytes) -> the algorithm AUTO runs"),
    FASTCALL(allreduce, "allreduce(comm, input, output, algo, stream)"),
    FASTCALL(allreduce_fusion,
             "allreduce_fusion(comm, pattern, algo, input, output, residual_in, residual_out, norm_out, "
             "quant_out, rms_gamma, scale_factor, rms_eps, weight_bias, stream)"),
    {NULL, NULL, 0, NULL},
};
