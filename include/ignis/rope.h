/* Rotary position embedding (RoPE), in FlashInfer's forms.
 *
 * q: [nnz, num_q_heads, head_dim], k: [nnz, num_k_heads, head_dim] (num_q_heads and num_k_heads
 * may differ: GQA). The token and head strides of q, k, q_out and k_out may be anything; the last
 * dimension must have stride 1. dtypes f16, bf16 or f32, all four the same. Outputs may alias their
 * inputs exactly (same data and strides): that is the in-place form. Arithmetic is f32.
 *
 * Only the first rotary_dim dimensions of each head are rotated (partial RoPE); the rest are copied
 * (or left alone in place). Pairs are (i, i + rotary_dim/2) for i < rotary_dim/2 (NeoX/Llama
 * style, interleave = 0) or (2i, 2i + 1) (GPT-J style, interleave = 1). Pair i at position p is
 * rotated by the angle p * f_i with
 *     f_i = theta^(-2i / rotary_dim) / rope_scale                       (plain)
 * and, for the Llama 3.1 form, f_i blended between theta^(-2i/rotary_dim) and that over rope_scale
 * by smooth = clamp((old_context_len * f / (2 pi) - low_freq_factor) /
 *                   (high_freq_factor - low_freq_factor), 0, 1):
 *     f_i = (1 - smooth) * f / rope_scale + smooth * f.
 * Rotation: (x, y) -> (x cos - y sin, x sin + y cos).
 *
 * Positions come from one of:
 *   - pos_ids [nnz] (i32 or i64): token t is at position pos_ids[t];
 *   - indptr [B+1] and offsets [B] (i32 or i64, same dtype): token t of request b
 *     (indptr[b] <= t < indptr[b+1]) is at offsets[b] + t - indptr[b]. indptr[0] must be 0 and
 *     indptr[B] must equal nnz; indptr must be non-decreasing (checked on the host for host
 *     tensors; for device tensors it is the caller's contract, read only by the kernel).
 *   - the cos/sin cache form (vLLM/SGLang): positions [nnz] (i32 or i64) index rows of
 *     cos_sin_cache [max_position, rotary_dim] f32, whose first rotary_dim/2 columns are cos and
 *     last rotary_dim/2 are sin. Positions must lie in [0, max_position): on the host this is
 *     checked; on the GPU an out-of-range position leaves its token's values unrotated (copied).
 *
 * head_dim may be up to 512 (IGNIS_ERROR_UNSUPPORTED above).
 *
 * Positions in the pos_ids and indptr forms must be >= 0 and below 2^24 so that they are exact in
 * f32. On error nothing is written. */
#ifndef IGNIS_ROPE_H
#define IGNIS_ROPE_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ignis_rope_config {
  size_t size;           /* sizeof(ignis_rope_config): set by IGNIS_ROPE_CONFIG_INIT */
  int32_t rotary_dim;    /* 0 means head_dim; else even, 2..head_dim */
  int32_t interleave;    /* 0: NeoX pairs (i, i+rotary_dim/2); 1: GPT-J pairs (2i, 2i+1) */
  double rope_scale;     /* > 0 */
  double rope_theta;     /* > 0 */
  int32_t llama31;       /* 1: apply the Llama 3.1 frequency scaling below */
  double low_freq_factor;
  double high_freq_factor; /* > low_freq_factor */
  double old_context_len;  /* > 0 */
} ignis_rope_config;

/* FlashInfer's defaults: full rotary dim, NeoX pairs, scale 1, theta 1e4, no Llama 3.1 scaling
 * (its Llama 3.1 defaults, used when llama31 = 1: scale 8, theta 5e5, low 1, high 4, old 8192,
 * must be set by the caller). */
#define IGNIS_ROPE_CONFIG_INIT {sizeof(ignis_rope_config), 0, 0, 1.0, 1e4, 0, 1.0, 4.0, 8192.0}

/* Positions from pos_ids. */
IGNIS_API ignis_status ignis_apply_rope_pos_ids(const ignis_tensor *q, const ignis_tensor *k,
                                                const ignis_tensor *pos_ids,
                                                const ignis_rope_config *config, ignis_tensor *q_out,
                                                ignis_tensor *k_out, void *stream);

/* Positions from indptr and offsets. */
IGNIS_API ignis_status ignis_apply_rope(const ignis_tensor *q, const ignis_tensor *k,
                                        const ignis_tensor *indptr, const ignis_tensor *offsets,
                                        const ignis_rope_config *config, ignis_tensor *q_out,
                                        ignis_tensor *k_out, void *stream);

/* vLLM/SGLang form. q and k may also be 2-D [nnz, heads * head_size]; head_size is given
 * explicitly and the rotary dim is cos_sin_cache.shape[1]. is_neox = 1 means NeoX pairs,
 * 0 means GPT-J (interleaved) pairs. */
IGNIS_API ignis_status ignis_apply_rope_with_cos_sin_cache(const ignis_tensor *positions,
                                                           const ignis_tensor *q,
                                                           const ignis_tensor *k, int64_t head_size,
                                                           const ignis_tensor *cos_sin_cache,
                                                           int32_t is_neox, ignis_tensor *q_out,
                                                           ignis_tensor *k_out, void *stream);

#ifdef __cplusplus
}
#endif
#endif
