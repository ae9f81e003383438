/* CPU backend of decode attention (include/ignis/decode.h), stated plainly.
 *
 * It honours the schedule exactly as the CUDA backend does: every work item (an explicit list, or
 * the implicit chunks of single decode; core/params.h) is attended on its own, one task per
 * (item, KV head, block of up to CPU_DECODE_ROW_BLOCK query rows). The rows of a KV head are its
 * (query token i, query head h) pairs, token-major, so each key and value row is loaded once per
 * block: converted to f32 (f16 / bf16 by bit operations, fp8 through a 256-entry table), scaled by
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
 * batch-invariant here too. */
#include <math.h>
#include <stdlib.h>

#include "core/backend.h"
#include "core/error.h"
#include "cpu/cpu_common.h"
#include "ignis/decode.h"

#define CPU_DECODE_ROW_BLOCK 8
#define CPU_DECODE_MAX_HEAD_DIM 256

static const double log2e = 1.4426950408889634;

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

/* What every task shares: scratch rows, the fp8 table and the RoPE frequencies. */
typedef struct cpu_decode_shared {
  float *partial_out; /* [rows, num_qo_heads, head_dim] */
  float *partial_lse; /* [rows, num_qo_heads], base 2 */
  float fp8_table[256];
  double rope_freq[CPU_DECODE_MAX_HEAD_DIM / 2]; /* rope_rcp_scale * theta^(-2t / head_dim) */
} cpu_decode_shared;

/* n elements of the cache (dtype f16, bf16 or fp8) times scale, as doubles. */
static void load_kv_row(const ignis_decode_params *p, const cpu_decode_shared *shared, const void *cache,
                        int64_t offset, float scale, double *out) {
  const int64_t D = p->head_dim;
  if (p->cache.dtype == IGNIS_FP8_E4M3 || p->cache.dtype == IGNIS_FP8_E5M2) {
    const uint8_t *row = (const uint8_t *)cache + offset;
    for (int64_t d = 0; d < D; ++d)
      out[d] = (double)scale * shared->fp8_table[row[d]];
    return;
  }
  float row[CPU_DECODE_MAX_HEAD_DIM];
  ignis_cpu_load_row(ignis_cpu_at(cache, p->cache.dtype, offset), p->cache.dtype, D, row);
  for (int64_t d = 0; d < D; ++d)
    out[d] = (double)scale * row[d];
}

/* RoPE (Llama, non-interleaved halves): element t pairs with t + D/2, angle pos * freq[t]. */
static void rotate(const ignis_decode_params *p, const cpu_decode_shared *shared, int64_t pos, double *x) {
  const int64_t half = p->head_dim / 2;
  for (int64_t t = 0; t < half; ++t) {
    double angle = (double)pos * shared->rope_freq[t], c = cos(angle), s = sin(angle);
    double a = x[t], b = x[t + half];
    x[t] = a * c - b * s;
    x[t + half] = b * c + a * s;
  }
}

static double alibi_slope(int64_t h, int64_t num_heads) {
  int64_t n = 1;
  while (n * 2 <= num_heads)
    n *= 2;
  return h < n ? exp2(-8.0 * (double)(h + 1) / (double)n)
               : exp2(-4.0 * (double)(2 * (h - n) + 1) / (double)n);
}

/* Base-2 sink score of query head h, or -inf without sinks. */
static double sink_score(const ignis_decode_params *p, int64_t h) {
  return p->sinks ? (double)p->sinks[h] * log2e : -INFINITY;
}

/* Write one row's result (token i of request b, query head h): partial row `partial`, or out / lse
 * when partial < 0. */
