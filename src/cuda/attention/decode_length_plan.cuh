/* Block-table batches planned from their lengths on the device (core/params.h: length_plan): every
 * block of the attention kernel plans the batch itself and keeps its own item (decode_length_item),
 * so nothing runs between the attention grids of two calls (a planner kernel before the attention
 * kernel and its hand-off cost 6-13 us a call, notes/PERF.md). It computes what the host planner
 * computes for those lengths (sched/decode_plan.c: ignis_decode_length_chunk_pages and
 * ignis_decode_plan_lengths, the CPU backend's), so a block-table run and a planned run of the same
 * lengths attend the same items. Split requests merge in the transposed kernel on the merge counters
 * of the plan's length area (merge_in_kernel, with the request's partial rows the block found), or
 * in the m16 kernel's merge kernel, from the request_partials block 0 writes.
 *
 * Steps, every thread of the block agreeing on each result through shared memory:
 *   1. each request's length (ignis_block_table_request_len) and counted pages
 *      (ignis_decode_length_pages) into shared memory, and the longest (length_plan_chunk);
 *   2. the chunk: none when no request is longer than min_chunk_pages, else the smallest chunk c in
 *      [min_chunk_pages, longest] whose items sum(ignis_decode_length_items(pages, c)) fit
 *      wave_items (the items fall as c grows, and c = longest fits: the batch is below a wave). A
 *      k-ary search: each round LENGTH_PLAN_CANDIDATES groups of threads each count the items of
 *      one candidate chunk, the candidates cutting the interval (known failing, known fitting]
 *      into LENGTH_PLAN_CANDIDATES + 1 parts, so a range of 4096 pages takes 3 rounds (the host
 *      bisects; both find the same smallest chunk);
 *   3. items and partial rows per request, their exclusive prefix sums over the batch (each thread
 *      a contiguous run of requests, then a block scan: length_plan_scan), and the block's item in
 *      the run of the thread that holds it (length_plan_find). */
#ifndef IGNIS_CUDA_DECODE_LENGTH_PLAN_CUH
#define IGNIS_CUDA_DECODE_LENGTH_PLAN_CUH

#include "cuda/common/cuda_common.cuh"
#include "ignis/decode.h"
#include "sched/decode_plan.h"

enum { LENGTH_PLAN_CANDIDATES = 16 /* chunks counted per search round */ };

/* Request b's keys as a length plan reads them: from L2 (ld.global.cg), so that no SM's L1 keeps a
 * copy read before the wait on the previous kernel (decode_length_item). */
__device__ __forceinline__ int32_t length_plan_len(const ignis_decode_params &p, int32_t b) {
  return (int32_t)ignis_block_table_request_len(__ldcg(p.cache.seq_lens + b), p.cache.pages_per_seq,
                                                p.cache.page_size);
}

/* Steps 1 and 2 by the THREADS threads of a block: lens and pages of the batch's requests into
 * shared memory (room for cache.batch_size each), and the chunk in pages (0: no split). */
