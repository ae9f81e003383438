/* Which rows a block of a grouped GEMM kernel owns, found on the device from m_indptr (the host
 * never reads it): groups are cut into chunks of at most `chunk_rows` rows, the chunks numbered in
 * group order (group 0's chunks first), and a block whose slot is s takes chunk s. A slot past the
 * last chunk, or a chunk of a group whose weight index is out of range, is "no chunk" (group -1):
 * the block exits.
 *
 * Offsets are clamped into [0, M] and a decreasing pair is an empty group, so any m_indptr is
 * memory-safe. For offsets that are valid (non-decreasing within [0, M]) the chunk count is at most
 * ignis_grouped_chunk_slots(M, G, chunk_rows): a grid of that many slots covers every distribution.
 *
 * The search: the block's threads take THREADS groups at a time, each counting its group's chunks;
 * a block-wide prefix sum (warp shuffles, then the warps' totals in shared memory) tells each
 * thread where its group's chunks start, and the thread whose range holds s records the chunk.
 * G <= THREADS costs one step: two index loads per thread and two barriers. */
#ifndef IGNIS_CUDA_GEMM_GROUPED_ROWS_CUH
#define IGNIS_CUDA_GEMM_GROUPED_ROWS_CUH

#include <stdint.h>

#include "cuda/common/cuda_common.cuh"

/* Where the groups are described (device pointers; the i64 flags give the index dtypes). */
struct ignis_grouped_rows {
  const void *m_indptr;       /* [G + 1], or NULL: every group spans all M rows (a dense product: G 1) */
  const void *weight_indices; /* [G], or NULL: group g uses weight g */
  int indptr_i64, weight_i64;
  int groups, num_weights, m;
};

/* One chunk: rows row0 .. row0 + rows of a and out, multiplied by weight `weight`. */
struct ignis_grouped_chunk {
  int group, weight, row0, rows;
};

/* Host and device: the chunks of any valid distribution of at most m rows over `groups` groups in
 * chunks of chunk_rows: at most min(G, M) groups hold rows, and each chunk past a group's first
 * holds chunk_rows of the rows left over. */
__host__ __device__ inline int64_t ignis_grouped_chunk_slots(int64_t m, int64_t groups, int chunk_rows) {
  const int64_t busy = groups < m ? groups : m;
  return busy + (m - busy) / chunk_rows;
}

__device__ __forceinline__ int64_t ignis_grouped_index(const void *base, int i64, int64_t i) {
  return i64 ? static_cast<const int64_t *>(base)[i] : static_cast<const int32_t *>(base)[i];
}

/* The chunk of `slot`; every thread of the block (THREADS of them, a multiple of 32) must call it
 * and gets the same answer. */
template <int THREADS>
__device__ ignis_grouped_chunk ignis_grouped_find_chunk(const ignis_grouped_rows &rows, int slot,
                                                        int chunk_rows) {
  constexpr int WARPS = THREADS / 32;
  __shared__ int warp_total[WARPS];
  __shared__ int found[3]; /* group, first row, end row */
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (rows.groups <= 0)
    return ignis_grouped_chunk{-1, -1, 0, 0};
  if (tid == 0)
    found[0] = -1;
  int before_step = 0; /* chunks of the groups of earlier steps */
  for (int base = 0; base < rows.groups; base += THREADS) {
    const int g = base + tid;
    int begin = 0, end = 0, count = 0;
    if (g < rows.groups) {
      int64_t b = rows.m_indptr ? ignis_grouped_index(rows.m_indptr, rows.indptr_i64, g) : 0;
      int64_t e = rows.m_indptr ? ignis_grouped_index(rows.m_indptr, rows.indptr_i64, g + 1) : rows.m;
      b = b < 0 ? 0 : b > rows.m ? rows.m : b;
      e = e < b ? b : e > rows.m ? rows.m : e;
      begin = (int)b;
      end = (int)e;
      count = (end - begin + chunk_rows - 1) / chunk_rows;
    }
    const int inclusive = ignis_warp_inclusive_sum(count);
    if (lane == 31)
      warp_total[warp] = inclusive;
    __syncthreads(); /* also orders found[0] = -1 before any thread records a chunk */
    int first = before_step, step_end = before_step;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      first += w < warp ? warp_total[w] : 0;
      step_end += warp_total[w];
    }
    first += inclusive - count; /* this group's first chunk */
    if (slot >= first && slot < first + count) {
      found[0] = g;
      found[1] = begin + (slot - first) * chunk_rows;
      found[2] = end;
    }
    before_step = step_end;
    __syncthreads(); /* found[] written; warp_total[] free for the next step */
    if (found[0] >= 0 || slot < before_step)
      break;
  }
  ignis_grouped_chunk c;
  c.group = found[0];
  c.row0 = c.group >= 0 ? found[1] : 0;
  c.rows = c.group >= 0 ? min(chunk_rows, found[2] - found[1]) : 0;
  c.weight = c.group;
  if (c.group >= 0 && rows.weight_indices) {
    const int64_t w = ignis_grouped_index(rows.weight_indices, rows.weight_i64, c.group);
    if (w < 0 || w >= rows.num_weights)
      c.group = c.weight = -1;
    else
      c.weight = (int)w;
  }
  return c;
}

#endif
