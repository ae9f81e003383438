/* Gated activations: the first half of the last dimension goes through the activation and is
 * multiplied by the second half. input [..., 2H] -> out [..., H], any H >= 1; input and out are
 * 1-D, 2-D or 3-D with the same leading shape, whose strides may be anything; the last dimension
 * must have stride 1 (IGNIS_ERROR_UNSUPPORTED otherwise). dtypes f16, bf16, f32, input and output the same; arithmetic is f32.
 *
 *   silu_and_mul:      out = silu(a) * b,  silu(a) = a / (1 + exp(-a))
 *   gelu_and_mul:      out = gelu(a) * b,  gelu(a) = a/2 * (1 + erf(a/sqrt(2)))
 *   gelu_tanh_and_mul: out = gelu_tanh(a) * b, gelu_tanh(a) = a/2 * (1 + tanh(sqrt(2/pi)(a + 0.044715 a^3)))
 *
 * where a = input[..., :H] and b = input[..., H:]. out must not overlap input. On error nothing
 * is written. */
#ifndef IGNIS_ACTIVATION_H
#define IGNIS_ACTIVATION_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

IGNIS_API ignis_status ignis_silu_and_mul(const ignis_tensor *input, ignis_tensor *out, void *stream);
IGNIS_API ignis_status ignis_gelu_and_mul(const ignis_tensor *input, ignis_tensor *out, void *stream);
IGNIS_API ignis_status ignis_gelu_tanh_and_mul(const ignis_tensor *input, ignis_tensor *out,
                                               void *stream);

#ifdef __cplusplus
}
#endif
#endif
