/* Flat parameter structs handed from the validated front end (src/core/op_*.c) to a backend
 * (src/cpu, src/cuda). Raw pointers, int64 sizes and element strides, scalars: nothing a kernel
 * has to look up elsewhere. Filled once per call; plain C so both host compilers and nvcc read it.
 *
 * Rows: the norm and activation ops see their leading dimensions as a 2-level row index
 * (row_outer, row_inner), so 2-D and 3-D views with any row strides need no copies. Element
 * (o, i, h) of a tensor lives at data + o * stride_outer + i * stride_inner + h; the last
 * dimension always has stride 1 (checked by the front end). For 2-D inputs num_rows_outer = 1. */
#ifndef IGNIS_CORE_PARAMS_H
#define IGNIS_CORE_PARAMS_H

#include <stdint.h>

#include "ignis/core.h"
#include "sched/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ignis_row_layout {
  int64_t stride_outer;
  int64_t stride_inner;
} ignis_row_layout;

typedef enum ignis_norm_kind { IGNIS_NORM_RMS = 0, IGNIS_NORM_LAYER = 1 } ignis_norm_kind;

typedef struct ignis_norm_params {
  ignis_norm_kind kind;
  float eps;
  float weight_offset;        /* 0, or 1 for the Gemma forms (weight + 1) */
  int64_t num_rows_outer;
  int64_t num_rows_inner;
  int64_t hidden;
  ignis_dtype dtype;          /* input, out and residual */
  ignis_dtype weight_dtype;   /* weight and bias: dtype or IGNIS_F32 */
  const void *input;
  ignis_row_layout input_layout;
  void *out;                  /* for the fused-add forms: equals input (normalized in place) */
  ignis_row_layout out_layout;
  void *residual;             /* non-NULL: fused add; residual += input, then out = norm(residual) */
  ignis_row_layout residual_layout;
  const void *weight;         /* [hidden], contiguous */
  const void *bias;           /* [hidden] contiguous, LayerNorm only; else NULL */
} ignis_norm_params;

typedef enum ignis_activation_kind {
  IGNIS_ACT_SILU = 0,
  IGNIS_ACT_GELU = 1,
  IGNIS_ACT_GELU_TANH = 2
} ignis_activation_kind;

typedef struct ignis_activation_params {
  ignis_activation_kind kind;
  int64_t num_rows_outer;
  int64_t num_rows_inner;
  int64_t hidden;             /* H: input rows hold 2H elements, output rows H */
  ignis_dtype dtype;
  const void *input;
  ignis_row_layout input_layout;
  void *out;
  ignis_row_layout out_layout;
} ignis_activation_params;

/* fp8 quantization (include/ignis/quant.h), alone or behind a norm or silu_and_mul (the
 * prologue). Rows as for the norms; out rows hold `hidden` fp8 values of out_dtype. Each value v
 * is the prologue's f32 result (rounded to dtype first when normed_out is set, which receives it),
 * quantized as fp8(sat(v * (1 / s))). */
typedef enum ignis_quant_prologue {
  IGNIS_QUANT_PLAIN = 0,     /* v = input */
  IGNIS_QUANT_NORM = 1,      /* v = the norm of norm_kind (residual: fused add first) */
  IGNIS_QUANT_SILU_MUL = 2   /* v = silu(input[h]) * input[hidden + h] */
} ignis_quant_prologue;

typedef enum ignis_quant_scale_mode {
  IGNIS_QUANT_SCALE_STATIC = 0, /* s = scale[0], read on the device */
  IGNIS_QUANT_SCALE_GROUP = 1,  /* dynamic, per group of group_size values of a row: written */
  IGNIS_QUANT_SCALE_ABSMAX = 2  /* no quantization: atomic max of |v| into scale[0] (as f32 bits) */
} ignis_quant_scale_mode;

