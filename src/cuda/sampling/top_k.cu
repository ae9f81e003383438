/* CUDA backend of ignis_top_k (include/ignis/sampling.h): the k largest entries of each row, with
 * their indices, for any k up to the vocabulary. One block of 1024 threads per row.
 *
 *   1. Threshold: the radix search of radix.cuh over order keys (NaN below -inf) finds the k-th
 *      largest key t and the number of entries above it (3 passes: one level-1 histogram of the
 *      whole row, two narrow ones).
 *   2. Compaction (1 pass): the entries above t go to slots [0, above) and the first k - above
 *      entries equal to t to the slots after them, both in index order: each step of 4096 entries
 *      takes a block prefix sum of the per-thread (above, equal) counts packed in one word.
 *   3. sorted: the `above` entries are sorted by (value desc, index asc) with a bitonic network of
 *      the mirrored form (every merge sorts one way, so the slots past `above` act as smallest
 *      entries and their compare-exchanges are skipped): in shared memory when above <= 4096,
 *      else in place in the output arrays (slow, but any k works). The ties at t already sit in
 *      index order after them.
 * torch.topk sorts k candidates per row after a radix select as well; the difference is that the
 * radix here needs no global scratch and the compaction writes the output in one pass. */
#include "cuda/sampling/radix.cuh"

namespace {
using namespace ignis_sampling;

constexpr int SORT_CAPACITY = 4096;

/* Sort-order test: (key a, index a) comes before (key b, index b). */
__device__ __forceinline__ bool before(uint32_t ka, int64_t ia, uint32_t kb, int64_t ib) {
  return ka > kb || (ka == kb && ia < ib);
}

__device__ __forceinline__ uint32_t select_key(float v) {
  return isnan(v) ? 0u : ignis_order_key(v);
}

/* Mirrored bitonic sort of m entries held in shared memory (keys, indices). */
__device__ void sort_shared(uint32_t *keys, int32_t *idx, int m) {
  int size = 1;
  while (size < m)
    size <<= 1;
  for (int block = 2; block <= size; block <<= 1)
    for (int stride = block >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < size; i += blockDim.x) {
        const int j = stride == (block >> 1) ? (i ^ (block - 1)) : (i ^ stride);
        if (j > i && j < m) {
          if (before(keys[j], idx[j], keys[i], idx[i])) {
            const uint32_t tk = keys[i];
            const int32_t ti = idx[i];
            keys[i] = keys[j];
            idx[i] = idx[j];
            keys[j] = tk;
            idx[j] = ti;
          }
        }
      }
      __syncthreads();
    }
}

/* The same network in place in the output arrays (values of type T, indices of type I). */
template <typename T, typename I> __device__ void sort_global(T *values, I *indices, int64_t m) {
  int64_t size = 1;
  while (size < m)
    size <<= 1;
  for (int64_t block = 2; block <= size; block <<= 1)
    for (int64_t stride = block >> 1; stride > 0; stride >>= 1) {
      for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
        const int64_t j = stride == (block >> 1) ? (i ^ (block - 1)) : (i ^ stride);
        if (j > i && j < m) {
          const uint32_t ki = select_key(ignis_to_float(values[i])),
                         kj = select_key(ignis_to_float(values[j]));
          if (before(kj, (int64_t)indices[j], ki, (int64_t)indices[i])) {
            const T tv = values[i];
            const I ti = indices[i];
            values[i] = values[j];
            indices[i] = indices[j];
            values[j] = tv;
            indices[j] = ti;
          }
        }
      }
      __syncthreads();
    }
}

