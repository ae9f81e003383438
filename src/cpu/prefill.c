/* CPU backend of prefill attention (include/ignis/prefill.h), stated plainly.
 *
 * It honours the schedule exactly as the CUDA backend will (core/params.h: ignis_prefill_params):
 * every work item is attended on its own, one task per (item, KV head, block of up to
 * IGNIS_CPU_ATTENTION_ROW_BLOCK packed rows of the item's tile), then every merge entry combines its
 * partial slots. The implicit schedules (single prefill, block-table runs) are written out as lists
 * first, from the same helpers the kernels use. Packed row r of request b is query token i = r / group of
 * query head kv_head * group + r % group, at position q_pos = kv_len - q_len + i. Each key and value row is
 * loaded once per block: converted to f32 (f16 / bf16 by bit operations, fp8 through a table),
 * scaled by k_scale / v_scale and, with ROPE_LLAMA, the key rotated at its position, in double. A
 * row sees key j when j >= q_pos - window_left (with a window) and, by mask mode, always (NONE),
 * j <= q_pos (CAUSAL), or its custom-mask bit is set (CUSTOM). Each row keeps an online softmax in
 * double over its visible keys (running maximum m of the base-2 scores, sum l, weighted value sum
 * acc):
 *     x = sm_scale * <q, k>;  x += slope_h * (j - q_pos) (ALiBi);  x = cap * tanh(x / cap);
 *     s = x * log2(e)
 * The sink is one more state with an empty value, joined once, where the row is finished: in the
 * item when it writes out / lse, else in the merge of the tile's slots
 *     lse2 = M + log2(sum 2^(lse2_p - M) [+ 2^(sink2 - M)]),  out = sum 2^(lse2_p - lse2) out_p
 * (no visible key and no sink: out = 0, lse = -inf). Partial slots live in scratch owned here.
 * Results do not depend on the thread count. The per-key math, the tables and finishing a row are
 * shared with decode (cpu/attention_common.h). */
#include <math.h>
#include <stdlib.h>

#include "cpu/cpu_backend.h"
#include "core/error.h"
#include "cpu/attention_common.h"
#include "ignis/prefill.h"
#include "sched/prefill_plan.h"

/* The schedule as host arrays (the params' own, or the implicit one written out). */
typedef struct cpu_schedule {
  const ignis_prefill_request *requests;
  const ignis_prefill_work *work;
  int64_t num_work;
  const ignis_prefill_merge *merge;
  int64_t num_merge;
  int64_t num_partials;
} cpu_schedule;

/* Element offsets of key / value j of request r, KV head kv_head. */
static void kv_offsets(const ignis_prefill_params *p, const ignis_prefill_request *r, int64_t j,
                       int64_t kv_head, int64_t *k_offset, int64_t *v_offset) {
  int64_t page = 0, slot = j;
  if (p->kv_source == IGNIS_PREFILL_KV_PAGED) {
    page = p->cache.indices[r->kv_start + j / p->cache.page_size];
    slot = j % p->cache.page_size;
  } else if (p->kv_source == IGNIS_PREFILL_KV_RAGGED) {
    slot = r->kv_start + j;
  }
  ignis_cpu_attention_kv_offsets(&p->cache, page, slot, kv_head, k_offset, v_offset);
}

/* Write packed row `row` of tile row_start (request r, KV head kv_head): partial slot `partial`,
 * or out / lse when partial < 0. */
static void store_row(const ignis_prefill_params *p, const ignis_prefill_request *r, int32_t partial,
                      int64_t row_start, int64_t row, int64_t kv_head, const float *out_row, double lse2,
                      const ignis_cpu_attention_scratch *scratch) {
  const int64_t group = p->num_qo_heads / p->num_kv_heads;
  if (partial >= 0) {
    int64_t at = ((int64_t)partial * p->num_kv_heads + kv_head) * p->q_tile_rows + (row - row_start);
    ignis_cpu_attention_store_partial(scratch, at, p->head_dim_vo, out_row, lse2);
    return;
  }
  int64_t token = r->q_start + row / group, h = kv_head * group + row % group;
  ignis_cpu_attention_store_out(p->out, p->dtype, token * p->out_stride_token + h * p->out_stride_head,
                                p->head_dim_vo, out_row, p->lse,
                                token * p->lse_stride_token + h * p->lse_stride_head, p->lse_scale, lse2);
}

