/* CPU backend of decode attention (include/ignis/decode.h), stated plainly.
 *
 * It honours the schedule exactly as the CUDA backend does: every work item (an explicit list, the
 * implicit chunks of single decode and block-table runs, or the schedule a length-planned
 * block-table batch gets here from the same planner as CUDA's; core/params.h) is attended on its own, one task per
 * (item, KV head, block of up to IGNIS_CPU_ATTENTION_ROW_BLOCK query rows). The rows of a KV head
 * are its (query token i, query head h) pairs, token-major, so each key and value row is loaded
 * once per block: converted to f32 (f16 / bf16 by bit operations, fp8 through a 256-entry table), scaled by
 * k_scale / v_scale, and the key rotated at its position (ROPE_LLAMA) in double. Token i of a
 * request of kv_len keys sits at q_pos = kv_len - q_len + i and sees the keys j <= q_pos (and
 * j >= q_pos - window_left when window_left >= 0). A row keeps an online softmax in double (running
 * maximum m of the base-2 scores, sum l, weighted value sum acc):
 *     x = sm_scale * <q, k>;  x += slope_h * (j - q_pos) (ALiBi);  x = cap * tanh(x / cap) when
 *     capped;  s = x * log2(e)
 * The per-head sink is one more state with an empty value and base-2 score sink_h * log2(e); it
 * joins exactly once, where a request's result is finished: in the item itself when it covers the
 * whole request, else in the merge of the request's partial rows
 *     lse2 = M + log2(sum 2^(lse2_i - M) [+ 2^(sink2 - M)]),  out = sum 2^(lse2_i - lse2) out_i
 * (no visible key and no sink: out = 0, lse2 = -inf). Partial rows live in scratch memory owned
 * here, row (partial * q_len + i) * num_qo_heads + h. Results do not depend on the thread count,
 * and a request's result depends only on its own items, so fixed and disabled splits are
 * batch-invariant here too. The per-key math, the tables and finishing a row are shared with
 * prefill (cpu/attention_common.h). */
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu_backend.h"
#include "core/error.h"
#include "core/validate.h"
#include "cpu/attention_common.h"
#include "ignis/decode.h"
#include "sched/decode_plan.h"

static int64_t request_kv_len(const ignis_decode_params *p, int64_t b) {
  const ignis_paged_kv_params *c = &p->cache;
  if (c->seq_lens) /* block-table form (validated on the host: within the table) */
    return ignis_block_table_request_len(c->seq_lens[b], c->pages_per_seq, c->page_size);
  if (!c->indptr)
    return p->contiguous_kv_len;
  return ignis_paged_request_len(c->indptr, c->last_page_len, b, c->page_size);
}

/* Element offsets of key / value j of request b, KV head kv_head, in the cache (K and V strides). */
static void key_offsets(const ignis_decode_params *p, int64_t b, int64_t j, int64_t kv_head,
                        int64_t *k_offset, int64_t *v_offset) {
  const ignis_paged_kv_params *c = &p->cache;
  if (!c->indptr && !c->seq_lens) {
    ignis_cpu_attention_kv_offsets(c, 0, j, kv_head, k_offset, v_offset);
    return;
  }
  const int64_t first = c->seq_lens ? b * c->block_table_stride : c->indptr[b];
  ignis_cpu_attention_kv_offsets(c, c->indices[first + j / c->page_size], j % c->page_size, kv_head, k_offset,
                                 v_offset);
}

/* Write one row's result (token i of request b, query head h): partial row `partial`, or out / lse
 * when partial < 0. */
static void store_result(const ignis_decode_params *p, int64_t b, int32_t partial, int64_t i, int64_t h,
                         const float *out_row, double lse2, const ignis_cpu_attention_scratch *scratch) {
  if (partial >= 0) {
    int64_t row = ((int64_t)partial * p->q_len + i) * p->num_qo_heads + h;
    ignis_cpu_attention_store_partial(scratch, row, p->head_dim, out_row, lse2);
    return;
  }
  int64_t token = b * p->q_len + i;
  ignis_cpu_attention_store_out(p->out, p->dtype, token * p->out_stride_batch + h * p->out_stride_head,
                                p->head_dim, out_row, p->lse,
                                token * p->lse_stride_batch + h * p->lse_stride_head, p->lse_scale, lse2);
}

/* Rows [r0, r0 + count) of one KV head (row r: token r / group, head kv_head * group + r % group)
 * over the keys of one item. */