typedef struct ignis_quant_params {
  ignis_quant_prologue prologue;
  ignis_quant_scale_mode scale_mode;
  int64_t num_rows_outer;
  int64_t num_rows_inner;
  int64_t hidden;             /* values per out row (silu_and_mul: input rows hold 2 * hidden) */
  ignis_dtype dtype;          /* input, residual, normed_out */
  ignis_dtype out_dtype;      /* IGNIS_FP8_E4M3 or IGNIS_FP8_E5M2 */
  float fp8_max;
  const void *input;
  ignis_row_layout input_layout;
  void *out;
  ignis_row_layout out_layout;
  /* IGNIS_QUANT_NORM */
  ignis_norm_kind norm_kind;
  float eps;
  void *residual;             /* non-NULL: residual += input first */
  ignis_row_layout residual_layout;
  const void *weight;         /* [hidden] contiguous */
  const void *bias;           /* LayerNorm only */
  ignis_dtype weight_dtype;
  void *normed_out;           /* NULL, or rows of dtype receiving the rounded norm */
  ignis_row_layout normed_layout;
  /* scales */
  void *scale;                /* STATIC / ABSMAX: f32 [1]; GROUP: [rows, hidden / group_size] */
  ignis_dtype scale_dtype;    /* IGNIS_F32, or IGNIS_U8 (e8m0 bytes, ue8m0 only) */
  int64_t scale_stride_row;   /* GROUP: elements between rows' scales (row = the flat row index) */
  int64_t scale_stride_group; /* GROUP: elements between consecutive groups of a row */
  int64_t group_size;         /* GROUP: divides hidden */
  float min_absmax;           /* GROUP: absmax floor (eps) */
  int32_t ue8m0;              /* GROUP: round scales up to powers of two */
} ignis_quant_params;

typedef enum ignis_rope_position_source {
  IGNIS_ROPE_POS_IDS = 0,     /* positions[t] */
  IGNIS_ROPE_POS_INDPTR = 1   /* offsets[b] + t - indptr[b] */
} ignis_rope_position_source;

#define IGNIS_ROPE_MAX_HEAD_DIM 512

typedef struct ignis_rope_params {
  int64_t nnz;
  int64_t num_q_heads;
  int64_t num_k_heads;
  int64_t head_dim;
  int64_t rotary_dim;         /* even, <= head_dim */
  int32_t interleave;         /* 0 NeoX pairs, 1 GPT-J pairs */
  ignis_dtype dtype;          /* q, k, q_out, k_out */
  /* element strides: [token, head]; the last dimension has stride 1 */
  const void *q; int64_t q_stride_token, q_stride_head;
  const void *k; int64_t k_stride_token, k_stride_head;
  void *q_out; int64_t q_out_stride_token, q_out_stride_head;
  void *k_out; int64_t k_out_stride_token, k_out_stride_head;
  /* positions */
  ignis_rope_position_source position_source;
  ignis_dtype index_dtype;    /* IGNIS_I32 or IGNIS_I64 for positions / indptr / offsets */
  const void *positions;      /* [nnz] (IGNIS_ROPE_POS_IDS) */
  const void *indptr;         /* [batch + 1] (IGNIS_ROPE_POS_INDPTR) */
  const void *offsets;        /* [batch] */
  int64_t batch_size;
  /* frequencies: either the cos/sin cache, or computed:
   *   f = theta^(-2i/rotary_dim); s = clamp(f * smooth_a + smooth_b, 0, 1);
   *   f_i = (1 - s) * f * rcp_scale + s * f
   * (plain RoPE: smooth_a = smooth_b = 0). */
  const float *cos_sin_cache; /* [max_position, rotary_dim] f32 or NULL */
  int64_t cos_sin_cache_stride; /* row stride in elements */
  int64_t max_position;
  float rope_rcp_scale;
  float rope_theta;
  float smooth_a;
  float smooth_b;
} ignis_rope_params;

/* RoPE fused with fp8 quantization (include/ignis/rope.h). Per token t: the q heads (rope part
 * rotated, nope part as is) into q_rope_out / q_nope_out, the k heads likewise into k_rope_out /
 * k_nope_out, and (has_v) the v heads into v_out; every value times its scale, then fp8.
 * A source's element (t, head, d) is at data + t * stride_token + head * stride_head + d. A
 * destination's is at data + row + head * stride_head + d, with row = t * stride_token, or for
 * the paged k/v destinations (paged) row = page * stride_page + slot * stride_token, page and slot
 * of token t as rope.h says. A part of width 0 (nope_dim 0, no v) has NULL data. */
typedef struct ignis_rope_quant_src {
  const void *data;
  int64_t stride_token, stride_head;
} ignis_rope_quant_src;

typedef struct ignis_rope_quant_dest {
  void *data;
  int64_t stride_page, stride_token, stride_head;
} ignis_rope_quant_dest;

