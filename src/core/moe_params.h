/* The flat params of the fused MoE op (include/ignis/moe.h: ignis_fused_moe), filled by
 * src/core/op_moe.c and read by the backends' fused_moe entry point, and the workspace carving the
 * size query and the run share.
 *
 * Rows. The routing has R = tokens * top_k "expanded" rows, r = t * top_k + j (token t, slot j).
 * The pipeline permutes the local ones by expert: permuted row p of expert e lies in
 * m_indptr[e] .. m_indptr[e + 1], in increasing r within the expert. The workspace holds
 *   tile_counts  [tiles * E] i32   per tile of tile_rows expanded rows: its count of each expert,
 *                                  then (in place) the first permuted row of that tile's rows of e
 *   rank         [R] i32           rank of row r among its tile's rows of the same expert
 *   row_to_perm  [R] i32           p of row r, -1 for a slot with no local expert
 *   perm_row     [R] i32           r of permuted row p (only p < m_indptr[E] are written)
 *   m_indptr     [E + 1] i32       the grouped GEMMs' offsets
 *   consts       [4] f32           consts[0] = 1: the unit scale of the per-tensor fp8 GEMMs
 *   a1 (+a1_scale), a2 (+a2_scale) GEMM 1's and GEMM 2's A operands, one region (never live together)
 *   h, y                           GEMM 1's and GEMM 2's outputs, one region (likewise)
 * with a1 [R, H] (work dtype or fp8), a1_scale [R, ceil(H/128)] f32 (fp8 block), h [R, N1],
 * a2 [R, I] (work dtype or fp8), a2_scale [R, ceil(I/128)], y [R, H], all row-major contiguous.
 *
 * A local expert id is read through ignis_moe_local_expert (moe_math.h): ids i32 / i64 or packed,
 * minus expert_offset, -1 outside [0, experts). */
#ifndef IGNIS_CORE_MOE_PARAMS_H
#define IGNIS_CORE_MOE_PARAMS_H

#include <stdint.h>

#include "core/grouped_gemm_params.h"
#include "core/workspace.h"
#include "ignis/moe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Expanded rows per tile of the permutation: one tile (of up to SINGLE) when R fits, else tiles of
 * MULTI rows. */
#define IGNIS_MOE_TILE_SINGLE 1024
#define IGNIS_MOE_TILE_MULTI 256

typedef struct ignis_fused_moe_params {
  int64_t tokens, top_k, experts, hidden, inter, fc1_rows; /* T, k, E, H, I, N1 */
  int64_t rows;                                            /* R = T * k */
  int64_t tiles, tile_rows;
  int64_t expert_offset;
  ignis_moe_activation activation;
  ignis_moe_quant quant;
  int gated, gate_first, accumulate, add_fc2_bias;

  /* routing: ids [T, k] (i32, i64, or packed i32 when weights is NULL), weights [T, k] f32 / bf16 */
  const void *ids;
  ignis_dtype ids_dtype;
  int packed;
  int64_t ids_stride_t, ids_stride_k;
  const void *weights;
  ignis_dtype weights_dtype;
  int64_t weights_stride_t, weights_stride_k;

  /* input [T, H] and its 1x128 scales (fp8 block with an fp8 input) */
  const void *input;
  ignis_dtype input_dtype;
  int64_t input_row_stride;
  const float *input_scale;
  int64_t input_scale_stride_t, input_scale_stride_k;

  /* experts: fc1 [E, N1, H], fc2 [E, H, I] (last dim contiguous), weight_dtype */
  const void *fc1, *fc2;
  ignis_dtype weight_dtype;
  int64_t fc1_stride_e, fc1_stride_n, fc2_stride_e, fc2_stride_n;
  const void *fc1_bias, *fc2_bias;
  ignis_dtype fc1_bias_dtype, fc2_bias_dtype;
  int64_t fc1_bias_stride_e, fc2_bias_stride_e;
  /* fp8: per-tensor [E] (stride [0]) or blocks [E, nb, kb] (strides [0..2]) */
  const float *fc1_scale, *fc2_scale;
  int64_t fc1_scale_strides[3], fc2_scale_strides[3];
  const float *fc1_gate_scale, *fc2_input_scale; /* per-tensor: NULL or [E] (fc2_input_scale stride 0: one) */
  int64_t fc1_gate_scale_stride, fc2_input_scale_stride;
  const float *act_alpha, *act_beta, *act_limit; /* NULL or [E] */
  int64_t act_alpha_stride, act_beta_stride, act_limit_stride;

  /* out [T, H] */
  void *out;
  ignis_dtype out_dtype;
  int64_t out_row_stride;

  /* workspace pieces (see above) */
  ignis_dtype work_dtype, a1_dtype, a2_dtype; /* a1 / a2: work dtype or fp8 e4m3 */
  int32_t *tile_counts, *rank, *row_to_perm, *perm_row, *m_indptr;
  float *consts;
  void *a1, *a2, *h, *y;
  float *a1_scale, *a2_scale;
} ignis_fused_moe_params;

/* The dtype the intermediates are stored in (see moe.h). */
ignis_dtype ignis_moe_work_dtype(ignis_dtype input_dtype, ignis_dtype out_dtype);

/* Carve the workspace pieces of p (its sizes, dtypes and quant set; rows the call's R) out of ws;
 * in counting mode only the size is accumulated. */
ignis_status ignis_moe_carve(ignis_workspace *ws, const char *fn, ignis_fused_moe_params *p);

/* The grouped GEMM of step 3 (gemm 1) or 5 (gemm 2) over p's workspace: a = a1 or a2, b = fc1 or
 * fc2, out = h or y, groups the E local experts with m_indptr; the per-tensor fp8 form runs with
 * unit scales (consts[0], strides 0) and leaves the dequant to steps 4 and 6. */
void ignis_moe_gemm_params(const ignis_fused_moe_params *p, int second, ignis_grouped_gemm_params *g);

#ifdef __cplusplus
}
#endif
#endif
