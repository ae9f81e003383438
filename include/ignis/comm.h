/* Tensor-parallel communication: a communicator over the ranks of one host, all-reduce (sum) and
 * all-reduce fused with the residual add, RMSNorm and fp8 quantization that follow it in a
 * transformer layer. Python follows flashinfer.comm (allreduce_fusion, AllReduceFusionPattern,
 * create_allreduce_fusion_workspace).
 *
 * The communicator. Every rank of a world of W (1 <= W <= IGNIS_COMM_MAX_WORLD) calls
 * ignis_comm_create with the same world size, its own rank and the same capacity, collectively
 * (each blocks until all have called). Each rank then owns a region of peer-visible memory that
 * every other rank has mapped: on the CPU a POSIX shared-memory segment (so the ranks may be threads
 * of one process or processes of one host), on CUDA device memory shared with CUDA IPC handles (the
 * ranks are processes, one per GPU, or several processes sharing one GPU; NVLink multicast is never
 * used). The names or handles travel through `exchange`, an all-gather the caller implements
 * (torch.distributed, MPI, a socket, shared memory): ignis itself needs no launcher. An optional
 * NCCL communicator (ncclComm_t, CUDA) serves the large messages.
 *
 * Every collective call (ignis_allreduce, ignis_allreduce_fusion) must be made by every rank of the
 * communicator, in the same order, with the same shapes, dtypes and algorithm; a rank's call returns
 * once its part is queued (CUDA: on `stream`) or done (CPU). Calls on one communicator must not
 * overlap: issue them from one host thread per rank and, on CUDA, one stream per rank at a time
 * (stream order serializes them). Ranks that are threads of one process sharing a GPU must use
 * distinct streams that are not the legacy default stream: their kernels wait for each other, so
 * they must be able to run at once. The CUDA path keeps its call counter on the device, so a call
 * captured in a CUDA graph replays correctly any number of times. The message of a call (tokens x
 * hidden x element size of the input) must fit the capacity given at creation
 * (IGNIS_ERROR_INSUFFICIENT_WORKSPACE otherwise, before anything is written).
 *
 * Algorithms (ignis_allreduce_algo): ONESHOT, every rank reads the whole message from every peer
 * and reduces it itself (the fewest steps: small messages); TWOSHOT, rank r reduces the r-th of W
 * slices from every peer, then every rank gathers the reduced slices (a W-th of the reads per rank:
 * medium messages); NCCL, ncclAllReduce on the communicator given at creation (large messages);
 * AUTO picks by message size and world size (ignis_allreduce_choose says what it picks; the
 * thresholds are in src/core/op_comm.c with the measurements behind them). The CPU backend runs
 * ONESHOT and TWOSHOT (NCCL is IGNIS_ERROR_UNSUPPORTED there) and AUTO picks ONESHOT below 64 KiB.
 *
 * Arithmetic. The sum over ranks is formed in f32 in rank order 0, 1, ..., W-1 (starting from rank
 * 0's value) on ONESHOT and TWOSHOT, so every rank gets the same bits whichever of the two runs, and
 * the CPU and CUDA backends give the same bits for the plain all-reduce; NCCL sums in its own order.
 * The fused forms follow ignis_fused_add_rmsnorm_quant (include/ignis/quant.h, norm.h), the mean of
 * squares summed in double (the CUDA kernel adds the squares as a tree, the CPU in order, so a rare
 * row's norm_out / quant_out may differ by one unit in the last place between the backends); with a
 * the f32 all-reduced value,
 *     s = a + residual_in             (f32; residual_out = s rounded to its dtype)
 *     n = s / sqrt(mean(s^2) + eps) * (gamma + weight_bias)     (f32, over the hidden dimension)
 *     norm_out = n rounded to its dtype; quant_out = fp8(sat(n * (1 / scale_factor[0])))
 * the quantization of the f32 n (quant.h's rule: e4m3, round to nearest even, saturating).
 *
 * residual_in, rms_gamma and scale_factor must hold the same values on every rank (as in tensor-
 * parallel models, and as FlashInfer requires): TWOSHOT computes each row's fused outputs on one
 * rank, with that rank's copies.
 *
 * Tensors: input [tokens, hidden] (or any shape; the fused patterns read the last dimension as
 * hidden) f16, bf16 or f32, contiguous, on the communicator's device; output, residual_in,
 * residual_out and norm_out the same shape and dtype, contiguous; output may be input itself (in
 * place), residual_out may be residual_in or input (vLLM's calls), norm_out may be input (but not
 * together with residual_out); no other overlap. Every backend reads input once, into its region,
 * before it writes any output, which is what makes these aliases safe. rms_gamma
 * [hidden] of the input's dtype or f32. quant_out [tokens, hidden] fp8 e4m3, scale_factor one f32.
 * Bad input gets IGNIS_ERROR_INVALID_ARGUMENT naming the parameter, and nothing is written; shape
 * mismatches across ranks are detected only where a backend can (the CPU backend compares the
 * ranks' call descriptions and fails every rank).
 *
 * Waiting. A rank that waits for peers gives up after the communicator's timeout (config.timeout_s):
 * the CPU backend returns IGNIS_ERROR_TIMEOUT from the call (its outputs are then unspecified); the
 * CUDA kernels stop waiting, leave their outputs unspecified and record the timeout, which
 * ignis_comm_check returns. A communicator that timed out stays failed (later calls return
 * IGNIS_ERROR_TIMEOUT on the CPU, return at once on CUDA): destroy it. An empty message returns at
 * once without meeting the peers.
 *
 * Memory: each CPU rank reserves about 4 x capacity in /dev/shm (creation fails with
 * IGNIS_ERROR_INTERNAL if it does not fit); each CUDA rank about 3.5 x capacity of device memory.
 * The fused patterns on CUDA take hidden up to 16384 (IGNIS_ERROR_UNSUPPORTED above). */
