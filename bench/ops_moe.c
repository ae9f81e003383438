/* Registry entries of the fused MoE family (include/ignis/moe.h): ignis_fused_moe with Swiglu over
 * --experts experts, --top-k of them per token, --tokens T, --hidden H and --inner I (the
 * intermediate size), routing drawn on the host (top_k distinct experts per token, uniformly; a
 * fresh draw per input set, so consecutive calls read different experts). The experts' weights
 * are one copy shared by every set (a model's weights); the workspace is made once (prepare).
 *   moe                 16-bit input and weights (the case dtype)
 *   moe_fp8             fp8 e4m3 per-tensor: input and weights fp8, per-expert dequant scales,
 *                       out in the case dtype
 *   moe_fp8_blockscale  DeepSeek-V3: weights fp8 with 128x128 block scales, the 16-bit input
 *                       quantized 1x128 inside the op, out in the case dtype
 *
 * Counted in FLOPs: 2 * T * top_k * H * (2I + I). Bytes: the weight-read floor, the weights of
 * the experts a call reads plus the input, the routing and out once each. The experts read are
 * the expected number of distinct experts of T tokens drawing top_k of E each,
 * E * (1 - (1 - top_k / E)^T) (top_k at one token, all E at many), so GB/s and %read in the table
 * are the call's speed against reading the chosen weights once.
 *
 * Suite (issue 19's presets): Mixtral-8x7B (E8, top-2, H4096, I14336), Qwen3-30B-A3B (E128, top-8,
 * H2048, I768) and gpt-oss-120b (E128, top-4, H2880, I2880; plain Swiglu in bf16 here) with moe,
 * DeepSeek-V3 (E256, top-8, H7168, I2048) with moe_fp8_blockscale, at 1, 16, 64 and 4096 tokens;
 * Qwen3 at 64 and 4096 tokens with moe_fp8. The host suite: one small shape each. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

static int64_t moe_flops(const bench_case *c) {
  return 2 * c->tokens * c->top_k * c->hidden * 3 * c->inner;
}

static void shape_moe(const bench_case *c, char *text, size_t size) {
  char tokens[24];
  bench_format_count(c->tokens, tokens, sizeof tokens);
  snprintf(text, size, "E%lld k%lld T%s H%lld I%lld", (long long)c->experts, (long long)c->top_k, tokens,
           (long long)c->hidden, (long long)c->inner);
}

/* Expected distinct experts among T tokens drawing top_k of E (at least one). */
static double experts_read(const bench_case *c) {
  const double e = (double)c->experts, miss = 1.0 - (double)c->top_k / e;
  const double read = e * (1.0 - pow(miss > 0.0 ? miss : 0.0, (double)c->tokens));
  return read < 1.0 ? 1.0 : read;
}

enum { MOE_PLAIN, MOE_FP8, MOE_BLOCK };

/* input, topk_ids, topk_weights, fc1, fc2, out, then the scales of the quantized forms. */
static int describe(const bench_case *c, bench_tensor_spec *s, int form) {
  const int64_t t = c->tokens, k = c->top_k, e = c->experts, h = c->hidden, i = c->inner;
  const ignis_dtype weight = form == MOE_PLAIN ? c->dtype : IGNIS_FP8_E4M3;
  const double read = experts_read(c);
  s[0] = BENCH_SPEC("input", form == MOE_FP8 ? IGNIS_FP8_E4M3 : c->dtype, BENCH_FILL_RANDOM, t, h);
  s[1] = bench_valid(BENCH_SPEC("topk_ids", IGNIS_I32, BENCH_FILL_EXPERT_IDS, t, k), 0, e - 1);
  s[2] = BENCH_SPEC("topk_weights", IGNIS_F32, BENCH_FILL_PROBS, t, k);
  s[3] = BENCH_SPEC("fc1", weight, BENCH_FILL_RANDOM, e, 2 * i, h);
  s[4] = BENCH_SPEC("fc2", weight, BENCH_FILL_RANDOM, e, h, i);
  s[3].shared = s[4].shared = 1;
  s[3].bytes_moved = (int64_t)(read * (double)(2 * i * h) * (double)ignis_dtype_size(weight));
  s[4].bytes_moved = (int64_t)(read * (double)(h * i) * (double)ignis_dtype_size(weight));
  s[5] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, t, h));
  if (form == MOE_PLAIN)
    return 6;
  if (form == MOE_FP8) {
    s[6] = BENCH_SPEC("fc1_scale", IGNIS_F32, BENCH_FILL_PROBS, e);
    s[7] = BENCH_SPEC("fc2_scale", IGNIS_F32, BENCH_FILL_PROBS, e);
  } else {
    const int64_t hb = (h + 127) / 128, ib = (i + 127) / 128, nb = (2 * i + 127) / 128;
    s[6] = BENCH_SPEC("fc1_scale", IGNIS_F32, BENCH_FILL_PROBS, e, nb, hb);
    s[7] = BENCH_SPEC("fc2_scale", IGNIS_F32, BENCH_FILL_PROBS, e, hb, ib);
  }
  s[6].shared = s[7].shared = 1;
  s[6].bytes_moved = (int64_t)(read * (double)s[6].bytes_moved / (double)e);
  s[7].bytes_moved = (int64_t)(read * (double)s[7].bytes_moved / (double)e);
  return 8;
}

static int describe_plain(const bench_case *c, bench_tensor_spec *s) {
  return describe(c, s, MOE_PLAIN);
}
static int describe_fp8(const bench_case *c, bench_tensor_spec *s) {
  return describe(c, s, MOE_FP8);
}
static int describe_block(const bench_case *c, bench_tensor_spec *s) {
  return describe(c, s, MOE_BLOCK);
}