typedef struct ignis_rope_quant_params {
  int64_t nnz;
  int64_t num_q_heads;
  int64_t num_k_heads;   /* MLA: 1 (stride_head unused) */
  int64_t rope_dim;      /* even */
  int64_t nope_dim;      /* 0: no nope parts */
  int32_t interleave;    /* 0 NeoX pairs, 1 GPT-J pairs */
  int32_t has_v;         /* GQA append: v [nnz, num_k_heads, rope_dim + nope_dim] */
  int32_t paged;         /* k/v destinations are pages of a cache */
  ignis_dtype dtype;     /* sources: f16 or bf16 */
  ignis_dtype out_dtype; /* destinations: fp8 e4m3 or e5m2 */
  float fp8_max;
  float quant_scale_q;
  float quant_scale_kv;
  ignis_rope_quant_src q_rope, q_nope, k_rope, k_nope, v;
  ignis_rope_quant_dest q_rope_out, q_nope_out, k_rope_out, k_nope_out, v_out;
  const float *cos_sin_cache; /* [max_position, rope_dim] f32 */
  int64_t cos_sin_cache_stride;
  int64_t max_position;
  ignis_dtype pos_dtype; /* IGNIS_I32 or IGNIS_I64 */
  const void *pos_ids;   /* [nnz] */
  /* paged: token t goes to request b = batch_indices[t] (< 0: padding, skipped whole) at position
   * s = positions[t]: page kv_indices[kv_indptr[b] + s / page_size], slot s % page_size */
  const int32_t *batch_indices, *positions, *kv_indptr, *kv_indices;
  int64_t batch_size, num_page_entries, num_pages, page_size;
} ignis_rope_quant_params;

/* Paged KV cache (include/ignis/paged_kv.h). Element (page, token, head, d) of the K cache lives
 * at k_cache + page * k_stride_page + token * k_stride_token + head * k_stride_head + d, whatever
 * the layout (NHD and HND differ only in these strides); likewise V. Index arrays are i32,
 * contiguous. Two ways to name a request's pages:
 *   - indptr form (seq_lens NULL): pages indices[indptr[b] .. indptr[b + 1]), length
 *     (pages - 1) * page_size + last_page_len[b];
 *   - block-table form (seq_lens != NULL; indptr, last_page_len NULL): pages
 *     indices[b * block_table_stride + i] for i < pages_per_seq (indices is the block table),
 *     length min(max(seq_lens[b], 0), pages_per_seq * page_size). */
typedef struct ignis_paged_kv_params {
  int64_t num_pages;
  int64_t page_size;
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t batch_size;         /* B: indptr has B + 1 entries */
  int64_t num_page_entries;   /* nnz_pages: length of indices */
  ignis_dtype dtype;          /* cache and append data */
  void *k_cache; int64_t k_stride_page, k_stride_token, k_stride_head;
  void *v_cache; int64_t v_stride_page, v_stride_token, v_stride_head;
  const int32_t *indptr;
  const int32_t *indices;
  const int32_t *last_page_len;
  const int32_t *seq_lens;    /* block-table form: [B] */
  int64_t block_table_stride; /* block-table form: elements between rows of the table */
  int64_t pages_per_seq;      /* block-table form: entries per row */
} ignis_paged_kv_params;

typedef struct ignis_append_kv_params {
  ignis_paged_kv_params cache;
  int64_t nnz;
  const void *key; int64_t key_stride_token, key_stride_head;
  const void *value; int64_t value_stride_token, value_stride_head;
  const int32_t *batch_indices;
  const int32_t *positions;
} ignis_append_kv_params;

/* get_batch_indices_positions (indptr/seq_lens set) or get_seq_lens (kv_indptr/last_page_len). */
typedef enum ignis_kv_index_kind {
  IGNIS_KV_INDEX_BATCH_POSITIONS = 0,
  IGNIS_KV_INDEX_SEQ_LENS = 1
} ignis_kv_index_kind;

typedef struct ignis_kv_index_params {
  ignis_kv_index_kind kind;
  int64_t batch_size;
  int64_t nnz;                /* batch_indices / positions length */
  int64_t page_size;
  const int32_t *indptr;      /* append_indptr or kv_indptr, [B + 1] */
  const int32_t *seq_lens_in; /* BATCH_POSITIONS: [B] */
  const int32_t *last_page_len; /* SEQ_LENS: [B] */
  int32_t *batch_indices;     /* BATCH_POSITIONS outputs, [nnz] */
  int32_t *positions;
  int32_t *seq_lens_out;      /* SEQ_LENS output, [B] */
} ignis_kv_index_params;

/* Attention-state merging (include/ignis/merge_state.h). State i of row (seq, head) is
 *   v_i = v[state i] + seq * stride_seq + head * stride_head (head_dim contiguous elements),
 *   s_i = s[state i][seq * stride_seq + head * stride_head]
 * where "state i" is, for the pair forms, v_a / s_a (i = 0) and v_b / s_b (i = 1), and for
 * merge_states v_a + i * v_a.stride_state (v_b unused). In place: v_out == v_a, s_out == s_a. */
