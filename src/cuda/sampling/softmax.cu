/* CUDA backend of ignis_softmax (include/ignis/sampling.h): probs = softmax(logits / T) per row,
 * one block of 1024 threads per row, two passes over the row.
 *
 *   1. Each thread keeps a running (max, sum) of its elements, rescaling the sum when the max
 *      grows (online softmax), and its first largest element; the block combines the threads'
 *      pairs in a fixed order. exp is ignis_exp_nonpos (core/philox.h), as on the CPU backend.
 *   2. p = exp((x - max) / T) * (1 / sum), written in f32 or the logits' dtype.
 * A row whose temperature is NaN or <= 0 becomes one-hot at its first largest logit; a row with
 * nothing above -inf becomes zeros. The sum is f32 here, f64 on the CPU: results agree to
 * rounding. */
#include "cuda/sampling/sampling_common.cuh"

namespace {
using namespace ignis_sampling;

constexpr int THREADS = 1024;
constexpr int UNROLL = 4;

/* (x - max) / T through the reciprocal, exactly 0 at the max itself (so T -> 0 stays finite). */
__device__ __forceinline__ float scaled(float x, float x_max, float inv_t) {
  return x == x_max ? 0.0f : IGNIS_FMUL(x - x_max, inv_t);
}

template <typename T, typename O>
__global__ void __launch_bounds__(THREADS, 1) softmax_rows(ignis_softmax_params p, bool vec, bool out_vec) {
  __shared__ reduce_scratch red;
  __shared__ float part_sum[THREADS / 32];
  ignis_pdl_wait();
  const int64_t row = blockIdx.x, n = p.vocab_size;
  const T *in = static_cast<const T *>(p.logits) + row * p.logits_row_stride;
  O *out = static_cast<O *>(p.probs) + row * p.probs_row_stride;
  const float t = p.temperature_arr ? p.temperature_arr[row] : p.temperature_val;
  const bool one_hot = !(t > 0.0f);
  const float inv_t = one_hot ? 1.0f : 1.0f / t;
  const int64_t chunks = (n + 3) / 4;

  float m = -INFINITY, s = 0.0f;
  int64_t arg = -1;
  for (int64_t base = threadIdx.x; base < chunks; base += (int64_t)UNROLL * blockDim.x) {
    float v[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      load_chunk(in, base + (int64_t)u * blockDim.x, n, vec, v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t i = (base + (int64_t)u * blockDim.x) * 4 + j;
        if (i >= n)
          continue;
        const float x = sanitize_logit(v[u][j]);
        if (x > m) {
          s = IGNIS_FMUL(s, ignis_exp_nonpos(scaled(m, x, inv_t))) + 1.0f;
          m = x;
          arg = i;
        } else if (x > -INFINITY) {
          s += ignis_exp_nonpos(scaled(x, m, inv_t));
        }
      }
  }
  /* Combine: the block max, each thread's sum rescaled to it, summed in warp then warp order. */
  const float row_max = block_max(m, red);
  const int64_t row_arg = block_argmax(m, m == row_max ? arg : -1, red);
  float mine = m == -INFINITY ? 0.0f : IGNIS_FMUL(s, ignis_exp_nonpos(scaled(m, row_max, inv_t)));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    mine += __shfl_xor_sync(0xffffffffu, mine, o);
  if ((threadIdx.x & 31) == 0)
    part_sum[threadIdx.x >> 5] = mine;
  __syncthreads();
  float sum = 0.0f;
  for (int w = 0; w < (int)(blockDim.x >> 5); ++w)
    sum += part_sum[w];
  const float inv_sum = sum > 0.0f ? 1.0f / sum : 0.0f;

  for (int64_t base = threadIdx.x; base < chunks; base += (int64_t)UNROLL * blockDim.x) {
    float v[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      load_chunk(in, base + (int64_t)u * blockDim.x, n, vec, v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t c = base + (int64_t)u * blockDim.x;
      if (c * 4 >= n)
        continue;
      float o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float x = sanitize_logit(v[u][j]);
        if (row_max == -INFINITY)
          o[j] = 0.0f;
        else if (one_hot)
          o[j] = c * 4 + j == row_arg ? 1.0f : 0.0f;
        else
          o[j] = IGNIS_FMUL(ignis_exp_nonpos(scaled(x, row_max, inv_t)), inv_sum);
      }
      const int64_t i0 = c * 4;
      if (out_vec && i0 + 4 <= n) {
        if constexpr (sizeof(O) == 4)
          *reinterpret_cast<float4 *>(out + i0) = make_float4(o[0], o[1], o[2], o[3]);
        else
          *reinterpret_cast<uint2 *>(out + i0) = make_uint2(ignis_pack_word<O>(o), ignis_pack_word<O>(o + 2));
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (i0 + j < n)
            out[i0 + j] = ignis_from_float<O>(o[j]);
      }
    }
  }
}

template <typename T, typename O>
static cudaError_t launch(const ignis_softmax_params *p, cudaStream_t stream) {
  const bool vec = rows_chunk_aligned(p->logits, p->logits_row_stride, p->num_rows, sizeof(T));
  const bool out_vec = rows_chunk_aligned(p->probs, p->probs_row_stride, p->num_rows, sizeof(O));
  return ignis_launch(softmax_rows<T, O>, dim3((unsigned)p->num_rows), dim3(THREADS), 0, stream, *p, vec,
                      out_vec);
}

} // namespace

extern "C" ignis_status ignis_cuda_softmax(const ignis_softmax_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool f32_out = params->out_dtype == IGNIS_F32;
  return launch_rows("ignis_cuda_softmax", params->num_rows, params->dtype, [&](auto t) {
    typedef decltype(t) T;
    return f32_out ? launch<T, float>(params, s) : launch<T, T>(params, s);
  });
}
