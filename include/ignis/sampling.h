/* Sampling ops: softmax, sampling from probabilities or logits with top-k / top-p / min-p filters
 * (no sorting), the renormalization and masking ops, chain speculative sampling, and a top-k
 * selection. Names and semantics follow FlashInfer's sampling module (flashinfer.sampling).
 *
 * Layout: a distribution is a row of a 2-D tensor [rows, vocab_size] whose last dimension has
 * stride 1 (IGNIS_ERROR_UNSUPPORTED otherwise); the row stride is free. dtypes f32, f16 or bf16;
 * arithmetic is f32 (64-bit integers for masses). vocab_size >= 1; the ops that sum masses (every
 * sampling op, chain speculative sampling and the renorm ops) take vocab_size <= 2^24
 * (IGNIS_ERROR_UNSUPPORTED above), softmax, top_k_mask_logits and top_k vocab_size < 2^31.
 *
 * Batch and rows: every sampling call writes `samples` [batch] (i32 or i64). Without
 * options->indices, batch = rows and output row b samples distribution row b; with indices (i32 or
 * i64 [batch]), output row b samples distribution row indices[b] (several output rows may share a
 * distribution; each draws its own numbers). An index outside [0, rows) makes that output row
 * sample nothing: it gets token 0. Per-row thresholds (top_k_arr, top_p_arr, min_p_arr) are
 * [batch] vectors indexed by output row; when one is NULL the scalar is used for every row.
 *
 * Weights. For probabilities, an entry counts with weight p if p is finite and > 0, else with
 * weight 0 (NaN, negative, +-Inf entries are never sampled). For logits, NaN counts as -Inf and
 * +Inf as the largest finite float (so +Inf entries share the whole mass); the weights are
 * w = exp(x - max(x)) in f32 (0 once x - max < -104). Rows need not be normalized: every rule
 * below is stated for the row's weights w and their total W.
 *
 * Filters (the allowed set A of a row; only allowed tokens are ever returned):
 *   none:   A = {i : w_i > 0}.
 *   top-k:  A = {i : w_i > 0 and #{j : w_j > w_i} < k}. Ties at the k-th largest weight are all
 *           kept (A may exceed k). k = 0, or k >= the number of positive weights: no filtering.
 *   top-p:  A = {i : w_i > 0 and mass{j : w_j > w_i} < p W}: the smallest set of largest weights
 *           whose mass reaches p W, with ties at the crossing weight kept. p = 1: no filtering; p
 *           near 0: only the largest weight(s).
 *   min-p:  A = {i : w_i > 0 and w_i >= min_p * max(w)} (the product in f32).
 *   top-k and top-p, "joint": both conditions, each on the whole row.
 *   top-k and top-p, "top_k_first": top-k first, then top-p within the top-k set (W replaced by
 *           the top-k mass), as FlashInfer's top_k_renorm_probs followed by top-p sampling.
 * Masses are sums of weights in 64-bit fixed point: each weight counts as its floor in units of
 * 2^(Emax - 165) (Emax: the f32 exponent field of the row's largest weight), i.e. to ~2^-38 of the
 * largest weight, so a sum is exact and the same in any order (a weight below 2^-38 of the largest
 * may count as 0). "mass < p W" compares the exact mass, converted to f64, with p * W rounded to
 * f64.
 * Per-row thresholds cannot be checked without reading device memory, so they are clamped:
 * top_k <= 0 means no filtering; top_p NaN or <= 0 keeps only the largest weight(s), > 1 means 1;
 * min_p NaN or <= 0 means 0, > 1 means 1. The scalars are validated (errors below).
 *
 * Sampling rule (inverse transform, exact in integers): with m_i the fixed-point mass of token i
 * and M = mass(A), one 64-bit uniform U per output row gives t = floor(U * M / 2^64) < M, and the
 * sample is the first token of A, in index order, at which the running sum of m over A exceeds t.
 * This picks token i with probability m_i / M (to within M / 2^64), without sorting; a token of
 * mass 0 is never returned. A row whose allowed set is empty (all weights 0) gets token 0. Samples
 * are always in [0, vocab_size).
 *
 * Random numbers: Philox 4x32-10 keyed by the seed (src/core/philox.h gives the counter layout:
 * counter group, output row, 48-bit offset, stream). U is words 0 (low half) and 1 (high half) of
 * counter group 0 of stream 0; chain speculative sampling draws its acceptance uniforms from stream
 * 0 (group i / 4, word i % 4 for position i) and the U of its extra token from group 0 of stream 1.
 * A call is a pure function of (inputs, seed,
 * offset): the same seed and offset give the same samples on every run, for any launch
 * configuration and batch composition (an output row's numbers depend on its row index, not on
 * the other rows). Advance the offset by at least 1 between calls to draw new numbers. The seed
 * and offset are given as values, or as i64 tensors on the op's device (1 element, or one per
 * output row) that the kernel reads, so a captured CUDA graph draws new numbers on each replay
 * when the caller advances the offset tensor in place.
 *
 * CPU and CUDA backends draw the same samples: the same generator, the same weights (bit-exact
 * f32 helpers), the same fixed-point masses and the same thresholds, so every sampling op, the
 * renorm and mask ops, top_k and chain_speculative_sampling give identical results on both. Only
 * softmax differs, by rounding (its sum is f64 on the CPU, f32 on the GPU). `deterministic` is accepted for
 * FlashInfer compatibility; both values give the same reproducible results (thresholds and samples are
 * exact integer functions of the inputs, whatever the order of the sums).
 *
 * Outputs are written only on success: on an error nothing is written. The calls never
 * synchronize or allocate and are safe inside CUDA-graph capture. */
