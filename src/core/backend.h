/* The backend table: what each device kind provides, chosen once per call (at device resolution)
 * or per plan (at plan creation). The front ends (src/core/op_*.c) validate a call, fill a flat
 * params struct (params.h) and call the chosen table's entry point; they never test which backend
 * it is. A build without CUDA has no CUDA table: ignis_backend_for answers NULL and every device
 * query sees no GPU.
 *
 * Entry points may assume their params passed validation. They return IGNIS_OK or a status with
 * the error message set (ignis_set_error). `device` is the ordinal the tensors live on (0 on the
 * CPU); a launcher makes it current for the launch and restores the caller's current device. They
 * run on `stream` (ignored by the CPU), never synchronize and never allocate. */
#ifndef IGNIS_CORE_BACKEND_H
#define IGNIS_CORE_BACKEND_H

#include "comm_params.h"
#include "gemm_params.h"
#include "grouped_gemm_params.h"
#include "mla_params.h"
#include "moe_routing_params.h"
#include "moe_params.h"
#include "params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ignis_backend {
  const char *name; /* "cpu", "cuda" */
  ignis_device_type type;
  /* The backend's tensors are host memory: the front end may read index arrays, plans keep their
   * schedule on the host, and no workspace is needed (split partials live in the backend). */
  int host_memory;

  /* ---- the runtime (NULL where host_memory: the host is always there) ---- */
  int (*device_count)(void);
  /* Where ptr lives: *type and *device_id; IGNIS_ERROR_CUDA when the runtime cannot tell. Host
   * memory, registered or not, reports IGNIS_DEVICE_CPU. */
  ignis_status (*pointer_location)(const void *ptr, ignis_device_type *type, int32_t *device_id);
  ignis_status (*device_info)(int32_t ordinal, ignis_device_info *info);
  const char *(*compiled_targets)(void); /* e.g. "sm_90a,sm_80" */

  /* ---- plan storage (backends without host_memory; attention_plan.h) ----
   * Pinned host memory, device memory (a plan's schedule, allocated at plan creation; zeroed
   * before device_alloc returns), events, and
   * one asynchronous host-to-device copy on `stream` followed by recording `event` there (unless
   * `event` is NULL). Events
   * belong to the device they were created on; free / destroy accept NULL. event_query sets
   * *complete = 1 when the work before the event's last record has run (or it was never recorded);
   * event_synchronize blocks the host until then. */
  ignis_status (*pinned_alloc)(size_t bytes, void **ptr);
  void (*pinned_free)(void *ptr);
  ignis_status (*device_alloc)(int32_t device, size_t bytes, void **ptr);
  void (*device_free)(void *ptr);
  ignis_status (*event_create)(int32_t device, void **event);
  void (*event_destroy)(void *event);
  ignis_status (*event_query)(void *event, int *complete);
  ignis_status (*event_synchronize)(void *event);
  ignis_status (*copy_to_device_async)(void *dst, const void *src, size_t bytes, int32_t device, void *stream,
                                       void *event);
  /* Block the host until all work on the device has run. */
  ignis_status (*device_synchronize)(int32_t device);
  /* An asynchronous device-to-device copy on `stream` (a plan's index arrays into caller buffers). */
  ignis_status (*copy_device_async)(void *dst, const void *src, size_t bytes, int32_t device, void *stream);

  /* ---- kernel choice: once per plan (at creation) or per single call; the plan records it ----
   * Decode, for this head dim, K/V dtype and query rows per block (q_len * group): `general`, the
   * kernel of any batch, and `page`, the page kernel for the plan's KV heads and page size (wave 0
   * where the shape or the device does not take it; page_size 0: not asked). Waves count (work
   * item, KV head) blocks. */
  void (*decode_choose)(int32_t device, int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                        int64_t num_kv_heads, int64_t page_size, ignis_kernel_choice *general,
                        ignis_kernel_choice *page);
  /* Prefill, for a call of this shape (read: dtype, cache.dtype, head dims, mask_mode and the
   * score options). */
  void (*prefill_choose)(const ignis_prefill_params *shape, int32_t device, ignis_kernel_choice *choice);

  /* ---- ops ---- */
  ignis_status (*norm)(const ignis_norm_params *params, int32_t device, void *stream);
  ignis_status (*activation)(const ignis_activation_params *params, int32_t device, void *stream);
  /* fp8 quantization; dynamic per-tensor scales take three steps (quant_absmax_begin zeroes
   * scale[0], the ABSMAX pass, quant_absmax_finish turns the absmax into the scale in place). */
  ignis_status (*quant)(const ignis_quant_params *params, int32_t device, void *stream);
  ignis_status (*quant_absmax_begin)(float *scale, int32_t device, void *stream);
  ignis_status (*quant_absmax_finish)(float *scale, float min_absmax, float fp8_max, int32_t device,
                                      void *stream);
  ignis_status (*rope)(const ignis_rope_params *params, int32_t device, void *stream);
  /* RoPE + fp8 quantization, into outputs or appended to a paged cache */
  ignis_status (*rope_quant)(const ignis_rope_quant_params *params, int32_t device, void *stream);
  ignis_status (*append_paged_kv)(const ignis_append_kv_params *params, int32_t device, void *stream);
  ignis_status (*kv_index)(const ignis_kv_index_params *params, int32_t device, void *stream);
  ignis_status (*merge_state)(const ignis_merge_state_params *params, int32_t device, void *stream);
  /* Decode / prefill attention: the attention kernel over every work item, then the merge of split
   * requests or tiles, in that order on `stream`. */
  ignis_status (*decode)(const ignis_decode_params *params, int32_t device, void *stream);
  ignis_status (*prefill)(const ignis_prefill_params *params, int32_t device, void *stream);
  ignis_status (*sampling)(const ignis_sampling_params *params, int32_t device, void *stream);
  ignis_status (*softmax)(const ignis_softmax_params *params, int32_t device, void *stream);
  ignis_status (*speculative)(const ignis_speculative_params *params, int32_t device, void *stream);
  ignis_status (*top_k)(const ignis_top_k_params *params, int32_t device, void *stream);
  ignis_status (*topk_transform)(const ignis_topk_transform_params *params, int32_t device, void *stream);
  /* Every GEMM form (core/gemm_params.h). A backend that cannot run a valid call (CUDA without
   * cuBLASLt, a shape cuBLASLt refuses) answers IGNIS_ERROR_UNSUPPORTED with the reason. */
  ignis_status (*gemm)(const ignis_gemm_params *params, int32_t device, void *stream);
  /* The grouped GEMM forms (core/grouped_gemm_params.h): one launch over every group, m_indptr
   * read where it lives (on the device for CUDA: no host sync). */
  ignis_status (*grouped_gemm)(const ignis_grouped_gemm_params *params, int32_t device, void *stream);
  /* MLA attention over the latent cache (the attention items, then the merge of split requests)
   * and the append of latent rows (core/mla_params.h). */
  ignis_status (*mla)(const ignis_mla_params *params, int32_t device, void *stream);
  ignis_status (*append_paged_mla_kv)(const ignis_append_mla_params *params, int32_t device, void *stream);
  /* MoE routing (core/moe_routing_params.h): top-k expert ids and weights of every token. */
  ignis_status (*moe_route)(const ignis_moe_routing_params *params, int32_t device, void *stream);
  /* Fused MoE over a carved workspace (core/moe_params.h): the permutation, the gather, the two
   * grouped GEMMs (this backend's grouped_gemm entry), the activation and the finalize, in order on
   * `stream`, the routing read where it lives. */
  ignis_status (*fused_moe)(const ignis_fused_moe_params *params, int32_t device, void *stream);
  /* Communicators (core/comm_params.h): comm_create is collective (every rank calls it; it calls
   * params->exchange) and returns the backend's state for this rank; comm_destroy releases it
   * (NULL accepted); comm_check returns a failure recorded by an earlier call (IGNIS_ERROR_TIMEOUT;
   * it stays, and later calls fail), synchronizing the device where the record lives there; allreduce runs one
   * plain or fused call on `stream` (the state knows its device). */
  ignis_status (*comm_create)(const ignis_comm_create_params *params, void **state);
  void (*comm_destroy)(void *state);
  ignis_status (*comm_check)(void *state);
  ignis_status (*allreduce)(const ignis_allreduce_params *params, void *stream);
} ignis_backend;

/* The table of a device kind; NULL when this build has none (CUDA without the toolkit) or the
 * type is not a device type. */
const ignis_backend *ignis_backend_for(ignis_device_type type);

/* Where a call runs: the device every tensor lives on and its backend (device.c resolves both). */
typedef struct ignis_target {
  ignis_device device;
  const ignis_backend *backend;
} ignis_target;

#ifdef __cplusplus
}
#endif
#endif
