/* Normalization ops: RMSNorm, fused residual-add + RMSNorm, their Gemma forms (weight + 1), and
 * LayerNorm. Names and semantics follow FlashInfer's norm module.
 *
 * Layout: input is 2-D [tokens, hidden] or 3-D [batch, tokens, hidden]; the last dimension must
 * have stride 1 (IGNIS_ERROR_UNSUPPORTED otherwise), the leading one or two dimensions may have
 * any strides (row strides), independently for input, output and residual. Any hidden size works
 * (no multiple-of-8 requirement). dtypes: input/output/residual f16, bf16 or f32, all the same;
 * weight (and LayerNorm's bias) the same dtype as the input, or f32. Arithmetic is f32.
 *
 *   rmsnorm:                out = x / sqrt(mean(x^2) + eps) * weight
 *   gemma_rmsnorm:          out = x / sqrt(mean(x^2) + eps) * (1 + weight)
 *   fused_add_rmsnorm:      residual = x + residual; x = rmsnorm(residual)   (both in place)
 *   gemma_fused_add_rmsnorm likewise with (1 + weight)
 *   layernorm:              out = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta
 *
 * In the fused forms the sum x + residual is formed in f32, stored to residual rounded to the
 * dtype, and the norm is taken of the f32 sum. out may alias input exactly (same data and
 * strides) for an in-place norm; any other overlap is undefined. eps must be finite and >= 0.
 * On error nothing is written. */
#ifndef IGNIS_NORM_H
#define IGNIS_NORM_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

IGNIS_API ignis_status ignis_rmsnorm(const ignis_tensor *input, const ignis_tensor *weight, double eps,
                                     ignis_tensor *out, void *stream);

IGNIS_API ignis_status ignis_gemma_rmsnorm(const ignis_tensor *input, const ignis_tensor *weight,
                                           double eps, ignis_tensor *out, void *stream);

/* input and residual are both read and written. */
IGNIS_API ignis_status ignis_fused_add_rmsnorm(ignis_tensor *input, ignis_tensor *residual,
                                               const ignis_tensor *weight, double eps, void *stream);

IGNIS_API ignis_status ignis_gemma_fused_add_rmsnorm(ignis_tensor *input, ignis_tensor *residual,
                                                     const ignis_tensor *weight, double eps,
                                                     void *stream);

/* gamma and beta: [hidden], dtype of input or f32 (FlashInfer passes f32). */
IGNIS_API ignis_status ignis_layernorm(const ignis_tensor *input, const ignis_tensor *gamma,
                                       const ignis_tensor *beta, double eps, ignis_tensor *out,
                                       void *stream);

#ifdef __cplusplus
}
#endif
#endif
