/* Tensor descriptors: construction helpers of the public API and the validation helpers every
 * op's front end uses (see validate.h). Overlap checks compare the byte spans the views cover,
 * which is conservative for interleaved views. */
#include <inttypes.h>
#include <string.h>

#include "core/validate.h"

ignis_status ignis_tensor_init(ignis_tensor *tensor, void *data, ignis_dtype dtype, int32_t ndim,
                               const int64_t *shape, ignis_device device) {
  ignis_clear_error();
  if (!tensor)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_tensor_init: tensor is NULL");
  if (ndim < 0 || ndim > IGNIS_MAX_DIMS)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "ignis_tensor_init: ndim=%d outside 0..%d", ndim, IGNIS_MAX_DIMS);
  if (ndim > 0 && !shape)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_tensor_init: shape is NULL");
  if (ignis_dtype_size(dtype) == 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_tensor_init: dtype=%d is not a dtype",
                           (int)dtype);
  memset(tensor, 0, sizeof *tensor);
  tensor->data = data;
  tensor->dtype = dtype;
  tensor->ndim = ndim;
  tensor->device = device;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] < 0)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "ignis_tensor_init: shape[%d]=%" PRId64 " is negative", d, shape[d]);
    tensor->shape[d] = shape[d];
    tensor->strides[d] = stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return IGNIS_OK;
}

int64_t ignis_tensor_numel(const ignis_tensor *tensor) {
  if (!tensor)
    return 0;
  int64_t n = 1;
  for (int d = 0; d < tensor->ndim; ++d)
    n *= tensor->shape[d];
  return n;
}

int ignis_tensor_is_contiguous(const ignis_tensor *tensor) {
  if (!tensor)
    return 0;
  int64_t expected = 1;
  for (int d = tensor->ndim - 1; d >= 0; --d) {
    if (tensor->shape[d] == 1)
      continue;
    if (tensor->strides[d] != expected)
      return 0;
    expected *= tensor->shape[d];
  }
  return 1;
}

ignis_status ignis_check_tensor(const char *fn, const char *name, const ignis_tensor *t, int min_ndim,
                                int max_ndim) {
  if (!t)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
  size_t elem = ignis_dtype_size(t->dtype);
  if (elem == 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%d is not a dtype", fn, name,
                           (int)t->dtype);
  if (t->ndim < min_ndim || t->ndim > max_ndim) {
    if (min_ndim == max_ndim)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.ndim=%d but it must be %d", fn,
                             name, t->ndim, min_ndim);
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.ndim=%d but it must be %d to %d",
                           fn, name, t->ndim, min_ndim, max_ndim);
  }
  for (int d = 0; d < t->ndim; ++d)
    if (t->shape[d] < 0)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.shape[%d]=%" PRId64 " is negative",
                             fn, name, d, t->shape[d]);
  if (t->device.type != IGNIS_DEVICE_CPU && t->device.type != IGNIS_DEVICE_CUDA)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.device.type=%d is not a device type",
                           fn, name, (int)t->device.type);
  if (ignis_tensor_numel(t) > 0) {
    if (!t->data)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.data is NULL", fn, name);
    if ((uintptr_t)t->data % elem != 0)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: %s.data=%p is not aligned to its %zu-byte elements", fn, name,
                             t->data, elem);
  }
  return IGNIS_OK;
}

ignis_status ignis_check_float_dtype(const char *fn, const char *name, const ignis_tensor *t) {
  if (t->dtype == IGNIS_F16 || t->dtype == IGNIS_BF16 || t->dtype == IGNIS_F32)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be f16, bf16 or f32",
                         fn, name, ignis_dtype_name(t->dtype));
}

ignis_status ignis_check_index_dtype(const char *fn, const char *name, const ignis_tensor *t) {
  if (t->dtype == IGNIS_I32 || t->dtype == IGNIS_I64)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but it must be i32 or i64", fn,
                         name, ignis_dtype_name(t->dtype));
}

