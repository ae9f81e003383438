/* Checks of a paged KV cache description (include/ignis/paged_kv.h), shared by every op that
 * takes one (the paged KV ops, decode, and later prefill): the descriptor (shapes, dtypes, strides,
 * index vectors) and, when the index tensors live on the host, their contents. */
#include <inttypes.h>
#include <string.h>

#include "core/config.h"
#include "core/paged_kv_check.h"
#include "core/validate.h"

static ignis_status check_i32(const char *fn, const char *name, const ignis_tensor *t) {
  if (t->dtype != IGNIS_I32)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be i32", fn, name,
                           ignis_dtype_name(t->dtype));
  return IGNIS_OK;
}

/* A 1-D contiguous i32 tensor; length < 0 accepts any length >= min_length. */
ignis_status ignis_check_index_vector(const char *fn, const char *name, const ignis_tensor *t, int64_t length,
                                      int64_t min_length) {
  IGNIS_TRY(ignis_check_tensor(fn, name, t, 1, 1));
  IGNIS_TRY(check_i32(fn, name, t));
  if (length < 0) {
    if (t->shape[0] < min_length)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: %s.shape[0]=%" PRId64 " but it must be >= %" PRId64, fn, name, t->shape[0],
                             min_length);
    length = t->shape[0];
  }
  return ignis_check_vector(fn, name, t, length);
}

ignis_status ignis_check_page_size(const char *fn, const char *what, int64_t page_size) {
  if (page_size < 1 || page_size > IGNIS_PAGED_KV_MAX_PAGE_SIZE)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s=%" PRId64 " but the page size must be 1..%d",
                           fn, what, page_size, IGNIS_PAGED_KV_MAX_PAGE_SIZE);
  return IGNIS_OK;
}

static int is_cache_dtype(ignis_dtype d) {
  return d == IGNIS_F16 || d == IGNIS_BF16 || d == IGNIS_F32 || d == IGNIS_FP8_E4M3 || d == IGNIS_FP8_E5M2;
}

/* Host: indptr[0..B] non-decreasing within [0, limit]. */
ignis_status ignis_check_indptr_contents(const char *fn, const char *name, const int32_t *indptr,
                                         int64_t batch, int64_t limit, const char *limit_what) {
  if (indptr[0] < 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s[0]=%d is negative", fn, name,
                           (int)indptr[0]);
  for (int64_t b = 0; b < batch; ++b)
    if (indptr[b + 1] < indptr[b])
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: %s is not non-decreasing: %s[%" PRId64 "]=%d > %s[%" PRId64 "]=%d", fn,
                             name, name, b, (int)indptr[b], name, b + 1, (int)indptr[b + 1]);
  if (indptr[batch] > limit)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s[%" PRId64 "]=%d but %s=%" PRId64, fn, name,
                           batch, (int)indptr[batch], limit_what, limit);
  return IGNIS_OK;
}

/* Host: last_page_len[b] in 1..page_size for requests with pages, 0..page_size without. */
ignis_status ignis_check_last_page_len_contents(const char *fn, const char *name, const int32_t *indptr,
                                                const int32_t *last_page_len, int64_t batch,
                                                int64_t page_size) {
  for (int64_t b = 0; b < batch; ++b) {
    int64_t lo = indptr[b + 1] > indptr[b] ? 1 : 0;
    if (last_page_len[b] < lo || last_page_len[b] > page_size)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: %s[%" PRId64 "]=%d but it must be %" PRId64 "..%" PRId64
                             " (page_size=%" PRId64 ")",
                             fn, name, b, (int)last_page_len[b], lo, page_size, page_size);
  }
  return IGNIS_OK;
}

/* K and V of either cache form: layout, shapes, dtypes, strides; fills p's sizes and strides. */
ignis_status ignis_check_paged_kv_tensors(const char *fn, ignis_kv_layout layout, const ignis_tensor *k,
                                          const ignis_tensor *v, ignis_paged_kv_params *p) {
  if (layout != IGNIS_KV_LAYOUT_NHD && layout != IGNIS_KV_LAYOUT_HND)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: cache.layout=%d is not an ignis_kv_layout", fn,
                           (int)layout);
  IGNIS_TRY(ignis_check_tensor(fn, "cache.k_cache", k, 4, 4));
  if (!is_cache_dtype(k->dtype))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: cache.k_cache.dtype=%s but it must be f16, bf16, f32, fp8_e4m3 or fp8_e5m2",
                           fn, ignis_dtype_name(k->dtype));
  IGNIS_TRY(ignis_check_tensor(fn, "cache.v_cache", v, 4, 4));
  IGNIS_TRY(ignis_check_same_dtype(fn, "cache.v_cache", v, "cache.k_cache", k));
  IGNIS_TRY(ignis_check_same_shape(fn, "cache.v_cache", v, "cache.k_cache", k));
  int nhd = layout == IGNIS_KV_LAYOUT_NHD;
  int token_dim = nhd ? 1 : 2, head_dim_index = nhd ? 2 : 1;
  IGNIS_TRY(ignis_check_page_size(fn, nhd ? "cache.k_cache.shape[1]" : "cache.k_cache.shape[2]",
                                  k->shape[token_dim]));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "cache.k_cache", k));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "cache.v_cache", v));
  IGNIS_TRY(ignis_check_disjoint(fn, "cache.v_cache", v, "cache.k_cache", k));
  p->num_pages = k->shape[0];
  p->page_size = k->shape[token_dim];
  p->num_kv_heads = k->shape[head_dim_index];
  p->head_dim = k->shape[3];
  p->dtype = k->dtype;
  p->k_cache = k->data;
  p->k_stride_page = k->strides[0];
  p->k_stride_token = k->strides[token_dim];
  p->k_stride_head = k->strides[head_dim_index];
  p->v_cache = v->data;
  p->v_stride_page = v->strides[0];
  p->v_stride_token = v->strides[token_dim];
  p->v_stride_head = v->strides[head_dim_index];
  return IGNIS_OK;
}

