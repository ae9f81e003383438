/* Stand-ins for the CUDA backend's entry points when the library is built without CUDA: every
 * CUDA call reports that the backend is unavailable, and no device is ever seen. */
#include "core/backend.h"
#include "core/error.h"

int ignis_cuda_runtime_device_count(void) { return 0; }

ignis_status ignis_cuda_pointer_location(const void *ptr, ignis_device_type *type, int32_t *device_id) {
  *type = IGNIS_DEVICE_CPU;
  *device_id = 0;
  return IGNIS_OK;
}

ignis_status ignis_cuda_get_device_info(int32_t ordinal, ignis_device_info *info) {
  return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "the CUDA backend is not built");
}

const char *ignis_cuda_compiled_targets(void) { return ""; }

int ignis_cuda_device_sm_count(int32_t device) { return 0; }

ignis_status ignis_cuda_pinned_alloc(size_t bytes, void **ptr) {
  *ptr = NULL;
  return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "the CUDA backend is not built");
}

void ignis_cuda_pinned_free(void *ptr) {}

ignis_status ignis_cuda_event_create(int32_t device, void **event) {
  *event = NULL;
  return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "the CUDA backend is not built");
}

void ignis_cuda_event_destroy(void *event) {}

ignis_status ignis_cuda_event_query(void *event, int *complete) {
  *complete = 1;
  return IGNIS_OK;
}

ignis_status ignis_cuda_event_synchronize(void *event) { return IGNIS_OK; }

ignis_status ignis_cuda_copy_to_device_async(void *dst, const void *src, size_t bytes, int32_t device, void *stream,
                                             void *event) {
  return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "the CUDA backend is not built");
}

static ignis_status unavailable(const char *op) {
  return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "%s: the CUDA backend is not built", op);
}

ignis_status ignis_cuda_norm(const ignis_norm_params *params, int32_t device, void *stream) {
  return unavailable("norm");
}
ignis_status ignis_cuda_activation(const ignis_activation_params *params, int32_t device, void *stream) {
  return unavailable("activation");
}
ignis_status ignis_cuda_rope(const ignis_rope_params *params, int32_t device, void *stream) {
  return unavailable("rope");
}
ignis_status ignis_cuda_append_paged_kv(const ignis_append_kv_params *params, int32_t device, void *stream) {
  return unavailable("append_paged_kv_cache");
}
ignis_status ignis_cuda_kv_index(const ignis_kv_index_params *params, int32_t device, void *stream) {
  return unavailable("paged KV index");
}
ignis_status ignis_cuda_merge_state(const ignis_merge_state_params *params, int32_t device, void *stream) {
  return unavailable("merge_state");
}
int ignis_cuda_decode_blocks_per_sm(int64_t head_dim, ignis_dtype kv_dtype, int64_t rows) { return 1; }
int ignis_cuda_decode_page_blocks_per_sm(int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                                         int64_t num_kv_heads, int64_t page_size) {
  return 0;
}
int ignis_cuda_prefill_blocks_per_sm(const ignis_prefill_params *shape, int32_t device) { return 1; }

ignis_status ignis_cuda_decode(const ignis_decode_params *params, int32_t device, void *stream) {
  return unavailable("decode");
}

/* ---- sampling ---- */
ignis_status ignis_cuda_sampling(const ignis_sampling_params *params, int32_t device, void *stream) {
  return unavailable("sampling");
}
ignis_status ignis_cuda_softmax(const ignis_softmax_params *params, int32_t device, void *stream) {
  return unavailable("softmax");
}
ignis_status ignis_cuda_speculative(const ignis_speculative_params *params, int32_t device, void *stream) {
  return unavailable("chain_speculative_sampling");
}
ignis_status ignis_cuda_top_k(const ignis_top_k_params *params, int32_t device, void *stream) {
  return unavailable("top_k");
}

/* ---- prefill ---- */
ignis_status ignis_cuda_prefill(const ignis_prefill_params *params, int32_t device, void *stream) {
  return unavailable("prefill");
}
