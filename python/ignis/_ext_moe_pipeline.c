/* Python bindings of the fused MoE op (include/ignis/moe.h), by keyword (ignis/fused_moe.py passes
 * every argument by name): fused_moe(...) and fused_moe_workspace_size(...). The tensors travel
 * through DLPack in two op_calls (the routing, input, experts, out and workspace in the first; the
 * optional biases, scales and activation arguments in the second, read only when one is given),
 * both on the first's stream; input_view / weight_view are -1, or the ignis dtype of fp8 NumPy
 * arrays handed over as their uint8 views. The config fields are named as in
 * ignis_fused_moe_config. ext_moe_pipeline_methods is the method table the module adds, and
 * ext_moe_pipeline_constants adds the IGNIS_MOE_* enum values. */
#include "_ext.h"

typedef struct {
  PyObject *input, *input_scale, *topk_ids, *topk_weights, *fc1, *fc2, *out, *workspace, *stream;
  PyObject *fc1_bias, *fc2_bias, *fc1_scale, *fc2_scale, *fc1_gate_scale, *fc2_input_scale, *act_alpha,
      *act_beta, *act_limit;
  int64_t input_view, weight_view;
  ignis_fused_moe_config config;
} moe_args;

static arg_spec moe_spec[] = {
    ARG(moe_args, input, ARG_REQUIRED),
    ARG(moe_args, input_scale, ARG_OBJECT),
    ARG(moe_args, topk_ids, ARG_REQUIRED),
    ARG(moe_args, topk_weights, ARG_OBJECT),
    ARG(moe_args, fc1, ARG_REQUIRED),
    ARG(moe_args, fc2, ARG_REQUIRED),
    ARG(moe_args, out, ARG_REQUIRED),
    ARG(moe_args, workspace, ARG_REQUIRED),
    ARG(moe_args, fc1_bias, ARG_OBJECT),
    ARG(moe_args, fc2_bias, ARG_OBJECT),
    ARG(moe_args, fc1_scale, ARG_OBJECT),
    ARG(moe_args, fc2_scale, ARG_OBJECT),
    ARG(moe_args, fc1_gate_scale, ARG_OBJECT),
    ARG(moe_args, fc2_input_scale, ARG_OBJECT),
    ARG(moe_args, act_alpha, ARG_OBJECT),
    ARG(moe_args, act_beta, ARG_OBJECT),
    ARG(moe_args, act_limit, ARG_OBJECT),
    ARG(moe_args, input_view, ARG_INT64),
    ARG(moe_args, weight_view, ARG_INT64),
    ARG_NAMED("activation", moe_args, config.activation, ARG_ENUM),
    ARG_NAMED("quant", moe_args, config.quant, ARG_ENUM),
    ARG_NAMED("gate_first", moe_args, config.gate_first, ARG_BOOL),
    ARG_NAMED("accumulate", moe_args, config.accumulate, ARG_BOOL),
    ARG_NAMED("local_expert_offset", moe_args, config.local_expert_offset, ARG_INT64),
    ARG_NAMED("tp_rank", moe_args, config.tp_rank, ARG_INT32),
    ARG(moe_args, stream, ARG_OBJECT)};
static arg_table moe_table = ARG_TABLE(moe_spec);

/* The second op_call's tensors, in the order of ignis_fused_moe_weights' optional fields. */
enum { EXTRA_COUNT = 9 };

