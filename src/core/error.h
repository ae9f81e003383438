/* Internal error reporting: set the thread-local message returned by ignis_last_error() and return
 * the status in one step, e.g.
 *     return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_rmsnorm: eps=%g must be >= 0", eps);
 * Every public function clears the message on entry (ignis_clear_error) so a stale message never
 * describes a later success. */
#ifndef IGNIS_CORE_ERROR_H
#define IGNIS_CORE_ERROR_H

#include "ignis/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define IGNIS_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define IGNIS_PRINTF_LIKE(fmt, args)
#endif

ignis_status ignis_set_error(ignis_status status, const char *format, ...) IGNIS_PRINTF_LIKE(2, 3);
void ignis_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
