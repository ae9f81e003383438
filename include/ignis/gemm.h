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
 *     compute capability 8.0 or later, and either cuBLASLt has no algorithm for the call (out the
 *     other 16-bit dtype: bf16 x bf16 -> f16, f16 x f16 -> bf16; or an f32 bias with a 16-bit out;
 *     past M 64 these are refused with IGNIS_ERROR_UNSUPPORTED) or the environment variable
 *     IGNIS_GEMM_SKINNY is "1" (any out dtype); "0" turns it off. Everything else goes to
 *     cuBLASLt, which was faster on the H100 (019e244, 7168x2048 and 4096x4096: 0.92x and 1.05x at
 *     M 1, 0.86x and 0.99x at M 4, 0.69-0.78x at M 16, 0.35x at M 64). Any bias; it needs no
 *     cuBLASLt. Its result is the same bits on every call of a shape (the split sums are added in
 *     a fixed order).
 *   - CUDA, block-scaled fp8 (ignis_mm_fp8_blockscale) with 1 <= M <= 16 (decode): the small-M
 *     grouped kernel (src/cuda/gemm/grouped_skinny.cuh, run as one group: the weight streamed once
 *     over every SM, K split across blocks when one group gives too few, the split sums in the
 *     workspace described below and added in a fixed order, so the same bits on every call) when
 *     all of these hold: e4m3 x e4m3,
 *     weight scales in 128x128 blocks (not per row), K a positive multiple of 16, N a multiple of 8,
 *     a, b and out 16-byte aligned with row strides of whole 16-byte units, a device of compute
 *     capability 8.9 or later, and IGNIS_GEMM_GROUPED_SKINNY not "0". On the H100 it ran
 *     N2112 K7168 at M 4 / 16 in 11.1 / 13.3 us where cuBLASLt took 18.5 / 18.7 (N7168 K2048 M16:
 *     12.6 against 13.1); past M 16 cuBLASLt was faster (one group gives too few blocks). M need
 *     not be a multiple of 4 on this path, nor K of 128.
 *   - CUDA, on an H100 / H200 unless IGNIS_GEMM_SM90 is "0", block-scaled fp8
 *     (ignis_mm_fp8_blockscale) with 1 <= M <= 32, and 16-bit ignis_mm with 1 <= M <= 16 and no
 *     bias: ignis' Hopper small-M kernel (src/cuda/gemm/gemm_small_m_sm90.cu: 64 weight rows per
 *     block on wgmma's 64-row side, the activation rows on its 16- or 32-wide side, TMA loads of the
 *     block's whole K range in flight, consumer warpgroups taking the K blocks in turn; for fp8, K
 *     split across blocks when the weight tiles leave SMs idle, the split sums in the workspace
 *     described below and added in a fixed order, so the same bits on every call; 16-bit runs
 *     unsplit) when all of these hold: e4m3 x e4m3 with weight scales in 128x128 blocks (not per
 *     row), or bf16 x bf16 / f16 x f16 with out bf16, f16 or f32; b in the NT form; K a positive
 *     multiple of 16 bytes; a and b 16-byte aligned with row strides of whole 16-byte units; a
 *     device of compute capability 9.0 and a build with sm_90a. M need not be a multiple of 4 on
 *     this path, nor N of 16 or K of 128. It comes before the small-M grouped kernel above, and
 *     after the 16-bit small-M kernel where that is asked for (IGNIS_GEMM_SKINNY=1) or alone can
 *     do the call (a 16-bit out of the other 16-bit dtype). On the H100 (375420d) it beat the
 *     small-M grouped kernel and cuBLASLt at these sizes (fp8 N2112 K7168 M 4 / 16 / 32: 10.1 /
 *     10.9 / 13.5 us against 11.1 / 12.6 / -, cuBLASLt 19.0 / 19.0 / 18.8; bf16 N7168 K2048 M 4 /
 *     16: 9.2 / 9.6 against cuBLASLt 10.0 / 10.3; weights warm in the L2) and lost to cuBLASLt at
 *     64 rows; with the weights read from HBM (bench/gemm_compare.py, c116f81) bf16 N4096 K4096 at
 *     1 / 16 rows took 14.0 / 14.7 us against torch.matmul's 17.0 / 17.3, and block-scaled fp8
 *     M4 N7168 K2048 8.7 us against cuBLAS's block-scaled 9.3.
 *   - CUDA, block-scaled fp8 (ignis_mm_fp8_blockscale) with M >= 128 on an H100 / H200: ignis' own
 *     Hopper kernel (src/cuda/gemm/grouped_gemm_sm90.cu, the grouped kernel below run as one group)
 *     when all of these hold: weight scales in 128x128 blocks (not per row), K a positive multiple
 *     of 16, N a multiple of 8, a, b and out 16-byte aligned with row strides of whole 16-byte
 *     units, a device of compute capability 9.0 and a build with sm_90a, and the environment
 *     variable IGNIS_GEMM_SM90 set to "all". By default this shape stays on cuBLASLt: on the H100
 *     (9b7ac28) cuBLASLt ran M 4096 N 7168 K 16384 at 1335 TFLOP/s, the Hopper kernel at 857-876.
 *     M need not be a multiple of 4 on this path, nor K of 128.
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
 *   - The grouped forms (ignis_grouped_mm, ignis_grouped_mm_fp8_blockscale, below): the CPU GEMM
 *     per group on the host; on CUDA always ignis' own grouped kernels (a weight-streaming one for
 *     small M, the Hopper one of src/cuda/gemm/grouped_gemm_sm90.cu where it applies, else
 *     src/cuda/gemm/grouped_gemm.cu: see ignis_grouped_mm), never cuBLASLt, no workspace.
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
 * CUDA: M <= 32 on the Hopper small-M kernel (sm_90a, unless IGNIS_GEMM_SM90=0), else M <= 16 on
 * the small-M grouped kernel (sm_89 or later), and with IGNIS_GEMM_SM90=all M >= 128 on ignis'
 * Hopper kernel (sm_90a), for the
 * shapes listed above (128x128 weight blocks, K % 16 == 0,
 * N % 8 == 0; scales read in place, any strides), else cuBLASLt 12.9 or later
 * (VEC128_32F for a, BLK128x128_32F or VEC128_32F for b; the scales are repacked, UE8M0 decoded,
 * into the workspace in cuBLASLt's layout, so any layout works), which needs M a multiple of 4, N a
 * multiple of 16 and K a multiple of 128 (the Python wrappers pad M). No batch form. */
IGNIS_API ignis_status ignis_mm_fp8_blockscale(const ignis_tensor *a, const ignis_tensor *b,
                                               const ignis_tensor *a_scale, const ignis_tensor *b_scale,
                                               ignis_tensor *out, void *stream);

/* Grouped GEMM (the building block of fused MoE, and LoRA's segment GEMM). G groups share the
 * activations a [M, K] and the output out [M, N]; group g owns rows m_indptr[g] .. m_indptr[g + 1]:
 *     out[m, :] = a[m, :] @ b[w]^T   for m_indptr[g] <= m < m_indptr[g + 1], w = g or weight_indices[g]
 * a: [M, K] f16 or bf16, last dimension contiguous, any row stride. b: the weights [W, N, K] ("NT":
 * each stored [N, K], b.strides[2] == 1), or the same logical [W, N, K] view of weights stored
 * [W, K, N] (b.strides[1] == 1; LoRA's row-major weights), any group stride; b.dtype == a.dtype.
 * m_indptr: [G + 1] i32 or i64, contiguous, on the call's device (G = m_indptr.shape[0] - 1 >= 0).
 * weight_indices: NULL (then W must equal G) or [G] i32/i64 contiguous. out: [M, N] f16, bf16 or
 * f32, last dimension contiguous, disjoint from the inputs. f32 accumulation, out rounded once.
 *
 * M is an upper bound: rows of out outside m_indptr[0] .. m_indptr[G] are not written. The host
 * never reads m_indptr or weight_indices on CUDA (no sync, CUDA-graph safe: one launch whose grid
 * depends only on M, N and G). Their values must be 0 <= m_indptr[0] <= .. <= m_indptr[G] <= M and
 * 0 <= weight_indices[g] < W: the CPU checks them (IGNIS_ERROR_INVALID_ARGUMENT naming the entry,
 * nothing written); the CUDA kernel clamps each offset into [0, M] (a decreasing pair is an empty
 * group) and skips a group whose weight index is out of range (its rows are not written).
 * Empty groups and groups of any size (one group of all M rows) are fine.
 *
 * Paths: CPU: src/cpu/grouped_gemm.c (each group is one call of the CPU GEMM). CUDA, three kernels of
 * ignis' own, each block finding its rows from m_indptr on the device, tried in this order:
 *   - small M (MoE decode, src/cuda/gemm/grouped_skinny.cu): taken when M <= 512, M <= 8 G (at
 *     most 8 rows per group on average), the weights are in the NT form (b.strides[2] == 1) and
 *     the environment variable IGNIS_GEMM_GROUPED_SKINNY is not "0". Each busy group's weight is
 *     streamed once over all SMs (mma.sync with the weight rows on the 16-row side, K split over
 *     the warps of a block); its rows go in chunks of 8 (16 when M > 4 min(G, M)), so a group with
 *     more rows reads its weight once per chunk, mostly from L2. Blocks past the last chunk exit at
 *     once. Its result is the same bits on every call.
 *   - H100 / H200 (compute capability 9.0, a build with sm_90a): src/cuda/gemm/grouped_gemm_sm90.cu
 *     (persistent, a TMA producer warp and two wgmma consumer warpgroups, 128x128 or 128x256
 *     tiles) for weights stored [N, K] (b.strides[2] == 1), K a multiple of 8, N a multiple of 8,
 *     a, b and out 16-byte aligned with row strides of whole 16-byte units, and weights that do not
 *     overlap (b.strides[0] >= N * b.strides[1] when W > 1; multiples of 16 bytes), unless the
 *     environment variable IGNIS_GEMM_SM90 is "0".
 *   - Everything else on sm_80+: src/cuda/gemm/grouped_gemm.cu (mma.sync, 128x128 tiles, a cp.async
 *     pipeline), including weights stored [K, N].
 * The CUDA path needs a, b and out 16-byte aligned, K a multiple of 8, N a multiple of 8 and the
 * leading strides multiples of 16 bytes (IGNIS_ERROR_UNSUPPORTED otherwise, naming the
 * parameter). The kernels write the same rows; their sums may differ in the last bits (different
 * accumulation order). */
IGNIS_API ignis_status ignis_grouped_mm(const ignis_tensor *a, const ignis_tensor *b, const ignis_tensor *m_indptr,
                                        const ignis_tensor *weight_indices, ignis_tensor *out, void *stream);

/* Grouped block-scaled fp8 GEMM (DeepSeek-V3's MoE experts; FlashInfer's
 * group_gemm_fp8_nt_groupwise): groups as in ignis_grouped_mm (no weight_indices), a [M, K] fp8
 * e4m3, b [G, N, K] fp8 e4m3 with b.strides[2] == 1, and
 *     out[m, n] = sum_kb a_scale[m, kb] * b_scale[g, n / 128, kb] * sum_{k in block kb} a[m, k] b[g, n, k]
 * each 128-wide K block's partial sum formed in f32 and then scaled (the GPU's "promotion").
 * a_scale: [M, ceil(K/128)], any strides (FlashInfer's "MN" mode is the [KB, M] tensor handed in
 * transposed). b_scale: [G, ceil(N/128), ceil(K/128)], any strides. Both f32, or both u8 holding
 * UE8M0 exponents (2^(e - 127); 255 is NaN). out [M, N] bf16 or f16.
 * CUDA: sm_89 and later (mma.sync e4m3; on H100 / H200 the Hopper kernel, wgmma with the same
 * promotion per 128-wide K block, as ignis_grouped_mm says), K a multiple of 16, N a multiple of 8,
 * 16-byte aligned data and leading strides; small M takes the weight-streaming kernel under the
 * same rule as ignis_grouped_mm (M <= 512, M <= 8 G), with the same per-128 K block scaling. */
IGNIS_API ignis_status ignis_grouped_mm_fp8_blockscale(const ignis_tensor *a, const ignis_tensor *b,
                                                       const ignis_tensor *a_scale, const ignis_tensor *b_scale,
                                                       const ignis_tensor *m_indptr, ignis_tensor *out,
                                                       void *stream);

#ifdef __cplusplus
}
#endif
#endif
