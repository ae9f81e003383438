/* The CUDA backend's entry points, gathered in its table (cuda/backend.c). Launchers take the
 * validated params (core/params.h), the device ordinal the tensors live on and the stream, last;
 * they make `device` current for the launch and restore the caller's current device. */
#ifndef IGNIS_CUDA_CUDA_BACKEND_H
#define IGNIS_CUDA_CUDA_BACKEND_H

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ops ---- */
ignis_status ignis_cuda_norm(const ignis_norm_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_activation(const ignis_activation_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_quant(const ignis_quant_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_quant_absmax_begin(float *scale, int32_t device, void *stream);
ignis_status ignis_cuda_quant_absmax_finish(float *scale, float min_absmax, float fp8_max, int32_t device,
                                            void *stream);
ignis_status ignis_cuda_rope(const ignis_rope_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_rope_quant(const ignis_rope_quant_params *p, int32_t device, void *stream);
ignis_status ignis_cuda_append_paged_kv(const ignis_append_kv_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_kv_index(const ignis_kv_index_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_merge_state(const ignis_merge_state_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_decode(const ignis_decode_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_prefill(const ignis_prefill_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_sampling(const ignis_sampling_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_softmax(const ignis_softmax_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_speculative(const ignis_speculative_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_top_k(const ignis_top_k_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_topk_transform(const ignis_topk_transform_params *params, int32_t device,
                                       void *stream);
/* The small-M kernel where it applies (gemm/gemm_skinny.h), else cuBLASLt, loaded at first use
 * (gemm/gemm_cublaslt.c); the second form always takes cuBLASLt (bench/micro/skinny_gemm.cu's
 * baseline). */
ignis_status ignis_cuda_gemm(const ignis_gemm_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_gemm_cublaslt(const ignis_gemm_params *params, int32_t device, void *stream);
/* ignis' grouped GEMM kernel (gemm/grouped_gemm.cu). */
ignis_status ignis_cuda_grouped_gemm(const ignis_grouped_gemm_params *params, int32_t device, void *stream);
/* MLA (attention/mla.cu). */
ignis_status ignis_cuda_mla(const ignis_mla_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_append_paged_mla_kv(const ignis_append_mla_params *params, int32_t device, void *stream);
/* MoE routing (moe/routing.cu). */
ignis_status ignis_cuda_moe_route(const ignis_moe_routing_params *params, int32_t device, void *stream);
/* Fused MoE (moe/fused_moe.cu): the permutation, gather, activation and finalize kernels around two
 * calls of ignis_cuda_grouped_gemm. */
ignis_status ignis_cuda_fused_moe(const ignis_fused_moe_params *params, int32_t device, void *stream);
/* Communicators and all-reduce (comm/: comm_setup.cu, allreduce.cu, comm_nccl.c); the state knows
 * its device. */
ignis_status ignis_cuda_comm_create(const ignis_comm_create_params *params, void **state);
void ignis_cuda_comm_destroy(void *state);
ignis_status ignis_cuda_comm_check(void *state);
ignis_status ignis_cuda_allreduce(const ignis_allreduce_params *params, void *stream);

/* ---- kernel choice (core/backend.h: decode_choose, prefill_choose) ---- */
void ignis_cuda_decode_choose(int32_t device, int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                              int64_t num_kv_heads, int64_t page_size, ignis_kernel_choice *general,
                              ignis_kernel_choice *page);
void ignis_cuda_prefill_choose(const ignis_prefill_params *shape, int32_t device, ignis_kernel_choice *choice);

/* ---- the runtime (common/runtime.cu) ---- */
int ignis_cuda_runtime_device_count(void);
ignis_status ignis_cuda_pointer_location(const void *ptr, ignis_device_type *type, int32_t *device_id);
ignis_status ignis_cuda_get_device_info(int32_t ordinal, ignis_device_info *info);
const char *ignis_cuda_compiled_targets(void);
/* Multiprocessors of CUDA device `device` (cached). */
int ignis_cuda_device_sm_count(int32_t device);
ignis_status ignis_cuda_pinned_alloc(size_t bytes, void **ptr);
void ignis_cuda_pinned_free(void *ptr);
ignis_status ignis_cuda_device_alloc(int32_t device, size_t bytes, void **ptr);
void ignis_cuda_device_free(void *ptr);
ignis_status ignis_cuda_event_create(int32_t device, void **event);
void ignis_cuda_event_destroy(void *event);
ignis_status ignis_cuda_event_query(void *event, int *complete);
ignis_status ignis_cuda_event_synchronize(void *event);
ignis_status ignis_cuda_copy_to_device_async(void *dst, const void *src, size_t bytes, int32_t device, void *stream,
                                             void *event);
ignis_status ignis_cuda_device_synchronize(int32_t device);
ignis_status ignis_cuda_copy_device_async(void *dst, const void *src, size_t bytes, int32_t device, void *stream);

#ifdef __cplusplus
}
#endif
#endif