#ifndef IGNIS_SAMPLING_H
#define IGNIS_SAMPLING_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Options shared by the sampling calls. NULL options mean IGNIS_SAMPLING_OPTIONS_INIT. */
typedef struct ignis_sampling_options {
  size_t size;                       /* sizeof(ignis_sampling_options) */
  const ignis_tensor *indices;       /* NULL, or i32/i64 [batch]: distribution row of output row b */
  uint64_t seed;                     /* Philox key, when seed_tensor is NULL */
  uint64_t offset;                   /* Philox offset (48 bits used), when offset_tensor is NULL */
  const ignis_tensor *seed_tensor;   /* NULL, or i64 with 1 or batch elements, contiguous */
  const ignis_tensor *offset_tensor; /* NULL, or i64 with 1 or batch elements, contiguous */
  int32_t deterministic;             /* accepted; results are always deterministic */
  /* Added after the first release (older callers' options end above and read as NULL / 0): */
  void *workspace;        /* NULL, or device memory on the op's device (16-byte aligned) for the
                             multi-block path below; zero-filled before its first use */
  size_t workspace_bytes; /* its size; ignis_sampling_workspace_size gives what a call can use */
} ignis_sampling_options;
#define IGNIS_SAMPLING_OPTIONS_INIT                                                                          \
  { sizeof(ignis_sampling_options), NULL, 0, 0, NULL, NULL, 1, NULL, 0 }

/* Workspace of the multi-block path (CUDA). Without a workspace every output row is sampled by one
 * block of threads, which at small batches leaves most of the GPU idle. With one, a sampling call of
 * at most IGNIS_SAMPLING_SPLIT_MAX_ROWS rows over a vocabulary of at least 4096, whose rows can each
 * get enough blocks at once (2 or more, with at most 4 tiles of 2048 elements a block: at a
 * vocabulary of 128256 up to 16 rows on a 132-SM GPU), shares each row among many blocks that meet
 * through the workspace (every sampling call; the renorm and mask ops and chain speculative
 * sampling always take the one-block path). The results are the same either way (thresholds and samples are
 * exact). It takes about 8 * vocab_size + 25 KB bytes per row. Rules:
 *   - the workspace holds a few counters that must be zero before its first use; every call leaves
 *     them zero again, so allocate it zero-filled once and reuse it;
 *   - calls that may run at the same time (other streams) need workspaces of their own;
 *   - a workspace smaller than ignis_sampling_workspace_size(batch, vocab) is not an error: the call
 *     then takes the one-block path. The CPU backend ignores it.
 * IGNIS_SAMPLING_SPLIT=0 in the environment turns the multi-block path off (comparisons). */
