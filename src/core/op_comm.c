/* Front end of the communicator and the all-reduce ops (include/ignis/comm.h): the opaque
 * ignis_comm (the config as given, the backend table of its device, the backend's state), the
 * choice of algorithm for AUTO, and the validation of a call before anything is written: every
 * tensor on the communicator's device, contiguous, of the dtypes and shapes the header gives, the
 * pattern's tensors given and the others NULL, overlaps only where the header allows them, the
 * message within the capacity. Then ignis_allreduce_params and the backend's allreduce.
 *
 * AUTO's thresholds (ignis_allreduce_choose). A world of one has nothing to exchange: ONESHOT.
 * CPU: ONESHOT below 64 KiB, else TWOSHOT, as comm.h promises. The CPU backend is there for
 * correctness, and its one measurement so far says little: on a 2-core host shared with other
 * jobs, bf16 world of 2 threads, TWOSHOT was within noise of ONESHOT up to 32 KiB and 1.3-2.5x
 * faster from 64 KiB; with 4 threads (more ranks than cores) TWOSHOT was faster at every size
 * from 4 KiB. Measure on a many-core host before moving the threshold. CUDA: ONESHOT up to 256 KiB
 * for 2 to 4 ranks and up to 128 KiB for more (each rank reads W times the message), TWOSHOT
 * above, and NCCL from 16 MiB when the communicator was given an NCCL communicator. The CUDA
 * thresholds are placeholders until they are measured on 2, 4 and 8 GPUs.
 *
 * An empty message (no elements) returns at once without meeting the peers: every rank makes the
 * same call, so every rank returns. */
#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/backend.h"
#include "core/comm_params.h"
#include "core/validate.h"
#include "ignis/comm.h"

struct ignis_comm {
  ignis_comm_config config;
  const ignis_backend *backend;
  void *state;
};

#define KIB ((size_t)1024)
#define MIB (KIB * KIB)
#define CPU_ONESHOT_BELOW (64 * KIB)
#define CUDA_ONESHOT_UP_TO_SMALL_WORLD (256 * KIB) /* world <= 4 */
#define CUDA_ONESHOT_UP_TO_LARGE_WORLD (128 * KIB)
#define CUDA_NCCL_FROM (16 * MIB)

static const char *pattern_name(ignis_allreduce_fusion_pattern pattern) {
  switch (pattern) {
  case IGNIS_AR_FUSION_ALLREDUCE:
    return "ALLREDUCE";
  case IGNIS_AR_FUSION_RESIDUAL_RMSNORM:
    return "RESIDUAL_RMSNORM";
  case IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP8:
    return "RESIDUAL_RMSNORM_FP8";
  case IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP4:
    return "RESIDUAL_RMSNORM_FP4";
  case IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8:
    return "RESIDUAL_RMSNORM_OUT_FP8";
  case IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP4:
    return "RESIDUAL_RMSNORM_OUT_FP4";
  }
  return "?";
}

/* ---- the communicator ------------------------------------------------------------------------ */
static ignis_status check_config(const char *fn, const ignis_comm_config *c,
                                 ignis_comm_exchange_fn exchange) {
  if (c->world_size < 1 || c->world_size > IGNIS_COMM_MAX_WORLD)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.world_size=%d must be in 1..%d", fn,
                           c->world_size, IGNIS_COMM_MAX_WORLD);
  if (c->rank < 0 || c->rank >= c->world_size)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.rank=%d must be in 0..%d", fn, c->rank,
                           c->world_size - 1);
  if (c->device.type != IGNIS_DEVICE_CPU && c->device.type != IGNIS_DEVICE_CUDA)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.device.type=%d is not a device type", fn,
                           (int)c->device.type);
  if (c->device.type == IGNIS_DEVICE_CUDA && c->device.id < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.device.id=%d must be >= 0", fn,
                           c->device.id);
  if (c->capacity == 0 || c->capacity > SIZE_MAX / 16)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.capacity=%zu must be > 0 and < %zu", fn,
                           c->capacity, SIZE_MAX / 16);
  if (!(c->timeout_s > 0) || !isfinite(c->timeout_s))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.timeout_s=%g must be finite and > 0", fn,
                           c->timeout_s);
  if (!exchange && c->world_size > 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: exchange is NULL but config.world_size=%d", fn,
                           c->world_size);
  if (c->nccl_comm && c->device.type != IGNIS_DEVICE_CUDA)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: config.nccl_comm is given but NCCL serves only CUDA",
                           fn);
  return IGNIS_OK;
}

