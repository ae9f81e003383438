/* CPU backend of the paged KV cache ops (include/ignis/paged_kv.h).
 *
 * append: each (token, head) row of head_dim elements is copied byte for byte from the append
 * data into its page slot of K and of V (the data has the cache's dtype). The front end has
 * validated every index on the host; the bounds checks here are the same ones the CUDA kernel
 * makes, so both backends skip the same tokens should a caller bypass the front end.
 * get_batch_indices_positions and get_seq_lens: the formulas of the header, one loop each. */
#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"

/* Element offset of (page, slot) in the K or V cache, or -1 when token t's indices are out of range. */
static int64_t page_slot(const ignis_paged_kv_params *c, int64_t b, int64_t pos, int64_t *slot) {
  if (b < 0 || b >= c->batch_size || pos < 0)
    return -1;
  int64_t entry = (int64_t)c->indptr[b] + pos / c->page_size;
  if (entry >= c->indptr[b + 1] || entry < 0 || entry >= c->num_page_entries)
    return -1;
  int64_t page = c->indices[entry];
  if (page < 0 || page >= c->num_pages)
    return -1;
  *slot = pos % c->page_size;
  return page;
}

ignis_status ignis_cpu_append_paged_kv(const ignis_append_kv_params *p, int32_t device, void *stream) {
  const ignis_paged_kv_params *c = &p->cache;
  const int64_t elem = (int64_t)ignis_dtype_size(c->dtype);
  const size_t row_bytes = (size_t)(c->head_dim * elem);
  const int64_t rows = p->nnz * c->num_kv_heads;
  IGNIS_CPU_PARALLEL_FOR(rows * c->head_dim)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = r / c->num_kv_heads, h = r % c->num_kv_heads, slot;
    int64_t page = page_slot(c, p->batch_indices[t], p->positions[t], &slot);
    if (page < 0)
      continue;
    const char *key = (const char *)p->key + (t * p->key_stride_token + h * p->key_stride_head) * elem;
    const char *value = (const char *)p->value + (t * p->value_stride_token + h * p->value_stride_head) * elem;
    char *k_dst = (char *)c->k_cache + (page * c->k_stride_page + slot * c->k_stride_token + h * c->k_stride_head) * elem;
    char *v_dst = (char *)c->v_cache + (page * c->v_stride_page + slot * c->v_stride_token + h * c->v_stride_head) * elem;
    memcpy(k_dst, key, row_bytes);
    memcpy(v_dst, value, row_bytes);
  }
  return IGNIS_OK;
}

ignis_status ignis_cpu_kv_index(const ignis_kv_index_params *p, int32_t device, void *stream) {
  if (p->kind == IGNIS_KV_INDEX_SEQ_LENS) {
    for (int64_t b = 0; b < p->batch_size; ++b) {
      p->seq_lens_out[b] = (int32_t)ignis_paged_request_len(p->indptr, p->last_page_len, b, p->page_size);
    }
    return IGNIS_OK;
  }
  for (int64_t b = 0; b < p->batch_size; ++b) {
    int64_t first = p->indptr[b], count = (int64_t)p->indptr[b + 1] - first;
    for (int64_t j = 0; j < count; ++j) {
      int64_t t = first + j;
      if (t < 0 || t >= p->nnz)
        continue;
      p->batch_indices[t] = (int32_t)b;
      p->positions[t] = (int32_t)(p->seq_lens_in[b] - count + j);
    }
  }
  return IGNIS_OK;
}
