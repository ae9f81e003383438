/* Prefill attention: many query tokens per request against its KV cache (FlashInfer's
 * single_prefill_with_kv_cache, BatchPrefillWithRaggedKVCacheWrapper and
 * BatchPrefillWithPagedKVCacheWrapper).
 *
 * Math: decode's (include/ignis/decode.h), per request b with q_len query tokens and kv_len keys,
 * query token i at position q_pos = kv_len - q_len + i (the query block is aligned to the end of
 * the keys, as in chunked prefill), query head h on KV head h / (num_qo_heads / num_kv_heads):
 * sm_scale (default 1 / sqrt(head_dim_qk)), k_scale / v_scale, ROPE_LLAMA (q at q_pos, k_j at j,
 * over head_dim_qk), ALiBi, logits soft cap, per-head sinks and the LSE base are as there. Which
 * keys token i sees (ignis_mask_mode):
 *     IGNIS_MASK_NONE    every key j < kv_len
 *     IGNIS_MASK_CAUSAL  keys j <= q_pos
 *     IGNIS_MASK_CUSTOM  keys j whose bit (i * kv_len + j) is set in the request's bit-packed mask
 * and, with window_left >= 0, only keys j >= q_pos - window_left (in every mode). A token that
 * sees no key gets out = 0 and lse = -inf (with a sink: out = 0, lse = sink_h); never NaN.
 *
 * Custom masks are bit-packed per request, FlashInfer's layout (flashinfer.quantization
 * segment_packbits, bitorder "little"): request b's q_len * kv_len booleans, row-major, start at
 * byte offset mask_offset(b) = sum over b' < b of ceil(q_len(b') * kv_len(b') / 8) of the u8
 * tensor custom_mask, and boolean n of a request is bit (n % 8) of byte n / 8 (bit 0 the least
 * significant). The offsets follow from the planned lengths, so no mask indptr is passed.
 *
 * Layout: q [nnz_qo, num_qo_heads, head_dim_qk] (request b owns rows qo_indptr[b] ..
 * qo_indptr[b+1]; rows past qo_indptr[batch] are neither read nor written), out
 * [nnz_qo, num_qo_heads, head_dim_vo] q's dtype, lse [nnz_qo, num_qo_heads] f32 or NULL. Ragged
 * keys: k [nnz_kv, num_kv_heads, head_dim_qk] and v [nnz_kv, num_kv_heads, head_dim_vo] (NHD) or
 * [num_kv_heads, nnz_kv, head_dim] (HND), request b owning rows kv_indptr[b] .. kv_indptr[b+1].
 * Paged keys: an ignis_paged_kv_cache (include/ignis/paged_kv.h) whose K pages hold head_dim_qk
 * and V pages head_dim_vo elements per head. Leading strides may be anything, last dimensions
 * stride 1. dtypes: q f16 or bf16; K/V q's dtype, fp8 e4m3 or fp8 e5m2 (k_scale / v_scale
 * dequantize). Head dims (head_dim_qk, head_dim_vo) compiled: (64, 64), (128, 128), (256, 256),
 * (512, 512) and (192, 128) (DeepSeek-style prefill); other pairs are IGNIS_ERROR_UNSUPPORTED.
 * Every option takes every pair; on CUDA (512, 512) runs the mma.sync tile kernel with 16-row
 * tiles (the wgmma kernel is (128, 128) only).
 *
 * Backends: the CPU backend (host tensors) and the CUDA backend (tensor cores; sm_90a and sm_80
 * builds) compute every option above. On CUDA, q, out, K and V (or the cache) must also start
 * 16-byte aligned with strides that are multiples of 16 bytes (IGNIS_ERROR_UNSUPPORTED otherwise,
 * nothing written). CUDA arithmetic: q K^T and the softmax weights times V on tensor cores in q's
 * 16-bit type (fp8 K / V converted exactly to it; with ROPE_LLAMA the rotated q and k rounded to
 * it), accumulated in f32; softmax in f32. The CMake option IGNIS_HEAD_DIMS may prune the head
 * dims compiled ((192, 128) comes with 128; ignis_build_info names the ones built); a pruned pair
 * is IGNIS_ERROR_UNSUPPORTED.
 *
 * Batch prefill is split like batch decode, so the run is cheap and CUDA-graph safe:
 *   - ignis_prefill_plan_create fixes the device, the key source (ragged or paged; the layout and
 *     page size), heads, head dims, dtypes, mask mode, options and the maxima (batch size, total
 *     query tokens, keys per request), and tells the device workspace size
 *     (ignis_prefill_workspace_size): a guaranteed bound for every batch within the maxima.
 *   - ignis_prefill_plan_update takes qo_indptr, kv_indptr (and kv_last_page_len when paged) as
 *     HOST arrays, never reads device memory or synchronizes, cuts each request's packed query
 *     rows into tiles and, when the tiles alone would leave the GPU idle, splits the keys of long
 *     tiles into chunks merged by LSE (split-KV), and writes the schedule into the plan's device
 *     memory with one asynchronous copy on `stream` (sched/prefill_plan.h documents it).
 *   - the run launches a grid fixed by the plan, reads the plan's schedule and keeps its split
 *     partials in the workspace, so one captured CUDA graph serves every batch within the maxima:
 *     re-plan outside the graph, replay.
 * On the CPU backend the plan keeps the schedule in host memory and the run checks the cache's
 * index arrays against the planned lengths. */
