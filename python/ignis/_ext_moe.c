/* Python binding of MoE routing (include/ignis/moe_routing.h): moe_route, positional with the
 * stream last (fused_moe_routing.py passes every argument), tensors through DLPack, None for an
 * absent bias; the routing config filled field by field over IGNIS_MOE_ROUTING_CONFIG_INIT.
 * ext_moe_methods is the method table the module adds. */
#include "_ext.h"

/* (logits, bias, topk_ids, topk_weights, method, top_k, n_group, topk_group, routed_scaling_factor,
 *  stream) */
static PyObject *ext_moe_route(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  static const char *const fn = "ignis.moe_route";
  static const char *const scalar_names[] = {"routing_method_type", "top_k", "n_group", "topk_group"};
  int64_t scalars[4];
  double scale;
  if (check_nargs(fn, nargs, 10) < 0 || parse_int64_args(fn, args + 4, scalar_names, 4, scalars) < 0 ||
      parse_double(fn, "routed_scaling_factor", args[8], &scale) < 0)
    return NULL;
  if (scalars[0] < INT32_MIN || scalars[0] > INT32_MAX) {
    PyErr_Format(INVALID_ARGUMENT_ERROR, "%s: routing_method_type=%lld is not a RoutingMethodType", fn,
                 (long long)scalars[0]);
    return NULL;
  }
  tensor_list l = {0};
  const int logits = tensor_list_add(&l, args[0], "logits"), bias = tensor_list_add(&l, args[1], "bias");
  const int ids = tensor_list_add(&l, args[2], "topk_ids"),
            weights = tensor_list_add(&l, args[3], "topk_weights");
  if (logits < 0 || ids < 0 || weights < 0)
    return raise_type("%s: logits, topk_ids and topk_weights must be arrays, not None", fn) < 0 ? NULL : NULL;
  ignis_moe_routing_config cfg = IGNIS_MOE_ROUTING_CONFIG_INIT;
  cfg.method = (ignis_moe_routing_method)scalars[0];
  cfg.top_k = scalars[1];
  cfg.n_group = scalars[2];
  cfg.topk_group = scalars[3];
  cfg.routed_scaling_factor = scale;
  op_call c;
  if (op_call_begin(&c, fn, l.objs, l.names, l.count, slot_bit(ids) | slot_bit(weights), args[9]) < 0)
    return NULL;
  ignis_status status;
  Py_BEGIN_ALLOW_THREADS status = ignis_moe_route(&c.tensors[logits], bias >= 0 ? &c.tensors[bias] : NULL,
                                                  &cfg, &c.tensors[ids], &c.tensors[weights], c.stream);
  Py_END_ALLOW_THREADS return op_call_finish(&c, status);
}

PyMethodDef ext_moe_methods[] = {
    FASTCALL(moe_route,
             "moe_route(logits, bias, topk_ids, topk_weights, routing_method_type, top_k, n_group, "
             "topk_group, routed_scaling_factor, stream)"),
    {NULL, NULL, 0, NULL},
};
