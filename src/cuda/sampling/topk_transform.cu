/* CUDA backend of the fused top-k transforms (include/ignis/topk.h): for each row, the k largest
 * scores of its window, written as their transformed local indices in ascending order. One block of
 * 1024 threads per row; the result is exactly the CPU backend's (src/cpu/topk_transform.c).
 *
 *   window    clamped as the header says; a window of at most k scores selects all of it, and
 *             the block writes 0 .. len-1 and the -1 padding at once.
 *   threshold a radix select over 32-bit order keys (NaN 0, below every number), one 8-bit digit
 *             at a time from the top: a histogram of the keys that match the digits chosen so far
 *             (shared-memory atomics, spread over HIST_COPIES copies so hot bins collide less),
 *             then the highest digit whose suffix count reaches what is still needed. Once the
 *             keys matching the chosen digits fit CANDIDATE_CAP (for real scores after the first
 *             digit), one more pass gathers them into shared memory and the remaining digits are
 *             resolved there, so a typical row costs three passes over global memory: histogram,
 *             gather, compaction. Rows of many equal scores simply keep histogramming the row.
 *   selection the k-th largest key t, the number of keys equal to it and how many of those are
 *             taken. A compaction pass in index order (tiles of ITEMS consecutive scores per thread
 *             and a block prefix sum of the (above t, equal to t) counts, packed in one word)
 *             gives every selected score its output slot: the number of selected scores before
 *             it. Ties are taken first to last (tie_break SMALL / NONE) or last to first (LARGE).
 *   transform each selected local index is mapped (page table or offset) as it is written.
 * Shared memory is static (~43 KB). Every loop is bounded by the clamped window or by k, and every
 * output slot written is checked against k, whatever the index arrays hold. */
#include "cuda/sampling/sampling_common.cuh"

namespace {
using ignis_sampling::block_prefix;
using ignis_sampling::reduce_scratch;

constexpr int TX_THREADS = 1024;
constexpr int DIGIT_BITS = 8;
constexpr int DIGITS = 1 << DIGIT_BITS;
constexpr int HIST_COPIES = 16; /* warps c and c + 16 count into copy c */
constexpr int CANDIDATE_CAP = 6144;
constexpr int ITEMS = 4;  /* consecutive scores per thread in the compaction */
constexpr int UNROLL = 4; /* loads in flight per thread in the row passes */

struct transform_smem {
  uint32_t hist[HIST_COPIES][DIGITS];
  uint32_t total[DIGITS];
  uint32_t candidates[CANDIDATE_CAP];
  reduce_scratch red;
  uint32_t candidate_count;
  uint32_t digit, need, in_bin;
};

template <typename T> __device__ __forceinline__ uint32_t score_key(T v) {
  const float f = ignis_to_float(v);
  return isnan(f) ? 0u : ignis_order_key(f);
}

/* What a row's selected local indices are written through. */
struct row_out {
  int32_t *out;
  int32_t *raw;         /* NULL: not asked for */
  const int32_t *pages; /* PAGE_TABLE: the row's page-table row, NULL when its batch is out of range */
  int64_t pt_start;
  int64_t offset; /* RAGGED */
};

__device__ __forceinline__ int32_t low32(int64_t v) {
  return (int32_t)(uint32_t)(uint64_t)v;
}

/* Output slot `slot` of the row gets local index j (-1: padding). */
__device__ __forceinline__ void emit(const ignis_topk_transform_params &p, const row_out &o, int64_t slot,
                                     int64_t j) {
  if (slot < 0 || slot >= p.k)
    return;
  int32_t value = -1;
  if (j >= 0 && p.kind == IGNIS_TOPK_TRANSFORM_RAGGED) {
    value = low32(j + o.offset);
  } else if (j >= 0 && o.pages) {
    const int64_t s = o.pt_start + (j >> p.page_shift);
    if (s >= 0 && s < p.page_table_width)
      value = low32((int64_t)o.pages[s] * p.page_size + (j & (p.page_size - 1)));
  }
  o.out[slot] = value;
  if (o.raw)
    o.raw[slot] = (int32_t)j;
}

/* Histogram step: count the key's digit when the key matches the prefix. */
__device__ __forceinline__ void count_key(uint32_t key, uint32_t mask, uint32_t prefix, int shift,
                                          uint32_t *hist) {
  if ((key & mask) == prefix)
    atomicAdd(&hist[(key >> shift) & (DIGITS - 1)], 1u);
}

/* Gather step: keep a key that matches the (now longer) prefix. */
__device__ __forceinline__ void gather_key(uint32_t key, uint32_t mask, uint32_t prefix, transform_smem &sm) {
  if ((key & mask) == prefix) {
    const uint32_t at = atomicAdd(&sm.candidate_count, 1u);
    if (at < CANDIDATE_CAP)
      sm.candidates[at] = key;
  }
}

/* One pass over the row's window: histogram (GATHER false) or gather (true). */
template <typename T, bool GATHER>
__device__ __forceinline__ void row_pass(const T *row, int64_t len, uint32_t mask, uint32_t prefix, int shift,
                                         transform_smem &sm) {
  uint32_t *hist = sm.hist[(threadIdx.x >> 5) % HIST_COPIES];
  const int64_t step = (int64_t)UNROLL * TX_THREADS;
  int64_t base = 0;
  for (; base + step <= len; base += step) {
    T v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      v[u] = row[base + u * TX_THREADS + threadIdx.x];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      if constexpr (GATHER)
        gather_key(score_key(v[u]), mask, prefix, sm);
      else
        count_key(score_key(v[u]), mask, prefix, shift, hist);
    }
  }
  for (int64_t j = base + threadIdx.x; j < len; j += TX_THREADS) {
    if constexpr (GATHER)
      gather_key(score_key(row[j]), mask, prefix, sm);
    else
      count_key(score_key(row[j]), mask, prefix, shift, hist);
  }
}

