/* The flat params of the MLA ops (include/ignis/mla.h), filled by src/core/op_mla.c and read by
 * the backends' mla / append_paged_mla_kv entry points.
 *
 * Attention: element addresses, in elements of each tensor's dtype (the cache's may be fp8),
 *   q_nope[t, h, c] = q_nope + t * q_nope_stride_token + h * q_nope_stride_head + c   (c < 512)
 *   q_pe[t, h, c]   = q_pe + t * q_pe_stride_token + h * q_pe_stride_head + c         (c < 64)
 *   ckv[p, s, c]    = ckv + p * ckv_stride_page + s * ckv_stride_token + c
 *   kpe[p, s, c]    = kpe + p * kpe_stride_page + s * kpe_stride_token + c
 *   out[t, h, c]    = out + t * out_stride_token + h * out_stride_head + c
 *   lse[t, h]       = lse + t * lse_stride_token + h * lse_stride_head (f32; NULL: none)
 * The schedule (sched/mla_plan.h): work [launch_work] and merge items, their counts in *header
 * (on the schedule's memory: the device for CUDA plans); partial rows f32
 * partial_out[(row * num_heads + h) * 512 + c] and partial_lse[row * num_heads + h] (base 2). */
#ifndef IGNIS_CORE_MLA_PARAMS_H
#define IGNIS_CORE_MLA_PARAMS_H

#include <stdint.h>

#include "ignis/core.h"
#include "sched/mla_plan.h"

typedef struct ignis_mla_params {
  ignis_dtype dtype;    /* q and out */
  ignis_dtype kv_dtype; /* the cache: dtype or fp8 e4m3 */
  float ckv_scale, kpe_scale;
  int64_t num_heads;
  int64_t tile_rows; /* query rows per work item (sched/mla_plan.h: 16, 32 or 64) */
  int64_t page_size;
  int32_t causal;
  float sm_scale_log2; /* sm_scale * log2(e) */
  float lse_scale;     /* 1 (base 2) or ln 2 */
  const void *q_nope, *q_pe, *ckv, *kpe;
  void *out;
  float *lse;
  int64_t q_nope_stride_token, q_nope_stride_head, q_pe_stride_token, q_pe_stride_head;
  int64_t ckv_stride_page, ckv_stride_token, kpe_stride_page, kpe_stride_token;
  int64_t out_stride_token, out_stride_head, lse_stride_token, lse_stride_head;
  const int32_t *kv_indices;
  int64_t num_pages; /* ckv's pages (the CUDA kernel clamps nothing: indices are trusted there) */
  const ignis_mla_schedule_header *header;
  const ignis_mla_work *work;
  const ignis_mla_merge *merge;
  int64_t launch_work, launch_merge; /* the last update's counts (grids outside a graph capture) */
  int64_t max_work, max_merge;       /* the plan's bounds (grids of a captured run) */
  float *partial_out, *partial_lse;
} ignis_mla_params;

/* append_paged_mla_kv_cache: token t goes to page kv_indices[kv_indptr[batch_indices[t]] +
 * positions[t] / page_size], slot positions[t] % page_size. */
typedef struct ignis_append_mla_params {
  ignis_dtype dtype; /* rows and caches: f16, bf16 or fp8 e4m3 */
  int64_t nnz, page_size, num_pages, batch_size;
  const void *append_ckv, *append_kpe;
  int64_t append_ckv_stride, append_kpe_stride;
  void *ckv, *kpe;
  int64_t ckv_stride_page, ckv_stride_token, kpe_stride_page, kpe_stride_token;
  const int32_t *batch_indices, *positions, *kv_indices, *kv_indptr;
} ignis_append_mla_params;

#endif