#define IGNIS_SAMPLING_SPLIT_MAX_ROWS 32

/* Bytes of workspace that let a call of `batch` output rows over `vocab_size` take the
 * multi-block path wherever the GPU allows it (0 when it never applies: batch above
 * IGNIS_SAMPLING_SPLIT_MAX_ROWS or vocab_size below 4096). The bound holds for every smaller batch
 * and vocabulary. */
IGNIS_API ignis_status ignis_sampling_workspace_size(int64_t batch, int64_t vocab_size, size_t *bytes);

/* Order of the filters of the top_k_top_p calls (FlashInfer's filter_apply_order). */
typedef enum ignis_filter_apply_order {
  IGNIS_FILTER_TOP_K_FIRST = 0, /* top-p within the renormalized top-k set */
  IGNIS_FILTER_JOINT = 1        /* both conditions on the original row */
} ignis_filter_apply_order;

/* probs = softmax(logits / temperature) per row. logits [rows, vocab] f32/f16/bf16; probs the
 * same shape, f32 or the logits' dtype (it may be logits itself when the dtypes agree).
 * temperature_arr: NULL, or f32 [rows]; else temperature_val (finite, > 0) for every row. A
 * per-row temperature that is NaN or <= 0 makes that row one-hot at its first largest logit.
 * NaN logits count as -Inf, +Inf as the largest finite float; a row without any entry above -Inf
 * gets all zeros. exp is computed as in the weights above; the sum in f32. */
IGNIS_API ignis_status ignis_softmax(const ignis_tensor *logits, const ignis_tensor *temperature_arr,
                                     double temperature_val, ignis_tensor *probs, void *stream);

/* Sample from the rows of probs with no filter. samples: [batch] i32 or i64. */
IGNIS_API ignis_status ignis_sampling_from_probs(const ignis_tensor *probs, ignis_tensor *samples,
                                                 const ignis_sampling_options *options, void *stream);

/* Sample from softmax(logits) (weights exp(x - max)) with no filter. */
IGNIS_API ignis_status ignis_sampling_from_logits(const ignis_tensor *logits, ignis_tensor *samples,
                                                  const ignis_sampling_options *options, void *stream);

/* Top-p sampling. top_p_arr: NULL or f32 [batch]; top_p_val in (0, 1] (used when the array is
 * NULL). */
IGNIS_API ignis_status ignis_top_p_sampling_from_probs(const ignis_tensor *probs,
                                                       const ignis_tensor *top_p_arr, double top_p_val,
                                                       ignis_tensor *samples,
                                                       const ignis_sampling_options *options, void *stream);

/* Top-k sampling. top_k_arr: NULL or i32/i64 [batch]; top_k_val >= 0 (0: no filtering). */
IGNIS_API ignis_status ignis_top_k_sampling_from_probs(const ignis_tensor *probs,
                                                       const ignis_tensor *top_k_arr, int64_t top_k_val,
                                                       ignis_tensor *samples,
                                                       const ignis_sampling_options *options, void *stream);

/* Min-p sampling. min_p_arr: NULL or f32 [batch]; min_p_val in [0, 1]. */
IGNIS_API ignis_status ignis_min_p_sampling_from_probs(const ignis_tensor *probs,
                                                       const ignis_tensor *min_p_arr, double min_p_val,
                                                       ignis_tensor *samples,
                                                       const ignis_sampling_options *options, void *stream);

/* Top-k and top-p sampling, filters combined as `order` says. */
IGNIS_API ignis_status ignis_top_k_top_p_sampling_from_probs(
    const ignis_tensor *probs, const ignis_tensor *top_k_arr, int64_t top_k_val,
    const ignis_tensor *top_p_arr, double top_p_val, ignis_filter_apply_order order, ignis_tensor *samples,
    const ignis_sampling_options *options, void *stream);

/* The same from logits (weights exp(x - max)): FlashInfer's top_k_mask_logits + softmax + top-p
 * ("top_k_first") or softmax + joint filtering ("joint"). */
