/* CPU backend of MLA attention and of the latent-cache append (include/ignis/mla.h), stated
 * plainly.
 *
 * It honours the plan's schedule exactly as the CUDA backend does (sched/mla_plan.h): each work
 * item (a tile of query rows, row = token * num_heads + head, against a chunk of keys) is one
 * task; each key of the chunk is loaded once per task into double (ckv 512 values, kpe 64; fp8
 * through the shared conversion; times ckv_scale / kpe_scale) and pushed into every row's online
 * softmax in double (running maximum m of the base-2 scores, sum l, weighted ckv sum acc):
 *     s = sm_scale * log2(e) * (<q_nope, ckv_j> + <q_pe, kpe_j>),  key j visible to token i when
 *     j <= kv_len - q_len + i (causal) or always
 * An item that covers its whole request writes out = acc / l and lse = (m + log2 l) * lse_scale
 * (nothing visible: out 0, lse -inf); a chunk of a split request writes a partial row (f32 values,
 * base-2 LSE) into scratch memory owned here, and each merge item then combines a token's chunks
 * as the LSE merge does: lse2 = M + log2(sum 2^(lse2_c - M)), out = sum 2^(lse2_c - lse2) out_c.
 * Results do not depend on the thread count. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"
#include "ignis/mla.h"

#define CKV IGNIS_MLA_HEAD_DIM_CKV
#define KPE IGNIS_MLA_HEAD_DIM_KPE
#define LOG2E 1.4426950408889634

/* n values at element offset `offset` of base (f16, bf16 or fp8 e4m3), times scale, in double. */
static void load_row(const void *base, ignis_dtype dtype, int64_t offset, int64_t n, double scale,
                     double *out) {
  float tmp[CKV];
  ignis_cpu_load_row((const char *)base + (size_t)offset * ignis_dtype_size(dtype), dtype, n, tmp);
  for (int64_t c = 0; c < n; ++c)
    out[c] = scale * (double)tmp[c];
}

/* Write a finished row (values already divided, base-2 LSE) to out / lse. */
static void store_out(const ignis_mla_params *p, int64_t token, int64_t h, const double *row, double lse2) {
  float tmp[CKV];
  for (int c = 0; c < CKV; ++c)
    tmp[c] = (float)row[c];
  ignis_cpu_store_row(
      ignis_cpu_at_mut(p->out, p->dtype, token * p->out_stride_token + h * p->out_stride_head), p->dtype, CKV,
      tmp);
  if (p->lse)
    p->lse[token * p->lse_stride_token + h * p->lse_stride_head] =
        lse2 == -INFINITY ? -INFINITY : (float)(lse2 * p->lse_scale);
}

/* Returns 0, or -1 when its scratch cannot be allocated (nothing written then). */
static int attend_item(const ignis_mla_params *p, const ignis_mla_work *w, float *partial_out,
                       float *partial_lse) {
  enum { TILE = IGNIS_MLA_TILE_ROWS };
  const int64_t H = p->num_heads, rows = (int64_t)w->q_len * H;
  const int64_t tile = p->tile_rows < TILE ? p->tile_rows : TILE;
  const int64_t count = rows - w->row_start < tile ? rows - w->row_start : tile;
  double(*q)[CKV + KPE] = malloc(sizeof(double[CKV + KPE]) * TILE);
  double(*acc)[CKV] = malloc(sizeof(double[CKV]) * TILE);
  double m[TILE], l[TILE], key[CKV + KPE];
  int64_t last[TILE]; /* the last key each row sees */
  if (!q || !acc) {
    free(q);
    free(acc);
    return -1;
  }
  for (int64_t r = 0; r < count; ++r) {
    const int64_t row = w->row_start + r, token = row / H, h = row % H, t = w->q_row + token;
    load_row(p->q_nope, p->dtype, t * p->q_nope_stride_token + h * p->q_nope_stride_head, CKV, 1.0, q[r]);
    load_row(p->q_pe, p->dtype, t * p->q_pe_stride_token + h * p->q_pe_stride_head, KPE, 1.0, q[r] + CKV);
    last[r] = p->causal ? (int64_t)w->kv_len - w->q_len + token : (int64_t)w->kv_len - 1;
    m[r] = -INFINITY;
    l[r] = 0.0;
    for (int c = 0; c < CKV; ++c)
      acc[r][c] = 0.0;
  }
  for (int64_t j = w->kv_start; j < w->kv_end; ++j) {
    const int64_t page = p->kv_indices[w->page_base + j / p->page_size], slot = j % p->page_size;
    load_row(p->ckv, p->kv_dtype, page * p->ckv_stride_page + slot * p->ckv_stride_token, CKV, p->ckv_scale,
             key);
    load_row(p->kpe, p->kv_dtype, page * p->kpe_stride_page + slot * p->kpe_stride_token, KPE, p->kpe_scale,
             key + CKV);
    for (int64_t r = 0; r < count; ++r) {
      if (j > last[r])
        continue;
      double dot = 0.0;
      for (int c = 0; c < CKV + KPE; ++c)
        dot += q[r][c] * key[c];
      const double s = dot * (double)p->sm_scale_log2;
      if (s > m[r]) {
        const double rescale = exp2(m[r] - s);
        for (int c = 0; c < CKV; ++c)
          acc[r][c] *= rescale;
        l[r] *= rescale;
        m[r] = s;
      }
      const double e = exp2(s - m[r]);
      l[r] += e;
      for (int c = 0; c < CKV; ++c)
        acc[r][c] += e * key[c];
    }
  }
  for (int64_t r = 0; r < count; ++r) {
    const int64_t row = w->row_start + r, token = row / H, h = row % H;
    const double inv = l[r] > 0.0 ? 1.0 / l[r] : 0.0;
    for (int c = 0; c < CKV; ++c)
      acc[r][c] *= inv;
    const double lse2 = l[r] > 0.0 ? m[r] + log2(l[r]) : -INFINITY;
    if (w->partial < 0) {
      store_out(p, w->q_row + token, h, acc[r], lse2);
      continue;
    }
    const int64_t prow = ((int64_t)w->partial + token) * H + h;
    for (int c = 0; c < CKV; ++c)
      partial_out[prow * CKV + c] = (float)acc[r][c];
    partial_lse[prow] = (float)lse2;
  }
  free(q);
  free(acc);
  return 0;
}

