/* CUDA backend of the filtered sampling ops, the renorm ops and top_k_mask_logits
 * (include/ignis/sampling.h). Thresholds and samples are the exact quantities the header defines,
 * so they equal the CPU backend's (src/cpu/sampling.c).
 *
 * Calls of few rows that bring a workspace take the multi-block path of split.cu instead (the
 * sampling calls only); everything else runs here, one block of 1024 threads per output row. No sorting of the row: the allowed set is {w > 0,
 * key(w) >= thr} for a threshold key found by the search of search.cuh (a count histogram, then
 * the candidate window gathered into shared memory and resolved exactly), and the sample is the
 * inverse transform over the allowed set in index order: one 64-bit uniform per row, the allowed
 * mass per tile of the row, then a scan inside the one tile that holds the target.
 *
 * Passes over the row for a real distribution (each a streaming read; later ones largely served
 * from L2):
 *   sampling_from_probs, min-p               2  (max, tile masses)
 *   top-k / top-p / joint from probs         2  (histogram, gather with the tile masses); a top-p
 *                                               near 1 may add a refine pass
 *   top-k + top-p, top_k_first               2  while the top-k set and its bin fit the list (the
 *                                               top-p search then runs on the gathered list), else 4
 *   logits forms                             one more (the max) before those; exp only where a
 *                                            pass needs a weight, and in the histogram pass
 *   renorm                                   as the filter, then the write pass
 *   top_k_mask_logits                        3  (histogram, gather, write; keys of the logits)
 * A filter that does not filter (k = 0 or >= the positive weights, p = 1) costs the max and tile
 * passes of plain sampling. */
#include "cuda/sampling/search.cuh"

namespace {
using namespace ignis_sampling;

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

/* Max of the sanitized logits of the row. */
template <typename T> __device__ __noinline__ float logit_max(const row_view<T> r) {
  float m = -INFINITY;
  for_each_chunk<T, ROW_LOGITS>(r, [&](int, int64_t, const float(&v)[4], const float(&)[4], int valid) {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (j < valid)
        m = fmaxf(m, sanitize_logit(v[j]));
  });
  return block_max(m, tile_mem().red);
}

/* Write pass of the renorm (w * inv on the allowed set, else 0) and mask (x on the allowed set,
 * else -inf; or the row unchanged when copy) outputs. */
template <typename T, int KIND>
__device__ __noinline__ void write_row(const row_view<T> r, T *out, bool out_vec, uint32_t thr, float inv,
                                       bool copy) {
  const float x_floor = logit_floor<T, KIND>(r, thr);
  for_each_chunk<T, KIND>(r, [&](int, int64_t c, const float(&v)[4], const float(&q)[4], int valid) {
    if (valid == 0)
      return;
    float o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t key;
      float w;
      const bool valid = decode<T, KIND>(r, v[j], q[j], x_floor, key, w);
      if constexpr (KIND == ROW_MASK)
        o[j] = copy ? v[j] : (!isnan(v[j]) && key >= thr ? v[j] : -INFINITY);
      else
        o[j] = valid && key >= thr ? IGNIS_FMUL(w, inv) : 0.0f;
    }
    store_chunk(out, c, r.n, out_vec, o);
  });
}

/* The allowed set of a weight row under the filter of p: threshold, exact mass, tiles. */
struct allowed_set {
  bool empty; /* no positive weight */
  uint32_t thr;
  int e_max;
  bool have_mass;
  uint64_t mass;
  bool tiles;
};

