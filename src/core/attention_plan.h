/* The machinery every attention plan shares (decode and prefill today): the backend chosen once at
 * creation, where the schedule lives between update and run, the staging ring through which a
 * device plan uploads it, and the claims that keep two plans from reading each other's schedule in
 * one workspace.
 *
 * A plan of a host-memory backend (the CPU) keeps its schedule in host memory and needs no
 * workspace. A device plan's update plans into the next pinned staging slot, copies the used part
 * of the image into the caller's workspace with one asynchronous copy on the caller's stream and
 * claims the buffer; its run reads only the workspace (no allocation, no synchronization). The
 * op-specific parts (the workspace layout, the planner, the params) stay in op_decode.c and
 * op_prefill.c. An update in four steps:
 *     ignis_plan_uses_workspace        -> carve the workspace (op-specific), which also checks its size
 *     ignis_plan_begin_update          -> the image to plan into
 *     (the planner writes the image)
 *     ignis_plan_finish_update         -> upload and claim (device plans)
 * and a run: ignis_plan_open_run (the update's buffer, still claimed) -> carve -> read. */
#ifndef IGNIS_CORE_ATTENTION_PLAN_H
#define IGNIS_CORE_ATTENTION_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/backend.h"

/* A plan's config.device: the CPU, or a CUDA device that exists (BACKEND_UNAVAILABLE when none). */
ignis_status ignis_check_plan_device(const char *fn, ignis_device device);

/* A run's tensors are on its plan's device (`run` resolved from them, `plan` the config's). */
ignis_status ignis_check_run_device(const char *fn, ignis_device run, ignis_device plan);

/* Claims on plan workspaces. A device plan's update leaves state in its workspace that its runs read
 * (the schedule; decode's merge counters), so a run must not follow another use of the buffer:
 * another plan's update or run, or a single decode / prefill with it as scratch. Each update claims
 * the buffer (ignis_workspace_claim, the claim kept by the plan), every other use releases it
 * (ignis_workspace_release), and a run checks its plan's claim still holds
 * (ignis_check_workspace_claim: a clear error naming fn otherwise) instead of reading what another
 * call left there. Keyed by the buffer's address, in a table of IGNIS_WORKSPACE_CLAIMS entries
 * shared by the process. It is a best-effort guard: the least recently used entry is replaced, and
 * a run whose entry was replaced cannot tell and is let through. A plan's own runs keep its claim;
 * CUDA-graph replays are not checked. */
#define IGNIS_WORKSPACE_CLAIMS 64
uint64_t ignis_workspace_claim(const void *workspace);
void ignis_workspace_release(const void *workspace);
ignis_status ignis_check_workspace_claim(const char *fn, const void *workspace, uint64_t claim);

/* A device plan's staging: IGNIS_STAGING_SLOTS pinned host buffers of `bytes` each, with an event
 * per slot. An update plans into the next slot's buffer (waiting only when that slot's previous
 * copy has not run yet), copies the used part to the device with one asynchronous copy and records
 * the slot's event, so the host arrays are free at once and nothing synchronizes in steady state. */
#define IGNIS_STAGING_SLOTS 4
typedef struct ignis_staging_ring {
  const ignis_backend *backend;
  void *buffers[IGNIS_STAGING_SLOTS];
  void *events[IGNIS_STAGING_SLOTS];
  int next;
} ignis_staging_ring;

/* Where a plan's schedule lives, and the last update's workspace. */
typedef struct ignis_plan_storage {
  const ignis_backend *backend;
  int32_t device;
  void *host_schedule;        /* host-memory backends */
  ignis_staging_ring staging; /* the others */
  const void *workspace;      /* the last update's (device plans) */
  uint64_t claim;             /* its claim */
} ignis_plan_storage;

/* Room for schedules of schedule_bytes on `device` (its backend exists: ignis_check_plan_device
 * passed). On failure the message names fn and what was made is released. */
ignis_status ignis_plan_storage_create(ignis_plan_storage *storage, const char *fn, ignis_device device,
                                       size_t schedule_bytes);
/* Wait for the uploads still reading the staging buffers, then free everything (a zeroed storage
 * is fine). */
void ignis_plan_storage_destroy(ignis_plan_storage *storage);

/* 1 when the plan's schedule and partial rows live in a caller's workspace (device plans). */
static inline int ignis_plan_uses_workspace(const ignis_plan_storage *storage) {
  return !storage->backend->host_memory;
}

/* Update: the image to plan into. A device plan's workspace (already carved by the caller) must be
 * memory of the plan's device; the runtime is asked only when the buffer changed since the last
 * update (the query costs about a microsecond of every update otherwise). */
ignis_status ignis_plan_begin_update(ignis_plan_storage *storage, const char *fn, const void *workspace,
                                     void **image);
/* Update: make the planned image the runs' schedule. A device plan uploads its `used` bytes to
 * `schedule` (the schedule's place in `workspace`) on `stream` and claims the workspace. */
ignis_status ignis_plan_finish_update(ignis_plan_storage *storage, void *workspace, void *schedule, size_t used,
                                      void *stream);
/* Run (device plans): `workspace` is the last update's buffer (update_fn names the update in the
 * message) and no other call used it since. */
ignis_status ignis_plan_open_run(const ignis_plan_storage *storage, const char *fn, const char *update_fn,
                                 const void *workspace);

#endif