static int key_visible(const ignis_prefill_params *p, const ignis_prefill_request *r, int64_t i,
                       int64_t q_pos, int64_t j) {
  if (p->window_left >= 0 && j < q_pos - p->window_left)
    return 0;
  if (p->mask_mode == IGNIS_MASK_CAUSAL)
    return j <= q_pos;
  if (p->mask_mode == IGNIS_MASK_CUSTOM) {
    int64_t bit = i * r->kv_len + j;
    return (p->custom_mask[r->mask_offset + bit / 8] >> (bit % 8)) & 1;
  }
  return 1;
}

/* Packed rows [r0, r0 + count) of one KV head over the keys of one item. */
static void attend_block(const ignis_prefill_params *p, const ignis_prefill_request *r,
                         const ignis_prefill_work *w, int64_t kv_head, int64_t r0, int64_t count,
                         const ignis_cpu_attention_scratch *scratch) {
  enum { BLOCK = IGNIS_CPU_ATTENTION_ROW_BLOCK, MAX_D = IGNIS_CPU_ATTENTION_MAX_HEAD_DIM };
  const int64_t Dqk = p->head_dim_qk, Dvo = p->head_dim_vo, group = p->num_qo_heads / p->num_kv_heads;
  const double sm_scale = (double)p->sm_scale_log2 / IGNIS_CPU_LOG2E, cap = p->logits_soft_cap;
  const int rope = p->pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA,
            alibi = p->pos_encoding == IGNIS_POS_ENCODING_ALIBI;
  double q[BLOCK][MAX_D], acc[BLOCK][MAX_D], k[MAX_D], v[MAX_D], m[BLOCK], l[BLOCK], slope[BLOCK];
  int64_t token[BLOCK], head[BLOCK], q_pos[BLOCK];
  for (int64_t x = 0; x < count; ++x) {
    token[x] = (r0 + x) / group;
    head[x] = kv_head * group + (r0 + x) % group;
    q_pos[x] = (int64_t)r->kv_len - r->q_len + token[x];
    int64_t q_offset = (r->q_start + token[x]) * p->q_stride_token + head[x] * p->q_stride_head;
    ignis_cpu_attention_load_query(scratch, p->q, p->q_dtype, q_offset, Dqk, rope ? q_pos[x] : -1, q[x]);
    for (int64_t d = 0; d < Dvo; ++d)
      acc[x][d] = 0.0;
    slope[x] = alibi ? ignis_cpu_alibi_slope(head[x], p->num_qo_heads) : 0.0;
    m[x] = -INFINITY;
    l[x] = 0.0;
  }
  for (int64_t j = w->kv_start; j < w->kv_end; ++j) {
    int64_t k_offset, v_offset;
    kv_offsets(p, r, j, kv_head, &k_offset, &v_offset);
    ignis_cpu_attention_load_key(scratch, p->cache.dtype, p->cache.k_cache, k_offset, Dqk, p->k_scale,
                                 rope ? j : -1, k);
    ignis_cpu_attention_load_kv(scratch, p->cache.dtype, p->cache.v_cache, v_offset, Dvo, p->v_scale, v);
    for (int64_t x = 0; x < count; ++x)
      if (key_visible(p, r, token[x], q_pos[x], j))
        ignis_cpu_softmax_push(ignis_cpu_attention_score(q[x], k, Dqk, sm_scale, slope[x], j - q_pos[x], cap),
                               v, Dvo, &m[x], &l[x], acc[x]);
  }
  for (int64_t x = 0; x < count; ++x) {
    float out_row[MAX_D];
    double sink2 = w->partial < 0 ? ignis_cpu_sink2(p->sinks, head[x]) : -INFINITY;
    double lse2 = ignis_cpu_attention_finish(m[x], l[x], acc[x], sink2, Dvo, out_row);
    store_row(p, r, w->partial, w->row_start, r0 + x, kv_head, out_row, lse2, scratch);
  }
}

