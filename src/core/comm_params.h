/* The flat params of the communication ops (include/ignis/comm.h), filled by src/core/op_comm.c and
 * read by the backends' comm entry points (backend.h).
 *
 * Creation (ignis_comm_create_params): what the caller gave, validated; the backend creates its
 * per-rank state (its peer-visible region, the peers' mappings, the call counter) and hands back an
 * opaque pointer that op_comm.c keeps in the ignis_comm.
 *
 * A call (ignis_allreduce_params): one all-reduce or fused call over `rows` rows of `hidden`
 * elements (the plain all-reduce reads the whole tensor as one row of `hidden` = all its elements),
 * every tensor contiguous, the algorithm resolved (ONESHOT, TWOSHOT or NCCL, never AUTO). Pointers a
 * pattern does not use are NULL; residual_out, norm_out and quant_out are written only where not
 * NULL. output may equal input; residual_out may equal residual_in or input; norm_out may equal
 * input (not both outputs). A backend reads input once, into its region, before writing outputs. */
#ifndef IGNIS_CORE_COMM_PARAMS_H
#define IGNIS_CORE_COMM_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "ignis/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ignis_comm_create_params {
  int32_t world_size, rank, device; /* device: the CUDA ordinal (0 on the CPU) */
  size_t capacity;                  /* bytes of the largest message */
  void *nccl_comm;
  double timeout_s;
  ignis_comm_exchange_fn exchange; /* never NULL: a world of one without one gets a local copy */
  void *user;
} ignis_comm_create_params;

typedef struct ignis_allreduce_params {
  void *state; /* the backend's communicator state */
  ignis_allreduce_fusion_pattern pattern;
  ignis_allreduce_algo algo; /* resolved */
  ignis_dtype dtype;         /* input, output, residuals, norm_out: f16, bf16 or f32 */
  int64_t rows, hidden;
  const void *input;
  void *output;
  const void *residual_in;
  void *residual_out, *norm_out, *quant_out;
  const void *gamma;
  ignis_dtype gamma_dtype; /* the input's dtype or f32 */
  const float *scale_factor;
  float eps, weight_bias;
} ignis_allreduce_params;

#ifdef __cplusplus
}
#endif
#endif
