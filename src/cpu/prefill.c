/* CPU backend of prefill attention (include/ignis/prefill.h), stated plainly.
 *
 * It honours the schedule exactly as the CUDA backend will (core/params.h: ignis_prefill_params):
 * every work item is attended on its own, one task per (item, KV head, block of up to
 * CPU_PREFILL_ROW_BLOCK packed rows of the item's tile), then every merge entry combines its
 * partial slots. Packed row r of request b is query token i = r / group of query head
 * kv_head * group + r % group, at position q_pos = kv_len - q_len + i. Each key and value row is
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
 * Results do not depend on the thread count. */
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/error.h"
#include "cpu/cpu_common.h"
#include "ignis/prefill.h"
#include "sched/prefill_plan.h"

#define CPU_PREFILL_ROW_BLOCK 8
#define CPU_PREFILL_MAX_HEAD_DIM 256

static const double log2e = 1.4426950408889634;

/* The schedule as host arrays (the params' own, or the implicit one written out). */
typedef struct cpu_schedule {
  const ignis_prefill_request *requests;
  const ignis_prefill_work *work;
  int64_t num_work;
  const ignis_prefill_merge *merge;
  int64_t num_merge;
  int64_t num_partials;
} cpu_schedule;

typedef struct cpu_prefill_shared {
  float *partial_out; /* [slots * num_kv_heads * q_tile_rows, head_dim_vo] */
  float *partial_lse;
  float fp8_table[256];
  double rope_freq[CPU_PREFILL_MAX_HEAD_DIM / 2];
} cpu_prefill_shared;

static int is_fp8(ignis_dtype dtype) {
  return dtype == IGNIS_FP8_E4M3 || dtype == IGNIS_FP8_E5M2;
}

/* Element offsets of key / value j of request r, KV head kv_head. */
static void kv_offsets(const ignis_prefill_params *p, const ignis_prefill_request *r, int64_t j, int64_t kv_head,
                       int64_t *k_offset, int64_t *v_offset) {
  const ignis_paged_kv_params *c = &p->cache;
  int64_t page = 0, slot = j;
  if (p->kv_source == IGNIS_PREFILL_KV_PAGED) {
    page = c->indices[r->kv_start + j / c->page_size];
    slot = j % c->page_size;
  } else if (p->kv_source == IGNIS_PREFILL_KV_RAGGED) {
    slot = r->kv_start + j;
  }
  *k_offset = page * c->k_stride_page + slot * c->k_stride_token + kv_head * c->k_stride_head;
  *v_offset = page * c->v_stride_page + slot * c->v_stride_token + kv_head * c->v_stride_head;
}

/* n elements of the cache times scale, as doubles. */
static void load_kv(const ignis_prefill_params *p, const cpu_prefill_shared *shared, const void *base,
                    int64_t offset, int64_t n, float scale, double *out) {
  if (is_fp8(p->cache.dtype)) {
    const uint8_t *row = (const uint8_t *)base + offset;
    for (int64_t d = 0; d < n; ++d)
      out[d] = (double)scale * shared->fp8_table[row[d]];
    return;
  }
  float row[CPU_PREFILL_MAX_HEAD_DIM];
  ignis_cpu_load_row(ignis_cpu_at(base, p->cache.dtype, offset), p->cache.dtype, n, row);
  for (int64_t d = 0; d < n; ++d)
    out[d] = (double)scale * row[d];
}

/* RoPE (Llama, non-interleaved halves of head_dim_qk) at position pos. */
static void rope_rotate(const ignis_prefill_params *p, const cpu_prefill_shared *shared, int64_t pos, double *x) {
  const int64_t half = p->head_dim_qk / 2;
  for (int64_t t = 0; t < half; ++t) {
    double angle = (double)pos * shared->rope_freq[t], c = cos(angle), s = sin(angle);
    double a = x[t], b = x[t + half];
    x[t] = a * c - b * s;
    x[t + half] = b * c + a * s;
  }
}

static double slope_of(int64_t h, int64_t num_heads) {
  int64_t n = 1;
  while (n * 2 <= num_heads)
    n *= 2;
  return h < n ? exp2(-8.0 * (double)(h + 1) / (double)n) : exp2(-4.0 * (double)(2 * (h - n) + 1) / (double)n);
}

static double sink2_of(const ignis_prefill_params *p, int64_t h) {
  return p->sinks ? (double)p->sinks[h] * log2e : -INFINITY;
}