#ifndef IGNIS_COMM_H
#define IGNIS_COMM_H

#include <stddef.h>

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define IGNIS_COMM_MAX_WORLD 16

typedef struct ignis_comm ignis_comm;

/* All-gather `bytes` bytes from every rank into recv (world_size * bytes, in rank order), called by
 * every rank during ignis_comm_create with the same `bytes`. Returns 0 on success. */
typedef int (*ignis_comm_exchange_fn)(const void *send, void *recv, size_t bytes, void *user);

typedef struct ignis_comm_config {
  size_t struct_size; /* sizeof(ignis_comm_config): older callers keep working */
  int32_t world_size, rank;
  ignis_device device; /* CPU, or this rank's GPU */
  size_t capacity;     /* the largest message in bytes (tokens x hidden x element size) */
  void *nccl_comm;     /* CUDA: an ncclComm_t of the same ranks for IGNIS_ALLREDUCE_NCCL, or NULL */
  double timeout_s;    /* how long a rank waits for its peers (> 0) */
} ignis_comm_config;

#define IGNIS_COMM_CONFIG_INIT {sizeof(ignis_comm_config), 1, 0, {IGNIS_DEVICE_CPU, 0}, 0, NULL, 30.0}

/* Collective: create this rank's communicator. On error every rank gets an error (a failed
 * exchange, a world size or capacity that differs across ranks, a peer that never arrives).
 * exchange may be NULL when world_size is 1. */
IGNIS_API ignis_status ignis_comm_create(const ignis_comm_config *config, ignis_comm_exchange_fn exchange,
                                         void *user, ignis_comm **comm);
/* Release this rank's resources (peer mappings, its region). Not collective, but a rank must not
 * destroy its communicator while peers may still read its region (finish the last call first:
 * on CUDA, synchronize its stream). NULL is accepted. */
IGNIS_API ignis_status ignis_comm_destroy(ignis_comm *comm);
/* A recorded failure of an earlier call (IGNIS_ERROR_TIMEOUT from a CUDA kernel that gave up
 * waiting), or IGNIS_OK. CUDA: synchronizes the communicator's device. The failure stays: every
 * later call of the communicator fails (destroy it). */
IGNIS_API ignis_status ignis_comm_check(ignis_comm *comm);
/* The communicator's world size, rank and capacity. */
IGNIS_API ignis_status ignis_comm_info(const ignis_comm *comm, int32_t *world_size, int32_t *rank,
                                       size_t *capacity);

typedef enum ignis_allreduce_algo {
  IGNIS_ALLREDUCE_AUTO = 0,
  IGNIS_ALLREDUCE_ONESHOT = 1,
  IGNIS_ALLREDUCE_TWOSHOT = 2,
  IGNIS_ALLREDUCE_NCCL = 3
} ignis_allreduce_algo;

/* The algorithm AUTO runs for a message of `bytes` on this communicator. */
IGNIS_API ignis_allreduce_algo ignis_allreduce_choose(const ignis_comm *comm, size_t bytes);

/* output = sum over ranks of input (in place when output is input). */
IGNIS_API ignis_status ignis_allreduce(ignis_comm *comm, const ignis_tensor *input, ignis_tensor *output,
                                       ignis_allreduce_algo algo, void *stream);

/* flashinfer.comm.AllReduceFusionPattern's values. The FP4 patterns are IGNIS_ERROR_UNSUPPORTED. */
typedef enum ignis_allreduce_fusion_pattern {
  IGNIS_AR_FUSION_ALLREDUCE = 0,                /* output */
  IGNIS_AR_FUSION_RESIDUAL_RMSNORM = 1,         /* residual_out, norm_out */
  IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP8 = 2,     /* residual_out, quant_out */
  IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP4 = 3,     /* (unsupported) */
  IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8 = 4, /* residual_out, norm_out, quant_out */
  IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP4 = 5  /* (unsupported) */
} ignis_allreduce_fusion_pattern;

/* One fused call. Tensors a pattern does not use must be NULL (a tensor given and not written is an
 * error, never ignored); residual_out may be NULL in the norm patterns (the sum is then not kept). */
typedef struct ignis_allreduce_fusion_args {
  size_t struct_size; /* sizeof(ignis_allreduce_fusion_args) */
  ignis_allreduce_fusion_pattern pattern;
  ignis_allreduce_algo algo;
  const ignis_tensor *input;
  ignis_tensor *output;            /* pattern 0 */
  const ignis_tensor *residual_in; /* patterns 1, 2, 4 */
  ignis_tensor *residual_out;
  ignis_tensor *norm_out;          /* patterns 1, 4 */
  ignis_tensor *quant_out;         /* patterns 2, 4: fp8 e4m3 */
  const ignis_tensor *rms_gamma;   /* patterns 1, 2, 4 */
  const ignis_tensor *scale_factor; /* patterns 2, 4: one f32 */
  double rms_eps, weight_bias;
} ignis_allreduce_fusion_args;

#define IGNIS_ALLREDUCE_FUSION_ARGS_INIT                                                                  \
  {sizeof(ignis_allreduce_fusion_args), IGNIS_AR_FUSION_ALLREDUCE, IGNIS_ALLREDUCE_AUTO, NULL, NULL, NULL, \
   NULL, NULL, NULL, NULL, NULL, 1e-6, 0.0}

IGNIS_API ignis_status ignis_allreduce_fusion(ignis_comm *comm, const ignis_allreduce_fusion_args *args,
                                              void *stream);

#ifdef __cplusplus
}
#endif
#endif
