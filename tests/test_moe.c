/* Tests of the fused MoE op (include/ignis/moe.h) on every backend, against an fp64 reference
 * written here that loops over the local experts and, for each, over the (token, slot) pairs
 * routed to it, following the header's formulas. The reference rounds where the header says the
 * pipeline stores (h, a and y in the work dtype; fp8 a and the 1x128 quantization of a 16-bit
 * input with the same scale rule), so what remains is f32 accumulation and the rare rounding flip:
 * the tolerance per output element is 2 units of the work dtype (4 with fp8) times the absolute
 * sum of the terms that reach it (GEMM 2's products, y, the bias), plus out's own rounding.
 *
 * Cases: tokens 0, 1, 7, 64 and a large count (4096 on CUDA, 300 on the CPU: several permutation
 * tiles), top_k 1, 2, 4, 8, experts 4 to 256, small and odd sizes (odd ones on the CPU; CUDA must
 * refuse them, untouched), Qwen3-like (H 2048, I 768) and DeepSeek-like (H 7168, fp8 block) slices,
 * every activation (gate first and up first, alpha / beta / limit per expert), biases (f32 and
 * 16-bit, fc2's only on tp_rank 0), all tokens on one expert, experts nobody picks, EP ranks with
 * and without local slots, padding slots routed to -1, packed routing, i64 ids, bf16 weights,
 * strided routing views, fp8 per-tensor (with and without the gate scale and fc2 input scale),
 * fp8 block (16-bit input quantized here, fp8 input with transposed scales), overwrite and
 * accumulate, out f32 / f16 / bf16, repeated calls giving the same bits. Bad inputs: each returns
 * its status, names the parameter, and leaves out untouched. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

enum { ROUTE_RANDOM, ROUTE_ONE_EXPERT, ROUTE_HALF_EXPERTS, ROUTE_NONE_LOCAL, ROUTE_PADDING };

typedef struct moe_case {
  const char *name;
  int64_t tokens, top_k, experts, global_experts, offset, hidden, inter;
  ignis_moe_activation act;
  ignis_moe_quant quant;
  ignis_dtype in, out;
  int route;
  int gate_first, accumulate, tp_rank;
  ignis_dtype fc1_bias, fc2_bias; /* IGNIS_U8: none */
  int act_args;                   /* 1: alpha, beta, limit per expert (limit only for SwigluStep) */
  ignis_dtype ids_dtype;
  int packed, bf16_weights, strided_routing;
  int gate_scale, fc2_q; /* per-tensor: the gate scale; fc2_input_scale 0 none, 1 one value, 2 per expert */
  int gpu_only, cpu_only;
} moe_case;

typedef struct arr {
  h_buf buf;
  ignis_tensor t;
} arr;

static arr make(h_backend be, ignis_dtype dtype, int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d)
    n *= shape[d];
  arr a;
  a.buf = h_buf_alloc(be, dtype, n > 0 ? n : 1);
  a.t = h_view(&a.buf, 0, ndim, shape, NULL);
  return a;
}

static void release(arr *a) {
  if (a->buf.host)
    h_buf_free(&a->buf);
}

static double fp8_round(double x) {
  return ignis_fp8_e4m3_to_f32(ignis_f32_to_fp8_e4m3((float)x));
}

static int gated(ignis_moe_activation act) {
  return act == IGNIS_MOE_ACT_SWIGLU || act == IGNIS_MOE_ACT_SWIGLU_BIAS ||
         act == IGNIS_MOE_ACT_SWIGLU_STEP || act == IGNIS_MOE_ACT_GEGLU || act == IGNIS_MOE_ACT_GEGLU_TANH;
}

static double sigmoid(double x) {
  return 1.0 / (1.0 + exp(-x));
}

static double gelu(double x) {
  return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

static double activate(ignis_moe_activation act, double g, double u, double alpha, double beta,
                       double limit) {
  switch (act) {
  case IGNIS_MOE_ACT_SWIGLU:
  case IGNIS_MOE_ACT_SWIGLU_BIAS: {
    double gc = fmin(g, limit), uc = fmax(fmin(u, limit), -limit);
    return gc * sigmoid(alpha * gc) * (uc + beta);
  }
  case IGNIS_MOE_ACT_SWIGLU_STEP:
    return fmin(g * sigmoid(g), limit) * fmax(fmin(u, limit), -limit);
  case IGNIS_MOE_ACT_GEGLU:
    return gelu(g) * u;
  case IGNIS_MOE_ACT_GEGLU_TANH:
    return 0.5 * g * (1.0 + tanh(0.79788456080286536 * (g + 0.044715 * g * g * g))) * u;
  case IGNIS_MOE_ACT_GELU:
    return gelu(g);
  case IGNIS_MOE_ACT_RELU:
    return fmax(g, 0.0);
  case IGNIS_MOE_ACT_SILU:
    return g * sigmoid(g);
  case IGNIS_MOE_ACT_RELU2:
    return fmax(g, 0.0) * fmax(g, 0.0);
  default:
    return g;
  }
}

static ignis_dtype work_dtype(const moe_case *c) {
  if (c->in == IGNIS_F16 || c->in == IGNIS_BF16)
    return c->in;
  return c->out == IGNIS_F16 || c->out == IGNIS_BF16 ? c->out : IGNIS_BF16;
}

/* Quantize n values as one 1x128 group the way the library does (f32 absmax / 448, 1 for zeros). */
static double quantize_group(const double *v, int64_t n, double *q) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    absmax = fmaxf(absmax, fabsf((float)v[i]));
  const float s = absmax > 0.0f ? absmax / 448.0f : 1.0f, inv = 1.0f / s;
  for (int64_t i = 0; i < n; ++i)
    q[i] = fp8_round((float)v[i] * inv);
  return s;
}

