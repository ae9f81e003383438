/* CPU backend of decode attention (include/ignis/decode.h), stated plainly.
 *
 * It honours the schedule exactly as the CUDA backend does: every work item (an explicit list, or
 * the implicit chunks of single decode; core/params.h) is attended on its own, one task per
 * (item, KV head) covering that head's query group in blocks of up to CPU_DECODE_HEAD_BLOCK heads,
 * so each key and value row is converted to f32 once per block. A task keeps an online softmax in
 * double (running maximum m of the base-2 scores, sum l, weighted value sum acc):
 *     x = sm_scale * <q, k>;  x = cap * tanh(x / cap) when capped;  s = x * log2(e)
 *     out = acc / l,  lse2 = m + log2(l)   (no visible key: out = 0, lse2 = -inf)
 * An item covering its whole request writes out / lse (lse2 * lse_scale); items of a split
 * request write f32 partial rows into scratch memory owned here, and the merge step combines each
 * split request's rows: lse2 = M + log2(sum 2^(lse2_i - M)), out = sum 2^(lse2_i - lse2) out_i.
 * Results do not depend on the thread count, and a request's result depends only on its own
 * items, so fixed and disabled splits are batch-invariant here too. */
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/error.h"
#include "cpu/cpu_common.h"

#define CPU_DECODE_HEAD_BLOCK 8
#define CPU_DECODE_MAX_HEAD_DIM 256

static int64_t request_kv_len(const ignis_decode_params *p, int64_t b) {
  if (!p->cache.indptr)
    return p->contiguous_kv_len;
  int64_t pages = (int64_t)p->cache.indptr[b + 1] - p->cache.indptr[b];
  return pages > 0 ? (pages - 1) * p->cache.page_size + p->cache.last_page_len[b] : 0;
}

/* Element offset of key/value j of request b, KV head kv_head, in the cache (K and V strides). */
static void key_offsets(const ignis_decode_params *p, int64_t b, int64_t j, int64_t kv_head,
                        int64_t *k_offset, int64_t *v_offset) {
  const ignis_paged_kv_params *c = &p->cache;
  if (!c->indptr) {
    *k_offset = j * c->k_stride_token + kv_head * c->k_stride_head;
    *v_offset = j * c->v_stride_token + kv_head * c->v_stride_head;
    return;
  }
  int64_t page = c->indices[c->indptr[b] + j / c->page_size], slot = j % c->page_size;
  *k_offset = page * c->k_stride_page + slot * c->k_stride_token + kv_head * c->k_stride_head;
  *v_offset = page * c->v_stride_page + slot * c->v_stride_token + kv_head * c->v_stride_head;
}

typedef struct cpu_decode_scratch {
  float *partial_out; /* [rows, num_qo_heads, head_dim] */
  float *partial_lse; /* [rows, num_qo_heads], base 2 */
} cpu_decode_scratch;

static void store_result(const ignis_decode_params *p, const ignis_decode_work *w, int64_t h,
                         const float *out_row, double lse2, const cpu_decode_scratch *scratch) {
  const int64_t D = p->head_dim;
  if (w->partial >= 0) {
    int64_t row = (int64_t)w->partial * p->num_qo_heads + h;
    for (int64_t d = 0; d < D; ++d)
      scratch->partial_out[row * D + d] = out_row[d];
    scratch->partial_lse[row] = (float)lse2;
    return;
  }
  int64_t b = w->request;
  ignis_cpu_store_row(ignis_cpu_at_mut(p->out, p->dtype, b * p->out_stride_batch + h * p->out_stride_head),
                      p->dtype, D, out_row);
  if (p->lse)
    p->lse[b * p->lse_stride_batch + h * p->lse_stride_head] = (float)(lse2 * p->lse_scale);
}

