/* The attention plans' shared machinery (see attention_plan.h): plan devices, the staging ring and
 * the plan storage built on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/attention_plan.h"
#include "core/validate.h"

ignis_status ignis_check_plan_device(const char *fn, ignis_device device) {
  if (device.type == IGNIS_DEVICE_CPU)
    return IGNIS_OK;
  if (device.type != IGNIS_DEVICE_CUDA)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.device.type=%d is not an ignis_device_type", fn,
                           (int)device.type);
  int devices = ignis_cuda_device_count();
  if (devices == 0)
    return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "%s: config.device is cuda:%d but %s", fn, device.id,
                           ignis_no_cuda_device_reason());
  if (device.id < 0 || device.id >= devices)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: config.device.id=%d but %d CUDA devices exist", fn,
                           device.id, devices);
  return IGNIS_OK;
}

ignis_status ignis_check_run_device(const char *fn, ignis_device run, ignis_device plan) {
  if (run.type == plan.type && (run.type == IGNIS_DEVICE_CPU || run.id == plan.id))
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: q is on %s:%d but the plan is for %s:%d", fn,
                         ignis_device_type_name(run.type), run.id, ignis_device_type_name(plan.type), plan.id);
}

/* ---- the staging ring ---- */
enum { STAGING_EVENTS = IGNIS_STAGING_SLOTS / IGNIS_STAGING_GROUP };

static ignis_status staging_ring_create(ignis_staging_ring *ring, const ignis_backend *backend, int32_t device,
                                        size_t bytes) {
  memset(ring, 0, sizeof *ring);
  ring->backend = backend;
  ring->device = device;
  ring->stride = (bytes + 255) / 256 * 256;
  ignis_status status = backend->pinned_alloc(ring->stride * IGNIS_STAGING_SLOTS, &ring->memory);
  for (int i = 0; i < STAGING_EVENTS && status == IGNIS_OK; ++i)
    status = backend->event_create(device, &ring->events[i]);
  return status;
}

static void staging_ring_destroy(ignis_staging_ring *ring) {
  if (!ring->backend)
    return;
  /* the copies must have read their buffers */
  if (ring->unrecorded > 0)
    ring->backend->device_synchronize(ring->device);
  for (int i = 0; i < STAGING_EVENTS; ++i) {
    if (ring->events[i])
      ring->backend->event_synchronize(ring->events[i]);
    ring->backend->event_destroy(ring->events[i]);
    ring->events[i] = NULL;
  }
  ring->backend->pinned_free(ring->memory);
  ring->memory = NULL;
}

/* The next slot's buffer; at the start of a group, once the group's last copies have run (an event
 * never recorded is complete). */
static ignis_status staging_ring_acquire(ignis_staging_ring *ring, void **buffer) {
  if (ring->next % IGNIS_STAGING_GROUP == 0) {
    void *event = ring->events[ring->next / IGNIS_STAGING_GROUP];
    int complete = 0;
    IGNIS_TRY(ring->backend->event_query(event, &complete));
    if (!complete)
      IGNIS_TRY(ring->backend->event_synchronize(event));
  }
  *buffer = (char *)ring->memory + ring->stride * (size_t)ring->next;
  return IGNIS_OK;
}

/* Copy `bytes` of the acquired buffer to `dst` on `stream` (and, the group's last, record its
 * event), move on. */
static ignis_status staging_ring_upload(ignis_staging_ring *ring, void *dst, size_t bytes, void *stream) {
  const int last = ring->next % IGNIS_STAGING_GROUP == IGNIS_STAGING_GROUP - 1;
  IGNIS_TRY(ring->backend->copy_to_device_async(dst, (char *)ring->memory + ring->stride * (size_t)ring->next,
                                                bytes, ring->device, stream,
                                                last ? ring->events[ring->next / IGNIS_STAGING_GROUP] : NULL));
  ring->unrecorded = last ? 0 : ring->unrecorded + 1;
  ring->next = (ring->next + 1) % IGNIS_STAGING_SLOTS;
  return IGNIS_OK;
}