static PyObject *ext_fused_moe(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  static const char *const fn = "ignis.fused_moe";
  static const ignis_fused_moe_config defaults = IGNIS_FUSED_MOE_CONFIG_INIT;
  moe_args a;
  memset(&a, 0, sizeof a);
  a.config = defaults;
  a.input_view = a.weight_view = -1;
  if (parse_args(fn, &moe_table, args, nargs, kwnames, &a) < 0)
    return NULL;

  tensor_list core = {0};
  const int input = tensor_list_add(&core, a.input, "input"),
            ids = tensor_list_add(&core, a.topk_ids, "topk_ids");
  const int fc1 = tensor_list_add(&core, a.fc1, "fc1"), fc2 = tensor_list_add(&core, a.fc2, "fc2");
  const int out = tensor_list_add(&core, a.out, "out"), ws = tensor_list_add(&core, a.workspace, "workspace");
  const int weights = tensor_list_add(&core, a.topk_weights, "topk_weights");
  const int input_scale = tensor_list_add(&core, a.input_scale, "input_scale");
  op_call c;
  if (op_call_begin(&c, fn, core.objs, core.names, core.count, slot_bit(out) | slot_bit(ws), a.stream) < 0)
    return NULL;
  void *ws_data = NULL;
  size_t ws_bytes = 0;
  if (apply_fp8_view(fn, a.input_view, &c.tensors[input], "input") < 0 ||
      apply_fp8_view(fn, a.weight_view, &c.tensors[fc1], "fc1") < 0 ||
      apply_fp8_view(fn, a.weight_view, &c.tensors[fc2], "fc2") < 0 ||
      workspace_of(fn, &c.tensors[ws], &ws_data, &ws_bytes) < 0) {
    op_call_release(&c);
    return NULL;
  }

  PyObject *const extra_objs[EXTRA_COUNT] = {a.fc1_bias,  a.fc2_bias,       a.fc1_scale,
                                             a.fc2_scale, a.fc1_gate_scale, a.fc2_input_scale,
                                             a.act_alpha, a.act_beta,       a.act_limit};
  static const char *const extra_names[EXTRA_COUNT] = {"fc1_bias",  "fc2_bias",       "fc1_scale",
                                                       "fc2_scale", "fc1_gate_scale", "fc2_input_scale",
                                                       "act_alpha", "act_beta",       "act_limit"};
  tensor_list extra = {0};
  int slot[EXTRA_COUNT];
  for (int i = 0; i < EXTRA_COUNT; ++i)
    slot[i] = tensor_list_add(&extra, extra_objs[i], extra_names[i]);
  op_call x;
  x.count = 0;
  if (extra.count > 0 && op_call_begin(&x, fn, extra.objs, extra.names, extra.count, 0, a.stream) < 0) {
    op_call_release(&c);
    return NULL;
  }
  const ignis_tensor *extra_tensors[EXTRA_COUNT];
  for (int i = 0; i < EXTRA_COUNT; ++i)
    extra_tensors[i] = slot[i] >= 0 ? &x.tensors[slot[i]] : NULL;
  ignis_fused_moe_weights w = IGNIS_FUSED_MOE_WEIGHTS_INIT;
  w.fc1 = &c.tensors[fc1];
  w.fc2 = &c.tensors[fc2];
  w.fc1_bias = extra_tensors[0];
  w.fc2_bias = extra_tensors[1];
  w.fc1_scale = extra_tensors[2];
  w.fc2_scale = extra_tensors[3];
  w.fc1_gate_scale = extra_tensors[4];
  w.fc2_input_scale = extra_tensors[5];
  w.act_alpha = extra_tensors[6];
  w.act_beta = extra_tensors[7];
  w.act_limit = extra_tensors[8];

  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_fused_moe(
      &c.tensors[input], input_scale >= 0 ? &c.tensors[input_scale] : NULL, &c.tensors[ids],
      weights >= 0 ? &c.tensors[weights] : NULL, &w, &a.config, ws_data, ws_bytes, &c.tensors[out], c.stream);
  Py_END_ALLOW_THREADS if (x.count > 0) op_call_release(&x);
  return op_call_finish(&c, status);
}

typedef struct {
  int64_t max_tokens, top_k, num_local_experts, hidden_size, intermediate_size;
  ignis_dtype input_dtype, out_dtype;
  ignis_fused_moe_config config;
} size_args;

static arg_spec size_spec[] = {ARG(size_args, max_tokens, ARG_INT64),
                               ARG(size_args, top_k, ARG_INT64),
                               ARG(size_args, num_local_experts, ARG_INT64),
                               ARG(size_args, hidden_size, ARG_INT64),
                               ARG(size_args, intermediate_size, ARG_INT64),
                               ARG(size_args, input_dtype, ARG_ENUM),
                               ARG(size_args, out_dtype, ARG_ENUM),
                               ARG_NAMED("activation", size_args, config.activation, ARG_ENUM),
                               ARG_NAMED("quant", size_args, config.quant, ARG_ENUM)};
static arg_table size_table = ARG_TABLE(size_spec);

static PyObject *ext_fused_moe_workspace_size(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                              PyObject *kwnames) {
  static const ignis_fused_moe_config defaults = IGNIS_FUSED_MOE_CONFIG_INIT;
  size_args a;
  memset(&a, 0, sizeof a);
  a.config = defaults;
  if (parse_args("ignis.fused_moe_workspace_size", &size_table, args, nargs, kwnames, &a) < 0)
    return NULL;
  size_t bytes = 0;
  ignis_status status =
      ignis_fused_moe_workspace_size(a.max_tokens, a.top_k, a.num_local_experts, a.hidden_size,
                                     a.intermediate_size, a.input_dtype, a.out_dtype, &a.config, &bytes);
  return bytes_or_raise(status, &bytes);
}

int ext_moe_pipeline_constants(PyObject *module) {
#define ADD_CONSTANT(name)                                                                                   \
  if (PyModule_AddIntConstant(module, #name, name) < 0)                                                      \
    return -1;
  ADD_CONSTANT(IGNIS_MOE_QUANT_NONE)
  ADD_CONSTANT(IGNIS_MOE_QUANT_FP8_PER_TENSOR)
  ADD_CONSTANT(IGNIS_MOE_QUANT_FP8_BLOCK)
  ADD_CONSTANT(IGNIS_MOE_MAX_TOP_K)
#undef ADD_CONSTANT
  return 0;
}

PyMethodDef ext_moe_pipeline_methods[] = {
    FASTCALL_KW(fused_moe, "fused_moe(**arguments of ignis_fused_moe by name)"),
    FASTCALL_KW(
        fused_moe_workspace_size,
        "fused_moe_workspace_size(max_tokens, top_k, num_local_experts, hidden_size, intermediate_size, "
        "input_dtype, out_dtype, activation=, quant=)"),
    {NULL, NULL, 0, NULL},
};