static void attend_block(const ignis_decode_params *p, const ignis_decode_work *w, int64_t kv_head,
                         int64_t r0, int64_t count, const ignis_cpu_attention_scratch *scratch) {
  enum { BLOCK = IGNIS_CPU_ATTENTION_ROW_BLOCK, MAX_D = IGNIS_CPU_ATTENTION_MAX_HEAD_DIM };
  const int64_t D = p->head_dim, b = w->request, group = p->num_qo_heads / p->num_kv_heads;
  const int64_t kv_len = request_kv_len(p, b);
  /* an implicit chunk may start past a short request's end, and its last one runs to the end */
  const int64_t kv_end = w->kv_end < kv_len ? w->kv_end : kv_len;
  const int64_t kv_start = w->kv_start < kv_end ? w->kv_start : kv_end;
  const double sm_scale = (double)p->sm_scale_log2 / IGNIS_CPU_LOG2E, cap = p->logits_soft_cap;
  const int rope = p->pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA,
            alibi = p->pos_encoding == IGNIS_POS_ENCODING_ALIBI;
  double q[BLOCK][MAX_D], acc[BLOCK][MAX_D], k[MAX_D], v[MAX_D], m[BLOCK], l[BLOCK], slope[BLOCK];
  int64_t token[BLOCK], head[BLOCK], q_pos[BLOCK], first[BLOCK];
  int64_t lo = kv_end, hi = kv_start; /* keys any row of the block sees: [lo, hi) */
  for (int64_t r = 0; r < count; ++r) {
    token[r] = (r0 + r) / group;
    head[r] = kv_head * group + (r0 + r) % group;
    q_pos[r] = kv_len - p->q_len + token[r];
    first[r] = p->window_left >= 0 ? q_pos[r] - p->window_left : 0;
    int64_t q_offset = (b * p->q_len + token[r]) * p->q_stride_batch + head[r] * p->q_stride_head;
    ignis_cpu_attention_load_query(scratch, p->q, p->q_dtype, q_offset, D, rope ? q_pos[r] : -1, q[r]);
    for (int64_t d = 0; d < D; ++d)
      acc[r][d] = 0.0;
    slope[r] = alibi ? ignis_cpu_alibi_slope(head[r], p->num_qo_heads) : 0.0;
    m[r] = -INFINITY;
    l[r] = 0.0;
    int64_t row_lo = first[r] > kv_start ? first[r] : kv_start;
    int64_t row_hi = q_pos[r] + 1 < kv_end ? q_pos[r] + 1 : kv_end;
    if (row_lo < row_hi) {
      lo = row_lo < lo ? row_lo : lo;
      hi = row_hi > hi ? row_hi : hi;
    }
  }
  for (int64_t j = lo; j < hi; ++j) {
    int64_t k_offset, v_offset;
    key_offsets(p, b, j, kv_head, &k_offset, &v_offset);
    ignis_cpu_attention_load_key(scratch, p->cache.dtype, p->cache.k_cache, k_offset, D, p->k_scale,
                                 rope ? j : -1, k);
    ignis_cpu_attention_load_kv(scratch, p->cache.dtype, p->cache.v_cache, v_offset, D, p->v_scale, v);
    for (int64_t r = 0; r < count; ++r)
      if (j <= q_pos[r] && j >= first[r])
        ignis_cpu_softmax_push(ignis_cpu_attention_score(q[r], k, D, sm_scale, slope[r], j - q_pos[r], cap),
                               v, D, &m[r], &l[r], acc[r]);
  }
  for (int64_t r = 0; r < count; ++r) {
    float out_row[MAX_D];
    /* the sink joins where the request is finished: here only when this item is the whole request */
    double sink2 = w->partial < 0 ? ignis_cpu_sink2(p->sinks, head[r]) : -INFINITY;
    double lse2 = ignis_cpu_attention_finish(m[r], l[r], acc[r], sink2, D, out_row);
    store_result(p, b, w->partial, token[r], head[r], out_row, lse2, scratch);
  }
}

/* Merge partial rows of partials [first, first + count) of request b, token i, query head h. */
static void merge_rows(const ignis_decode_params *p, int64_t b, int64_t i, int64_t h, int64_t first,
                       int64_t count, const ignis_cpu_attention_scratch *scratch) {
  const int64_t H = p->num_qo_heads;
  float out_row[IGNIS_CPU_ATTENTION_MAX_HEAD_DIM];
  double lse2 = ignis_cpu_attention_merge(scratch, (first * p->q_len + i) * H + h, p->q_len * H, count,
                                          ignis_cpu_sink2(p->sinks, h), p->head_dim, out_row);
  store_result(p, b, -1, i, h, out_row, lse2, scratch);
}

/* A length-planned block-table batch (core/params.h: length_plan), planned here as the CUDA
 * attention blocks plan it, into one allocation (work, then request_partials, then the lengths and page
 * counts the planner reads). */
typedef struct length_schedule {
  ignis_decode_work *work; /* [wave_items]; the allocation */
  int32_t *request_partials;
  int32_t num_work;
} length_schedule;

