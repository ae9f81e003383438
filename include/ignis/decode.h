/* Decode attention: one query token per request against its KV cache (FlashInfer's
 * single_decode_with_kv_cache and BatchDecodeWithPagedKVCacheWrapper).
 *
 * Math, per request b, query head h (KV head h / (num_qo_heads / num_kv_heads): GQA, any group
 * size), keys j of the request's kv_len keys:
 *     x_j = sm_scale * <q, k_j>;  if logits_soft_cap > 0: x_j = cap * tanh(x_j / cap)
 *     keys with j < kv_len - 1 - window_left are masked out when window_left >= 0
 *     out = sum_j softmax(x)_j v_j;   lse = log(sum_j e^{x_j}) in the chosen base
 * A request with no visible key (kv_len = 0) gets out = 0 and lse = -inf (never NaN).
 *
 * Layout: q [batch, num_qo_heads, head_dim] (single decode: [num_qo_heads, head_dim]), out the
 * same shape, lse [batch, num_qo_heads] f32 (optional); leading strides of q, out and lse may be
 * anything, the last dimension of q and out must have stride 1. On the CUDA backend q, out, K and
 * V must also start 16-byte aligned with strides that are multiples of 8 elements (the kernels
 * use 16-byte loads; IGNIS_ERROR_UNSUPPORTED otherwise, nothing written). q and out f16 or bf16 (out the
 * dtype of q); K/V f16 or bf16, the dtype of q (fp8 K/V: a later version). Head dims compiled:
 * 64, 128, 256 (IGNIS_ERROR_UNSUPPORTED otherwise). Arithmetic is f32.
 *
 * Batch decode is split in two, as in FlashInfer, so that the run is cheap and CUDA-graph safe:
 *   - ignis_decode_plan_create fixes what a captured graph may not change: device, head counts,
 *     head dim, page size, dtypes, options, the largest batch and KV length it will serve, and the
 *     split policy. It allocates only host memory (the planner's staging), and tells the size of
 *     the device workspace the caller must provide (ignis_decode_workspace_size): a guaranteed
 *     bound for every batch up to max_batch_size and KV length up to max_kv_len.
 *   - ignis_decode_plan_update takes the batch's kv_indptr and kv_last_page_len as HOST arrays,
 *     never reads device memory, never synchronizes, chooses how to split long requests across
 *     the GPU (split-KV: partial results merged by LSE), and writes its schedule into the
 *     workspace with one asynchronous copy on `stream`.
 *   - ignis_decode_run launches a grid that depends only on what plan_create fixed (so one
 *     captured graph serves every batch size up to the maximum) and reads the schedule from the
 *     workspace: re-plan outside the graph, replay it.
 * On the CPU backend (host tensors) the plan still validates and records the lengths; the run
 * computes each request directly. */
#ifndef IGNIS_DECODE_H
#define IGNIS_DECODE_H

#include "ignis/core.h"
#include "ignis/merge_state.h"
#include "ignis/paged_kv.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options of an attention call. size = sizeof(ignis_attention_options) (IGNIS_ATTENTION_OPTIONS_INIT). */
typedef struct ignis_attention_options {
  size_t size;
  double sm_scale;         /* > 0; 0 means 1 / sqrt(head_dim) */
  double logits_soft_cap;  /* 0: off; > 0: logits pass through cap * tanh(x / cap) */
  int32_t window_left;     /* -1: off; >= 0: each query sees its last window_left + 1 keys */
  ignis_lse_base lse_base; /* base of the returned LSE */
} ignis_attention_options;

#define IGNIS_ATTENTION_OPTIONS_INIT {sizeof(ignis_attention_options), 0.0, 0.0, -1, IGNIS_LSE_BASE2}

/* Single request, contiguous KV: k and v [kv_len, num_kv_heads, head_dim] (NHD) or
 * [num_kv_heads, kv_len, head_dim] (HND), any leading strides. workspace: device memory of at
 * least ignis_single_decode_workspace_size bytes for CUDA tensors (split-KV partials), NULL/0 on
 * the CPU. lse may be NULL. */
