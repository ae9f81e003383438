/* Decode attention: one query token per request against its KV cache (FlashInfer's
 * single_decode_with_kv_cache and BatchDecodeWithPagedKVCacheWrapper).
 *
 * Math, per request b with kv_len keys, query token i of its q_len tokens (q_len_per_req; 1 for
 * plain decode), query head h (KV head h / (num_qo_heads / num_kv_heads): GQA, any group size):
 *     q_pos = kv_len - q_len + i                     (the token's position; keys j <= q_pos visible)
 *     keys with j < q_pos - window_left are masked out when window_left >= 0
 *     k_j = k_scale * K[j],  v_j = v_scale * V[j]     (K, V as stored: f16, bf16 or fp8)
 *     ROPE_LLAMA: q and k_j rotated (non-interleaved halves, as ignis_apply_rope_pos_ids) at
 *                 positions q_pos and j, frequency f_t = theta^(-2t/head_dim) / rope_scale
 *     x_j = sm_scale * <q, k_j>
 *     ALIBI:      x_j += slope_h * (j - q_pos), slope_h = 2^(-8(h+1)/n) for h < n and
 *                 2^(-4(2(h-n)+1)/n) otherwise, n the largest power of two <= num_qo_heads
 *     logits_soft_cap > 0: x_j = cap * tanh(x_j / cap)
 *     Z = sum_j e^{x_j} (+ e^{sink_h} with per-head sinks)
 *     out = sum_j e^{x_j} v_j / Z;   lse = log Z in the chosen base
 * A token with no visible key and no sink gets out = 0 and lse = -inf (never NaN); with a sink,
 * out = 0 and lse = sink_h.
 *
 * Layout: q [batch * q_len, num_qo_heads, head_dim] (row b * q_len + i is token i of request b;
 * single decode: [num_qo_heads, head_dim]), out the same shape, lse [batch * q_len, num_qo_heads]
 * f32 (optional); leading strides of q, out and lse may be anything, the last dimension of q and
 * out must have stride 1. On the CUDA backend q, out, K and V must also start 16-byte aligned with
 * strides that are multiples of 16 bytes (the kernels use 16-byte loads; IGNIS_ERROR_UNSUPPORTED
 * otherwise, nothing written). q f16 or bf16, out the dtype of q. K/V: f16, bf16 (the dtype of q),
 * fp8 e4m3 or fp8 e5m2 (any q dtype; k_scale / v_scale dequantize). Head dims compiled: 64, 128,
 * 256 and 512 (IGNIS_ERROR_UNSUPPORTED otherwise; the CMake option IGNIS_HEAD_DIMS may prune them,
 * and ignis_build_info names the ones built). Every option takes every head dim; on CUDA head dim
 * 512 always runs the m16 kernel, whose 4 warps split the head dim (ignis_decode_plan_kernel names
 * the kernel a plan chose).
 * Arithmetic: products of q and k, and of the softmax weights and v, on tensor cores in the KV
 * dtype's 16-bit type (fp8 K/V: f16, with a bf16 q scaled by a power of two per row into f16
 * range), accumulated in f32; softmax in f32.
 * Fastest layout on the CUDA backend (H100 / H200): 16-bit K/V, head dim 128, 8 KV heads in NHD
 * order with unpadded rows (token stride 8 x head_dim), a page size that is a multiple of 16 and
 * at most 8 query rows per KV head (q_len * group). For such a plan with automatic splits, an
 * update whose batch fills the GPU without splitting a request selects a kernel that moves 16
 * tokens of all 8 heads of a page in one copy (IGNIS_DECODE_PAGE_KERNEL=0 in the environment turns
 * it off); other batches, shapes and the batch-invariant modes (disable_split_kv,
 * fixed_split_size: a request must run the same kernel alone and in any batch) run the general
 * kernel, with the same results up to rounding. A run captured into a CUDA graph keeps the kernel
 * its capture used, for every later update.
 *
 * Batch decode is split in two, as in FlashInfer, so that the run is cheap and CUDA-graph safe:
 *   - ignis_decode_plan_create fixes what a captured graph may not change: device, head counts,
 *     head dim, page size, dtypes, options, the largest batch and KV length it will serve, and the
 *     split policy. It allocates the plan's memory (the planner's pinned staging, and device
 *     memory for the schedule), and tells the size of the device workspace the caller must provide
 *     to the runs (ignis_decode_workspace_size): a guaranteed bound for every batch up to
 *     max_batch_size and KV length up to max_kv_len.
 *   - ignis_decode_plan_update takes the batch's kv_indptr and kv_last_page_len as HOST arrays,
 *     never reads device memory, never synchronizes, chooses how to split long requests across
 *     the GPU (split-KV: partial results merged by LSE), and writes its schedule into the plan's
 *     device memory with one asynchronous copy on `stream`.
 *   - ignis_decode_run launches a grid that depends only on what plan_create fixed (so one
 *     captured graph serves every batch size up to the maximum), reads the plan's schedule and
 *     keeps its split partials in the workspace: re-plan outside the graph, replay it.
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

/* Position encoding applied inside the kernel (FlashInfer's PosEncodingMode values). */
typedef enum ignis_pos_encoding {
  IGNIS_POS_ENCODING_NONE = 0,
  IGNIS_POS_ENCODING_ROPE_LLAMA = 1,
  IGNIS_POS_ENCODING_ALIBI = 2
} ignis_pos_encoding;

