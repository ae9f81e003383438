/* Registry entries of the fp8 quantization family (include/ignis/quant.h): the plain quantizations
 * (static and dynamic per-tensor, per-token, per-token-group 1x128) and the fused norm and
 * silu_and_mul forms. Every output is fp8 e4m3; inputs are [tokens, hidden] in the case's dtype
 * (silu_and_mul: [tokens, 2 * hidden], the shape quoted is the output's).
 *
 * Bytes are the fewest a call must move: the input read once, the fp8 output written once (one
 * byte a value), scales at their size, the residual read and written, weights once. The dynamic
 * per-tensor form reads its input twice (absmax, then quantize: documented in quant.h), which
 * these bytes do not count, so its GB/s is what the op delivers, not what the memory moved.
 * Group scales are written in the column-major, TMA-aligned layout DeepGEMM and FlashInfer's
 * fused_add_rmsnorm_fp8_block_quant use: storage [hidden / 128, round_up(tokens, 4)], seen by the
 * call as the [tokens, hidden / 128] view with strides (1, round_up(tokens, 4)).
 *
 * Suite: group 1 16384x8192 (the 3.6 TB/s bar), group 2 4096x4096, group 3 128 and 1 rows. */
#include <stdio.h>

#include "bench.h"

#define QUANT_EPS 1e-6
#define GROUP 128
#define OUT_DTYPE IGNIS_FP8_E4M3

static int64_t padded_tokens(const bench_case *c) {
  return (c->tokens + 3) / 4 * 4;
}

/* [tokens, hidden / GROUP] view of the column-major storage spec [hidden / GROUP, padded]. */
static ignis_tensor column_major_scales(const bench_case *c, const ignis_tensor *storage) {
  ignis_tensor t = *storage;
  t.shape[0] = c->tokens;
  t.shape[1] = c->hidden / GROUP;
  t.strides[0] = 1;
  t.strides[1] = padded_tokens(c);
  return t;
}

static bench_tensor_spec group_scale_spec(const bench_case *c) {
  bench_tensor_spec s =
      bench_output(BENCH_SPEC("scale", IGNIS_F32, BENCH_FILL_RANDOM, c->hidden / GROUP, padded_tokens(c)));
  s.bytes_moved = c->tokens * (c->hidden / GROUP) * 4;
  return s;
}

#define INPUT_SPEC(width) BENCH_SPEC("input", c->dtype, BENCH_FILL_RANDOM, c->tokens, (width))
#define OUT_SPEC bench_output(BENCH_SPEC("out", OUT_DTYPE, BENCH_FILL_RANDOM, c->tokens, c->hidden))
#define STATIC_SCALE_SPEC BENCH_SPEC("scale", IGNIS_F32, BENCH_FILL_PROBS, 1)

/* ---- plain quantizations: input, out, scale ------------------------------------------------ */
static int describe_static(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(c->hidden);
  s[1] = OUT_SPEC;
  s[2] = STATIC_SCALE_SPEC;
  return 3;
}

static ignis_status call_static(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_fp8_quantize(&t[0], &t[2], &t[1], stream);
}

static int describe_dynamic(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(c->hidden);
  s[1] = OUT_SPEC;
  s[2] = bench_output(BENCH_SPEC("scale", IGNIS_F32, BENCH_FILL_RANDOM, 1));
  return 3;
}

static ignis_status call_dynamic(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_fp8_quantize_dynamic(&t[0], 1e-10, &t[1], &t[2], stream);
}

static int describe_per_token(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(c->hidden);
  s[1] = OUT_SPEC;
  s[2] = bench_output(BENCH_SPEC("scale", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens));
  return 3;
}

static ignis_status call_per_token(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_fp8_quantize_per_token(&t[0], 1e-10, &t[1], &t[2], stream);
}

static int describe_group(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(c->hidden);
  s[1] = OUT_SPEC;
  s[2] = group_scale_spec(c);
  return 3;
}

static ignis_status call_group(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_tensor scale = column_major_scales(c, &t[2]);
  return ignis_fp8_quantize_per_token_group(&t[0], GROUP, 1e-10, 0, &t[1], &scale, stream);
}

static ignis_status call_group_ue8m0(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_tensor scale = column_major_scales(c, &t[2]);
  return ignis_fp8_quantize_per_token_group(&t[0], GROUP, 1e-10, 1, &t[1], &scale, stream);
}

/* ---- fused norms ----------------------------------------------------------------------------- */
static int describe_rmsnorm_quant(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(c->hidden);
  s[1] = BENCH_SPEC("weight", c->dtype, BENCH_FILL_RANDOM, c->hidden);
  s[2] = STATIC_SCALE_SPEC;
  s[3] = OUT_SPEC;
  return 4;
}

static ignis_status call_rmsnorm_quant(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_rmsnorm_quant(&t[0], &t[1], &t[2], QUANT_EPS, &t[3], stream);
}

