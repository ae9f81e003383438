/* Registry entries of the communication family (include/ignis/comm.h): the plain all-reduce and the
 * all-reduce fused with residual add, RMSNorm and fp8 quantization (pattern
 * RESIDUAL_RMSNORM_OUT_FP8, writing residual_out, norm_out and quant_out). Inputs are [tokens,
 * hidden] in the case's dtype; gamma is of the input's dtype, the scale one f32.
 *
 * These routines run a communicator of world size 1 on the case's device, created in prepare (its
 * capacity the message) and destroyed in release: enough for `ignis info`'s smoke call and for
 * timing the single-rank path. A world of one meets no peer, so the times are the kernels' own
 * cost, not an all-reduce's; the multi-GPU benchmark (several processes, one per GPU, side by side
 * with NCCL) is later work of issue 23 and is not here.
 *
 * Bytes are the fewest a world-1 call must move: the input read, each output written once, the
 * residual read, gamma once. */
#include <stdio.h>

#include "bench.h"

#define EPS 1e-6

static ignis_status create_world_of_one(const bench_case *c, ignis_comm **comm) {
  ignis_comm_config config = IGNIS_COMM_CONFIG_INIT;
  config.device = c->device;
  config.capacity = (size_t)(c->tokens * c->hidden) * ignis_dtype_size(c->dtype);
  ignis_status status = ignis_comm_create(&config, NULL, NULL, comm);
  if (status != IGNIS_OK)
    return status;
  size_t capacity = 0;
  status = ignis_comm_info(*comm, NULL, NULL, &capacity);
  return status;
}

static int prepare_comm(const bench_case *c, void *stream, void **state) {
  ignis_comm *comm = NULL;
  if (bench_check_status(create_world_of_one(c, &comm), "ignis_comm_create") != 0) {
    ignis_comm_destroy(comm);
    return -1;
  }
  *state = comm;
  return 0;
}

static void release_comm(const bench_case *c, void *state) {
  ignis_comm_check(state); /* a recorded failure has nobody to tell here: the calls' statuses did */
  ignis_comm_destroy(state);
}

static int describe_allreduce(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("input", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden);
  s[1] = bench_output(BENCH_SPEC("output", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  return 2;
}

static ignis_status call_allreduce(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_comm *comm = state;
  const size_t bytes = (size_t)(c->tokens * c->hidden) * ignis_dtype_size(c->dtype);
  return ignis_allreduce(comm, &t[0], &t[1], ignis_allreduce_choose(comm, bytes), stream);
}

static int describe_fusion(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("input", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden);
  s[1] = BENCH_SPEC("residual_in", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden);
  s[2] = BENCH_SPEC("rms_gamma", c->dtype, BENCH_FILL_RANDOM, c->hidden);
  s[3] = BENCH_SPEC("scale_factor", IGNIS_F32, BENCH_FILL_PROBS, 1);
  s[4] = bench_output(BENCH_SPEC("residual_out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  s[5] = bench_output(BENCH_SPEC("norm_out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  s[6] = bench_output(BENCH_SPEC("quant_out", IGNIS_FP8_E4M3, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  return 7;
}

static ignis_status call_fusion(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_allreduce_fusion_args a = IGNIS_ALLREDUCE_FUSION_ARGS_INIT;
  a.pattern = IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8;
  a.input = &t[0];
  a.residual_in = &t[1];
  a.rms_gamma = &t[2];
  a.scale_factor = &t[3];
  a.residual_out = &t[4];
  a.norm_out = &t[5];
  a.quant_out = &t[6];
  a.rms_eps = EPS;
  return ignis_allreduce_fusion(state, &a, stream);
}

static void shape_comm(const bench_case *c, char *text, size_t size) {
  snprintf(text, size, "%lldx%lld W1", (long long)c->tokens, (long long)c->hidden);
}

#define COMM_SHAPE(group, t, h) BENCH_SHAPE(group, .dtype = IGNIS_BF16, .tokens = (t), .hidden = (h))
#define GPU_COMM_ALL BENCH_SUITE(COMM_SHAPE(1, 128, 4096), COMM_SHAPE(3, 1, 4096), COMM_SHAPE(3, 512, 7168))
#define HOST_COMM_ALL BENCH_SUITE(COMM_SHAPE(1, 64, 4096), COMM_SHAPE(3, 1, 4096))
#define COMM_ENTRY                                                                                           \
  .family = &bench_family_comm, .dims = BENCH_DIM_TOKENS | BENCH_DIM_HIDDEN, .dtypes = BENCH_DTYPES_FLOAT,   \
  .tiny = BENCH_DIMS(.tokens = 4, .hidden = 256), .gpu_suite = GPU_COMM_ALL, .host_suite = HOST_COMM_ALL,    \
  .prepare = prepare_comm, .release = release_comm

static const bench_routine comm_routines[] = {
    {COMM_ENTRY, .name = "allreduce",
     .summary = "sum over the ranks of a world of one (a multi-GPU benchmark is later work)",
     .functions =
         "ignis_comm_create ignis_comm_info ignis_comm_check ignis_comm_destroy ignis_allreduce_choose "
         "ignis_allreduce",
     .bytes_rule = "input (T*H*es) + output (T*H*es)", .describe = describe_allreduce,
     .call = call_allreduce},
    {COMM_ENTRY, .name = "allreduce_fusion",
     .summary = "all-reduce + residual add + RMSNorm + fp8, world of one (RESIDUAL_RMSNORM_OUT_FP8)",
     .functions = "ignis_allreduce_fusion",
     .bytes_rule = "input + residual_in + residual_out + norm_out (T*H*es each) + quant_out (T*H) + gamma",
     .describe = describe_fusion, .call = call_fusion},
};

const bench_family bench_family_comm = {"comm", shape_comm, NULL, BENCH_TABLE(comm_routines)};