/* Not a dtype: a plan's o_dtype (out's dtype) that means "q's dtype", the default. */
#define IGNIS_DTYPE_OF_Q IGNIS_DTYPE_COUNT

/* Options of an attention call. size = sizeof(ignis_attention_options) (IGNIS_ATTENTION_OPTIONS_INIT). */
typedef struct ignis_attention_options {
  size_t size;
  double sm_scale;         /* > 0; 0 means 1 / sqrt(head_dim) */
  double logits_soft_cap;  /* 0: off; > 0: logits pass through cap * tanh(x / cap) */
  int32_t window_left;     /* -1: off; >= 0: each query sees its last window_left + 1 keys */
  ignis_lse_base lse_base; /* base of the returned LSE */
  ignis_pos_encoding pos_encoding_mode;
  double rope_scale;       /* ROPE_LLAMA: > 0, positions are divided by it */
  double rope_theta;       /* ROPE_LLAMA: > 0 */
} ignis_attention_options;

#define IGNIS_ATTENTION_OPTIONS_INIT                                                               \
  {/* size */ sizeof(ignis_attention_options), /* sm_scale */ 0.0, /* logits_soft_cap */ 0.0,        \
   /* window_left */ -1, /* lse_base */ IGNIS_LSE_BASE2, /* pos_encoding_mode */ IGNIS_POS_ENCODING_NONE, \
   /* rope_scale */ 1.0, /* rope_theta */ 1e4}

/* Per-call inputs of a run that are not part of the plan. size = sizeof(ignis_attention_extras)
 * (IGNIS_ATTENTION_EXTRAS_INIT); a NULL extras pointer means the defaults. */
typedef struct ignis_attention_extras {
  size_t size;
  double k_scale;            /* finite, > 0: keys are k_scale * K (fp8 dequantization; 1 otherwise) */
  double v_scale;            /* finite, > 0: values are v_scale * V */
  const ignis_tensor *sinks; /* NULL, or [num_qo_heads] f32 on the device of q: per-head sink logit
                                (natural log, in the units of x_j after sm_scale and soft cap) */
} ignis_attention_extras;

#define IGNIS_ATTENTION_EXTRAS_INIT                                                                \
  {/* size */ sizeof(ignis_attention_extras), /* k_scale */ 1.0, /* v_scale */ 1.0, /* sinks */ NULL}

/* Single request, one query token, contiguous KV: k and v [kv_len, num_kv_heads, head_dim] (NHD)
 * or [num_kv_heads, kv_len, head_dim] (HND), any leading strides. workspace: device memory of at
 * least ignis_single_decode_workspace_size bytes for CUDA tensors (split-KV partials), NULL/0 on
 * the CPU. lse and extras may be NULL. */
IGNIS_API ignis_status ignis_single_decode_workspace_size(int64_t num_qo_heads, int64_t head_dim,
                                                          int64_t max_kv_len, size_t *bytes);
IGNIS_API ignis_status ignis_single_decode(const ignis_tensor *q, const ignis_tensor *k, const ignis_tensor *v,
                                           ignis_kv_layout layout, const ignis_attention_options *options,
                                           const ignis_attention_extras *extras, ignis_tensor *out,
                                           ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                           void *stream);

/* What a decode plan is fixed to. size = sizeof(ignis_decode_plan_config) (IGNIS_DECODE_PLAN_CONFIG_INIT). */
typedef struct ignis_decode_plan_config {
  size_t size;
  ignis_device device;        /* where q, the cache and out will live */
  int64_t num_qo_heads;       /* a multiple of num_kv_heads */
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t page_size;          /* 1..256 */
  ignis_dtype q_dtype;        /* f16 or bf16; or fp8 e4m3 with an fp8 cache and a 16-bit o_dtype */
  ignis_dtype kv_dtype;       /* the cache: q_dtype, fp8 e4m3 or fp8 e5m2 */
  int64_t q_len_per_req;      /* query tokens per request, 1..IGNIS_DECODE_MAX_Q_LEN (speculative
                                 decoding: causal among them); 0 means 1 */
  int64_t max_batch_size;     /* >= 1 */
  int64_t max_kv_len;         /* the longest request any plan_update may describe */
  int32_t disable_split_kv;   /* 1: one work item per (request, KV head), batch-invariant */
  int64_t fixed_split_size;   /* > 0: split every request into chunks of this many pages
                                 (deterministic: the split does not depend on the batch); 0: auto */
  ignis_attention_options options;
  /* Out's dtype: IGNIS_DTYPE_OF_Q (q's, the only choice for a 16-bit q), or with an fp8 q f16 or
   * bf16, the dtype the kernels compute in (an fp8 q converts to it exactly, as FlashInfer's fp8
   * prefill / decode on an fp8 KV cache takes it). Added after the first release: callers built
   * against the older, smaller struct get the default. */
  ignis_dtype o_dtype;
} ignis_decode_plan_config;

