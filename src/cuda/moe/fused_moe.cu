/* CUDA backend of the fused MoE op (include/ignis/moe.h): the pipeline of the header, six steps
 * on the stream, over the workspace the front end carved (core/moe_params.h). The host never reads
 * the routing: every grid below depends only on T, top_k and the sizes, so a CUDA graph captured
 * at T replays for any routing.
 *
 *   1. count (grid: one block per tile of expanded rows r = t * top_k + j): each block reads its
 *      rows' local experts into shared memory, counts them per expert (shared atomics: the counts
 *      do not depend on their order) and gives each row its rank among the tile's earlier rows of
 *      the same expert (a scan of the shared ids before it: stable, (token, slot) order). One tile
 *      (R <= 1024) also scans the counts into m_indptr itself; several write their counts and
 *      1b. scan (one block) turns them into m_indptr and, per tile and expert, the tile's first
 *      permuted row.
 *   2. gather (one block per expanded row): p = tile base + rank, the maps row_to_perm / perm_row,
 *      and the token's input row copied into a1[p] in 16-byte pieces (fp8 block with a 16-bit
 *      input: quantized on the way, 16 threads per 1x128 group, absmax by shuffles).
 *   3. GEMM 1: ignis_cuda_grouped_gemm (src/cuda/gemm/), whichever kernel it picks for the shape.
 *   4. activation (one block per permuted row, rows past m_indptr[E] exit): dequant, bias and the
 *      activation in f32 on chunks of 8 values, stored in the work dtype or as fp8 (per-tensor:
 *      times fc2_input_scale; block: requantized per 1x128 group as in step 2).
 *   5. GEMM 2: ignis_cuda_grouped_gemm.
 *   6. finalize (a block per token and 1024 columns): the token's slots (permuted row, weight,
 *      dequant) in shared memory, then 8 columns per thread summed over the slots in order, plus
 *      the old out when accumulating; deterministic, no atomics.
 * Steps 1, 1b, 2, 4 and 6 are launched with ignis_launch (PDL on sm_90): each waits for its
 * predecessor (ignis_pdl_wait) before touching global memory. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "core/moe_math.h"
#include "core/moe_params.h"
#include "core/validate.h"
#include "cuda/common/cuda_common.cuh"
#include "cuda/cuda_backend.h"

namespace {

constexpr int ROW_THREADS = 128;   /* gather and activation: one row per block */
constexpr int FINAL_THREADS = 128; /* finalize: 8 columns per thread */
constexpr int SCAN_THREADS = 1024;
constexpr int MAX_EXPERTS = 8192; /* shared-memory counts of step 1 */

using Params = ignis_fused_moe_params;

__device__ __forceinline__ int64_t elem_size(ignis_dtype dtype) {
  return dtype == IGNIS_F32 || dtype == IGNIS_I32    ? 4
         : dtype == IGNIS_F16 || dtype == IGNIS_BF16 ? 2
         : dtype == IGNIS_I64                        ? 8
                                                     : 1;
}

__device__ __forceinline__ int local_expert(const Params &p, int64_t r) {
  const int64_t t = r / p.top_k, j = r - t * p.top_k;
  const int64_t id =
      ignis_moe_raw_id(p.ids, p.ids_dtype == IGNIS_I64, p.packed, t * p.ids_stride_t + j * p.ids_stride_k);
  return ignis_moe_local(id, p.expert_offset, p.experts);
}

/* Exclusive prefix sum of vals[0..n) in shared memory, in place, over the whole block; returns
 * the total to every thread. s_warp: 33 ints of shared scratch. */
__device__ int block_exclusive_scan(int *vals, int n, int *s_warp) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, warps = (blockDim.x + 31) >> 5;
  const int per = (n + blockDim.x - 1) / blockDim.x, begin = min(tid * per, n), end = min(begin + per, n);
  int sum = 0;
  for (int i = begin; i < end; ++i)
    sum += vals[i];
  const int incl = ignis_warp_inclusive_sum(sum);
  if (lane == 31)
    s_warp[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int w = lane < warps ? s_warp[lane] : 0, winc = ignis_warp_inclusive_sum(w);
    if (lane < warps)
      s_warp[lane] = winc - w;
    if (lane == 31)
      s_warp[32] = winc;
  }
  __syncthreads();
  int run = s_warp[warp] + incl - sum;
  for (int i = begin; i < end; ++i) {
    const int v = vals[i];
    vals[i] = run;
    run += v;
  }
  const int total = s_warp[32];
  __syncthreads();
  return total;
}