/* Everything one case uses. */
typedef struct moe_data {
  arr input, input_scale, ids, weights, fc1, fc2, fc1_bias, fc2_bias, fc1_scale, fc2_scale, gate_scale, fc2_q,
      alpha, beta, limit, out, ws;
  ignis_tensor ids_view, weights_view, input_scale_view;
  ignis_fused_moe_weights w;
  ignis_fused_moe_config config;
  size_t ws_bytes;
  int use_weights, use_input_scale; /* pass topk_weights / input_scale (else NULL) */
} moe_data;

static int64_t ceil128(int64_t x) {
  return (x + 127) / 128;
}

static double per_expert(const arr *a, int64_t e, double fallback) {
  return a->buf.host ? h_get(&a->buf, a->t.ndim ? e % a->t.shape[0] : 0) : fallback;
}

static void setup(h_backend be, const moe_case *c, h_rng *rng, moe_data *d) {
  memset(d, 0, sizeof *d);
  const int64_t t = c->tokens, k = c->top_k, e = c->experts, h = c->hidden, in = c->inter;
  const int64_t n1 = gated(c->act) ? 2 * in : in;
  const int fp8 = c->quant != IGNIS_MOE_QUANT_NONE;
  const ignis_dtype wdt = fp8 ? IGNIS_FP8_E4M3 : c->in;
  d->input = make(be, c->in, 2, (int64_t[]){t, h});
  for (int64_t i = 0; i < t * h; ++i)
    h_set(&d->input.buf, i, (fp8 ? 2.0 : 1.0) * h_rng_normal(rng));
  if (c->quant == IGNIS_MOE_QUANT_FP8_BLOCK && c->in == IGNIS_FP8_E4M3) {
    /* stored [H/128, T], handed in as the transposed [T, H/128] view (TRT-LLM's layout) */
    d->input_scale = make(be, IGNIS_F32, 2, (int64_t[]){ceil128(h), t});
    for (int64_t i = 0; i < ceil128(h) * t; ++i)
      h_set(&d->input_scale.buf, i, h_rng_uniform(rng, 0.05, 0.2));
    d->input_scale_view = h_view(&d->input_scale.buf, 0, 2, (int64_t[]){t, ceil128(h)}, (int64_t[]){1, t});
    d->use_input_scale = 1;
  }
  /* routing [T, K] (strided: stored [K, T] and viewed transposed) */
  const int64_t stored[2] = {c->strided_routing ? k : t, c->strided_routing ? t : k};
  const int64_t view_strides[2] = {c->strided_routing ? 1 : k, c->strided_routing ? t : 1};
  d->ids = make(be, c->ids_dtype, 2, stored);
  d->ids_view = h_view(&d->ids.buf, 0, 2, (int64_t[]){t, k}, view_strides);
  if (!c->packed) {
    d->weights = make(be, c->bf16_weights ? IGNIS_BF16 : IGNIS_F32, 2, stored);
    d->weights_view = h_view(&d->weights.buf, 0, 2, (int64_t[]){t, k}, view_strides);
    d->use_weights = 1;
  }
  for (int64_t tok = 0; tok < t; ++tok) {
    int64_t chosen[IGNIS_MOE_MAX_TOP_K];
    for (int64_t j = 0; j < k; ++j) {
      int64_t id;
      for (;;) { /* distinct ids per token, as a top-k gives */
        switch (c->route) {
        case ROUTE_ONE_EXPERT:
          id = c->offset + (j * 3 + 1) % c->experts;
          break;
        case ROUTE_HALF_EXPERTS:
          id = c->offset + 2 * h_rng_int(rng, 0, (c->experts - 1) / 2);
          break;
        case ROUTE_NONE_LOCAL:
          id = c->offset + c->experts + h_rng_int(rng, 0, c->global_experts - c->offset - c->experts - 1);
          break;
        default:
          id = h_rng_int(rng, 0, c->global_experts - 1);
          if (c->route == ROUTE_PADDING && h_rng_int(rng, 0, 3) == 0)
            id = -1 - j;
          break;
        }
        int dup = 0;
        for (int64_t i = 0; i < j; ++i)
          dup |= chosen[i] == id;
        if (!dup || c->route == ROUTE_ONE_EXPERT)
          break;
      }
      chosen[j] = id;
      const double weight = h_rng_uniform(rng, 0.1, 1.0);
      int64_t idx[2] = {tok, j};
      const int64_t at = h_index(&d->ids.buf, &d->ids_view, idx);
      if (c->packed) {
        const uint16_t bits = ignis_f32_to_bf16((float)weight);
        h_set(&d->ids.buf, at, (double)(int32_t)(((uint32_t)id << 16) | bits));
      } else {
        h_set(&d->ids.buf, at, (double)id);
        h_set(&d->weights.buf, h_index(&d->weights.buf, &d->weights_view, idx), weight);
      }
    }
  }
  /* experts */
  d->fc1 = make(be, wdt, 3, (int64_t[]){e, n1, h});
  d->fc2 = make(be, wdt, 3, (int64_t[]){e, h, in});
  const double s1 = fp8 ? 2.0 : 1.0 / sqrt((double)h), s2 = fp8 ? 2.0 : 1.0 / sqrt((double)in);
  for (int64_t i = 0; i < e * n1 * h; ++i)
    h_set(&d->fc1.buf, i, s1 * h_rng_normal(rng));
  for (int64_t i = 0; i < e * h * in; ++i)
    h_set(&d->fc2.buf, i, s2 * h_rng_normal(rng));
  if (c->quant == IGNIS_MOE_QUANT_FP8_BLOCK) {
    d->fc1_scale = make(be, IGNIS_F32, 3, (int64_t[]){e, ceil128(n1), ceil128(h)});
    d->fc2_scale = make(be, IGNIS_F32, 3, (int64_t[]){e, ceil128(h), ceil128(in)});
    for (int64_t i = 0; i < d->fc1_scale.buf.count; ++i)
      h_set(&d->fc1_scale.buf, i, h_rng_uniform(rng, 0.5, 1.5) / (2.0 * sqrt((double)h)));
    for (int64_t i = 0; i < d->fc2_scale.buf.count; ++i)
      h_set(&d->fc2_scale.buf, i, h_rng_uniform(rng, 0.5, 1.5) / (2.0 * sqrt((double)in)));
  } else if (c->quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR) {
    d->fc1_scale = make(be, IGNIS_F32, 1, (int64_t[]){e});
    d->fc2_scale = make(be, IGNIS_F32, 1, (int64_t[]){e});
    for (int64_t i = 0; i < e; ++i) {
      h_set(&d->fc1_scale.buf, i, h_rng_uniform(rng, 0.5, 1.5) / (4.0 * sqrt((double)h)));
      h_set(&d->fc2_scale.buf, i, h_rng_uniform(rng, 0.5, 1.5) / (2.0 * sqrt((double)in)) / 16.0);
    }
    if (c->gate_scale) {
      d->gate_scale = make(be, IGNIS_F32, 1, (int64_t[]){e});
      for (int64_t i = 0; i < e; ++i)
        h_set(&d->gate_scale.buf, i, h_rng_uniform(rng, 0.5, 1.5) / (4.0 * sqrt((double)h)));
    }
    if (c->fc2_q) {
      const int64_t n = c->fc2_q == 1 ? 1 : e;
      d->fc2_q = make(be, IGNIS_F32, c->fc2_q == 1 ? 0 : 1, (int64_t[]){n});
      for (int64_t i = 0; i < n; ++i)
        h_set(&d->fc2_q.buf, i, h_rng_uniform(rng, 8.0, 24.0));
    }
  }
  if (c->fc1_bias != IGNIS_U8) {
    d->fc1_bias = make(be, c->fc1_bias, 2, (int64_t[]){e, n1});
    for (int64_t i = 0; i < e * n1; ++i)
      h_set(&d->fc1_bias.buf, i, 0.5 * h_rng_normal(rng));
  }
  if (c->fc2_bias != IGNIS_U8) {
    d->fc2_bias = make(be, c->fc2_bias, 2, (int64_t[]){e, h});
    for (int64_t i = 0; i < e * h; ++i)
      h_set(&d->fc2_bias.buf, i, 0.5 * h_rng_normal(rng));
  }
  if (c->act_args) {
    if (c->act != IGNIS_MOE_ACT_SWIGLU_STEP) {
      d->alpha = make(be, IGNIS_F32, 1, (int64_t[]){e});
      d->beta = make(be, IGNIS_F32, 1, (int64_t[]){e});
    }
    d->limit = make(be, IGNIS_F32, 1, (int64_t[]){e});
    for (int64_t i = 0; i < e; ++i) {
      if (d->alpha.buf.host) {
        h_set(&d->alpha.buf, i, 1.702 + 0.1 * (double)i);
        h_set(&d->beta.buf, i, 1.0 - 0.05 * (double)i);
      }
      h_set(&d->limit.buf, i, 0.6 + 0.1 * (double)i);
    }
  }
  d->out = make(be, c->out, 2, (int64_t[]){t, h});
  if (c->accumulate)
    for (int64_t i = 0; i < t * h; ++i)
      h_set(&d->out.buf, i, h_rng_normal(rng));
  else
    h_buf_poison(&d->out.buf);
  arr *all[] = {&d->input,    &d->input_scale, &d->ids,       &d->weights,   &d->fc1,        &d->fc2,
                &d->fc1_bias, &d->fc2_bias,    &d->fc1_scale, &d->fc2_scale, &d->gate_scale, &d->fc2_q,
                &d->alpha,    &d->beta,        &d->limit,     &d->out};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    if (all[i]->buf.host)
      h_buf_upload(&all[i]->buf);

  ignis_fused_moe_weights w = IGNIS_FUSED_MOE_WEIGHTS_INIT;
  w.fc1 = &d->fc1.t;
  w.fc2 = &d->fc2.t;
  w.fc1_bias = d->fc1_bias.buf.host ? &d->fc1_bias.t : NULL;
  w.fc2_bias = d->fc2_bias.buf.host ? &d->fc2_bias.t : NULL;
  w.fc1_scale = d->fc1_scale.buf.host ? &d->fc1_scale.t : NULL;
  w.fc2_scale = d->fc2_scale.buf.host ? &d->fc2_scale.t : NULL;
  w.fc1_gate_scale = d->gate_scale.buf.host ? &d->gate_scale.t : NULL;
  w.fc2_input_scale = d->fc2_q.buf.host ? &d->fc2_q.t : NULL;
  w.act_alpha = d->alpha.buf.host ? &d->alpha.t : NULL;
  w.act_beta = d->beta.buf.host ? &d->beta.t : NULL;
  w.act_limit = d->limit.buf.host ? &d->limit.t : NULL;
  d->w = w;
  ignis_fused_moe_config config = IGNIS_FUSED_MOE_CONFIG_INIT;
  config.activation = c->act;
  config.quant = c->quant;
  config.gate_first = c->gate_first;
  config.accumulate = c->accumulate;
  config.local_expert_offset = c->offset;
  config.tp_rank = c->tp_rank;
  d->config = config;
  size_t bytes = 0;
  CHECK_STATUS(ignis_fused_moe_workspace_size(t, k, e, h, in, c->in, c->out, &d->config, &bytes), IGNIS_OK);
  d->ws = make(be, IGNIS_U8, 1, (int64_t[]){(int64_t)bytes});
  d->ws_bytes = bytes;
}

