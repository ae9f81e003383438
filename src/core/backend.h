/* The entry points each backend provides. The front end (src/core/op_*.c) validates the call,
 * fills a flat params struct (params.h) and calls the backend chosen by where the tensors live.
 * A backend may assume the params passed validation; it returns IGNIS_OK or a status with the
 * error message set (ignis_set_error). CUDA entry points take the stream last and never
 * synchronize or allocate. When the CUDA backend is not built, src/core/cuda_stub.c provides
 * these symbols returning IGNIS_ERROR_BACKEND_UNAVAILABLE. */
#ifndef IGNIS_CORE_BACKEND_H
#define IGNIS_CORE_BACKEND_H

#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CPU backend (src/cpu) */
ignis_status ignis_cpu_norm(const ignis_norm_params *params);
ignis_status ignis_cpu_activation(const ignis_activation_params *params);
ignis_status ignis_cpu_rope(const ignis_rope_params *params);
ignis_status ignis_cpu_append_paged_kv(const ignis_append_kv_params *params);
ignis_status ignis_cpu_kv_index(const ignis_kv_index_params *params);
ignis_status ignis_cpu_merge_state(const ignis_merge_state_params *params);

/* CUDA backend (src/cuda) */
/* `device` is the CUDA ordinal the tensors live on; the launcher makes it current for the launch
 * and restores the caller's current device afterwards. */
ignis_status ignis_cuda_norm(const ignis_norm_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_activation(const ignis_activation_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_rope(const ignis_rope_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_append_paged_kv(const ignis_append_kv_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_kv_index(const ignis_kv_index_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_merge_state(const ignis_merge_state_params *params, int32_t device, void *stream);

/* Decode attention: the attention kernel over every work item, then the merge of split requests
 * (both launched by one call, in that order, on `stream`). */
ignis_status ignis_cpu_decode(const ignis_decode_params *params);
ignis_status ignis_cuda_decode(const ignis_decode_params *params, int32_t device, void *stream);
/* Attention blocks of the decode kernel resident per SM for this head dim, K/V dtype and query rows
 * per block (q_len * group: they pick the kernel; the planner's wave is SMs times this). */
int ignis_cuda_decode_blocks_per_sm(int64_t head_dim, ignis_dtype kv_dtype, int64_t rows);
/* The same for the page kernel (decode.cu) in (work item, KV head) units, i.e. its blocks per SM
 * times its 8 heads; 0 when it does not take this shape or cannot run on the current device. */
int ignis_cuda_decode_page_blocks_per_sm(int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                                         int64_t num_kv_heads, int64_t page_size);
/* Prefill attention blocks resident per SM on CUDA device `device` for a call of this shape (read:
 * dtype, cache.dtype, head dims, mask_mode and the score options; the planner's wave is SMs times
 * this). */
int ignis_cuda_prefill_blocks_per_sm(const ignis_prefill_params *shape, int32_t device);

/* CUDA runtime facts (src/cuda/common/runtime.cu; stubs without CUDA) */
int ignis_cuda_runtime_device_count(void);
/* Where ptr lives: sets *type and *device_id. Returns IGNIS_OK, or IGNIS_ERROR_CUDA if the runtime
 * cannot tell. Host memory, including unregistered host memory, reports IGNIS_DEVICE_CPU. */
ignis_status ignis_cuda_pointer_location(const void *ptr, ignis_device_type *type, int32_t *device_id);
/* Fill info for CUDA device `ordinal`. */
ignis_status ignis_cuda_get_device_info(int32_t ordinal, ignis_device_info *info);
/* Compiled CUDA targets, e.g. "sm_90a,sm_80", or "" without CUDA. */
const char *ignis_cuda_compiled_targets(void);
/* Multiprocessors of CUDA device `device` (cached; 0 without CUDA). */
int ignis_cuda_device_sm_count(int32_t device);

/* Staging for plans: pinned (page-locked) host memory, events, and one asynchronous host-to-device
 * copy on `stream` followed by recording `event` there. Events belong to the device they were
 * created on. Free/destroy accept NULL. */
ignis_status ignis_cuda_pinned_alloc(size_t bytes, void **ptr);
void ignis_cuda_pinned_free(void *ptr);
ignis_status ignis_cuda_event_create(int32_t device, void **event);
void ignis_cuda_event_destroy(void *event);
/* *complete = 1 when the work before the event's last record has run (or it was never recorded). */
ignis_status ignis_cuda_event_query(void *event, int *complete);
/* Block the host until the event's last record has run. */
ignis_status ignis_cuda_event_synchronize(void *event);
ignis_status ignis_cuda_copy_to_device_async(void *dst, const void *src, size_t bytes, int32_t device, void *stream,
                                             void *event);

/* ---- sampling (include/ignis/sampling.h) ---- */
ignis_status ignis_cpu_sampling(const ignis_sampling_params *params);
ignis_status ignis_cpu_softmax(const ignis_softmax_params *params);
ignis_status ignis_cpu_speculative(const ignis_speculative_params *params);
ignis_status ignis_cpu_top_k(const ignis_top_k_params *params);
ignis_status ignis_cuda_sampling(const ignis_sampling_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_softmax(const ignis_softmax_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_speculative(const ignis_speculative_params *params, int32_t device, void *stream);
ignis_status ignis_cuda_top_k(const ignis_top_k_params *params, int32_t device, void *stream);

/* ---- prefill (include/ignis/prefill.h) ---- */
/* The attention kernel over every work item, then the merge of split tiles (both on `stream`). */
ignis_status ignis_cpu_prefill(const ignis_prefill_params *params);
ignis_status ignis_cuda_prefill(const ignis_prefill_params *params, int32_t device, void *stream);

#ifdef __cplusplus
}
#endif
#endif
