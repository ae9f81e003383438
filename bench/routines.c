/* The routine table of `ignis bench`: for every op, the tensors one call needs (shape, dtype, how
 * they are filled), the bytes the call must move, and the call itself.
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
 * place unless the case is in place. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

#define NORM_EPS 1e-6

static int64_t dtype_bytes(ignis_dtype dtype) {
  return (int64_t)ignis_dtype_size(dtype);
}

static bench_tensor_spec spec_1d(const char *name, ignis_dtype dtype, int64_t n, bench_fill fill) {
  bench_tensor_spec s = {name, dtype, 1, {n, 0, 0}, fill, 0, n * dtype_bytes(dtype)};
  return s;
}

static bench_tensor_spec spec_2d(const char *name, ignis_dtype dtype, int64_t rows, int64_t cols,
                                 bench_fill fill) {
  bench_tensor_spec s = {name, dtype, 2, {rows, cols, 0}, fill, 0, rows * cols * dtype_bytes(dtype)};
  return s;
}

static bench_tensor_spec spec_3d(const char *name, ignis_dtype dtype, int64_t a, int64_t b, int64_t c,
                                 bench_fill fill) {
  bench_tensor_spec s = {name, dtype, 3, {a, b, c}, fill, 0, a * b * c * dtype_bytes(dtype)};
  return s;
}

/* ---- norms: input [T, H], weight [H] (dtype of input; LayerNorm gamma/beta f32), out [T, H] -- */
static int describe_norm(const bench_case *c, bench_tensor_spec *s) {
  s[0] = spec_2d("input", c->dtype, c->tokens, c->hidden, BENCH_FILL_RANDOM);
  s[1] = spec_1d("weight", c->dtype, c->hidden, BENCH_FILL_RANDOM);
  s[2] = spec_2d("out", c->dtype, c->tokens, c->hidden, BENCH_FILL_RANDOM);
  return 3;
}

static ignis_status call_rmsnorm(const bench_case *c, ignis_tensor *t, void *stream) {
  return ignis_rmsnorm(&t[0], &t[1], NORM_EPS, &t[2], stream);
}

static ignis_status call_gemma_rmsnorm(const bench_case *c, ignis_tensor *t, void *stream) {
  return ignis_gemma_rmsnorm(&t[0], &t[1], NORM_EPS, &t[2], stream);
}

/* input and residual are both read and written. */
static int describe_fused_add(const bench_case *c, bench_tensor_spec *s) {
  s[0] = spec_2d("input", c->dtype, c->tokens, c->hidden, BENCH_FILL_RANDOM);
  s[1] = spec_2d("residual", c->dtype, c->tokens, c->hidden, BENCH_FILL_RANDOM);
  s[2] = spec_1d("weight", c->dtype, c->hidden, BENCH_FILL_RANDOM);
  s[0].bytes_moved *= 2;
  s[1].bytes_moved *= 2;
  return 3;
}

static ignis_status call_fused_add_rmsnorm(const bench_case *c, ignis_tensor *t, void *stream) {
  return ignis_fused_add_rmsnorm(&t[0], &t[1], &t[2], NORM_EPS, stream);
}

static ignis_status call_gemma_fused_add_rmsnorm(const bench_case *c, ignis_tensor *t, void *stream) {
  return ignis_gemma_fused_add_rmsnorm(&t[0], &t[1], &t[2], NORM_EPS, stream);
}

static int describe_layernorm(const bench_case *c, bench_tensor_spec *s) {
  s[0] = spec_2d("input", c->dtype, c->tokens, c->hidden, BENCH_FILL_RANDOM);
  s[1] = spec_1d("gamma", IGNIS_F32, c->hidden, BENCH_FILL_RANDOM);
  s[2] = spec_1d("beta", IGNIS_F32, c->hidden, BENCH_FILL_RANDOM);
  s[3] = spec_2d("out", c->dtype, c->tokens, c->hidden, BENCH_FILL_RANDOM);
  return 4;
}

static ignis_status call_layernorm(const bench_case *c, ignis_tensor *t, void *stream) {
  return ignis_layernorm(&t[0], &t[1], &t[2], NORM_EPS, &t[3], stream);
}

/* ---- gated activations: input [T, 2H] -> out [T, H] -------------------------------------------- */
static int describe_activation(const bench_case *c, bench_tensor_spec *s) {
  s[0] = spec_2d("input", c->dtype, c->tokens, 2 * c->hidden, BENCH_FILL_RANDOM);
  s[1] = spec_2d("out", c->dtype, c->tokens, c->hidden, BENCH_FILL_RANDOM);
  return 2;
}

