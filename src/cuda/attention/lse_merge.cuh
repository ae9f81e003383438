/* The LSE merge every CUDA merge of attention states is built from: decode's split requests
 * (decode_common.cuh, in the attention kernels and the merge kernel), prefill's split tiles
 * (prefill_common.cuh) and the merge_state ops (merge_state.cu).
 *
 * A state is normalised values x (VEC of a row's elements per thread) with a base-2 LSE t. The
 * merge walks the states once keeping the running maximum m of their LSEs, the weight sum d and
 * the weighted values acc against m: a state above m first rescales d and acc by 2^(m - t), so
 * every exponent is <= 0 and the merge is stable for any LSE (lse_merge_fold). Empty states
 * (t = -inf) are skipped by the callers, which then need not load their values. lse_merge_finish
 * joins a sink (an extra logit with no value) and normalises: acc / d, and the merged LSE
 * m + log2(d); a row with nothing visible gets values 0 and LSE -inf. NaN LSEs propagate.
 *
 * What stays with the callers is how states are found and loaded (decode batches MERGE_BATCH
 * loads through L2 because other blocks of the running grid wrote them; the others stream), and
 * decode's finish (write_merged_row, decode_common.cuh): the epilogue of its attention kernels as
 * well as of its merges, it folds v_scale into the normalisation (scale / d) and writes out / lse
 * or a partial row of the next merge level, so it keeps its own sink join. */
#ifndef IGNIS_CUDA_ATTENTION_LSE_MERGE_CUH
#define IGNIS_CUDA_ATTENTION_LSE_MERGE_CUH

#include <math_constants.h>

/* Fold a state of base-2 LSE t (> -inf) and values x into the running (m, d, acc). */
template <int VEC>
__device__ __forceinline__ void lse_merge_fold(float t, const float (&x)[VEC], float &m, float &d,
                                               float (&acc)[VEC]) {
  if (t > m) {
    const float rescale = exp2f(m - t); /* 0 when m = -inf */
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      acc[k] *= rescale;
    d *= rescale;
    m = t;
  }
  const float w = exp2f(t - m); /* NaN t propagates through w */
#pragma unroll
  for (int k = 0; k < VEC; ++k)
    acc[k] = fmaf(w, x[k], acc[k]);
  d += w;
}

/* Join a sink of base-2 logit sink2 (-inf: none), normalise acc by the weight sum, and return the
 * merged base-2 LSE (-inf when nothing is visible, acc then 0). */
template <int VEC>
__device__ __forceinline__ float lse_merge_finish(float (&acc)[VEC], float m, float d, float sink2) {
  if (sink2 != -CUDART_INF_F) {
    const float top = fmaxf(m, sink2);
    const float kept = m == -CUDART_INF_F ? 0.0f : exp2f(m - top);
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      acc[k] *= kept;
    d = fmaf(d, kept, exp2f(sink2 - top));
    m = top;
  }
  const bool any = d > 0.0f || isnan(d);
  const float inv = any ? 1.0f / d : 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k)
    acc[k] = any ? acc[k] * inv : 0.0f;
  return any ? m + log2f(d) : -CUDART_INF_F;
}

#endif