template <typename T, int KIND>
__device__ __noinline__ allowed_set filter_row(const ignis_sampling_params &p, int64_t b, const row_view<T> r,
                                               bool renorm, bool sample, int tile_shift) {
  allowed_set a = {false, WEIGHT_FLOOR, 1, false, 0, false};
  const ignis_sampling_filter filter = p.filter;
  const row_filter f = row_filter_of(p, b, r.n);
  const int64_t k = f.k;
  const double top_p = f.top_p;
  const bool use_k = f.use_k, use_p = f.use_p;

  if (!use_k && !use_p) {
    const uint32_t max_key =
        KIND == ROW_LOGITS ? (r.x_max == -INFINITY ? 0u : ignis_order_key(1.0f)) : max_key_pass<T, KIND>(r);
    a.empty = max_key == 0;
    if (a.empty)
      return a;
    a.e_max = ignis_mass_exponent(max_key & 0x7FFFFFFFu);
    if (filter == IGNIS_SAMPLING_MIN_P)
      a.thr = ignis_order_key(IGNIS_FMUL(row_min_p(p, b), ignis_key_float(max_key)));
    return a;
  }

  const pass_sums level1 =
      histogram_pass<T, KIND, false>(r, WEIGHT_FLOOR, WEIGHT_TOP, WEIGHT_SHIFT, 1, false, false, 0, false);
  a.empty = level1.max_key == 0;
  if (a.empty)
    return a;
  const int e_max = ignis_mass_exponent(level1.max_key & 0x7FFFFFFFu);
  a.e_max = e_max;
  const uint32_t max_key = level1.max_key;
  search_result res;
  if (filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P && use_k && use_p) {
    const targets top_k = {true, k, false, 1.0, true, 0};
    res = search<T, KIND>(r, top_k, WEIGHT_FLOOR, WEIGHT_TOP, WEIGHT_SHIFT, e_max, max_key, true, false,
                          tile_shift);
    if (!res.filtered) {
      /* k does not filter; the level-1 histogram is untouched: top-p over the whole row. */
      const targets top_p_all = {false, 0, true, top_p, false, 0};
      res = search<T, KIND>(r, top_p_all, WEIGHT_FLOOR, WEIGHT_TOP, WEIGHT_SHIFT, e_max, max_key, renorm,
                            sample, tile_shift);
    } else {
      const uint64_t mass_k = res.have_mass ? res.mass : tile_pass<T, KIND>(r, res.thr, e_max, tile_shift);
      if (res.list_all) {
        /* The list holds the whole top-k set: top-p within it, from the top. */
        const uint32_t thr = list_select(res.list_len, res.thr, max_key, SELECT_MASS, 0, 0,
                                         IGNIS_DMUL(top_p, __ull2double_rn(mass_k)), e_max);
        if (sample)
          clear_tiles();
        res.thr = thr;
        res.mass = list_mass_from(res.list_len, thr, e_max, sample, tile_shift);
        res.have_mass = true;
        res.tiles = sample;
      } else {
        const uint32_t floor = res.thr;
        histogram_pass<T, KIND, false>(r, floor, WEIGHT_TOP, WEIGHT_SHIFT, e_max, false, false, 0, false);
        const targets within = {false, 0, true, top_p, true, mass_k};
        res = search<T, KIND>(r, within, floor, WEIGHT_TOP, WEIGHT_SHIFT, e_max, max_key, renorm, sample,
                              tile_shift);
      }
    }
  } else {
    const targets tg = {use_k, k, use_p, top_p, false, 0};
    res = search<T, KIND>(r, tg, WEIGHT_FLOOR, WEIGHT_TOP, WEIGHT_SHIFT, e_max, max_key, renorm, sample,
                          tile_shift);
  }
  a.thr = res.thr;
  a.have_mass = res.have_mass;
  a.mass = res.mass;
  a.tiles = res.tiles;
  return a;
}

