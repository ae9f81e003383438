/* The CUDA backend's table (core/backend.h), compiled only when the library is built with CUDA:
 * its launchers and runtime facts (cuda/cuda_backend.h), and the planners' waves as SMs times the
 * blocks each kernel keeps resident. */
#include "cuda/cuda_backend.h"

static int64_t decode_wave(int32_t device, int64_t head_dim, ignis_dtype kv_dtype, int64_t rows) {
  return (int64_t)ignis_cuda_device_sm_count(device) * ignis_cuda_decode_blocks_per_sm(head_dim, kv_dtype, rows);
}

static int64_t decode_page_wave(int32_t device, int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                                int64_t num_kv_heads, int64_t page_size) {
  return (int64_t)ignis_cuda_device_sm_count(device) *
         ignis_cuda_decode_page_blocks_per_sm(head_dim, kv_dtype, rows, num_kv_heads, page_size);
}

static int64_t prefill_wave(const ignis_prefill_params *shape, int32_t device) {
  return (int64_t)ignis_cuda_device_sm_count(device) * ignis_cuda_prefill_blocks_per_sm(shape, device);
}

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
    .decode_wave = decode_wave,
    .decode_page_wave = decode_page_wave,
    .prefill_wave = prefill_wave,
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