static void teardown(moe_data *d) {
  arr *all[] = {&d->input,    &d->input_scale, &d->ids,       &d->weights,   &d->fc1,        &d->fc2,
                &d->fc1_bias, &d->fc2_bias,    &d->fc1_scale, &d->fc2_scale, &d->gate_scale, &d->fc2_q,
                &d->alpha,    &d->beta,        &d->limit,     &d->out,       &d->ws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    release(all[i]);
}

static ignis_status call(moe_data *d) {
  return ignis_fused_moe(&d->input.t, d->use_input_scale ? &d->input_scale_view : NULL, &d->ids_view,
                         d->use_weights ? &d->weights_view : NULL, &d->w, &d->config, d->ws.buf.data,
                         d->ws_bytes, &d->out.t, NULL);
}

/* The reference: ref[T * H] and the tolerance scale (absolute sum of the terms) per element;
 * returns how many slots were local. */
static int64_t reference(const moe_case *c, const moe_data *d, double *ref, double *terms) {
  const int64_t t = c->tokens, k = c->top_k, h = c->hidden, in = c->inter, n1 = gated(c->act) ? 2 * in : in;
  const ignis_dtype wd = work_dtype(c);
  const int block = c->quant == IGNIS_MOE_QUANT_FP8_BLOCK,
            per_tensor = c->quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR;
  for (int64_t i = 0; i < t * h; ++i) {
    ref[i] = c->accumulate ? h_get_snapshot(&d->out.buf, i) : 0.0;
    terms[i] = fabs(ref[i]);
  }
  double *w1 = malloc(sizeof(double) * (size_t)(n1 * h)), *w2 = malloc(sizeof(double) * (size_t)(h * in));
  double *x = malloc(sizeof(double) * (size_t)h), *hv = malloc(sizeof(double) * (size_t)n1);
  double *a = malloc(sizeof(double) * (size_t)in), *q = malloc(sizeof(double) * (size_t)(h > in ? h : in));
  int64_t local = 0;
  for (int64_t e = 0; e < c->experts; ++e) {
    /* the expert's weights in fp64, block scales applied (exact: fp8 x f32 fits a double) */
    for (int64_t r = 0; r < n1; ++r)
      for (int64_t i = 0; i < h; ++i) {
        double v = h_get(&d->fc1.buf, (e * n1 + r) * h + i);
        if (block)
          v *= h_get(&d->fc1_scale.buf, (e * ceil128(n1) + r / 128) * ceil128(h) + i / 128);
        w1[r * h + i] = v;
      }
    for (int64_t r = 0; r < h; ++r)
      for (int64_t i = 0; i < in; ++i) {
        double v = h_get(&d->fc2.buf, (e * h + r) * in + i);
        if (block)
          v *= h_get(&d->fc2_scale.buf, (e * ceil128(h) + r / 128) * ceil128(in) + i / 128);
        w2[r * in + i] = v;
      }
    const double dq1 = per_tensor ? h_get(&d->fc1_scale.buf, e) : 1.0;
    const double dq_gate = per_tensor && d->gate_scale.buf.host ? h_get(&d->gate_scale.buf, e) : dq1;
    const double dq2 = per_tensor ? h_get(&d->fc2_scale.buf, e) : 1.0;
    const double qs = per_tensor ? per_expert(&d->fc2_q, e, 1.0) : 1.0;
    const double alpha = per_expert(&d->alpha, e, 1.0), beta = per_expert(&d->beta, e, 0.0);
    const double limit = per_expert(&d->limit, e, c->act == IGNIS_MOE_ACT_SWIGLU_STEP ? 7.0 : INFINITY);
    for (int64_t tok = 0; tok < t; ++tok)
      for (int64_t j = 0; j < k; ++j) {
        int64_t idx[2] = {tok, j};
        double id = h_get(&d->ids.buf, h_index(&d->ids.buf, &d->ids_view, idx)), weight;
        if (c->packed) {
          const uint32_t packed = (uint32_t)(int32_t)id;
          id = (double)((int32_t)packed >> 16);
          weight = ignis_bf16_to_f32((uint16_t)(packed & 0xFFFFu));
        } else {
          weight = h_get(&d->weights.buf, h_index(&d->weights.buf, &d->weights_view, idx));
        }
        if ((int64_t)id - c->offset != e)
          continue;
        ++local;
        /* the gathered row, quantized 1x128 for the fp8 block mode with a 16-bit input */
        for (int64_t i = 0; i < h; ++i)
          x[i] = h_get(&d->input.buf, tok * h + i);
        if (block)
          for (int64_t g = 0; g * 128 < h; ++g) {
            const int64_t n = h - g * 128 < 128 ? h - g * 128 : 128;
            double s;
            if (c->in == IGNIS_FP8_E4M3) {
              s = h_get(&d->input_scale.buf, g * t + tok);
              for (int64_t i = 0; i < n; ++i)
                q[i] = x[g * 128 + i];
            } else {
              s = quantize_group(x + g * 128, n, q);
            }
            for (int64_t i = 0; i < n; ++i)
              x[g * 128 + i] = q[i] * s;
          }
        for (int64_t r = 0; r < n1; ++r) {
          double sum = 0.0;
          for (int64_t i = 0; i < h; ++i)
            sum += x[i] * w1[r * h + i];
          hv[r] = h_round_to(wd, sum);
        }
        for (int64_t i = 0; i < in; ++i) {
          double v;
          if (gated(c->act)) {
            const int64_t gi = c->gate_first ? i : in + i, ui = c->gate_first ? in + i : i;
            double g = hv[gi] * dq_gate, u = hv[ui] * dq1;
            if (d->fc1_bias.buf.host) {
              g += h_get(&d->fc1_bias.buf, e * n1 + gi);
              u += h_get(&d->fc1_bias.buf, e * n1 + ui);
            }
            v = activate(c->act, g, u, alpha, beta, limit);
          } else {
            double xi = hv[i] * dq1;
            if (d->fc1_bias.buf.host)
              xi += h_get(&d->fc1_bias.buf, e * n1 + i);
            v = activate(c->act, xi, 0.0, alpha, beta, limit);
          }
          a[i] = v;
        }
        if (block) {
          for (int64_t g = 0; g * 128 < in; ++g) {
            const int64_t n = in - g * 128 < 128 ? in - g * 128 : 128;
            const double s = quantize_group(a + g * 128, n, q);
            for (int64_t i = 0; i < n; ++i)
              a[g * 128 + i] = q[i] * s;
          }
        } else {
          for (int64_t i = 0; i < in; ++i)
            a[i] = per_tensor ? fp8_round((float)a[i] * (float)qs) : h_round_to(wd, a[i]);
        }
        for (int64_t col = 0; col < h; ++col) {
          double sum = 0.0, abs_sum = 0.0;
          for (int64_t i = 0; i < in; ++i) {
            sum += a[i] * w2[col * in + i];
            abs_sum += fabs(a[i] * w2[col * in + i]);
          }
          double y = h_round_to(wd, sum) * dq2, b = 0.0;
          if (d->fc2_bias.buf.host && c->tp_rank == 0)
            b = h_get(&d->fc2_bias.buf, e * h + col);
          ref[tok * h + col] += weight * (y + b);
          terms[tok * h + col] += fabs(weight) * (abs_sum * fabs(dq2) + fabs(y) + fabs(b));
        }
      }
  }
  free(w1);
  free(w2);
  free(x);
  free(hv);
  free(a);
  free(q);
  return local;
}

static double unit(ignis_dtype dtype) {
  return dtype == IGNIS_BF16 ? ldexp(1.0, -8) : dtype == IGNIS_F16 ? ldexp(1.0, -11) : ldexp(1.0, -24);
}

static int cuda_takes(const moe_case *c) {
  const int64_t m = c->quant == IGNIS_MOE_QUANT_NONE ? 8 : 16;
  return c->hidden % m == 0 && c->inter % m == 0;
}

static void run_case(h_backend be, const moe_case *c, h_rng *rng) {
  if ((be == H_CUDA && c->cpu_only) || (be == H_CPU && c->gpu_only) || !h_selected(c->name))
    return;
  if (be == H_CPU && h_quick())
    return;
  h_case("%s %s T%lld k%lld E%lld/%lld H%lld I%lld act%d quant%d %s->%s%s", c->name, h_backend_name(be),
         (long long)c->tokens, (long long)c->top_k, (long long)c->experts, (long long)c->global_experts,
         (long long)c->hidden, (long long)c->inter, (int)c->act, (int)c->quant, ignis_dtype_name(c->in),
         ignis_dtype_name(c->out), c->accumulate ? " accumulate" : "");
  moe_data d;
  setup(be, c, rng, &d);
  if (be == H_CUDA && !cuda_takes(c)) {
    CHECK_ERROR(call(&d), IGNIS_ERROR_UNSUPPORTED, "multiples");
    CHECK(h_buf_untouched(&d.out.buf));
    teardown(&d);
    return;
  }
  CHECK_STATUS(call(&d), IGNIS_OK);
  h_buf_download(&d.out.buf);
  const int64_t n = c->tokens * c->hidden;
  double *ref = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1)),
         *terms = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
  const int64_t local = reference(c, &d, ref, terms);
  CHECKF(local > 0 || c->tokens == 0 || c->route == ROUTE_NONE_LOCAL, "%s: no slot was local", c->name);
  h_cmp cmp;
  h_cmp_init(&cmp);
  /* 2 units of the work dtype per term (4 with fp8 a2, whose rare rounding flips move a whole fp8 step) */
  const double uw = (c->quant == IGNIS_MOE_QUANT_NONE ? 2.0 : 4.0) * unit(work_dtype(c)), uo = unit(c->out);
  for (int64_t i = 0; i < n; ++i)
    h_cmp_add(&cmp, i, h_get(&d.out.buf, i), ref[i], uw * terms[i] + uo * fabs(ref[i]) + 1e-30);
  CHECK_CMP(&cmp, c->name);
  /* the same call again gives the same bits */
  if (!c->accumulate && n > 0) {
    unsigned char *first = malloc((size_t)n * d.out.buf.elem_size);
    memcpy(first, d.out.buf.host, (size_t)n * d.out.buf.elem_size);
    h_buf_poison(&d.out.buf);
    h_buf_upload(&d.out.buf);
    CHECK_STATUS(call(&d), IGNIS_OK);
    h_buf_download(&d.out.buf);
    CHECKF(memcmp(first, d.out.buf.host, (size_t)n * d.out.buf.elem_size) == 0, "%s: a second call differs",
           c->name);
    free(first);
  }
  free(ref);
  free(terms);
  teardown(&d);
}