/* ---- plan storage ---- */
ignis_status ignis_plan_storage_create(ignis_plan_storage *storage, const char *fn, ignis_device device,
                                       size_t schedule_bytes, size_t counter_bytes) {
  const ignis_backend *backend = ignis_backend_for(device.type);
  if (!backend) {
    memset(storage, 0, sizeof *storage);
    return ignis_set_error(IGNIS_ERROR_BACKEND_UNAVAILABLE, "%s: config.device has no backend in this build", fn);
  }
  return ignis_plan_storage_create_on(storage, fn, backend, device.id, schedule_bytes, counter_bytes);
}

ignis_status ignis_plan_storage_create_on(ignis_plan_storage *storage, const char *fn, const ignis_backend *backend,
                                          int32_t device, size_t schedule_bytes, size_t counter_bytes) {
  memset(storage, 0, sizeof *storage);
  storage->backend = backend;
  storage->device = device;
  ignis_status status;
  if (storage->backend->host_memory) {
    storage->host_schedule = malloc(schedule_bytes);
    status = storage->host_schedule ? IGNIS_OK : ignis_set_error(IGNIS_ERROR_INTERNAL, "out of host memory");
  } else {
    /* one allocation (zeroed by device_alloc): the schedule, then the counters at a 16-byte offset */
    const size_t counters_at = (schedule_bytes + 15) / 16 * 16;
    status = storage->backend->device_alloc(device, counters_at + counter_bytes, &storage->device_schedule);
    if (status == IGNIS_OK && counter_bytes > 0)
      storage->device_counters = (char *)storage->device_schedule + counters_at;
    if (status == IGNIS_OK)
      status = staging_ring_create(&storage->staging, storage->backend, device, schedule_bytes);
  }
  if (status != IGNIS_OK) {
    char message[512];
    snprintf(message, sizeof message, "%s", ignis_last_error());
    ignis_plan_storage_destroy(storage);
    return ignis_set_error(status, "%s: %s", fn, message);
  }
  return IGNIS_OK;
}

void ignis_plan_storage_destroy(ignis_plan_storage *storage) {
  staging_ring_destroy(&storage->staging); /* waits for the uploads into the device schedule */
  if (storage->device_schedule)
    storage->backend->device_free(storage->device_schedule);
  storage->device_schedule = storage->device_counters = NULL;
  free(storage->host_schedule);
  storage->host_schedule = NULL;
}

ignis_status ignis_plan_check_workspace(const ignis_plan_storage *storage, const char *fn, const void *workspace) {
  ignis_plan_storage *cache = (ignis_plan_storage *)storage; /* plans are never const objects */
  if (storage->backend->host_memory ||
      atomic_load_explicit(&cache->checked_workspace, memory_order_relaxed) == (uintptr_t)workspace)
    return IGNIS_OK;
  ignis_device_type type;
  int32_t id;
  if (storage->backend->pointer_location(workspace, &type, &id) == IGNIS_OK &&
      (type != storage->backend->type || id != storage->device))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: workspace is not memory of %s:%d (the plan's device)",
                           fn, storage->backend->name, storage->device);
  atomic_store_explicit(&cache->checked_workspace, (uintptr_t)workspace, memory_order_relaxed);
  return IGNIS_OK;
}

ignis_status ignis_plan_begin_update(ignis_plan_storage *storage, void **image) {
  if (storage->backend->host_memory) {
    *image = storage->host_schedule;
    return IGNIS_OK;
  }
  return staging_ring_acquire(&storage->staging, image);
}

ignis_status ignis_plan_finish_update(ignis_plan_storage *storage, size_t used, void *stream) {
  if (storage->backend->host_memory)
    return IGNIS_OK;
  return staging_ring_upload(&storage->staging, storage->device_schedule, used, stream);
}