static int describe_fused_add_quant(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(c->hidden);
  s[1] = bench_inout(BENCH_SPEC("residual", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  s[1].bytes_moved *= 2;
  s[2] = BENCH_SPEC("weight", c->dtype, BENCH_FILL_RANDOM, c->hidden);
  s[3] = STATIC_SCALE_SPEC;
  s[4] = OUT_SPEC;
  return 5;
}

static ignis_status call_fused_add_quant(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_fused_add_rmsnorm_quant(&t[0], &t[1], &t[2], &t[3], QUANT_EPS, &t[4], stream);
}

static int describe_layernorm_quant(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(c->hidden);
  s[1] = BENCH_SPEC("gamma", IGNIS_F32, BENCH_FILL_RANDOM, c->hidden);
  s[2] = BENCH_SPEC("beta", IGNIS_F32, BENCH_FILL_RANDOM, c->hidden);
  s[3] = STATIC_SCALE_SPEC;
  s[4] = OUT_SPEC;
  return 5;
}

static ignis_status call_layernorm_quant(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_layernorm_quant(&t[0], &t[1], &t[2], &t[3], QUANT_EPS, &t[4], stream);
}

static int describe_block_quant(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(c->hidden);
  s[1] = bench_inout(BENCH_SPEC("residual", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  s[1].bytes_moved *= 2;
  s[2] = BENCH_SPEC("weight", c->dtype, BENCH_FILL_RANDOM, c->hidden);
  s[3] = OUT_SPEC;
  s[4] = group_scale_spec(c);
  s[5] = bench_output(BENCH_SPEC("normed_out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  return 6;
}

static ignis_status call_block_quant(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_tensor scale = column_major_scales(c, &t[4]);
  return ignis_fused_add_rmsnorm_fp8_block_quant(&t[0], &t[1], &t[2], QUANT_EPS, GROUP, 1e-4, 0, &t[3],
                                                 &scale, &t[5], stream);
}

/* ---- silu_and_mul: input [T, 2H] -> out [T, H] ---------------------------------------------- */
static int describe_silu_quant(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(2 * c->hidden);
  s[1] = OUT_SPEC;
  s[2] = STATIC_SCALE_SPEC;
  return 3;
}

static ignis_status call_silu_quant(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_silu_and_mul_quant(&t[0], &t[2], &t[1], stream);
}

static int describe_silu_group(const bench_case *c, bench_tensor_spec *s) {
  s[0] = INPUT_SPEC(2 * c->hidden);
  s[1] = OUT_SPEC;
  s[2] = group_scale_spec(c);
  return 3;
}

static ignis_status call_silu_group(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_tensor scale = column_major_scales(c, &t[2]);
  return ignis_silu_and_mul_quant_per_token_group(&t[0], GROUP, 1e-10, 0, &t[1], &scale, stream);
}

/* ---- the entries ------------------------------------------------------------------------------ */
static void shape_quant(const bench_case *c, char *text, size_t size) {
  snprintf(text, size, "%lldx%lld", (long long)c->tokens, (long long)c->hidden);
}

#define QUANT_SHAPE(group, t, h) BENCH_SHAPE(group, .dtype = IGNIS_BF16, .tokens = (t), .hidden = (h))
#define GPU_QUANT_LARGE QUANT_SHAPE(1, 16384, 8192)
#define GPU_QUANT_ALL                                                                                        \
  BENCH_SUITE(GPU_QUANT_LARGE, QUANT_SHAPE(2, 4096, 4096), QUANT_SHAPE(3, 128, 4096), QUANT_SHAPE(3, 1, 4096))
#define HOST_QUANT_LARGE QUANT_SHAPE(1, 512, 4096)
#define HOST_QUANT_ALL BENCH_SUITE(HOST_QUANT_LARGE, QUANT_SHAPE(3, 1, 4096))
#define QUANT_ENTRY                                                                                          \
  .family = &bench_family_quant, .dims = BENCH_DIM_TOKENS | BENCH_DIM_HIDDEN, .dtypes = BENCH_DTYPES_FLOAT,  \
  .tiny = BENCH_DIMS(.tokens = 4, .hidden = 256)
#define OUT_BYTES "input (T*H*es) + out (T*H)"

static const bench_routine quant_routines[] = {
    {QUANT_ENTRY, .name = "fp8_quantize", .summary = "out = fp8(x / scale), static per-tensor scale",
     .functions = "ignis_fp8_quantize", .bytes_rule = OUT_BYTES " + scale (4)", .gpu_suite = GPU_QUANT_ALL,
     .host_suite = HOST_QUANT_ALL, .describe = describe_static, .call = call_static},
    {QUANT_ENTRY, .name = "fp8_quantize_dynamic",
     .summary = "scale = absmax / 448 on the device, then out = fp8(x / scale) (two passes)",
     .functions = "ignis_fp8_quantize_dynamic",
     .bytes_rule = OUT_BYTES " + scale (4); the input is read twice",
     .gpu_suite = BENCH_SUITE(GPU_QUANT_LARGE), .host_suite = BENCH_SUITE(HOST_QUANT_LARGE),
     .describe = describe_dynamic, .call = call_dynamic},
    {QUANT_ENTRY, .name = "fp8_quantize_per_token", .summary = "one dynamic scale per row",
     .functions = "ignis_fp8_quantize_per_token", .bytes_rule = OUT_BYTES " + scales (T*4)",
     .gpu_suite = BENCH_SUITE(GPU_QUANT_LARGE), .host_suite = BENCH_SUITE(HOST_QUANT_LARGE),
     .describe = describe_per_token, .call = call_per_token},
    {QUANT_ENTRY, .name = "per_token_group_quant_8bit",
     .summary = "1x128 dynamic scales, f32, column-major TMA-aligned",
     .functions = "ignis_fp8_quantize_per_token_group", .bytes_rule = OUT_BYTES " + scales (T*H/128*4)",
     .gpu_suite = GPU_QUANT_ALL, .host_suite = HOST_QUANT_ALL, .describe = describe_group,
     .call = call_group},
    {QUANT_ENTRY, .name = "per_token_group_quant_8bit_ue8m0",
     .summary = "1x128 dynamic power-of-two scales (f32), column-major TMA-aligned",
     .functions = "ignis_fp8_quantize_per_token_group", .bytes_rule = OUT_BYTES " + scales (T*H/128*4)",
     .gpu_suite = BENCH_SUITE(GPU_QUANT_LARGE), .host_suite = BENCH_SUITE(HOST_QUANT_LARGE),
     .describe = describe_group, .call = call_group_ue8m0},
    {QUANT_ENTRY, .name = "rmsnorm_quant", .summary = "out = fp8(rmsnorm(x) * w / scale)",
     .functions = "ignis_rmsnorm_quant", .bytes_rule = OUT_BYTES " + weight (H*es) + scale (4)",
     .gpu_suite = GPU_QUANT_ALL, .host_suite = HOST_QUANT_ALL, .describe = describe_rmsnorm_quant,
     .call = call_rmsnorm_quant},
    {QUANT_ENTRY, .name = "fused_add_rmsnorm_quant",
     .summary = "residual += x; out = fp8(rmsnorm(residual) * w / scale)",
     .functions = "ignis_fused_add_rmsnorm_quant",
     .bytes_rule = OUT_BYTES " + residual read and written (2*T*H*es) + weight + scale",
     .gpu_suite = GPU_QUANT_ALL, .host_suite = HOST_QUANT_ALL, .describe = describe_fused_add_quant,
     .call = call_fused_add_quant},
    {QUANT_ENTRY, .name = "layernorm_quant", .summary = "out = fp8((layernorm(x) * gamma + beta) / scale)",
     .functions = "ignis_layernorm_quant", .bytes_rule = OUT_BYTES " + gamma + beta (H*4 each) + scale",
     .gpu_suite = BENCH_SUITE(GPU_QUANT_LARGE), .host_suite = BENCH_SUITE(HOST_QUANT_LARGE),
     .describe = describe_layernorm_quant, .call = call_layernorm_quant},
    {QUANT_ENTRY, .name = "fused_add_rmsnorm_fp8_block_quant",
     .summary = "residual += x; normed = rmsnorm(residual) * w; 1x128 fp8 of normed",
     .functions = "ignis_fused_add_rmsnorm_fp8_block_quant",
     .bytes_rule = OUT_BYTES " + residual (2*T*H*es) + normed_out (T*H*es) + scales + weight",
     .gpu_suite = GPU_QUANT_ALL, .host_suite = HOST_QUANT_ALL, .describe = describe_block_quant,
     .call = call_block_quant},
    {QUANT_ENTRY, .name = "silu_and_mul_quant", .summary = "out = fp8(silu(x[:, :H]) * x[:, H:] / scale)",
     .functions = "ignis_silu_and_mul_quant", .bytes_rule = "input (T*2H*es) + out (T*H) + scale",
     .gpu_suite = GPU_QUANT_ALL, .host_suite = HOST_QUANT_ALL, .describe = describe_silu_quant,
     .call = call_silu_quant},
    {QUANT_ENTRY, .name = "silu_and_mul_quant_per_token_group",
     .summary = "silu(x[:, :H]) * x[:, H:] with 1x128 dynamic scales",
     .functions = "ignis_silu_and_mul_quant_per_token_group",
     .bytes_rule = "input (T*2H*es) + out (T*H) + scales (T*H/128*4)",
     .gpu_suite = BENCH_SUITE(GPU_QUANT_LARGE), .host_suite = BENCH_SUITE(HOST_QUANT_LARGE),
     .describe = describe_silu_group, .call = call_silu_group},
};

const bench_family bench_family_quant = {"quant", shape_quant, NULL, BENCH_TABLE(quant_routines)};