/* Packed row `row` of a merge entry's tile, KV head kv_head. */
static void merge_row(const ignis_prefill_params *p, const ignis_prefill_request *r,
                      const ignis_prefill_merge *e, int64_t kv_head, int64_t row,
                      const ignis_cpu_attention_scratch *scratch) {
  const int64_t Hkv = p->num_kv_heads, group = p->num_qo_heads / Hkv, T = p->q_tile_rows;
  const int64_t first_row = (e->first_partial * Hkv + kv_head) * T + (row - e->row_start);
  float out_row[IGNIS_CPU_ATTENTION_MAX_HEAD_DIM];
  double lse2 = ignis_cpu_attention_merge(scratch, first_row, Hkv * T, e->num_partials,
                                          ignis_cpu_sink2(p->sinks, kv_head * group + row % group),
                                          p->head_dim_vo, out_row);
  store_row(p, r, -1, e->row_start, row, kv_head, out_row, lse2, scratch);
}

static void run_schedule(const ignis_prefill_params *p, const cpu_schedule *s,
                         const ignis_cpu_attention_scratch *scratch) {
  const int64_t Hkv = p->num_kv_heads, group = p->num_qo_heads / Hkv, T = p->q_tile_rows;
  const int64_t block_rows = IGNIS_CPU_ATTENTION_ROW_BLOCK, blocks = (T + block_rows - 1) / block_rows;
  int64_t keys = 0;
  for (int64_t i = 0; i < s->num_work; ++i)
    keys += s->work[i].kv_end - s->work[i].kv_start;
  const int64_t tasks = s->num_work * Hkv * blocks;
  IGNIS_CPU_PARALLEL_FOR(keys * T * p->num_qo_heads / group * (p->head_dim_qk + p->head_dim_vo))
  for (int64_t t = 0; t < tasks; ++t) {
    const ignis_prefill_work *w = &s->work[t / (Hkv * blocks)];
    const ignis_prefill_request *r = &s->requests[w->request];
    int64_t kv_head = t / blocks % Hkv, r0 = w->row_start + t % blocks * block_rows;
    int64_t end = w->row_start + T < (int64_t)r->q_len * group ? w->row_start + T : (int64_t)r->q_len * group;
    int64_t count = end - r0 < block_rows ? end - r0 : block_rows;
    if (count > 0)
      attend_block(p, r, w, kv_head, r0, count, scratch);
  }
  const int64_t merge_tasks = s->num_merge * Hkv * T;
  IGNIS_CPU_PARALLEL_FOR(merge_tasks * p->head_dim_vo)
  for (int64_t t = 0; t < merge_tasks; ++t) {
    const ignis_prefill_merge *e = &s->merge[t / (Hkv * T)];
    const ignis_prefill_request *r = &s->requests[e->request];
    int64_t row = e->row_start + t % T;
    if (row < (int64_t)r->q_len * group)
      merge_row(p, r, e, t / T % Hkv, row, scratch);
  }
}

/* The block-table schedule written out (sched/schedule.h: ignis_prefill_block_table_request):
 * requests [batch] and one item per tile a request has; returns the item count. */