#ifndef IGNIS_PREFILL_H
#define IGNIS_PREFILL_H

#include "ignis/core.h"
#include "ignis/decode.h"
#include "ignis/merge_state.h"
#include "ignis/paged_kv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ignis_mask_mode {
  IGNIS_MASK_NONE = 0,
  IGNIS_MASK_CAUSAL = 1,
  IGNIS_MASK_CUSTOM = 2
} ignis_mask_mode;

/* Bytes of one request's packed custom mask: ceil(q_len * kv_len / 8). */
IGNIS_API int64_t ignis_prefill_mask_bytes(int64_t q_len, int64_t kv_len);

/* Single request, contiguous keys: q [qo_len, num_qo_heads, head_dim_qk], k / v [kv_len,
 * num_kv_heads, head_dim] (NHD) or [num_kv_heads, kv_len, head_dim] (HND), out [qo_len,
 * num_qo_heads, head_dim_vo], lse [qo_len, num_qo_heads] f32 or NULL. custom_mask: 1-D u8 of at
 * least ceil(qo_len * kv_len / 8) bytes for IGNIS_MASK_CUSTOM, else NULL. workspace: device memory
 * of at least ignis_single_prefill_workspace_size bytes for CUDA tensors (split-KV partials), NULL
 * / 0 on the CPU. extras may be NULL. */
IGNIS_API ignis_status ignis_single_prefill_workspace_size(int64_t num_qo_heads, int64_t num_kv_heads,
                                                           int64_t head_dim_qk, int64_t head_dim_vo,
                                                           int64_t max_qo_len, int64_t max_kv_len,
                                                           size_t *bytes);
IGNIS_API ignis_status ignis_single_prefill(const ignis_tensor *q, const ignis_tensor *k, const ignis_tensor *v,
                                            ignis_kv_layout layout, ignis_mask_mode mask_mode,
                                            const ignis_tensor *custom_mask,
                                            const ignis_attention_options *options,
                                            const ignis_attention_extras *extras, ignis_tensor *out,
                                            ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                            void *stream);

typedef enum ignis_prefill_kv_kind { IGNIS_PREFILL_RAGGED = 0, IGNIS_PREFILL_PAGED = 1 } ignis_prefill_kv_kind;

/* What a prefill plan is fixed to. size = sizeof(ignis_prefill_plan_config)
 * (IGNIS_PREFILL_PLAN_CONFIG_INIT). */
