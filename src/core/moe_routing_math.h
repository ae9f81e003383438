/* The scalar rules of MoE routing (include/ignis/moe_routing.h), shared by the CPU backend and the
 * CUDA kernel so both compute the same keys bit for bit and so choose the same experts.
 *
 * Rank: every candidate expert carries a 32-bit rank that orders like its key: the key's order key
 * (core/philox.h: NaN excepted, every float maps to a value >= 0x007FFFFF), 1 for a NaN key (below
 * every number), and 0 for "no expert" (padding past E, an expert already taken, an expert outside
 * the groups kept), which nothing real ties. The top-k takes the largest rank, the lowest expert
 * index among equal ranks, top_k times.
 *
 * Keys: the logit itself, or for the biased methods (DEEPSEEK_V3, MINIMAX2) sigmoid(logit) + bias.
 * sigmoid is built on ignis_exp_nonpos (core/philox.h: correctly rounded operations only, no
 * product the compilers could fuse differently), so the key of a logit is the same float on the
 * host and under nvcc. A group's score is the f32 sum of its two largest keys (its one key when the
 * group holds one expert), recovered from their ranks.
 *
 * Weights: a chosen expert's term (softmax numerator exp(v - top), sigmoid, the logit, or for the
 * biased methods the unbiased sigmoid carried from the key step), a sum where the method
 * normalizes (over the chosen experts, or over all E for DEFAULT), then term / denominator times
 * routed_scaling_factor. Plain C, compiled as host code and as device code. */
#ifndef IGNIS_CORE_MOE_ROUTING_MATH_H
#define IGNIS_CORE_MOE_ROUTING_MATH_H

#include <math.h>
#include <stdint.h>

#include "core/philox.h"
#include "ignis/moe_routing.h"

#if defined(__CUDA_ARCH__)
#define IGNIS_ROUTING_FDIV(a, b) __fdiv_rn((a), (b))
#else
#define IGNIS_ROUTING_FDIV(a, b) ((a) / (b))
#endif

#define IGNIS_ROUTING_RANK_NONE 0u
#define IGNIS_ROUTING_RANK_NAN 1u

/* sigmoid(x) = 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below; 0 for NaN and x < -104. */
static inline IGNIS_HOST_DEVICE float ignis_routing_sigmoid(float x) {
  const float e = ignis_exp_nonpos(-fabsf(x));
  return x >= 0.0f ? IGNIS_ROUTING_FDIV(1.0f, 1.0f + e) : IGNIS_ROUTING_FDIV(e, 1.0f + e);
}

static inline IGNIS_HOST_DEVICE uint32_t ignis_routing_rank(float key) {
  return key != key ? IGNIS_ROUTING_RANK_NAN : ignis_order_key(key);
}

/* The key of a rank >= 1 (a NaN for IGNIS_ROUTING_RANK_NAN). */
static inline IGNIS_HOST_DEVICE float ignis_routing_rank_key(uint32_t rank) {
  return rank == IGNIS_ROUTING_RANK_NAN ? ignis_bits_float(0x7FC00000u) : ignis_key_float(rank);
}

/* The rank of a group whose two largest keys have ranks first >= second (single: one expert). */
static inline IGNIS_HOST_DEVICE uint32_t ignis_routing_group_rank(uint32_t first, uint32_t second,
                                                                  int single) {
  const float top = ignis_routing_rank_key(first);
  return ignis_routing_rank(single ? top : top + ignis_routing_rank_key(second));
}

/* The CUDA kernel's warp: lane l holds experts l * w .. l * w + w - 1, w the lane width (the power
 * of two with 32 w >= E). Its sums add each lane's terms in turn from 0, then the 32 partial sums
 * by an xor butterfly (ignis_warp_sum); the CPU backend adds in the same order, so the two
 * backends' weights agree bit for bit. */
#define IGNIS_ROUTING_LANES 32

static inline IGNIS_HOST_DEVICE int ignis_routing_lane_width(int experts) {
  int width = 1;
  while (IGNIS_ROUTING_LANES * width < experts)
    width *= 2;
  return width;
}

/* The xor-butterfly sum of 32 lane values (clobbered), as every lane of a warp gets it. */
static inline float ignis_routing_butterfly_sum(float *lanes) {
  for (int offset = IGNIS_ROUTING_LANES / 2; offset > 0; offset /= 2) {
    float next[IGNIS_ROUTING_LANES];
    for (int l = 0; l < IGNIS_ROUTING_LANES; ++l)
      next[l] = lanes[l] + lanes[l ^ offset];
    for (int l = 0; l < IGNIS_ROUTING_LANES; ++l)
      lanes[l] = next[l];
  }
  return lanes[0];
}

/* What a method does past the choice, as four small switches (so kernels branch on these rather
 * than on the method). */