/* The exchange of a world of one (the caller may pass none): the rank's own bytes. */
static int exchange_alone(const void *send, void *recv, size_t bytes, void *user) {
  (void)user;
  memcpy(recv, send, bytes);
  return 0;
}

ignis_status ignis_comm_create(const ignis_comm_config *config, ignis_comm_exchange_fn exchange, void *user,
                               ignis_comm **comm) {
  static const char fn[] = "ignis_comm_create";
  ignis_clear_error();
  if (!comm)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: comm is NULL", fn);
  *comm = NULL;
  if (!config)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config is NULL", fn);
  const size_t least = offsetof(ignis_comm_config, capacity) + sizeof config->capacity;
  if (config->struct_size < least)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: config.struct_size=%zu is smaller than any ignis_comm_config (%zu)", fn,
                           config->struct_size, least);
  ignis_comm_config c = IGNIS_COMM_CONFIG_INIT;
  memcpy(&c, config, config->struct_size < sizeof c ? config->struct_size : sizeof c);
  c.struct_size = sizeof c;
  IGNIS_TRY(check_config(fn, &c, exchange));
  const ignis_backend *backend = ignis_backend_for(c.device.type);
  if (!backend)
    return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "%s: config.device is cuda:%d but %s", fn,
                           c.device.id, ignis_no_cuda_device_reason());
  if (!backend->comm_create || !backend->allreduce)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: the %s backend has no communicator", fn,
                           backend->name);
  ignis_comm *made = calloc(1, sizeof *made);
  if (!made)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "%s: out of host memory", fn);
  made->config = c;
  made->backend = backend;
  ignis_comm_create_params p = {.world_size = c.world_size,
                                .rank = c.rank,
                                .device = c.device.type == IGNIS_DEVICE_CUDA ? c.device.id : 0,
                                .capacity = c.capacity,
                                .nccl_comm = c.nccl_comm,
                                .timeout_s = c.timeout_s,
                                .exchange = exchange ? exchange : exchange_alone,
                                .user = user};
  ignis_status status = backend->comm_create(&p, &made->state);
  if (status != IGNIS_OK) {
    free(made);
    return status;
  }
  *comm = made;
  return IGNIS_OK;
}

ignis_status ignis_comm_destroy(ignis_comm *comm) {
  ignis_clear_error();
  if (!comm)
    return IGNIS_OK;
  if (comm->backend->comm_destroy)
    comm->backend->comm_destroy(comm->state);
  free(comm);
  return IGNIS_OK;
}

ignis_status ignis_comm_check(ignis_comm *comm) {
  ignis_clear_error();
  if (!comm)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_comm_check: comm is NULL");
  return comm->backend->comm_check ? comm->backend->comm_check(comm->state) : IGNIS_OK;
}

ignis_status ignis_comm_info(const ignis_comm *comm, int32_t *world_size, int32_t *rank, size_t *capacity) {
  ignis_clear_error();
  if (!comm)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_comm_info: comm is NULL");
  if (world_size)
    *world_size = comm->config.world_size;
  if (rank)
    *rank = comm->config.rank;
  if (capacity)
    *capacity = comm->config.capacity;
  return IGNIS_OK;
}

ignis_allreduce_algo ignis_allreduce_choose(const ignis_comm *comm, size_t bytes) {
  if (!comm)
    return IGNIS_ALLREDUCE_AUTO;
  const int32_t world = comm->config.world_size;
  if (world == 1)
    return IGNIS_ALLREDUCE_ONESHOT;
  if (comm->config.device.type == IGNIS_DEVICE_CPU)
    return bytes < CPU_ONESHOT_BELOW ? IGNIS_ALLREDUCE_ONESHOT : IGNIS_ALLREDUCE_TWOSHOT;
  if (comm->config.nccl_comm && bytes >= CUDA_NCCL_FROM)
    return IGNIS_ALLREDUCE_NCCL;
  const size_t oneshot_up_to = world <= 4 ? CUDA_ONESHOT_UP_TO_SMALL_WORLD : CUDA_ONESHOT_UP_TO_LARGE_WORLD;
  return bytes <= oneshot_up_to ? IGNIS_ALLREDUCE_ONESHOT : IGNIS_ALLREDUCE_TWOSHOT;
}

/* ---- a call ---------------------------------------------------------------------------------- */
/* Which optional tensors a pattern writes or reads: 1 required, 0 forbidden, 2 optional. */
typedef struct pattern_tensors {
  int output, residual_in, residual_out, norm_out, quant_out, rms_gamma, scale_factor;
} pattern_tensors;