typedef struct ignis_prefill_plan_config {
  size_t size;
  ignis_device device;
  ignis_prefill_kv_kind kv_kind;
  ignis_kv_layout kv_layout;  /* ragged k / v (paged: the cache says) */
  int64_t num_qo_heads;       /* a multiple of num_kv_heads */
  int64_t num_kv_heads;
  int64_t head_dim_qk;
  int64_t head_dim_vo;        /* 0 means head_dim_qk */
  int64_t page_size;          /* paged: 1..256; ragged: ignored */
  ignis_dtype q_dtype;        /* f16 or bf16; or fp8 e4m3 with fp8 K/V and a 16-bit o_dtype */
  ignis_dtype kv_dtype;       /* q_dtype, fp8 e4m3 or fp8 e5m2 */
  ignis_mask_mode mask_mode;
  int64_t max_batch_size;     /* >= 1 */
  int64_t max_qo_tokens;      /* >= 1: the most query tokens of a batch (qo_indptr[B] - qo_indptr[0]) */
  int64_t max_kv_len;         /* the most keys of one request */
  int32_t disable_split_kv;   /* 1: one item per tile, batch-invariant */
  int64_t fixed_split_size;   /* > 0: key chunks of this many pages (ragged: tokens), whatever the
                                 batch (deterministic); 0: auto */
  ignis_attention_options options;
  /* Out's dtype: IGNIS_DTYPE_OF_Q (q's, the only choice for a 16-bit q), or with an fp8 q f16 or
   * bf16 (decode.h: ignis_decode_plan_config.o_dtype). Added after the first release. */
  ignis_dtype o_dtype;
} ignis_prefill_plan_config;

#define IGNIS_PREFILL_PLAN_CONFIG_INIT                                                             \
  {/* size */ sizeof(ignis_prefill_plan_config), /* device */ {IGNIS_DEVICE_CPU, 0},                  \
   /* kv_kind */ IGNIS_PREFILL_RAGGED, /* kv_layout */ IGNIS_KV_LAYOUT_NHD, /* num_qo_heads */ 0,       \
   /* num_kv_heads */ 0, /* head_dim_qk */ 0, /* head_dim_vo */ 0, /* page_size */ 0,                  \
   /* q_dtype */ IGNIS_BF16, /* kv_dtype */ IGNIS_BF16, /* mask_mode */ IGNIS_MASK_NONE,                \
   /* max_batch_size */ 0, /* max_qo_tokens */ 0, /* max_kv_len */ 0, /* disable_split_kv */ 0,        \
   /* fixed_split_size */ 0, /* options */ IGNIS_ATTENTION_OPTIONS_INIT, /* o_dtype */ IGNIS_DTYPE_OF_Q}

typedef struct ignis_prefill_plan ignis_prefill_plan;

IGNIS_API ignis_status ignis_prefill_plan_create(const ignis_prefill_plan_config *config,
                                                 ignis_prefill_plan **out_plan);
IGNIS_API ignis_status ignis_prefill_plan_destroy(ignis_prefill_plan *plan);

/* Device workspace bytes the plan's runs need (0 on the CPU; 0 too when nothing is ever split);
 * the bound holds for every update within the plan's maxima. As in decode, the workspace holds
 * only a run's split partials (the schedule is in the plan's own device memory), so calls whose
 * runs are ordered on one stream may share one buffer; runs that may overlap need their own. */
IGNIS_API ignis_status ignis_prefill_workspace_size(const ignis_prefill_plan *plan, size_t *bytes);

/* The kernel the plan's runs take, chosen by its backend at creation (for diagnostics and
 * benchmarks). *name is a static string: "cpu", "prefill_tile" or "prefill_wgmma". */
IGNIS_API ignis_status ignis_prefill_plan_kernel(const ignis_prefill_plan *plan, const char **name);

/* Schedule a batch of batch_size requests from HOST arrays: qo_indptr_host [batch_size + 1]
 * (non-decreasing, from 0 or more), kv_indptr_host [batch_size + 1] (ragged: key rows; paged:
 * page entries) and, paged only, kv_last_page_len_host [batch_size] (NULL for ragged). Validated
 * here (monotonic, last_page_len 1..page_size for requests with pages, query tokens within
 * max_qo_tokens, keys within max_kv_len). The schedule is copied into the plan's device memory on
 * `stream` asynchronously (a ring of pinned staging buffers, as in decode); the host arrays may be
 * reused at once. workspace may be NULL; when given, it is checked as the runs will check it. */
IGNIS_API ignis_status ignis_prefill_plan_update(ignis_prefill_plan *plan, const int32_t *qo_indptr_host,
                                                 const int32_t *kv_indptr_host,
                                                 const int32_t *kv_last_page_len_host, int64_t batch_size,
                                                 void *workspace, size_t workspace_bytes, void *stream);