template <typename T, int KIND>
__global__ void __launch_bounds__(THREADS, 1)
    filter_rows(const __grid_constant__ ignis_sampling_params p, bool vec, bool out_vec) {
  ignis_pdl_wait();
  const int64_t b = blockIdx.x;
  const bool sample = p.output == IGNIS_SAMPLING_OUT_SAMPLE, renorm = p.output == IGNIS_SAMPLING_OUT_RENORM;
  const int64_t src = sample && p.indices ? load_index(p.indices, p.indices_dtype, b) : b;
  if (src < 0 || src >= p.num_rows) {
    if (threadIdx.x == 0)
      store_index(p.samples, p.samples_dtype, b, 0);
    return;
  }
  row_view<T> r;
  r.row = static_cast<const T *>(p.input) + src * p.input_row_stride;
  r.minus = nullptr;
  r.n = p.vocab_size;
  r.vec = vec;
  r.x_max = 0.0f;
  T *out = p.out ? static_cast<T *>(p.out) + b * p.out_row_stride : nullptr;
  const int tile_shift = tile_shift_of(r.n);

  if constexpr (KIND == ROW_MASK) {
    const int64_t k = row_top_k(p, b);
    const bool copy = k <= 0 || k >= r.n;
    uint32_t thr = 0;
    if (!copy) {
      const pass_sums level1 =
          histogram_pass<T, KIND, false>(r, 0u, ANY_TOP, ANY_SHIFT, 1, false, false, 0, false);
      const targets top_k = {true, k, false, 1.0, true, 0};
      thr =
          search<T, KIND>(r, top_k, 0u, ANY_TOP, ANY_SHIFT, 1, level1.max_key, false, false, tile_shift).thr;
    }
    write_row<T, KIND>(r, out, out_vec, thr, 0.0f, copy);
  } else {
    if constexpr (KIND == ROW_LOGITS)
      r.x_max = logit_max(r);
    allowed_set a = filter_row<T, KIND>(p, b, r, renorm, sample, tile_shift);
    if (!a.empty && !(sample ? a.tiles : a.have_mass)) {
      a.mass = tile_pass<T, KIND>(r, a.thr, a.e_max, tile_shift);
      a.have_mass = a.tiles = true;
    }
    if (renorm) {
      const float inv = a.mass ? (float)(1.0 / ldexp((double)a.mass, a.e_max - 165)) : 0.0f;
      write_row<T, KIND>(r, out, out_vec, a.thr, inv, false);
      return;
    }
    const int64_t token =
        a.empty ? -1
                : sample_tiles<T, KIND>(r, a.thr, a.e_max, tile_shift,
                                        row_uniform(rng_seed(p.rng, b), rng_offset(p.rng, b), 0, b));
    if (threadIdx.x == 0)
      store_index(p.samples, p.samples_dtype, b, token < 0 ? 0 : token);
  }
}

template <typename T, int KIND>
static cudaError_t launch_kind(const ignis_sampling_params *p, cudaStream_t stream) {
  const size_t smem = sizeof(search_smem);
  const cudaError_t configured = ignis_allow_dynamic_smem<filter_rows<T, KIND>>(smem);
  if (configured != cudaSuccess)
    return configured;
  const bool vec = rows_chunk_aligned(p->input, p->input_row_stride, p->num_rows, sizeof(T));
  const bool out_vec = p->out && rows_chunk_aligned(p->out, p->out_row_stride, p->batch_size, sizeof(T));
  return ignis_launch(filter_rows<T, KIND>, dim3((unsigned)p->batch_size), dim3(THREADS), smem, stream, *p,
                      vec, out_vec);
}

template <typename T> static cudaError_t launch(const ignis_sampling_params *p, cudaStream_t stream) {
  if (p->output == IGNIS_SAMPLING_OUT_MASK)
    return launch_kind<T, ROW_MASK>(p, stream);
  return p->logits ? launch_kind<T, ROW_LOGITS>(p, stream) : launch_kind<T, ROW_PROBS>(p, stream);
}

} // namespace

extern "C" ignis_status ignis_cuda_sampling(const ignis_sampling_params *params, int32_t device,
                                            void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  ignis_status split_status;
  if (ignis_cuda_sampling_split(params, device, stream, &split_status))
    return split_status;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return launch_rows("ignis_cuda_sampling", params->batch_size, params->dtype,
                     [&](auto t) { return launch<decltype(t)>(params, s); });
}
