/* The machinery every attention plan shares (decode and prefill today): the backend chosen once at
 * creation, where the schedule lives between update and run, and the staging ring through which a
 * device plan uploads it.
 *
 * A plan of a host-memory backend (the CPU) keeps its schedule in host memory and needs no
 * workspace. A device plan owns device memory for its schedule (allocated at creation, like its
 * pinned staging ring): its update plans into the next pinned staging slot and copies the used
 * part of the image there with one asynchronous copy on the caller's stream; its run reads it (no
 * allocation, no synchronization). The caller's workspace holds only what a run writes and reads
 * within itself (split partial rows), so plans whose runs are ordered on one stream may share one
 * workspace, as engines share FlashInfer's float workspace between their wrappers. The
 * op-specific parts (the workspace layout, the planner, the params) stay in op_decode.c and
 * op_prefill.c. An update in three steps:
 *     ignis_plan_begin_update          -> the image to plan into
 *     (the planner writes the image)
 *     ignis_plan_finish_update         -> upload (device plans)
 * and a run: ignis_plan_schedule (where the runs read it) and the partials carved from its
 * workspace. */
#ifndef IGNIS_CORE_ATTENTION_PLAN_H
#define IGNIS_CORE_ATTENTION_PLAN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

/* A plan's config.device: the CPU, or a CUDA device that exists (BACKEND_UNAVAILABLE when none). */
ignis_status ignis_check_plan_device(const char *fn, ignis_device device);

/* A run's tensors are on its plan's device (`run` resolved from them, `plan` the config's). */
ignis_status ignis_check_run_device(const char *fn, ignis_device run, ignis_device plan);

/* A device plan's staging: IGNIS_STAGING_SLOTS pinned host buffers (slots of one pinned
 * allocation) in groups of IGNIS_STAGING_GROUP consecutive slots, with an event per group. An update
 * plans into the next slot, copies the used part to the device with one asynchronous copy, so the
 * host arrays are free at once, and, in a group's last slot, records the group's event behind its
 * copy. The first slot of a group is written again only once that event has completed (a query;
 * a wait only when it has not). So in steady state an update costs one runtime call, the copy, and
 * a group a record and a query more; nothing synchronizes. One event answers for its group's
 * copies, and every earlier one, because a plan's uploads run in the order they were issued: on
 * one stream they do, and across streams the caller orders them anyway, since they all write the
 * plan's one device schedule that the runs between them read (each update after the previous
 * update's runs). The ring's destruction waits for the events, and for the copies not yet behind
 * one (the current group's) by synchronizing the device. */
#define IGNIS_STAGING_SLOTS 8
#define IGNIS_STAGING_GROUP 4
typedef struct ignis_staging_ring {
  const ignis_backend *backend;
  int32_t device;
  void *memory; /* the slots, `stride` bytes apart */
  size_t stride;
  void *events[IGNIS_STAGING_SLOTS / IGNIS_STAGING_GROUP]; /* behind each group's last copy */
  int next;
  int unrecorded; /* copies since the last event was recorded */
} ignis_staging_ring;

/* Where a plan's schedule lives. */
typedef struct ignis_plan_storage {
  const ignis_backend *backend;
  int32_t device;
  void *host_schedule;        /* host-memory backends */
  void *device_schedule;      /* the others: the plan's own device memory */
  void *device_counters;      /* after it: counter_bytes, zero at creation (ignis_plan_storage_create) */
  ignis_staging_ring staging; /* and the staging ring that fills it */
  atomic_uintptr_t checked_workspace; /* the last workspace found to be memory of the plan's device */
} ignis_plan_storage;

/* Room for schedules of schedule_bytes on `device` (its backend exists: ignis_check_plan_device
 * passed), and for a device plan counter_bytes more of device memory, zero at creation, for runs
 * that keep counters outside any schedule (decode's block-table runs: they leave them zero). On
 * failure the message names fn and what was made is released. */
ignis_status ignis_plan_storage_create(ignis_plan_storage *storage, const char *fn, ignis_device device,
                                       size_t schedule_bytes, size_t counter_bytes);
/* The same on a given backend table (`device` its ordinal): the tests' simulated devices. */
ignis_status ignis_plan_storage_create_on(ignis_plan_storage *storage, const char *fn, const ignis_backend *backend,
                                          int32_t device, size_t schedule_bytes, size_t counter_bytes);
/* Wait for the uploads still reading the staging buffers, then free everything (a zeroed storage
 * is fine). */
void ignis_plan_storage_destroy(ignis_plan_storage *storage);

/* 1 when the plan's split partial rows live in a caller's workspace (device plans). */
static inline int ignis_plan_uses_workspace(const ignis_plan_storage *storage) {
  return !storage->backend->host_memory;
}

/* The schedule the runs read: the host copy, or the plan's device memory. */
static inline void *ignis_plan_schedule(const ignis_plan_storage *storage) {
  return storage->backend->host_memory ? storage->host_schedule : storage->device_schedule;
}

/* A device plan's workspace is memory of the plan's device (a clear error naming fn otherwise).
 * The runtime is asked only when the buffer differs from the last one checked (the query costs
 * about a microsecond of every call otherwise); `storage` is the plan's, which runs see as const
 * but whose check cache they may update. */
ignis_status ignis_plan_check_workspace(const ignis_plan_storage *storage, const char *fn, const void *workspace);

/* Update: the image to plan into (a device plan's next staging slot, once its previous copy ran). */
ignis_status ignis_plan_begin_update(ignis_plan_storage *storage, void **image);
/* Update: make the planned image the runs' schedule. A device plan uploads its `used` bytes to its
 * device schedule on `stream`. */
ignis_status ignis_plan_finish_update(ignis_plan_storage *storage, size_t used, void *stream);

#endif
