/* Devices: the backend tables, which one a call runs on, and device facts.
 *
 * Dispatch rule: every tensor of a call must live on the host, or every tensor on the same CUDA
 * device; a mixture is an error naming the first tensor that disagrees. A tensor that says it
 * lives on a CUDA device has its pointer checked with the CUDA runtime, so a host pointer passed
 * as device memory (or the reverse, when a GPU is present) is caught before any launch. The
 * resolved device's table (core/backend.h) is the one the front end calls. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/backend.h"
#include "core/config.h"
#include "core/validate.h"

extern const ignis_backend ignis_cpu_backend;
#ifdef IGNIS_HAVE_CUDA
extern const ignis_backend ignis_cuda_backend;
#endif

const ignis_backend *ignis_backend_for(ignis_device_type type) {
  switch (type) {
  case IGNIS_DEVICE_CPU:
    return &ignis_cpu_backend;
#ifdef IGNIS_HAVE_CUDA
  case IGNIS_DEVICE_CUDA:
    return &ignis_cuda_backend;
#endif
  default:
    return NULL;
  }
}

const char *ignis_device_type_name(ignis_device_type type) {
  return type == IGNIS_DEVICE_CUDA ? "cuda" : "cpu";
}

/* Cached: 0 without a usable GPU (or without the CUDA backend). Racing first calls compute the
 * same value. */
static int cached_cuda_device_count = -1;

int ignis_cuda_device_count(void) {
  if (cached_cuda_device_count < 0) {
    const ignis_backend *cuda = ignis_backend_for(IGNIS_DEVICE_CUDA);
    cached_cuda_device_count = cuda ? cuda->device_count() : 0;
  }
  return cached_cuda_device_count;
}

const char *ignis_no_cuda_device_reason(void) {
  return ignis_backend_for(IGNIS_DEVICE_CUDA) ? "no CUDA device is present" : "the CUDA backend is not built";
}

static ignis_status check_location(const char *fn, const char *name, const ignis_tensor *t) {
  if (!t->data || ignis_tensor_numel(t) == 0)
    return IGNIS_OK;
  int devices = ignis_cuda_device_count();
  if (t->device.type == IGNIS_DEVICE_CUDA) {
    if (devices == 0)
      return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "%s: %s is on cuda:%d but %s", fn, name,
                             t->device.id, ignis_no_cuda_device_reason());
    if (t->device.id < 0 || t->device.id >= devices)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.device.id=%d but %d CUDA devices exist",
                             fn, name, t->device.id, devices);
  } else if (devices == 0) {
    return IGNIS_OK; /* no GPU: host memory is the only possibility */
  }
  ignis_device_type actual_type;
  int32_t actual_id; /* devices > 0: the CUDA backend is built */
  if (ignis_backend_for(IGNIS_DEVICE_CUDA)->pointer_location(t->data, &actual_type, &actual_id) != IGNIS_OK)
    return IGNIS_OK; /* the runtime cannot tell: trust the descriptor */
  if (actual_type != t->device.type || (actual_type == IGNIS_DEVICE_CUDA && actual_id != t->device.id))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s.device says %s:%d but its data pointer is %s memory%s", fn, name,
                           ignis_device_type_name(t->device.type), t->device.id,
                           actual_type == IGNIS_DEVICE_CUDA ? "CUDA device" : "host",
                           actual_type == IGNIS_DEVICE_CUDA ? " of another device" : "");
  return IGNIS_OK;
}

ignis_status ignis_resolve_target(const char *fn, const ignis_tensor *const *tensors,
                                  const char *const *names, int count, ignis_target *target) {
  int first = -1;
  for (int i = 0; i < count; ++i) {
    const ignis_tensor *t = tensors[i];
    if (!t)
      continue;
    if (first < 0) {
      first = i;
    } else {
      const ignis_tensor *f = tensors[first];
      if (t->device.type != f->device.type ||
          (t->device.type == IGNIS_DEVICE_CUDA && t->device.id != f->device.id))
        return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is on %s:%d but %s is on %s:%d",
                               fn, names[i], ignis_device_type_name(t->device.type), t->device.id,
                               names[first], ignis_device_type_name(f->device.type), f->device.id);
    }
  }
  if (first < 0)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "%s: no tensors to place", fn);
  /* A location check costs a runtime query per pointer; on the host path it runs only when a GPU
   * exists, where confusing host and device pointers is possible at all. */
  for (int i = 0; i < count; ++i)
    if (tensors[i])
      IGNIS_TRY(check_location(fn, names[i], tensors[i]));
  target->device.type = tensors[first]->device.type;
  target->device.id = target->device.type == IGNIS_DEVICE_CUDA ? tensors[first]->device.id : 0;
  target->backend = ignis_backend_for(target->device.type);
  if (!target->backend) /* unreachable: check_location refused devices no backend serves */
    return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "%s: no backend for %s", fn,
                           ignis_device_type_name(target->device.type));
  return IGNIS_OK;
}

static ignis_status cpu_device_info(ignis_device_info *info) {
  strncpy(info->name, "host CPU", sizeof info->name - 1);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  info->multiprocessor_count = cores > 0 ? (int32_t)cores : 1;
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGESIZE);
  info->global_memory_bytes = (pages > 0 && page_size > 0) ? (int64_t)pages * page_size : 0;
  return IGNIS_OK;
}

/* The facts of `device` into a full struct of this library's layout. */
static ignis_status device_info(ignis_device device, ignis_device_info *info) {
  memset(info, 0, sizeof *info);
  info->size = sizeof *info;
  info->device = device;
  if (device.type == IGNIS_DEVICE_CPU)
    return cpu_device_info(info);
  if (device.type != IGNIS_DEVICE_CUDA)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_get_device_info: device.type=%d is not a device type",
                           (int)device.type);
  int devices = ignis_cuda_device_count();
  if (device.id < 0 || device.id >= devices)
    return ignis_set_error(devices == 0 ? IGNIS_ERROR_BACKEND_UNAVAILABLE : IGNIS_ERROR_INVALID_ARGUMENT,
                           "ignis_get_device_info: device.id=%d but %d CUDA devices exist", device.id,
                           devices);
  return ignis_backend_for(IGNIS_DEVICE_CUDA)->device_info(device.id, info);
}

ignis_status ignis_get_device_info(ignis_device device, ignis_device_info *info) {
  ignis_clear_error();
  if (!info)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_get_device_info: info is NULL");
  /* an output struct grows too: a caller's shorter layout gets the fields it has (core/config.h) */
  const size_t first = IGNIS_CONFIG_END(ignis_device_info, global_memory_bytes);
  if (info->size < first || info->size > sizeof *info)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "ignis_get_device_info: info->size=%zu but it must be %zu..%zu "
                           "(initialize with IGNIS_DEVICE_INFO_INIT)",
                           info->size, first, sizeof *info);
  ignis_device_info full;
  IGNIS_TRY(device_info(device, &full));
  size_t size = info->size;
  full.size = size;
  memcpy(info, &full, size);
  return IGNIS_OK;
}