template <int THREADS>
__device__ __forceinline__ int32_t length_plan_chunk(const ignis_decode_params &p, int32_t *lens, int32_t *pages) {
  constexpr int LANES = THREADS / LENGTH_PLAN_CANDIDATES; /* threads counting one candidate */
  static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "candidate groups within a warp");
  __shared__ uint32_t fits[LENGTH_PLAN_CANDIDATES];
  __shared__ int32_t longest;
  const int tid = threadIdx.x, lane = tid & 31;
  const int32_t batch = (int32_t)p.cache.batch_size, page_size = (int32_t)p.cache.page_size;
  const ignis_decode_length_plan lp = p.length_plan;

  /* 1. lengths and counted pages */
  if (tid == 0)
    longest = 0;
  __syncthreads();
  int32_t mine = 0;
  for (int32_t b = tid; b < batch; b += THREADS) {
    const int32_t len = length_plan_len(p, b);
    lens[b] = len;
    pages[b] = ignis_decode_length_pages(len, page_size, lp.bound_pages);
    mine = max(mine, pages[b]);
  }
  mine = __reduce_max_sync(0xffffffffu, mine);
  if (lane == 0)
    atomicMax(&longest, mine);
  __syncthreads();

  /* 2. the chunk (0: no split) */
  if (longest <= lp.min_chunk_pages)
    return 0;
  const int k = tid / LANES, member = tid % LANES;
  int32_t fail = lp.min_chunk_pages - 1, fit = longest; /* chunks <= fail do not fit, fit fits */
  while (fit - fail > 1) {
    const int32_t c = fail + (int32_t)((int64_t)(fit - fail) * (k + 1) / (LENGTH_PLAN_CANDIDATES + 1));
    uint32_t items = 0;
    if (c > fail)
      for (int32_t b = member; b < batch; b += LANES)
        items += min((uint32_t)ignis_decode_length_items(pages[b], c), (uint32_t)lp.wave_items + 1u);
#pragma unroll
    for (int d = LANES / 2; d > 0; d /= 2) /* within the group: xor offsets below LANES */
      items += __shfl_xor_sync(0xffffffffu, items, d);
    if (member == 0)
      fits[k] = c > fail && items <= (uint32_t)lp.wave_items;
    __syncthreads();
    /* the candidates rise with k: those that fit are a suffix */
    int32_t new_fail = fail, new_fit = fit;
    for (int j = LENGTH_PLAN_CANDIDATES - 1; j >= 0; --j) {
      const int32_t cj = fail + (int32_t)((int64_t)(fit - fail) * (j + 1) / (LENGTH_PLAN_CANDIDATES + 1));
      if (fits[j])
        new_fit = cj;
      else if (cj > new_fail)
        new_fail = cj;
    }
    __syncthreads(); /* every thread has read fits before the next round writes it */
    fail = new_fail;
    fit = new_fit;
  }
  return fit;
}

/* Step 3's sums: thread tid's contiguous run of requests [b0, b1), the items and partial rows
 * before it (item, partial) and the batch's (num_work, num_partials). */
struct length_plan_run {
  int32_t b0, b1, item, partial, num_work, num_partials;
};
template <int THREADS>
__device__ __forceinline__ length_plan_run length_plan_scan(const ignis_decode_params &p, const int32_t *pages,
                                                            int32_t chunk) {
  constexpr int WARPS = THREADS / 32;
  __shared__ int32_t warp_sums[2][WARPS];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t batch = (int32_t)p.cache.batch_size;
  const int32_t per_thread = (batch + THREADS - 1) / THREADS;
  length_plan_run r;
  r.b0 = min(tid * per_thread, batch);
  r.b1 = min(r.b0 + per_thread, batch);
  int32_t run_items = 0, run_partials = 0;
  for (int32_t b = r.b0; b < r.b1; ++b) {
    const int32_t n = ignis_decode_length_items(pages[b], chunk);
    run_items += n;
    run_partials += n > 1 ? n : 0;
  }
  /* exclusive prefix sums over the threads: within the warp, then over the warps' totals */
  const int32_t scan_items = ignis_warp_inclusive_sum(run_items),
                scan_partials = ignis_warp_inclusive_sum(run_partials);
  if (lane == 31) {
    warp_sums[0][warp] = scan_items;
    warp_sums[1][warp] = scan_partials;
  }
  __syncthreads();
  r.item = scan_items - run_items;
  r.partial = scan_partials - run_partials;
  r.num_work = r.num_partials = 0;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    if (w < warp) {
      r.item += warp_sums[0][w];
      r.partial += warp_sums[1][w];
    }
    r.num_work += warp_sums[0][w];
    r.num_partials += warp_sums[1][w];
  }
  return r;
}

/* What decode_length_item finds for a block (shared memory): its item, and the first partial row
 * and the partial rows of the item's request (rows[0], rows[1]; merge_in_kernel's). */
