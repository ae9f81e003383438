/* The CPU backend's table (core/backend.h). Its data is host memory, so plans keep their schedule
 * on the host and need no workspace. It plans as an H100/H200 running the CUDA kernels would
 * (the nominal waves below), so its schedules, and so its split results, are the GPU's. */
#include "cpu/cpu_backend.h"
#include "sched/decode_plan.h"
#include "sched/prefill_plan.h"

static int64_t decode_wave(int32_t device, int64_t head_dim, ignis_dtype kv_dtype, int64_t rows) {
  return IGNIS_DECODE_CPU_NOMINAL_SMS * IGNIS_DECODE_BLOCKS_PER_SM;
}

/* The page kernel is a CUDA kernel: CPU plans never take its schedule. */
static int64_t decode_page_wave(int32_t device, int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                                int64_t num_kv_heads, int64_t page_size) {
  return 0;
}

static int64_t prefill_wave(const ignis_prefill_params *shape, int32_t device) {
  return IGNIS_PREFILL_CPU_NOMINAL_SMS * IGNIS_PREFILL_BLOCKS_PER_SM;
}

const ignis_backend ignis_cpu_backend = {
    .name = "cpu",
    .type = IGNIS_DEVICE_CPU,
    .host_memory = 1,
    .decode_wave = decode_wave,
    .decode_page_wave = decode_page_wave,
    .prefill_wave = prefill_wave,
    .norm = ignis_cpu_norm,
    .activation = ignis_cpu_activation,
    .rope = ignis_cpu_rope,
    .append_paged_kv = ignis_cpu_append_paged_kv,
    .kv_index = ignis_cpu_kv_index,
    .merge_state = ignis_cpu_merge_state,
    .decode = ignis_cpu_decode,
    .prefill = ignis_cpu_prefill,
    .sampling = ignis_cpu_sampling,
    .softmax = ignis_cpu_softmax,
    .speculative = ignis_cpu_speculative,
    .top_k = ignis_cpu_top_k,
};
