/* Registry entries of MoE routing (include/ignis/moe_routing.h), one per model's router, the
 * routing config fixed by the entry and the token count by the case:
 *   moe_route          DeepSeek-V3: E 256, top-8 of 8 groups / top-4 groups, sigmoid + bias,
 *                      routed_scaling_factor 2.5 (DEEPSEEK_V3; the 15 us bar at 4096 tokens)
 *   moe_route_softmax  Qwen3-30B-A3B: E 128, top-8, softmax then renormalized (RENORMALIZE_NAIVE)
 * Logits are standard normal in the case's dtype (f32 by default: the engines keep router logits in
 * f32), the bias a random f32 vector shared by every set (a model constant); ids i32, weights f32.
 *
 * Bytes: the logits read once, the bias once, ids and weights written once. Suite: 4096 tokens
 * (group 1), 64 and 1 (group 3). */
#include <stdio.h>

#include "bench.h"

#define DSV3_EXPERTS 256
#define QWEN3_EXPERTS 128
#define TOP_K 8

static int describe_route(const bench_case *c, int64_t experts, int bias, bench_tensor_spec *s) {
  int n = 0;
  s[n++] = BENCH_SPEC("logits", c->dtype, BENCH_FILL_NORMAL, c->tokens, experts);
  if (bias) {
    s[n] = BENCH_SPEC("bias", IGNIS_F32, BENCH_FILL_RANDOM, experts);
    s[n++].shared = 1;
  }
  s[n++] = bench_valid(bench_output(BENCH_SPEC("topk_ids", IGNIS_I32, BENCH_FILL_RANDOM, c->tokens, TOP_K)),
                       0, experts - 1);
  s[n++] = bench_output(BENCH_SPEC("topk_weights", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens, TOP_K));
  return n;
}

static int describe_dsv3(const bench_case *c, bench_tensor_spec *s) {
  return describe_route(c, DSV3_EXPERTS, 1, s);
}

static int describe_qwen3(const bench_case *c, bench_tensor_spec *s) {
  return describe_route(c, QWEN3_EXPERTS, 0, s);
}

static ignis_status call_dsv3(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_moe_routing_config cfg = IGNIS_MOE_ROUTING_CONFIG_INIT;
  cfg.method = IGNIS_MOE_ROUTING_DEEPSEEK_V3;
  cfg.top_k = TOP_K;
  cfg.n_group = 8;
  cfg.topk_group = 4;
  cfg.routed_scaling_factor = 2.5;
  return ignis_moe_route(&t[0], &t[1], &cfg, &t[2], &t[3], stream);
}

static ignis_status call_qwen3(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_moe_routing_config cfg = IGNIS_MOE_ROUTING_CONFIG_INIT;
  cfg.method = IGNIS_MOE_ROUTING_RENORMALIZE_NAIVE;
  cfg.top_k = TOP_K;
  return ignis_moe_route(&t[0], NULL, &cfg, &t[1], &t[2], stream);
}

/* "T4096 E256 k8 g8/4", "T4096 E128 k8". */
static void shape_route(const bench_case *c, char *text, size_t size) {
  if (c->routine->describe == describe_dsv3)
    snprintf(text, size, "T%lld E%d k%d g8/4", (long long)c->tokens, DSV3_EXPERTS, TOP_K);
  else
    snprintf(text, size, "T%lld E%d k%d", (long long)c->tokens, QWEN3_EXPERTS, TOP_K);
}

#define ROUTE_SHAPE(group, t) BENCH_SHAPE(group, .dtype = IGNIS_F32, .tokens = (t))
#define ROUTE_ENTRY                                                                                          \
  .family = &bench_family_moe_routing, .dtypes = BENCH_DTYPES_FLOAT, .dims = BENCH_DIM_TOKENS,               \
  .tiny = BENCH_DIMS(.tokens = 5),                                                                           \
  .gpu_suite = BENCH_SUITE(ROUTE_SHAPE(1, 4096), ROUTE_SHAPE(3, 64), ROUTE_SHAPE(3, 1)),                     \
  .host_suite = BENCH_SUITE(ROUTE_SHAPE(1, 4096), ROUTE_SHAPE(3, 1))

static const bench_routine moe_routing_routines[] = {
    {ROUTE_ENTRY, .name = "moe_route",
     .summary = "DeepSeek-V3 routing: sigmoid + bias, top-4 of 8 groups, top-8 of 256 experts",
     .functions = "ignis_moe_route",
     .bytes_rule = "logits (T*E*es) + bias (E*4) + topk_ids and topk_weights (T*8*4 each)",
     .describe = describe_dsv3, .call = call_dsv3},
    {ROUTE_ENTRY, .name = "moe_route_softmax",
     .summary = "Qwen3-30B-A3B routing: softmax, top-8 of 128 experts, renormalized",
     .functions = "ignis_moe_route", .bytes_rule = "logits (T*E*es) + topk_ids and topk_weights (T*8*4 each)",
     .describe = describe_qwen3, .call = call_qwen3},
};

const bench_family bench_family_moe_routing = {"moe_routing", shape_route, NULL,
                                               BENCH_TABLE(moe_routing_routines)};