template <typename T, typename I>
__global__ void __launch_bounds__(THREADS, 1) top_k_rows(ignis_top_k_params p, bool vec) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  radix_smem &sm = *reinterpret_cast<radix_smem *>(smem_raw);
  ignis_pdl_wait();
  const int64_t row = blockIdx.x, n = p.vocab_size, k = p.k;
  radix_row<T> r;
  r.row = static_cast<const T *>(p.input) + row * p.input_row_stride;
  r.n = n;
  r.vec = vec;
  r.mode = KEY_SELECT;
  r.logits = false;
  r.x_max = 0.0f;
  r.x_floor = -INFINITY;
  T *values = static_cast<T *>(p.values) + row * p.values_row_stride;
  I *indices = static_cast<I *>(p.indices) + row * p.indices_row_stride;

  histogram_pass(r, 0, 0, false, 1, sm.cnt1, sm.mass1);
  const search_result s = radix_search(r, false, false, k, 0.0, 1, sm);
  const uint32_t thr = s.thr;
  const int64_t above = (int64_t)s.count_above, need_equal = k - above;

  const int64_t chunks = (n + 3) / 4;
  int64_t above_base = 0, equal_base = 0;
  for (int64_t base = 0; base < chunks; base += blockDim.x) {
    const int64_t c = base + threadIdx.x;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (c < chunks)
      load_chunk(r.row, c, n, r.vec, v);
    uint32_t keys[4], gt = 0, eq = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const bool inside = c < chunks && c * 4 + j < n;
      keys[j] = select_key(v[j]);
      gt += inside && keys[j] > thr;
      eq += inside && keys[j] == thr;
    }
    uint32_t total;
    const uint32_t prefix = block_prefix(gt | eq << 16, total, sm.red);
    int64_t next_above = above_base + (prefix & 0xFFFFu), next_equal = equal_base + (prefix >> 16);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = c * 4 + j;
      if (c >= chunks || i >= n)
        continue;
      int64_t slot = -1;
      if (keys[j] > thr)
        slot = next_above++;
      else if (keys[j] == thr && next_equal < need_equal)
        slot = above + next_equal++;
      else if (keys[j] == thr)
        ++next_equal;
      if (slot >= 0) {
        values[slot] = r.row[i];
        indices[slot] = (I)i;
      }
    }
    above_base += total & 0xFFFFu;
    equal_base += total >> 16;
  }
  if (!p.sorted || above < 2)
    return;
  __syncthreads();
  if (above <= SORT_CAPACITY) {
    uint32_t *keys = sm.list; /* the search is done: its shared memory is free */
    int32_t *idx = reinterpret_cast<int32_t *>(sm.cnt1);
    for (int64_t j = threadIdx.x; j < above; j += blockDim.x) {
      keys[j] = select_key(ignis_to_float(values[j]));
      idx[j] = (int32_t)indices[j];
    }
    __syncthreads();
    sort_shared(keys, idx, (int)above);
    for (int64_t j = threadIdx.x; j < above; j += blockDim.x) {
      values[j] = ignis_from_float<T>(ignis_key_float(keys[j]));
      indices[j] = (I)idx[j];
    }
    return;
  }
  sort_global(values, indices, above);
}

template <typename T, typename I>
static cudaError_t launch(const ignis_top_k_params *p, cudaStream_t stream) {
  const size_t smem = sizeof(radix_smem);
  const cudaError_t configured = ignis_allow_dynamic_smem<top_k_rows<T, I>>(smem);
  if (configured != cudaSuccess)
    return configured;
  const bool vec = rows_chunk_aligned(p->input, p->input_row_stride, p->num_rows, sizeof(T));
  return ignis_launch(top_k_rows<T, I>, dim3((unsigned)p->num_rows), dim3(THREADS), smem, stream, *p, vec);
}

template <typename T> static cudaError_t launch_index(const ignis_top_k_params *p, cudaStream_t stream) {
  return p->indices_dtype == IGNIS_I32 ? launch<T, int32_t>(p, stream) : launch<T, int64_t>(p, stream);
}

} // namespace

extern "C" ignis_status ignis_cuda_top_k(const ignis_top_k_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return launch_rows("ignis_cuda_top_k", params->num_rows, params->dtype,
                     [&](auto t) { return launch_index<decltype(t)>(params, s); });
}
