/* fp8 quantization: per-tensor (static or dynamic scale), per-token and per-token-group (1x128)
 * dynamic scales in the layouts the fp8 GEMMs take, and the same quantization fused behind
 * RMSNorm, fused residual add + RMSNorm, LayerNorm and silu_and_mul. Names follow FlashInfer
 * (flashinfer.norm's rmsnorm_quant, fused_add_rmsnorm_quant, fused_add_rmsnorm_fp8_block_quant,
 * layernorm_quant; flashinfer.quantization's per_token_group_quant_8bit).
 *
 * The quantization of a value v (f32) with scale s (f32):
 *
 *     q = fp8(sat(v * (1 / s)))     1 / s is an f32 reciprocal (IEEE), the product is one f32
 *                                   multiply, fp8() rounds to nearest even, sat() clamps to
 *                                   +-max of the format (e4m3: 448, e5m2: 57344)
 *
 * so that q * s approximates v (the GEMMs multiply by s). Saturation: finite values beyond the
 * format's range and +-inf become +-max (e5m2's infinities are never produced). NaN: a NaN value
 * stays NaN (a NaN code of the format; its sign is not guaranteed); it never enters an absmax
 * (absmax ignores NaN), so one NaN does not poison the scale of its group or tensor. An infinity
 * in a dynamic group makes its absmax FLT_MAX: the scale stays finite, the infinity saturates and
 * the group's finite values quantize to (signed) zeros.
 *
 * Dynamic scales: s = max(absmax, eps) / max_fp8 over the values a scale covers (eps: the absmax
 * floor, > 0, so an all-zero group gets a finite scale and quantizes to zeros). UE8M0 scales
 * (DeepGEMM's power-of-two recipe) round s up to a power of two, 2^ceil(log2 s), so that
 * |v| / s <= max_fp8 still holds; they are stored either as f32 values that are exact powers of two
 * (scale tensor dtype f32) or as e8m0 bytes, the biased exponent alone (dtype u8: byte
 * e means 2^(e - 127)), which is what DeepGEMM packs four to an int32 on sm_100.
 *
 * Scale layouts. A per-token-group scale tensor is a 2-D view [M, K / group_size] with any
 * element strides, which covers every layout the GEMMs take:
 *   - row-major ("K-major"): strides (K / group_size, 1);
 *   - column-major ("MN-major", DeepGEMM's and FlashInfer's gemm_fp8_nt_groupwise
 *     scale_major_mode="MN"): storage [K / group_size, M_pad], view strides (1, M_pad), where
 *     M_pad = M, or M rounded up to 16 bytes' worth of scales (4 f32 / 16 u8) for TMA, as
 *     DeepGEMM's get_col_major_tma_aligned_tensor lays it out. Padding entries are not written.
 * Scales are written only for the rows and groups that exist; the two layouts hold the same values.
 * These are the a_scale conventions of the block-scaled GEMM (ignis_mm_fp8_blockscale in
 * include/ignis/gemm.h: [M, K / 128] view, any strides, f32 or u8 e8m0), so a quantized activation
 * and its scales go to the GEMM as they are.
 *
 * Shapes: input [M, K] of f16, bf16 or f32 (2-D for the group forms; 1-D to 3-D for the
 * per-tensor ones, 2-D or 3-D for the norms, the leading dimensions being rows), the last dimension
 * contiguous and the row strides free; out of the input's shape in fp8 e4m3 or e5m2 (its dtype
 * chooses the format), last dimension contiguous, row strides free.
 * Per-tensor scales are f32 tensors of one element ([1] or [], the form FlashInfer passes). Norm
 * weights are [K] of the input's dtype or f32, as in norm.h. For silu_and_mul the input is [M, 2H]
 * (gate, then up) and out [M, H]. Any K works; the group forms need K % group_size == 0.
 *
 * Every call validates everything before writing anything: on error (IGNIS_ERROR_INVALID_ARGUMENT
 * naming the parameter, IGNIS_ERROR_UNSUPPORTED for a valid request ignis does not serve) no output
 * is written. Outputs must not overlap inputs. */
#ifndef IGNIS_QUANT_H
#define IGNIS_QUANT_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest finite value of an fp8 dtype (448 for e4m3, 57344 for e5m2); 0 for other dtypes. */
IGNIS_API float ignis_fp8_max(ignis_dtype dtype);

/* Static per-tensor quantization: out = fp8(sat(input / scale[0])). scale: f32, one element,
 * read on the device (it may come from an earlier kernel in the stream). */
IGNIS_API ignis_status ignis_fp8_quantize(const ignis_tensor *input, const ignis_tensor *scale,
                                          ignis_tensor *out, void *stream);