/* The cache description: shapes, dtypes, strides; fills p (pointers, sizes, strides). */
ignis_status ignis_check_paged_kv_cache(const char *fn, const ignis_paged_kv_cache *cache,
                                        ignis_paged_kv_params *p) {
  if (!cache)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  static const ignis_paged_kv_cache defaults = IGNIS_PAGED_KV_CACHE_INIT;
  ignis_paged_kv_cache read;
  IGNIS_TRY(ignis_read_config(fn, "cache.size", "IGNIS_PAGED_KV_CACHE_INIT", &read, &defaults, cache, sizeof read,
                              IGNIS_CONFIG_END(ignis_paged_kv_cache, last_page_len)));
  cache = &read;
  memset(p, 0, sizeof *p);
  IGNIS_TRY(ignis_check_paged_kv_tensors(fn, cache->layout, &cache->k_cache, &cache->v_cache, p));
  IGNIS_TRY(ignis_check_index_vector(fn, "cache.indptr", &cache->indptr, -1, 1));
  IGNIS_TRY(ignis_check_index_vector(fn, "cache.indices", &cache->indices, -1, 0));
  int64_t batch = cache->indptr.shape[0] - 1;
  IGNIS_TRY(ignis_check_index_vector(fn, "cache.last_page_len", &cache->last_page_len, batch, 0));
  p->batch_size = batch;
  p->num_page_entries = cache->indices.shape[0];
  p->indptr = (const int32_t *)cache->indptr.data;
  p->indices = (const int32_t *)cache->indices.data;
  p->last_page_len = (const int32_t *)cache->last_page_len.data;
  return IGNIS_OK;
}

ignis_status ignis_check_block_table_kv_cache(const char *fn, const ignis_block_table_kv_cache *cache,
                                              ignis_paged_kv_params *p) {
  if (!cache)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  static const ignis_block_table_kv_cache defaults = IGNIS_BLOCK_TABLE_KV_CACHE_INIT;
  ignis_block_table_kv_cache read;
  IGNIS_TRY(ignis_read_config(fn, "cache.size", "IGNIS_BLOCK_TABLE_KV_CACHE_INIT", &read, &defaults, cache,
                              sizeof read, IGNIS_CONFIG_END(ignis_block_table_kv_cache, seq_lens)));
  cache = &read;
  memset(p, 0, sizeof *p);
  IGNIS_TRY(ignis_check_paged_kv_tensors(fn, cache->layout, &cache->k_cache, &cache->v_cache, p));
  const ignis_tensor *table = &cache->block_tables;
  IGNIS_TRY(ignis_check_tensor(fn, "cache.block_tables", table, 2, 2));
  IGNIS_TRY(check_i32(fn, "cache.block_tables", table));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "cache.block_tables", table));
  if (table->shape[1] > INT32_MAX / p->page_size)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: cache.block_tables.shape[1]=%" PRId64 " pages of %" PRId64
                           " tokens exceed %d tokens per request",
                           fn, table->shape[1], p->page_size, INT32_MAX);
  IGNIS_TRY(ignis_check_index_vector(fn, "cache.seq_lens", &cache->seq_lens, table->shape[0], 0));
  p->batch_size = table->shape[0];
  p->indices = (const int32_t *)table->data;
  p->block_table_stride = table->strides[0];
  p->pages_per_seq = table->shape[1];
  p->num_page_entries = p->batch_size > 0 ? (p->batch_size - 1) * p->block_table_stride + p->pages_per_seq : 0;
  p->seq_lens = (const int32_t *)cache->seq_lens.data;
  return IGNIS_OK;
}

ignis_status ignis_check_block_table_contents(const char *fn, const ignis_paged_kv_params *p) {
  const int64_t capacity = p->pages_per_seq * p->page_size;
  for (int64_t b = 0; b < p->batch_size; ++b) {
    const int64_t len = p->seq_lens[b];
    if (len < 0 || len > capacity)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: cache.seq_lens[%" PRId64 "]=%" PRId64 " but it must be 0..%" PRId64
                             " (cache.block_tables.shape[1] x page_size)",
                             fn, b, len, capacity);
    const int32_t *row = p->indices + b * p->block_table_stride;
    for (int64_t i = 0; i < (len + p->page_size - 1) / p->page_size; ++i)
      if (row[i] < 0 || row[i] >= p->num_pages)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: cache.block_tables[%" PRId64 ", %" PRId64 "]=%d but the cache has %" PRId64
                               " pages",
                               fn, b, i, (int)row[i], p->num_pages);
  }
  return IGNIS_OK;
}

/* Host: the cache's index contents. */
ignis_status ignis_check_paged_kv_contents(const char *fn, const ignis_paged_kv_params *p) {
  IGNIS_TRY(ignis_check_indptr_contents(fn, "cache.indptr", p->indptr, p->batch_size, p->num_page_entries,
                                        "cache.indices.shape[0]"));
  for (int64_t i = 0; i < p->num_page_entries; ++i)
    if (p->indices[i] < 0 || p->indices[i] >= p->num_pages)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: cache.indices[%" PRId64 "]=%d but the cache has %" PRId64 " pages", fn, i,
                             (int)p->indices[i], p->num_pages);
  return ignis_check_last_page_len_contents(fn, "cache.last_page_len", p->indptr, p->last_page_len,
                                            p->batch_size, p->page_size);
}
