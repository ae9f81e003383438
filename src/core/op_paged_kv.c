/* Front end of the paged KV cache ops (include/ignis/paged_kv.h): validate the cache description
 * and the call's tensors, fill the flat params (core/params.h) and dispatch to the backend where
 * the tensors live. On the host the index contents are validated too, all before anything is
 * written; on a CUDA device they cannot be read here, and the kernels bounds-check instead. */
#include <inttypes.h>

#include "core/backend.h"
#include "core/paged_kv_check.h"
#include "core/validate.h"
#include "ignis/paged_kv.h"

ignis_status ignis_append_paged_kv_cache(const ignis_tensor *append_key, const ignis_tensor *append_value,
                                         const ignis_tensor *batch_indices, const ignis_tensor *positions,
                                         const ignis_paged_kv_cache *cache, void *stream) {
  static const char fn[] = "ignis_append_paged_kv_cache";
  ignis_clear_error();
  ignis_append_kv_params p = {0};
  IGNIS_TRY(ignis_check_paged_kv_cache(fn, cache, &p.cache));
  IGNIS_TRY(ignis_check_tensor(fn, "append_key", append_key, 3, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "append_key", append_key, "cache.k_cache", &cache->k_cache));
  IGNIS_TRY(ignis_check_dim(fn, "append_key", append_key, 1, p.cache.num_kv_heads, "the cache's num_kv_heads"));
  IGNIS_TRY(ignis_check_dim(fn, "append_key", append_key, 2, p.cache.head_dim, "the cache's head_dim"));
  IGNIS_TRY(ignis_check_tensor(fn, "append_value", append_value, 3, 3));
  IGNIS_TRY(ignis_check_same_dtype(fn, "append_value", append_value, "cache.v_cache", &cache->v_cache));
  IGNIS_TRY(ignis_check_same_shape(fn, "append_value", append_value, "append_key", append_key));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "append_key", append_key));
  IGNIS_TRY(ignis_check_last_dim_contiguous(fn, "append_value", append_value));
  int64_t nnz = append_key->shape[0];
  IGNIS_TRY(ignis_check_index_vector(fn, "batch_indices", batch_indices, nnz, 0));
  IGNIS_TRY(ignis_check_index_vector(fn, "positions", positions, nnz, 0));
  IGNIS_TRY(ignis_check_disjoint(fn, "cache.k_cache", &cache->k_cache, "append_key", append_key));
  IGNIS_TRY(ignis_check_disjoint(fn, "cache.k_cache", &cache->k_cache, "append_value", append_value));
  IGNIS_TRY(ignis_check_disjoint(fn, "cache.v_cache", &cache->v_cache, "append_key", append_key));
  IGNIS_TRY(ignis_check_disjoint(fn, "cache.v_cache", &cache->v_cache, "append_value", append_value));
  const ignis_tensor *tensors[] = {append_key,         append_value,    batch_indices,  positions,
                                   &cache->k_cache,    &cache->v_cache, &cache->indptr, &cache->indices,
                                   &cache->last_page_len};
  const char *names[] = {"append_key",    "append_value",  "batch_indices", "positions",           "cache.k_cache",
                         "cache.v_cache", "cache.indptr", "cache.indices", "cache.last_page_len"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 9, &target));

  p.nnz = nnz;
  p.key = append_key->data;
  p.key_stride_token = append_key->strides[0];
  p.key_stride_head = append_key->strides[1];
  p.value = append_value->data;
  p.value_stride_token = append_value->strides[0];
  p.value_stride_head = append_value->strides[1];
  p.batch_indices = (const int32_t *)batch_indices->data;
  p.positions = (const int32_t *)positions->data;

  if (target.backend->host_memory) {
    IGNIS_TRY(ignis_check_paged_kv_contents(fn, &p.cache));
    for (int64_t t = 0; t < nnz; ++t) {
      int64_t b = p.batch_indices[t], pos = p.positions[t];
      if (b < 0 || b >= p.cache.batch_size)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: batch_indices[%" PRId64 "]=%" PRId64 " but the batch has %" PRId64 " requests",
                               fn, t, b, p.cache.batch_size);
      int64_t num_pages_b = (int64_t)p.cache.indptr[b + 1] - p.cache.indptr[b];
      if (pos < 0 || pos / p.cache.page_size >= num_pages_b)
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: positions[%" PRId64 "]=%" PRId64 " but request %" PRId64 " has %" PRId64
                               " pages of %" PRId64 " tokens",
                               fn, t, pos, b, num_pages_b, p.cache.page_size);
    }
  }
  if (nnz == 0 || p.cache.num_kv_heads == 0 || p.cache.head_dim == 0)
    return IGNIS_OK;
  return target.backend->append_paged_kv(&p, target.device.id, stream);
}

static ignis_status dispatch_index(const ignis_kv_index_params *p, const ignis_target *target, void *stream) {
  int64_t work = p->kind == IGNIS_KV_INDEX_SEQ_LENS ? p->batch_size : p->nnz;
  if (work == 0 || p->batch_size == 0)
    return IGNIS_OK;
  return target->backend->kv_index(p, target->device.id, stream);
}