typedef struct ignis_state_layout {
  int64_t stride_seq;
  int64_t stride_head;
  int64_t stride_state;       /* merge_states only */
} ignis_state_layout;

typedef struct ignis_merge_state_params {
  int64_t seq_len;
  int64_t num_heads;
  int64_t head_dim;
  int64_t num_states;         /* 2 for the pair forms */
  int32_t pair;               /* 1: states are (v_a, s_a) and (v_b, s_b); 0: strided states of v_a */
  float log2_scale;           /* s * log2_scale is the base-2 LSE: 1 (base 2) or log2(e) (natural) */
  ignis_dtype dtype;          /* every v */
  const void *v_a; ignis_state_layout v_a_layout;
  const float *s_a; ignis_state_layout s_a_layout;
  const void *v_b; ignis_state_layout v_b_layout;
  const float *s_b; ignis_state_layout s_b_layout;
  const uint8_t *mask; int64_t mask_stride; /* NULL: every row */
  void *v_out; ignis_state_layout v_out_layout;
  float *s_out; ignis_state_layout s_out_layout; /* NULL: not written */
} ignis_merge_state_params;

/* ---- attention kernels ---- */
/* The kernel an attention call runs, chosen by its backend once (backend.h: decode_choose /
 * prefill_choose, at plan creation or per single call), recorded in the plan and passed back in
 * the params of each run. */
typedef enum ignis_attention_kernel {
  IGNIS_KERNEL_CPU = 0,               /* the CPU backend's loops */
  IGNIS_KERNEL_DECODE_M16 = 1,        /* decode_attention_kernel, m16 body (more than 8 rows per block) */
  IGNIS_KERNEL_DECODE_TRANSPOSED = 2, /* decode_attention_kernel, transposed body (at most 8 rows) */
  IGNIS_KERNEL_DECODE_PAGE = 3,       /* decode_page_kernel (a cache of 16 tokens x 8 heads per run) */
  IGNIS_KERNEL_PREFILL_TILE = 4,      /* prefill_attention_kernel */
  IGNIS_KERNEL_PREFILL_WGMMA = 5      /* prefill_wgmma_kernel (sm_90a) */
} ignis_attention_kernel;

/* A backend's choice: the kernel and its wave, the blocks (work item, KV head) resident at once,
 * for which the planners size their work. wave 0: the kernel cannot run this call. */
typedef struct ignis_kernel_choice {
  ignis_attention_kernel kernel;
  int64_t wave;
} ignis_kernel_choice;

/* Decode attention (include/ignis/decode.h). One work item is a chunk [kv_start, kv_end) of one
 * request's keys, for every KV head (grid.y) and the query heads of its group. An item that covers
 * its whole request writes out and lse directly (partial = -1); the items of a split request write
 * f32 partial outputs and base-2 LSEs to row `partial` of the partial buffers, and the merge step
 * combines rows request_partials[b] .. request_partials[b + 1] into out / lse of request b.
 * The schedule lives in the workspace (written by plan_update); its sizes are fixed by the plan,
 * so the run's launch configuration never depends on the batch. */
/* The schedule types (ignis_decode_work, the merge groups) are in sched/schedule.h. */