#define IGNIS_DECODE_PLAN_CONFIG_INIT                                                              \
  {/* size */ sizeof(ignis_decode_plan_config), /* device */ {IGNIS_DEVICE_CPU, 0},                   \
   /* num_qo_heads */ 0, /* num_kv_heads */ 0, /* head_dim */ 0, /* page_size */ 0,                    \
   /* q_dtype */ IGNIS_BF16, /* kv_dtype */ IGNIS_BF16, /* q_len_per_req */ 1, /* max_batch_size */ 0,  \
   /* max_kv_len */ 0, /* disable_split_kv */ 0, /* fixed_split_size */ 0,                            \
   /* options */ IGNIS_ATTENTION_OPTIONS_INIT, /* o_dtype */ IGNIS_DTYPE_OF_Q}

/* The most query tokens per request a decode plan takes (q_len_per_req). */
#define IGNIS_DECODE_MAX_Q_LEN 16

typedef struct ignis_decode_plan ignis_decode_plan;

IGNIS_API ignis_status ignis_decode_plan_create(const ignis_decode_plan_config *config,
                                                ignis_decode_plan **out_plan);
IGNIS_API ignis_status ignis_decode_plan_destroy(ignis_decode_plan *plan);

/* Device workspace bytes the plan's runs need (0 on the CPU; 0 too when nothing is ever split);
 * the bound holds for every update within the plan's maxima. The workspace holds only what a run
 * writes and reads within itself (split partial rows): the schedule and the counters of the
 * split-request merges are in the plan's own device memory. So calls whose runs are ordered on one
 * stream may share one buffer (plans of decode and prefill, single decode / prefill), as engines
 * share FlashInfer's float workspace between their wrappers; runs that may overlap (other
 * streams) need buffers of their own. Two runs of one plan at once must not happen (its merge
 * counters are shared). Runs in order on one stream, and CUDA-graph replays with or without an
 * update between them, are fine. */
IGNIS_API ignis_status ignis_decode_workspace_size(const ignis_decode_plan *plan, size_t *bytes);

/* The largest max_kv_len (0..INT32_MAX) for which a plan of `config` (its max_kv_len ignored) can
 * be created and needs at most workspace_bytes of workspace (ignis_decode_workspace_size of that
 * plan); -1 when not even max_kv_len 0 fits. Requests that never split need no workspace, so 0
 * bytes allow the longest of them (one chunk with fixed_split_size). For callers whose workspace is
 * fixed (a CUDA-graph buffer) and whose plans split into fixed chunks (fixed_split_size), where the
 * bound sets the workspace: create the plan with the answer (or less). CPU plans need no workspace, so there only
 * the schedule's int32 item count bounds the answer. */
IGNIS_API ignis_status ignis_decode_max_kv_len_for_workspace(const ignis_decode_plan_config *config,
                                                             size_t workspace_bytes, int64_t *max_kv_len);

/* Schedule a batch. kv_indptr_host [batch_size + 1] and kv_last_page_len_host [batch_size] are
 * host arrays describing the same batch the run will see (they are validated here: monotonic,
 * last_page_len in 1..page_size for requests with pages, lengths <= max_kv_len). The schedule is
 * copied into the plan's device memory on `stream` (asynchronously: the host arrays may be reused
 * at once). workspace may be NULL; when given, it is checked as the runs will check it (size,
 * device), so a wrong buffer fails here already.
 * The plan keeps a small ring of pinned staging buffers; an update only waits if it would reuse
 * one whose previous copy has not run yet. Updates of one plan on different streams must be
 * ordered on the device (each after the previous update's runs), as they all write the plan's one
 * device schedule; the ring relies on that order. */
IGNIS_API ignis_status ignis_decode_plan_update(ignis_decode_plan *plan, const int32_t *kv_indptr_host,
                                                const int32_t *kv_last_page_len_host, int64_t batch_size,
                                                void *workspace, size_t workspace_bytes, void *stream);

