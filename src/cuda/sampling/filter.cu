/* CUDA backend of the filtered sampling ops, the renorm ops and top_k_mask_logits
 * (include/ignis/sampling.h), with the algorithm of src/cpu/sampling.c, so both backends return the
 * same samples.
 *
 * One block of 1024 threads per output row. No sorting and no prefix sum over the row: the allowed
 * set is {w > 0, key(w) >= thr} for a threshold key found by the radix search of radix.cuh, and the
 * sample is an exponential race, argmax of w_i / E_i over the allowed set (E_i = -ln u_i from
 * Philox), so every element needs only its own random number and the block only an argmax.
 *
 * Passes over the row (each a streaming read; later ones largely served from L2). A search is
 * 2 passes (level-1 histogram, then the chosen bin gathered into shared memory), 3 when that bin
 * holds more than GATHER_CAP elements (radix.cuh):
 *   sampling_from_probs                      1  (race)
 *   sampling_from_logits, min-p              2  (max, race)
 *   top-k / top-p from probs                 3  (search, race)
 *   top-k + top-p, joint                     3  (only the filter whose level-1 digit is higher is
 *                                               refined; 4 when they tie)
 *   top-k + top-p, top_k_first               4  (top-k's search, then top-p's from the kept level 1)
 *   logits forms                             one more (the max) before those; exp only in level 1
 *                                            and for the elements a later pass may accept
 *   renorm                                   as the filter, the race replaced by the write
 *   top_k_mask_logits                        3  (keys of the logits themselves, no weights)
 * Why this shape: the race needs no total and no scan, so sampling from an allowed set is a single
 * pass at streaming speed whatever its size (top-p 0.9 keeps tens of thousands of tokens); the radix
 * search is exact in three histogram levels whatever the distribution (rejection sampling needs a
 * number of rounds that depends on it), its integer masses make the result independent of the
 * reduction order, and the thresholds it finds are the CPU backend's bit for bit. */
#include "cuda/sampling/radix.cuh"