typedef enum ignis_routing_term_kind {
  IGNIS_ROUTING_TERM_VALUE = 0,  /* the value: TOPK's logit, the biased methods' sigmoid */
  IGNIS_ROUTING_TERM_EXP = 1,    /* exp(v - top): the softmax numerators */
  IGNIS_ROUTING_TERM_SIGMOID = 2 /* sigmoid(v) */
} ignis_routing_term_kind;

typedef enum ignis_routing_sum_kind {
  IGNIS_ROUTING_SUM_NONE = 0,  /* weights are the terms */
  IGNIS_ROUTING_SUM_TOP_K = 1, /* the chosen experts' terms */
  IGNIS_ROUTING_SUM_ALL = 2    /* DEFAULT: exp(v - top) over every expert */
} ignis_routing_sum_kind;

typedef enum ignis_routing_norm_kind {
  IGNIS_ROUTING_NORM_NONE = 0, /* w = term */
  IGNIS_ROUTING_NORM_SUM = 1,  /* w = term / sum */
  IGNIS_ROUTING_NORM_MAX = 2,  /* w = term / max(sum, 1e-20): SIGMOID_RENORM */
  IGNIS_ROUTING_NORM_EPS = 3   /* w = term / (sum + 1e-20): DEEPSEEK_V3, MINIMAX2 */
} ignis_routing_norm_kind;

typedef struct ignis_routing_rule {
  int biased; /* key sigmoid(logit) + bias and value sigmoid(logit): DEEPSEEK_V3, MINIMAX2 */
  ignis_routing_term_kind term;
  ignis_routing_sum_kind sum;
  ignis_routing_norm_kind norm;
} ignis_routing_rule;

static inline IGNIS_HOST_DEVICE ignis_routing_rule ignis_routing_rule_of(ignis_moe_routing_method method) {
  ignis_routing_rule r = {0, IGNIS_ROUTING_TERM_VALUE, IGNIS_ROUTING_SUM_NONE, IGNIS_ROUTING_NORM_NONE};
  switch (method) {
  case IGNIS_MOE_ROUTING_DEFAULT:
    r.term = IGNIS_ROUTING_TERM_EXP;
    r.sum = IGNIS_ROUTING_SUM_ALL;
    r.norm = IGNIS_ROUTING_NORM_SUM;
    break;
  case IGNIS_MOE_ROUTING_RENORMALIZE:
  case IGNIS_MOE_ROUTING_RENORMALIZE_NAIVE:
    r.term = IGNIS_ROUTING_TERM_EXP;
    r.sum = IGNIS_ROUTING_SUM_TOP_K;
    r.norm = IGNIS_ROUTING_NORM_SUM;
    break;
  case IGNIS_MOE_ROUTING_LLAMA4:
  case IGNIS_MOE_ROUTING_TOPK_SIGMOID:
  case IGNIS_MOE_ROUTING_SIGMOID:
    r.term = IGNIS_ROUTING_TERM_SIGMOID;
    break;
  case IGNIS_MOE_ROUTING_SIGMOID_RENORM:
    r.term = IGNIS_ROUTING_TERM_SIGMOID;
    r.sum = IGNIS_ROUTING_SUM_TOP_K;
    r.norm = IGNIS_ROUTING_NORM_MAX;
    break;
  case IGNIS_MOE_ROUTING_DEEPSEEK_V3:
  case IGNIS_MOE_ROUTING_MINIMAX2:
    r.biased = 1;
    r.sum = IGNIS_ROUTING_SUM_TOP_K;
    r.norm = IGNIS_ROUTING_NORM_EPS;
    break;
  default: /* TOPK */
    break;
  }
  return r;
}

/* A softmax numerator: exp(v - top), top the largest value (DEFAULT's sum adds one per expert). */
static inline IGNIS_HOST_DEVICE float ignis_routing_exp_term(float v, float top) {
  return ignis_exp_nonpos(v - top);
}

/* The term of a chosen expert whose value is v (the logit; the sigmoid for the biased methods), top
 * the value of the first expert chosen. */
static inline IGNIS_HOST_DEVICE float ignis_routing_term(ignis_routing_term_kind kind, float v, float top) {
  if (kind == IGNIS_ROUTING_TERM_EXP)
    return ignis_routing_exp_term(v, top);
  if (kind == IGNIS_ROUTING_TERM_SIGMOID)
    return ignis_routing_sigmoid(v);
  return v;
}

/* The final weight of a chosen expert from its term and the method's sum. */
static inline IGNIS_HOST_DEVICE float ignis_routing_weight(ignis_routing_norm_kind norm, float term,
                                                           float sum, float scale) {
  float w = term;
  if (norm == IGNIS_ROUTING_NORM_SUM)
    w = IGNIS_ROUTING_FDIV(term, sum);
  else if (norm == IGNIS_ROUTING_NORM_MAX)
    w = IGNIS_ROUTING_FDIV(term, fmaxf(sum, 1e-20f));
  else if (norm == IGNIS_ROUTING_NORM_EPS)
    w = IGNIS_ROUTING_FDIV(term, sum + 1e-20f);
  return IGNIS_FMUL(w, scale);
}

#endif