/* ---- step 1: counts and ranks per tile (and the scan when there is one tile) ---------------- */
__global__ void __launch_bounds__(1024) count_kernel(const Params p) {
  extern __shared__ int4 smem4[];
  int *s_exp = reinterpret_cast<int *>(smem4), *s_hist = s_exp + p.tile_rows;
  __shared__ int s_warp[33];
  const int tid = threadIdx.x, experts = (int)p.experts;
  const int64_t r = (int64_t)blockIdx.x * p.tile_rows + tid;
  ignis_pdl_wait();
  const int e = r < p.rows ? local_expert(p, r) : -1;
  s_exp[tid] = e;
  for (int i = tid; i < experts; i += blockDim.x)
    s_hist[i] = 0;
  __syncthreads();
  if (e >= 0) {
    atomicAdd(&s_hist[e], 1);
    int rank = 0, j = 0;
    const int4 *q = reinterpret_cast<const int4 *>(s_exp);
    for (; j + 4 <= tid; j += 4) {
      const int4 v = q[j >> 2];
      rank += (v.x == e) + (v.y == e) + (v.z == e) + (v.w == e);
    }
    for (; j < tid; ++j)
      rank += s_exp[j] == e;
    p.rank[r] = rank;
  }
  if (blockIdx.x == 0 && tid == 0)
    p.consts[0] = 1.0f;
  __syncthreads();
  if (gridDim.x == 1) {
    const int total = block_exclusive_scan(s_hist, experts, s_warp);
    for (int i = tid; i < experts; i += blockDim.x) {
      p.m_indptr[i] = s_hist[i];
      p.tile_counts[i] = s_hist[i];
    }
    if (tid == 0)
      p.m_indptr[experts] = total;
  } else {
    for (int i = tid; i < experts; i += blockDim.x)
      p.tile_counts[(int64_t)blockIdx.x * experts + i] = s_hist[i];
  }
  ignis_pdl_launch_dependents();
}

/* ---- step 1b: m_indptr and each tile's first row per expert ----------------------------------- */
__global__ void __launch_bounds__(SCAN_THREADS) scan_kernel(const Params p) {
  extern __shared__ int4 smem4[];
  int *s_total = reinterpret_cast<int *>(smem4);
  __shared__ int s_warp[33];
  const int experts = (int)p.experts, tiles = (int)p.tiles;
  ignis_pdl_wait();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int sum = 0;
    for (int t = 0; t < tiles; ++t)
      sum += p.tile_counts[(int64_t)t * experts + e];
    s_total[e] = sum;
  }
  __syncthreads();
  const int total = block_exclusive_scan(s_total, experts, s_warp);
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int run = s_total[e];
    p.m_indptr[e] = run;
    for (int t = 0; t < tiles; ++t) {
      const int64_t i = (int64_t)t * experts + e;
      const int c = p.tile_counts[i];
      p.tile_counts[i] = run;
      run += c;
    }
  }
  if (threadIdx.x == 0)
    p.m_indptr[experts] = total;
  ignis_pdl_launch_dependents();
}

/* Eight fp8 e4m3 codes of v * inv (round to nearest even, saturating). */
__device__ __forceinline__ uint2 fp8x8(const float (&v)[8], float inv) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] =
        __nv_cvt_float2_to_fp8x2(make_float2(v[2 * i] * inv, v[2 * i + 1] * inv), __NV_SATFINITE, __NV_E4M3);
  return make_uint2(w[0] | w[1] << 16, w[2] | w[3] << 16);
}

/* The absmax of a 1x128 group held by 16 consecutive lanes (8 values each), on all of them. */
__device__ __forceinline__ float group_absmax(const float (&v)[8], bool valid) {
  float m = 0.0f;
  if (valid)
#pragma unroll
    for (int i = 0; i < 8; ++i)
      m = ignis_quant_absmax_fold(m, v[i]);
#pragma unroll
  for (int o = 8; o > 0; o >>= 1)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  return m;
}