IGNIS_API ignis_status ignis_top_k_top_p_sampling_from_logits(
    const ignis_tensor *logits, const ignis_tensor *top_k_arr, int64_t top_k_val,
    const ignis_tensor *top_p_arr, double top_p_val, ignis_filter_apply_order order, ignis_tensor *samples,
    const ignis_sampling_options *options, void *stream);

/* renorm_probs[i] = w_i / mass(A) for i in the top-p set A, else 0 (mass as above, so the row
 * sums to 1 up to f32 rounding; an all-zero row stays 0). probs [rows, vocab]; renorm_probs the
 * same shape and dtype (it may be probs itself). top_p_arr: NULL or f32 [rows]. */
IGNIS_API ignis_status ignis_top_p_renorm_probs(const ignis_tensor *probs, const ignis_tensor *top_p_arr,
                                                double top_p_val, ignis_tensor *renorm_probs, void *stream);

/* The same for the top-k set. top_k_arr: NULL or i32/i64 [rows]. */
IGNIS_API ignis_status ignis_top_k_renorm_probs(const ignis_tensor *probs, const ignis_tensor *top_k_arr,
                                                int64_t top_k_val, ignis_tensor *renorm_probs, void *stream);

/* masked_logits[i] = logits[i] if #{j : x_j > x_i} < k, else -Inf (ties at the k-th largest kept;
 * NaN logits are masked). k = 0 or k >= vocab copies the row unchanged. masked_logits: the
 * logits' shape and dtype (it may be logits itself). */
IGNIS_API ignis_status ignis_top_k_mask_logits(const ignis_tensor *logits, const ignis_tensor *top_k_arr,
                                               int64_t top_k_val, ignis_tensor *masked_logits, void *stream);

/* Chain speculative sampling (Leviathan et al.; FlashInfer's chain_speculative_sampling).
 *   draft_probs      [batch, n, vocab]     f32/f16/bf16 (weights rule as above)
 *   draft_token_ids  [batch, n]            i32/i64
 *   target_probs     [batch, n + 1, vocab] the draft_probs' dtype
 *   output_token_ids [batch, n + 1]        i32/i64, written
 *   output_accepted_token_num, output_emitted_draft_token_num [batch] i32/i64, incremented (+=)
 * For position i = 0 .. n-1 with draft token d = draft_token_ids[b, i], q = draft_probs[b, i, d],
 * p = target_probs[b, i, d] and a uniform u_i in (0, 1): accepted iff u_i * q < p (so with
 * probability min(1, p / q)); a d outside [0, vocab) is rejected. accepted_token_num counts the
 * accepted positions considered independently; the emitted count m is the index of the first
 * rejected position (n if none). Output row: the m accepted draft tokens, then one more token, then
 * -1 padding: after a rejection the token is sampled from max(0, target - draft) at position m (from
 * target at m if that is all zero), after n acceptances from target_probs[b, n]. options->indices
 * must be NULL. */
IGNIS_API ignis_status ignis_chain_speculative_sampling(
    const ignis_tensor *draft_probs, const ignis_tensor *draft_token_ids, const ignis_tensor *target_probs,
    ignis_tensor *output_token_ids, ignis_tensor *output_accepted_token_num,
    ignis_tensor *output_emitted_draft_token_num, const ignis_sampling_options *options, void *stream);

/* Top-k selection (a replacement for torch.topk over a vocabulary): for each row of input
 * [rows, vocab] (f32/f16/bf16), the k largest entries (0 <= k <= vocab). values [rows, k] in the
 * input's dtype, indices [rows, k] i32 or i64 (last dimensions contiguous). Entries are ranked by
 * value with NaN below -Inf and -0 below +0; among equal entries the lower indices are chosen. Order: sorted
 * != 0 gives descending values (lower index first among equal values); sorted == 0 gives the entries above
 * the k-th largest value in index order, then those equal to it in index order. */
IGNIS_API ignis_status ignis_top_k(const ignis_tensor *input, int64_t k, int sorted, ignis_tensor *values,
                                   ignis_tensor *indices, void *stream);

#ifdef __cplusplus
}
#endif
#endif
