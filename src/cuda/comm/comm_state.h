/* The CUDA communicator's per-rank state and the layout of a rank's peer-visible region, shared by
 * its creation (comm_setup.cu), the all-reduce kernels (allreduce.cu) and the NCCL path
 * (comm_nccl.c). The barrier protocol that uses the flags is described in allreduce.cu.
 *
 * Region of rank r (one cudaMalloc on r's device, shared with CUDA IPC; offsets in bytes, cap the
 * capacity rounded up to 256):
 *     FLAGS_OFFSET   uint64 flag[COMM_MAX_BLOCKS][IGNIS_COMM_MAX_WORLD]: flag[b][s] is the last
 *                    barrier epoch block b of rank s announced to r; flag[b][r] (r's own slot,
 *                    written only by r's block b) is also block b's call counter. Zeroed at creation.
 *     ERROR_OFFSET   uint32: 0, or the ignis_status a kernel of this rank recorded (TIMEOUT); while
 *                    set, this rank's all-reduce kernels return at once. Read (never cleared)
 *                    by comm_check. Zeroed at creation.
 *     DATA_OFFSET    cap bytes: this rank's copy of the input of the running call (ONESHOT,
 *                    TWOSHOT), or NCCL's sum that the fused forms then normalize.
 *     SUM_OFFSET     cap bytes: TWOSHOT results of this rank's slice, the dtype of the input: the
 *                    reduced output (plain) or residual_out (fused).
 *     NORM_OFFSET    cap bytes: TWOSHOT norm_out of this rank's slice.
 *     QUANT_OFFSET   cap / 2 bytes: TWOSHOT quant_out (fp8) of this rank's slice (elements are at
 *                    least 2 bytes, so a message of cap bytes has at most cap / 2 of them).
 * Results sit at the element offsets they have in the full tensor, so a slice's rows are found by
 * the same index arithmetic in every rank's region. */
#ifndef IGNIS_CUDA_COMM_STATE_H
#define IGNIS_CUDA_COMM_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "core/comm_params.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  COMM_MAX_BLOCKS = 256, /* the most blocks of an all-reduce grid (flag rows) */
  COMM_FLAGS_OFFSET = 0,
  COMM_ERROR_OFFSET = COMM_MAX_BLOCKS * IGNIS_COMM_MAX_WORLD * 8,
  COMM_DATA_OFFSET = COMM_ERROR_OFFSET + 256
};

typedef struct ignis_cuda_comm {
  int32_t world_size, rank, device;
  size_t capacity;       /* as given */
  size_t capacity_bytes; /* cap: capacity rounded up to 256 */
  size_t region_bytes;
  char *region;                         /* this rank's region (cudaMalloc) */
  char *peer[IGNIS_COMM_MAX_WORLD];     /* every rank's region as this process sees it; peer[rank] = region */
  int ipc_opened[IGNIS_COMM_MAX_WORLD]; /* 1 where peer[s] came from cudaIpcOpenMemHandle */
  int32_t max_blocks; /* an all-reduce grid's most blocks, the same on every rank (comm_setup.cu) */
  uint64_t timeout_ns;
  int32_t failed; /* the status ignis_comm_check found recorded (TIMEOUT): every later call fails */
  void *nccl_comm;
} ignis_cuda_comm;

static inline size_t ignis_cuda_comm_sum_offset(const ignis_cuda_comm *c) {
  return COMM_DATA_OFFSET + c->capacity_bytes;
}
static inline size_t ignis_cuda_comm_norm_offset(const ignis_cuda_comm *c) {
  return COMM_DATA_OFFSET + 2 * c->capacity_bytes;
}
static inline size_t ignis_cuda_comm_quant_offset(const ignis_cuda_comm *c) {
  return COMM_DATA_OFFSET + 3 * c->capacity_bytes;
}
static inline size_t ignis_cuda_comm_region_bytes(size_t capacity_bytes) {
  return COMM_DATA_OFFSET + 3 * capacity_bytes + capacity_bytes / 2;
}

/* The plain all-reduce through NCCL, loaded at first use (comm_nccl.c): out = sum of in over the
 * ranks, `count` elements of dtype (f16, bf16, f32), on stream. */
ignis_status ignis_cuda_nccl_allreduce(void *nccl_comm, const void *in, void *out, size_t count,
                                       ignis_dtype dtype, void *stream);

#ifdef __cplusplus
}
#endif
#endif