/* ---- step 2: positions, maps, and the rows of a1 ------------------------------------------------ */
/* QUANT: the 16-bit input In is quantized per 1x128 group into fp8 a1 (fp8 block mode). */
template <typename In, bool QUANT>
__global__ void __launch_bounds__(ROW_THREADS) gather_kernel(const Params p) {
  const int64_t r = blockIdx.x;
  const int tid = threadIdx.x;
  ignis_pdl_wait();
  const int e = local_expert(p, r);
  if (e < 0) {
    if (tid == 0)
      p.row_to_perm[r] = -1;
    return;
  }
  const int64_t tile = r / p.tile_rows;
  const int32_t pos = p.tile_counts[tile * p.experts + e] + p.rank[r];
  if (tid == 0) {
    p.row_to_perm[r] = pos;
    p.perm_row[pos] = (int32_t)r;
  }
  const int64_t t = r / p.top_k, hidden = p.hidden, groups = (hidden + IGNIS_MOE_GROUP - 1) / IGNIS_MOE_GROUP;
  if constexpr (QUANT) {
    const In *src = static_cast<const In *>(p.input) + t * p.input_row_stride;
    unsigned char *dst = static_cast<unsigned char *>(p.a1) + (int64_t)pos * hidden;
    for (int64_t base = 0; base < hidden; base += 8 * ROW_THREADS) { /* uniform over the block */
      const int64_t h0 = base + 8 * tid;
      const bool valid = h0 < hidden;
      float v[8];
      if (valid)
        ignis_load_floats<IGNIS_CACHE_READ_ONLY, In, 8>(src + h0, v);
      const float s = ignis_moe_group_scale(group_absmax(v, valid));
      if (valid) {
        *reinterpret_cast<uint2 *>(dst + h0) = fp8x8(v, 1.0f / s);
        if ((h0 & (IGNIS_MOE_GROUP - 1)) == 0)
          p.a1_scale[(int64_t)pos * groups + h0 / IGNIS_MOE_GROUP] = s;
      }
    }
  } else {
    const int64_t es = elem_size(p.input_dtype), vecs = hidden * es / 16;
    const uint4 *src =
        reinterpret_cast<const uint4 *>(static_cast<const char *>(p.input) + t * p.input_row_stride * es);
    uint4 *dst = reinterpret_cast<uint4 *>(static_cast<char *>(p.a1) + (int64_t)pos * hidden * es);
    for (int64_t i = tid; i < vecs; i += ROW_THREADS)
      dst[i] = __ldg(src + i);
    if (p.input_scale)
      for (int64_t g = tid; g < groups; g += ROW_THREADS)
        p.a1_scale[(int64_t)pos * groups + g] =
            p.input_scale[t * p.input_scale_stride_t + g * p.input_scale_stride_k];
  }
  ignis_pdl_launch_dependents();
}

__device__ __forceinline__ float per_expert(const float *values, int64_t stride, int e, float fallback) {
  return values ? values[e * stride] : fallback;
}

__device__ __forceinline__ float load_any(const void *base, ignis_dtype dtype, int64_t i) {
  if (dtype == IGNIS_F32)
    return static_cast<const float *>(base)[i];
  if (dtype == IGNIS_F16)
    return __half2float(static_cast<const __half *>(base)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[i]);
}