static int64_t block_table_schedule(const ignis_prefill_params *p, ignis_prefill_request *requests,
                                    ignis_prefill_work *work) {
  const int64_t group = p->num_qo_heads / p->num_kv_heads, T = p->q_tile_rows;
  const int32_t capacity = (int32_t)(p->cache.pages_per_seq * p->cache.page_size);
  int64_t items = 0;
  for (int32_t b = 0; b < (int32_t)p->cache.batch_size; ++b) {
    ignis_prefill_request *r = &requests[b];
    if (!ignis_prefill_block_table_request(p->qo_indptr, p->cache.seq_lens, b, (int32_t)p->num_q_rows,
                                           (int32_t)p->cache.block_table_stride, capacity, r))
      continue;
    for (int64_t row = 0; row < (int64_t)r->q_len * group; row += T) {
      ignis_prefill_work w = {b, (int32_t)row, 0, r->kv_len, -1};
      work[items++] = w;
    }
  }
  return items;
}

ignis_status ignis_cpu_prefill(const ignis_prefill_params *p, int32_t device, void *stream) {
  const int64_t group = p->num_qo_heads / p->num_kv_heads;
  cpu_schedule s;
  ignis_prefill_request implicit_request, *block_table_requests = NULL;
  ignis_prefill_work *implicit_work = NULL;
  ignis_prefill_merge *implicit_merge = NULL;
  if (p->qo_indptr) {
    block_table_requests = malloc(sizeof(ignis_prefill_request) * (size_t)p->cache.batch_size);
    implicit_work = malloc(sizeof(ignis_prefill_work) * (size_t)(p->max_work + 1));
    if (!block_table_requests || !implicit_work) {
      free(block_table_requests);
      free(implicit_work);
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "prefill (cpu): out of host memory");
    }
    const int64_t items = block_table_schedule(p, block_table_requests, implicit_work);
    cpu_schedule given = {block_table_requests, implicit_work, items, NULL, 0, 0};
    s = given;
  } else if (p->implicit_chunk_tokens > 0) {
    int64_t tiles = ignis_prefill_implicit_tiles(p->contiguous_q_len, group, p->q_tile_rows);
    int64_t chunks = ignis_prefill_implicit_chunks(p->contiguous_kv_len, p->implicit_chunk_tokens);
    implicit_request = ignis_prefill_implicit_request(p->contiguous_q_len, p->contiguous_kv_len);
    implicit_work = malloc(sizeof(ignis_prefill_work) * (size_t)(tiles * chunks + 1));
    implicit_merge = malloc(sizeof(ignis_prefill_merge) * (size_t)(tiles + 1));
    if (!implicit_work || !implicit_merge) {
      free(implicit_work);
      free(implicit_merge);
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "prefill (cpu): out of host memory");
    }
    ignis_prefill_implicit_schedule(p->contiguous_q_len, p->contiguous_kv_len, group, p->q_tile_rows,
                                    p->implicit_chunk_tokens, implicit_work, implicit_merge);
    cpu_schedule implicit = {&implicit_request, implicit_work,          tiles * chunks,
                             implicit_merge,    chunks > 1 ? tiles : 0, chunks > 1 ? tiles * chunks : 0};
    s = implicit;
  } else {
    int64_t partials = 0;
    for (int32_t m = 0; m < *p->num_merge; ++m)
      partials += p->merge[m].num_partials;
    cpu_schedule given = {p->requests, p->work, *p->num_work, p->merge, *p->num_merge, partials};
    s = given;
  }
  ignis_cpu_attention_scratch *scratch =
      ignis_cpu_attention_scratch_new(s.num_partials * p->num_kv_heads * p->q_tile_rows, p->head_dim_vo);
  ignis_status status = IGNIS_OK;
  if (!scratch) {
    status = ignis_set_error(IGNIS_ERROR_INTERNAL, "prefill (cpu): out of host memory");
  } else {
    ignis_cpu_attention_fill_tables(scratch, p->cache.dtype, p->pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA,
                                    p->head_dim_qk, p->rope_rcp_scale, p->rope_log2_theta);
    run_schedule(p, &s, scratch);
  }
  ignis_cpu_attention_scratch_free(scratch);
  free(block_table_requests);
  free(implicit_work);
  free(implicit_merge);
  return status;
}
