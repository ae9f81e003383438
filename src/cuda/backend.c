/* The CUDA backend's table (core/backend.h), compiled only when the library is built with CUDA:
 * its launchers, kernel choices and runtime facts (cuda/cuda_backend.h). */
#include "cuda/cuda_backend.h"

const ignis_backend ignis_cuda_backend = {
    .name = "cuda",
    .type = IGNIS_DEVICE_CUDA,
    .host_memory = 0,
    .device_count = ignis_cuda_runtime_device_count,
    .pointer_location = ignis_cuda_pointer_location,
    .device_info = ignis_cuda_get_device_info,
    .compiled_targets = ignis_cuda_compiled_targets,
    .pinned_alloc = ignis_cuda_pinned_alloc,
    .pinned_free = ignis_cuda_pinned_free,
    .event_create = ignis_cuda_event_create,
    .event_destroy = ignis_cuda_event_destroy,
    .event_query = ignis_cuda_event_query,
    .event_synchronize = ignis_cuda_event_synchronize,
    .copy_to_device_async = ignis_cuda_copy_to_device_async,
    .decode_choose = ignis_cuda_decode_choose,
    .prefill_choose = ignis_cuda_prefill_choose,
    .norm = ignis_cuda_norm,
    .activation = ignis_cuda_activation,
    .rope = ignis_cuda_rope,
    .append_paged_kv = ignis_cuda_append_paged_kv,
    .kv_index = ignis_cuda_kv_index,
    .merge_state = ignis_cuda_merge_state,
    .decode = ignis_cuda_decode,
    .prefill = ignis_cuda_prefill,
    .sampling = ignis_cuda_sampling,
    .softmax = ignis_cuda_softmax,
    .speculative = ignis_cuda_speculative,
    .top_k = ignis_cuda_top_k,
};