/* ---- step 4: dequant, bias, activation, and a2's rounding --------------------------------------- */
template <typename W, int QUANT>
__global__ void __launch_bounds__(ROW_THREADS) activation_kernel(const Params p) {
  const int64_t pos = blockIdx.x;
  const int tid = threadIdx.x;
  ignis_pdl_wait();
  if (pos >= p.m_indptr[p.experts])
    return;
  const int e = local_expert(p, p.perm_row[pos]);
  const bool per_tensor = QUANT == IGNIS_MOE_QUANT_FP8_PER_TENSOR;
  const float dq = per_tensor ? p.fc1_scale[e * p.fc1_scale_strides[0]] : 1.0f;
  const float dq_gate = per_tensor ? per_expert(p.fc1_gate_scale, p.fc1_gate_scale_stride, e, dq) : 1.0f;
  const float q_scale = per_tensor ? per_expert(p.fc2_input_scale, p.fc2_input_scale_stride, e, 1.0f) : 1.0f;
  ignis_moe_act_args args;
  args.alpha = per_expert(p.act_alpha, p.act_alpha_stride, e, 1.0f);
  args.beta = per_expert(p.act_beta, p.act_beta_stride, e, 0.0f);
  args.limit = per_expert(p.act_limit, p.act_limit_stride, e,
                          p.activation == IGNIS_MOE_ACT_SWIGLU_STEP ? 7.0f : __int_as_float(0x7f800000));
  const int64_t inter = p.inter, groups = (inter + IGNIS_MOE_GROUP - 1) / IGNIS_MOE_GROUP;
  const int64_t gate_off = p.gate_first ? 0 : inter, up_off = p.gate_first ? inter : 0;
  const W *h = static_cast<const W *>(p.h) + pos * p.fc1_rows;
  const void *bias = p.fc1_bias ? static_cast<const char *>(p.fc1_bias) +
                                      e * p.fc1_bias_stride_e * elem_size(p.fc1_bias_dtype)
                                : nullptr;
  for (int64_t base = 0; base < inter; base += 8 * ROW_THREADS) { /* uniform over the block */
    const int64_t i0 = base + 8 * tid;
    const bool valid = i0 < inter;
    float v[8];
    if (valid) {
      if (p.gated) {
        float g[8], u[8];
        ignis_load_floats<IGNIS_CACHE_STREAM, W, 8>(h + gate_off + i0, g);
        ignis_load_floats<IGNIS_CACHE_STREAM, W, 8>(h + up_off + i0, u);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          float gate = g[i] * dq_gate, up = u[i] * dq;
          if (bias) {
            gate += load_any(bias, p.fc1_bias_dtype, gate_off + i0 + i);
            up += load_any(bias, p.fc1_bias_dtype, up_off + i0 + i);
          }
          v[i] = ignis_moe_gated(p.activation, gate, up, args);
        }
      } else {
        float x[8];
        ignis_load_floats<IGNIS_CACHE_STREAM, W, 8>(h + i0, x);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          float xi = x[i] * dq;
          if (bias)
            xi += load_any(bias, p.fc1_bias_dtype, i0 + i);
          v[i] = ignis_moe_plain(p.activation, xi);
        }
      }
    }
    if constexpr (QUANT == IGNIS_MOE_QUANT_FP8_BLOCK) {
      const float s = ignis_moe_group_scale(group_absmax(v, valid));
      if (valid) {
        *reinterpret_cast<uint2 *>(static_cast<unsigned char *>(p.a2) + pos * inter + i0) =
            fp8x8(v, 1.0f / s);
        if ((i0 & (IGNIS_MOE_GROUP - 1)) == 0)
          p.a2_scale[pos * groups + i0 / IGNIS_MOE_GROUP] = s;
      }
    } else if constexpr (QUANT == IGNIS_MOE_QUANT_FP8_PER_TENSOR) {
      if (valid)
        *reinterpret_cast<uint2 *>(static_cast<unsigned char *>(p.a2) + pos * inter + i0) = fp8x8(v, q_scale);
    } else {
      if (valid)
        ignis_store_floats<W, 8>(static_cast<W *>(p.a2) + pos * inter + i0, v);
    }
  }
  ignis_pdl_launch_dependents();
}