static void store_result(const ignis_decode_params *p, int64_t b, int32_t partial, int64_t i, int64_t h,
                         const float *out_row, double lse2, const cpu_decode_shared *shared) {
  const int64_t D = p->head_dim;
  if (partial >= 0) {
    int64_t row = ((int64_t)partial * p->q_len + i) * p->num_qo_heads + h;
    for (int64_t d = 0; d < D; ++d)
      shared->partial_out[row * D + d] = out_row[d];
    shared->partial_lse[row] = (float)lse2;
    return;
  }
  int64_t token = b * p->q_len + i;
  ignis_cpu_store_row(
      ignis_cpu_at_mut(p->out, p->dtype, token * p->out_stride_batch + h * p->out_stride_head), p->dtype, D,
      out_row);
  if (p->lse)
    p->lse[token * p->lse_stride_batch + h * p->lse_stride_head] = (float)(lse2 * p->lse_scale);
}

/* Finish a state (max m, sum l, weighted sum acc, all base 2) with an extra empty-valued state of
 * score sink2 (-inf: none): out_row = acc / total, returns lse2. */
static double finish_state(double m, double l, const double *acc, double sink2, int64_t D, float *out_row) {
  double top = m > sink2 ? m : sink2;
  double kept = l > 0.0 ? exp2(m - top) : 0.0,
         total = l * kept + (sink2 > -INFINITY ? exp2(sink2 - top) : 0.0);
  for (int64_t d = 0; d < D; ++d)
    out_row[d] = l > 0.0 ? (float)(acc[d] * kept / total) : 0.0f;
  return total > 0.0 ? top + log2(total) : -INFINITY;
}

/* Rows [r0, r0 + count) of one KV head (row r: token r / group, head kv_head * group + r % group)
 * over the keys of one item. */
static void attend_block(const ignis_decode_params *p, const ignis_decode_work *w, int64_t kv_head,
                         int64_t r0, int64_t count, const cpu_decode_shared *shared) {
  const int64_t D = p->head_dim, b = w->request, group = p->num_qo_heads / p->num_kv_heads;
  const int64_t kv_len = request_kv_len(p, b);
  const double sm_scale = (double)p->sm_scale_log2 / log2e, cap = p->logits_soft_cap;
  const int rope = p->pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA,
            alibi = p->pos_encoding == IGNIS_POS_ENCODING_ALIBI;
  double q[CPU_DECODE_ROW_BLOCK][CPU_DECODE_MAX_HEAD_DIM], acc[CPU_DECODE_ROW_BLOCK][CPU_DECODE_MAX_HEAD_DIM];
  double k[CPU_DECODE_MAX_HEAD_DIM], v[CPU_DECODE_MAX_HEAD_DIM];
  double m[CPU_DECODE_ROW_BLOCK], l[CPU_DECODE_ROW_BLOCK], slope[CPU_DECODE_ROW_BLOCK];
  int64_t token[CPU_DECODE_ROW_BLOCK], head[CPU_DECODE_ROW_BLOCK], q_pos[CPU_DECODE_ROW_BLOCK],
      first[CPU_DECODE_ROW_BLOCK];
  int64_t lo = w->kv_end, hi = w->kv_start; /* keys any row of the block sees: [lo, hi) */
  for (int64_t r = 0; r < count; ++r) {
    token[r] = (r0 + r) / group;
    head[r] = kv_head * group + (r0 + r) % group;
    q_pos[r] = kv_len - p->q_len + token[r];
    first[r] = p->window_left >= 0 ? q_pos[r] - p->window_left : 0;
    int64_t row = b * p->q_len + token[r];
    float qf[CPU_DECODE_MAX_HEAD_DIM];
    ignis_cpu_load_row(ignis_cpu_at(p->q, p->dtype, row * p->q_stride_batch + head[r] * p->q_stride_head),
                       p->dtype, D, qf);
    for (int64_t d = 0; d < D; ++d) {
      q[r][d] = qf[d];
      acc[r][d] = 0.0;
    }
    if (rope)
      rotate(p, shared, q_pos[r], q[r]);
    slope[r] = alibi ? alibi_slope(head[r], p->num_qo_heads) : 0.0;
    m[r] = -INFINITY;
    l[r] = 0.0;
    int64_t row_lo = first[r] > w->kv_start ? first[r] : w->kv_start;
    int64_t row_hi = q_pos[r] + 1 < w->kv_end ? q_pos[r] + 1 : w->kv_end;
    if (row_lo < row_hi) {
      lo = row_lo < lo ? row_lo : lo;
      hi = row_hi > hi ? row_hi : hi;
    }
  }
  for (int64_t j = lo; j < hi; ++j) {
    int64_t k_offset, v_offset;
    key_offsets(p, b, j, kv_head, &k_offset, &v_offset);
    load_kv_row(p, shared, p->cache.k_cache, k_offset, p->k_scale, k);
    load_kv_row(p, shared, p->cache.v_cache, v_offset, p->v_scale, v);
    if (rope)
      rotate(p, shared, j, k);
    for (int64_t r = 0; r < count; ++r) {
      if (j > q_pos[r] || j < first[r])
        continue;
      double dot = 0.0;
      for (int64_t d = 0; d < D; ++d)
        dot += q[r][d] * k[d];
      double x = sm_scale * dot + slope[r] * (double)(j - q_pos[r]);
      if (cap > 0.0)
        x = cap * tanh(x / cap);
      double s = x * log2e;
      if (s > m[r]) {
        double rescale = exp2(m[r] - s);
        l[r] *= rescale;
        for (int64_t d = 0; d < D; ++d)
          acc[r][d] *= rescale;
        m[r] = s;
      }
      double weight = exp2(s - m[r]);
      l[r] += weight;
      for (int64_t d = 0; d < D; ++d)
        acc[r][d] += weight * v[d];
    }
  }
  for (int64_t r = 0; r < count; ++r) {
    float out_row[CPU_DECODE_MAX_HEAD_DIM];
    /* the sink joins where the request is finished: here only when this item is the whole request */
    double sink2 = w->partial < 0 ? sink_score(p, head[r]) : -INFINITY;
    double lse2 = finish_state(m[r], l[r], acc[r], sink2, D, out_row);
    store_result(p, b, w->partial, token[r], head[r], out_row, lse2, shared);
  }
}