typedef struct ignis_decode_params {
  int64_t num_qo_heads;
  int64_t num_kv_heads;
  int64_t head_dim;          /* 64, 128, 256 or 512 */
  ignis_dtype dtype;         /* q and out (K/V: cache.dtype) */
  int32_t q_len;             /* query tokens per request (rows b * q_len + i of q / out / lse) */
  const void *q; int64_t q_stride_batch, q_stride_head;
  void *out; int64_t out_stride_batch, out_stride_head;
  float *lse; int64_t lse_stride_batch, lse_stride_head; /* NULL: not written */
  float lse_scale;           /* the kernels keep base-2 LSEs; lse = that * lse_scale (1 or ln 2) */
  float sm_scale_log2;       /* sm_scale * log2(e): scores are kept in base 2 */
  float logits_soft_cap;     /* 0: off */
  int32_t window_left;       /* -1: off */
  int32_t pos_encoding;      /* ignis_pos_encoding */
  float rope_rcp_scale;      /* ROPE_LLAMA: 1 / rope_scale */
  float rope_log2_theta;     /* ROPE_LLAMA: log2(rope_theta) */
  float k_scale, v_scale;    /* keys k_scale * K, values v_scale * V */
  const float *sinks;        /* NULL or [num_qo_heads]: sink logits, natural log */
  /* Keys: a paged cache (cache.indptr != NULL), or one contiguous sequence of contiguous_kv_len
   * keys at cache.k_cache + j * cache.k_stride_token + h * cache.k_stride_head (single decode;
   * num_pages = 1, page strides unused, indptr / indices / last_page_len NULL). */
  ignis_paged_kv_params cache;
  int64_t contiguous_kv_len;
  /* Schedule (device memory in the workspace, or host memory on the CPU backend). */
  const ignis_decode_work *work;  /* [max_work] */
  const int32_t *num_work;        /* [1]: items of this batch (<= max_work) */
  int64_t max_work;               /* grid.x of the attention kernel */
  const int32_t *request_partials; /* [max_batch + 1]; rows of request b: [rp[b], rp[b+1]) */
  const int32_t *batch_size;      /* [1]: requests of this batch (<= max_batch) */
  int64_t max_batch;              /* grid.x of the merge kernel */
  /* This batch's items and requests as the host planned them, and whether any request is split:
   * a run that is not being captured into a CUDA graph sizes its grids by them (and skips the
   * merge when nothing is split); a captured run uses max_work / max_batch, so a replay serves
   * every later plan. launch_work = 0: not known (the maxima). */
  int64_t launch_work;
  int64_t launch_batch;
  int32_t launch_merge;
  /* The kernel (ignis_attention_kernel) the plan chose for this batch: its backend's choice at
   * plan creation, the page kernel for a batch of the page planner's schedule (CUDA, decode.cu:
   * an unsplit batch that fills its waves); a captured run keeps the choice of its capture. */
  int32_t kernel;
  /* Partial rows: item partial p, query token i, head h is row (p * q_len + i) * num_qo_heads + h. */
  float *partial_out;             /* [max_partials * q_len, num_qo_heads, head_dim] f32 */
  float *partial_lse;             /* [max_partials * q_len, num_qo_heads] f32, base 2 */
  /* Merge counters (CUDA): a planned schedule (work != NULL) holds uint32 counters right after
   * work[*num_work], zero before the run (the plan writes them) and zero after it, with which the
   * transposed kernel (blocks of at most 8 query rows; the other kernel launches the merge kernel)
   * merges split requests itself. Request b's partials [f, f + n) = request_partials[b .. b + 1]
   * merge in groups of IGNIS_DECODE_MERGE_GROUP consecutive partials: group g (partials f + 8g ..)
   * counts its blocks of KV head kvh in counter (f / 8 + g + b) * num_kv_heads + kvh (unique: see
   * ignis_decode_merge_counters); the last to arrive merges the group, into partial row f + 8g, or
   * into out / lse when the request has one group. With several groups each group's merger then
   * adds IGNIS_DECODE_MERGE_LEVEL to group 0's counter, and the last of them merges rows f, f + 8,
   * .. into out / lse. The merge order is fixed by the indices alone, so the result does not
   * depend on which block finishes last, nor on the request's place in the batch. */
  /* Implicit schedule (single decode, which knows its one length on the host, and block-table
   * runs, whose split depends only on the batch size and a length bound the host knows: neither
   * copies a schedule). 0: the schedule is the one above. > 0: work, num_work, request_partials and
   * batch_size are NULL; the batch is cache.batch_size requests (1 for single decode, which has
   * contiguous_kv_len keys), each cut into implicit_splits items (grid.x = max_work =
   * cache.batch_size * implicit_splits), item w being ignis_decode_implicit_item(w,
   * implicit_chunk_tokens, implicit_splits) (sched/schedule.h, which every backend uses). One
   * split: an item writes out / lse directly; else item w writes partial row w and request b's
   * rows b * splits .. b * splits + splits - 1 are merged, in the transposed and page kernels with
   * merge_counters when those are given (as with a planned schedule; request b's partials start at
   * b * splits), else by the merge kernel (max_batch = cache.batch_size).
   * On the CPU backend partial_out / partial_lse are NULL: it keeps its own scratch. */
  int64_t implicit_chunk_tokens;
  int64_t implicit_splits;
  uint32_t *merge_counters; /* implicit schedule and length plans: zero before and after the run;
                               NULL: merge kernel */
  /* Block-table runs planned from their lengths (sched/schedule.h: ignis_decode_length_plan;
   * wave_items 0: off). The backend plans the batch (cache.seq_lens) before attending it, then runs
   * that schedule as a planned one. CUDA: every block of the attention kernel plans the batch for
   * itself (work, num_work and batch_size NULL; max_work = wave_items, max_batch =
   * cache.batch_size: the grids' bounds), in the plan's device memory request_partials (written
   * for the m16 kernel's merge kernel) and merge_counters (the transposed kernel's merges); the CPU
   * plans on the host into its own memory (those pointers NULL). */
  ignis_decode_length_plan length_plan;
  /* q as the caller gave it: dtype (the kernels' compute dtype, out's), or fp8 e4m3. The CPU
   * reads an fp8 q itself; CUDA first converts it (exactly) into q_scratch [rows, num_qo_heads,
   * head_dim] of dtype, contiguous (the workspace's), and runs on that. */
  ignis_dtype q_dtype;
  void *q_scratch;
} ignis_decode_params;

