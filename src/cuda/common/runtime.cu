/* CUDA runtime facts for the core: device count, where a pointer lives, device properties, the
 * compiled targets, and the cached SM count launchers use to size grids. */
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