ignis_status ignis_check_same_dtype(const char *fn, const char *name, const ignis_tensor *t,
                                    const char *ref_name, const ignis_tensor *ref) {
  if (t->dtype == ref->dtype)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.dtype=%s but %s.dtype=%s", fn, name,
                         ignis_dtype_name(t->dtype), ref_name, ignis_dtype_name(ref->dtype));
}

ignis_status ignis_check_dim(const char *fn, const char *name, const ignis_tensor *t, int dim,
                             int64_t expected, const char *what) {
  int d = dim < 0 ? t->ndim + dim : dim;
  if (d >= 0 && d < t->ndim && t->shape[d] == expected)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.shape[%d]=%" PRId64 " but %s=%" PRId64,
                         fn, name, dim, (d >= 0 && d < t->ndim) ? t->shape[d] : -1, what, expected);
}

ignis_status ignis_check_last_dim_contiguous(const char *fn, const char *name, const ignis_tensor *t) {
  if (t->ndim == 0 || t->shape[t->ndim - 1] <= 1 || t->strides[t->ndim - 1] == 1)
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                         "%s: %s.strides[-1]=%" PRId64 " but the last dimension must have stride 1",
                         fn, name, t->strides[t->ndim - 1]);
}

ignis_status ignis_check_vector(const char *fn, const char *name, const ignis_tensor *t, int64_t length) {
  if (t->ndim != 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.ndim=%d but it must be 1", fn, name,
                           t->ndim);
  if (t->shape[0] != length)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "%s: %s.shape[0]=%" PRId64 " but it must be %" PRId64, fn, name,
                           t->shape[0], length);
  if (length > 1 && t->strides[0] != 1)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: %s.strides[0]=%" PRId64 " but it must be 1",
                           fn, name, t->strides[0]);
  return IGNIS_OK;
}

ignis_status ignis_check_same_shape(const char *fn, const char *name, const ignis_tensor *t,
                                    const char *ref_name, const ignis_tensor *ref) {
  if (t->ndim != ref->ndim)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s.ndim=%d but %s.ndim=%d", fn, name,
                           t->ndim, ref_name, ref->ndim);
  for (int d = 0; d < t->ndim; ++d)
    if (t->shape[d] != ref->shape[d])
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "%s: %s.shape[%d]=%" PRId64 " but %s.shape[%d]=%" PRId64, fn, name, d,
                             t->shape[d], ref_name, d, ref->shape[d]);
  return IGNIS_OK;
}

int ignis_same_view(const ignis_tensor *a, const ignis_tensor *b) {
  if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim)
    return 0;
  for (int d = 0; d < a->ndim; ++d)
    if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d]))
      return 0;
  return 1;
}

/* Byte span [lo, hi) covered by a view; empty views cover nothing. */
static void byte_span(const ignis_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  int64_t elem = (int64_t)ignis_dtype_size(t->dtype);
  int64_t min_off = 0, max_off = 0;
  if (ignis_tensor_numel(t) == 0) {
    *lo = *hi = (uintptr_t)t->data;
    return;
  }
  for (int d = 0; d < t->ndim; ++d) {
    int64_t extent = (t->shape[d] - 1) * t->strides[d];
    if (extent < 0)
      min_off += extent;
    else
      max_off += extent;
  }
  *lo = (uintptr_t)((const char *)t->data + min_off * elem);
  *hi = (uintptr_t)((const char *)t->data + (max_off + 1) * elem);
}

