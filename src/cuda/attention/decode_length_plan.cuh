/* decode_length_plan_kernel: plans a block-table batch from its lengths on the device (core/params.h:
 * length_plan), one block, launched before the attention kernel of the same run, which then runs the
 * schedule as a planned one. It computes what the host planner computes for those lengths
 * (sched/decode_plan.c: ignis_decode_length_chunk_pages and ignis_decode_plan_lengths, the CPU
 * backend's), so a block-table run and a planned run of the same lengths attend the same items.
 *
 * Steps, every thread agreeing on each result through shared memory:
 *   1. each request's length (ignis_block_table_request_len) and counted pages
 *      (ignis_decode_length_pages) into shared memory, and the longest;
 *   2. the chunk: none when no request is longer than min_chunk_pages, else the smallest chunk c in
 *      [min_chunk_pages, longest] whose items sum(ignis_decode_length_items(pages, c)) fit
 *      wave_items (the items fall as c grows, and c = longest fits: the batch is below a wave). A
 *      k-ary search: each round every warp counts the items of one candidate chunk, the candidates
 *      cutting the interval (known failing, known fitting] into LENGTH_PLAN_WARPS + 1 parts, so a
 *      range of 512 pages takes 3 rounds (the host bisects; both find the same smallest chunk);
 *   3. items and partial rows per request, their exclusive prefix sums over the batch (each thread
 *      a contiguous run of requests, then a block scan), and the schedule written: header,
 *      request_partials, work, and the merge counters after work[num_work] zeroed.
 * It waits on the previous kernel before reading anything (the previous run's attention kernel may
 * still read this schedule), and lets the attention grid launch at once: that grid waits for this
 * one to finish before it reads an item (decode_config.device_schedule, fetch_item). */
#ifndef IGNIS_CUDA_DECODE_LENGTH_PLAN_CUH
#define IGNIS_CUDA_DECODE_LENGTH_PLAN_CUH

#include "cuda/common/cuda_common.cuh"
#include "ignis/decode.h"
#include "sched/decode_plan.h"

enum { LENGTH_PLAN_THREADS = 512, LENGTH_PLAN_WARPS = LENGTH_PLAN_THREADS / 32 };

