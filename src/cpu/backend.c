/* The CPU backend's table (core/backend.h). Its data is host memory, so plans keep their schedule
 * on the host and need no workspace. Its one attention kernel plans as an H100/H200 running the
 * CUDA kernels would (the nominal waves below), so its schedules, and so its split results, are
 * the GPU's. */
#include "cpu/cpu_backend.h"
#include "sched/decode_plan.h"
#include "sched/prefill_plan.h"

static void decode_choose(int32_t device, int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                          int64_t num_kv_heads, int64_t page_size, ignis_kernel_choice *general,
                          ignis_kernel_choice *page) {
  general->kernel = IGNIS_KERNEL_CPU;
  general->wave = IGNIS_DECODE_CPU_NOMINAL_SMS * IGNIS_DECODE_BLOCKS_PER_SM;
  /* the page kernel is a CUDA kernel: CPU plans never take its schedule */
  page->kernel = IGNIS_KERNEL_CPU;
  page->wave = 0;
}

static void prefill_choose(const ignis_prefill_params *shape, int32_t device, ignis_kernel_choice *choice) {
  choice->kernel = IGNIS_KERNEL_CPU;
  choice->wave = IGNIS_PREFILL_CPU_NOMINAL_SMS * IGNIS_PREFILL_BLOCKS_PER_SM;
}

const ignis_backend ignis_cpu_backend = {
    .name = "cpu",
    .type = IGNIS_DEVICE_CPU,
    .host_memory = 1,
    .decode_choose = decode_choose,
    .prefill_choose = prefill_choose,
    .norm = ignis_cpu_norm,
    .activation = ignis_cpu_activation,
    .quant = ignis_cpu_quant,
    .quant_absmax_begin = ignis_cpu_quant_absmax_begin,
    .quant_absmax_finish = ignis_cpu_quant_absmax_finish,
    .rope = ignis_cpu_rope,
    .rope_quant = ignis_cpu_rope_quant,
    .append_paged_kv = ignis_cpu_append_paged_kv,
    .kv_index = ignis_cpu_kv_index,
    .merge_state = ignis_cpu_merge_state,
    .decode = ignis_cpu_decode,
    .prefill = ignis_cpu_prefill,
    .sampling = ignis_cpu_sampling,
    .softmax = ignis_cpu_softmax,
    .speculative = ignis_cpu_speculative,
    .top_k = ignis_cpu_top_k,
    .topk_transform = ignis_cpu_topk_transform,
    .gemm = ignis_cpu_gemm,
    .grouped_gemm = ignis_cpu_grouped_gemm,
    .mla = ignis_cpu_mla,
    .append_paged_mla_kv = ignis_cpu_append_paged_mla_kv,
    .moe_route = ignis_cpu_moe_route,
    .fused_moe = ignis_cpu_fused_moe,
    .comm_create = ignis_cpu_comm_create,
    .comm_destroy = ignis_cpu_comm_destroy,
    .comm_check = ignis_cpu_comm_check,
    .allreduce = ignis_cpu_allreduce,
};
