/* CUDA backend of the paged KV cache ops (include/ignis/paged_kv.h), with the semantics of
 * src/cpu/paged_kv.c.
 *
 * append_paged_kv_cache is a gather-free copy: each (token, head) row of head_dim elements moves
 * unchanged from the append data to its page slot of K and of V. Rows are copied in units U, the
 * widest of 16, 8, 4, 2 and 1 bytes that divides the row's bytes and every base pointer and byte
 * stride involved (checked on the host), so aligned caches move with 16-byte loads and stores and
 * anything else still works. A block of 256 threads has 256 / G row slots of G threads (G the
 * power of two <= 32 covering the row's units); each slot works out its row's destination once
 * (batch index, position, page lookup) and skips the row when any index is out of range, so a
 * bad device-side index never turns into a stray write.
 *
 * get_batch_indices_positions: one thread per appended token, which finds its request by binary
 * search over append_indptr. get_seq_lens: one thread per request.
 *
 * Every kernel is launched with ignis_launch and calls ignis_pdl_wait() before touching global
 * memory (cuda_common.cuh). */
#include "cuda/common/cuda_common.cuh"

enum { APPEND_BLOCK_THREADS = 256, INDEX_BLOCK_THREADS = 256, MAX_GRID_BLOCKS = 1 << 20 };

/* Page number and slot of token (b, pos), or -1 when out of range. */
__device__ __forceinline__ int64_t page_of(const ignis_paged_kv_params &c, int64_t b, int64_t pos,
                                           int64_t *slot) {
  if (b < 0 || b >= c.batch_size || pos < 0)
    return -1;
  const int64_t entry = (int64_t)c.indptr[b] + pos / c.page_size;
  if (entry < 0 || entry >= c.indptr[b + 1] || entry >= c.num_page_entries)
    return -1;
  const int64_t page = c.indices[entry];
  if (page < 0 || page >= c.num_pages)
    return -1;
  *slot = pos % c.page_size;
  return page;
}

template <typename U> __global__ void __launch_bounds__(APPEND_BLOCK_THREADS) append_kernel(ignis_append_kv_params p) {
  const ignis_paged_kv_params &c = p.cache;
  const int64_t elem = (int64_t)(c.dtype == IGNIS_F32 ? 4 : c.dtype == IGNIS_F16 || c.dtype == IGNIS_BF16 ? 2 : 1);
  const int units = (int)(c.head_dim * elem / (int64_t)sizeof(U));
  const int64_t rows = p.nnz * c.num_kv_heads;
  const int64_t rows_per_block = blockDim.y;
  ignis_pdl_wait();
  for (int64_t row = (int64_t)blockIdx.x * rows_per_block + threadIdx.y; row < rows;
       row += (int64_t)gridDim.x * rows_per_block) {
    const int64_t t = row / c.num_kv_heads, h = row - t * c.num_kv_heads;
    int64_t slot;
    const int64_t page = page_of(c, p.batch_indices[t], p.positions[t], &slot);
    if (page < 0)
      continue;
    const U *key = reinterpret_cast<const U *>(static_cast<const char *>(p.key) +
                                               (t * p.key_stride_token + h * p.key_stride_head) * elem);
    const U *value = reinterpret_cast<const U *>(static_cast<const char *>(p.value) +
                                                 (t * p.value_stride_token + h * p.value_stride_head) * elem);
    U *k_dst = reinterpret_cast<U *>(static_cast<char *>(c.k_cache) +
                                     (page * c.k_stride_page + slot * c.k_stride_token + h * c.k_stride_head) * elem);
    U *v_dst = reinterpret_cast<U *>(static_cast<char *>(c.v_cache) +
                                     (page * c.v_stride_page + slot * c.v_stride_token + h * c.v_stride_head) * elem);
    for (int u = threadIdx.x; u < units; u += blockDim.x) {
      const U k = key[u], v = value[u];
      k_dst[u] = k;
      v_dst[u] = v;
    }
  }
  ignis_pdl_launch_dependents();
}

/* 1 if the pointer and every byte stride (in elements, times elem) are multiples of unit. */
static bool aligned_to(int64_t unit, const void *ptr, int64_t elem, const int64_t *strides, int count) {
  if ((uintptr_t)ptr % (uint64_t)unit != 0)
    return false;
  for (int i = 0; i < count; ++i)
    if (strides[i] * elem % unit != 0)
      return false;
  return true;
}

