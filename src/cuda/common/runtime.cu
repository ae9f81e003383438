/* CUDA runtime facts and services for the core: device count, where a pointer lives, device
 * properties, the compiled targets, the cached SM count launchers and planners use to size grids,
 * and what a plan needs to stage its schedule: pinned host buffers, events, and an asynchronous
 * host-to-device copy that records an event when it has run. That copy is on every plan update's
 * path, so it makes one runtime call (two with an event to record) on a stream the caller names,
 * and asks for the current device only where the handle means "the current device's stream". */
#include <stdio.h>
#include <string.h>

#include "cuda/common/cuda_common.cuh"

#ifndef IGNIS_CUDA_TARGETS
#define IGNIS_CUDA_TARGETS ""
#endif

#define IGNIS_MAX_CACHED_DEVICES 64

extern "C" int ignis_cuda_runtime_device_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError(); /* clear the sticky-free error so later calls are not confused */
    return 0;
  }
  return count;
}

extern "C" ignis_status ignis_cuda_pointer_location(const void *ptr, ignis_device_type *type,
                                                    int32_t *device_id) {
  cudaPointerAttributes attributes;
  cudaError_t err = cudaPointerGetAttributes(&attributes, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return IGNIS_ERROR_CUDA;
  }
  switch (attributes.type) {
  case cudaMemoryTypeDevice:
  case cudaMemoryTypeManaged:
    *type = IGNIS_DEVICE_CUDA;
    *device_id = attributes.device;
    break;
  default: /* unregistered or pinned host memory */
    *type = IGNIS_DEVICE_CPU;
    *device_id = 0;
    break;
  }
  return IGNIS_OK;
}

extern "C" ignis_status ignis_cuda_get_device_info(int32_t ordinal, ignis_device_info *info) {
  cudaDeviceProp prop;
  IGNIS_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  strncpy(info->name, prop.name, sizeof info->name - 1);
  info->compute_capability = prop.major * 10 + prop.minor;
  info->multiprocessor_count = prop.multiProcessorCount;
  info->l2_cache_bytes = prop.l2CacheSize;
  info->shared_memory_per_block_optin = (int64_t)prop.sharedMemPerBlockOptin;
  info->global_memory_bytes = (int64_t)prop.totalGlobalMem;
  return IGNIS_OK;
}

extern "C" const char *ignis_cuda_compiled_targets(void) { return IGNIS_CUDA_TARGETS; }

int ignis_cuda_sm_count(int device) {
  static int cached[IGNIS_MAX_CACHED_DEVICES];
  if (device < 0 || device >= IGNIS_MAX_CACHED_DEVICES)
    return 132;
  if (cached[device] == 0) {
    int count = 0;
    if (cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0)
      count = 132;
    cached[device] = count;
  }
  return cached[device];
}

extern "C" int ignis_cuda_device_sm_count(int32_t device) { return ignis_cuda_sm_count(device); }

extern "C" ignis_status ignis_cuda_pinned_alloc(size_t bytes, void **ptr) {
  *ptr = NULL;
  IGNIS_CUDA_CHECK(cudaHostAlloc(ptr, bytes, cudaHostAllocPortable));
  return IGNIS_OK;
}

extern "C" void ignis_cuda_pinned_free(void *ptr) {
  if (ptr)
    cudaFreeHost(ptr);
}

extern "C" ignis_status ignis_cuda_device_alloc(int32_t device, size_t bytes, void **ptr) {
  *ptr = NULL;
  IGNIS_CUDA_ON_DEVICE(device);
  IGNIS_CUDA_CHECK(cudaMalloc(ptr, bytes > 0 ? bytes : 1));
  /* zeroed before it is returned (plans keep counters in it that must start at zero); the legacy
   * stream's memset is finished before any stream of the caller can use the memory */
  cudaError_t status = cudaMemset(*ptr, 0, bytes > 0 ? bytes : 1);
  if (status == cudaSuccess)
    status = cudaStreamSynchronize(cudaStreamLegacy);
  if (status != cudaSuccess) {
    cudaFree(*ptr);
    *ptr = NULL;
    return ignis_set_error(IGNIS_ERROR_CUDA, "cudaMemset of new device memory: %s", cudaGetErrorString(status));
  }
  return IGNIS_OK;
}

extern "C" void ignis_cuda_device_free(void *ptr) {
  if (ptr)
    cudaFree(ptr);
}

extern "C" ignis_status ignis_cuda_event_create(int32_t device, void **event) {
  *event = NULL;
  IGNIS_CUDA_ON_DEVICE(device);
  cudaEvent_t e;
  IGNIS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  *event = e;
  return IGNIS_OK;
}

extern "C" void ignis_cuda_event_destroy(void *event) {
  if (event)
    cudaEventDestroy((cudaEvent_t)event);
}

extern "C" ignis_status ignis_cuda_event_query(void *event, int *complete) {
  cudaError_t err = cudaEventQuery((cudaEvent_t)event);
  if (err == cudaErrorNotReady) {
    *complete = 0;
    return IGNIS_OK;
  }
  IGNIS_CUDA_CHECK(err);
  *complete = 1;
  return IGNIS_OK;
}

extern "C" ignis_status ignis_cuda_event_synchronize(void *event) {
  IGNIS_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)event));
  return IGNIS_OK;
}

extern "C" ignis_status ignis_cuda_copy_device_async(void *dst, const void *src, size_t bytes, int32_t device,
                                                     void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  IGNIS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
  return IGNIS_OK;
}

/* The stream handles that mean a stream of the current device: the default stream (NULL, or
 * cudaStreamLegacy) and the calling thread's default stream. */
static bool current_device_stream(cudaStream_t stream) {
  return stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

/* A copy into a stream of another device than the current one is legal, and an event is recorded
 * on its stream whatever device is current, so only the current device's stream handles need
 * `device` made current. */
static ignis_status copy_and_record(void *dst, const void *src, size_t bytes, cudaStream_t stream,
                                    cudaEvent_t event) {
  IGNIS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
  if (event)
    IGNIS_CUDA_CHECK(cudaEventRecord(event, stream));
  return IGNIS_OK;
}

extern "C" ignis_status ignis_cuda_copy_to_device_async(void *dst, const void *src, size_t bytes, int32_t device,
                                                        void *stream, void *event) {
  if (!current_device_stream((cudaStream_t)stream))
    return copy_and_record(dst, src, bytes, (cudaStream_t)stream, (cudaEvent_t)event);
  IGNIS_CUDA_ON_DEVICE(device);
  return copy_and_record(dst, src, bytes, (cudaStream_t)stream, (cudaEvent_t)event);
}

extern "C" ignis_status ignis_cuda_device_synchronize(int32_t device) {
  IGNIS_CUDA_ON_DEVICE(device);
  IGNIS_CUDA_CHECK(cudaDeviceSynchronize());
  return IGNIS_OK;
}
