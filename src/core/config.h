/* Reading a caller's configuration struct so the ABI can grow (the NCCL way). Every public config
 * struct starts with `size_t size`, set by its _INIT initializer to the sizeof the caller was
 * compiled with. The library copies min(size, sizeof) bytes of the caller's struct over its own
 * _INIT defaults, so a caller built against an older, smaller struct gets the defaults for the
 * fields added since. Sizes below the first released layout are refused (not an ignis struct, or
 * size unset), and sizes above this library's (a caller built against a newer ignis, whose extra
 * fields this library cannot honour) are refused as unsupported rather than silently ignored.
 *
 * The first released layout of each struct is named where it is read, as IGNIS_CONFIG_END(type,
 * last field of that release): the bytes up to that field's end. */
#ifndef IGNIS_CORE_CONFIG_H
#define IGNIS_CORE_CONFIG_H

#include <stddef.h>

#include "ignis/core.h"

#define IGNIS_CONFIG_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* *dst (current bytes) = defaults, then the caller's `src` read over them; dst->size = current.
 * `what` names the caller's size field in messages ("config.size", ...), `init` the initializer. */
ignis_status ignis_read_config(const char *fn, const char *what, const char *init, void *dst, const void *defaults,
                               const void *src, size_t current, size_t first);

#endif
