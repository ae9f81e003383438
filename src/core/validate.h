/* Validation helpers shared by every op's front end. Each checks one property of one named
 * tensor and, on failure, sets the last-error message as "<fn>: <name>.<what>" and returns the
 * status. Typical use:
 *     IGNIS_TRY(ignis_check_tensor(fn, "input", input, 2, 3));
 *     IGNIS_TRY(ignis_check_float_dtype(fn, "input", input));
 * ignis_resolve_target decides which backend runs: all tensors on the host, or all on one CUDA
 * device (pointer locations checked with the CUDA runtime where it can tell). */
#ifndef IGNIS_CORE_VALIDATE_H
#define IGNIS_CORE_VALIDATE_H

#include "core/backend.h"
#include "core/error.h"
#include "core/params.h"
#include "ignis/core.h"

#define IGNIS_TRY(expr)                                                                            \
  do {                                                                                             \
    ignis_status ignis_try_status_ = (expr);                                                       \
    if (ignis_try_status_ != IGNIS_OK)                                                             \
      return ignis_try_status_;                                                                    \
  } while (0)

/* Non-NULL descriptor, valid dtype, min_ndim <= ndim <= max_ndim, shapes >= 0, data non-NULL when
 * the tensor has elements, data aligned to the element size. */
ignis_status ignis_check_tensor(const char *fn, const char *name, const ignis_tensor *t,
                                int min_ndim, int max_ndim);
/* dtype is f16, bf16 or f32. */
ignis_status ignis_check_float_dtype(const char *fn, const char *name, const ignis_tensor *t);
/* dtype is i32 or i64. */
ignis_status ignis_check_index_dtype(const char *fn, const char *name, const ignis_tensor *t);
ignis_status ignis_check_same_dtype(const char *fn, const char *name, const ignis_tensor *t,
                                    const char *ref_name, const ignis_tensor *ref);
/* t.shape[dim] == expected (dim may be negative, counted from the end). */
ignis_status ignis_check_dim(const char *fn, const char *name, const ignis_tensor *t, int dim,
                             int64_t expected, const char *what);
/* The last dimension has stride 1 (or size <= 1): else IGNIS_ERROR_UNSUPPORTED. */
ignis_status ignis_check_last_dim_contiguous(const char *fn, const char *name, const ignis_tensor *t);
/* 1-D tensor of `length` elements with stride 1 (or length <= 1). */
ignis_status ignis_check_vector(const char *fn, const char *name, const ignis_tensor *t, int64_t length);
/* Same ndim and shape as ref. */
ignis_status ignis_check_same_shape(const char *fn, const char *name, const ignis_tensor *t,
                                    const char *ref_name, const ignis_tensor *ref);
/* Error unless a and b are the same view (same data, shape and strides) or do not overlap. */
ignis_status ignis_check_alias_or_disjoint(const char *fn, const char *name, const ignis_tensor *a,
                                           const char *ref_name, const ignis_tensor *b);
/* Error if a and b overlap at all. */
ignis_status ignis_check_disjoint(const char *fn, const char *name, const ignis_tensor *a,
                                  const char *ref_name, const ignis_tensor *b);
/* 1 if a and b describe exactly the same view. */
int ignis_same_view(const ignis_tensor *a, const ignis_tensor *b);

/* Leading dimensions of a 1-D to 3-D tensor as a 2-level row index (see params.h): the last
 * dimension is the row; ndim 1 -> one row, 2 -> [rows], 3 -> [outer, inner]. */
void ignis_row_view(const ignis_tensor *t, int64_t *num_rows_outer, int64_t *num_rows_inner,
                    ignis_row_layout *layout);

/* All tensors (NULL entries skipped) live on one device: sets target->device and its backend. */
ignis_status ignis_resolve_target(const char *fn, const ignis_tensor *const *tensors,
                                  const char *const *names, int count, ignis_target *target);
/* "cuda" or "cpu", for messages. */
const char *ignis_device_type_name(ignis_device_type type);
/* Why no CUDA device can be used: "no CUDA device is present" or "the CUDA backend is not built". */
const char *ignis_no_cuda_device_reason(void);

#endif