/* The last update's kv_indptr [batch_size + 1] and kv_last_page_len [batch_size] as 1-D i32
 * tensors on the plan's device: copies in the plan's memory, written by the update's one
 * asynchronous copy together with the schedule (CPU plans: the plan's host copies). workspace and
 * workspace_bytes are not read (pass NULL, 0; kept for the ABI). Pass them as cache->indptr / cache->last_page_len of ignis_decode_run to
 * skip uploading the arrays separately. Valid until the next update of the plan. */
IGNIS_API ignis_status ignis_decode_plan_index_views(const ignis_decode_plan *plan, void *workspace,
                                                     size_t workspace_bytes, ignis_tensor *kv_indptr,
                                                     ignis_tensor *kv_last_page_len);

/* Copy the last update's kv_indptr (batch + 1 entries) and kv_last_page_len (batch entries) into
 * the front of the caller's 1-D contiguous i32 tensors on the plan's device (at least that long):
 * asynchronous device-to-device copies on `stream`, ordered after the update's own copy (CPU plans:
 * host copies). For CUDA-graph wrappers whose persistent index buffers a captured run reads, as
 * FlashInfer's plan fills them, without a host-to-device copy of their own. Nothing is written on
 * an error. */
IGNIS_API ignis_status ignis_decode_plan_copy_index_arrays(const ignis_decode_plan *plan, ignis_tensor *kv_indptr,
                                                           ignis_tensor *kv_last_page_len, void *stream);

/* The kernel the plan's runs take (for diagnostics and benchmarks): the one of its last update (a
 * batch the page kernel's schedule suits runs "decode_page"), before any update the one its
 * backend chose at creation. *name is a static string: "cpu", "decode_m16", "decode_transposed"
 * or "decode_page"; a "decode_page" run whose cache is not NHD with 8 heads runs the transposed
 * kernel over the same schedule. */
IGNIS_API ignis_status ignis_decode_plan_kernel(const ignis_decode_plan *plan, const char **name);

/* Run the last planned batch: q [batch * q_len_per_req, num_qo_heads, head_dim], cache with the
 * plan's page size and KV dtype and the batch's kv_indptr / kv_indices / kv_last_page_len (on the
 * device; the contents must describe the same lengths as the planned host arrays), out like q,
 * lse [batch * q_len_per_req, num_qo_heads] f32 or NULL, extras (k_scale, v_scale, sinks) or NULL. */
IGNIS_API ignis_status ignis_decode_run(const ignis_decode_plan *plan, const ignis_tensor *q,
                                        const ignis_paged_kv_cache *cache,
                                        const ignis_attention_extras *extras, ignis_tensor *out,
                                        ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                        void *stream);

/* Run a batch given as a block table (TensorRT-LLM's / vLLM's layout: ignis_block_table_kv_cache;
 * FlashInfer's trtllm_batch_decode_with_kv_cache and xqa_batch_decode_with_kv_cache) with the plan's
 * configuration, without a plan update: nothing per step on the host beyond the call, no copy of a
 * schedule, so it is CUDA-graph safe with the block table, seq_lens and q rewritten in place between
 * replays. The batch is cache.block_tables.shape[0] requests (at most the plan's max_batch_size);
 * q [batch * q_len_per_req, num_qo_heads, head_dim], out like q, lse [batch * q_len_per_req,
 * num_qo_heads] f32 or NULL, extras as ignis_decode_run. max_seq_len (0..the plan's max_kv_len) is a
 * host-side bound on seq_lens. With automatic splits, a batch of two or more requests below one
 * wave of the GPU (batch x num_kv_heads under the resident blocks) whose bound passes one smallest
 * chunk is split by the plan's policy for its own lengths, planned on the device by each block of
 * the attention kernel for itself (the CPU plans it on the host): the split ignis_decode_plan_update
 * would choose for the same lengths (each counted as at most max_seq_len). Every other batch takes
 * the plan's policy for a batch whose every request has max_seq_len keys (fixed_split_size and
 * disable_split_kv as configured). Either way the last chunk of each request runs to its end, so a
 * request longer than max_seq_len is still computed in full (only its balance suffers). A graph
 * captured with one max_seq_len keeps that choice for every replay, and replays plan their lengths
 * anew. The plan's last update is neither needed nor changed; the workspace is the one
 * ignis_decode_workspace_size gives. Runs of one plan must not overlap (they share its merge
 * counters and the device memory of planned lengths), as with ignis_decode_run. */
IGNIS_API ignis_status ignis_decode_run_block_table(const ignis_decode_plan *plan, const ignis_tensor *q,
                                                    const ignis_block_table_kv_cache *cache, int64_t max_seq_len,
                                                    const ignis_attention_extras *extras, ignis_tensor *out,
                                                    ignis_tensor *lse, void *workspace, size_t workspace_bytes,
                                                    void *stream);

#ifdef __cplusplus
}
#endif
#endif