/* The k-th largest key of the window (k < len), with the count of keys equal to it (*equal) and
 * how many of those are selected (*take). */
template <typename T>
__device__ __forceinline__ uint32_t kth_largest_key(const T *row, int64_t len, int64_t k, transform_smem &sm,
                                                    uint32_t *equal, uint32_t *take) {
  uint32_t prefix = 0, mask = 0, need = (uint32_t)k, in_bin = (uint32_t)len, candidates = 0;
  bool in_shared = false;
  for (int shift = 32 - DIGIT_BITS; shift >= 0; shift -= DIGIT_BITS) {
    for (int i = threadIdx.x; i < HIST_COPIES * DIGITS; i += TX_THREADS)
      sm.hist[i / DIGITS][i % DIGITS] = 0;
    __syncthreads();
    if (in_shared) {
      uint32_t *hist = sm.hist[(threadIdx.x >> 5) % HIST_COPIES];
      for (uint32_t i = threadIdx.x; i < candidates; i += TX_THREADS)
        count_key(sm.candidates[i], mask, prefix, shift, hist);
    } else {
      row_pass<T, false>(row, len, mask, prefix, shift, sm);
    }
    __syncthreads();
    for (int d = threadIdx.x; d < DIGITS; d += TX_THREADS) {
      uint32_t sum = 0;
      for (int c = 0; c < HIST_COPIES; ++c)
        sum += sm.hist[c][d];
      sm.total[d] = sum;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      /* the digits' counts sum to the keys matching the prefix, >= need: d stops at >= 0 */
      int d = DIGITS - 1;
      uint32_t rest = need;
      while (d > 0 && sm.total[d] < rest) {
        rest -= sm.total[d];
        --d;
      }
      sm.digit = (uint32_t)d;
      sm.need = rest;
      sm.in_bin = sm.total[d];
    }
    __syncthreads();
    prefix |= sm.digit << shift;
    mask |= (uint32_t)(DIGITS - 1) << shift;
    need = sm.need;
    in_bin = sm.in_bin;
    if (!in_shared && shift > 0 && in_bin <= CANDIDATE_CAP) {
      if (threadIdx.x == 0)
        sm.candidate_count = 0;
      __syncthreads();
      row_pass<T, true>(row, len, mask, prefix, shift, sm);
      __syncthreads();
      candidates = min(sm.candidate_count, (uint32_t)CANDIDATE_CAP);
      in_shared = true;
    }
    __syncthreads(); /* every thread has read sm.digit / need / in_bin before the next step rewrites them */
  }
  *equal = in_bin;
  *take = need;
  return prefix;
}