/* Merge partial rows of partials [first, first + count) of request b, token i, query head h. */
static void merge_rows(const ignis_decode_params *p, int64_t b, int64_t i, int64_t h, int64_t first,
                       int64_t count, const cpu_decode_shared *shared) {
  const int64_t D = p->head_dim, H = p->num_qo_heads;
  double max_lse = -INFINITY;
  for (int64_t c = 0; c < count; ++c) {
    double lse2 = shared->partial_lse[((first + c) * p->q_len + i) * H + h];
    max_lse = lse2 > max_lse ? lse2 : max_lse;
  }
  double acc[CPU_DECODE_MAX_HEAD_DIM] = {0}, total = 0.0;
  if (max_lse > -INFINITY)
    for (int64_t c = 0; c < count; ++c) {
      int64_t row = ((first + c) * p->q_len + i) * H + h;
      double weight = exp2(shared->partial_lse[row] - max_lse);
      total += weight;
      for (int64_t d = 0; d < D; ++d)
        acc[d] += weight * shared->partial_out[row * D + d];
    }
  float out_row[CPU_DECODE_MAX_HEAD_DIM];
  double lse2 = finish_state(max_lse, total, acc, sink_score(p, h), D, out_row);
  store_result(p, b, -1, i, h, out_row, lse2, shared);
}

static void fill_tables(const ignis_decode_params *p, cpu_decode_shared *shared) {
  if (p->cache.dtype == IGNIS_FP8_E4M3 || p->cache.dtype == IGNIS_FP8_E5M2)
    for (int c = 0; c < 256; ++c)
      shared->fp8_table[c] = p->cache.dtype == IGNIS_FP8_E4M3 ? ignis_fp8_e4m3_to_f32((uint8_t)c)
                                                              : ignis_fp8_e5m2_to_f32((uint8_t)c);
  if (p->pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA)
    for (int64_t t = 0; t < p->head_dim / 2; ++t)
      shared->rope_freq[t] = (double)p->rope_rcp_scale *
                             exp2(-(double)p->rope_log2_theta * (double)(2 * t) / (double)p->head_dim);
}

