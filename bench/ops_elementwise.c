/* Registry entries of the element-wise families: norms, gated activations and RoPE. For each op:
 * the tensors one call needs (shape, dtype, fill), the bytes the call must move, the call, its tiny
 * smoke case and its suite shapes.
 *
 * Bytes are the fewest a call must move through memory: every input read once, every output
 * written once, a tensor updated in place counted twice (read and write). Weights count once per
 * call (each set carries its own weight, as each layer of a model does). Index tensors count at
 * their size. The cos/sin cache counts only the rows a call gathers (tokens x rotary_dim x 4, the
 * positions of one call being distinct), since a call never touches the rest.
 *
 * Shapes: norms take input [tokens, hidden]; gated activations produce [tokens, hidden] from an
 * input [tokens, 2 * hidden] (the shape quoted is the output's); RoPE takes q [tokens, q_heads,
 * head_dim] and k [tokens, k_heads, head_dim], rotated over the full head_dim (NeoX pairs), out of
 * place unless the case is in place.
 *
 * Suite groups: 1 the large norm and activation shapes, 2 the medium ones and large RoPE, 3 the
 * decode-sized shapes (the order the suite has always had). */
#include <stdio.h>

#include "bench.h"

#define NORM_EPS 1e-6

/* ---- norms: input [T, H], weight [H] (dtype of input; LayerNorm gamma/beta f32), out [T, H] -- */
static int describe_norm(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("input", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden);
  s[1] = BENCH_SPEC("weight", c->dtype, BENCH_FILL_RANDOM, c->hidden);
  s[2] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  return 3;
}

static ignis_status call_rmsnorm(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_rmsnorm(&t[0], &t[1], NORM_EPS, &t[2], stream);
}

static ignis_status call_gemma_rmsnorm(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_gemma_rmsnorm(&t[0], &t[1], NORM_EPS, &t[2], stream);
}

