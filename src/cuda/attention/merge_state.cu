/* CUDA backend of the attention-state merges (include/ignis/merge_state.h): merge_state,
 * merge_state_in_place and merge_states, one kernel for all three, with the results of
 * src/cpu/merge_state.c.
 *
 * Each (seq, head) row is handled by a slot of G threads (G the power of two <= 32 covering the
 * row's chunks; a block of 128 threads holds 128 / G slots). A thread owns chunks of VEC elements
 * (a 16-byte vector when head_dim and every pointer and stride allow it, checked on the host;
 * single elements otherwise) and walks the states once by the one LSE merge of the attention
 * kernels (lse_merge.cuh: a running maximum m of the base-2 LSEs, stable for any LSE). Empty
 * states (-inf) are skipped unread; a row with no non-empty state is written as v = 0, s = -inf.
 * Lane 0 of the slot writes s.
 * Launched with ignis_launch; ignis_pdl_wait() precedes the first global access. */
#include <math_constants.h>

#include "cuda/attention/lse_merge.cuh"
#include "cuda/common/cuda_common.cuh"

enum { MERGE_BLOCK_THREADS = 128, MAX_GRID_BLOCKS = 1 << 20 };

struct merge_row {
  int64_t seq, head;
};

__device__ __forceinline__ const float *state_s(const ignis_merge_state_params &p, int64_t i, merge_row r) {
  if (p.pair && i == 1)
    return p.s_b + r.seq * p.s_b_layout.stride_seq + r.head * p.s_b_layout.stride_head;
  return p.s_a + i * p.s_a_layout.stride_state + r.seq * p.s_a_layout.stride_seq + r.head * p.s_a_layout.stride_head;
}

template <typename T>
__device__ __forceinline__ const T *state_v(const ignis_merge_state_params &p, int64_t i, merge_row r) {
  if (p.pair && i == 1)
    return static_cast<const T *>(p.v_b) + r.seq * p.v_b_layout.stride_seq + r.head * p.v_b_layout.stride_head;
  return static_cast<const T *>(p.v_a) + i * p.v_a_layout.stride_state + r.seq * p.v_a_layout.stride_seq +
         r.head * p.v_a_layout.stride_head;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(MERGE_BLOCK_THREADS) merge_state_kernel(ignis_merge_state_params p) {
  const int64_t rows = p.seq_len * p.num_heads;
  const int chunks = (int)(p.head_dim / VEC);
  const float scale = p.log2_scale;
  ignis_pdl_wait();
  for (int64_t row = (int64_t)blockIdx.x * blockDim.y + threadIdx.y; row < rows;
       row += (int64_t)gridDim.x * blockDim.y) {
    merge_row r;
    r.seq = row / p.num_heads;
    r.head = row - r.seq * p.num_heads;
    if (p.mask && !p.mask[r.seq * p.mask_stride])
      continue;
    float m = -CUDART_INF_F, d = 0.0f, lse2 = -CUDART_INF_F;
    for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
      float acc[VEC];
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        acc[k] = 0.0f;
      m = -CUDART_INF_F;
      d = 0.0f;
      for (int64_t i = 0; i < p.num_states; ++i) {
        const float t = *state_s(p, i, r) * scale;
        if (t == -CUDART_INF_F)
          continue;
        float x[VEC];
        ignis_load_floats<IGNIS_CACHE_STREAM>(state_v<T>(p, i, r) + (int64_t)c * VEC, x);
        lse_merge_fold(t, x, m, d, acc);
      }
      lse2 = lse_merge_finish(acc, m, d, -CUDART_INF_F);
      T *out = static_cast<T *>(p.v_out) + r.seq * p.v_out_layout.stride_seq + r.head * p.v_out_layout.stride_head;
      ignis_store_floats(out + (int64_t)c * VEC, acc);
    }
    if (p.s_out && threadIdx.x == 0) {
      if (chunks == 0) { /* no values: the LSE alone */
        const float no_value[1] = {0.0f};
        float unused[1] = {0.0f};
        for (int64_t i = 0; i < p.num_states; ++i) {
          const float t = *state_s(p, i, r) * scale;
          if (t != -CUDART_INF_F)
            lse_merge_fold(t, no_value, m, d, unused);
        }
        lse2 = lse_merge_finish(unused, m, d, -CUDART_INF_F);
      }
      p.s_out[r.seq * p.s_out_layout.stride_seq + r.head * p.s_out_layout.stride_head] = lse2 / scale;
    }
  }
  ignis_pdl_launch_dependents();
}

static bool layout_aligned16(const void *ptr, const ignis_state_layout &l, int64_t elem, bool states) {
  return (uintptr_t)ptr % 16 == 0 && l.stride_seq * elem % 16 == 0 && l.stride_head * elem % 16 == 0 &&
         (!states || l.stride_state * elem % 16 == 0);
}

template <typename T, int VEC> static ignis_status launch(const ignis_merge_state_params &p, cudaStream_t stream) {
  const int64_t chunks = p.head_dim / VEC;
  int group = 1;
  while (group < 32 && group < chunks)
    group <<= 1;
  const int64_t rows_per_block = MERGE_BLOCK_THREADS / group;
  const int64_t rows = p.seq_len * p.num_heads;
  int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks > MAX_GRID_BLOCKS)
    blocks = MAX_GRID_BLOCKS;
  IGNIS_CUDA_CHECK(ignis_launch(merge_state_kernel<T, VEC>, dim3((unsigned)blocks),
                                dim3(group, (unsigned)rows_per_block), 0, stream, p));
  return ignis_check_launch("merge_state");
}

template <typename T> static ignis_status launch_dtype(const ignis_merge_state_params &p, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  const int64_t elem = sizeof(T);
  const bool vector = p.head_dim % VEC == 0 && layout_aligned16(p.v_a, p.v_a_layout, elem, !p.pair) &&
                      (!p.pair || layout_aligned16(p.v_b, p.v_b_layout, elem, false)) &&
                      layout_aligned16(p.v_out, p.v_out_layout, elem, false);
  return vector ? launch<T, VEC>(p, stream) : launch<T, 1>(p, stream);
}

ignis_status ignis_cuda_merge_state(const ignis_merge_state_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (params->dtype) {
  case IGNIS_F16:
    return launch_dtype<__half>(*params, s);
  case IGNIS_BF16:
    return launch_dtype<__nv_bfloat16>(*params, s);
  default:
    return launch_dtype<float>(*params, s);
  }
}