/* ---- sampling ---- */
/* Sampling ops (include/ignis/sampling.h). Rows are [rows, vocab] with the last dimension
 * contiguous; output row b reads input row indices[b] (or b). Philox seed and offset: the value, or
 * element 0 (len 1) or element b (len batch) of an i64 array in the op's memory. */
typedef struct ignis_philox_source {
  uint64_t seed;
  uint64_t offset;
  const int64_t *seed_arr;    /* NULL: seed */
  int64_t seed_len;           /* 1 or batch */
  const int64_t *offset_arr;  /* NULL: offset */
  int64_t offset_len;
} ignis_philox_source;

typedef enum ignis_sampling_filter {
  IGNIS_SAMPLING_ALL = 0,             /* every positive weight */
  IGNIS_SAMPLING_TOP_K = 1,
  IGNIS_SAMPLING_TOP_P = 2,
  IGNIS_SAMPLING_MIN_P = 3,
  IGNIS_SAMPLING_TOP_K_TOP_P = 4,     /* joint */
  IGNIS_SAMPLING_TOP_K_THEN_TOP_P = 5 /* top-p within the top-k set */
} ignis_sampling_filter;

typedef enum ignis_sampling_output {
  IGNIS_SAMPLING_OUT_SAMPLE = 0, /* samples[b] */
  IGNIS_SAMPLING_OUT_RENORM = 1, /* out row = allowed weights / their mass */
  IGNIS_SAMPLING_OUT_MASK = 2    /* out row = logits, -inf outside the top-k (keys of the logits) */
} ignis_sampling_output;

typedef struct ignis_sampling_params {
  ignis_sampling_filter filter;
  ignis_sampling_output output;
  int32_t logits;             /* 1: input holds logits, weights exp(x - max) */
  int64_t batch_size;         /* output rows */
  int64_t num_rows;           /* input rows */
  int64_t vocab_size;
  ignis_dtype dtype;          /* input (and out) */
  const void *input; int64_t input_row_stride;
  const void *indices; ignis_dtype indices_dtype; /* NULL: output row b reads row b */
  const void *top_k_arr; ignis_dtype top_k_dtype; int64_t top_k_val; /* arrays: [batch] or NULL */
  const float *top_p_arr; double top_p_val;
  const float *min_p_arr; float min_p_val;
  ignis_philox_source rng;
  void *samples; ignis_dtype samples_dtype; /* OUT_SAMPLE: [batch] i32/i64 */
  void *out; int64_t out_row_stride;        /* OUT_RENORM / OUT_MASK: [rows, vocab], dtype */
  void *workspace; size_t workspace_bytes;  /* the multi-block path's (include/ignis/sampling.h) */
} ignis_sampling_params;

typedef struct ignis_softmax_params {
  int64_t num_rows;
  int64_t vocab_size;
  ignis_dtype dtype;          /* logits */
  ignis_dtype out_dtype;      /* probs: f32 or dtype */
  const void *logits; int64_t logits_row_stride;
  void *probs; int64_t probs_row_stride;
  const float *temperature_arr; /* [rows] or NULL */
  float temperature_val;
} ignis_softmax_params;

typedef struct ignis_speculative_params {
  int64_t batch_size;
  int64_t num_draft;          /* n */
  int64_t vocab_size;
  ignis_dtype dtype;          /* draft and target probs */
  const void *draft_probs; int64_t draft_stride_batch, draft_stride_pos;
  const void *draft_ids; ignis_dtype draft_ids_dtype; int64_t draft_ids_stride_batch, draft_ids_stride_pos;
  const void *target_probs; int64_t target_stride_batch, target_stride_pos;
  void *output_ids; ignis_dtype output_ids_dtype; int64_t output_stride_batch, output_stride_pos;
  void *accepted; ignis_dtype accepted_dtype; /* [batch], += */
  void *emitted; ignis_dtype emitted_dtype;   /* [batch], += */
  ignis_philox_source rng;
} ignis_speculative_params;