namespace {
using namespace ignis_sampling;

struct filter_smem {
  radix_smem radix;
};

template <typename T>
__device__ __forceinline__ void store_chunk(T *row, int64_t c, int64_t n, bool vec, const float (&v)[4]) {
  const int64_t i0 = c * 4;
  if (vec && i0 + 4 <= n) {
    if constexpr (sizeof(T) == 4) {
      *reinterpret_cast<float4 *>(row + i0) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      *reinterpret_cast<uint2 *>(row + i0) = make_uint2(ignis_pack_word<T>(v), ignis_pack_word<T>(v + 2));
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (i0 + j < n)
      row[i0 + j] = ignis_from_float<T>(v[j]);
}

/* Max over the row of f(element), f the logit or the probability as sanitized. */
template <typename T> __device__ float row_max(const radix_row<T> &r, bool logits, reduce_scratch &red) {
  float m = logits ? -INFINITY : 0.0f;
  const int64_t chunks = (r.n + 3) / 4;
  for (int64_t base = threadIdx.x; base < chunks; base += (int64_t)UNROLL * blockDim.x) {
    float v[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      load_chunk(r.row, base + (int64_t)u * blockDim.x, r.n, r.vec, v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if ((base + (int64_t)u * blockDim.x) * 4 + j < r.n)
          m = fmaxf(m, logits ? sanitize_logit(v[u][j]) : sanitize_prob(v[u][j]));
  }
  return block_max(m, red);
}

__device__ __forceinline__ int64_t row_top_k(const ignis_sampling_params &p, int64_t b) {
  return p.top_k_arr ? load_index(p.top_k_arr, p.top_k_dtype, b) : p.top_k_val;
}

__device__ __forceinline__ double row_top_p(const ignis_sampling_params &p, int64_t b) {
  const double v = p.top_p_arr ? (double)p.top_p_arr[b] : p.top_p_val;
  return v > 0.0 ? v : DBL_MIN;
}

__device__ __forceinline__ float row_min_p(const ignis_sampling_params &p, int64_t b) {
  const float v = p.min_p_arr ? p.min_p_arr[b] : p.min_p_val;
  return v > 0.0f ? (v < 1.0f ? v : 1.0f) : 0.0f;
}

/* The exponential race over {w > 0, key >= thr}: the token of output row b. */
template <typename T>
__device__ int64_t race(const radix_row<T> &row, uint32_t thr, uint64_t seed, uint64_t offset, int64_t b,
                        reduce_scratch &red) {
  const radix_row<T> r = with_floor(row, thr);
  /* 32-bit element indices: vocab < 2^31, so 4 * chunk + 3 < 2^32. */
  float best_score = 0.0f;
  int64_t best = -1;
  const uint32_t chunks = (uint32_t)((r.n + 3) / 4);
  for (uint32_t base = threadIdx.x; base < chunks; base += RACE_UNROLL * blockDim.x) {
    float v[RACE_UNROLL][4];
#pragma unroll
    for (int u = 0; u < RACE_UNROLL; ++u)
      load_chunk(r.row, (int64_t)(base + u * blockDim.x), r.n, r.vec, v[u]);
#pragma unroll
    for (int u = 0; u < RACE_UNROLL; ++u) {
      const uint32_t c = base + u * blockDim.x;
      float w[4];
      bool allowed[4], any = false;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t key;
        allowed[j] = (int64_t)c * 4 + j < r.n && element_key(r, v[u][j], key, w[j]) && key >= thr;
        any |= allowed[j];
      }
      if (!any)
        continue;
      const ignis_philox_out words = ignis_philox_group(seed, offset, 0, (uint64_t)b, (uint64_t)c);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (allowed[j]) {
          const float score = w[j] / ignis_neg_log_uniform(words.w[j]);
          if (best < 0 || score > best_score) {
            best_score = score;
            best = (int64_t)(c * 4u + (uint32_t)j);
          }
        }
    }
  }
  const int64_t token = block_argmax(best_score, best, red);
  return token < 0 ? 0 : token;
}

/* Write pass of the renorm (w * inv on the allowed set, else 0) and mask (x on the allowed set,
 * else -inf; or the row unchanged when copy) outputs. */
template <typename T>
__device__ void write_row(const radix_row<T> &r, T *out, bool out_vec, uint32_t thr, float inv, bool copy) {
  const int64_t chunks = (r.n + 3) / 4;
  for (int64_t base = threadIdx.x; base < chunks; base += (int64_t)UNROLL * blockDim.x) {
    float v[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      load_chunk(r.row, base + (int64_t)u * blockDim.x, r.n, r.vec, v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t c = base + (int64_t)u * blockDim.x;
      if (c * 4 >= r.n)
        continue;
      float o[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t key;
        float w;
        const bool valid = element_key(r, v[u][j], key, w);
        if (r.mode == KEY_MASK)
          o[j] = copy ? v[u][j] : (!isnan(v[u][j]) && key >= thr ? v[u][j] : -INFINITY);
        else
          o[j] = valid && key >= thr ? IGNIS_FMUL(w, inv) : 0.0f;
      }
      store_chunk(out, c, r.n, out_vec, o);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(THREADS, 1) filter_rows(ignis_sampling_params p, bool vec, bool out_vec) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  radix_smem &sm = reinterpret_cast<filter_smem *>(smem_raw)->radix;
  ignis_pdl_wait();
  const int64_t b = blockIdx.x;
  const bool sample = p.output == IGNIS_SAMPLING_OUT_SAMPLE;
  const int64_t src = sample && p.indices ? load_index(p.indices, p.indices_dtype, b) : b;
  if (src < 0 || src >= p.num_rows) {
    if (threadIdx.x == 0)
      store_index(p.samples, p.samples_dtype, b, 0);
    return;
  }
  radix_row<T> r;
  r.row = static_cast<const T *>(p.input) + src * p.input_row_stride;
  r.n = p.vocab_size;
  r.vec = vec;
  r.mode = p.output == IGNIS_SAMPLING_OUT_MASK ? KEY_MASK : KEY_WEIGHT;
  r.logits = p.logits && r.mode == KEY_WEIGHT;
  r.x_max = 0.0f;
  r.x_floor = -INFINITY;
  T *out = p.out ? static_cast<T *>(p.out) + b * p.out_row_stride : nullptr;

  if (r.mode == KEY_MASK) {
    const int64_t k = row_top_k(p, b);
    const bool copy = k <= 0 || k >= r.n;
    uint32_t thr = 0;
    if (!copy) {
      histogram_pass(r, 0, 0, false, 1, sm.cnt1, sm.mass1);
      thr = radix_search(r, false, false, k, 0.0, 1, sm).thr;
    }
    write_row(r, out, out_vec, thr, 0.0f, copy);
    return;
  }
  if (r.logits)
    r.x_max = row_max(r, true, sm.red);

  const ignis_sampling_filter filter = p.filter;
  const bool has_k = filter == IGNIS_SAMPLING_TOP_K || filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
                     filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  const bool has_p = filter == IGNIS_SAMPLING_TOP_P || filter == IGNIS_SAMPLING_TOP_K_TOP_P ||
                     filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  const int64_t k = has_k ? row_top_k(p, b) : 0;
  const double top_p = has_p ? row_top_p(p, b) : 1.0;
  const bool search_k = has_k && k > 0, search_p = has_p && top_p < 1.0;
  /* Masses only where a result depends on them (the CPU backend may sum more; the same results). */
  const bool want_mass = p.output == IGNIS_SAMPLING_OUT_RENORM || search_p;

  int e_max = 1;
  uint64_t total = 0;
  if (want_mass || search_k) {
    histogram_pass(r, 0, 0, want_mass, 1, sm.cnt1, sm.mass1);
    if (want_mass) {
      e_max = level1_to_common_units(sm);
      uint64_t mine = 0, unused_above, unused_count_above, count_total;
      for (int d = threadIdx.x; d < L1_DIGITS - POSITIVE_L1; d += blockDim.x)
        mine += sm.mass1[d];
      block_suffix2(mine, 0, unused_above, unused_count_above, total, count_total, sm.red);
    }
  }
  search_result result = {0, total, 0};
  if (filter == IGNIS_SAMPLING_TOP_K_TOP_P && search_k && search_p && p.output == IGNIS_SAMPLING_OUT_SAMPLE) {
    /* Joint: only the filter whose level-1 digit is higher decides (both when they tie). */
    pick(sm.cnt1, nullptr, POSITIVE_L1, L1_DIGITS, false, k, 0.0, sm);
    const int digit_k = sm.is_short ? -1 : sm.digit;
    __syncthreads();
    pick(sm.cnt1, sm.mass1, POSITIVE_L1, L1_DIGITS, true, 0, IGNIS_DMUL(top_p, (double)total), sm);
    const int digit_p = sm.is_short ? -1 : sm.digit;
    __syncthreads();
    if (digit_k >= digit_p)
      result = radix_search(r, false, want_mass, k, 0.0, e_max, sm);
    if (digit_p >= digit_k) {
      const search_result rp = radix_search(r, true, true, 0, IGNIS_DMUL(top_p, (double)total), e_max, sm);
      if (rp.thr >= result.thr)
        result = rp;
    }
  } else {
    if (search_k)
      result = radix_search(r, false, want_mass, k, 0.0, e_max, sm);
    if (search_p) {
      const uint64_t base = filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P ? result.mass_above : total;
      const search_result rp = radix_search(r, true, true, 0, IGNIS_DMUL(top_p, (double)base), e_max, sm);
      if (rp.thr >= result.thr)
        result = rp;
    }
  }
  if (filter == IGNIS_SAMPLING_MIN_P) {
    const float w_max = r.logits ? (r.x_max == -INFINITY ? 0.0f : 1.0f) : row_max(r, false, sm.red);
    result.thr = ignis_order_key(IGNIS_FMUL(row_min_p(p, b), w_max));
  }

  if (p.output == IGNIS_SAMPLING_OUT_RENORM) {
    const float inv = result.mass_above ? (float)(1.0 / ldexp((double)result.mass_above, e_max - 165)) : 0.0f;
    write_row(r, out, out_vec, result.thr, inv, false);
    return;
  }
  const int64_t token = race(r, result.thr, rng_seed(p.rng, b), rng_offset(p.rng, b), b, sm.red);
  if (threadIdx.x == 0)
    store_index(p.samples, p.samples_dtype, b, token);
}

template <typename T> static cudaError_t launch(const ignis_sampling_params *p, cudaStream_t stream) {
  const size_t smem = sizeof(filter_smem);
  const cudaError_t configured = ignis_allow_dynamic_smem<filter_rows<T>>(smem);
  if (configured != cudaSuccess)
    return configured;
  const bool vec = rows_chunk_aligned(p->input, p->input_row_stride, p->num_rows, sizeof(T));
  const bool out_vec = p->out && rows_chunk_aligned(p->out, p->out_row_stride, p->batch_size, sizeof(T));
  return ignis_launch(filter_rows<T>, dim3((unsigned)p->batch_size), dim3(THREADS), smem, stream, *p, vec,
                      out_vec);
}

} // namespace

extern "C" ignis_status ignis_cuda_sampling(const ignis_sampling_params *params, int32_t device,
                                            void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return launch_rows("ignis_cuda_sampling", params->batch_size, params->dtype,
                     [&](auto t) { return launch<decltype(t)>(params, s); });
}