static void merge_token(const ignis_mla_params *p, const ignis_mla_merge *mg, int64_t h,
                        const float *partial_out, const float *partial_lse) {
  const int64_t H = p->num_heads;
  double top = -INFINITY, row[CKV] = {0}, sum = 0.0;
  for (int32_t c = 0; c < mg->count; ++c) {
    const double t = partial_lse[((int64_t)mg->partial + (int64_t)c * mg->stride) * H + h];
    top = t > top ? t : top;
  }
  if (top != -INFINITY)
    for (int32_t c = 0; c < mg->count; ++c) {
      const int64_t prow = ((int64_t)mg->partial + (int64_t)c * mg->stride) * H + h;
      if (partial_lse[prow] == -INFINITY)
        continue;
      const double wgt = exp2(partial_lse[prow] - top);
      sum += wgt;
      for (int k = 0; k < CKV; ++k)
        row[k] += wgt * partial_out[prow * CKV + k];
    }
  const double inv = sum > 0.0 ? 1.0 / sum : 0.0;
  for (int k = 0; k < CKV; ++k)
    row[k] *= inv;
  store_out(p, mg->q_row, h, row, sum > 0.0 ? top + log2(sum) : -INFINITY);
}

ignis_status ignis_cpu_mla(const ignis_mla_params *p, int32_t device, void *stream) {
  const int64_t num_work = p->header->num_work, num_merge = p->header->num_merge, H = p->num_heads;
  const int64_t partial_rows = (int64_t)p->header->num_partial_tokens * H;
  float *partial_out = NULL, *partial_lse = NULL;
  if (partial_rows > 0) {
    partial_out = malloc(sizeof(float) * (size_t)(partial_rows * CKV));
    partial_lse = malloc(sizeof(float) * (size_t)partial_rows);
    if (!partial_out || !partial_lse) {
      free(partial_out);
      free(partial_lse);
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "mla (cpu): out of host memory");
    }
  }
  atomic_int failed = 0;
  IGNIS_CPU_PARALLEL_FOR(num_work * IGNIS_MLA_TILE_ROWS * 1024 * 64)
  for (int64_t i = 0; i < num_work; ++i)
    if (attend_item(p, &p->work[i], partial_out, partial_lse) != 0)
      atomic_store(&failed, 1);
  if (atomic_load(&failed)) {
    free(partial_out);
    free(partial_lse);
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "mla (cpu): out of host memory");
  }
  IGNIS_CPU_PARALLEL_FOR(num_merge * H * CKV * 4)
  for (int64_t t = 0; t < num_merge * H; ++t)
    merge_token(p, &p->merge[t / H], t % H, partial_out, partial_lse);
  free(partial_out);
  free(partial_lse);
  return IGNIS_OK;
}

ignis_status ignis_cpu_append_paged_mla_kv(const ignis_append_mla_params *p, int32_t device, void *stream) {
  const size_t elem = ignis_dtype_size(p->dtype);
  for (int64_t t = 0; t < p->nnz; ++t) {
    const int64_t b = p->batch_indices[t], pos = p->positions[t];
    const int64_t page = p->kv_indices[p->kv_indptr[b] + pos / p->page_size], slot = pos % p->page_size;
    memcpy((char *)p->ckv + (size_t)(page * p->ckv_stride_page + slot * p->ckv_stride_token) * elem,
           (const char *)p->append_ckv + (size_t)(t * p->append_ckv_stride) * elem, CKV * elem);
    memcpy((char *)p->kpe + (size_t)(page * p->kpe_stride_page + slot * p->kpe_stride_token) * elem,
           (const char *)p->append_kpe + (size_t)(t * p->append_kpe_stride) * elem, KPE * elem);
  }
  return IGNIS_OK;
}