/* ---- step 6: the weighted sum back in token order ------------------------------------------------ */
template <typename W, typename Out>
__global__ void __launch_bounds__(FINAL_THREADS) finalize_kernel(const Params p) {
  extern __shared__ int4 smem4[];
  const int k = (int)p.top_k;
  int *s_pos = reinterpret_cast<int *>(smem4), *s_expert = s_pos + k;
  float *s_weight = reinterpret_cast<float *>(s_expert + k), *s_dq = s_weight + k;
  const int64_t t = blockIdx.x;
  ignis_pdl_wait();
  for (int j = threadIdx.x; j < k; j += FINAL_THREADS) {
    const int64_t r = t * k + j;
    const int pos = p.row_to_perm[r];
    s_pos[j] = pos;
    if (pos >= 0) {
      const int e = local_expert(p, r);
      s_expert[j] = e;
      s_weight[j] = ignis_moe_weight(p.weights, p.weights_dtype == IGNIS_BF16, p.ids,
                                     t * p.weights_stride_t + j * p.weights_stride_k,
                                     t * p.ids_stride_t + j * p.ids_stride_k);
      s_dq[j] = p.quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR ? p.fc2_scale[e * p.fc2_scale_strides[0]] : 1.0f;
    }
  }
  __syncthreads();
  const int64_t c0 = ((int64_t)blockIdx.y * FINAL_THREADS + threadIdx.x) * 8;
  if (c0 < p.hidden) {
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < k; ++j) {
      const int pos = s_pos[j];
      if (pos < 0)
        continue;
      float y[8];
      ignis_load_floats<IGNIS_CACHE_STREAM, W, 8>(static_cast<const W *>(p.y) + (int64_t)pos * p.hidden + c0,
                                                  y);
      const float w = s_weight[j], dq = s_dq[j];
      if (p.add_fc2_bias) {
        const void *bias = static_cast<const char *>(p.fc2_bias) +
                           s_expert[j] * p.fc2_bias_stride_e * elem_size(p.fc2_bias_dtype);
#pragma unroll
        for (int i = 0; i < 8; ++i)
          acc[i] += w * (y[i] * dq + load_any(bias, p.fc2_bias_dtype, c0 + i));
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i)
          acc[i] += w * (y[i] * dq);
      }
    }
    Out *out = static_cast<Out *>(p.out) + t * p.out_row_stride + c0;
    if (p.accumulate) {
      float old[8];
      ignis_load_floats<IGNIS_CACHE_DEFAULT, Out, 8>(out, old);
#pragma unroll
      for (int i = 0; i < 8; ++i)
        acc[i] += old[i];
    }
    ignis_store_floats<Out, 8>(out, acc);
  }
  ignis_pdl_launch_dependents();
}

bool aligned16(const void *ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0;
}

/* The CUDA path's conditions (moe.h), checked before anything is launched. */
ignis_status check_shapes(const char *fn, const Params &p, int32_t device) {
  const bool fp8 = p.quant != IGNIS_MOE_QUANT_NONE;
  const int cc = ignis_compute_capability(device);
  if (cc < (fp8 ? 89 : 80))
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: the CUDA path needs sm_%d or later; cuda:%d is sm_%d", fn, fp8 ? 89 : 80,
                           (int)device, cc);
  const int64_t multiple = fp8 ? 16 : 8;
  if (p.hidden % multiple || p.inter % multiple)
    return ignis_set_error(
        IGNIS_ERROR_UNSUPPORTED,
        "%s: H=%lld and I=%lld must be multiples of %lld on CUDA (the grouped GEMM's K and N)", fn,
        (long long)p.hidden, (long long)p.inter, (long long)multiple);
  if (p.experts > MAX_EXPERTS)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: %lld local experts but the CUDA path takes at most %d", fn,
                           (long long)p.experts, MAX_EXPERTS);
  const int64_t in_es = ignis_dtype_size(p.input_dtype), w_es = ignis_dtype_size(p.weight_dtype);
  const int64_t out_es = ignis_dtype_size(p.out_dtype);
  if (!aligned16(p.input) || (p.input_row_stride * in_es) % 16)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: input.data and input.strides[0] must keep rows 16-byte "
                           "aligned on CUDA",
                           fn);
  if (!aligned16(p.out) || (p.out_row_stride * out_es) % 16)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: out.data and out.strides[0] must keep rows 16-byte aligned "
                           "on CUDA",
                           fn);
  if (!aligned16(p.fc1) || (p.fc1_stride_e * w_es) % 16 || (p.fc1_stride_n * w_es) % 16 ||
      !aligned16(p.fc2) || (p.fc2_stride_e * w_es) % 16 || (p.fc2_stride_n * w_es) % 16)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: weights.fc1 / fc2 data and strides must keep rows 16-byte "
                           "aligned on CUDA",
                           fn);
  if (p.tokens > INT32_MAX || (p.hidden + 8 * FINAL_THREADS - 1) / (8 * FINAL_THREADS) > 65535)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: T=%lld or H=%lld exceeds one launch", fn,
                           (long long)p.tokens, (long long)p.hidden);
  return IGNIS_OK;
}

ignis_status launched(cudaError_t err, const char *what) {
  if (err != cudaSuccess)
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis_fused_moe: %s launch failed: %s", what,
                           cudaGetErrorString(err));
  return IGNIS_OK;
}

