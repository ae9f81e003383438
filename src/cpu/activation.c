/* CPU backend of the gated activations: out[h] = act(x[h]) * x[H + h] per row, in f32. */
#include <math.h>

#include "cpu/cpu_backend.h"
#include "cpu/activation_common.h"
#include "cpu/cpu_common.h"

/* Rows in parallel; each row in chunks converted to f32 on the stack. */
#define ACTIVATION_CHUNK 512

ignis_status ignis_cpu_activation(const ignis_activation_params *p, int32_t device, void *stream) {
  int64_t rows = p->num_rows_outer * p->num_rows_inner;
  int64_t n = p->hidden;
  IGNIS_CPU_PARALLEL_FOR(rows * n)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t outer = r / p->num_rows_inner, inner = r % p->num_rows_inner;
    const void *in = ignis_cpu_at(p->input, p->dtype,
                                  outer * p->input_layout.stride_outer + inner * p->input_layout.stride_inner);
    void *out = ignis_cpu_at_mut(p->out, p->dtype,
                                 outer * p->out_layout.stride_outer + inner * p->out_layout.stride_inner);
    float a[ACTIVATION_CHUNK], b[ACTIVATION_CHUNK];
    for (int64_t h0 = 0; h0 < n; h0 += ACTIVATION_CHUNK) {
      int64_t len = n - h0 < ACTIVATION_CHUNK ? n - h0 : ACTIVATION_CHUNK;
      ignis_cpu_load_row(ignis_cpu_at(in, p->dtype, h0), p->dtype, len, a);
      ignis_cpu_load_row(ignis_cpu_at(in, p->dtype, n + h0), p->dtype, len, b);
      for (int64_t h = 0; h < len; ++h)
        a[h] = ignis_cpu_activate(p->kind, a[h]) * b[h];
      ignis_cpu_store_row(ignis_cpu_at_mut(out, p->dtype, h0), p->dtype, len, a);
    }
  }
  return IGNIS_OK;
}