/* out_row = acc / total with an extra empty state of base-2 score sink2; returns lse2. */
static double finish_row(double m, double l, const double *acc, double sink2, int64_t D, float *out_row) {
  double top = m > sink2 ? m : sink2;
  double kept = l > 0.0 ? exp2(m - top) : 0.0, total = l * kept + (sink2 > -INFINITY ? exp2(sink2 - top) : 0.0);
  for (int64_t d = 0; d < D; ++d)
    out_row[d] = l > 0.0 ? (float)(acc[d] * kept / total) : 0.0f;
  return total > 0.0 ? top + log2(total) : -INFINITY;
}

/* Write packed row `row` of tile row_start (request r, KV head kv_head): partial slot `partial`,
 * or out / lse when partial < 0. */
static void store_row(const ignis_prefill_params *p, const ignis_prefill_request *r, int32_t partial,
                      int64_t row_start, int64_t row, int64_t kv_head, const float *out_row, double lse2,
                      const cpu_prefill_shared *shared) {
  const int64_t D = p->head_dim_vo, group = p->num_qo_heads / p->num_kv_heads;
  if (partial >= 0) {
    int64_t at = ((int64_t)partial * p->num_kv_heads + kv_head) * p->q_tile_rows + (row - row_start);
    for (int64_t d = 0; d < D; ++d)
      shared->partial_out[at * D + d] = out_row[d];
    shared->partial_lse[at] = (float)lse2;
    return;
  }
  int64_t token = r->q_start + row / group, h = kv_head * group + row % group;
  ignis_cpu_store_row(ignis_cpu_at_mut(p->out, p->dtype, token * p->out_stride_token + h * p->out_stride_head),
                      p->dtype, D, out_row);
  if (p->lse)
    p->lse[token * p->lse_stride_token + h * p->lse_stride_head] = (float)(lse2 * p->lse_scale);
}

