/* Checks of a paged KV cache description shared by the ops that take one (op_paged_kv.c,
 * op_decode.c). Each sets the last-error message naming the function and the parameter. */
#ifndef IGNIS_CORE_PAGED_KV_CHECK_H
#define IGNIS_CORE_PAGED_KV_CHECK_H

#include "core/params.h"
#include "ignis/paged_kv.h"

/* A 1-D contiguous i32 tensor of `length` elements; length < 0 accepts any length >= min_length. */
ignis_status ignis_check_index_vector(const char *fn, const char *name, const ignis_tensor *t, int64_t length,
                                      int64_t min_length);
/* page_size in 1..IGNIS_PAGED_KV_MAX_PAGE_SIZE; `what` names where it came from. */
ignis_status ignis_check_page_size(const char *fn, const char *what, int64_t page_size);
/* Host: indptr[0..batch] non-decreasing within [0, limit] (limit_what names the limit). */
ignis_status ignis_check_indptr_contents(const char *fn, const char *name, const int32_t *indptr,
                                         int64_t batch, int64_t limit, const char *limit_what);
/* Host: last_page_len[b] in 1..page_size for requests with pages, 0..page_size without. */
ignis_status ignis_check_last_page_len_contents(const char *fn, const char *name, const int32_t *indptr,
                                                const int32_t *last_page_len, int64_t batch,
                                                int64_t page_size);
/* K and V alone (layout, shapes, dtypes f16/bf16/f32/fp8, strides, their overlap), the part of
 * the cache checks that does not involve the index vectors; fills p's sizes, pointers, strides. */
ignis_status ignis_check_paged_kv_tensors(const char *fn, ignis_kv_layout layout, const ignis_tensor *k,
                                          const ignis_tensor *v, ignis_paged_kv_params *p);
/* The cache descriptor: size field, layout, K/V shapes, dtypes (f16, bf16, f32, fp8), strides,
 * overlap, index vectors; fills p (pointers, sizes, element strides). */
ignis_status ignis_check_paged_kv_cache(const char *fn, const ignis_paged_kv_cache *cache,
                                        ignis_paged_kv_params *p);
/* The block-table form (ignis_block_table_kv_cache): K/V as above, block_tables [B, pages] i32 with
 * a contiguous last dimension (rows at any stride), seq_lens [B] i32; fills p in the
 * block-table form (core/params.h). */
ignis_status ignis_check_block_table_kv_cache(const char *fn, const ignis_block_table_kv_cache *cache,
                                              ignis_paged_kv_params *p);
/* Host: its contents (seq_lens within the table's capacity, the pages each request uses within
 * the cache). */
ignis_status ignis_check_block_table_contents(const char *fn, const ignis_paged_kv_params *p);
/* Host: the cache's index contents (indptr, indices within the cache, last_page_len). */
ignis_status ignis_check_paged_kv_contents(const char *fn, const ignis_paged_kv_params *p);

#endif