IGNIS_API ignis_status ignis_single_decode_workspace_size(int64_t num_qo_heads, int64_t head_dim,
                                                          int64_t max_kv_len, size_t *bytes);
IGNIS_API ignis_status ignis_single_decode(const ignis_tensor *q, const ignis_tensor *k, const ignis_tensor *v,
                                           ignis_kv_layout layout, const ignis_attention_options *options,
                                           ignis_tensor *out, ignis_tensor *lse, void *workspace,
                                           size_t workspace_bytes, void *stream);

/* What a decode plan is fixed to. size = sizeof(ignis_decode_plan_config) (IGNIS_DECODE_PLAN_CONFIG_INIT). */
typedef struct ignis_decode_plan_config {
  size_t size;
  ignis_device device;        /* where q, the cache and out will live */
  int64_t num_qo_heads;       /* a multiple of num_kv_heads */
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t page_size;          /* 1..256 */
  ignis_dtype q_dtype;        /* f16 or bf16; K/V and out the same */
  int64_t max_batch_size;     /* >= 1 */
  int64_t max_kv_len;         /* the longest request any plan_update may describe */
  int32_t disable_split_kv;   /* 1: one work item per (request, KV head), batch-invariant */
  int64_t fixed_split_size;   /* > 0: split every request into chunks of this many pages
                                 (deterministic: the split does not depend on the batch); 0: auto */
  ignis_attention_options options;
} ignis_decode_plan_config;

#define IGNIS_DECODE_PLAN_CONFIG_INIT                                                              \
  {sizeof(ignis_decode_plan_config), {IGNIS_DEVICE_CPU, 0}, 0, 0, 0, 0, IGNIS_BF16, 0, 0, 0, 0,   \
   IGNIS_ATTENTION_OPTIONS_INIT}

typedef struct ignis_decode_plan ignis_decode_plan;

IGNIS_API ignis_status ignis_decode_plan_create(const ignis_decode_plan_config *config,
                                                ignis_decode_plan **out_plan);
IGNIS_API ignis_status ignis_decode_plan_destroy(ignis_decode_plan *plan);

/* Device workspace bytes the plan needs (0 on the CPU); the bound holds for every update within
 * the plan's maxima. The workspace must stay the same buffer from update to run. */
IGNIS_API ignis_status ignis_decode_workspace_size(const ignis_decode_plan *plan, size_t *bytes);

/* Schedule a batch. kv_indptr_host [batch_size + 1] and kv_last_page_len_host [batch_size] are
 * host arrays describing the same batch the run will see (they are validated here: monotonic,
 * last_page_len in 1..page_size for requests with pages, lengths <= max_kv_len). The schedule is
 * copied into `workspace` on `stream` (asynchronously: the host arrays may be reused at once).
 * The plan keeps a small ring of pinned staging buffers; an update only waits if it would reuse
 * one whose previous copy has not run yet. */
IGNIS_API ignis_status ignis_decode_plan_update(ignis_decode_plan *plan, const int32_t *kv_indptr_host,
                                                const int32_t *kv_last_page_len_host, int64_t batch_size,
                                                void *workspace, size_t workspace_bytes, void *stream);

/* Run the last planned batch: q [batch, num_qo_heads, head_dim], cache with the plan's page size
 * and the batch's kv_indptr / kv_indices / kv_last_page_len (on the device; the contents must
 * describe the same lengths as the planned host arrays), out like q, lse [batch, num_qo_heads]
 * f32 or NULL. */
IGNIS_API ignis_status ignis_decode_run(const ignis_decode_plan *plan, const ignis_tensor *q,
                                        const ignis_paged_kv_cache *cache, ignis_tensor *out,
                                        ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                        void *stream);

#ifdef __cplusplus
}
#endif
#endif
