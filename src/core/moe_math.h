/* The scalar rules of the fused MoE op (include/ignis/moe.h), shared by the CPU backend and the
 * CUDA kernels so both compute the same values: reading a routing slot (its local expert and
 * weight, plain or FlashInfer's packed form), the activations with their per-expert alpha / beta /
 * limit, and the dynamic 1x128 scale of the fp8 block mode (TRT-LLM's rule: absmax / 448, 1 for an
 * all-zero group). Everything in f32 with the C library's expf / erff / tanhf, so host and device
 * agree to a few ulp. Plain C, compiled as host code and as device code. */
#ifndef IGNIS_CORE_MOE_MATH_H
#define IGNIS_CORE_MOE_MATH_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/quant_math.h"
#include "ignis/moe.h"

#ifdef __CUDACC__
#define IGNIS_MOE_FN static __host__ __device__ __forceinline__
#else
#define IGNIS_MOE_FN static inline
#endif

#define IGNIS_MOE_FP8_MAX 448.0f
#define IGNIS_MOE_GROUP 128

/* The raw id of slot (t, j): i32 or i64; packed i32 keeps the id in its high 16 bits. */
IGNIS_MOE_FN int64_t ignis_moe_raw_id(const void *ids, int i64, int packed, int64_t offset) {
  if (i64)
    return ((const int64_t *)ids)[offset];
  const int32_t v = ((const int32_t *)ids)[offset];
  return packed ? (int64_t)(v >> 16) : (int64_t)v;
}

/* The local expert of a raw global id: id - expert_offset within [0, experts), else -1. */
IGNIS_MOE_FN int ignis_moe_local(int64_t id, int64_t expert_offset, int64_t experts) {
  const int64_t e = id - expert_offset;
  return e >= 0 && e < experts ? (int)e : -1;
}

/* The weight of a slot: f32 or bf16 weights, or the bf16 bits in the low half of a packed id. */
IGNIS_MOE_FN float ignis_moe_bf16_bits(uint32_t bits16) {
  const uint32_t bits = bits16 << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

IGNIS_MOE_FN float ignis_moe_weight(const void *weights, int bf16, const void *ids, int64_t w_offset,
                                    int64_t id_offset) {
  if (!weights)
    return ignis_moe_bf16_bits((uint32_t)((const int32_t *)ids)[id_offset] & 0xFFFFu);
  if (bf16)
    return ignis_moe_bf16_bits(((const uint16_t *)weights)[w_offset]);
  return ((const float *)weights)[w_offset];
}

IGNIS_MOE_FN float ignis_moe_sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

IGNIS_MOE_FN float ignis_moe_silu(float x) {
  return x / (1.0f + expf(-x));
}

IGNIS_MOE_FN float ignis_moe_gelu(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

IGNIS_MOE_FN float ignis_moe_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

/* Per-expert parameters of the Swiglu family (defaults where the tensor is absent). */
typedef struct ignis_moe_act_args {
  float alpha, beta, limit;
} ignis_moe_act_args;

/* A gated activation of gate g and up u. */
IGNIS_MOE_FN float ignis_moe_gated(ignis_moe_activation act, float g, float u, ignis_moe_act_args a) {
  switch (act) {
  case IGNIS_MOE_ACT_SWIGLU:
  case IGNIS_MOE_ACT_SWIGLU_BIAS: {
    const float gc = fminf(g, a.limit), uc = fmaxf(fminf(u, a.limit), -a.limit);
    return gc * ignis_moe_sigmoid(a.alpha * gc) * (uc + a.beta);
  }
  case IGNIS_MOE_ACT_SWIGLU_STEP:
    return fminf(ignis_moe_silu(g), a.limit) * fmaxf(fminf(u, a.limit), -a.limit);
  case IGNIS_MOE_ACT_GEGLU:
    return ignis_moe_gelu(g) * u;
  default: /* IGNIS_MOE_ACT_GEGLU_TANH */
    return ignis_moe_gelu_tanh(g) * u;
  }
}

/* A non-gated activation. */
IGNIS_MOE_FN float ignis_moe_plain(ignis_moe_activation act, float x) {
  switch (act) {
  case IGNIS_MOE_ACT_GELU:
    return ignis_moe_gelu(x);
  case IGNIS_MOE_ACT_RELU:
    return fmaxf(x, 0.0f);
  case IGNIS_MOE_ACT_SILU:
    return ignis_moe_silu(x);
  case IGNIS_MOE_ACT_RELU2: {
    const float r = fmaxf(x, 0.0f);
    return r * r;
  }
  default: /* IGNIS_MOE_ACT_IDENTITY */
    return x;
  }
}

IGNIS_MOE_FN int ignis_moe_is_gated(ignis_moe_activation act) {
  return act == IGNIS_MOE_ACT_SWIGLU || act == IGNIS_MOE_ACT_SWIGLU_BIAS ||
         act == IGNIS_MOE_ACT_SWIGLU_STEP || act == IGNIS_MOE_ACT_GEGLU || act == IGNIS_MOE_ACT_GEGLU_TANH;
}

/* The scale of a dynamic 1x128 group whose absmax (NaN ignored) is `absmax`. */
IGNIS_MOE_FN float ignis_moe_group_scale(float absmax) {
  return absmax > 0.0f ? ignis_quant_scale(absmax, 0.0f, IGNIS_MOE_FP8_MAX, 0) : 1.0f;
}

#endif