static ignis_status call_silu_and_mul(const bench_case *c, ignis_tensor *t, void *stream) {
  return ignis_silu_and_mul(&t[0], &t[1], stream);
}

static ignis_status call_gelu_and_mul(const bench_case *c, ignis_tensor *t, void *stream) {
  return ignis_gelu_and_mul(&t[0], &t[1], stream);
}

static ignis_status call_gelu_tanh_and_mul(const bench_case *c, ignis_tensor *t, void *stream) {
  return ignis_gelu_tanh_and_mul(&t[0], &t[1], stream);
}

/* ---- RoPE: q, k first; the position tensors; then q_out, k_out unless in place ---------------- */
static int describe_qk(const bench_case *c, bench_tensor_spec *s) {
  s[0] = spec_3d("q", c->dtype, c->tokens, c->q_heads, c->head_dim, BENCH_FILL_RANDOM);
  s[1] = spec_3d("k", c->dtype, c->tokens, c->k_heads, c->head_dim, BENCH_FILL_RANDOM);
  if (c->inplace) {
    s[0].bytes_moved *= 2;
    s[1].bytes_moved *= 2;
  }
  return 2;
}

static int append_outputs(const bench_case *c, bench_tensor_spec *s, int n) {
  if (c->inplace)
    return n;
  s[n] = spec_3d("q_out", c->dtype, c->tokens, c->q_heads, c->head_dim, BENCH_FILL_RANDOM);
  s[n + 1] = spec_3d("k_out", c->dtype, c->tokens, c->k_heads, c->head_dim, BENCH_FILL_RANDOM);
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
  s[n++] = spec_1d("pos_ids", IGNIS_I32, c->tokens, BENCH_FILL_POSITIONS);
  return append_outputs(c, s, n);
}

static ignis_status call_rope_pos_ids(const bench_case *c, ignis_tensor *t, void *stream) {
  ignis_rope_config config = IGNIS_ROPE_CONFIG_INIT;
  return ignis_apply_rope_pos_ids(&t[0], &t[1], &t[2], &config, q_out_of(c, t, 3), k_out_of(c, t, 3), stream);
}

/* FlashInfer's Llama 3.1 defaults: scale 8, theta 5e5, low 1, high 4, original context 8192. */
static ignis_status call_rope_llama31(const bench_case *c, ignis_tensor *t, void *stream) {
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
  s[n++] = spec_1d("indptr", IGNIS_I32, c->batch + 1, BENCH_FILL_INDPTR);
  s[n++] = spec_1d("offsets", IGNIS_I32, c->batch, BENCH_FILL_OFFSETS);
  return append_outputs(c, s, n);
}

static ignis_status call_rope_indptr(const bench_case *c, ignis_tensor *t, void *stream) {
  ignis_rope_config config = IGNIS_ROPE_CONFIG_INIT;
  return ignis_apply_rope(&t[0], &t[1], &t[2], &t[3], &config, q_out_of(c, t, 4), k_out_of(c, t, 4), stream);
}

static int64_t max_position(const bench_case *c) {
  return c->tokens > BENCH_MAX_POSITION ? c->tokens : BENCH_MAX_POSITION;
}

static int describe_rope_cos_sin_cache(const bench_case *c, bench_tensor_spec *s) {
  int n = describe_qk(c, s);
  s[n++] = spec_1d("positions", IGNIS_I64, c->tokens, BENCH_FILL_POSITIONS);
  bench_tensor_spec cache =
      spec_2d("cos_sin_cache", IGNIS_F32, max_position(c), c->head_dim, BENCH_FILL_COS_SIN);
  cache.shared = 1;
  cache.bytes_moved = c->tokens * c->head_dim * 4;
  s[n++] = cache;
  return append_outputs(c, s, n);
}

static ignis_status call_rope_cos_sin_cache(const bench_case *c, ignis_tensor *t, void *stream) {
  return ignis_apply_rope_with_cos_sin_cache(&t[2], &t[0], &t[1], c->head_dim, &t[3], 1, q_out_of(c, t, 4),
                                             k_out_of(c, t, 4), stream);
}

#define NORM_BYTES "input + out (T*H*es each) + weight (H*es)"
#define FUSED_BYTES "input and residual read and written (4*T*H*es) + weight (H*es)"
#define ACT_BYTES "input (T*2H*es) + out (T*H*es); shape quoted is the output's [T, H]"
#define ROPE_BYTES_QK "q and k read and written (2*T*(Hq+Hk)*D*es, in place or not)"