static ignis_status plan_lengths(const ignis_decode_params *p, length_schedule *s) {
  const ignis_paged_kv_params *c = &p->cache;
  const int64_t batch = c->batch_size, cap = p->length_plan.wave_items;
  s->work = malloc(sizeof(ignis_decode_work) * (size_t)cap + sizeof(int32_t) * (size_t)(3 * batch + 1));
  if (!s->work)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "decode (cpu): out of host memory");
  s->request_partials = (int32_t *)(s->work + cap);
  int32_t *lens = s->request_partials + batch + 1, *pages = lens + batch;
  for (int64_t b = 0; b < batch; ++b) {
    lens[b] = (int32_t)ignis_block_table_request_len(c->seq_lens[b], c->pages_per_seq, c->page_size);
    pages[b] = ignis_decode_length_pages(lens[b], (int32_t)c->page_size, p->length_plan.bound_pages);
  }
  s->num_work =
      ignis_decode_plan_lengths(&p->length_plan, lens, pages, batch, c->page_size, s->request_partials, s->work);
  return IGNIS_OK;
}

ignis_status ignis_cpu_decode(const ignis_decode_params *p, int32_t device, void *stream) {
  const int64_t H = p->num_qo_heads, Hkv = p->num_kv_heads, group = H / Hkv, q_len = p->q_len;
  const int64_t rows_per_head = q_len * group, block_rows = IGNIS_CPU_ATTENTION_ROW_BLOCK;
  const int64_t blocks_per_head = (rows_per_head + block_rows - 1) / block_rows;
  int64_t num_items, batch, partials;
  ignis_decode_work *owned = NULL; /* items made here (length plans, implicit schedules) */
  const ignis_decode_work *items = p->work;
  const int32_t *request_partials = p->request_partials;
  const int64_t splits = p->implicit_splits;
  if (p->length_plan.wave_items > 0) {
    length_schedule planned = {NULL, NULL, 0};
    IGNIS_TRY(plan_lengths(p, &planned));
    owned = planned.work;
    items = planned.work;
    request_partials = planned.request_partials;
    num_items = planned.num_work;
    batch = p->cache.batch_size;
    partials = request_partials[batch];
  } else if (p->implicit_chunk_tokens > 0) {
    num_items = p->max_work;
    batch = p->cache.batch_size;
    partials = splits > 1 ? num_items : 0;
    owned = malloc(sizeof(ignis_decode_work) * (size_t)num_items);
    if (!owned)
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "decode (cpu): out of host memory");
    for (int64_t i = 0; i < num_items; ++i)
      owned[i] = ignis_decode_implicit_item((int32_t)i, (int32_t)p->implicit_chunk_tokens, (int32_t)splits);
    items = owned;
  } else {
    num_items = *p->num_work;
    batch = *p->batch_size;
    partials = p->request_partials[batch];
  }
  ignis_cpu_attention_scratch *scratch = ignis_cpu_attention_scratch_new(partials * q_len * H, p->head_dim);
  if (!scratch) {
    free(owned);
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "decode (cpu): out of host memory");
  }
  ignis_cpu_attention_fill_tables(scratch, p->cache.dtype, p->pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA,
                                  p->head_dim, p->rope_rcp_scale, p->rope_log2_theta);
  const int64_t rows = partials * q_len;
  int64_t total_keys = 0;
  for (int64_t i = 0; i < num_items; ++i) { /* the work estimate of the parallel loops */
    const int64_t len = request_kv_len(p, items[i].request);
    total_keys += (items[i].kv_end < len ? items[i].kv_end : len) - (items[i].kv_start < len ? items[i].kv_start : len);
  }
  const int64_t tasks = num_items * Hkv * blocks_per_head;
  IGNIS_CPU_PARALLEL_FOR(total_keys * H * q_len * p->head_dim)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t item = t / (Hkv * blocks_per_head), kv_head = t / blocks_per_head % Hkv,
            block = t % blocks_per_head;
    int64_t r0 = block * block_rows, count = rows_per_head - r0;
    attend_block(p, &items[item], kv_head, r0, count < block_rows ? count : block_rows, scratch);
  }
  if (rows > 0) {
    IGNIS_CPU_PARALLEL_FOR(rows * H * p->head_dim)
    for (int64_t t = 0; t < batch * q_len * H; ++t) {
      int64_t b = t / (q_len * H), i = t / H % q_len, h = t % H;
      int64_t first = request_partials ? request_partials[b] : b * splits;
      int64_t count = request_partials ? request_partials[b + 1] - first : splits;
      if (count > 0)
        merge_rows(p, b, i, h, first, count, scratch);
    }
  }
  ignis_cpu_attention_scratch_free(scratch);
  free(owned);
  return IGNIS_OK;
}