/* Writes the selected local indices (every key above thr, and `take` of the `equal` keys equal to
 * it) to slots 0 .. k-1 in ascending order. */
template <typename T>
__device__ __forceinline__ void compact(const ignis_topk_transform_params &p, const row_out &o, const T *row,
                                        int64_t len, uint32_t thr, uint32_t equal, uint32_t take,
                                        transform_smem &sm) {
  const int64_t skip = p.prefer_large ? (int64_t)equal - take : 0; /* ties passed over first */
  int64_t above_base = 0, tie_base = 0;
  for (int64_t tile = 0; tile < len; tile += (int64_t)ITEMS * TX_THREADS) {
    const int64_t j0 = tile + (int64_t)threadIdx.x * ITEMS;
    uint32_t keys[ITEMS], above = 0, ties = 0;
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      keys[u] = j0 + u < len ? score_key(row[j0 + u]) : 0u;
      above += j0 + u < len && keys[u] > thr;
      ties += j0 + u < len && keys[u] == thr;
    }
    uint32_t total;
    const uint32_t before = block_prefix<uint32_t>(above | ties << 16, total, sm.red);
    int64_t a = above_base + (before & 0xFFFFu), e = tie_base + (before >> 16);
#pragma unroll
    for (int u = 0; u < ITEMS; ++u) {
      if (j0 + u >= len)
        continue;
      if (keys[u] > thr) {
        const int64_t ties_taken = e < skip ? 0 : (e - skip < take ? e - skip : (int64_t)take);
        emit(p, o, a + ties_taken, j0 + u);
        ++a;
      } else if (keys[u] == thr) {
        if (e >= skip && e < skip + take)
          emit(p, o, a + (e - skip), j0 + u);
        ++e;
      }
    }
    above_base += total & 0xFFFFu;
    tie_base += total >> 16;
  }
}

template <typename T>
__global__ void __launch_bounds__(TX_THREADS) topk_transform_rows(ignis_topk_transform_params p) {
  __shared__ transform_smem sm;
  ignis_pdl_wait();
  const int64_t r = blockIdx.x, n = p.max_len;
  int64_t start = p.row_starts ? p.row_starts[r] : 0, len = p.lengths[r];
  start = start < 0 ? 0 : (start > n ? n : start);
  len = len < 0 ? 0 : (len > n - start ? n - start : len);

  row_out o;
  o.out = p.out + r * p.out_row_stride;
  o.raw = p.raw_out ? p.raw_out + r * p.raw_out_row_stride : nullptr;
  o.pages = nullptr;
  o.pt_start = 0;
  o.offset = 0;
  if (p.kind == IGNIS_TOPK_TRANSFORM_RAGGED) {
    o.offset = p.offsets[r];
  } else {
    const int64_t b = p.row_to_batch ? p.row_to_batch[r] : r;
    if (b >= 0 && b < p.page_table_rows)
      o.pages = p.page_table + b * p.page_table_row_stride;
    o.pt_start = p.page_table_row_starts ? p.page_table_row_starts[r] : 0;
  }

  if (len <= p.k) {
    for (int64_t i = threadIdx.x; i < p.k; i += TX_THREADS)
      emit(p, o, i, i < len ? i : -1);
    return;
  }
  const T *row = static_cast<const T *>(p.input) + r * p.input_row_stride + start;
  uint32_t equal, take;
  const uint32_t thr = kth_largest_key(row, len, p.k, sm, &equal, &take);
  compact(p, o, row, len, thr, equal, take, sm);
}

template <typename T> static cudaError_t launch(const ignis_topk_transform_params *p, cudaStream_t stream) {
  return ignis_launch(topk_transform_rows<T>, dim3((unsigned)p->num_rows), dim3(TX_THREADS), 0, stream, *p);
}

} // namespace

extern "C" ignis_status ignis_cuda_topk_transform(const ignis_topk_transform_params *params, int32_t device,
                                                  void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return ignis_sampling::launch_rows("ignis_cuda_topk_transform", params->num_rows, params->dtype,
                                     [&](auto t) { return launch<decltype(t)>(params, s); });
}
