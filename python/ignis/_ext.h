/* What the translation units of ignis._ext share: _ext.c (DLPack, arguments, errors, the module,
 * the library and device facts, and the norm, activation, RoPE, paged-cache, merge and decode
 * bindings), _ext_prefill.c, _ext_sampling.c, _ext_gemm.c, _ext_mla.c, _ext_quant.c,
 * _ext_moe_pipeline.c and _ext_comm.c. Internal to the extension (never installed);
 * every name here has hidden visibility, so nothing leaks out of the module but PyInit__ext.
 *
 * A binding reads its tensors through one op_call (op_call_begin: DLPack in, stream chosen),
 * calls the C API with the GIL released, and returns op_call_finish (None, or the status raised as
 * the matching ignis.Error). Each binding file ends with its method table, which the module adds
 * at import. */
#ifndef IGNIS_PYTHON_EXT_H
#define IGNIS_PYTHON_EXT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#include "ignis/ignis.h"

/* ---- errors ------------------------------------------------------------------------------- */
/* The ignis.Error subclass registered for status (fallback before ignis/__init__.py ran). */
PyObject *status_class(ignis_status status, PyObject *fallback);

#define INVALID_ARGUMENT_ERROR status_class(IGNIS_ERROR_INVALID_ARGUMENT, PyExc_ValueError)
#define UNSUPPORTED_ERROR status_class(IGNIS_ERROR_UNSUPPORTED, PyExc_NotImplementedError)

/* Raise ignis.ArgumentTypeError (a Python-level argument problem) from a printf format; -1. */
int raise_type(const char *format, ...);
/* Raise the class of a failed status with the message (a dtype problem as DtypeError); -1. */
int raise_status(ignis_status status, const char *message);
/* The pending exception as a normalized instance (new reference), cleared; NULL if none; and
 * making it (stolen; may be NULL) pending again. */
PyObject *take_exception(void);
void restore_exception(PyObject *exc);

/* ---- arguments ---------------------------------------------------------------------------- */
int check_nargs(const char *fn, Py_ssize_t nargs, Py_ssize_t expected);
int parse_stream(const char *fn, PyObject *arg, void **stream);
int parse_double(const char *fn, const char *name, PyObject *arg, double *out);
int parse_int64(const char *fn, const char *name, PyObject *arg, int64_t *out);
/* args[0 .. count-1] as integers named names[i]. */
int parse_int64_args(const char *fn, PyObject *const *args, const char *const *names, int count,
                     int64_t *out);
/* Arguments by name: a binding describes its arguments once, in a spec table (name, kind, offset of
 * the field it fills), and parse_args fills a struct from positional arguments (in table order)
 * and keywords. The Python modules pass every argument past the obvious first few by keyword, so
 * no order is written twice; a config struct (ignis_decode_plan_config, ...) is filled in place
 * over its _INIT defaults, its fields named as in the header, and ignis_attention_options travels
 * as one dict of its fields (options=) in every attention binding: a call of more than about 13
 * keywords would make CPython build a dict per call anyway. */
typedef enum { /* the object kinds first: store_arg tests kind > ARG_OBJECT */
  ARG_REQUIRED, /* PyObject * (borrowed), must be given and not None */
  ARG_OBJECT,   /* PyObject * (borrowed), None when not given */
  ARG_DOUBLE,   /* double */
  ARG_INT64,    /* int64_t */
  ARG_INT32,    /* int32_t */
  ARG_ENUM,     /* an ignis enum (int-sized), passed as its _ext constant */
  ARG_POSITIVE, /* int32_t >= 1 */
  ARG_BOOL,     /* int32_t 0 or 1, from any truth value */
  ARG_OPTIONS   /* ignis_attention_options, from a dict of its fields by name */
} arg_kind;

typedef struct {
  const char *name;
  arg_kind kind;
  size_t offset; /* of the field in the struct parse_args fills */
  PyObject *key; /* name, interned at the table's first use */
} arg_spec;

/* A binding's spec, and the keywords of its last call with what they map to (so that a call site,
 * whose keyword tuple is a constant, is matched once). */
typedef struct {
  arg_spec *spec;
  int count; /* <= 64 */
  int interned;
  PyObject *kwnames;
  int8_t entry[64];
} arg_table;

#define ARG(type, field, kind) {#field, kind, offsetof(type, field), NULL}
#define ARG_NAMED(name, type, field, kind) {name, kind, offsetof(type, field), NULL}
#define ARG_TABLE(spec) {spec, (int)(sizeof spec / sizeof spec[0]), 0, NULL, {0}}

/* Fill dst from args[0..nargs) (in spec order) and kwnames (FASTCALL keywords, values after the
 * positional ones). A scalar not given, or given as None, keeps dst's value: its default. An
 * unknown, repeated or missing required argument is an ArgumentTypeError. */
int parse_args(const char *fn, arg_table *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
               void *dst);

