/* Merging attention states (FlashInfer's cascade merge ops, flashinfer.cascade).
 *
 * An attention state of one query row and head is (v, s): v [head_dim], the attention output over
 * some set of keys, and s, the log-sum-exp of the scores over that set. Two states over disjoint
 * key sets merge into the state over their union:
 *   s = log(base^s_a + base^s_b),   v = w_a * v_a + w_b * v_b,   w_x = base^(s_x - s)
 * The base is explicit (ignis_lse_base): FlashInfer's kernels produce base-2 LSE (log2 of the sum
 * of exp2), FlashAttention and PyTorch natural-log LSE, and the two must not be mixed.
 * The weights are formed against the running maximum of s, so large or very different LSEs do not
 * overflow. A state with s = -inf is empty and contributes nothing; when every state merged is
 * empty the result is v = 0, s = -inf (never NaN). NaN in s propagates.
 *
 * Layout: v tensors [seq_len, num_heads, head_dim] (merge_states: [seq_len, num_states,
 * num_heads, head_dim]), dtype f16, bf16 or f32, all the same; s tensors [seq_len, num_heads]
 * (merge_states: [seq_len, num_states, num_heads]) f32. Leading dimensions may have any strides
 * (s tensors: every dimension), the last dimension of v must have stride 1. Arithmetic is f32.
 * Outputs must not overlap inputs (except in place, where v/s are read and written). On error
 * nothing is written. */
#ifndef IGNIS_MERGE_STATE_H
#define IGNIS_MERGE_STATE_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ignis_lse_base {
  IGNIS_LSE_BASE2 = 0,  /* s = log2(sum 2^x): FlashInfer */
  IGNIS_LSE_NATURAL = 1 /* s = ln(sum e^x): FlashAttention, PyTorch */
} ignis_lse_base;

/* (v_out, s_out) = merge((v_a, s_a), (v_b, s_b)). s_out may be NULL (not computed). */
IGNIS_API ignis_status ignis_merge_state(const ignis_tensor *v_a, const ignis_tensor *s_a,
                                         const ignis_tensor *v_b, const ignis_tensor *s_b,
                                         ignis_lse_base base, ignis_tensor *v_out, ignis_tensor *s_out,
                                         void *stream);

/* (v, s) = merge((v, s), (v_other, s_other)) in place, for the rows whose mask entry is nonzero;
 * rows with mask 0 are not written. mask: NULL (every row) or [seq_len] u8 with any stride. */
IGNIS_API ignis_status ignis_merge_state_in_place(ignis_tensor *v, ignis_tensor *s, const ignis_tensor *v_other,
                                                  const ignis_tensor *s_other, const ignis_tensor *mask,
                                                  ignis_lse_base base, void *stream);

/* Merge num_states states per row: v [seq_len, num_states, num_heads, head_dim] and
 * s [seq_len, num_states, num_heads] into v_out [seq_len, num_heads, head_dim] and
 * s_out [seq_len, num_heads] (may be NULL). num_states = 0 gives the empty state (v 0, s -inf). */
IGNIS_API ignis_status ignis_merge_states(const ignis_tensor *v, const ignis_tensor *s, ignis_lse_base base,
                                          ignis_tensor *v_out, ignis_tensor *s_out, void *stream);

#ifdef __cplusplus
}
#endif
#endif
