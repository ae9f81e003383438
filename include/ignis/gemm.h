/* Matrix products: 16-bit GEMM (plain and batched, optional bias), fp8 GEMM with per-tensor scales,
 * and the DeepSeek-V3 block-scaled fp8 GEMM (activations with 1x128 scales, weights with 128x128
 * scales). Names and semantics follow FlashInfer's gemm module (mm_bf16, bmm_bf16, bmm_fp8,
 * gemm_fp8_nt_groupwise, fp8_blockscale_gemm_sm90).
 *
 * Layout (every form). out[.., m, n] = sum_k a[.., m, k] * b[.., k, n]. Tensors are 2-D, or 3-D
 * with a leading batch dimension (all of a, b, out the same ndim; any batch strides, 0 included for
 * a weight shared by every batch). a is [M, K] with its last dimension contiguous (stride 1), any
 * row stride. b is the logical [K, N]: either the "NT" form, a weight stored [N, K] row-major and
 * handed in transposed (b.strides = {1, ldb}: what FlashInfer and PyTorch pass as
 * weight.transpose(-2, -1)), or a plain [K, N] row-major matrix (b.strides = {ldb, 1}). out is
 * [M, N] with its last dimension contiguous. Leading strides must be at least the row they span.
 * Accumulation is f32 in every form; out is rounded once at the end.
 *
 * Which path runs:
 *   - CPU: src/cpu/gemm.c, a blocked, threaded f32-accumulating loop for every form and layout.
 *   - CUDA, small M (decode): ignis' own kernel (src/cuda/gemm/skinny.cuh: the weight streamed
 *     once over every SM, mma.sync tensor cores, split-K with a deterministic reduction) takes an
 *     ignis_mm call when all of these hold: a and b both f16 or both bf16, no batch (2-D, or 3-D with
 *     batch 1), b in the NT form (a weight [N, K] handed in transposed), 1 <= M <= 64, K a positive
 *     multiple of 8, a and b 16-byte aligned with row strides of whole 16-byte units, a device of
 *     compute capability 8.0 or later, and the environment variable IGNIS_GEMM_SKINNY not "0".
 *     Any out dtype and bias; it needs no cuBLASLt. Its result is the same bits on every call of
 *     a shape (the split sums are added in a fixed order).
 *   - CUDA, everything else: cuBLASLt, loaded at the first GEMM call that needs it, with dlopen
 *     (the environment variable IGNIS_CUBLASLT names the library; else libcublasLt.so.13, then
 *     libcublasLt.so, then the copy PyTorch's wheels ship under site-packages/nvidia/.../lib).
 *     Nothing else in ignis needs it: a machine without it fails those GEMM calls with
 *     IGNIS_ERROR_UNSUPPORTED and a message saying so. One cuBLASLt handle per device, and one
 *     fixed workspace per device and stream (32 MiB for cuBLASLt, 16 MiB for repacked scales or
 *     the small-M kernel's split-K partials, 64 KiB of its counters), made at the first call on
 *     that stream, so calls after it never allocate and are safe inside CUDA-graph capture (make
 *     one call on the stream before capturing). The algorithm cuBLASLt's heuristic picks is
 *     cached per shape, layout and dtypes.
 *     The fp8 forms on CUDA need 16-byte aligned data pointers and leading strides that keep rows
 *     16-byte aligned (IGNIS_ERROR_UNSUPPORTED otherwise, naming the tensor); the 16-bit form takes
 *     any alignment (cuBLASLt is told the actual one and picks among the algorithms allowing it).
 *
 * On error nothing is written; the message names the function and the parameter. An empty product
 * (M or N zero) writes nothing; K == 0 writes bias (or zeros) on the CPU and is refused
 * (IGNIS_ERROR_UNSUPPORTED) on CUDA. */
#ifndef IGNIS_GEMM_H
#define IGNIS_GEMM_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 16-bit GEMM: a and b both f16 or both bf16; out f16, bf16 or f32. bias NULL, or [N] contiguous
 * added to every row (dtype: out's, or f32). CUDA: sm_80 and later. */
IGNIS_API ignis_status ignis_mm(const ignis_tensor *a, const ignis_tensor *b, const ignis_tensor *bias,
                                ignis_tensor *out, void *stream);

/* fp8 GEMM with per-tensor scales: out = (a_scale * b_scale) * (a @ b). a and b fp8 e4m3 or e5m2
 * (e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3; e5m2 x e5m2 is refused as cuBLASLt refuses it);
 * a_scale and b_scale f32 tensors of one element each (shape [] or [1]), in the memory of the
 * call's device (the CUDA path reads them on the device: no host sync). b must be in the NT form
 * (b.strides[-2] == 1) on CUDA (cuBLASLt's fp8 is TN only); the CPU takes both. out bf16 or f16.
 * CUDA: sm_89 and later. */
IGNIS_API ignis_status ignis_mm_fp8(const ignis_tensor *a, const ignis_tensor *b, const ignis_tensor *a_scale,
                                    const ignis_tensor *b_scale, ignis_tensor *out, void *stream);

/* Block-scaled fp8 GEMM (DeepSeek-V3): a [M, K] fp8 e4m3 with one scale per row and 128-wide K
 * block, b the weight [N, K] fp8 e4m3 (row-major, given as such: not transposed) with one scale
 * per 128x128 block:
 *     out[m, n] = sum_kb a_scale[m, kb] * b_scale[n / 128, kb] * sum_{k in block kb} a[m, k] b[n, k]
 * each block's partial sum formed in f32 and then scaled, as the GPU does.
 * a_scale: [M, ceil(K/128)], any strides (FlashInfer's "K" major mode is strides {ceil(K/128), 1},
 * its "MN" mode the [ceil(K/128), M] tensor handed in transposed: strides {1, M}). b_scale:
 * [ceil(N/128), ceil(K/128)] (128x128 blocks), any strides; or [N, ceil(K/128)], one 1x128 scale per
 * weight row (FlashInfer's "per-token" weight scales; b_scale[n, kb] replaces b_scale[n / 128, kb]). Scales are f32, or u8 holding UE8M0 exponents (the
 * value 2^(e - 127); e == 255 is NaN), both tensors the same dtype. out [M, N] bf16 or f16.
 * CUDA: sm_90 with cuBLASLt 12.9 or later (VEC128_32F for a, BLK128x128_32F or VEC128_32F for b); the scales are
 * repacked (UE8M0 decoded) into the workspace in cuBLASLt's layout, so any layout works. The CUDA
 * path needs M a multiple of 4, N a multiple of 16 and K a multiple of 128 (cuBLASLt's rules; the
 * Python wrappers pad M). No batch form. */
IGNIS_API ignis_status ignis_mm_fp8_blockscale(const ignis_tensor *a, const ignis_tensor *b,
                                               const ignis_tensor *a_scale, const ignis_tensor *b_scale,
                                               ignis_tensor *out, void *stream);

#ifdef __cplusplus
}
#endif
#endif
