/* MLA attention (DeepSeek-V2/V3, Kimi K2) over a paged compressed latent cache, with the weights
 * absorbed into the query (FlashInfer's BatchMLAPagedAttentionWrapper), and the append of latent
 * rows to that cache (append_paged_mla_kv_cache).
 *
 * Math, per request b with kv_len keys (kv_len_arr[b]) and q_len query tokens (qo_indptr[b + 1] -
 * qo_indptr[b]), query token i (row qo_indptr[b] + i of q_nope / q_pe / out), head h:
 *     key j: ckv_j = ckv_scale * ckv_cache[page, slot] (head_dim_ckv = 512 values),
 *            kpe_j = kpe_scale * kpe_cache[page, slot] (head_dim_kpe = 64),
 *            page = kv_indices[kv_indptr[b] + j / page_size], slot = j % page_size
 *            (the scales dequantize an fp8 cache; any finite positive value, 1 for 16-bit caches)
 *     x_j = sm_scale * (<q_nope[i, h], ckv_j> + <q_pe[i, h], kpe_j>)
 *     causal: key j is visible to token i when j <= kv_len - q_len + i (the query block aligned to
 *             the end of the keys: decode with speculative tokens, chunked prefill); else all keys
 *     out[i, h] = sum_j e^{x_j} ckv_j / Z (512 values),  Z = sum_j e^{x_j},  lse = log Z in the
 *             plan's base (IGNIS_LSE_BASE2: FlashInfer's)
 * A token with no visible key (kv_len 0, or causal with q_len > kv_len) gets out = 0, lse = -inf.
 *
 * Layout: q_nope [nnz_q, num_heads, 512], q_pe [nnz_q, num_heads, 64], out [nnz_q, num_heads, 512]
 * (the dtype of q), lse [nnz_q, num_heads] f32 (optional); any leading strides, last dimension
 * contiguous. ckv_cache [num_pages, page_size, 512] and kpe_cache [num_pages, page_size, 64] with
 * any page and token strides (two views of one [num_pages, page_size, 576] buffer work: ckv the
 * first 512 columns, kpe the last 64). kv_indices 1-D i32. q f16 or bf16; the cache q's dtype or
 * fp8 e4m3 (fp8 e5m2: IGNIS_ERROR_UNSUPPORTED). On the CUDA backend
 * q_nope, q_pe, the caches and out must start 16-byte aligned with strides that are multiples of
 * 16 bytes (IGNIS_ERROR_UNSUPPORTED otherwise, nothing written). Arithmetic: products on tensor
 * cores in the 16-bit dtype (CUDA) or in double (CPU), softmax and sums in f32 or better.
 *
 * Plan and run, as decode (include/ignis/decode.h): ignis_mla_plan_create fixes the device, heads,
 * page size, dtypes, causal, sm_scale, the LSE base and the maxima (batch, query tokens, KV
 * length); ignis_mla_plan_update takes the batch's qo_indptr, kv_indptr and kv_len as HOST arrays
 * (no device read, no synchronization), splits long requests across the GPU where the batch is too
 * small to fill it (split-KV: partial rows merged by LSE), and uploads its schedule into the plan's
 * device memory with one asynchronous copy; ignis_mla_run reads the schedule. A run captured into
 * a CUDA graph launches grids of the plan's maxima, so one capture serves every later update
 * within them (re-plan outside the graph, replay it). The workspace holds the split partial rows;
 * its size is fixed at plan creation (ignis_mla_workspace_size) and bounds every update. */
#ifndef IGNIS_MLA_H
#define IGNIS_MLA_H

#include "ignis/core.h"
#include "ignis/merge_state.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IGNIS_MLA_HEAD_DIM_CKV 512
#define IGNIS_MLA_HEAD_DIM_KPE 64

/* What an MLA plan is fixed to. size = sizeof(ignis_mla_plan_config) (IGNIS_MLA_PLAN_CONFIG_INIT). */
typedef struct ignis_mla_plan_config {
  size_t size;
  ignis_device device;     /* where q, the cache and out will live */
  int64_t num_heads;       /* query heads, >= 1 (the latent KV is shared by all of them) */
  int64_t head_dim_ckv;    /* 512 */
  int64_t head_dim_kpe;    /* 64 */
  int64_t page_size;       /* 1..256 */
  ignis_dtype q_dtype;     /* f16 or bf16 */
  ignis_dtype kv_dtype;    /* q_dtype or fp8 e4m3 */
  int32_t causal;          /* 0 or 1 */
  double sm_scale;         /* > 0 (FlashInfer's callers pass 1 / sqrt(192) for DeepSeek) */
  ignis_lse_base lse_base; /* base of the returned LSE */
  int64_t max_batch_size;  /* >= 1 */
  int64_t max_q_tokens;    /* >= 1: the most query rows (nnz_q) of any update */
  int64_t max_kv_len;      /* the longest request any update may describe */
} ignis_mla_plan_config;