/* Query heads [h0, h0 + count) (one KV head's group) over the keys of one item. */
static void attend_block(const ignis_decode_params *p, const ignis_decode_work *w, int64_t kv_head,
                         int64_t h0, int64_t count, const cpu_decode_scratch *scratch) {
  const int64_t D = p->head_dim, b = w->request;
  const double log2e = 1.4426950408889634;
  const double sm_scale = (double)p->sm_scale_log2 / log2e, cap = p->logits_soft_cap;
  float q[CPU_DECODE_HEAD_BLOCK][CPU_DECODE_MAX_HEAD_DIM], k[CPU_DECODE_MAX_HEAD_DIM],
      v[CPU_DECODE_MAX_HEAD_DIM];
  double acc[CPU_DECODE_HEAD_BLOCK][CPU_DECODE_MAX_HEAD_DIM], m[CPU_DECODE_HEAD_BLOCK],
      l[CPU_DECODE_HEAD_BLOCK];
  for (int64_t i = 0; i < count; ++i) {
    ignis_cpu_load_row(ignis_cpu_at(p->q, p->dtype, b * p->q_stride_batch + (h0 + i) * p->q_stride_head),
                       p->dtype, D, q[i]);
    m[i] = -INFINITY;
    l[i] = 0.0;
    for (int64_t d = 0; d < D; ++d)
      acc[i][d] = 0.0;
  }
  int64_t start = w->kv_start;
  if (p->window_left >= 0) {
    int64_t first_visible = request_kv_len(p, b) - 1 - p->window_left;
    if (first_visible > start)
      start = first_visible;
  }
  for (int64_t j = start; j < w->kv_end; ++j) {
    int64_t k_offset, v_offset;
    key_offsets(p, b, j, kv_head, &k_offset, &v_offset);
    ignis_cpu_load_row(ignis_cpu_at(p->cache.k_cache, p->dtype, k_offset), p->dtype, D, k);
    ignis_cpu_load_row(ignis_cpu_at(p->cache.v_cache, p->dtype, v_offset), p->dtype, D, v);
    for (int64_t i = 0; i < count; ++i) {
      double dot = 0.0;
      for (int64_t d = 0; d < D; ++d)
        dot += (double)q[i][d] * k[d];
      double x = sm_scale * dot;
      if (cap > 0.0)
        x = cap * tanh(x / cap);
      double s = x * log2e;
      if (s > m[i]) {
        double rescale = exp2(m[i] - s);
        l[i] *= rescale;
        for (int64_t d = 0; d < D; ++d)
          acc[i][d] *= rescale;
        m[i] = s;
      }
      double weight = exp2(s - m[i]);
      l[i] += weight;
      for (int64_t d = 0; d < D; ++d)
        acc[i][d] += weight * v[d];
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    float out_row[CPU_DECODE_MAX_HEAD_DIM];
    double lse2 = l[i] > 0.0 ? m[i] + log2(l[i]) : -INFINITY;
    for (int64_t d = 0; d < D; ++d)
      out_row[d] = l[i] > 0.0 ? (float)(acc[i][d] / l[i]) : 0.0f;
    store_result(p, w, h0 + i, out_row, lse2, scratch);
  }
}

/* Merge partial rows [first, first + rows) of request b, query head h. */
static void merge_rows(const ignis_decode_params *p, int64_t b, int64_t h, int64_t first, int64_t rows,
                       const cpu_decode_scratch *scratch) {
  const int64_t D = p->head_dim, H = p->num_qo_heads;
  double max_lse = -INFINITY;
  for (int64_t r = 0; r < rows; ++r)
    if (scratch->partial_lse[(first + r) * H + h] > max_lse)
      max_lse = scratch->partial_lse[(first + r) * H + h];
  double acc[CPU_DECODE_MAX_HEAD_DIM] = {0}, total = 0.0;
  if (max_lse > -INFINITY)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t row = (first + r) * H + h;
      double weight = exp2(scratch->partial_lse[row] - max_lse);
      total += weight;
      for (int64_t d = 0; d < D; ++d)
        acc[d] += weight * scratch->partial_out[row * D + d];
    }
  float out_row[CPU_DECODE_MAX_HEAD_DIM];
  for (int64_t d = 0; d < D; ++d)
    out_row[d] = total > 0.0 ? (float)(acc[d] / total) : 0.0f;
  double lse2 = total > 0.0 ? max_lse + log2(total) : -INFINITY;
  ignis_decode_work whole = {(int32_t)b, 0, 0, -1};
  store_result(p, &whole, h, out_row, lse2, scratch);
}

