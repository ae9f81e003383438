/* Workspace carving: scratch memory is caller-owned; an op carves it into aligned pieces. The same
 * carving code runs in counting mode (base == NULL) to answer the size query, so the query and the
 * run cannot drift apart:
 *     ignis_workspace ws = ignis_workspace_counting();
 *     carve(&ws, ...);                          // size query: ignis_workspace_required(&ws)
 *     ignis_workspace ws = ignis_workspace_over(buffer, bytes);
 *     carve(&ws, ...);                          // run: pointers, or an error if too small */
#ifndef IGNIS_CORE_WORKSPACE_H
#define IGNIS_CORE_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "ignis/core.h"

typedef struct ignis_workspace {
  char *base;      /* NULL in counting mode */
  size_t capacity; /* bytes available (ignored in counting mode) */
  size_t offset;   /* bytes used so far, including alignment padding */
} ignis_workspace;

#define IGNIS_WORKSPACE_ALIGNMENT 256

ignis_workspace ignis_workspace_counting(void);
ignis_workspace ignis_workspace_over(void *base, size_t capacity);

/* Reserve count * elem_size bytes aligned to IGNIS_WORKSPACE_ALIGNMENT. In counting mode *out is
 * set to NULL and the size is accumulated; otherwise *out points into the buffer, or the call
 * returns IGNIS_ERROR_INSUFFICIENT_WORKSPACE (message names fn and what) when it does not fit.
 * Overflowing sizes are reported as invalid arguments. */
ignis_status ignis_workspace_take(ignis_workspace *ws, const char *fn, const char *what, int64_t count,
                                  size_t elem_size, void **out);

/* After carving in counting mode: bytes a caller must provide (includes slack for aligning any
 * base pointer). */
size_t ignis_workspace_required(const ignis_workspace *ws);

#endif