template <typename U> static ignis_status launch_append(const ignis_append_kv_params &p, cudaStream_t stream) {
  const int64_t units = p.cache.head_dim * (int64_t)ignis_dtype_size(p.cache.dtype) / (int64_t)sizeof(U);
  int group = 1;
  while (group < 32 && group < units)
    group <<= 1;
  const int64_t rows_per_block = APPEND_BLOCK_THREADS / group;
  const int64_t rows = p.nnz * p.cache.num_kv_heads;
  int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  if (blocks > MAX_GRID_BLOCKS)
    blocks = MAX_GRID_BLOCKS;
  IGNIS_CUDA_CHECK(ignis_launch(append_kernel<U>, dim3((unsigned)blocks), dim3(group, (unsigned)rows_per_block), 0,
                                stream, p));
  return IGNIS_OK;
}

ignis_status ignis_cuda_append_paged_kv(const ignis_append_kv_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  const ignis_append_kv_params &p = *params;
  const ignis_paged_kv_params &c = p.cache;
  const int64_t elem = (int64_t)ignis_dtype_size(c.dtype);
  const int64_t row_bytes = c.head_dim * elem;
  const int64_t key_strides[] = {p.key_stride_token, p.key_stride_head};
  const int64_t value_strides[] = {p.value_stride_token, p.value_stride_head};
  const int64_t k_strides[] = {c.k_stride_page, c.k_stride_token, c.k_stride_head};
  const int64_t v_strides[] = {c.v_stride_page, c.v_stride_token, c.v_stride_head};
  int64_t unit = 16;
  while (unit > 1 && !(row_bytes % unit == 0 && aligned_to(unit, p.key, elem, key_strides, 2) &&
                       aligned_to(unit, p.value, elem, value_strides, 2) &&
                       aligned_to(unit, c.k_cache, elem, k_strides, 3) && aligned_to(unit, c.v_cache, elem, v_strides, 3)))
    unit >>= 1;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  ignis_status status;
  switch (unit) {
  case 16:
    status = launch_append<uint4>(p, s);
    break;
  case 8:
    status = launch_append<uint2>(p, s);
    break;
  case 4:
    status = launch_append<uint32_t>(p, s);
    break;
  case 2:
    status = launch_append<uint16_t>(p, s);
    break;
  default:
    status = launch_append<uint8_t>(p, s);
    break;
  }
  if (status != IGNIS_OK)
    return status;
  return ignis_check_launch("append_paged_kv_cache");
}

/* One thread per appended token (BATCH_POSITIONS) or per request (SEQ_LENS). */
__global__ void __launch_bounds__(INDEX_BLOCK_THREADS) kv_index_kernel(ignis_kv_index_params p) {
  ignis_pdl_wait();
  if (p.kind == IGNIS_KV_INDEX_SEQ_LENS) {
    for (int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; b < p.batch_size;
         b += (int64_t)gridDim.x * blockDim.x) {
      const int64_t pages = (int64_t)p.indptr[b + 1] - p.indptr[b];
      p.seq_lens_out[b] = pages > 0 ? (int32_t)((pages - 1) * p.page_size + p.last_page_len[b]) : 0;
    }
    return;
  }
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < p.nnz; t += (int64_t)gridDim.x * blockDim.x) {
    /* The last request b with indptr[b] <= t; t belongs to it if t < indptr[b + 1]. */
    int64_t lo = 0, hi = p.batch_size; /* invariant: indptr[lo] <= t, answer in [lo, hi) */
    if (t < p.indptr[0] || t >= p.indptr[p.batch_size])
      continue;
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) >> 1;
      if (p.indptr[mid] <= t)
        lo = mid;
      else
        hi = mid;
    }
    const int64_t first = p.indptr[lo], count = (int64_t)p.indptr[lo + 1] - first;
    if (t >= first + count)
      continue;
    p.batch_indices[t] = (int32_t)lo;
    p.positions[t] = (int32_t)(p.seq_lens_in[lo] - count + (t - first));
  }
}

ignis_status ignis_cuda_kv_index(const ignis_kv_index_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  const int64_t work = params->kind == IGNIS_KV_INDEX_SEQ_LENS ? params->batch_size : params->nnz;
  int64_t blocks = (work + INDEX_BLOCK_THREADS - 1) / INDEX_BLOCK_THREADS;
  if (blocks > MAX_GRID_BLOCKS)
    blocks = MAX_GRID_BLOCKS;
  IGNIS_CUDA_CHECK(ignis_launch(kv_index_kernel, dim3((unsigned)blocks), dim3(INDEX_BLOCK_THREADS), 0,
                                static_cast<cudaStream_t>(stream), *params));
  return ignis_check_launch("paged KV index");
}