/* A size query's answer: *bytes as a Python int (read only after the query ran), or the status raised. */
PyObject *bytes_or_raise(ignis_status status, const size_t *bytes);

/* ---- tensors ------------------------------------------------------------------------------ */
#define MAX_TENSORS 16

typedef struct {
  void *managed; /* exported capsule contents to release, or NULL */
  int versioned;
  uint64_t flags; /* DLPack flags of a versioned export */
  int legacy;     /* exported through the legacy capsule (cannot signal read-only) */
} export_slot;

/* The tensors of one call, read through DLPack, and the stream it launches on. */
typedef struct {
  const char *fn;
  int count;
  ignis_tensor tensors[MAX_TENSORS];
  export_slot slots[MAX_TENSORS];
  void *stream;
} op_call;

/* Read objs[0..count) into c->tensors and choose c->stream (stream_arg: None or the caller's
 * stream=). Bit i of writable marks an output. On failure everything taken is released and an
 * exception is set. */
int op_call_begin(op_call *c, const char *fn, PyObject *const *objs, const char *const *names, int count,
                  unsigned writable, PyObject *stream_arg);
/* Release every export, keeping any pending exception intact across the producers' deleters. */
void op_call_release(op_call *c);
/* After the C call: release the exports, then return None or raise the status. */
PyObject *op_call_finish(op_call *c, ignis_status status);

/* The objects of one call, some optional (None is left out), each remembering its slot. */
typedef struct {
  PyObject *objs[MAX_TENSORS];
  const char *names[MAX_TENSORS];
  int count;
} tensor_list;

/* Append obj (unless None); returns its slot, or -1 for None. */
int tensor_list_add(tensor_list *l, PyObject *obj, const char *name);

static inline unsigned slot_bit(int slot) {
  return slot >= 0 ? 1u << slot : 0u;
}

/* Bytes of a contiguous workspace tensor. */
int workspace_of(const char *fn, const ignis_tensor *t, void **data, size_t *bytes);
/* Read t as the fp8 dtype `view` (an ignis_dtype; -1: none) of its uint8 data; -1 with the error set. */
int apply_fp8_view(const char *fn, int64_t view, ignis_tensor *t, const char *name);
/* The K / V tensors of a paged cache (slot k_at the combined cache, or K beside V at v_at), the fp8
 * view applied, into cache->k_cache / v_cache; -1 with the error set (the caller releases c). */
int paged_kv_tensors(const char *fn, op_call *c, int64_t kv_view, int k_at, const char *k_name, int v_at, int combined,
                     ignis_paged_kv_cache *cache);

/* A 1-D contiguous int32 host array, borrowed without a copy: through the type's DLPack exchange
 * table (PyTorch: no Python call at all) or the buffer protocol (NumPy, array.array). */
typedef struct {
  int32_t *data;
  int64_t len;
  Py_buffer buffer;
  int has_buffer;
} host_i32;

/* 1: obj read into *a; 0: obj is not such an array (the caller converts it). */
int read_host_i32(PyObject *obj, int writable, host_i32 *a);
void host_i32_release(host_i32 *a);

/* ---- attention ---------------------------------------------------------------------------- */
/* The arguments of the attention bindings (single decode and prefill, the batch runs), by name;
 * each binding's spec table says which it takes. */
typedef struct {
  PyObject *plan, *q, *k, *v, *out, *lse, *workspace, *custom_mask, *kv_indptr, *kv_indices,
      *kv_last_page_len, *block_tables, *seq_lens;
  int64_t max_seq_len; /* block-table runs */
  PyObject *sinks, *stream;
  ignis_kv_layout kv_layout;
  ignis_mask_mode mask_mode;
  int64_t kv_view; /* K / V are uint8 views of fp8 data (NumPy arrays of ml_dtypes' types, which
                      DLPack cannot carry): the ignis_dtype to read them as; -1: no view */
  int64_t q_view;  /* the same for q (a plan with an fp8 q_dtype) */
  ignis_attention_options options;
  ignis_attention_extras extras; /* k_scale, v_scale; sinks attached once read */
} attention_args;

/* Fill *a from a binding's spec over the C defaults (every object None, the _INIT options and
 * extras, NHD, no mask, no fp8 view) and check the view; -1 with the error set. */
int parse_attention_args(const char *fn, arg_table *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                         attention_args *a);
/* The slots of a block-table run's tensors in its op_call (-1: not given). */
typedef struct block_table_slots {
  int q, out, lse, cum_seq_lens_q;
} block_table_slots;
/* A block-table run's tensors (decode's; prefill's with cum_seq_lens_q): the op call begun, the
 * cache, workspace and sinks filled; -1 with the call released and the error set on failure. */
int block_table_run_begin(const char *fn, attention_args *a, PyObject *cum_seq_lens_q, op_call *c,
                          block_table_slots *s, ignis_block_table_kv_cache *cache, void **ws, size_t *ws_bytes);