template <typename W> ignis_status launch_activation(const Params &p, cudaStream_t s) {
  const dim3 grid((unsigned)p.rows), block(ROW_THREADS);
  if (p.quant == IGNIS_MOE_QUANT_FP8_BLOCK)
    return launched(ignis_launch(activation_kernel<W, IGNIS_MOE_QUANT_FP8_BLOCK>, grid, block, 0, s, p),
                    "activation");
  if (p.quant == IGNIS_MOE_QUANT_FP8_PER_TENSOR)
    return launched(ignis_launch(activation_kernel<W, IGNIS_MOE_QUANT_FP8_PER_TENSOR>, grid, block, 0, s, p),
                    "activation");
  return launched(ignis_launch(activation_kernel<W, IGNIS_MOE_QUANT_NONE>, grid, block, 0, s, p),
                  "activation");
}

template <typename W> ignis_status launch_finalize(const Params &p, cudaStream_t s) {
  const dim3 grid((unsigned)p.tokens, (unsigned)((p.hidden + 8 * FINAL_THREADS - 1) / (8 * FINAL_THREADS)));
  const size_t smem = (size_t)p.top_k * 16;
  if (p.out_dtype == IGNIS_F32)
    return launched(ignis_launch(finalize_kernel<W, float>, grid, dim3(FINAL_THREADS), smem, s, p),
                    "finalize");
  if (p.out_dtype == IGNIS_F16)
    return launched(ignis_launch(finalize_kernel<W, __half>, grid, dim3(FINAL_THREADS), smem, s, p),
                    "finalize");
  return launched(ignis_launch(finalize_kernel<W, __nv_bfloat16>, grid, dim3(FINAL_THREADS), smem, s, p),
                  "finalize");
}

ignis_status launch_gather(const Params &p, cudaStream_t s) {
  const dim3 grid((unsigned)p.rows), block(ROW_THREADS);
  const bool quant = p.quant == IGNIS_MOE_QUANT_FP8_BLOCK && p.input_dtype != IGNIS_FP8_E4M3;
  if (quant && p.input_dtype == IGNIS_F16)
    return launched(ignis_launch(gather_kernel<__half, true>, grid, block, 0, s, p), "gather");
  if (quant)
    return launched(ignis_launch(gather_kernel<__nv_bfloat16, true>, grid, block, 0, s, p), "gather");
  return launched(ignis_launch(gather_kernel<__nv_bfloat16, false>, grid, block, 0, s, p), "gather");
}

} // namespace

extern "C" ignis_status ignis_cuda_fused_moe(const ignis_fused_moe_params *params, int32_t device,
                                             void *stream) {
  const char *fn = "ignis_fused_moe";
  const Params &p = *params;
  IGNIS_CUDA_ON_DEVICE(device);
  IGNIS_TRY(check_shapes(fn, p, device));
  cudaStream_t s = static_cast<cudaStream_t>(stream);

  const size_t count_smem = (size_t)(p.tile_rows + p.experts) * sizeof(int);
  cudaError_t err = ignis_allow_dynamic_smem<count_kernel>(count_smem);
  if (err == cudaSuccess)
    err = ignis_launch(count_kernel, dim3((unsigned)p.tiles), dim3((unsigned)p.tile_rows), count_smem, s, p);
  IGNIS_TRY(launched(err, "count"));
  if (p.tiles > 1) {
    const size_t scan_smem = (size_t)p.experts * sizeof(int);
    err = ignis_allow_dynamic_smem<scan_kernel>(scan_smem);
    if (err == cudaSuccess)
      err = ignis_launch(scan_kernel, dim3(1), dim3(SCAN_THREADS), scan_smem, s, p);
    IGNIS_TRY(launched(err, "scan"));
  }
  IGNIS_TRY(launch_gather(p, s));

  ignis_grouped_gemm_params g;
  ignis_moe_gemm_params(&p, 0, &g);
  IGNIS_TRY(ignis_cuda_grouped_gemm(&g, device, stream));
  IGNIS_TRY(p.work_dtype == IGNIS_F16 ? launch_activation<__half>(p, s)
                                      : launch_activation<__nv_bfloat16>(p, s));
  ignis_moe_gemm_params(&p, 1, &g);
  IGNIS_TRY(ignis_cuda_grouped_gemm(&g, device, stream));
  return p.work_dtype == IGNIS_F16 ? launch_finalize<__half>(p, s) : launch_finalize<__nv_bfloat16>(p, s);
}
