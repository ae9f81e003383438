/* CUDA backend of ignis_chain_speculative_sampling (include/ignis/sampling.h), with the rule and
 * the random numbers of src/cpu/sampling.c. One block of 1024 threads per request:
 *   1. the n acceptance tests in parallel (u_i * q < p, u_i from Philox draw 0, word i of the
 *      request's counter), the first rejection by a shared atomicMin and the accepted count by a
 *      shared atomicAdd (both order-independent);
 *   2. the accepted draft tokens and the -1 padding;
 *   3. one more token by inverse-transform sampling (search.cuh, the 64-bit uniform of draw 1)
 *      over the weights max(0, target - draft) at the rejected position: a max pass (the
 *      fixed-point scale), a pass summing the masses per tile, a scan inside one tile; if that
 *      residual has no positive weight, or every draft token was accepted, the same over the
 *      target row.
 * Passes over vocabulary rows: 2 over the residual's two rows (4 when it is empty); the draft
 * tokens' entries are read individually. */
#include "cuda/sampling/search.cuh"

namespace {
using namespace ignis_sampling;

/* The inverse-transform sample over the positive weights of the row (-1 if none). */
template <typename T, int KIND> __device__ int64_t sample_row(const row_view<T> &r, uint64_t uniform) {
  const uint32_t max_key = max_key_pass<T, KIND>(r);
  if (max_key == 0)
    return -1;
  const int e_max = ignis_mass_exponent(max_key & 0x7FFFFFFFu);
  const int tile_shift = tile_shift_of(r.n);
  tile_pass<T, KIND>(r, WEIGHT_FLOOR, e_max, tile_shift);
  return sample_tiles<T, KIND>(r, WEIGHT_FLOOR, e_max, tile_shift, uniform);
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1) speculative_rows(ignis_speculative_params p, bool vec) {
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
  const uint64_t uniform = row_uniform(seed, offset, 1, b);
  row_view<T> r;
  r.row = target + emitted * p.target_stride_pos;
  r.minus = emitted < n ? draft + emitted * p.draft_stride_pos : nullptr;
  r.n = vocab;
  r.vec = vec;
  r.x_max = 0.0f;
  int64_t token = -1;
  if (emitted < n)
    token = sample_row<T, ROW_RESIDUAL>(r, uniform);
  if (token < 0)
    token = sample_row<T, ROW_PROBS>(r, uniform);
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
  return ignis_launch(speculative_rows<T>, dim3((unsigned)p->batch_size), dim3(THREADS), sizeof(tile_smem),
                      stream, *p, vec);
}

} // namespace

extern "C" ignis_status ignis_cuda_speculative(const ignis_speculative_params *params, int32_t device,
                                               void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return launch_rows("ignis_cuda_speculative", params->batch_size, params->dtype,
                     [&](auto t) { return launch<decltype(t)>(params, s); });
}
