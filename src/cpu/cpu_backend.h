/* The CPU backend's entry points, gathered in its table (cpu/backend.c). Each runs an op over
 * validated params (core/params.h) in host memory, threaded where the op is large; `device` and
 * `stream` are the table's uniform arguments and are ignored here. */
#ifndef IGNIS_CPU_CPU_BACKEND_H
#define IGNIS_CPU_CPU_BACKEND_H

#include "core/backend.h"

ignis_status ignis_cpu_norm(const ignis_norm_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_activation(const ignis_activation_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_quant(const ignis_quant_params *p, int32_t device, void *stream);
/* Communicators and all-reduce (cpu/comm.c): ranks are threads or processes meeting in POSIX shared
 * memory. */
ignis_status ignis_cpu_comm_create(const ignis_comm_create_params *params, void **state);
void ignis_cpu_comm_destroy(void *state);
ignis_status ignis_cpu_comm_check(void *state);
ignis_status ignis_cpu_allreduce(const ignis_allreduce_params *params, void *stream);
ignis_status ignis_cpu_quant_absmax_begin(float *scale, int32_t device, void *stream);
ignis_status ignis_cpu_quant_absmax_finish(float *scale, float min_absmax, float fp8_max, int32_t device,
                                           void *stream);
ignis_status ignis_cpu_rope(const ignis_rope_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_rope_quant(const ignis_rope_quant_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_append_paged_kv(const ignis_append_kv_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_kv_index(const ignis_kv_index_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_merge_state(const ignis_merge_state_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_decode(const ignis_decode_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_prefill(const ignis_prefill_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_sampling(const ignis_sampling_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_softmax(const ignis_softmax_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_speculative(const ignis_speculative_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_top_k(const ignis_top_k_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_gemm(const ignis_gemm_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_grouped_gemm(const ignis_grouped_gemm_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_topk_transform(const ignis_topk_transform_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_mla(const ignis_mla_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_append_paged_mla_kv(const ignis_append_mla_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_moe_route(const ignis_moe_routing_params *p, int32_t device, void *stream);
ignis_status ignis_cpu_fused_moe(const ignis_fused_moe_params *p, int32_t device, void *stream);

#endif
