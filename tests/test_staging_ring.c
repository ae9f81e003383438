/* The plan storage's staging ring (core/attention_plan.h) on a simulated device: a backend table
 * whose copies and event records join one queue that the "device" runs in issue order (the order a
 * plan's uploads run in: see attention_plan.h) when the test advances it, and whose copies read the
 * staging slot only then. Every update writes a fresh pattern into its image; each copy, when it
 * runs, must deliver the pattern of its own update, so a slot overwritten before its copy ran
 * shows up as a wrong device schedule. Cases: the device keeping up (then the runtime calls per
 * update: one copy, a record and a query per IGNIS_STAGING_GROUP updates, no wait), a device that
 * runs nothing until the ring waits, and random progress; and the destruction, which must leave no
 * copy unrun and synchronizes the device only when a copy is not behind an event. */
#include <stdlib.h>
#include <string.h>

#include "core/attention_plan.h"
#include "harness.h"

enum { BYTES = 256, MAX_OPS = 4096 };

/* The simulated device: ops[0, issued) in issue order, ops[0, done) have run. */
typedef struct op {
  int is_copy;
  void *dst;
  const unsigned char *src; /* a copy reads it when it runs */
  int expect;               /* the pattern its update wrote */
  void *event;              /* a record */
} op;

static struct {
  op ops[MAX_OPS];
  int issued, done;
  int copies, records, queries, waits, device_syncs, wrong;
  int pinned_live;
} sim;

typedef struct sim_event {
  int recorded_at; /* complete once done >= it (0: never recorded) */
} sim_event;

static void run_to(int n) {
  for (; sim.done < n && sim.done < sim.issued; ++sim.done) {
    op *o = &sim.ops[sim.done];
    if (!o->is_copy)
      continue;
    memcpy(o->dst, o->src, BYTES);
    if (((const unsigned char *)o->dst)[0] != (unsigned char)o->expect)
      ++sim.wrong;
  }
}

static ignis_status sim_pinned_alloc(size_t bytes, void **ptr) {
  *ptr = calloc(1, bytes);
  ++sim.pinned_live;
  return IGNIS_OK;
}
static void sim_pinned_free(void *ptr) {
  if (!ptr)
    return;
  /* no copy may still have to read it */
  CHECKF(sim.done == sim.issued, "pinned memory freed with %d ops not run", sim.issued - sim.done);
  free(ptr);
  --sim.pinned_live;
}
static ignis_status sim_device_alloc(int32_t device, size_t bytes, void **ptr) {
  *ptr = calloc(1, bytes > 0 ? bytes : 1);
  return IGNIS_OK;
}
static void sim_device_free(void *ptr) { free(ptr); }
static ignis_status sim_event_create(int32_t device, void **event) {
  *event = calloc(1, sizeof(sim_event));
  return IGNIS_OK;
}
static void sim_event_destroy(void *event) { free(event); }
static ignis_status sim_event_query(void *event, int *complete) {
  ++sim.queries;
  *complete = sim.done >= ((sim_event *)event)->recorded_at;
  return IGNIS_OK;
}
static ignis_status sim_event_synchronize(void *event) {
  ++sim.waits;
  run_to(((sim_event *)event)->recorded_at);
  return IGNIS_OK;
}
static ignis_status sim_copy(void *dst, const void *src, size_t bytes, int32_t device, void *stream, void *event) {
  CHECK(bytes == BYTES);
  op copy = {1, dst, src, ((const unsigned char *)src)[0], NULL};
  sim.ops[sim.issued++] = copy;
  ++sim.copies;
  if (event) {
    op record = {0, NULL, NULL, 0, event};
    sim.ops[sim.issued++] = record;
    ((sim_event *)event)->recorded_at = sim.issued;
    ++sim.records;
  }
  return IGNIS_OK;
}
static ignis_status sim_device_synchronize(int32_t device) {
  ++sim.device_syncs;
  run_to(sim.issued);
  return IGNIS_OK;
}