/* The per-call arguments every attention binding ends with. */
#define ATTENTION_EXTRA_ARGS                                                                                 \
  ARG_NAMED("k_scale", attention_args, extras.k_scale, ARG_DOUBLE),                                          \
      ARG_NAMED("v_scale", attention_args, extras.v_scale, ARG_DOUBLE),                                      \
      ARG(attention_args, sinks, ARG_OBJECT), ARG(attention_args, kv_view, ARG_INT64),                       \
      ARG(attention_args, q_view, ARG_INT64), ARG(attention_args, stream, ARG_OBJECT)

/* The device fields (ignis_device `member`) of a plan config, as device_type and device_id. */
#define DEVICE_ARGS(config, member)                                                                          \
  ARG_NAMED("device_type", config, member.type, ARG_ENUM),                                                   \
      ARG_NAMED("device_id", config, member.id, ARG_INT32)

/* The slots of a contiguous-K/V call's tensors in its tensor_list (-1: None): single decode and
 * prefill, the ragged prefill run. */
typedef struct {
  int q, k, v, custom_mask, out, lse, workspace, sinks;
} kv_pair_slots;

/* Read a contiguous-K/V call's tensors from *a into c (the stream chosen), with the workspace and
 * the fp8 view of k and v, and attach the sinks; -1 with the error set and nothing held. */
int kv_pair_call_begin(const char *fn, attention_args *a, op_call *c, kv_pair_slots *s, void **ws,
                       size_t *ws_bytes);

/* The slots of a paged-cache run's tensors in its tensor_list (-1: None). */
typedef struct {
  int q, k, v, indptr, indices, last_page_len, out, lse, sinks;
  int combined; /* k is the one [pages, 2, ...] cache tensor (v_cache None) */
} paged_run_slots;

/* Read a paged-cache run's tensors from *a (all but a custom mask: with the workspace they fill an
 * op_call) into c, on the stream it chooses: *cache gets the layout, K / V (the fp8 view applied, a
 * combined cache split) and the page indices, and indptr / last_page_len when both are given;
 * *ws / *ws_bytes the workspace (NULL, 0 without); the sinks are attached to a->extras. -1 with the
 * error set and nothing held. */
int paged_run_begin(const char *fn, attention_args *a, op_call *c, paged_run_slots *s,
                    ignis_paged_kv_cache *cache, void **ws, size_t *ws_bytes);

/* The workspace and stream of a plan update: workspace None (a CPU plan keeps its schedule on the
 * host) or the workspace tensor, read through *c (the caller releases it after the C call when
 * c->count); stream_arg the caller's stream=. -1 with the error set and nothing held. */
int plan_update_workspace(const char *fn, PyObject *workspace, PyObject *stream_arg, op_call *c, void **ws,
                          size_t *ws_bytes, void **stream);
/* A kind of plan that travels as a capsule (decode, prefill, MLA): the capsule's name, the maker a
 * TypeError names for a wrong object, and how to free what the capsule holds. */
typedef struct plan_kind {
  const char *capsule_name;
  const char *maker;
  void (*destroy)(void *plan);
} plan_kind;
/* The capsule that owns a newly made plan (the plan freed with it), or NULL with the error set:
 * status (of making the plan) not IGNIS_OK, or no capsule (the plan then destroyed here). */
PyObject *plan_capsule_new(const plan_kind *kind, ignis_status status, void *plan);
/* The pointer of a capsule of plan kind `kind`, or NULL with a TypeError naming the maker. */
void *plan_capsule_of(const char *fn, PyObject *obj, const plan_kind *kind);

/* ---- method tables ------------------------------------------------------------------------ */
#define FASTCALL(name, doc)                                                                                  \
  { #name, (PyCFunction)(void (*)(void))ext_##name, METH_FASTCALL, doc }
/* A binding that takes keywords (parse_args). */
#define FASTCALL_KW(name, doc)                                                                               \
  { #name, (PyCFunction)(void (*)(void))ext_##name, METH_FASTCALL | METH_KEYWORDS, doc }

/* NULL-terminated; added to the module by PyInit__ext. */
extern PyMethodDef ext_prefill_methods[];
extern PyMethodDef ext_sampling_methods[];
extern PyMethodDef ext_gemm_methods[];
extern PyMethodDef ext_mla_methods[];
extern PyMethodDef ext_quant_methods[];
extern PyMethodDef ext_moe_methods[];
extern PyMethodDef ext_moe_pipeline_methods[];
extern PyMethodDef ext_comm_methods[];
/* Adds the IGNIS_MOE_* constants (_ext_moe_pipeline.c); -1 with the error set. */
int ext_moe_pipeline_constants(PyObject *module);
/* Adds the IGNIS_ALLREDUCE_* and IGNIS_AR_FUSION_* constants (_ext_comm.c); -1 with the error set. */
int ext_comm_constants(PyObject *module);

#endif
