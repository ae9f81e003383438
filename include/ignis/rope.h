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
 * f32. On error nothing is written.
 *
 * The fused forms at the end (rope_quantize_fp8 and its paged appends) take q and k split into
 * their rotary and non-rotary parts, rotate by a cos/sin cache and write fp8, as FlashInfer's
 * rope_quantize_fp8, mla_rope_quantize_fp8 and rope_quantize_fp8_append_paged_kv_cache do. */
#ifndef IGNIS_ROPE_H
#define IGNIS_ROPE_H

#include "ignis/core.h"
#include "ignis/paged_kv.h"

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

/* ---- RoPE fused with fp8 quantization (FlashInfer's rope_quantize_fp8 family) -----------------
 *
 * The query and key arrive split into their rotary part ("rope", rope_dim values per head) and the
 * rest ("nope", no_rope_dim values per head):
 *   q_rope [nnz, num_q_heads, rope_dim]      q_nope [nnz, num_q_heads, no_rope_dim]
 *   k_rope [nnz, num_k_heads, rope_dim]      k_nope [nnz, num_k_heads, no_rope_dim]   (GQA/MHA)
 *   k_rope [nnz, rope_dim]                   k_nope [nnz, no_rope_dim]                (MLA: one
 *                                                                                     shared head)
 * f16 or bf16, all four the same (f32: IGNIS_ERROR_UNSUPPORTED); any token and head strides, last
 * dimension stride 1. q_nope / k_nope (and their outputs) may be NULL or have no_rope_dim = 0:
 * nothing to quantize there. rope_dim is even, at most IGNIS_ROPE_MAX_HEAD_DIM.
 *
 * Token t, at position p = pos_ids[t] (i32 or i64), takes row p of cos_sin_cache [max_position,
 * rope_dim] f32 (cos in its first rope_dim/2 columns, sin in the last; any row stride). Pairs are
 * (i, i + rope_dim/2) (is_neox = 1) or (2i, 2i + 1) (is_neox = 0), pair i turned by cos_i, sin_i:
 *     x' = x cos_i - y sin_i,   y' = x sin_i + y cos_i
 * in f32, each product rounded on its own (no fused multiply-add). Every output value is then
 *     out = fp8(sat(v * scale))
 * with v the rotated value (rope parts) or the input value (nope parts, V), scale = quant_scale_q
 * for q and quant_scale_kv for k and v (an f32 product: the scale multiplies, as FlashInfer's),
 * sat clamping to the format's largest finite value (448 e4m3, 57344 e5m2; NaN stays NaN) and fp8
 * rounding to nearest even: the quant ops' conversion (include/ignis/quant.h), bit for bit the
 * same on every backend. quant_scale_q and quant_scale_kv must be finite and > 0.
 *
 * Outputs are fp8 e4m3 or e5m2, all of one dtype, shaped as their inputs, any token and head
 * strides (last dimension stride 1), disjoint from every input and from each other. Positions
 * must lie in [0, max_position): checked on the host; on the GPU a token whose position is outside
 * is quantized unrotated (cos 1, sin 0). On error nothing is written. */
IGNIS_API ignis_status ignis_rope_quantize_fp8(const ignis_tensor *q_rope, const ignis_tensor *k_rope,
                                               const ignis_tensor *q_nope, const ignis_tensor *k_nope,
                                               const ignis_tensor *cos_sin_cache, const ignis_tensor *pos_ids,
                                               int32_t is_neox, float quant_scale_q, float quant_scale_kv,
                                               ignis_tensor *q_rope_out, ignis_tensor *k_rope_out,
                                               ignis_tensor *q_nope_out, ignis_tensor *k_nope_out,
                                               void *stream);

/* The same, with the quantized keys and values appended to a paged fp8 cache instead of returned
 * (GQA/MHA: k_rope and k_nope 3-D). Token t belongs to request b = batch_indices[t] at position
 * s = positions[t] in it (both [nnz] i32; pos_ids, the RoPE position, is separate): its K row
 * [rope | nope] (head_dim = rope_dim + no_rope_dim values) and its V row v[t] ([nnz, num_k_heads,
 * head_dim], f16/bf16 like q_rope, scaled by quant_scale_kv) go to page
 * cache->indices[cache->indptr[b] + s / page_size], slot s % page_size, of cache->k_cache and
 * cache->v_cache (include/ignis/paged_kv.h: NHD or HND, any page/token/head strides, fp8 of the
 * outputs' dtype, shape[..., num_k_heads, head_dim]). cache->last_page_len is not read (it may be
 * left empty). q_rope_out and q_nope_out as for ignis_rope_quantize_fp8; the k outputs are the
 * cache. A token with batch_indices[t] < 0 is padding: nothing of it is written, not even its q
 * outputs (as FlashInfer). Host index arrays are checked (b < B, s within the request's pages,
 * page numbers within the cache, positions within the cos/sin cache); on the GPU a token whose
 * page slot is out of range writes its q outputs and nothing into the cache. */
IGNIS_API ignis_status ignis_rope_quantize_fp8_append_paged_kv_cache(
    const ignis_tensor *q_rope, const ignis_tensor *k_rope, const ignis_tensor *q_nope,
    const ignis_tensor *k_nope, const ignis_tensor *v, const ignis_tensor *cos_sin_cache,
    const ignis_tensor *pos_ids, const ignis_tensor *batch_indices, const ignis_tensor *positions,
    const ignis_paged_kv_cache *cache, int32_t is_neox, float quant_scale_q, float quant_scale_kv,
    ignis_tensor *q_rope_out, ignis_tensor *q_nope_out, void *stream);

/* The MLA form (k_rope [nnz, rope_dim], k_nope [nnz, no_rope_dim]): k_nope goes to ckv_cache
 * [num_pages, page_size, no_rope_dim] and k_rope to kpe_cache [num_pages, page_size, rope_dim]
 * (include/ignis/mla.h's cache: any page and token strides, last dimension stride 1; two views of
 * one [num_pages, page_size, no_rope_dim + rope_dim] buffer work), fp8 of the outputs' dtype, at
 * page kv_indices[kv_indptr[b] + s / page_size], slot s % page_size (kv_indptr [B + 1],
 * kv_indices [nnz_pages], i32). Padding, checks and GPU behaviour as above. */
IGNIS_API ignis_status ignis_rope_quantize_fp8_append_paged_mla_kv_cache(
    const ignis_tensor *q_rope, const ignis_tensor *k_rope, const ignis_tensor *q_nope,
    const ignis_tensor *k_nope, const ignis_tensor *cos_sin_cache, const ignis_tensor *pos_ids,
    const ignis_tensor *batch_indices, const ignis_tensor *positions, ignis_tensor *ckv_cache,
    ignis_tensor *kpe_cache, const ignis_tensor *kv_indices, const ignis_tensor *kv_indptr, int32_t is_neox,
    float quant_scale_q, float quant_scale_kv, ignis_tensor *q_rope_out, ignis_tensor *q_nope_out,
    void *stream);

#ifdef __cplusplus
}
#endif
#endif