__global__ void __launch_bounds__(LENGTH_PLAN_THREADS) decode_length_plan_kernel(const ignis_decode_params p) {
  __shared__ int32_t lens[IGNIS_DECODE_LENGTH_PLAN_MAX_BATCH], pages[IGNIS_DECODE_LENGTH_PLAN_MAX_BATCH];
  __shared__ uint32_t fits[LENGTH_PLAN_WARPS];
  __shared__ int32_t warp_sums[2][LENGTH_PLAN_WARPS];
  __shared__ int32_t longest;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t batch = (int32_t)p.cache.batch_size, page_size = (int32_t)p.cache.page_size;
  const ignis_decode_length_plan lp = p.length_plan;
  ignis_pdl_wait();
  ignis_pdl_launch_dependents();

  /* 1. lengths and counted pages */
  if (tid == 0)
    longest = 0;
  __syncthreads();
  int32_t mine = 0;
  for (int32_t b = tid; b < batch; b += LENGTH_PLAN_THREADS) {
    const int32_t len =
        (int32_t)ignis_block_table_request_len(p.cache.seq_lens[b], p.cache.pages_per_seq, p.cache.page_size);
    lens[b] = len;
    pages[b] = ignis_decode_length_pages(len, page_size, lp.bound_pages);
    mine = max(mine, pages[b]);
  }
  mine = __reduce_max_sync(0xffffffffu, mine);
  if (lane == 0)
    atomicMax(&longest, mine);
  __syncthreads();

  /* 2. the chunk (0: no split) */
  int32_t chunk = 0;
  if (longest > lp.min_chunk_pages) {
    int32_t fail = lp.min_chunk_pages - 1, fit = longest; /* chunks <= fail do not fit, fit fits */
    while (fit - fail > 1) {
      const int32_t c = fail + (int32_t)((int64_t)(fit - fail) * (warp + 1) / (LENGTH_PLAN_WARPS + 1));
      uint32_t items = 0;
      if (c > fail)
        for (int32_t b = lane; b < batch; b += 32)
          items += min((uint32_t)ignis_decode_length_items(pages[b], c), (uint32_t)lp.wave_items + 1u);
      items = __reduce_add_sync(0xffffffffu, items);
      if (lane == 0)
        fits[warp] = c > fail && items <= (uint32_t)lp.wave_items;
      __syncthreads();
      /* the candidates rise with the warp: those that fit are a suffix */
      int32_t new_fail = fail, new_fit = fit;
      for (int k = LENGTH_PLAN_WARPS - 1; k >= 0; --k) {
        const int32_t ck = fail + (int32_t)((int64_t)(fit - fail) * (k + 1) / (LENGTH_PLAN_WARPS + 1));
        if (fits[k])
          new_fit = ck;
        else if (ck > new_fail)
          new_fail = ck;
      }
      __syncthreads(); /* every thread has read fits before the next round writes it */
      fail = new_fail;
      fit = new_fit;
    }
    chunk = fit;
  }

  /* 3. items and partial rows per request, a contiguous run of requests per thread */
  const int32_t per_thread = (batch + LENGTH_PLAN_THREADS - 1) / LENGTH_PLAN_THREADS;
  const int32_t b0 = min(tid * per_thread, batch), b1 = min(b0 + per_thread, batch);
  int32_t run_items = 0, run_partials = 0;
  for (int32_t b = b0; b < b1; ++b) {
    const int32_t n = ignis_decode_length_items(pages[b], chunk);
    run_items += n;
    run_partials += n > 1 ? n : 0;
  }
  /* exclusive prefix sums over the threads: within the warp, then over the warps' totals */
  int32_t scan_items = run_items, scan_partials = run_partials;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int32_t ui = __shfl_up_sync(0xffffffffu, scan_items, d), up = __shfl_up_sync(0xffffffffu, scan_partials, d);
    if (lane >= d) {
      scan_items += ui;
      scan_partials += up;
    }
  }
  if (lane == 31) {
    warp_sums[0][warp] = scan_items;
    warp_sums[1][warp] = scan_partials;
  }
  __syncthreads();
  int32_t item = scan_items - run_items, partial = scan_partials - run_partials;
  int32_t num_work = 0, num_partials = 0;
  for (int w = 0; w < LENGTH_PLAN_WARPS; ++w) {
    if (w < warp) {
      item += warp_sums[0][w];
      partial += warp_sums[1][w];
    }
    num_work += warp_sums[0][w];
    num_partials += warp_sums[1][w];
  }

  ignis_decode_work *work = const_cast<ignis_decode_work *>(p.work);
  int32_t *request_partials = const_cast<int32_t *>(p.request_partials);
  const int64_t chunk_tokens = (int64_t)chunk * page_size;
  for (int32_t b = b0; b < b1; ++b) {
    const int32_t n = ignis_decode_length_items(pages[b], chunk);
    request_partials[b] = partial;
    for (int32_t i = 0; i < n; ++i) {
      const ignis_decode_work w = {b, (int32_t)(i * chunk_tokens), i == n - 1 ? lens[b] : (int32_t)((i + 1) * chunk_tokens),
                                   n > 1 ? partial + i : -1};
      work[item + i] = w;
    }
    item += n;
    partial += n > 1 ? n : 0;
  }
  if (tid == 0) {
    request_partials[batch] = num_partials;
    ignis_decode_schedule_header *header =
        reinterpret_cast<ignis_decode_schedule_header *>(const_cast<int32_t *>(p.num_work));
    header->num_work = num_work;
    header->batch_size = batch;
    header->num_partials = num_partials;
    header->chunk_pages = num_partials > 0 ? chunk : 0;
  }
  /* the merge counters of this schedule, right after its items (core/params.h), zero */
  uint32_t *counters = reinterpret_cast<uint32_t *>(work + num_work);
  const int64_t num_counters = ignis_decode_merge_counter_count(num_partials, batch, p.num_kv_heads);
  for (int64_t i = tid; i < num_counters; i += LENGTH_PLAN_THREADS)
    counters[i] = 0;
}

#endif
