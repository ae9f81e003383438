/* CUDA backend of ignis_chain_speculative_sampling (include/ignis/sampling.h), with the rule and
 * the random numbers of src/cpu/sampling.c. One block of 1024 threads per request:
 *   1. the n acceptance tests in parallel (u_i * q < p, u_i from Philox draw 0, word i of the
 *      request's counter), the first rejection by a shared atomicMin and the accepted count by a
 *      shared atomicAdd (both order-independent);
 *   2. the accepted draft tokens and the -1 padding;
 *   3. one more token by the exponential race (draw 1) over max(0, target - draft) at the rejected
 *      position, in the same pass that learns whether that residual has any mass; if it has none,
 *      or every draft token was accepted, a second race over the target row.
 * Passes over vocabulary rows: 1 (2 when the residual is empty); the draft tokens' entries are
 * read individually. */
#include "cuda/sampling/sampling_common.cuh"

namespace {
using namespace ignis_sampling;

constexpr int THREADS = 1024;
constexpr int UNROLL = 2;

/* Race over the row's weights: target (minus draft when draft != nullptr, clamped at 0). Returns
 * the winner (-1 if no positive weight). */
template <typename T>
__device__ int64_t race_rows(const T *target, const T *draft, int64_t n, bool vec, uint64_t seed,
                             uint64_t offset, int64_t b, reduce_scratch &red) {
  float best_score = 0.0f;
  int64_t best = -1;
  const int64_t chunks = (n + 3) / 4;
  for (int64_t base = threadIdx.x; base < chunks; base += (int64_t)UNROLL * blockDim.x) {
    float t[UNROLL][4], q[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      load_chunk(target, base + (int64_t)u * blockDim.x, n, vec, t[u]);
      if (draft)
        load_chunk(draft, base + (int64_t)u * blockDim.x, n, vec, q[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t c = base + (int64_t)u * blockDim.x;
      float w[4];
      bool any = false;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        w[j] = sanitize_prob(t[u][j]);
        if (draft) {
          const float r = w[j] - sanitize_prob(q[u][j]);
          w[j] = r > 0.0f ? r : 0.0f;
        }
        if (c * 4 + j >= n)
          w[j] = 0.0f;
        any |= w[j] > 0.0f;
      }
      if (!any)
        continue;
      const ignis_philox_out words = ignis_philox_group(seed, offset, 1, (uint64_t)b, (uint64_t)c);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (w[j] > 0.0f) {
          const float score = w[j] / ignis_neg_log_uniform(words.w[j]);
          if (best < 0 || score > best_score) {
            best_score = score;
            best = c * 4 + j;
          }
        }
    }
  }
  return block_argmax(best_score, best, red);
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1) speculative_rows(ignis_speculative_params p, bool vec) {
  __shared__ reduce_scratch red;
  __shared__ int64_t first_reject;
  __shared__ unsigned long long accepted;
  ignis_pdl_wait();
  const int64_t b = blockIdx.x, n = p.num_draft, vocab = p.vocab_size;
  const uint64_t seed = rng_seed(p.rng, b), offset = rng_offset(p.rng, b);
  const T *draft = static_cast<const T *>(p.draft_probs) + b * p.draft_stride_batch;
  const T *target = static_cast<const T *>(p.target_probs) + b * p.target_stride_batch;
  if (threadIdx.x == 0) {
    first_reject = n;
    accepted = 0;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t d =
        load_index(p.draft_ids, p.draft_ids_dtype, b * p.draft_ids_stride_batch + i * p.draft_ids_stride_pos);
    bool ok = false;
    if (d >= 0 && d < vocab) {
      const float q = sanitize_prob(ignis_to_float(draft[i * p.draft_stride_pos + d]));
      const float pt = sanitize_prob(ignis_to_float(target[i * p.target_stride_pos + d]));
      const ignis_philox_out words = ignis_philox_group(seed, offset, 0, (uint64_t)b, (uint64_t)(i >> 2));
      const float u = ((float)(words.w[i & 3] >> 8) + 0.5f) * 0x1p-24f;
      ok = IGNIS_FMUL(u, q) < pt;
    }
    if (ok)
      atomicAdd(&accepted, 1ull);
    else
      atomicMin(reinterpret_cast<long long *>(&first_reject), (long long)i);
  }
  __syncthreads();
  const int64_t emitted = first_reject;
  for (int64_t i = threadIdx.x; i <= n; i += blockDim.x) {
    const int64_t at = b * p.output_stride_batch + i * p.output_stride_pos;
    if (i < emitted)
      store_index(p.output_ids, p.output_ids_dtype, at,
                  load_index(p.draft_ids, p.draft_ids_dtype,
                             b * p.draft_ids_stride_batch + i * p.draft_ids_stride_pos));
    else if (i > emitted)
      store_index(p.output_ids, p.output_ids_dtype, at, -1);
  }
  const T *target_row = target + emitted * p.target_stride_pos;
  int64_t token = -1;
  if (emitted < n)
    token = race_rows(target_row, draft + emitted * p.draft_stride_pos, vocab, vec, seed, offset, b, red);
  if (token < 0)
    token = race_rows<T>(target_row, nullptr, vocab, vec, seed, offset, b, red);
  if (threadIdx.x == 0) {
    store_index(p.output_ids, p.output_ids_dtype, b * p.output_stride_batch + emitted * p.output_stride_pos,
                token < 0 ? 0 : token);
    store_index(p.accepted, p.accepted_dtype, b,
                load_index(p.accepted, p.accepted_dtype, b) + (int64_t)accepted);
    store_index(p.emitted, p.emitted_dtype, b, load_index(p.emitted, p.emitted_dtype, b) + emitted);
  }
}

template <typename T> static cudaError_t launch(const ignis_speculative_params *p, cudaStream_t stream) {
  const int64_t chunk = 4 * (int64_t)sizeof(T);
  const int64_t e = (int64_t)sizeof(T);
  const bool vec = (uintptr_t)p->draft_probs % chunk == 0 && (uintptr_t)p->target_probs % chunk == 0 &&
                   (p->draft_stride_batch * e) % chunk == 0 && (p->draft_stride_pos * e) % chunk == 0 &&
                   (p->target_stride_batch * e) % chunk == 0 && (p->target_stride_pos * e) % chunk == 0;
  return ignis_launch(speculative_rows<T>, dim3((unsigned)p->batch_size), dim3(THREADS), 0, stream, *p, vec);
}

} // namespace

extern "C" ignis_status ignis_cuda_speculative(const ignis_speculative_params *params, int32_t device,
                                               void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return launch_rows("ignis_cuda_speculative", params->batch_size, params->dtype,
                     [&](auto t) { return launch<decltype(t)>(params, s); });
}