typedef struct moe_state {
  ignis_fused_moe_config config;
  void *workspace;
  size_t bytes;
} moe_state;

static ignis_moe_quant quant_of(const bench_case *c) {
  return c->routine->describe == describe_fp8     ? IGNIS_MOE_QUANT_FP8_PER_TENSOR
         : c->routine->describe == describe_block ? IGNIS_MOE_QUANT_FP8_BLOCK
                                                  : IGNIS_MOE_QUANT_NONE;
}

static int prepare(const bench_case *c, void *stream, void **state) {
  moe_state *s = calloc(1, sizeof *s);
  if (!s)
    return bench_fail("out of host memory for the MoE state");
  ignis_fused_moe_config config = IGNIS_FUSED_MOE_CONFIG_INIT;
  config.quant = quant_of(c);
  s->config = config;
  const ignis_dtype input = config.quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR ? IGNIS_FP8_E4M3 : c->dtype;
  if (bench_check_status(ignis_fused_moe_workspace_size(c->tokens, c->top_k, c->experts, c->hidden, c->inner,
                                                        input, c->dtype, &s->config, &s->bytes),
                         "ignis_fused_moe_workspace_size") != 0 ||
      bench_device_alloc(c->device, s->bytes, &s->workspace) != 0) {
    free(s);
    return -1;
  }
  *state = s;
  return 0;
}

static void release(const bench_case *c, void *state) {
  moe_state *s = state;
  bench_device_free(c->device, s->workspace);
  free(s);
}

static ignis_status call(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  const moe_state *s = state;
  ignis_fused_moe_weights w = IGNIS_FUSED_MOE_WEIGHTS_INIT;
  w.fc1 = &t[3];
  w.fc2 = &t[4];
  if (s->config.quant != IGNIS_MOE_QUANT_NONE) {
    w.fc1_scale = &t[6];
    w.fc2_scale = &t[7];
  }
  return ignis_fused_moe(&t[0], NULL, &t[1], &t[2], &w, &s->config, s->workspace, s->bytes, &t[5], stream);
}

#define MOE_ENTRY                                                                                            \
  .family = &bench_family_moe, .functions = "ignis_fused_moe ignis_fused_moe_workspace_size",                \
  .dims = BENCH_DIM_TOKENS | BENCH_DIM_HIDDEN | BENCH_DIM_INNER | BENCH_DIM_EXPERTS | BENCH_DIM_TOP_K,       \
  .dtypes = BENCH_DTYPES_HALF, .flops = moe_flops,                                                           \
  .flops_rule = "2*T*top_k*H*3I (Swiglu: GEMM 1 of 2I rows, GEMM 2 of I)",                                   \
  .tiny = BENCH_DIMS(.tokens = 4, .hidden = 128, .inner = 64, .experts = 4, .top_k = 2), .prepare = prepare, \
  .release = release, .call = call
/* clang-format off */
#define MOE_SHAPE(group, e, k, h, i, t)                                                                      \
  BENCH_SHAPE(group, .experts = e, .top_k = k, .hidden = h, .inner = i, .tokens = t, .dtype = IGNIS_BF16)
#define MOE_PRESET(group, e, k, h, i)                                                                        \
  MOE_SHAPE(group, e, k, h, i, 1), MOE_SHAPE(group, e, k, h, i, 16), MOE_SHAPE(group, e, k, h, i, 64),       \
      MOE_SHAPE(group, e, k, h, i, 4096)
/* clang-format on */

static const bench_routine moe_routines[] = {
    {MOE_ENTRY, .name = "moe", .summary = "fused MoE (Swiglu) over given top-k routing, 16-bit experts",
     .bytes_rule = "the chosen experts' weights (expected distinct E*(1-(1-k/E)^T)) + input + routing + out",
     .gpu_suite = BENCH_SUITE(MOE_PRESET(2, 8, 2, 4096, 14336), MOE_PRESET(2, 128, 8, 2048, 768),
                              MOE_PRESET(2, 128, 4, 2880, 2880)),
     .host_suite = BENCH_SUITE(MOE_SHAPE(2, 8, 2, 256, 128, 16)), .describe = describe_plain},
    {MOE_ENTRY, .name = "moe_fp8", .summary = "fused MoE, fp8 e4m3 input and experts with per-tensor scales",
     .bytes_rule = "the chosen experts' fp8 weights and scales + input (fp8) + routing + out",
     .gpu_suite = BENCH_SUITE(MOE_SHAPE(2, 128, 8, 2048, 768, 64), MOE_SHAPE(2, 128, 8, 2048, 768, 4096)),
     .host_suite = BENCH_SUITE(MOE_SHAPE(2, 8, 2, 256, 128, 16)), .describe = describe_fp8},
    {MOE_ENTRY, .name = "moe_fp8_blockscale",
     .summary = "fused MoE, fp8 experts with 128x128 scales, input quantized 1x128 (DeepSeek-V3)",
     .bytes_rule = "the chosen experts' fp8 weights and block scales + input + routing + out",
     .gpu_suite = BENCH_SUITE(MOE_PRESET(2, 256, 8, 7168, 2048)),
     .host_suite = BENCH_SUITE(MOE_SHAPE(2, 8, 2, 256, 128, 16)), .describe = describe_block},
};

const bench_family bench_family_moe = {"moe", shape_moe, NULL, BENCH_TABLE(moe_routines)};