#define IGNIS_MLA_PLAN_CONFIG_INIT                                                                           \
  { /* size */                                                                                               \
    sizeof(ignis_mla_plan_config), /* device */ {IGNIS_DEVICE_CPU, 0}, /* num_heads */ 0,                    \
        /* head_dim_ckv */ IGNIS_MLA_HEAD_DIM_CKV, /* head_dim_kpe */ IGNIS_MLA_HEAD_DIM_KPE,                \
        /* page_size */ 0, /* q_dtype */ IGNIS_BF16, /* kv_dtype */ IGNIS_BF16, /* causal */ 0,              \
        /* sm_scale */ 0.0, /* lse_base */ IGNIS_LSE_BASE2, /* max_batch_size */ 0, /* max_q_tokens */ 0,    \
        /* max_kv_len */ 0                                                                                   \
  }

typedef struct ignis_mla_plan ignis_mla_plan;

IGNIS_API ignis_status ignis_mla_plan_create(const ignis_mla_plan_config *config, ignis_mla_plan **out_plan);
IGNIS_API ignis_status ignis_mla_plan_destroy(ignis_mla_plan *plan);

/* Device workspace bytes every run of the plan needs (0 on the CPU): the split partial rows, a
 * bound over every update within the maxima. Runs ordered on one stream may share a buffer. */
IGNIS_API ignis_status ignis_mla_workspace_size(const ignis_mla_plan *plan, size_t *bytes);

/* Schedule a batch from host arrays: qo_indptr_host [batch_size + 1] (non-decreasing from 0, last
 * entry <= max_q_tokens), kv_indptr_host [batch_size + 1] (pages per request, non-decreasing from
 * 0) and kv_len_host [batch_size] (0..max_kv_len, at most the request's pages * page_size). The
 * schedule is copied into the plan's device memory on `stream`; the arrays may be reused at once.
 * workspace may be NULL; when given it is checked as the runs will check it. */
IGNIS_API ignis_status ignis_mla_plan_update(ignis_mla_plan *plan, const int32_t *qo_indptr_host,
                                             const int32_t *kv_indptr_host, const int32_t *kv_len_host,
                                             int64_t batch_size, void *workspace, size_t workspace_bytes,
                                             void *stream);

/* Attention of the last update's batch. q_nope / q_pe / out have the planned nnz_q rows (or more:
 * rows past the planned ones are neither read nor written); kv_indices holds the pages the update's
 * kv_indptr points into (at least kv_indptr[batch_size] entries, each within ckv_cache.shape[0]:
 * checked on the host for host memory only). ckv_scale / kpe_scale: finite, > 0 (1: none). lse may
 * be NULL. */
IGNIS_API ignis_status ignis_mla_run(const ignis_mla_plan *plan, const ignis_tensor *q_nope,
                                     const ignis_tensor *q_pe, const ignis_tensor *ckv_cache,
                                     const ignis_tensor *kpe_cache, const ignis_tensor *kv_indices,
                                     double ckv_scale, double kpe_scale, ignis_tensor *out, ignis_tensor *lse,
                                     void *workspace, size_t workspace_bytes, void *stream);

/* The schedule of the last update (diagnostics, tests): its work items, and the query tokens whose
 * request was split (merged from partial rows; 0 when nothing is split). */
IGNIS_API ignis_status ignis_mla_plan_info(const ignis_mla_plan *plan, int64_t *num_work,
                                           int64_t *num_merged_tokens);

/* append_paged_mla_kv_cache: token t of append_ckv [nnz, 512] / append_kpe [nnz, 64] belongs to
 * request batch_indices[t] at position positions[t]; it is written to ckv_cache / kpe_cache at page
 * kv_indices[kv_indptr[b] + positions[t] / page_size], slot positions[t] % page_size.
 * batch_indices, positions [nnz] i32; kv_indptr [batch + 1], kv_last_page_len [batch] i32 (the
 * lengths after the append: positions[t] < (pages - 1) * page_size + kv_last_page_len[b]). The
 * caches as for ignis_mla_run (fp8 e4m3 included: the rows are then already quantized); the
 * appended rows of their dtype. Host index arrays are checked;
 * device ones are trusted (out-of-range entries are skipped by the CUDA kernel). */
IGNIS_API ignis_status ignis_append_paged_mla_kv_cache(
    const ignis_tensor *append_ckv, const ignis_tensor *append_kpe, const ignis_tensor *batch_indices,
    const ignis_tensor *positions, ignis_tensor *ckv_cache, ignis_tensor *kpe_cache,
    const ignis_tensor *kv_indices, const ignis_tensor *kv_indptr, const ignis_tensor *kv_last_page_len,
    void *stream);

#ifdef __cplusplus
}
#endif
#endif
