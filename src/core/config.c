/* Caller configuration structs read over their defaults (see config.h). */
#include <string.h>

#include "core/config.h"
#include "core/error.h"

ignis_status ignis_read_config(const char *fn, const char *what, const char *init, void *dst, const void *defaults,
                               const void *src, size_t current, size_t first) {
  size_t size;
  memcpy(&size, src, sizeof size);
  if (size < first)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s=%zu but it must be at least %zu, the first released layout (%s)", fn, what,
                           size, first, init);
  if (size > current)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "%s: %s=%zu but this library's is %zu: the caller was built against a newer ignis",
                           fn, what, size, current);
  memcpy(dst, defaults, current);
  memcpy(dst, src, size);
  memcpy(dst, &current, sizeof current);
  return IGNIS_OK;
}
