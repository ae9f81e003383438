/* Integer helpers the planners (decode_plan.c, prefill_plan.c) share: ceiling division, the
 * smaller and larger of two int64 values, and rounding a byte count up to 16 (the alignment of
 * every array in a schedule image). */
#ifndef IGNIS_SCHED_PLAN_MATH_H
#define IGNIS_SCHED_PLAN_MATH_H

#include <stddef.h>
#include <stdint.h>

/* ceil(a / b) for a >= 0, b > 0. */
static inline int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

static inline int64_t max64(int64_t a, int64_t b) {
  return a > b ? a : b;
}

static inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

static inline size_t pad16(size_t bytes) {
  return (bytes + 15) / 16 * 16;
}

#endif