/* input and residual are both read and written. */
static int describe_fused_add(const bench_case *c, bench_tensor_spec *s) {
  s[0] = bench_inout(BENCH_SPEC("input", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  s[1] = bench_inout(BENCH_SPEC("residual", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  s[2] = BENCH_SPEC("weight", c->dtype, BENCH_FILL_RANDOM, c->hidden);
  s[0].bytes_moved *= 2;
  s[1].bytes_moved *= 2;
  return 3;
}

static ignis_status call_fused_add_rmsnorm(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_fused_add_rmsnorm(&t[0], &t[1], &t[2], NORM_EPS, stream);
}

static ignis_status call_gemma_fused_add_rmsnorm(const bench_case *c, ignis_tensor *t, void *state,
                                                 void *stream) {
  return ignis_gemma_fused_add_rmsnorm(&t[0], &t[1], &t[2], NORM_EPS, stream);
}

static int describe_layernorm(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("input", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden);
  s[1] = BENCH_SPEC("gamma", IGNIS_F32, BENCH_FILL_RANDOM, c->hidden);
  s[2] = BENCH_SPEC("beta", IGNIS_F32, BENCH_FILL_RANDOM, c->hidden);
  s[3] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  return 4;
}

static ignis_status call_layernorm(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_layernorm(&t[0], &t[1], &t[2], NORM_EPS, &t[3], stream);
}

/* ---- gated activations: input [T, 2H] -> out [T, H] -------------------------------------------- */
static int describe_activation(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("input", c->dtype, BENCH_FILL_RANDOM, c->tokens, 2 * c->hidden);
  s[1] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->hidden));
  return 2;
}

static ignis_status call_silu_and_mul(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_silu_and_mul(&t[0], &t[1], stream);
}

static ignis_status call_gelu_and_mul(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_gelu_and_mul(&t[0], &t[1], stream);
}

static ignis_status call_gelu_tanh_and_mul(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_gelu_tanh_and_mul(&t[0], &t[1], stream);
}

/* ---- RoPE: q, k first; the position tensors; then q_out, k_out unless in place ---------------- */
static int describe_qk(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("q", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->q_heads, c->head_dim);
  s[1] = BENCH_SPEC("k", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->k_heads, c->head_dim);
  if (c->inplace) {
    s[0] = bench_inout(s[0]);
    s[1] = bench_inout(s[1]);
    s[0].bytes_moved *= 2;
    s[1].bytes_moved *= 2;
  }
  return 2;
}

static int append_outputs(const bench_case *c, bench_tensor_spec *s, int n) {
  if (c->inplace)
    return n;
  s[n] = bench_output(BENCH_SPEC("q_out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->q_heads, c->head_dim));
  s[n + 1] =
      bench_output(BENCH_SPEC("k_out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->k_heads, c->head_dim));
  return n + 2;
}

/* Outputs follow `n_inputs` tensors; in place they are the inputs themselves. */
static ignis_tensor *q_out_of(const bench_case *c, ignis_tensor *t, int n_inputs) {
  return c->inplace ? &t[0] : &t[n_inputs];
}

static ignis_tensor *k_out_of(const bench_case *c, ignis_tensor *t, int n_inputs) {
  return c->inplace ? &t[1] : &t[n_inputs + 1];
}

static int describe_rope_pos_ids(const bench_case *c, bench_tensor_spec *s) {
  int n = describe_qk(c, s);
  s[n++] = BENCH_SPEC("pos_ids", IGNIS_I32, BENCH_FILL_POSITIONS, c->tokens);
  return append_outputs(c, s, n);
}

static ignis_status call_rope_pos_ids(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_rope_config config = IGNIS_ROPE_CONFIG_INIT;
  return ignis_apply_rope_pos_ids(&t[0], &t[1], &t[2], &config, q_out_of(c, t, 3), k_out_of(c, t, 3), stream);
}

/* FlashInfer's Llama 3.1 defaults: scale 8, theta 5e5, low 1, high 4, original context 8192. */
static ignis_status call_rope_llama31(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_rope_config config = IGNIS_ROPE_CONFIG_INIT;
  config.llama31 = 1;
  config.rope_scale = 8.0;
  config.rope_theta = 5e5;
  config.low_freq_factor = 1.0;
  config.high_freq_factor = 4.0;
  config.old_context_len = 8192.0;
  return ignis_apply_rope_pos_ids(&t[0], &t[1], &t[2], &config, q_out_of(c, t, 3), k_out_of(c, t, 3), stream);
}

static int describe_rope_indptr(const bench_case *c, bench_tensor_spec *s) {
  int n = describe_qk(c, s);
  s[n++] = BENCH_SPEC("indptr", IGNIS_I32, BENCH_FILL_INDPTR, c->batch + 1);
  s[n++] = BENCH_SPEC("offsets", IGNIS_I32, BENCH_FILL_OFFSETS, c->batch);
  return append_outputs(c, s, n);
}

static ignis_status call_rope_indptr(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_rope_config config = IGNIS_ROPE_CONFIG_INIT;
  return ignis_apply_rope(&t[0], &t[1], &t[2], &t[3], &config, q_out_of(c, t, 4), k_out_of(c, t, 4), stream);
}

static int64_t max_position(const bench_case *c) {
  return c->tokens > BENCH_MAX_POSITION ? c->tokens : BENCH_MAX_POSITION;
}

static int describe_rope_cos_sin_cache(const bench_case *c, bench_tensor_spec *s) {
  int n = describe_qk(c, s);
  s[n++] = BENCH_SPEC("positions", IGNIS_I64, BENCH_FILL_POSITIONS, c->tokens);
  bench_tensor_spec cache =
      BENCH_SPEC("cos_sin_cache", IGNIS_F32, BENCH_FILL_COS_SIN, max_position(c), c->head_dim);
  cache.shared = 1;
  cache.bytes_moved = c->tokens * c->head_dim * 4;
  s[n++] = cache;
  return append_outputs(c, s, n);
}

static ignis_status call_rope_cos_sin_cache(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_apply_rope_with_cos_sin_cache(&t[2], &t[0], &t[1], c->head_dim, &t[3], 1, q_out_of(c, t, 4),
                                             k_out_of(c, t, 4), stream);
}

/* ---- shape texts and derived dims ------------------------------------------------------------ */
static void shape_norm(const bench_case *c, char *text, size_t size) {
  snprintf(text, size, "%lldx%lld", (long long)c->tokens, (long long)c->hidden);
}

static void shape_activation(const bench_case *c, char *text, size_t size) {
  snprintf(text, size, "%lldx%lld (in %lldx%lld)", (long long)c->tokens, (long long)c->hidden,
           (long long)c->tokens, (long long)(2 * c->hidden));
}

static void shape_rope(const bench_case *c, char *text, size_t size) {
  char requests[32] = "";
  if (c->routine->dims & BENCH_DIM_BATCH)
    snprintf(requests, sizeof requests, " %lldreq", (long long)c->batch);
  snprintf(text, size, "%lldtok %lld/%lldh d%lld%s %s", (long long)c->tokens, (long long)c->q_heads,
           (long long)c->k_heads, (long long)c->head_dim, requests, c->inplace ? "inplace" : "out");
}

/* The requests of the indptr/offsets form: one per token for decode-sized batches, else one per
 * 4096 tokens; never more than the tokens. */
static void complete_rope(bench_case *c) {
  if (c->batch <= 0)
    c->batch = c->tokens <= 256 ? c->tokens : (c->tokens + 4095) / 4096;
  if (c->batch > c->tokens)
    c->batch = c->tokens;
}

/* ---- the entries ------------------------------------------------------------------------------ */
#define NORM_DIMS (BENCH_DIM_TOKENS | BENCH_DIM_HIDDEN)
#define ROPE_DIMS                                                                                            \
  (BENCH_DIM_TOKENS | BENCH_DIM_Q_HEADS | BENCH_DIM_K_HEADS | BENCH_DIM_HEAD_DIM | BENCH_DIM_INPLACE)
#define NORM_BYTES "input + out (T*H*es each) + weight (H*es)"
#define FUSED_BYTES "input and residual read and written (4*T*H*es) + weight (H*es)"
#define ACT_BYTES "input (T*2H*es) + out (T*H*es); shape quoted is the output's [T, H]"
#define ROPE_BYTES_QK "q and k read and written (2*T*(Hq+Hk)*D*es, in place or not)"

#define NORM_SHAPE(group, t, h) BENCH_SHAPE(group, .dtype = IGNIS_BF16, .tokens = (t), .hidden = (h))
#define ROPE_SHAPE(group, t, in_place)                                                                       \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .tokens = (t), .q_heads = 32, .k_heads = 8, .head_dim = 128,       \
              .inplace = (in_place))
#define GPU_NORM_LARGE NORM_SHAPE(1, 16384, 8192)
#define GPU_NORM_ALL                                                                                         \
  BENCH_SUITE(GPU_NORM_LARGE, NORM_SHAPE(2, 4096, 4096), NORM_SHAPE(3, 128, 4096), NORM_SHAPE(3, 16, 4096),  \
              NORM_SHAPE(3, 1, 4096))
/* The host suite stays short (CI runs it): 512 rows stand in for the large shapes. */
#define HOST_NORM_LARGE NORM_SHAPE(1, 512, 4096)
#define HOST_NORM_ALL BENCH_SUITE(HOST_NORM_LARGE, NORM_SHAPE(3, 16, 4096), NORM_SHAPE(3, 1, 4096))

/* What every entry of a family shares. */
#define NORM_ENTRY                                                                                           \
  .family = &bench_family_norm, .dims = NORM_DIMS, .dtypes = BENCH_DTYPES_FLOAT,                             \
  .tiny = BENCH_DIMS(.tokens = 3, .hidden = 96)
#define ACTIVATION_ENTRY                                                                                     \
  .family = &bench_family_activation, .dims = NORM_DIMS, .dtypes = BENCH_DTYPES_FLOAT,                       \
  .tiny = BENCH_DIMS(.tokens = 3, .hidden = 96), .bytes_rule = ACT_BYTES, .describe = describe_activation
#define ROPE_ENTRY                                                                                           \
  .family = &bench_family_rope, .dtypes = BENCH_DTYPES_FLOAT,                                                \
  .tiny = BENCH_DIMS(.tokens = 3, .q_heads = 2, .k_heads = 1, .head_dim = 64, .batch = 2)

static const bench_routine norm_routines[] = {
    {NORM_ENTRY, .name = "rmsnorm", .summary = "out = x / rms(x) * w", .functions = "ignis_rmsnorm",
     .bytes_rule = NORM_BYTES, .gpu_suite = GPU_NORM_ALL, .host_suite = HOST_NORM_ALL,
     .describe = describe_norm, .call = call_rmsnorm},
    {NORM_ENTRY, .name = "gemma_rmsnorm", .summary = "out = x / rms(x) * (1 + w)",
     .functions = "ignis_gemma_rmsnorm", .bytes_rule = NORM_BYTES, .gpu_suite = BENCH_SUITE(GPU_NORM_LARGE),
     .host_suite = BENCH_SUITE(HOST_NORM_LARGE), .describe = describe_norm, .call = call_gemma_rmsnorm},
    {NORM_ENTRY, .name = "fused_add_rmsnorm", .summary = "residual += x; x = rmsnorm(residual)",
     .functions = "ignis_fused_add_rmsnorm", .bytes_rule = FUSED_BYTES, .gpu_suite = GPU_NORM_ALL,
     .host_suite = HOST_NORM_ALL, .describe = describe_fused_add, .call = call_fused_add_rmsnorm},
    {NORM_ENTRY, .name = "gemma_fused_add_rmsnorm", .summary = "residual += x; x = gemma_rmsnorm(residual)",
     .functions = "ignis_gemma_fused_add_rmsnorm", .bytes_rule = FUSED_BYTES,
     .gpu_suite = BENCH_SUITE(GPU_NORM_LARGE), .host_suite = BENCH_SUITE(HOST_NORM_LARGE),
     .describe = describe_fused_add, .call = call_gemma_fused_add_rmsnorm},
    {NORM_ENTRY, .name = "layernorm", .summary = "out = (x - mean) / std * gamma + beta (gamma, beta f32)",
     .functions = "ignis_layernorm", .bytes_rule = "input + out (T*H*es each) + gamma + beta (H*4 each)",
     .gpu_suite = BENCH_SUITE(GPU_NORM_LARGE), .host_suite = BENCH_SUITE(HOST_NORM_LARGE),
     .describe = describe_layernorm, .call = call_layernorm},
};

static const bench_routine activation_routines[] = {
    {ACTIVATION_ENTRY, .name = "silu_and_mul", .summary = "out = silu(x[:, :H]) * x[:, H:]",
     .functions = "ignis_silu_and_mul", .gpu_suite = GPU_NORM_ALL, .host_suite = HOST_NORM_ALL,
     .call = call_silu_and_mul},
    {ACTIVATION_ENTRY, .name = "gelu_and_mul", .summary = "out = gelu(x[:, :H]) * x[:, H:]",
     .functions = "ignis_gelu_and_mul", .gpu_suite = BENCH_SUITE(GPU_NORM_LARGE),
     .host_suite = BENCH_SUITE(HOST_NORM_LARGE), .call = call_gelu_and_mul},
    {ACTIVATION_ENTRY, .name = "gelu_tanh_and_mul", .summary = "out = gelu_tanh(x[:, :H]) * x[:, H:]",
     .functions = "ignis_gelu_tanh_and_mul", .gpu_suite = BENCH_SUITE(GPU_NORM_LARGE),
     .host_suite = BENCH_SUITE(HOST_NORM_LARGE), .call = call_gelu_tanh_and_mul},
};

static const bench_routine rope_routines[] = {
    {ROPE_ENTRY, .name = "rope_pos_ids", .summary = "RoPE, positions from pos_ids (i32), theta 1e4",
     .functions = "ignis_apply_rope_pos_ids", .dims = ROPE_DIMS,
     .bytes_rule = ROPE_BYTES_QK " + pos_ids (T*4)",
     .gpu_suite = BENCH_SUITE(ROPE_SHAPE(2, 16384, 0), ROPE_SHAPE(2, 16384, 1), ROPE_SHAPE(3, 128, 1),
                              ROPE_SHAPE(3, 16, 1), ROPE_SHAPE(3, 1, 1)),
     .host_suite =
         BENCH_SUITE(ROPE_SHAPE(1, 512, 0), ROPE_SHAPE(1, 512, 1), ROPE_SHAPE(3, 16, 1), ROPE_SHAPE(3, 1, 1)),
     .describe = describe_rope_pos_ids, .call = call_rope_pos_ids},
    {ROPE_ENTRY, .name = "rope", .summary = "RoPE, positions from indptr/offsets (i32), theta 1e4",
     .functions = "ignis_apply_rope", .dims = ROPE_DIMS | BENCH_DIM_BATCH,
     .bytes_rule = ROPE_BYTES_QK " + indptr ((B+1)*4) + offsets (B*4)",
     .gpu_suite = BENCH_SUITE(ROPE_SHAPE(2, 16384, 1)), .host_suite = BENCH_SUITE(ROPE_SHAPE(1, 512, 1)),
     .describe = describe_rope_indptr, .call = call_rope_indptr},
    {ROPE_ENTRY, .name = "rope_llama31", .summary = "RoPE with Llama 3.1 frequency scaling, pos_ids (i32)",
     .functions = "ignis_apply_rope_pos_ids", .dims = ROPE_DIMS,
     .bytes_rule = ROPE_BYTES_QK " + pos_ids (T*4)", .gpu_suite = BENCH_SUITE(ROPE_SHAPE(2, 16384, 1)),
     .host_suite = BENCH_SUITE(ROPE_SHAPE(1, 512, 1)), .describe = describe_rope_pos_ids,
     .call = call_rope_llama31},
    {ROPE_ENTRY, .name = "rope_cos_sin_cache",
     .summary = "vLLM-style RoPE from an f32 cos/sin cache, i64 positions",
     .functions = "ignis_apply_rope_with_cos_sin_cache", .dims = ROPE_DIMS,
     .bytes_rule = ROPE_BYTES_QK " + positions (T*8) + gathered cache rows (T*D*4)",
     .gpu_suite = BENCH_SUITE(ROPE_SHAPE(2, 16384, 1), ROPE_SHAPE(3, 128, 1), ROPE_SHAPE(3, 16, 1),
                              ROPE_SHAPE(3, 1, 1)),
     .host_suite = BENCH_SUITE(ROPE_SHAPE(1, 512, 1), ROPE_SHAPE(3, 1, 1)),
     .describe = describe_rope_cos_sin_cache, .call = call_rope_cos_sin_cache},
};

const bench_family bench_family_norm = {"norm", shape_norm, NULL, BENCH_TABLE(norm_routines)};
const bench_family bench_family_activation = {"activation", shape_activation, NULL,
                                              BENCH_TABLE(activation_routines)};
const bench_family bench_family_rope = {"rope", shape_rope, complete_rope, BENCH_TABLE(rope_routines)};