struct length_plan_found {
  ignis_decode_work item;
  int32_t rows[2];
};

/* Whether item w exists in the batch planned from the lengths in lens (step 3 after
 * length_plan_chunk); if so, the thread whose run holds it writes it to *found. */
template <int THREADS>
__device__ __forceinline__ bool length_plan_find(const ignis_decode_params &p, int w, int32_t *lens, int32_t *pages,
                                                 length_plan_found *found, length_plan_run &r, int32_t &chunk) {
  chunk = length_plan_chunk<THREADS>(p, lens, pages);
  r = length_plan_scan<THREADS>(p, pages, chunk);
  if (w >= r.num_work)
    return false; /* every thread: the sums are the block's */
  if (w >= r.item) {
    int32_t at = r.item, first = r.partial;
    for (int32_t b = r.b0; b < r.b1; ++b) {
      const int32_t n = ignis_decode_length_items(pages[b], chunk);
      if (w < at + n) { /* chunk i of request b: keys to the chunk's end, the last to the request's */
        const int32_t i = w - at;
        const int64_t chunk_tokens = (int64_t)chunk * p.cache.page_size;
        const ignis_decode_work item = {b, (int32_t)(i * chunk_tokens),
                                        i == n - 1 ? lens[b] : (int32_t)((i + 1) * chunk_tokens), n > 1 ? first + i : -1};
        found->item = item;
        found->rows[0] = first;
        found->rows[1] = n > 1 ? n : 0;
        break;
      }
      at += n;
      first += n > 1 ? n : 0;
    }
  }
  return true;
}

/* Whether item w exists in the batch as the calling block plans it (all THREADS threads; scratch:
 * shared memory for 2 x cache.batch_size int32 that nothing else uses until this returns); if so,
 * *found (shared) holds it when this returns. request_partials, when not NULL, gets the batch's
 * (first partial row of each request, and the total after them). It waits on the previous kernel
 * (ignis_pdl_wait) itself. The plan is made from lengths read before that wait, so that it runs
 * under the previous kernel's tail, and checked after it: every length is read again, and any that
 * changed (a previous kernel that let this one launch early and wrote seq_lens) makes the block
 * plan again from the lengths read after the wait. A plan from lengths that were not yet written is
 * discarded that way; the planning is bounded for any lengths (they are clipped to the table and
 * the bound). */
template <int THREADS>
__device__ __forceinline__ bool decode_length_item(const ignis_decode_params &p, int w, int32_t *scratch,
                                                   length_plan_found *found, int32_t *request_partials) {
  const int32_t batch = (int32_t)p.cache.batch_size;
  int32_t *lens = scratch, *pages = scratch + batch;
  bool fetched, waited = false;
  length_plan_run r;
  int32_t chunk;
  for (;;) {
    fetched = length_plan_find<THREADS>(p, w, lens, pages, found, r, chunk);
    if (waited)
      break;
    ignis_pdl_wait();
    waited = true;
    int changed = 0;
    for (int32_t b = threadIdx.x; b < batch; b += THREADS)
      changed |= length_plan_len(p, b) != lens[b];
    /* a barrier too: every read of lens and pages is done, and *found written, before a new plan
     * writes them */
    if (!__syncthreads_or(changed))
      break;
  }
  if (request_partials != nullptr) { /* after the wait: the previous run's merge kernel is done */
    int32_t partial = r.partial;
    for (int32_t b = r.b0; b < r.b1; ++b) {
      request_partials[b] = partial;
      const int32_t n = ignis_decode_length_items(pages[b], chunk);
      partial += n > 1 ? n : 0;
    }
    if (threadIdx.x == 0)
      request_partials[batch] = r.num_partials;
  }
  __syncthreads(); /* the last plan's *found is written, its lens and pages read: the caller may
                      reuse the scratch */
  return fetched;
}

#endif
