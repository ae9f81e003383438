/* The paged KV cache and its bookkeeping ops, in FlashInfer's data model (flashinfer.page).
 *
 * A cache is a pool of pages; request b owns the pages kv_indices[kv_indptr[b] .. kv_indptr[b+1])
 * in that order, all full except the last, which holds kv_last_page_len[b] tokens (1..page_size;
 * a request with no pages has length 0). Token p of request b lives in page
 * kv_indices[kv_indptr[b] + p / page_size], slot p % page_size.
 *
 * Layout of k_cache and v_cache (one ignis_tensor each, same shape and dtype):
 *   IGNIS_KV_LAYOUT_NHD  [num_pages, page_size, num_kv_heads, head_dim]
 *   IGNIS_KV_LAYOUT_HND  [num_pages, num_kv_heads, page_size, head_dim]
 * Page, token and head strides may be anything (K and V need not share them); the last dimension
 * must have stride 1. FlashInfer's single [num_pages, 2, ...] tensor is two views of it: K at
 * element offset 0 and V at stride[1], each dropping dimension 1. page_size is read from the shape
 * (any value 1..256). Offsets are 64-bit, so caches past 2^31 elements are fine.
 * Index tensors (kv_indptr [B+1], kv_indices [nnz_pages], kv_last_page_len [B], and the ops'
 * batch_indices / positions / seq_lens) are 1-D i32 with stride 1, on the device of the data.
 *
 * Checking the index contents: when the tensors live on the host (CPU backend) every index is
 * validated before anything is written (indptr non-decreasing and within kv_indices, page indices
 * within the cache, last_page_len within 1..page_size, each token's page within its request) and
 * a violation is IGNIS_ERROR_INVALID_ARGUMENT naming the parameter. On a CUDA device the library
 * never reads device memory on the host, so it cannot reject bad contents: kernels instead
 * bounds-check every index they compute and write nothing for an element whose indices are out of
 * range (documented per op). */
#ifndef IGNIS_PAGED_KV_H
#define IGNIS_PAGED_KV_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ignis_kv_layout { IGNIS_KV_LAYOUT_NHD = 0, IGNIS_KV_LAYOUT_HND = 1 } ignis_kv_layout;

#define IGNIS_PAGED_KV_MAX_PAGE_SIZE 256

/* Description of a paged KV cache; size = sizeof(ignis_paged_kv_cache) (IGNIS_PAGED_KV_CACHE_INIT).
 * The batch size B is indptr.shape[0] - 1. */
typedef struct ignis_paged_kv_cache {
  size_t size;
  ignis_kv_layout layout;
  ignis_tensor k_cache;
  ignis_tensor v_cache;
  ignis_tensor indptr;        /* [B + 1] i32 */
  ignis_tensor indices;       /* [nnz_pages] i32, page numbers in [0, num_pages) */
  ignis_tensor last_page_len; /* [B] i32 */
} ignis_paged_kv_cache;

#define IGNIS_PAGED_KV_CACHE_INIT                                                                  \
  { sizeof(ignis_paged_kv_cache), IGNIS_KV_LAYOUT_NHD, {0}, {0}, {0}, {0}, {0} }

/* The same cache addressed by a block table (TensorRT-LLM's and vLLM's native form; FlashInfer's
 * trtllm_batch_decode_with_kv_cache / xqa_batch_decode_with_kv_cache take it): request b owns the
 * pages block_tables[b, 0 ..] in order and has seq_lens[b] tokens, so token p lives in page
 * block_tables[b, p / page_size], slot p % page_size; entries past a request's last page are not
 * read. block_tables: [B, max_pages_per_seq] i32, last dimension contiguous, any row stride (a
 * slice of a wider table is fine); seq_lens: [B] i32, contiguous; k_cache / v_cache and layout as
 * in ignis_paged_kv_cache. Host tensors (CPU backend) are validated: 0 <= seq_lens[b] <=
 * max_pages_per_seq * page_size and every page a request uses within the cache. On a CUDA device
 * the contents cannot be checked without a synchronization; the kernels instead count a length
 * beyond the table's capacity as that capacity (negative: 0) and mask the keys of a page number
 * outside the cache (never an out-of-bounds read). size = sizeof(ignis_block_table_kv_cache)
 * (IGNIS_BLOCK_TABLE_KV_CACHE_INIT). */