const bench_routine bench_routines[] = {
    {"rmsnorm", BENCH_FAMILY_NORM, "out = x / rms(x) * w", NORM_BYTES, describe_norm, call_rmsnorm},
    {"gemma_rmsnorm", BENCH_FAMILY_NORM, "out = x / rms(x) * (1 + w)", NORM_BYTES, describe_norm,
     call_gemma_rmsnorm},
    {"fused_add_rmsnorm", BENCH_FAMILY_NORM, "residual += x; x = rmsnorm(residual)", FUSED_BYTES,
     describe_fused_add, call_fused_add_rmsnorm},
    {"gemma_fused_add_rmsnorm", BENCH_FAMILY_NORM, "residual += x; x = gemma_rmsnorm(residual)", FUSED_BYTES,
     describe_fused_add, call_gemma_fused_add_rmsnorm},
    {"layernorm", BENCH_FAMILY_NORM, "out = (x - mean) / std * gamma + beta (gamma, beta f32)",
     "input + out (T*H*es each) + gamma + beta (H*4 each)", describe_layernorm, call_layernorm},
    {"silu_and_mul", BENCH_FAMILY_ACTIVATION, "out = silu(x[:, :H]) * x[:, H:]", ACT_BYTES,
     describe_activation, call_silu_and_mul},
    {"gelu_and_mul", BENCH_FAMILY_ACTIVATION, "out = gelu(x[:, :H]) * x[:, H:]", ACT_BYTES,
     describe_activation, call_gelu_and_mul},
    {"gelu_tanh_and_mul", BENCH_FAMILY_ACTIVATION, "out = gelu_tanh(x[:, :H]) * x[:, H:]", ACT_BYTES,
     describe_activation, call_gelu_tanh_and_mul},
    {"rope_pos_ids", BENCH_FAMILY_ROPE, "RoPE, positions from pos_ids (i32), theta 1e4",
     ROPE_BYTES_QK " + pos_ids (T*4)", describe_rope_pos_ids, call_rope_pos_ids},
    {"rope", BENCH_FAMILY_ROPE, "RoPE, positions from indptr/offsets (i32), theta 1e4",
     ROPE_BYTES_QK " + indptr ((B+1)*4) + offsets (B*4)", describe_rope_indptr, call_rope_indptr},
    {"rope_llama31", BENCH_FAMILY_ROPE, "RoPE with Llama 3.1 frequency scaling, pos_ids (i32)",
     ROPE_BYTES_QK " + pos_ids (T*4)", describe_rope_pos_ids, call_rope_llama31},
    {"rope_cos_sin_cache", BENCH_FAMILY_ROPE, "vLLM-style RoPE from an f32 cos/sin cache, i64 positions",
     ROPE_BYTES_QK " + positions (T*8) + gathered cache rows (T*D*4)", describe_rope_cos_sin_cache,
     call_rope_cos_sin_cache},
};

const int bench_routine_count = (int)(sizeof bench_routines / sizeof bench_routines[0]);

const bench_routine *bench_find_routine(const char *name) {
  for (int i = 0; i < bench_routine_count; ++i)
    if (strcmp(bench_routines[i].name, name) == 0)
      return &bench_routines[i];
  return NULL;
}

int64_t bench_case_bytes(const bench_case *c) {
  bench_tensor_spec specs[BENCH_MAX_TENSORS];
  int count = c->routine->describe(c, specs);
  int64_t bytes = 0;
  for (int i = 0; i < count; ++i)
    bytes += specs[i].bytes_moved;
  return bytes;
}

void bench_case_shape(const bench_case *c, char *text, size_t size) {
  switch (c->routine->family) {
  case BENCH_FAMILY_NORM:
    snprintf(text, size, "%lldx%lld", (long long)c->tokens, (long long)c->hidden);
    break;
  case BENCH_FAMILY_ACTIVATION:
    snprintf(text, size, "%lldx%lld (in %lldx%lld)", (long long)c->tokens, (long long)c->hidden,
             (long long)c->tokens, (long long)(2 * c->hidden));
    break;
  case BENCH_FAMILY_ROPE: {
    char requests[32] = "";
    if (c->routine->describe == describe_rope_indptr)
      snprintf(requests, sizeof requests, " %lldreq", (long long)c->batch);
    snprintf(text, size, "%lldtok %lld/%lldh d%lld%s %s", (long long)c->tokens, (long long)c->q_heads,
             (long long)c->k_heads, (long long)c->head_dim, requests, c->inplace ? "inplace" : "out");
    break;
  }
  }
}