static int key_visible(const ignis_prefill_params *p, const ignis_prefill_request *r, int64_t i, int64_t q_pos,
                       int64_t j) {
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
static void attend_block(const ignis_prefill_params *p, const ignis_prefill_request *r, const ignis_prefill_work *w,
                         int64_t kv_head, int64_t r0, int64_t count, const cpu_prefill_shared *shared) {
  const int64_t Dqk = p->head_dim_qk, Dvo = p->head_dim_vo, group = p->num_qo_heads / p->num_kv_heads;
  const double sm_scale = (double)p->sm_scale_log2 / log2e, cap = p->logits_soft_cap;
  const int rope = p->pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA, alibi = p->pos_encoding == IGNIS_POS_ENCODING_ALIBI;
  double q[CPU_PREFILL_ROW_BLOCK][CPU_PREFILL_MAX_HEAD_DIM], acc[CPU_PREFILL_ROW_BLOCK][CPU_PREFILL_MAX_HEAD_DIM];
  double k[CPU_PREFILL_MAX_HEAD_DIM], v[CPU_PREFILL_MAX_HEAD_DIM];
  double m[CPU_PREFILL_ROW_BLOCK], l[CPU_PREFILL_ROW_BLOCK], slope[CPU_PREFILL_ROW_BLOCK];
  int64_t token[CPU_PREFILL_ROW_BLOCK], head[CPU_PREFILL_ROW_BLOCK], q_pos[CPU_PREFILL_ROW_BLOCK];
  for (int64_t x = 0; x < count; ++x) {
    token[x] = (r0 + x) / group;
    head[x] = kv_head * group + (r0 + x) % group;
    q_pos[x] = (int64_t)r->kv_len - r->q_len + token[x];
    float qf[CPU_PREFILL_MAX_HEAD_DIM];
    int64_t at = (r->q_start + token[x]) * p->q_stride_token + head[x] * p->q_stride_head;
    ignis_cpu_load_row(ignis_cpu_at(p->q, p->dtype, at), p->dtype, Dqk, qf);
    for (int64_t d = 0; d < Dqk; ++d)
      q[x][d] = qf[d];
    for (int64_t d = 0; d < Dvo; ++d)
      acc[x][d] = 0.0;
    if (rope)
      rope_rotate(p, shared, q_pos[x], q[x]);
    slope[x] = alibi ? slope_of(head[x], p->num_qo_heads) : 0.0;
    m[x] = -INFINITY;
    l[x] = 0.0;
  }
  for (int64_t j = w->kv_start; j < w->kv_end; ++j) {
    int64_t k_offset, v_offset;
    kv_offsets(p, r, j, kv_head, &k_offset, &v_offset);
    load_kv(p, shared, p->cache.k_cache, k_offset, Dqk, p->k_scale, k);
    load_kv(p, shared, p->cache.v_cache, v_offset, Dvo, p->v_scale, v);
    if (rope)
      rope_rotate(p, shared, j, k);
    for (int64_t x = 0; x < count; ++x) {
      if (!key_visible(p, r, token[x], q_pos[x], j))
        continue;
      double dot = 0.0;
      for (int64_t d = 0; d < Dqk; ++d)
        dot += q[x][d] * k[d];
      double logit = sm_scale * dot + slope[x] * (double)(j - q_pos[x]);
      if (cap > 0.0)
        logit = cap * tanh(logit / cap);
      double s = logit * log2e;
      if (s > m[x]) {
        double rescale = exp2(m[x] - s);
        l[x] *= rescale;
        for (int64_t d = 0; d < Dvo; ++d)
          acc[x][d] *= rescale;
        m[x] = s;
      }
      double weight = exp2(s - m[x]);
      l[x] += weight;
      for (int64_t d = 0; d < Dvo; ++d)
        acc[x][d] += weight * v[d];
    }
  }
  for (int64_t x = 0; x < count; ++x) {
    float out_row[CPU_PREFILL_MAX_HEAD_DIM];
    double sink2 = w->partial < 0 ? sink2_of(p, head[x]) : -INFINITY;
    double lse2 = finish_row(m[x], l[x], acc[x], sink2, Dvo, out_row);
    store_row(p, r, w->partial, w->row_start, r0 + x, kv_head, out_row, lse2, shared);
  }
}

/* Packed row `row` of a merge entry's tile, KV head kv_head. */
static void merge_row(const ignis_prefill_params *p, const ignis_prefill_request *r, const ignis_prefill_merge *e,
                      int64_t kv_head, int64_t row, const cpu_prefill_shared *shared) {
  const int64_t D = p->head_dim_vo, group = p->num_qo_heads / p->num_kv_heads;
  double top = -INFINITY, acc[CPU_PREFILL_MAX_HEAD_DIM] = {0}, total = 0.0;
  int64_t base = row - e->row_start;
  for (int64_t s = 0; s < e->num_partials; ++s) {
    double lse2 = shared->partial_lse[((e->first_partial + s) * p->num_kv_heads + kv_head) * p->q_tile_rows + base];
    top = lse2 > top ? lse2 : top;
  }
  if (top > -INFINITY)
    for (int64_t s = 0; s < e->num_partials; ++s) {
      int64_t at = ((e->first_partial + s) * p->num_kv_heads + kv_head) * p->q_tile_rows + base;
      double weight = exp2(shared->partial_lse[at] - top);
      total += weight;
      for (int64_t d = 0; d < D; ++d)
        acc[d] += weight * shared->partial_out[at * D + d];
    }
  float out_row[CPU_PREFILL_MAX_HEAD_DIM];
  double lse2 = finish_row(top, total, acc, sink2_of(p, kv_head * group + row % group), D, out_row);
  store_row(p, r, -1, e->row_start, row, kv_head, out_row, lse2, shared);
}

static void fill_tables(const ignis_prefill_params *p, cpu_prefill_shared *shared) {
  if (is_fp8(p->cache.dtype))
    for (int c = 0; c < 256; ++c)
      shared->fp8_table[c] = p->cache.dtype == IGNIS_FP8_E4M3 ? ignis_fp8_e4m3_to_f32((uint8_t)c)
                                                              : ignis_fp8_e5m2_to_f32((uint8_t)c);
  if (p->pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA)
    for (int64_t t = 0; t < p->head_dim_qk / 2; ++t)
      shared->rope_freq[t] =
          (double)p->rope_rcp_scale * exp2(-(double)p->rope_log2_theta * (double)(2 * t) / (double)p->head_dim_qk);
}

static void run_schedule(const ignis_prefill_params *p, const cpu_schedule *s, const cpu_prefill_shared *shared) {
  const int64_t Hkv = p->num_kv_heads, group = p->num_qo_heads / Hkv, T = p->q_tile_rows;
  const int64_t blocks = (T + CPU_PREFILL_ROW_BLOCK - 1) / CPU_PREFILL_ROW_BLOCK;
  int64_t keys = 0;
  for (int64_t i = 0; i < s->num_work; ++i)
    keys += s->work[i].kv_end - s->work[i].kv_start;
  const int64_t tasks = s->num_work * Hkv * blocks;
  IGNIS_CPU_PARALLEL_FOR(keys * T * p->num_qo_heads / group * (p->head_dim_qk + p->head_dim_vo))
  for (int64_t t = 0; t < tasks; ++t) {
    const ignis_prefill_work *w = &s->work[t / (Hkv * blocks)];
    const ignis_prefill_request *r = &s->requests[w->request];
    int64_t kv_head = t / blocks % Hkv, r0 = w->row_start + t % blocks * CPU_PREFILL_ROW_BLOCK;
    int64_t end = w->row_start + T < (int64_t)r->q_len * group ? w->row_start + T : (int64_t)r->q_len * group;
    int64_t count = end - r0 < CPU_PREFILL_ROW_BLOCK ? end - r0 : CPU_PREFILL_ROW_BLOCK;
    if (count > 0)
      attend_block(p, r, w, kv_head, r0, count, shared);
  }
  const int64_t merge_tasks = s->num_merge * Hkv * T;
  IGNIS_CPU_PARALLEL_FOR(merge_tasks * p->head_dim_vo)
  for (int64_t t = 0; t < merge_tasks; ++t) {
    const ignis_prefill_merge *e = &s->merge[t / (Hkv * T)];
    const ignis_prefill_request *r = &s->requests[e->request];
    int64_t row = e->row_start + t % T;
    if (row < (int64_t)r->q_len * group)
      merge_row(p, r, e, t / T % Hkv, row, shared);
  }
}

ignis_status ignis_cpu_prefill(const ignis_prefill_params *p) {
  const int64_t group = p->num_qo_heads / p->num_kv_heads;
  cpu_schedule s;
  ignis_prefill_request implicit_request;
  ignis_prefill_work *implicit_work = NULL;
  ignis_prefill_merge *implicit_merge = NULL;
  if (p->implicit_chunk_tokens > 0) {
    int64_t tiles = ignis_prefill_implicit_tiles(p->contiguous_q_len, group, p->q_tile_rows);
    int64_t chunks = ignis_prefill_implicit_chunks(p->contiguous_kv_len, p->implicit_chunk_tokens);
    ignis_prefill_request request = {0, 0, (int32_t)p->contiguous_q_len, 0, (int32_t)p->contiguous_kv_len};
    implicit_request = request;
    implicit_work = malloc(sizeof(ignis_prefill_work) * (size_t)(tiles * chunks + 1));
    implicit_merge = malloc(sizeof(ignis_prefill_merge) * (size_t)(tiles + 1));
    if (!implicit_work || !implicit_merge) {
      free(implicit_work);
      free(implicit_merge);
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "prefill (cpu): out of host memory");
    }
    ignis_prefill_implicit_schedule(p->contiguous_q_len, p->contiguous_kv_len, group, p->q_tile_rows,
                                    p->implicit_chunk_tokens, implicit_work, implicit_merge);
    cpu_schedule implicit = {&implicit_request, implicit_work, tiles * chunks,
                             implicit_merge,    chunks > 1 ? tiles : 0, chunks > 1 ? tiles * chunks : 0};
    s = implicit;
  } else {
    int64_t partials = 0;
    for (int32_t m = 0; m < *p->num_merge; ++m)
      partials += p->merge[m].num_partials;
    cpu_schedule given = {p->requests, p->work, *p->num_work, p->merge, *p->num_merge, partials};
    s = given;
  }
  cpu_prefill_shared *shared = calloc(1, sizeof *shared);
  int64_t rows = s.num_partials * p->num_kv_heads * p->q_tile_rows;
  if (shared && rows > 0) {
    shared->partial_out = malloc(sizeof(float) * (size_t)(rows * p->head_dim_vo));
    shared->partial_lse = malloc(sizeof(float) * (size_t)rows);
  }
  ignis_status status = IGNIS_OK;
  if (!shared || (rows > 0 && (!shared->partial_out || !shared->partial_lse))) {
    status = ignis_set_error(IGNIS_ERROR_INTERNAL, "prefill (cpu): out of host memory");
  } else {
    fill_tables(p, shared);
    run_schedule(p, &s, shared);
  }
  if (shared) {
    free(shared->partial_out);
    free(shared->partial_lse);
  }
  free(shared);
  free(implicit_work);
  free(implicit_merge);
  return status;
}