static pattern_tensors tensors_of(ignis_allreduce_fusion_pattern pattern) {
  pattern_tensors t = {0};
  if (pattern == IGNIS_AR_FUSION_ALLREDUCE) {
    t.output = 1;
    return t;
  }
  t.residual_in = t.rms_gamma = 1;
  t.residual_out = 2;
  t.norm_out = pattern != IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP8;
  t.quant_out = t.scale_factor = pattern != IGNIS_AR_FUSION_RESIDUAL_RMSNORM;
  return t;
}

static ignis_status check_presence(const char *fn, ignis_allreduce_fusion_pattern pattern, const char *name,
                                   const void *tensor, int rule) {
  if (rule == 1 && !tensor)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but pattern %d (%s) needs it", fn,
                           name, (int)pattern, pattern_name(pattern));
  if (rule == 0 && tensor)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s is given but pattern %d (%s) does not use it: pass NULL", fn, name,
                           (int)pattern, pattern_name(pattern));
  return IGNIS_OK;
}

static ignis_status check_contiguous(const char *fn, const char *name, const ignis_tensor *t) {
  if (!ignis_tensor_is_contiguous(t))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is not contiguous (row-major, no gaps)", fn,
                           name);
  return IGNIS_OK;
}

/* t is laid out as the input: its dtype and shape, contiguous. */
static ignis_status check_like_input(const char *fn, const char *name, const ignis_tensor *t,
                                     const ignis_tensor *input) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 1, IGNIS_MAX_DIMS));
  IGNIS_TRY(ignis_check_same_dtype(fn, name, t, "input", input));
  IGNIS_TRY(ignis_check_same_shape(fn, name, t, "input", input));
  return check_contiguous(fn, name, t);
}

static ignis_status check_gamma(const char *fn, const ignis_tensor *gamma, const ignis_tensor *input,
                                int64_t hidden) {
  IGNIS_TRY(ignis_check_tensor(fn, "rms_gamma", gamma, 1, 1));
  if (gamma->dtype != input->dtype && gamma->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: rms_gamma.dtype=%s but it must be %s or f32",
                           fn, ignis_dtype_name(gamma->dtype), ignis_dtype_name(input->dtype));
  return ignis_check_vector(fn, "rms_gamma", gamma, hidden);
}

static ignis_status check_quant_out(const char *fn, const ignis_tensor *q, const ignis_tensor *input) {
  IGNIS_TRY(ignis_check_tensor(fn, "quant_out", q, 1, IGNIS_MAX_DIMS));
  if (q->dtype != IGNIS_FP8_E4M3)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: quant_out.dtype=%s but it must be fp8_e4m3", fn,
                           ignis_dtype_name(q->dtype));
  IGNIS_TRY(ignis_check_same_shape(fn, "quant_out", q, "input", input));
  return check_contiguous(fn, "quant_out", q);
}

static ignis_status check_scale_factor(const char *fn, const ignis_tensor *s) {
  IGNIS_TRY(ignis_check_tensor(fn, "scale_factor", s, 0, IGNIS_MAX_DIMS));
  if (s->dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: scale_factor.dtype=%s but it must be f32", fn,
                           ignis_dtype_name(s->dtype));
  if (ignis_tensor_numel(s) != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: scale_factor has %" PRId64 " elements but it must have 1", fn,
                           ignis_tensor_numel(s));
  return IGNIS_OK;
}

#define NAMED_COUNT 8

/* Every output apart from every other tensor, except the aliases the header allows: output may be
 * input, residual_out may be residual_in or input, norm_out may be input. Inputs may share memory. */
static ignis_status check_overlaps(const char *fn, const ignis_tensor *const *t, const char *const *names,
                                   const int *is_output) {
  for (int i = 0; i < NAMED_COUNT; ++i) {
    for (int j = 0; j < NAMED_COUNT; ++j) {
      if (i == j || !t[i] || !t[j] || !is_output[i] || (is_output[j] && j < i))
        continue;
      const int alias_ok = (!strcmp(names[i], "output") && !strcmp(names[j], "input")) ||
                           (!strcmp(names[i], "residual_out") && !strcmp(names[j], "residual_in")) ||
                           (!strcmp(names[i], "residual_out") && !strcmp(names[j], "input")) ||
                           (!strcmp(names[i], "norm_out") && !strcmp(names[j], "input"));
      if (alias_ok)
        IGNIS_TRY(ignis_check_alias_or_disjoint(fn, names[i], t[i], names[j], t[j]));
      else
        IGNIS_TRY(ignis_check_disjoint(fn, names[i], t[i], names[j], t[j]));
    }
  }
  return IGNIS_OK;
}