ignis_status ignis_cpu_decode(const ignis_decode_params *p) {
  const int64_t H = p->num_qo_heads, Hkv = p->num_kv_heads, group = H / Hkv;
  const int64_t blocks_per_head = (group + CPU_DECODE_HEAD_BLOCK - 1) / CPU_DECODE_HEAD_BLOCK;
  int64_t num_items, batch, rows;
  ignis_decode_work *implicit = NULL;
  const ignis_decode_work *items = p->work;
  if (p->implicit_chunk_tokens > 0) {
    num_items = p->max_work;
    batch = 1;
    rows = num_items > 1 ? num_items : 0;
    implicit = malloc(sizeof(ignis_decode_work) * (size_t)num_items);
    if (!implicit)
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "decode (cpu): out of host memory");
    for (int64_t i = 0; i < num_items; ++i) {
      int64_t start = i * p->implicit_chunk_tokens, end = start + p->implicit_chunk_tokens;
      ignis_decode_work w = {0, (int32_t)start,
                             (int32_t)(end < p->contiguous_kv_len ? end : p->contiguous_kv_len),
                             rows ? (int32_t)i : -1};
      implicit[i] = w;
    }
    items = implicit;
  } else {
    num_items = *p->num_work;
    batch = *p->batch_size;
    rows = p->request_partials[batch];
  }
  cpu_decode_scratch scratch = {NULL, NULL};
  if (rows > 0) {
    scratch.partial_out = malloc(sizeof(float) * (size_t)(rows * H * p->head_dim));
    scratch.partial_lse = malloc(sizeof(float) * (size_t)(rows * H));
    if (!scratch.partial_out || !scratch.partial_lse) {
      free(scratch.partial_out);
      free(scratch.partial_lse);
      free(implicit);
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "decode (cpu): out of host memory");
    }
  }
  int64_t total_keys = 0;
  for (int64_t i = 0; i < num_items; ++i)
    total_keys += items[i].kv_end - items[i].kv_start;
  const int64_t tasks = num_items * Hkv * blocks_per_head;
  IGNIS_CPU_PARALLEL_FOR(total_keys * H * p->head_dim)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t item = t / (Hkv * blocks_per_head), kv_head = t / blocks_per_head % Hkv,
            block = t % blocks_per_head;
    int64_t h0 = kv_head * group + block * CPU_DECODE_HEAD_BLOCK;
    int64_t count = group - block * CPU_DECODE_HEAD_BLOCK;
    attend_block(p, &items[item], kv_head, h0, count < CPU_DECODE_HEAD_BLOCK ? count : CPU_DECODE_HEAD_BLOCK,
                 &scratch);
  }
  if (rows > 0) {
    const int32_t *request_partials = p->request_partials;
    IGNIS_CPU_PARALLEL_FOR(rows * H * p->head_dim)
    for (int64_t t = 0; t < batch * H; ++t) {
      int64_t b = t / H, h = t % H;
      int64_t first = request_partials ? request_partials[b] : 0;
      int64_t count = request_partials ? request_partials[b + 1] - first : rows;
      if (count > 0)
        merge_rows(p, b, h, first, count, &scratch);
    }
  }
  free(scratch.partial_out);
  free(scratch.partial_lse);
  free(implicit);
  return IGNIS_OK;
}
