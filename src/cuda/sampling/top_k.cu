/* CUDA backend of ignis_top_k (include/ignis/sampling.h): the k largest entries of each row, with
 * their indices, for any k up to the vocabulary. One block of 1024 threads per row.
 *
 *   1. Threshold: the search of search.cuh over order keys (NaN below -inf) finds the k-th largest
 *      key t: a count histogram of the row, then one gather pass. When the entries at or above t's
 *      bin fit the list (LIST_CAP, so any k up to ~16K on a real row), the gather takes all of them
 *      and the list, sorted by (key desc, index asc), holds the answer: its first k entries are the
 *      sorted output; unsorted, the ties at t stay in index order and the entries above t are
 *      sorted once more by index. 2 passes over the row.
 *   2. Otherwise (larger k): a compaction pass writes the entries above t to slots [0, above) and
 *      the first k - above entries equal to t after them, both in index order (each step of 4096
 *      entries takes a block prefix sum of the per-thread (above, equal) counts packed in one
 *      word); sorted, the entries above t are then sorted in shared memory when they fit the
 *      list, else in place in the output arrays with the mirrored bitonic network (slow, but any k
 *      works).
 * Values are copied from the row by index, so NaN payloads and -0 survive. torch.topk also selects
 * with a radix pass and sorts k candidates; the difference is that the candidates here are
 * gathered in the same pass that finishes the selection, with no global scratch. */
#include "cuda/sampling/search.cuh"

namespace {
using namespace ignis_sampling;

/* Sort-order test: (key a, index a) comes before (key b, index b). */
__device__ __forceinline__ bool before(uint32_t ka, int64_t ia, uint32_t kb, int64_t ib) {
  return ka > kb || (ka == kb && ia < ib);
}

__device__ __forceinline__ uint32_t select_key(float v) {
  return isnan(v) ? 0u : ignis_order_key(v);
}

/* Mirrored bitonic sort of m entries in place in the output arrays (values T, indices I). */
template <typename T, typename I> __device__ __noinline__ void sort_global(T *values, I *indices, int64_t m) {
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

/* Writes list entries [from, to) to output slots [from, to). */
template <typename T, typename I>
__device__ __forceinline__ void write_entries(const T *row, T *values, I *indices, uint32_t from,
                                              uint32_t to) {
  const uint64_t *list = search_mem().u.list;
  for (uint32_t j = from + threadIdx.x; j < to; j += THREADS) {
    const int64_t i = entry_index(list[j]);
    values[j] = row[i];
    indices[j] = (I)i;
  }
}

/* The output from the sorted list holding every entry >= its last key (k <= its length). */
template <typename T, typename I>
__device__ __noinline__ void output_from_list(const T *row, T *values, I *indices, int64_t k, int64_t above,
                                              bool sorted) {
  uint64_t *list = search_mem().u.list;
  if (sorted || above < 2) {
    write_entries(row, values, indices, 0, (uint32_t)k);
    return;
  }
  /* Unsorted: the ties at the k-th key as they are (index order), then the entries above it by index. */
  write_entries(row, values, indices, (uint32_t)above, (uint32_t)k);
  __syncthreads();
  for (uint32_t j = threadIdx.x; j < (uint32_t)above; j += THREADS)
    list[j] = (uint64_t)(0xFFFFFFFFu - (uint32_t)entry_index(list[j])) << 32;
  sort_list((uint32_t)above);
  for (uint32_t j = threadIdx.x; j < (uint32_t)above; j += THREADS) {
    const int64_t i = 0xFFFFFFFFu - (uint32_t)(list[j] >> 32);
    values[j] = row[i];
    indices[j] = (I)i;
  }
}

/* Compaction in index order: entries above thr to [0, above), the first k - above equal to thr
 * after them. */
template <typename T, typename I>
__device__ __noinline__ void compact(const row_view<T> r, T *values, I *indices, int64_t k, int64_t above,
                                     uint32_t thr) {
  reduce_scratch &red = tile_mem().red;
  const int64_t chunks = (r.n + 3) / 4, need_equal = k - above;
  int64_t above_base = 0, equal_base = 0;
  for (int64_t base = 0; base < chunks; base += THREADS) {
    const int64_t c = base + threadIdx.x;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (c < chunks)
      load_chunk(r.row, c, r.n, r.vec, v);
    const int valid = chunk_valid(r.n, c);
    uint32_t keys[4], gt = 0, eq = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      keys[j] = select_key(v[j]);
      gt += j < valid && keys[j] > thr;
      eq += j < valid && keys[j] == thr;
    }
    uint32_t total;
    const uint32_t prefix = block_prefix(gt | eq << 16, total, red);
    int64_t next_above = above_base + (prefix & 0xFFFFu), next_equal = equal_base + (prefix >> 16);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j >= valid)
        continue;
      int64_t slot = -1;
      if (keys[j] > thr)
        slot = next_above++;
      else if (keys[j] == thr && next_equal < need_equal)
        slot = above + next_equal++;
      else if (keys[j] == thr)
        ++next_equal;
      if (slot >= 0) {
        values[slot] = r.row[c * 4 + j];
        indices[slot] = (I)(c * 4 + j);
      }
    }
    above_base += total & 0xFFFFu;
    equal_base += total >> 16;
  }
}

/* Sort the `above` compacted entries by (value desc, index asc): in shared memory when they fit. */
template <typename T, typename I>
__device__ __noinline__ void sort_above(const T *row, T *values, I *indices, int64_t above) {
  if (above > LIST_CAP) {
    sort_global(values, indices, above);
    return;
  }
  uint64_t *list = search_mem().u.list;
  for (int64_t j = threadIdx.x; j < above; j += THREADS)
    list[j] = pack_entry(select_key(ignis_to_float(values[j])), (int64_t)indices[j]);
  sort_list((uint32_t)above);
  write_entries(row, values, indices, 0, (uint32_t)above);
}

template <typename T, typename I>
__global__ void __launch_bounds__(THREADS, 1) top_k_rows(ignis_top_k_params p, bool vec) {
  ignis_pdl_wait();
  const int64_t row_index = blockIdx.x, n = p.vocab_size, k = p.k;
  row_view<T> r;
  r.row = static_cast<const T *>(p.input) + row_index * p.input_row_stride;
  r.minus = nullptr;
  r.n = n;
  r.vec = vec;
  r.x_max = 0.0f;
  T *values = static_cast<T *>(p.values) + row_index * p.values_row_stride;
  I *indices = static_cast<I *>(p.indices) + row_index * p.indices_row_stride;

  const pass_sums level1 =
      histogram_pass<T, ROW_SELECT, false>(r, 0u, ANY_TOP, ANY_SHIFT, 1, false, false, 0, false);
  const targets top_k = {true, k, false, 1.0, true, 0};
  const search_result s = search<T, ROW_SELECT>(r, top_k, 0u, ANY_TOP, ANY_SHIFT, 1, level1.max_key, false,
                                                false, tile_shift_of(n));
  const int64_t above = (int64_t)s.count_above;
  if (s.list_all) {
    sort_list(s.list_len);
    output_from_list(r.row, values, indices, k, above, p.sorted != 0);
    return;
  }
  compact(r, values, indices, k, above, s.thr);
  if (!p.sorted || above < 2)
    return;
  __syncthreads();
  sort_above(r.row, values, indices, above);
}

template <typename T, typename I>
static cudaError_t launch(const ignis_top_k_params *p, cudaStream_t stream) {
  const size_t smem = sizeof(search_smem);
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
