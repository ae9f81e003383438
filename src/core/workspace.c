/* Workspace carving with a counting mode (see workspace.h). */
#include <inttypes.h>

#include "core/error.h"
#include "core/workspace.h"

ignis_workspace ignis_workspace_counting(void) {
  ignis_workspace ws = {NULL, 0, 0};
  return ws;
}

ignis_workspace ignis_workspace_over(void *base, size_t capacity) {
  ignis_workspace ws = {(char *)base, capacity, 0};
  /* Pieces are aligned relative to the base, so the base itself must be aligned. */
  size_t misalignment = (uintptr_t)base % IGNIS_WORKSPACE_ALIGNMENT;
  if (base && misalignment) {
    size_t skip = IGNIS_WORKSPACE_ALIGNMENT - misalignment;
    ws.base += skip;
    ws.capacity = capacity > skip ? capacity - skip : 0;
  }
  return ws;
}

ignis_status ignis_workspace_take(ignis_workspace *ws, const char *fn, const char *what, int64_t count,
                                  size_t elem_size, void **out) {
  *out = NULL;
  if (count < 0 || (elem_size && (uint64_t)count > SIZE_MAX / 2 / elem_size))
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: workspace piece %s of %" PRId64
                           " elements overflows", fn, what, count);
  size_t bytes = (size_t)count * elem_size;
  size_t start = (ws->offset + IGNIS_WORKSPACE_ALIGNMENT - 1) / IGNIS_WORKSPACE_ALIGNMENT *
                 IGNIS_WORKSPACE_ALIGNMENT;
  size_t end = start + bytes;
  if (!ws->base) {
    ws->offset = end;
    return IGNIS_OK;
  }
  if (end > ws->capacity)
    return ignis_set_error(IGNIS_ERROR_INSUFFICIENT_WORKSPACE,
                           "%s: workspace too small for %s: needs %zu bytes, %zu available", fn, what,
                           end, ws->capacity);
  *out = ws->base + start;
  ws->offset = end;
  return IGNIS_OK;
}

size_t ignis_workspace_required(const ignis_workspace *ws) {
  /* Slack for a base that ignis_workspace_over has to align. */
  return ws->offset + IGNIS_WORKSPACE_ALIGNMENT;
}