static uint64_t gcd_u64(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Views whose rows (the last dimension, stride >= 0) sit on one lattice: every other dimension of
 * either view that has more than one index steps by a multiple of `period` bytes, so each view's
 * bytes lie, modulo the period, within those of its first row. When the two rows do not meet modulo
 * the period, the views share no byte: K and V split from one cache along its last dimension (vLLM
 * keeps each token's K and V side by side), q / k / v cut from a fused qkv row. */
static int rows_disjoint_mod_period(const ignis_tensor *a, const ignis_tensor *b) {
  const ignis_tensor *views[2] = {a, b};
  uint64_t period = 0, width[2];
  for (int v = 0; v < 2; ++v) {
    const ignis_tensor *t = views[v];
    const int last = t->ndim - 1;
    const int64_t elem = (int64_t)ignis_dtype_size(t->dtype);
    if (last < 1 || t->strides[last] < 0)
      return 0;
    for (int d = 0; d < last; ++d)
      if (t->shape[d] > 1)
        period = gcd_u64(period, (uint64_t)(t->strides[d] < 0 ? -t->strides[d] : t->strides[d]) * (uint64_t)elem);
    width[v] = (uint64_t)(((t->shape[last] - 1) * t->strides[last] + 1) * elem);
  }
  if (period == 0)
    return 0;
  const uintptr_t pa = (uintptr_t)a->data, pb = (uintptr_t)b->data;
  const uint64_t distance = pb >= pa ? (uint64_t)(pb - pa) % period : (period - (uint64_t)(pa - pb) % period) % period;
  return distance >= width[0] && distance + width[1] <= period;
}

/* Views that step through memory with the same positive leading stride (q and k cut from one
 * fused qkv buffer, say) interleave: their spans intersect although no element is shared. For
 * those, compare the slices of one leading index modulo the stride. Everything else is judged by
 * its span, which may call interleaved views of other shapes overlapping. */
static int views_overlap(const ignis_tensor *a, const ignis_tensor *b) {
  uintptr_t alo, ahi, blo, bhi;
  byte_span(a, &alo, &ahi);
  byte_span(b, &blo, &bhi);
  if (!(alo < bhi && blo < ahi))
    return 0;
  if (rows_disjoint_mod_period(a, b))
    return 0;
  int64_t elem_a = (int64_t)ignis_dtype_size(a->dtype), elem_b = (int64_t)ignis_dtype_size(b->dtype);
  if (a->ndim < 2 || b->ndim < 2 || a->strides[0] * elem_a != b->strides[0] * elem_b || a->strides[0] <= 0)
    return 1;
  uintptr_t stride = (uintptr_t)(a->strides[0] * elem_a);
  ignis_tensor slice_a = *a, slice_b = *b;
  slice_a.shape[0] = slice_b.shape[0] = 1;
  uintptr_t slo_a, shi_a, slo_b, shi_b;
  byte_span(&slice_a, &slo_a, &shi_a);
  byte_span(&slice_b, &slo_b, &shi_b);
  uintptr_t width_a = shi_a - slo_a, width_b = shi_b - slo_b;
  if (width_a > stride || width_b > stride)
    return 1;
  uintptr_t distance = (slo_b - slo_a) % stride; /* unsigned wrap-around gives the modulus */
  if (slo_b < slo_a)
    distance = (stride - (slo_a - slo_b) % stride) % stride;
  return distance < width_a || distance + width_b > stride;
}

ignis_status ignis_check_alias_or_disjoint(const char *fn, const char *name, const ignis_tensor *a,
                                           const char *ref_name, const ignis_tensor *b) {
  if (ignis_same_view(a, b) || !views_overlap(a, b))
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                         "%s: %s overlaps %s without being the same view (in place needs identical "
                         "data and strides)",
                         fn, name, ref_name);
}

ignis_status ignis_check_disjoint(const char *fn, const char *name, const ignis_tensor *a,
                                  const char *ref_name, const ignis_tensor *b) {
  if (!views_overlap(a, b))
    return IGNIS_OK;
  return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "%s: %s overlaps %s", fn, name, ref_name);
}

void ignis_row_view(const ignis_tensor *t, int64_t *num_rows_outer, int64_t *num_rows_inner,
                    ignis_row_layout *layout) {
  *num_rows_outer = t->ndim == 3 ? t->shape[0] : 1;
  *num_rows_inner = t->ndim == 1 ? 1 : t->shape[t->ndim - 2];
  layout->stride_outer = t->ndim == 3 ? t->strides[0] : 0;
  layout->stride_inner = t->ndim == 1 ? 0 : t->strides[t->ndim - 2];
}