ignis_status ignis_cpu_decode(const ignis_decode_params *p) {
  const int64_t H = p->num_qo_heads, Hkv = p->num_kv_heads, group = H / Hkv, q_len = p->q_len;
  const int64_t rows_per_head = q_len * group;
  const int64_t blocks_per_head = (rows_per_head + CPU_DECODE_ROW_BLOCK - 1) / CPU_DECODE_ROW_BLOCK;
  int64_t num_items, batch, partials;
  ignis_decode_work *implicit = NULL;
  const ignis_decode_work *items = p->work;
  if (p->implicit_chunk_tokens > 0) {
    num_items = p->max_work;
    batch = 1;
    partials = num_items > 1 ? num_items : 0;
    implicit = malloc(sizeof(ignis_decode_work) * (size_t)num_items);
    if (!implicit)
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "decode (cpu): out of host memory");
    for (int64_t i = 0; i < num_items; ++i) {
      int64_t start = i * p->implicit_chunk_tokens, end = start + p->implicit_chunk_tokens;
      ignis_decode_work w = {0, (int32_t)start,
                             (int32_t)(end < p->contiguous_kv_len ? end : p->contiguous_kv_len),
                             partials ? (int32_t)i : -1};
      implicit[i] = w;
    }
    items = implicit;
  } else {
    num_items = *p->num_work;
    batch = *p->batch_size;
    partials = p->request_partials[batch];
  }
  cpu_decode_shared *shared = calloc(1, sizeof *shared);
  if (!shared) {
    free(implicit);
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "decode (cpu): out of host memory");
  }
  fill_tables(p, shared);
  const int64_t rows = partials * q_len;
  if (rows > 0) {
    shared->partial_out = malloc(sizeof(float) * (size_t)(rows * H * p->head_dim));
    shared->partial_lse = malloc(sizeof(float) * (size_t)(rows * H));
    if (!shared->partial_out || !shared->partial_lse) {
      free(shared->partial_out);
      free(shared->partial_lse);
      free(shared);
      free(implicit);
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "decode (cpu): out of host memory");
    }
  }
  int64_t total_keys = 0;
  for (int64_t i = 0; i < num_items; ++i)
    total_keys += items[i].kv_end - items[i].kv_start;
  const int64_t tasks = num_items * Hkv * blocks_per_head;
  IGNIS_CPU_PARALLEL_FOR(total_keys * H * q_len * p->head_dim)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t item = t / (Hkv * blocks_per_head), kv_head = t / blocks_per_head % Hkv,
            block = t % blocks_per_head;
    int64_t r0 = block * CPU_DECODE_ROW_BLOCK, count = rows_per_head - r0;
    attend_block(p, &items[item], kv_head, r0, count < CPU_DECODE_ROW_BLOCK ? count : CPU_DECODE_ROW_BLOCK,
                 shared);
  }
  if (rows > 0) {
    const int32_t *request_partials = p->request_partials;
    IGNIS_CPU_PARALLEL_FOR(rows * H * p->head_dim)
    for (int64_t t = 0; t < batch * q_len * H; ++t) {
      int64_t b = t / (q_len * H), i = t / H % q_len, h = t % H;
      int64_t first = request_partials ? request_partials[b] : 0;
      int64_t count = request_partials ? request_partials[b + 1] - first : partials;
      if (count > 0)
        merge_rows(p, b, i, h, first, count, shared);
    }
  }
  free(shared->partial_out);
  free(shared->partial_lse);
  free(shared);
  free(implicit);
  return IGNIS_OK;
}