/* Run the last planned batch of a ragged plan: q, k, v, out, lse as in the layout above (q and
 * out at least qo_indptr[B] rows, k and v at least kv_indptr[B] rows); custom_mask: 1-D u8 of at
 * least the batch's mask bytes with IGNIS_MASK_CUSTOM, else NULL; extras or NULL. */
IGNIS_API ignis_status ignis_prefill_ragged_run(const ignis_prefill_plan *plan, const ignis_tensor *q,
                                                const ignis_tensor *k, const ignis_tensor *v,
                                                const ignis_tensor *custom_mask,
                                                const ignis_attention_extras *extras, ignis_tensor *out,
                                                ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                                void *stream);

/* Run the last planned batch of a paged plan over `cache` (the plan's page size, KV dtype, heads
 * and head dim). Each request's first page entry and length come from the plan (the schedule);
 * cache.indptr / cache.last_page_len must hold the planned values (checked on the host backend;
 * on CUDA they are not read). Paged plans take head_dim_vo == head_dim_qk (K and V pages share a
 * shape): (192, 128) is ragged and single prefill only. */
IGNIS_API ignis_status ignis_prefill_paged_run(const ignis_prefill_plan *plan, const ignis_tensor *q,
                                               const ignis_paged_kv_cache *cache,
                                               const ignis_tensor *custom_mask,
                                               const ignis_attention_extras *extras, ignis_tensor *out,
                                               ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                               void *stream);

/* Run a batch given as a block table (TensorRT-LLM's / vLLM's layout: ignis_block_table_kv_cache;
 * FlashInfer's trtllm_batch_context_with_kv_cache) with a paged plan's configuration (heads, head
 * dim, page size, dtypes, mask mode NONE or CAUSAL, options), without a plan update: nothing per
 * step on the host beyond the call, no schedule copied, so it is CUDA-graph safe with q, the block
 * table, seq_lens and qo_indptr rewritten in place between replays.
 * The batch is cache.block_tables.shape[0] requests (at most the plan's max_batch_size); request b
 * has the query rows qo_indptr[b] .. qo_indptr[b+1] of q (qo_indptr: [batch + 1] i32, contiguous,
 * on the device of q; FlashInfer's cum_seq_lens_q) and cache.seq_lens[b] keys (its cached and new
 * tokens together), its query block aligned to the end of its keys as in the math above (chunked
 * prefill). q [rows, num_qo_heads, head_dim] with rows at most the plan's max_qo_tokens, out like q
 * (the plan's o_dtype), lse [rows, num_qo_heads] f32 or NULL, extras as ignis_prefill_paged_run;
 * rows outside [qo_indptr[0], qo_indptr[batch]) are not written. max_q_len (0..the plan's
 * max_qo_tokens) is a host-side bound on every request's query tokens that sets the grid: tiles of
 * the longest request x requests x KV heads, the tiles past a request's own length doing nothing.
 * Keys are not split across blocks (the plan's split policy is not used), so the workspace holds
 * only an fp8 q's converted copy (ignis_prefill_workspace_size of the plan is enough).
 * Checking: on the host (CPU backend) qo_indptr must be non-decreasing from >= 0 up to at most
 * q.shape[0] with no request over max_q_len tokens, and the block table and seq_lens are checked as
 * ignis_block_table_kv_cache says. On a CUDA device nothing is read on the host: a request whose
 * rows fall outside [0, q.shape[0]) or whose length is negative writes nothing, a request longer
 * than max_q_len gets its first max_q_len tokens computed (up to a tile more) and the rest not
 * written, and lengths and pages follow ignis_block_table_kv_cache. The plan's last update is
 * neither needed nor changed. IGNIS_MASK_CUSTOM plans are IGNIS_ERROR_UNSUPPORTED (a mask's offsets
 * would need the lengths on the host). */
IGNIS_API ignis_status ignis_prefill_run_block_table(const ignis_prefill_plan *plan, const ignis_tensor *q,
                                                     const ignis_block_table_kv_cache *cache,
                                                     const ignis_tensor *qo_indptr, int64_t max_q_len,
                                                     const ignis_attention_extras *extras, ignis_tensor *out,
                                                     ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                                     void *stream);

#ifdef __cplusplus
}
#endif
#endif
