/* Fused top-k transforms of sparse attention (FlashInfer's top_k_page_table_transform and
 * top_k_ragged_transform, as SGLang's DSA indexers call them): for each row of a score matrix, the
 * k largest scores of a window of the row, returned not as positions but already mapped to the KV
 * slots the sparse attention reads, through a page table or by adding an offset.
 *
 * Layout and dtypes. input [rows, max_len] holds the scores, f32, f16 or bf16, the last dimension
 * contiguous (IGNIS_ERROR_UNSUPPORTED otherwise), any row stride; max_len < 2^31. Every other
 * tensor is i32: lengths, offsets, row_to_batch, row_starts, page_table_row_starts are [rows]
 * vectors with stride 1; src_page_table [batch, width] has a contiguous last dimension and any row
 * stride; out and out_raw_indices are [rows, k] with a contiguous last dimension and any row stride.
 * The outputs overlap no input and not each other.
 *
 * The window of row r is input[r, start : start + len], start = row_starts[r] (0 when row_starts
 * is NULL) and len = lengths[r]. These values live in the op's memory and are not checked (that
 * would read device memory); they are clamped instead: start into [0, max_len], len into
 * [0, max_len - start]. A position j of the window (0 <= j < len) is a "local index".
 *
 * Selection. Scores are ranked by value with NaN below -Inf and -0 below +0 (every score, -Inf
 * included, can be selected). When len > k the row selects the k largest scores of its window;
 * among scores equal to the k-th largest (ties at the boundary), tie_break SMALL and NONE take
 * the lowest local indices and LARGE the highest ones (NONE lets FlashInfer choose any; ignis
 * always chooses the same). When len <= k (k may exceed max_len) the row selects every local
 * index 0 .. len-1. The selected local indices are written in ascending order to the first
 * min(len, k) positions of the output row and the remaining positions hold -1 (FlashInfer's
 * padding): FlashInfer promises this order only when deterministic; ignis always gives it, so the
 * result is a pure function of the inputs, the same on the CPU and CUDA backends.
 *
 * Transforms of a selected local index j (computed in 64 bits, stored as the low 32 bits; the
 * caller keeps them within int32, as FlashInfer requires):
 *   page table: with b = row_to_batch[r] (r when row_to_batch is NULL), s = pt_start +
 *     j / page_size and pt_start = page_table_row_starts[r] (when NULL: the unclamped row_starts[r]
 *     if given (only page_size 1 allows that), else 0),
 *         out[r, i] = src_page_table[b, s] * page_size + j % page_size.
 *     A b outside [0, batch) or an s outside [0, width) gives -1 (FlashInfer leaves them
 *     undefined). out_raw_indices (optional) receives j itself, -1 in the padding.
 *   ragged: out[r, i] = j + offsets[r].
 * Padding positions are -1 in every output and are not transformed.
 *
 * Errors: IGNIS_ERROR_INVALID_ARGUMENT for a NULL required tensor, a wrong ndim, shape or dtype, k
 * < 1, a page_size that is not a power of two in [1, 2^30], row_starts without
 * page_table_row_starts when page_size > 1 (the two starts are then in different units), a page
 * table of another row count than input when row_to_batch is NULL, a tie_break outside the enum,
 * or overlapping outputs; IGNIS_ERROR_UNSUPPORTED for a non-contiguous last dimension or vector, or
 * max_len >= 2^31. Outputs are written only on success. The calls never synchronize or allocate and
 * are safe inside CUDA-graph capture. */
#ifndef IGNIS_TOPK_H
#define IGNIS_TOPK_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which of the scores equal to the k-th largest are selected (FlashInfer's TopKTieBreak values). */
typedef enum ignis_topk_tie_break {
  IGNIS_TOPK_TIE_BREAK_NONE = 0,  /* any: ignis takes the lowest local indices, as SMALL */
  IGNIS_TOPK_TIE_BREAK_SMALL = 1, /* the lowest local indices */
  IGNIS_TOPK_TIE_BREAK_LARGE = 2  /* the highest local indices */
} ignis_topk_tie_break;

/* Top-k over each row's window, mapped through a page table (FlashInfer's
 * top_k_page_table_transform). row_to_batch, row_starts, page_table_row_starts and
 * out_raw_indices may be NULL. page_size: score positions per page-table entry. */
IGNIS_API ignis_status ignis_top_k_page_table_transform(
    const ignis_tensor *input, const ignis_tensor *src_page_table, const ignis_tensor *lengths, int64_t k,
    const ignis_tensor *row_to_batch, const ignis_tensor *row_starts,
    const ignis_tensor *page_table_row_starts, int64_t page_size, ignis_topk_tie_break tie_break,
    ignis_tensor *out, ignis_tensor *out_raw_indices, void *stream);

/* Top-k over each row's window, plus a per-row offset (FlashInfer's top_k_ragged_transform).
 * row_starts may be NULL. */
IGNIS_API ignis_status ignis_top_k_ragged_transform(const ignis_tensor *input, const ignis_tensor *offsets,
                                                    const ignis_tensor *lengths, int64_t k,
                                                    const ignis_tensor *row_starts,
                                                    ignis_topk_tie_break tie_break, ignis_tensor *out,
                                                    void *stream);

#ifdef __cplusplus
}
#endif
#endif
