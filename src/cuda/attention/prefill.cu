/* CUDA backend of prefill attention (include/ignis/prefill.h): not built yet. The front end
 * (src/core/op_prefill.c) validates the call, plans the schedule and fills ignis_prefill_params
 * (src/core/params.h) exactly as the kernel will need them; this entry point then reports
 * IGNIS_ERROR_UNSUPPORTED, having written nothing, so callers fall back (the header says so). */
#include "core/backend.h"
#include "core/error.h"

ignis_status ignis_cuda_prefill(const ignis_prefill_params *params, int32_t device, void *stream) {
  (void)params;
  (void)device;
  (void)stream;
  return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "prefill: the CUDA kernel is not built yet");
}