static ignis_status resolve_algo(const char *fn, const ignis_comm *comm, ignis_allreduce_algo algo,
                                 size_t bytes, ignis_allreduce_algo *resolved) {
  if (algo < IGNIS_ALLREDUCE_AUTO || algo > IGNIS_ALLREDUCE_NCCL)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: algo=%d is not an ignis_allreduce_algo", fn,
                           (int)algo);
  if (algo == IGNIS_ALLREDUCE_NCCL && comm->config.device.type != IGNIS_DEVICE_CUDA)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: algo=NCCL but the %s backend has no NCCL path", fn,
                           comm->backend->name);
  if (algo == IGNIS_ALLREDUCE_NCCL && !comm->config.nccl_comm)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: algo=NCCL but the communicator was created without config.nccl_comm", fn);
  *resolved = algo == IGNIS_ALLREDUCE_AUTO ? ignis_allreduce_choose(comm, bytes) : algo;
  return IGNIS_OK;
}

/* The whole validation of a call; fills p (but for p->state) when it passes. `plain`: the
 * ignis_allreduce form, whose whole tensor is one row. */
static ignis_status check_call(const char *fn, const ignis_comm *comm, const ignis_allreduce_fusion_args *a,
                               int plain, ignis_allreduce_params *p) {
  const ignis_allreduce_fusion_pattern pattern = a->pattern;
  if (pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP4 || pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP4)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: pattern=%d (%s): FP4 outputs are not supported", fn,
                           (int)pattern, pattern_name(pattern));
  if (pattern < IGNIS_AR_FUSION_ALLREDUCE || pattern > IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP4)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: pattern=%d is not an AllReduceFusionPattern",
                           fn, (int)pattern);
  const ignis_tensor *input = a->input;
  IGNIS_TRY(ignis_check_tensor(fn, "input", input, 1, IGNIS_MAX_DIMS));
  IGNIS_TRY(ignis_check_float_dtype(fn, "input", input));
  IGNIS_TRY(check_contiguous(fn, "input", input));
  const pattern_tensors rule = tensors_of(pattern);
  IGNIS_TRY(check_presence(fn, pattern, "output", a->output, rule.output));
  IGNIS_TRY(check_presence(fn, pattern, "residual_in", a->residual_in, rule.residual_in));
  IGNIS_TRY(check_presence(fn, pattern, "residual_out", a->residual_out, rule.residual_out));
  IGNIS_TRY(check_presence(fn, pattern, "norm_out", a->norm_out, rule.norm_out));
  IGNIS_TRY(check_presence(fn, pattern, "quant_out", a->quant_out, rule.quant_out));
  IGNIS_TRY(check_presence(fn, pattern, "rms_gamma", a->rms_gamma, rule.rms_gamma));
  IGNIS_TRY(check_presence(fn, pattern, "scale_factor", a->scale_factor, rule.scale_factor));

  const int64_t numel = ignis_tensor_numel(input);
  const int64_t hidden =
      plain || pattern == IGNIS_AR_FUSION_ALLREDUCE ? numel : input->shape[input->ndim - 1];
  if (a->output)
    IGNIS_TRY(check_like_input(fn, "output", a->output, input));
  if (a->residual_in)
    IGNIS_TRY(check_like_input(fn, "residual_in", a->residual_in, input));
  if (a->residual_out)
    IGNIS_TRY(check_like_input(fn, "residual_out", a->residual_out, input));
  if (a->norm_out)
    IGNIS_TRY(check_like_input(fn, "norm_out", a->norm_out, input));
  if (a->quant_out)
    IGNIS_TRY(check_quant_out(fn, a->quant_out, input));
  if (a->rms_gamma)
    IGNIS_TRY(check_gamma(fn, a->rms_gamma, input, hidden));
  if (a->scale_factor)
    IGNIS_TRY(check_scale_factor(fn, a->scale_factor));
  if (pattern != IGNIS_AR_FUSION_ALLREDUCE) {
    if (!isfinite(a->rms_eps) || a->rms_eps < 0)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: rms_eps=%g must be finite and >= 0", fn,
                             a->rms_eps);
    if (!isfinite(a->weight_bias))
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: weight_bias=%g must be finite", fn,
                             a->weight_bias);
  }

  const ignis_tensor *named[NAMED_COUNT] = {input,     a->residual_in,  a->rms_gamma, a->scale_factor,
                                            a->output, a->residual_out, a->norm_out,  a->quant_out};
  const char *names[NAMED_COUNT] = {"input",  "residual_in",  "rms_gamma", "scale_factor",
                                    "output", "residual_out", "norm_out",  "quant_out"};
  const int is_output[NAMED_COUNT] = {0, 0, 0, 0, 1, 1, 1, 1};
  IGNIS_TRY(check_overlaps(fn, named, names, is_output));
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, named, names, NAMED_COUNT, &target));
  const ignis_device want = comm->config.device;
  if (target.device.type != want.type || (want.type == IGNIS_DEVICE_CUDA && target.device.id != want.id))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: input is on %s:%d but the communicator is on %s:%d", fn,
                           ignis_device_type_name(target.device.type), target.device.id,
                           ignis_device_type_name(want.type), want.id);

  const size_t bytes = (size_t)numel * ignis_dtype_size(input->dtype);
  if (bytes > comm->config.capacity)
    return ignis_set_error(IGNIS_ERROR_INSUFFICIENT_WORKSPACE,
                           "%s: input is %zu bytes (%" PRId64 " elements of %s) but the communicator's "
                           "capacity is %zu bytes",
                           fn, bytes, numel, ignis_dtype_name(input->dtype), comm->config.capacity);
  ignis_allreduce_algo algo = IGNIS_ALLREDUCE_AUTO;
  IGNIS_TRY(resolve_algo(fn, comm, a->algo, bytes, &algo));

  memset(p, 0, sizeof *p);
  p->pattern = pattern;
  p->algo = algo;
  p->dtype = input->dtype;
  p->hidden = hidden;
  p->rows = hidden == 0 ? 0 : numel / hidden;
  p->input = input->data;
  p->output = a->output ? a->output->data : NULL;
  p->residual_in = a->residual_in ? a->residual_in->data : NULL;
  p->residual_out = a->residual_out ? a->residual_out->data : NULL;
  p->norm_out = a->norm_out ? a->norm_out->data : NULL;
  p->quant_out = a->quant_out ? a->quant_out->data : NULL;
  p->gamma = a->rms_gamma ? a->rms_gamma->data : NULL;
  p->gamma_dtype = a->rms_gamma ? a->rms_gamma->dtype : input->dtype;
  p->scale_factor = a->scale_factor ? (const float *)a->scale_factor->data : NULL;
  p->eps = (float)a->rms_eps;
  p->weight_bias = (float)a->weight_bias;
  return IGNIS_OK;
}