typedef struct ignis_top_k_params {
  int64_t num_rows;
  int64_t vocab_size;
  int64_t k;
  int32_t sorted;
  ignis_dtype dtype;          /* input and values */
  const void *input; int64_t input_row_stride;
  void *values; int64_t values_row_stride;
  void *indices; ignis_dtype indices_dtype; int64_t indices_row_stride;
} ignis_top_k_params;

/* The fused top-k transforms (include/ignis/topk.h): rows of input [rows, max_len] (last dimension
 * contiguous); every index array i32. The front end resolves the defaults: page_table_row_starts
 * is row_starts where FlashInfer falls back to it, and NULL (0) otherwise. */
typedef enum ignis_topk_transform_kind {
  IGNIS_TOPK_TRANSFORM_PAGE_TABLE = 0, /* page_table[b, pt_start + j / page_size] * page_size + j % size */
  IGNIS_TOPK_TRANSFORM_RAGGED = 1      /* j + offsets[r] */
} ignis_topk_transform_kind;

typedef struct ignis_topk_transform_params {
  ignis_topk_transform_kind kind;
  int64_t num_rows;
  int64_t max_len;            /* input.shape[1] (< 2^31) */
  int64_t k;                  /* >= 1 */
  int32_t prefer_large;       /* ties at the k-th largest: 1 the highest local indices, 0 the lowest */
  ignis_dtype dtype;          /* input */
  const void *input; int64_t input_row_stride;
  const int32_t *lengths;     /* [rows] */
  const int32_t *row_starts;  /* [rows] or NULL (0) */
  const int32_t *offsets;     /* RAGGED: [rows] */
  const int32_t *page_table;  /* PAGE_TABLE: [page_table_rows, page_table_width] */
  int64_t page_table_rows, page_table_width, page_table_row_stride;
  const int32_t *row_to_batch;          /* PAGE_TABLE: [rows] or NULL (row r reads page-table row r) */
  const int32_t *page_table_row_starts; /* PAGE_TABLE: [rows] or NULL (0) */
  int64_t page_size; int32_t page_shift; /* page_size = 1 << page_shift */
  int32_t *out; int64_t out_row_stride;  /* [rows, k] */
  int32_t *raw_out; int64_t raw_out_row_stride; /* [rows, k] or NULL */
} ignis_topk_transform_params;

/* ---- prefill ---- */
/* Prefill attention (include/ignis/prefill.h). The queries of request b are "packed" as in
 * FlashInfer: packed row r (0 <= r < q_len * group, group = num_qo_heads / num_kv_heads) of KV head
 * kvh is query token r / group, query head kvh * group + r % group, so one tile of rows shares its
 * keys across the GQA group. A work item is one tile of up to q_tile_rows packed rows of one
 * request against a chunk [kv_start, kv_end) of its keys, for every KV head (grid.y). An item
 * that covers all the keys its tile may see writes out / lse directly (partial = -1); the items of
 * a split tile write f32 partial outputs and base-2 LSEs to partial slot `partial`, and a merge
 * entry combines slots first_partial .. first_partial + num_partials - 1 into out / lse. Partial
 * slot p, KV head kvh, tile row t (0 <= t < q_tile_rows) is row (p * num_kv_heads + kvh) *
 * q_tile_rows + t of partial_out [.., head_dim_vo] and partial_lse. The host planner
 * (sched/prefill_plan.h) documents how the schedule is chosen and laid out. */
/* The schedule types (ignis_prefill_request, _work, _merge) are in sched/schedule.h. */

typedef enum ignis_prefill_kv_source {
  IGNIS_PREFILL_KV_CONTIGUOUS = 0, /* one request's keys: k_cache + j * k_stride_token (single prefill) */
  IGNIS_PREFILL_KV_RAGGED = 1,     /* row kv_start + j of k_cache / v_cache */
  IGNIS_PREFILL_KV_PAGED = 2       /* page cache.indices[kv_start + j / page_size], slot j % page_size */
} ignis_prefill_kv_source;