ignis_status ignis_get_batch_indices_positions(const ignis_tensor *append_indptr, const ignis_tensor *seq_lens,
                                               ignis_tensor *batch_indices, ignis_tensor *positions,
                                               void *stream) {
  static const char fn[] = "ignis_get_batch_indices_positions";
  ignis_clear_error();
  IGNIS_TRY(ignis_check_index_vector(fn, "append_indptr", append_indptr, -1, 1));
  int64_t batch = append_indptr->shape[0] - 1;
  IGNIS_TRY(ignis_check_index_vector(fn, "seq_lens", seq_lens, batch, 0));
  IGNIS_TRY(ignis_check_index_vector(fn, "batch_indices", batch_indices, -1, 0));
  int64_t nnz = batch_indices->shape[0];
  IGNIS_TRY(ignis_check_index_vector(fn, "positions", positions, nnz, 0));
  IGNIS_TRY(ignis_check_disjoint(fn, "positions", positions, "batch_indices", batch_indices));
  IGNIS_TRY(ignis_check_disjoint(fn, "batch_indices", batch_indices, "append_indptr", append_indptr));
  IGNIS_TRY(ignis_check_disjoint(fn, "batch_indices", batch_indices, "seq_lens", seq_lens));
  IGNIS_TRY(ignis_check_disjoint(fn, "positions", positions, "append_indptr", append_indptr));
  IGNIS_TRY(ignis_check_disjoint(fn, "positions", positions, "seq_lens", seq_lens));
  const ignis_tensor *tensors[] = {append_indptr, seq_lens, batch_indices, positions};
  const char *names[] = {"append_indptr", "seq_lens", "batch_indices", "positions"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 4, &target));

  ignis_kv_index_params p = {0};
  p.kind = IGNIS_KV_INDEX_BATCH_POSITIONS;
  p.batch_size = batch;
  p.nnz = nnz;
  p.indptr = (const int32_t *)append_indptr->data;
  p.seq_lens_in = (const int32_t *)seq_lens->data;
  p.batch_indices = (int32_t *)batch_indices->data;
  p.positions = (int32_t *)positions->data;
  if (target.backend->host_memory) {
    IGNIS_TRY(ignis_check_indptr_contents(fn, "append_indptr", p.indptr, batch, nnz, "batch_indices.shape[0]"));
    for (int64_t b = 0; b < batch; ++b)
      if (p.indptr[b + 1] - p.indptr[b] > p.seq_lens_in[b])
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                               "%s: seq_lens[%" PRId64 "]=%d but request %" PRId64 " appends %d tokens", fn, b,
                               (int)p.seq_lens_in[b], b, (int)(p.indptr[b + 1] - p.indptr[b]));
  }
  return dispatch_index(&p, &target, stream);
}

ignis_status ignis_get_seq_lens(const ignis_tensor *kv_indptr, const ignis_tensor *kv_last_page_len,
                                int64_t page_size, ignis_tensor *seq_lens, void *stream) {
  static const char fn[] = "ignis_get_seq_lens";
  ignis_clear_error();
  IGNIS_TRY(ignis_check_index_vector(fn, "kv_indptr", kv_indptr, -1, 1));
  int64_t batch = kv_indptr->shape[0] - 1;
  IGNIS_TRY(ignis_check_index_vector(fn, "kv_last_page_len", kv_last_page_len, batch, 0));
  IGNIS_TRY(ignis_check_index_vector(fn, "seq_lens", seq_lens, batch, 0));
  IGNIS_TRY(ignis_check_page_size(fn, "page_size", page_size));
  IGNIS_TRY(ignis_check_disjoint(fn, "seq_lens", seq_lens, "kv_indptr", kv_indptr));
  IGNIS_TRY(ignis_check_disjoint(fn, "seq_lens", seq_lens, "kv_last_page_len", kv_last_page_len));
  const ignis_tensor *tensors[] = {kv_indptr, kv_last_page_len, seq_lens};
  const char *names[] = {"kv_indptr", "kv_last_page_len", "seq_lens"};
  ignis_target target;
  IGNIS_TRY(ignis_resolve_target(fn, tensors, names, 3, &target));

  ignis_kv_index_params p = {0};
  p.kind = IGNIS_KV_INDEX_SEQ_LENS;
  p.batch_size = batch;
  p.page_size = page_size;
  p.indptr = (const int32_t *)kv_indptr->data;
  p.last_page_len = (const int32_t *)kv_last_page_len->data;
  p.seq_lens_out = (int32_t *)seq_lens->data;
  if (target.backend->host_memory) {
    IGNIS_TRY(ignis_check_indptr_contents(fn, "kv_indptr", p.indptr, batch, INT32_MAX, "INT32_MAX"));
    IGNIS_TRY(ignis_check_last_page_len_contents(fn, "kv_last_page_len", p.indptr, p.last_page_len, batch, page_size));
  }
  return dispatch_index(&p, &target, stream);
}

int64_t ignis_paged_kv_longest(const int32_t *kv_indptr, const int32_t *kv_last_page_len, int64_t batch_size,
                               int64_t page_size) {
  int64_t longest = 0;
  for (int64_t b = 0; b < batch_size; ++b) {
    int64_t kv_len = ignis_paged_request_len(kv_indptr, kv_last_page_len, b, page_size);
    longest = kv_len > longest ? kv_len : longest;
  }
  return longest;
}