static const ignis_backend sim_backend = {
    .name = "sim",
    .type = IGNIS_DEVICE_CUDA,
    .host_memory = 0,
    .pinned_alloc = sim_pinned_alloc,
    .pinned_free = sim_pinned_free,
    .device_alloc = sim_device_alloc,
    .device_free = sim_device_free,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_query = sim_event_query,
    .event_synchronize = sim_event_synchronize,
    .copy_to_device_async = sim_copy,
    .device_synchronize = sim_device_synchronize,
};

static int update_waits; /* run_updates: the waits of the updates (not the destruction's) */

/* How the device advances after each update. */
enum progress { KEEPS_UP, STALLED, RANDOM };

/* `updates` updates through a fresh storage, then its destruction; sim's counters tell the calls. */
static void run_updates(int updates, enum progress progress, unsigned seed) {
  memset(&sim, 0, sizeof sim);
  ignis_plan_storage storage;
  if (!CHECK_STATUS(ignis_plan_storage_create_on(&storage, "test", &sim_backend, 0, BYTES, 0), IGNIS_OK))
    return;
  for (int u = 1; u <= updates; ++u) {
    void *image = NULL;
    if (!CHECK_STATUS(ignis_plan_begin_update(&storage, &image), IGNIS_OK))
      break;
    memset(image, u & 0xff, BYTES); /* the planner writes the image */
    if (!CHECK_STATUS(ignis_plan_finish_update(&storage, BYTES, NULL), IGNIS_OK))
      break;
    if (progress == KEEPS_UP)
      run_to(sim.issued);
    else if (progress == RANDOM) {
      seed = seed * 1103515245u + 12345u;
      run_to(sim.done + (int)((seed >> 16) % 4));
    }
    /* a copy that ran delivered its own update's pattern */
    CHECKF(sim.wrong == 0, "update %d: %d copies delivered another update's schedule", u, sim.wrong);
  }
  run_to(sim.issued); /* for the counts below: the device idle before the destruction */
  update_waits = sim.waits;
  const int syncs_before = sim.device_syncs;
  ignis_plan_storage_destroy(&storage);
  /* the copies not behind an event are waited for by a device synchronization (here: idle) */
  CHECK(sim.device_syncs == syncs_before + (updates % IGNIS_STAGING_GROUP != 0));
  CHECK(sim.pinned_live == 0);
}

/* Destroyed right after `updates` updates, the device having run nothing of them. */
static void destroy_busy(int updates) {
  memset(&sim, 0, sizeof sim);
  ignis_plan_storage storage;
  if (!CHECK_STATUS(ignis_plan_storage_create_on(&storage, "test", &sim_backend, 0, BYTES, 0), IGNIS_OK))
    return;
  for (int u = 1; u <= updates; ++u) {
    void *image = NULL;
    CHECK_STATUS(ignis_plan_begin_update(&storage, &image), IGNIS_OK);
    memset(image, u & 0xff, BYTES);
    CHECK_STATUS(ignis_plan_finish_update(&storage, BYTES, NULL), IGNIS_OK);
  }
  ignis_plan_storage_destroy(&storage); /* sim_pinned_free checks that every op ran */
  CHECK(sim.done == sim.issued);
  CHECK(sim.wrong == 0);
  /* a device synchronization only for copies not behind an event */
  CHECK(sim.device_syncs == (updates % IGNIS_STAGING_GROUP != 0));
  CHECK(sim.pinned_live == 0);
}

int main(void) {
  h_init("test_staging_ring");
  const int updates = 64 * IGNIS_STAGING_GROUP;

  h_case("device keeping up");
  run_updates(updates, KEEPS_UP, 0);
  CHECK(sim.copies == updates);
  CHECK(sim.records == updates / IGNIS_STAGING_GROUP);
  CHECK(sim.queries == updates / IGNIS_STAGING_GROUP);
  CHECK(update_waits == 0);

  h_case("device stalled until the ring waits");
  run_updates(updates, STALLED, 0);
  CHECK(sim.copies == updates);
  CHECK(update_waits > 0);

  for (unsigned seed = 1; seed <= 20; ++seed) {
    h_case("random device progress, seed %u", seed);
    run_updates(updates + (int)seed, RANDOM, seed);
  }

  for (int n = 0; n <= IGNIS_STAGING_SLOTS + 1; ++n) {
    h_case("destroyed after %d updates with the device busy", n);
    destroy_busy(n);
  }
  return h_finish();
}
