/* Status names and messages (from the IGNIS_STATUS_MAP X-macro), the thread-local last-error
 * message, and the version and build strings. */
#include <stdarg.h>
#include <stdio.h>

#include "core/backend.h"
#include "core/error.h"

static _Thread_local char last_error_message[1024];

ignis_status ignis_set_error(ignis_status status, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_error_message, sizeof last_error_message, format, args);
  va_end(args);
  return status;
}

void ignis_clear_error(void) { last_error_message[0] = '\0'; }

const char *ignis_last_error(void) { return last_error_message; }

const char *ignis_status_string(ignis_status status) {
  switch (status) {
#define IGNIS_STATUS_NAME_(name, value, msg)                                                       \
  case name:                                                                                       \
    return #name;
    IGNIS_STATUS_MAP(IGNIS_STATUS_NAME_)
#undef IGNIS_STATUS_NAME_
  }
  return "IGNIS_UNKNOWN_STATUS";
}

const char *ignis_status_message(ignis_status status) {
  switch (status) {
#define IGNIS_STATUS_MSG_(name, value, msg)                                                        \
  case name:                                                                                       \
    return msg;
    IGNIS_STATUS_MAP(IGNIS_STATUS_MSG_)
#undef IGNIS_STATUS_MSG_
  }
  return "unknown status";
}

int ignis_version(void) { return IGNIS_VERSION_NUMBER; }

const char *ignis_version_string(void) { return IGNIS_VERSION_STRING; }

#ifndef IGNIS_BUILD_TYPE
#define IGNIS_BUILD_TYPE "unknown"
#endif
#ifndef IGNIS_CUDA_TARGETS
#define IGNIS_CUDA_TARGETS ""
#endif
#ifndef IGNIS_HEAD_DIMS_STRING
#define IGNIS_HEAD_DIMS_STRING ""
#endif

const char *ignis_build_info(void) {
#ifdef IGNIS_HAVE_CUDA
  return "ignis " IGNIS_VERSION_STRING " (" IGNIS_BUILD_TYPE "): backends cpu, cuda [" IGNIS_CUDA_TARGETS
         "; attention head dims " IGNIS_HEAD_DIMS_STRING "]";
#else
  return "ignis " IGNIS_VERSION_STRING " (" IGNIS_BUILD_TYPE "): backends cpu (CUDA backend not built)";
#endif
}