/* Dynamic per-tensor quantization: scale[0] = max(absmax(input), eps) / max_fp8 is computed on the
 * device and written, then out = fp8(sat(input / scale[0])). Two passes over the input (documented
 * cost: the input is read twice): first every block folds its rows' absmax into scale[0] with an
 * atomic max (scale[0] is zeroed first on the stream), a one-thread kernel turns it into the scale,
 * then the static kernel quantizes. Graph-capturable (no host synchronisation). */
IGNIS_API ignis_status ignis_fp8_quantize_dynamic(const ignis_tensor *input, double eps, ignis_tensor *out,
                                                  ignis_tensor *scale, void *stream);

/* Dynamic per-token-group quantization: for each row m and group g (elements g * group_size ..
 * (g + 1) * group_size - 1), scale[m, g] = max(absmax, eps) / max_fp8 (rounded up to a power of two
 * when ue8m0 != 0) and out = fp8(sat(input / scale[m, g])). group_size >= 1 divides K (128 is
 * DeepSeek's 1x128); group_size = K is per-token quantization. scale: [M, K / group_size] view of
 * f32 (or u8 e8m0 bytes, ue8m0 only) with any strides (see the layouts above). */
IGNIS_API ignis_status ignis_fp8_quantize_per_token_group(const ignis_tensor *input, int64_t group_size,
                                                          double eps, int ue8m0, ignis_tensor *out,
                                                          ignis_tensor *scale, void *stream);

/* Dynamic per-token quantization: scale [M] (or [M, 1]) f32, one per row; the per-token-group form
 * with group_size = K. */
IGNIS_API ignis_status ignis_fp8_quantize_per_token(const ignis_tensor *input, double eps, ignis_tensor *out,
                                                    ignis_tensor *scale, void *stream);

/* out = fp8(sat(rmsnorm(input) * weight / scale[0])), the norm as ignis_rmsnorm computes it (f32;
 * not rounded to the input dtype before quantizing). */
IGNIS_API ignis_status ignis_rmsnorm_quant(const ignis_tensor *input, const ignis_tensor *weight,
                                           const ignis_tensor *scale, double eps, ignis_tensor *out,
                                           void *stream);

/* residual += input (f32 sum stored rounded to residual's dtype); out = fp8(sat(rmsnorm(sum) *
 * weight / scale[0])) of the f32 sum. input is read only. */
IGNIS_API ignis_status ignis_fused_add_rmsnorm_quant(const ignis_tensor *input, ignis_tensor *residual,
                                                     const ignis_tensor *weight, const ignis_tensor *scale,
                                                     double eps, ignis_tensor *out, void *stream);

/* out = fp8(sat(layernorm(input) * gamma + beta) / scale[0]); gamma and beta as in ignis_layernorm. */
IGNIS_API ignis_status ignis_layernorm_quant(const ignis_tensor *input, const ignis_tensor *gamma,
                                             const ignis_tensor *beta, const ignis_tensor *scale, double eps,
                                             ignis_tensor *out, void *stream);

/* residual += input; normed = rmsnorm(sum) * weight rounded to the input's dtype (written to
 * normed_out when it is not NULL); then the 1 x group_size dynamic quantization of normed into out
 * and block_scale, exactly as ignis_fp8_quantize_per_token_group (absmax floor quant_eps) would
 * quantize normed_out. FlashInfer's form is group_size 128, quant_eps 1e-4, f32 scales.
 * block_scale: [M, K / group_size] view, any strides (FlashInfer passes the column-major
 * TMA-aligned buffer [K / 128, round_up(M, 4)] transposed). */
IGNIS_API ignis_status ignis_fused_add_rmsnorm_fp8_block_quant(
    const ignis_tensor *input, ignis_tensor *residual, const ignis_tensor *weight, double eps,
    int64_t group_size, double quant_eps, int ue8m0, ignis_tensor *out, ignis_tensor *block_scale,
    ignis_tensor *normed_out, void *stream);

/* out = fp8(sat(silu(input[:, :H]) * input[:, H:] / scale[0])), silu as in ignis_silu_and_mul, the
 * product in f32 (not rounded to the input dtype). */
IGNIS_API ignis_status ignis_silu_and_mul_quant(const ignis_tensor *input, const ignis_tensor *scale,
                                                ignis_tensor *out, void *stream);

/* silu_and_mul's f32 product quantized per 1 x group_size group of out's row (H % group_size == 0),
 * scales as in ignis_fp8_quantize_per_token_group. */
IGNIS_API ignis_status ignis_silu_and_mul_quant_per_token_group(const ignis_tensor *input, int64_t group_size,
                                                                double eps, int ue8m0, ignis_tensor *out,
                                                                ignis_tensor *scale, void *stream);

#ifdef __cplusplus
}
#endif
#endif
