/* CPU backend of the fused MoE op (include/ignis/moe.h): the CUDA pipeline's six steps as plain
 * loops over the same workspace (core/moe_params.h), with the same scalar rules (core/moe_math.h)
 * and the CPU grouped GEMM for both products, so the intermediates are rounded where the GPU
 * rounds them:
 *   1. permutation: one pass counts the local rows of each expert, a prefix sum gives m_indptr,
 *      a second pass hands out positions in (token, slot) order;
 *   2. gather: row p of a1 is the input row of its token (fp8 block with a 16-bit input: quantized
 *      per 1x128 group, scale absmax / 448);
 *   3. h = a1 @ fc1^T per expert (ignis_cpu_grouped_gemm);
 *   4. dequant (per-tensor fp8), bias, activation, and the work dtype or fp8 rounding of a2;
 *   5. y = a2 @ fc2^T per expert;
 *   6. out[t] = (out[t]) + sum_j w * (y * dequant + fc2_bias), slots in order. */
#include "core/moe_math.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"

static int local_expert(const ignis_fused_moe_params *p, int64_t r) {
  const int64_t t = r / p->top_k, j = r % p->top_k;
  const int64_t id = ignis_moe_raw_id(p->ids, p->ids_dtype == IGNIS_I64, p->packed,
                                      t * p->ids_stride_t + j * p->ids_stride_k);
  return ignis_moe_local(id, p->expert_offset, p->experts);
}

static void permute(const ignis_fused_moe_params *p) {
  int32_t *cursor = p->tile_counts; /* E entries: counts, then the next free position */
  for (int64_t e = 0; e < p->experts; ++e)
    cursor[e] = 0;
  for (int64_t r = 0; r < p->rows; ++r) {
    const int e = local_expert(p, r);
    if (e >= 0)
      ++cursor[e];
  }
  int32_t total = 0;
  for (int64_t e = 0; e < p->experts; ++e) {
    const int32_t count = cursor[e];
    p->m_indptr[e] = total;
    cursor[e] = total;
    total += count;
  }
  p->m_indptr[p->experts] = total;
  for (int64_t r = 0; r < p->rows; ++r) {
    const int e = local_expert(p, r);
    const int32_t pos = e >= 0 ? cursor[e]++ : -1;
    p->row_to_perm[r] = pos;
    if (pos >= 0)
      p->perm_row[pos] = (int32_t)r;
  }
  p->consts[0] = 1.0f;
}

/* Quantize n <= 128 values as one 1x128 group into q (fp8 e4m3); returns the group's scale. */
static float quantize_group(const float *v, int64_t n, uint8_t *q) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    absmax = ignis_quant_absmax_fold(absmax, v[i]);
  const float s = ignis_moe_group_scale(absmax), inv = 1.0f / s;
  for (int64_t i = 0; i < n; ++i)
    q[i] = ignis_f32_to_fp8_e4m3(v[i] * inv);
  return s;
}

static void gather(const ignis_fused_moe_params *p, int64_t total) {
  const int64_t hidden = p->hidden, groups = (hidden + IGNIS_MOE_GROUP - 1) / IGNIS_MOE_GROUP;
  const size_t in_size = ignis_dtype_size(p->input_dtype), a_size = ignis_dtype_size(p->a1_dtype);
  IGNIS_CPU_PARALLEL_FOR(total * hidden)
  for (int64_t pos = 0; pos < total; ++pos) {
    const int64_t t = p->perm_row[pos] / p->top_k;
    const char *src = (const char *)p->input + t * p->input_row_stride * (int64_t)in_size;
    char *dst = (char *)p->a1 + pos * hidden * (int64_t)a_size;
    if (p->quant == IGNIS_MOE_QUANT_FP8_BLOCK && p->input_dtype != IGNIS_FP8_E4M3) {
      float v[IGNIS_MOE_GROUP];
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t h0 = g * IGNIS_MOE_GROUP,
                      n = hidden - h0 < IGNIS_MOE_GROUP ? hidden - h0 : IGNIS_MOE_GROUP;
        ignis_cpu_load_row(src + h0 * (int64_t)in_size, p->input_dtype, n, v);
        p->a1_scale[pos * groups + g] = quantize_group(v, n, (uint8_t *)dst + h0);
      }
      continue;
    }
    memcpy(dst, src, (size_t)(hidden * (int64_t)a_size));
    if (p->input_scale)
      for (int64_t g = 0; g < groups; ++g)
        p->a1_scale[pos * groups + g] =
            p->input_scale[t * p->input_scale_stride_t + g * p->input_scale_stride_k];
  }
}

static float per_expert(const float *values, int64_t stride, int e, float fallback) {
  return values ? values[e * stride] : fallback;
}