/* A case with the defaults: Swiglu, no quantization, bf16 in and out, random routing over the
 * local experts, i32 ids and f32 weights, no biases. */
static moe_case mk(const char *name, int64_t tokens, int64_t top_k, int64_t experts, int64_t hidden,
                   int64_t inter) {
  moe_case c;
  memset(&c, 0, sizeof c);
  c.name = name;
  c.tokens = tokens;
  c.top_k = top_k;
  c.experts = c.global_experts = experts;
  c.hidden = hidden;
  c.inter = inter;
  c.act = IGNIS_MOE_ACT_SWIGLU;
  c.quant = IGNIS_MOE_QUANT_NONE;
  c.in = c.out = IGNIS_BF16;
  c.route = ROUTE_RANDOM;
  c.fc1_bias = c.fc2_bias = IGNIS_U8;
  c.ids_dtype = IGNIS_I32;
  return c;
}

static moe_case with_act(moe_case c, ignis_moe_activation act) {
  c.act = act;
  return c;
}

static moe_case with_biases(moe_case c, ignis_dtype fc1, ignis_dtype fc2) {
  c.fc1_bias = fc1;
  c.fc2_bias = fc2;
  return c;
}

static moe_case with_dtypes(moe_case c, ignis_moe_quant quant, ignis_dtype in, ignis_dtype out) {
  c.quant = quant;
  c.in = in;
  c.out = out;
  return c;
}