static ignis_status run_call(const char *fn, ignis_comm *comm, const ignis_allreduce_fusion_args *a,
                             int plain, void *stream) {
  if (!comm)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: comm is NULL", fn);
  ignis_allreduce_params p;
  IGNIS_TRY(check_call(fn, comm, a, plain, &p));
  if (p.rows == 0 || p.hidden == 0)
    return IGNIS_OK;
  p.state = comm->state;
  return comm->backend->allreduce(&p, stream);
}

ignis_status ignis_allreduce(ignis_comm *comm, const ignis_tensor *input, ignis_tensor *output,
                             ignis_allreduce_algo algo, void *stream) {
  ignis_clear_error();
  ignis_allreduce_fusion_args a = IGNIS_ALLREDUCE_FUSION_ARGS_INIT;
  a.pattern = IGNIS_AR_FUSION_ALLREDUCE;
  a.algo = algo;
  a.input = input;
  a.output = output;
  return run_call("ignis_allreduce", comm, &a, 1, stream);
}

ignis_status ignis_allreduce_fusion(ignis_comm *comm, const ignis_allreduce_fusion_args *args, void *stream) {
  static const char fn[] = "ignis_allreduce_fusion";
  ignis_clear_error();
  if (!args)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: args is NULL", fn);
  const size_t least = offsetof(ignis_allreduce_fusion_args, output) + sizeof args->output;
  if (args->struct_size < least)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: args.struct_size=%zu is smaller than any ignis_allreduce_fusion_args (%zu)",
                           fn, args->struct_size, least);
  ignis_allreduce_fusion_args a = IGNIS_ALLREDUCE_FUSION_ARGS_INIT;
  memcpy(&a, args, args->struct_size < sizeof a ? args->struct_size : sizeof a);
  return run_call(fn, comm, &a, 0, stream);
}
