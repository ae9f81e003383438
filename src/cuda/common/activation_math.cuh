/* The activation functions of the CUDA gated activations (activation/activation.cu), shared with
 * the fused silu_and_mul + fp8 quantization (quant/quant.cu) so both compute the same values:
 * silu(a) = a / (1 + e^-a), gelu with erff, and gelu_tanh through the identity
 * 0.5 * (1 + tanh(u)) = 1 / (1 + e^(-2u)), which needs one exponential and stays accurate where
 * 1 + tanh(u) would cancel (a << 0). PRECISE (f32 outputs) uses expf and IEEE division; otherwise
 * __expf and __fdividef, whose few-ulp errors vanish in a 16-bit or fp8 output's rounding
 * (__fdividef returns 0 once the denominator passes 2^126, where the exact result is below
 * 2^-126 |a| anyway). */
#ifndef IGNIS_CUDA_ACTIVATION_MATH_CUH
#define IGNIS_CUDA_ACTIVATION_MATH_CUH

#include "core/params.h"

template <bool PRECISE> __device__ __forceinline__ float ignis_exp_f32(float x) {
  return PRECISE ? expf(x) : __expf(x);
}
template <bool PRECISE> __device__ __forceinline__ float ignis_div_f32(float a, float b) {
  return PRECISE ? a / b : __fdividef(a, b);
}

template <ignis_activation_kind KIND, bool PRECISE> __device__ __forceinline__ float ignis_activate(float a) {
  if constexpr (KIND == IGNIS_ACT_SILU) {
    return ignis_div_f32<PRECISE>(a, 1.0f + ignis_exp_f32<PRECISE>(-a));
  } else if constexpr (KIND == IGNIS_ACT_GELU) {
    return 0.5f * a * (1.0f + erff(a * 0.70710678118654752f));
  } else {
    const float u = 0.79788456080286536f * (a + 0.044715f * a * a * a); /* sqrt(2/pi) (a + 0.044715 a^3) */
    return ignis_div_f32<PRECISE>(a, 1.0f + ignis_exp_f32<PRECISE>(-2.0f * u));
  }
}

#endif