/* One permuted row of step 4: h[pos] -> a2[pos] (and a2_scale). */
static void activate_row(const ignis_fused_moe_params *p, int64_t pos) {
  const int e = local_expert(p, p->perm_row[pos]);
  const int64_t inter = p->inter, n1 = p->fc1_rows;
  const int per_tensor = p->quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR;
  const float dq = per_tensor ? p->fc1_scale[e * p->fc1_scale_strides[0]] : 1.0f;
  const float dq_gate = per_tensor ? per_expert(p->fc1_gate_scale, p->fc1_gate_scale_stride, e, dq) : 1.0f;
  const float q_scale =
      per_tensor ? per_expert(p->fc2_input_scale, p->fc2_input_scale_stride, e, 1.0f) : 1.0f;
  ignis_moe_act_args args;
  args.alpha = per_expert(p->act_alpha, p->act_alpha_stride, e, 1.0f);
  args.beta = per_expert(p->act_beta, p->act_beta_stride, e, 0.0f);
  args.limit = per_expert(p->act_limit, p->act_limit_stride, e,
                          p->activation == IGNIS_MOE_ACT_SWIGLU_STEP ? 7.0f : INFINITY);
  const int64_t gate_off = p->gate_first ? 0 : inter, up_off = p->gate_first ? inter : 0;
  const void *h = ignis_cpu_at(p->h, p->work_dtype, pos * n1);
  const void *bias =
      p->fc1_bias ? ignis_cpu_at(p->fc1_bias, p->fc1_bias_dtype, e * p->fc1_bias_stride_e) : NULL;
  const int64_t groups = (inter + IGNIS_MOE_GROUP - 1) / IGNIS_MOE_GROUP;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t i0 = g * IGNIS_MOE_GROUP, n = inter - i0 < IGNIS_MOE_GROUP ? inter - i0 : IGNIS_MOE_GROUP;
    float v[IGNIS_MOE_GROUP];
    for (int64_t i = 0; i < n; ++i) {
      if (p->gated) {
        const int64_t gi = gate_off + i0 + i, ui = up_off + i0 + i;
        float gate = ignis_cpu_load(h, p->work_dtype, gi) * dq_gate,
              up = ignis_cpu_load(h, p->work_dtype, ui) * dq;
        if (bias) {
          gate += ignis_cpu_load(bias, p->fc1_bias_dtype, gi);
          up += ignis_cpu_load(bias, p->fc1_bias_dtype, ui);
        }
        v[i] = ignis_moe_gated(p->activation, gate, up, args);
      } else {
        float x = ignis_cpu_load(h, p->work_dtype, i0 + i) * dq;
        if (bias)
          x += ignis_cpu_load(bias, p->fc1_bias_dtype, i0 + i);
        v[i] = ignis_moe_plain(p->activation, x);
      }
    }
    if (p->quant == IGNIS_MOE_QUANT_FP8_BLOCK) {
      p->a2_scale[pos * groups + g] = quantize_group(v, n, (uint8_t *)p->a2 + pos * inter + i0);
    } else if (per_tensor) {
      uint8_t *q = (uint8_t *)p->a2 + pos * inter + i0;
      for (int64_t i = 0; i < n; ++i)
        q[i] = ignis_f32_to_fp8_e4m3(v[i] * q_scale);
    } else {
      ignis_cpu_store_row(ignis_cpu_at_mut(p->a2, p->work_dtype, pos * inter + i0), p->work_dtype, n, v);
    }
  }
}

static void finalize(const ignis_fused_moe_params *p) {
  const int64_t k = p->top_k, hidden = p->hidden;
  const int per_tensor = p->quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR;
  IGNIS_CPU_PARALLEL_FOR(p->tokens * hidden * k)
  for (int64_t t = 0; t < p->tokens; ++t) {
    int32_t pos[IGNIS_MOE_MAX_TOP_K];
    float weight[IGNIS_MOE_MAX_TOP_K], dq[IGNIS_MOE_MAX_TOP_K];
    const void *bias[IGNIS_MOE_MAX_TOP_K];
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = t * k + j;
      pos[j] = p->row_to_perm[r];
      if (pos[j] < 0)
        continue;
      const int e = local_expert(p, r);
      weight[j] = ignis_moe_weight(p->weights, p->weights_dtype == IGNIS_BF16, p->ids,
                                   t * p->weights_stride_t + j * p->weights_stride_k,
                                   t * p->ids_stride_t + j * p->ids_stride_k);
      dq[j] = per_tensor ? p->fc2_scale[e * p->fc2_scale_strides[0]] : 1.0f;
      bias[j] =
          p->add_fc2_bias ? ignis_cpu_at(p->fc2_bias, p->fc2_bias_dtype, e * p->fc2_bias_stride_e) : NULL;
    }
    void *out = ignis_cpu_at_mut(p->out, p->out_dtype, t * p->out_row_stride);
    for (int64_t c = 0; c < hidden; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        if (pos[j] < 0)
          continue;
        float v = ignis_cpu_load(p->y, p->work_dtype, pos[j] * hidden + c) * dq[j];
        if (bias[j])
          v += ignis_cpu_load(bias[j], p->fc2_bias_dtype, c);
        acc += weight[j] * v;
      }
      if (p->accumulate)
        acc += ignis_cpu_load(out, p->out_dtype, c);
      ignis_cpu_store(out, p->out_dtype, c, acc);
    }
  }
}

ignis_status ignis_cpu_fused_moe(const ignis_fused_moe_params *p, int32_t device, void *stream) {
  permute(p);
  const int64_t total = p->m_indptr[p->experts];
  gather(p, total);
  ignis_grouped_gemm_params g;
  ignis_moe_gemm_params(p, 0, &g);
  ignis_status status = ignis_cpu_grouped_gemm(&g, device, stream);
  if (status != IGNIS_OK)
    return status;
  IGNIS_CPU_PARALLEL_FOR(total * p->fc1_rows)
  for (int64_t pos = 0; pos < total; ++pos)
    activate_row(p, pos);
  ignis_moe_gemm_params(p, 1, &g);
  status = ignis_cpu_grouped_gemm(&g, device, stream);
  if (status != IGNIS_OK)
    return status;
  finalize(p);
  return IGNIS_OK;
}