static moe_case with_ep(moe_case c, int64_t global_experts, int64_t offset, int route) {
  c.global_experts = global_experts;
  c.offset = offset;
  c.route = route;
  return c;
}

/* Every case, in order; returns how many (at most 64). */
static int make_cases(moe_case *cs) {
  int n = 0;
  const ignis_moe_quant none = IGNIS_MOE_QUANT_NONE, per_tensor = IGNIS_MOE_QUANT_FP8_PER_TENSOR,
                        block = IGNIS_MOE_QUANT_FP8_BLOCK;
  const ignis_dtype bf16 = IGNIS_BF16, f16 = IGNIS_F16, f32 = IGNIS_F32, e4m3 = IGNIS_FP8_E4M3;
  moe_case c;
  cs[n++] = mk("basic", 7, 2, 8, 64, 32);
  cs[n++] = mk("zero tokens", 0, 2, 8, 64, 32);
  cs[n++] = with_dtypes(mk("one token f16 in, f32 out", 1, 1, 8, 40, 24), none, f16, f32);
  cs[n++] = mk("64 tokens top4", 64, 4, 32, 96, 48);
  cs[n++] = with_dtypes(mk("64 tokens top8 E128", 64, 8, 128, 64, 32), none, bf16, f32);
  cs[n++] = mk("E256 small hidden", 33, 8, 256, 32, 16);
  c = mk("many tokens (cpu stand-in)", 300, 8, 64, 32, 16);
  c.cpu_only = 1;
  cs[n++] = c;
  c = mk("4096 tokens", 4096, 8, 128, 256, 128);
  c.gpu_only = 1;
  cs[n++] = c;
  cs[n++] = with_ep(mk("all on one expert", 64, 2, 16, 64, 32), 16, 0, ROUTE_ONE_EXPERT);
  cs[n++] = with_ep(mk("all on one expert top1", 130, 1, 16, 32, 16), 16, 0, ROUTE_ONE_EXPERT);
  cs[n++] = with_ep(mk("experts nobody picks", 40, 2, 16, 64, 32), 16, 0, ROUTE_HALF_EXPERTS);
  cs[n++] = with_ep(mk("EP rank without local tokens", 9, 2, 8, 64, 32), 32, 8, ROUTE_NONE_LOCAL);
  c = with_ep(mk("EP rank without local tokens, accumulate", 9, 2, 8, 64, 32), 32, 8, ROUTE_NONE_LOCAL);
  c.accumulate = 1;
  cs[n++] = c;
  cs[n++] = with_ep(mk("EP rank with padding ids", 37, 4, 8, 64, 32), 32, 16, ROUTE_PADDING);
  c = mk("accumulate", 11, 2, 8, 64, 32);
  c.accumulate = 1;
  cs[n++] = c;
  c = with_dtypes(mk("accumulate f32 out", 11, 2, 8, 64, 32), none, bf16, f32);
  c.accumulate = 1;
  cs[n++] = c;
  cs[n++] = with_dtypes(mk("f16", 13, 2, 8, 64, 32), none, f16, f16);
  c = mk("gate first", 13, 2, 8, 64, 32);
  c.gate_first = 1;
  cs[n++] = c;
  cs[n++] = with_biases(mk("biases f32 and bf16", 13, 2, 8, 64, 32), f32, bf16);
  c = with_biases(mk("biases, tp rank 1 (no fc2 bias)", 13, 2, 8, 64, 32), bf16, f32);
  c.tp_rank = 1;
  cs[n++] = c;
  c = mk("packed routing", 21, 4, 16, 64, 32);
  c.packed = 1;
  cs[n++] = c;
  c = mk("i64 ids, bf16 weights, strided", 21, 4, 16, 64, 32);
  c.ids_dtype = IGNIS_I64;
  c.bf16_weights = c.strided_routing = 1;
  cs[n++] = c;
  cs[n++] = with_biases(mk("odd sizes", 7, 3, 6, 37, 19), f32, f32);
  cs[n++] = with_act(mk("odd sizes non-gated", 7, 2, 5, 45, 23), IGNIS_MOE_ACT_RELU2);
  cs[n++] = with_biases(with_act(mk("gelu", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_GELU), f32, IGNIS_U8);
  cs[n++] = with_act(mk("relu", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_RELU);
  cs[n++] = with_biases(with_act(mk("silu", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_SILU), bf16, IGNIS_U8);
  cs[n++] = with_act(mk("relu2", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_RELU2);
  cs[n++] = with_biases(with_act(mk("identity", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_IDENTITY), IGNIS_U8, f32);
  cs[n++] = with_act(mk("geglu", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_GEGLU);
  c = with_act(mk("geglu tanh, gate first", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_GEGLU_TANH);
  c.gate_first = 1;
  cs[n++] = c;
  cs[n++] = with_act(mk("swiglu bias, defaults", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_SWIGLU_BIAS);
  c = with_biases(with_act(mk("swiglu bias, gpt-oss args", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_SWIGLU_BIAS), bf16,
                  bf16);
  c.act_args = 1;
  cs[n++] = c;
  c = mk("swiglu with args, gate first", 9, 2, 4, 32, 16);
  c.act_args = c.gate_first = 1;
  cs[n++] = c;
  cs[n++] = with_act(mk("swiglu step", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_SWIGLU_STEP);
  c = with_act(mk("swiglu step, limit", 9, 2, 4, 32, 16), IGNIS_MOE_ACT_SWIGLU_STEP);
  c.act_args = 1;
  cs[n++] = c;
  cs[n++] = with_dtypes(mk("fp8 per-tensor", 16, 2, 8, 64, 32), per_tensor, e4m3, bf16);
  c = with_dtypes(mk("fp8 per-tensor, one fc2 input scale", 16, 2, 8, 64, 32), per_tensor, e4m3, f16);
  c.fc2_q = 1;
  cs[n++] = c;
  c = with_biases(with_dtypes(mk("fp8 per-tensor, gate scale", 16, 4, 8, 64, 48), per_tensor, e4m3, bf16),
                  IGNIS_U8, f32);
  c.fc2_q = 2;
  c.gate_scale = c.accumulate = 1;
  cs[n++] = c;
  cs[n++] = with_dtypes(mk("fp8 block", 16, 4, 8, 256, 160), block, bf16, bf16);
  cs[n++] = with_dtypes(mk("fp8 block, f16 input, f32 out", 5, 2, 4, 160, 144), block, f16, f32);
  cs[n++] = with_dtypes(mk("fp8 block, fp8 input", 12, 2, 8, 256, 128), block, e4m3, bf16);
  c = with_dtypes(mk("fp8 block, odd sizes", 6, 2, 4, 136, 40), block, bf16, bf16);
  c.cpu_only = 1;
  cs[n++] = c;
  cs[n++] = with_ep(mk("Qwen3-like slice (EP)", 5, 8, 8, 2048, 768), 32, 16, ROUTE_RANDOM);
  cs[n++] =
      with_ep(with_dtypes(mk("DeepSeek-like slice, fp8 block (EP)", 4, 8, 4, 7168, 256), block, bf16, bf16),
              12, 4, ROUTE_RANDOM);
  return n;
}

/* ---- bad inputs ----------------------------------------------------------------------------------- */
static void expect_error(moe_data *d, ignis_status status, const char *needle) {
  h_buf_poison(&d->out.buf);
  h_buf_upload(&d->out.buf);
  CHECK_ERROR(call(d), status, needle);
  CHECKF(h_buf_untouched(&d->out.buf), "out was written by a call that failed (%s)", needle);
}

static void bad_inputs(h_backend be, h_rng *rng) {
  h_case("bad inputs %s", h_backend_name(be));
  const moe_case base = mk("bad", 8, 2, 8, 64, 32);
  moe_data d;
  setup(be, &base, rng, &d);
  ignis_tensor saved;

  saved = d.weights_view; /* top_k mismatch */
  d.weights_view.shape[1] = 3;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "topk_weights.shape[1]");
  d.weights_view = saved;
  saved = d.ids_view; /* token count mismatch */
  d.ids_view.shape[0] = 7;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "topk_ids.shape[0]");
  d.ids_view = saved;
  d.ids_view.dtype = IGNIS_F32;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "topk_ids.dtype");
  d.ids_view = saved;
  saved = d.fc1.t; /* weights vs sizes */
  d.fc1.t.shape[2] = 32;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc1.shape[2]");
  d.fc1.t.shape[1] = 63;
  d.fc1.t.shape[2] = 64;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc1.shape[1]");
  d.fc1.t = saved;
  saved = d.fc2.t;
  d.fc2.t.shape[2] = 16;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc2.shape[2]");
  d.fc2.t.shape[2] = 32;
  d.fc2.t.dtype = IGNIS_F16;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc2.dtype");
  d.fc2.t = saved;
  saved = d.input.t; /* dtype combos */
  d.input.t.dtype = IGNIS_F16;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc1.dtype");
  d.input.t.dtype = IGNIS_FP8_E4M3;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "input.dtype");
  d.input.t = saved;
  d.config.quant = IGNIS_MOE_QUANT_FP8_PER_TENSOR;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc1.dtype");
  d.config.quant = IGNIS_MOE_QUANT_NONE;
  saved = d.out.t;
  d.out.t.shape[1] = 32;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "out.shape[1]");
  d.out.t.shape[1] = 64;
  d.out.t.dtype = IGNIS_I32;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "out.dtype");
  d.out.t = saved;
  /* config */
  d.config.activation = (ignis_moe_activation)10;
  expect_error(&d, IGNIS_ERROR_UNSUPPORTED, "Situ");
  d.config.activation = (ignis_moe_activation)42;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "config.activation");
  d.config.activation = IGNIS_MOE_ACT_GELU;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc2.shape[2]"); /* non-gated: I = 64 */
  d.config.gate_first = 1;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "config.gate_first");
  d.config.gate_first = 0;
  d.config.activation = IGNIS_MOE_ACT_SWIGLU;
  d.config.local_expert_offset = -1;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "config.local_expert_offset");
  d.config.local_expert_offset = 0;
  d.config.size = 4;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "config.size");
  d.config.size = sizeof d.config;
  /* activation arguments where they are not read */
  arr alpha = make(be, IGNIS_F32, 1, (int64_t[]){8});
  h_buf_upload(&alpha.buf);
  d.config.activation = IGNIS_MOE_ACT_GEGLU;
  d.w.act_alpha = &alpha.t;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.act_alpha");
  d.config.activation = IGNIS_MOE_ACT_SWIGLU;
  alpha.t.shape[0] = 7;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.act_alpha.shape[0]");
  d.w.act_alpha = NULL;
  /* scales where the mode has none, and missing ones */
  d.w.fc1_scale = &alpha.t;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc1_scale");
  d.w.fc1_scale = NULL;
  d.w.fc2_input_scale = &alpha.t;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc2_input_scale");
  d.w.fc2_input_scale = NULL;
  release(&alpha);
  /* packed routing needs i32 ids */
  arr ids64 = make(be, IGNIS_I64, 2, (int64_t[]){8, 2});
  h_buf_upload(&ids64.buf);
  saved = d.ids_view;
  d.ids_view = ids64.t;
  ignis_tensor weights_saved = d.weights_view;
  d.use_weights = 0;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "topk_ids.dtype");
  d.use_weights = 1;
  d.ids_view = saved;
  d.weights_view = weights_saved;
  release(&ids64);
  /* top_k past the maximum */
  arr wide = make(be, IGNIS_I32, 2, (int64_t[]){8, IGNIS_MOE_MAX_TOP_K + 1});
  arr wide_w = make(be, IGNIS_F32, 2, (int64_t[]){8, IGNIS_MOE_MAX_TOP_K + 1});
  h_buf_upload(&wide.buf);
  h_buf_upload(&wide_w.buf);
  d.ids_view = wide.t;
  d.weights_view = wide_w.t;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "topk_ids.shape[1]");
  d.ids_view = saved;
  d.weights_view = weights_saved;
  release(&wide);
  release(&wide_w);
  /* input_scale for a 16-bit input */
  arr scale = make(be, IGNIS_F32, 2, (int64_t[]){8, 1});
  h_buf_upload(&scale.buf);
  d.use_input_scale = 1;
  d.input_scale_view = scale.t;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "input_scale");
  d.use_input_scale = 0;
  release(&scale);
  /* workspace too small for T, and none */
  size_t small = 0;
  CHECK_STATUS(ignis_fused_moe_workspace_size(4, 2, 8, 64, 32, IGNIS_BF16, IGNIS_BF16, &d.config, &small),
               IGNIS_OK);
  CHECKF(small < d.ws_bytes, "a smaller max_tokens must need less workspace (%zu vs %zu)", small, d.ws_bytes);
  const size_t full = d.ws_bytes;
  d.ws_bytes = small;
  expect_error(&d, IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace");
  d.ws_bytes = full;
  void *ws = d.ws.buf.data;
  d.ws.buf.data = NULL;
  expect_error(&d, IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "workspace is NULL");
  d.ws.buf.data = ws;
  /* out overlapping an input */
  saved = d.out.t;
  d.out.t.data = d.input.t.data;
  CHECK_ERROR(call(&d), IGNIS_ERROR_INVALID_ARGUMENT, "out");
  d.out.t = saved;
  /* the size query's arguments */
  size_t bytes;
  CHECK_ERROR(ignis_fused_moe_workspace_size(4, 0, 8, 64, 32, IGNIS_BF16, IGNIS_BF16, NULL, &bytes),
              IGNIS_ERROR_INVALID_ARGUMENT, "top_k");
  CHECK_ERROR(ignis_fused_moe_workspace_size(4, 2, 8, 64, 32, IGNIS_BF16, IGNIS_BF16, NULL, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "bytes");
  /* a good call still works after all that */
  h_buf_poison(&d.out.buf);
  h_buf_upload(&d.out.buf);
  CHECK_STATUS(call(&d), IGNIS_OK);
  teardown(&d);
}

/* The fp8 block mode's scale shapes. */
static void bad_scales(h_backend be, h_rng *rng) {
  h_case("bad scales %s", h_backend_name(be));
  const moe_case base =
      with_dtypes(mk("bad fp8", 4, 2, 4, 256, 128), IGNIS_MOE_QUANT_FP8_BLOCK, IGNIS_BF16, IGNIS_BF16);
  moe_data d;
  setup(be, &base, rng, &d);
  ignis_tensor saved = d.fc1_scale.t;
  d.fc1_scale.t.shape[1] = 1;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc1_scale.shape[1]");
  d.fc1_scale.t = saved;
  saved = d.fc2_scale.t;
  d.fc2_scale.t.shape[2] = 2;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc2_scale.shape[2]");
  d.fc2_scale.t = saved;
  d.w.fc2_scale = NULL;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc2_scale");
  d.w.fc2_scale = &d.fc2_scale.t;
  teardown(&d);

  h_case("bad per-tensor scales %s", h_backend_name(be));
  const moe_case pt = with_dtypes(mk("bad fp8 per-tensor", 4, 2, 4, 64, 32), IGNIS_MOE_QUANT_FP8_PER_TENSOR,
                                  IGNIS_FP8_E4M3, IGNIS_BF16);
  setup(be, &pt, rng, &d);
  saved = d.fc2_scale.t;
  d.fc2_scale.t.shape[0] = 3;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "weights.fc2_scale.shape[0]");
  d.fc2_scale.t = saved;
  saved = d.input.t;
  d.input.t.dtype = IGNIS_BF16;
  expect_error(&d, IGNIS_ERROR_INVALID_ARGUMENT, "input.dtype");
  d.input.t = saved;
  teardown(&d);
}

int main(void) {
  h_init("test_moe");
  h_rng rng = h_rng_make(19);
  moe_case cases[64];
  const int count = make_cases(cases);
  for (int b = 0; b < h_backend_count(); ++b) {
    const h_backend be = h_backend_at(b);
    for (int i = 0; i < count; ++i)
      run_case(be, &cases[i], &rng);
    bad_inputs(be, &rng);
    bad_scales(be, &rng);
  }
  return h_finish();
}