typedef struct ignis_block_table_kv_cache {
  size_t size;
  ignis_kv_layout layout;
  ignis_tensor k_cache;
  ignis_tensor v_cache;
  ignis_tensor block_tables; /* [B, max_pages_per_seq] i32 */
  ignis_tensor seq_lens;     /* [B] i32 */
} ignis_block_table_kv_cache;

#define IGNIS_BLOCK_TABLE_KV_CACHE_INIT                                                            \
  { sizeof(ignis_block_table_kv_cache), IGNIS_KV_LAYOUT_NHD, {0}, {0}, {0}, {0} }

/* Write new tokens into the cache. append_key and append_value: [nnz, num_kv_heads, head_dim],
 * the cache's dtype (f16, bf16, f32, fp8 e4m3 or fp8 e5m2: the bytes are copied, no conversion;
 * quantize before appending), any token/head strides, last dimension stride 1. batch_indices and
 * positions: [nnz] i32. Token t goes to request b = batch_indices[t] at position
 * p = positions[t]: page cache->indices[indptr[b] + p / page_size], slot p % page_size, of K and
 * V. The cache's indptr/indices describe the pages after the append (last_page_len is validated
 * on the host but not used to place tokens). Tokens with the same destination: one of them wins.
 * The append data must not overlap the cache.
 * On a CUDA device, a token is skipped (nothing written) when b is outside [0, B), p < 0, the page
 * slot indptr[b] + p / page_size is outside [indptr[b], indptr[b+1]) or outside kv_indices, or the
 * page number it names is outside [0, num_pages). */
IGNIS_API ignis_status ignis_append_paged_kv_cache(const ignis_tensor *append_key,
                                                   const ignis_tensor *append_value,
                                                   const ignis_tensor *batch_indices,
                                                   const ignis_tensor *positions,
                                                   const ignis_paged_kv_cache *cache, void *stream);

/* For the ragged append batch described by append_indptr [B+1] (request b appends tokens
 * append_indptr[b] .. append_indptr[b+1]) and seq_lens [B] (lengths after the append), write for
 * each appended token t = append_indptr[b] + j: batch_indices[t] = b and
 * positions[t] = seq_lens[b] - n_b + j, with n_b = append_indptr[b+1] - append_indptr[b].
 * batch_indices and positions: [nnz] i32; entries outside [append_indptr[0], append_indptr[B]) are
 * not written. Host: append_indptr must be non-decreasing with 0 <= append_indptr[0] and
 * append_indptr[B] <= nnz, and n_b <= seq_lens[b]. CUDA: tokens past nnz are not written, and
 * positions are written as computed (negative when n_b > seq_lens[b]; an append skips them). */
IGNIS_API ignis_status ignis_get_batch_indices_positions(const ignis_tensor *append_indptr,
                                                         const ignis_tensor *seq_lens,
                                                         ignis_tensor *batch_indices,
                                                         ignis_tensor *positions, void *stream);

/* seq_lens[b] = (kv_indptr[b+1] - kv_indptr[b] - 1) * page_size + kv_last_page_len[b] for a
 * request with pages, 0 for one without. kv_indptr [B+1], kv_last_page_len [B], seq_lens [B], all
 * i32; page_size 1..256. Host: kv_indptr must be non-decreasing and last_page_len within
 * 1..page_size (0..page_size for requests without pages). CUDA: computed as written. */
IGNIS_API ignis_status ignis_get_seq_lens(const ignis_tensor *kv_indptr, const ignis_tensor *kv_last_page_len,
                                          int64_t page_size, ignis_tensor *seq_lens, void *stream);

/* The longest request of a host page table, in keys: the largest (pages - 1) * page_size +
 * kv_last_page_len[b] (0 for a request without pages) over b < batch_size. A host helper for
 * callers sizing plans (batch decode's max_kv_len); the arrays are read as given, not validated
 * (ignis_decode_plan_update validates them). */
IGNIS_API int64_t ignis_paged_kv_longest(const int32_t *kv_indptr, const int32_t *kv_last_page_len,
                                         int64_t batch_size, int64_t page_size);

#ifdef __cplusplus
}
#endif
#endif