typedef struct ignis_prefill_params {
  int64_t num_qo_heads;
  int64_t num_kv_heads;
  int64_t head_dim_qk;        /* q and k */
  int64_t head_dim_vo;        /* v and out */
  ignis_dtype dtype;          /* q and out (K/V: cache.dtype) */
  const void *q; int64_t q_stride_token, q_stride_head;
  void *out; int64_t out_stride_token, out_stride_head;
  float *lse; int64_t lse_stride_token, lse_stride_head; /* NULL: not written */
  float lse_scale;            /* lse = base-2 LSE * lse_scale (1 or ln 2) */
  float sm_scale_log2;        /* sm_scale * log2(e) */
  float logits_soft_cap;      /* 0: off */
  int32_t window_left;        /* -1: off */
  int32_t mask_mode;          /* ignis_mask_mode */
  int32_t pos_encoding;       /* ignis_pos_encoding */
  float rope_rcp_scale;
  float rope_log2_theta;
  float k_scale, v_scale;
  const float *sinks;         /* NULL or [num_qo_heads], natural log */
  /* IGNIS_MASK_CUSTOM: bit (i * kv_len + j) of request b, counted from byte mask_offset of b,
   * little-endian within a byte, set when query token i sees key j. */
  const uint8_t *custom_mask;
  /* Keys: cache.head_dim is head_dim_qk for K; V rows hold head_dim_vo elements. Contiguous and
   * ragged keys use num_pages = 1 and only the token and head strides. */
  ignis_prefill_kv_source kv_source;
  ignis_paged_kv_params cache;
  int32_t q_tile_rows;        /* packed rows per tile, fixed by the plan */
  int32_t kernel;             /* ignis_attention_kernel: the backend's choice for the plan */
  /* Schedule (device memory in the workspace; host memory on the CPU backend). */
  const ignis_prefill_request *requests; /* [max_batch] */
  const int32_t *batch_size;             /* [1] */
  int64_t max_batch;
  const ignis_prefill_work *work;        /* [max_work] */
  const int32_t *num_work;               /* [1] */
  int64_t max_work;                      /* grid.x of the attention kernel */
  const ignis_prefill_merge *merge;      /* [max_merge] */
  const int32_t *num_merge;              /* [1] */
  int64_t max_merge;                     /* grid.x of the merge kernel (0: no merge launch) */
  float *partial_out;                    /* [max_partials * num_kv_heads * q_tile_rows, head_dim_vo] */
  float *partial_lse;                    /* [max_partials * num_kv_heads * q_tile_rows], base 2 */
  /* Implicit schedule (single prefill: one request, known on the host, so nothing is copied).
   * 0: the schedule above. > 0: requests, work, merge and their counts are NULL; the request is
   * {mask_offset 0, q_start 0, q_len contiguous_q_len, kv_start 0, kv_len contiguous_kv_len}, cut
   * into tiles = ceil(q_len * group / q_tile_rows) tiles and chunks = max(1, ceil(kv_len /
   * implicit_chunk_tokens)) key chunks; item i (max_work = tiles * chunks) is tile i / chunks
   * against keys [c * implicit_chunk_tokens, min((c + 1) * implicit_chunk_tokens, kv_len)),
   * c = i % chunks, partial slot i when chunks > 1 (else -1); merge entry m (max_merge = tiles when
   * chunks > 1, else 0) combines slots m * chunks .. m * chunks + chunks - 1 of tile m.
   * Every backend builds it from the helpers of sched/schedule.h (ignis_prefill_implicit_*). On the
   * CPU backend partial_out / partial_lse are NULL: it keeps its own scratch. */
  int64_t implicit_chunk_tokens;
  int64_t contiguous_q_len;
  int64_t contiguous_kv_len;
  /* Block-table runs (ignis_prefill_run_block_table): qo_indptr != NULL ([cache.batch_size + 1] on
   * the device), kv_source PAGED with the cache in its block-table form, implicit_chunk_tokens 0 and
   * the schedule above NULL (max_merge 0). The batch is cache.batch_size requests, each given the
   * tiles of block_table_max_q_len query tokens (max_work = cache.batch_size * tiles items), item i
   * built by ignis_prefill_block_table_request (sched/schedule.h) over q's num_q_rows rows. */
  const int32_t *qo_indptr;
  int64_t block_table_max_q_len;
  int64_t num_q_rows;
  /* q as given, and CUDA's converted copy of an fp8 q (as in ignis_decode_params), whose rows
   * are [0, max_q_rows) (the plan's max_qo_tokens: such plans take batches from row 0; block-table
   * runs: q's rows). */
  ignis_dtype q_dtype;
  void *q_scratch;
  int64_t max_q_rows;
} ignis_prefill_params;

#ifdef __cplusplus
}
#endif
#endif
