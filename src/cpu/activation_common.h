/* The activation functions of the CPU gated activations (cpu/activation.c), shared with the fused
 * silu_and_mul + fp8 quantization (cpu/quant.c) so both compute the same values, in f32:
 * silu(a) = a / (1 + e^-a), gelu(a) = a/2 (1 + erf(a / sqrt 2)), and
 * gelu_tanh(a) = a/2 (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))). */
#ifndef IGNIS_CPU_ACTIVATION_COMMON_H
#define IGNIS_CPU_ACTIVATION_COMMON_H

#include <math.h>

#include "core/params.h"

static inline float ignis_cpu_activate(ignis_activation_kind kind, float a) {
  switch (kind) {
  case IGNIS_ACT_SILU:
    return a / (1.0f + expf(-a));
  case IGNIS_ACT_GELU:
    return 0.5f * a * (1.0f + erff(a * 0.70710678118654752f));
  default: {
    const float k = 0.79788456080286536f; /* sqrt(2/pi) */
    return 0.5f * a * (1.0f + tanhf(k * (a + 0.044715f * a * a * a)));
  }
  }
}

#endif
