/* CPU backend of the attention-state merges (include/ignis/merge_state.h), by the CPU's one merge
 * of attention states (cpu/attention_common.h: ignis_cpu_softmax_push, ignis_cpu_attention_finish).
 *
 * Each (seq, head) row: the base-2 LSEs t_i = s_i * log2_scale (states with t_i = -inf skipped)
 * give the merged LSE t = m + log2(sum 2^(t_i - m)), m the largest t_i, and the values
 * v = sum 2^(t_i - t) v_i, merged over head_dim in chunks of CHUNK elements. A row whose states are
 * all empty is written as v = 0, s = -inf; NaN propagates. Natural-log LSEs are scaled by log2(e)
 * on the way in and back on the way out. Arithmetic is double (then rounded to the dtype). */
#include <math.h>

#include "cpu/attention_common.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"

enum { CHUNK = IGNIS_CPU_ATTENTION_MAX_HEAD_DIM };

static float state_s(const ignis_merge_state_params *p, int64_t i, int64_t seq, int64_t head) {
  if (p->pair && i == 1)
    return p->s_b[seq * p->s_b_layout.stride_seq + head * p->s_b_layout.stride_head];
  return p->s_a[i * p->s_a_layout.stride_state + seq * p->s_a_layout.stride_seq + head * p->s_a_layout.stride_head];
}

static const void *state_v(const ignis_merge_state_params *p, int64_t i, int64_t seq, int64_t head) {
  if (p->pair && i == 1)
    return ignis_cpu_at(p->v_b, p->dtype, seq * p->v_b_layout.stride_seq + head * p->v_b_layout.stride_head);
  return ignis_cpu_at(p->v_a, p->dtype,
                      i * p->v_a_layout.stride_state + seq * p->v_a_layout.stride_seq + head * p->v_a_layout.stride_head);
}

static void merge_row(const ignis_merge_state_params *p, int64_t seq, int64_t head) {
  const double scale = p->log2_scale;
  /* the merged LSE from the LSEs alone (head_dim may be 0) */
  double m = -INFINITY, l = 0.0;
  for (int64_t i = 0; i < p->num_states; ++i) {
    double t = state_s(p, i, seq, head) * scale;
    if (t != -INFINITY)
      ignis_cpu_softmax_push(t, NULL, 0, &m, &l, NULL);
  }
  double merged = ignis_cpu_attention_finish(m, l, NULL, -INFINITY, 0, NULL);

  void *out = ignis_cpu_at_mut(p->v_out, p->dtype,
                               seq * p->v_out_layout.stride_seq + head * p->v_out_layout.stride_head);
  float in[CHUNK], row[CHUNK];
  double v[CHUNK];
  for (int64_t start = 0; start < p->head_dim; start += CHUNK) {
    int64_t n = p->head_dim - start < CHUNK ? p->head_dim - start : CHUNK;
    double acc[CHUNK] = {0};
    m = -INFINITY;
    l = 0.0;
    for (int64_t i = 0; i < p->num_states; ++i) {
      double t = state_s(p, i, seq, head) * scale;
      if (t == -INFINITY)
        continue;
      ignis_cpu_load_row(ignis_cpu_at(state_v(p, i, seq, head), p->dtype, start), p->dtype, n, in);
      for (int64_t k = 0; k < n; ++k)
        v[k] = in[k];
      ignis_cpu_softmax_push(t, v, n, &m, &l, acc);
    }
    ignis_cpu_attention_finish(m, l, acc, -INFINITY, n, row);
    ignis_cpu_store_row(ignis_cpu_at_mut(out, p->dtype, start), p->dtype, n, row);
  }
  if (p->s_out)
    p->s_out[seq * p->s_out_layout.stride_seq + head * p->s_out_layout.stride_head] = (float)(merged / scale);
}

ignis_status ignis_cpu_merge_state(const ignis_merge_state_params *p, int32_t device, void *stream) {
  const int64_t rows = p->seq_len * p->num_heads;
  IGNIS_CPU_PARALLEL_FOR(rows * (p->head_dim + 1) * (p->num_states + 1))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t seq = r / p->num_heads, head = r % p->num_heads;
    if (!p->mask || p->mask[seq * p->mask_stride])
      merge_row(p, seq, head);
  }
  return IGNIS_OK;
}
