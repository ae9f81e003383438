/* The environment variables the library reads, in one table (src/core/env.c, public through
 * ignis_env_var_at): every reader names its variable by id, so a knob cannot exist without its
 * entry, its allowed values and its meaning. Readers parse the value themselves and cache it. */
#ifndef IGNIS_CORE_ENV_H
#define IGNIS_CORE_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(id, name, values, unset, meaning) */
#define IGNIS_ENV_VARS(X)                                                                          \
  X(IGNIS_ENV_DISABLE_PDL, "IGNIS_DISABLE_PDL", "1", "PDL on (Hopper)",                            \
    "1 turns off programmatic dependent launch on Hopper")                                         \
  X(IGNIS_ENV_PREFILL_WGMMA, "IGNIS_PREFILL_WGMMA", "0, 1, 2, 4", "wgmma kernel, TMA form (3)",   \
    "0 runs prefill on the mma.sync kernel instead of the Hopper wgmma one; 1 the wgmma kernel "   \
    "with cp.async loads only (no TMA), 2 that with the ping-pong form (the consumer warpgroups "   \
    "take turns issuing their GEMMs), 4 the TMA form with ping-pong")                              \
  X(IGNIS_ENV_DECODE_TRANSPOSED_ROWS, "IGNIS_DECODE_TRANSPOSED_ROWS", "0..8", "8",                 \
    "the most query rows per block (q_len * group) for which decode takes its transposed kernel")  \
  X(IGNIS_ENV_DECODE_PAGE_KERNEL, "IGNIS_DECODE_PAGE_KERNEL", "0, always", "automatic",            \
    "0 never plans decode's page kernel; always plans it for every batch of a shape it takes, "    \
    "split or not (tests of its merge path)")                                                     \
  X(IGNIS_ENV_MLA_TILE_ROWS, "IGNIS_MLA_TILE_ROWS", "64", "by the head count (16, 32 or 64)",     \
    "64 plans MLA attention in tiles of 64 query rows whatever the head count (the wide CUDA "     \
    "kernel instead of the narrow one; comparisons)")                                             \
  X(IGNIS_ENV_MLA_WGMMA, "IGNIS_MLA_WGMMA", "0, 2, 3", "1: the wgmma kernels on sm_90a",         \
    "0 runs MLA on the mma.sync kernels instead of the Hopper wgmma ones; 2 takes the split-score " \
    "form of the 64-row wgmma kernel instead of the one-scorer form; 3 the one scorer's 2-CTA "    \
    "cluster form (TMA multicast of the keys) where heads are a multiple of 128 and pages of 32")  \
  X(IGNIS_ENV_MLA_MERGE_GROUPS, "IGNIS_MLA_MERGE_GROUPS", "1", "4 groups of 128 threads",        \
    "1 merges MLA's split-KV chunks with one group of 128 threads a (token, head) instead of 4 "   \
    "groups each folding a share of the chunks")                                                  \
  X(IGNIS_ENV_SAMPLING_SPLIT, "IGNIS_SAMPLING_SPLIT", "0", "multi-block path where a workspace allows it", \
    "0 samples every row with one block even when the caller gave a workspace (comparisons)")     \
  X(IGNIS_ENV_CUBLASLT, "IGNIS_CUBLASLT", "a path", "libcublasLt.so.13, libcublasLt.so, PyTorch's copy", \
    "the cuBLASLt library the CUDA GEMM ops load (dlopen) at their first call")                     \
  X(IGNIS_ENV_GEMM_SKINNY, "IGNIS_GEMM_SKINNY", "0, 1", "small-M kernel only for what cuBLASLt lacks", \
    "1 sends every small-M (decode) 16-bit GEMM to ignis' own kernel instead of cuBLASLt; 0 none")   \
  X(IGNIS_ENV_GEMM_GROUPED_SKINNY, "IGNIS_GEMM_GROUPED_SKINNY", "0", "small-M kernel where it applies", \
    "0 sends the small-M (MoE decode) grouped GEMMs to the 128x128 grouped kernel instead of the "  \
    "weight-streaming one")                                                                         \
  X(IGNIS_ENV_GEMM_SM90, "IGNIS_GEMM_SM90", "0, all",                                               \
    "Hopper kernels for the grouped ops and the small-M dense GEMMs",                                 \
    "0 runs the grouped GEMMs on the mma.sync kernel instead of the Hopper (wgmma, TMA) kernel and "    \
    "the dense block-scaled fp8 GEMM of 1-32 rows and 16-bit GEMM of 1-16 rows off the Hopper small-M " \
    "kernel; all also sends the block-scaled one of M >= 128 to the Hopper kernel")

typedef enum ignis_env_id {
#define IGNIS_ENV_ID(id, name, values, unset, meaning) id,
  IGNIS_ENV_VARS(IGNIS_ENV_ID)
#undef IGNIS_ENV_ID
  IGNIS_ENV_COUNT
} ignis_env_id;

/* The variable's value, or NULL when it is not set. */
const char *ignis_env(ignis_env_id id);

#ifdef __cplusplus
}
#endif
#endif
