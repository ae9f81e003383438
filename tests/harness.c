/* Test harness implementation (see harness.h): counters and failure reports, splitmix64 random
 * numbers, dtype rounding in fp64, backends (CPU always, CUDA when built and a GPU is present),
 * buffers with a host mirror and poisoning, views into buffers, and the tolerance comparison. */
#include "harness.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef IGNIS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

/* ---- checks and counters ----------------------------------------------------------------- */
static int64_t passed_count, failed_count;
static char case_description[512];
static int64_t printed_failures;
#define H_MAX_PRINTED_FAILURES 200

/* IGNIS_TEST_VERBOSE=1 prints the worst error/tolerance ratio of every passing comparison. */
static int verbose(void) {
  static int cached = -1;
  if (cached < 0) {
    const char *v = getenv("IGNIS_TEST_VERBOSE");
    cached = v && v[0] && v[0] != '0';
  }
  return cached;
}

int h_selected(const char *case_name) {
  const char *only = getenv("IGNIS_TEST_ONLY");
  return !only || !only[0] || strstr(case_name, only) != NULL;
}

int h_quick(void) {
  static int cached = -1;
  if (cached < 0) {
    const char *v = getenv("IGNIS_TEST_QUICK");
    cached = v && v[0] && v[0] != '0';
  }
  return cached;
}

static int tracing(void) {
  static int cached = -1;
  if (cached < 0) {
    const char *v = getenv("IGNIS_TEST_TRACE");
    cached = v && v[0] && v[0] != '0';
  }
  return cached;
}

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

void h_case(const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(case_description, sizeof case_description, format, args);
  va_end(args);
  if (tracing()) {
    static double first = -1.0;
    const double now = seconds_now();
    if (first < 0.0)
      first = now;
    printf("[%7.1fs] %s\n", now - first, case_description);
    fflush(stdout);
  }
}

static void report_failure(const char *file, int line, const char *expr, const char *detail) {
  if (++printed_failures > H_MAX_PRINTED_FAILURES) {
    if (printed_failures == H_MAX_PRINTED_FAILURES + 1)
      printf("(further failures are counted but not printed)\n");
    return;
  }
  printf("%s:%d: FAILED: %s%s%s\n", file, line, expr, detail[0] ? " -- " : "", detail);
  if (case_description[0])
    printf("    in case: %s\n", case_description);
}

int h_check(int ok, const char *file, int line, const char *expr, const char *format, ...) {
  if (ok) {
    ++passed_count;
    return 1;
  }
  ++failed_count;
  char detail[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(detail, sizeof detail, format, args);
  va_end(args);
  report_failure(file, line, expr, detail);
  return 0;
}

int h_check_status(ignis_status got, ignis_status expected, const char *file, int line, const char *expr,
                   const char *needle) {
  const char *message = ignis_last_error();
  if (got != expected)
    return h_check(0, file, line, expr, "returned %s, expected %s; last error: \"%s\"",
                   ignis_status_string(got), ignis_status_string(expected), message);
  if (expected == IGNIS_OK)
    return h_check(message[0] == '\0', file, line, expr,
                   "succeeded but ignis_last_error() is \"%s\" (must be cleared)", message);
  if (message[0] == '\0')
    return h_check(0, file, line, expr, "returned %s with an empty error message", ignis_status_string(got));
  if (needle && !strstr(message, needle))
    return h_check(0, file, line, expr, "message \"%s\" does not name \"%s\"", message, needle);
  return h_check(1, file, line, expr, "%s", "");
}

/* ---- backends ----------------------------------------------------------------------------- */
static int backend_count = -1;

int h_backend_count(void) {
  if (backend_count < 0) {
    backend_count = 1;
#ifdef IGNIS_HAVE_CUDA
    if (ignis_cuda_device_count() > 0)
      backend_count = 2;
#endif
  }
  return backend_count;
}

h_backend h_backend_at(int index) {
  return index == 0 ? H_CPU : H_CUDA;
}

const char *h_backend_name(h_backend backend) {
  return backend == H_CPU ? "cpu" : "cuda";
}

ignis_device h_backend_device(h_backend backend) {
  ignis_device device = {backend == H_CPU ? IGNIS_DEVICE_CPU : IGNIS_DEVICE_CUDA, 0};
  return device;
}

void h_init(const char *test_name) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  printf("%s: %s\n", test_name, ignis_build_info());
  printf("backends: cpu");
  if (h_backend_count() > 1) {
    ignis_device device = h_backend_device(H_CUDA);
    ignis_device_info info = IGNIS_DEVICE_INFO_INIT;
    if (ignis_get_device_info(device, &info) == IGNIS_OK)
      printf(", cuda (%s)", info.name);
    else
      printf(", cuda");
  } else {
#ifdef IGNIS_HAVE_CUDA
    printf(" (cuda built, no device present: CUDA backend not tested)");
#else
    printf(" (CUDA backend not built)");
#endif
  }
  printf("\n");
}

int h_finish(void) {
  printf("%" PRId64 " passed, %" PRId64 " failed\n", passed_count, failed_count);
  return failed_count != 0;
}

/* ---- random numbers ------------------------------------------------------------------------ */
h_rng h_rng_make(uint64_t seed) {
  h_rng rng = {seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull};
  return rng;
}

uint64_t h_rng_u64(h_rng *rng) {
  uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double h_rng_uniform(h_rng *rng, double lo, double hi) {
  double unit = (double)(h_rng_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
  return lo + (hi - lo) * unit;
}

int64_t h_rng_int(h_rng *rng, int64_t lo, int64_t hi) {
  uint64_t span = (uint64_t)(hi - lo) + 1;
  return lo + (int64_t)(h_rng_u64(rng) % span);
}

double h_rng_normal(h_rng *rng) {
  double u1 = h_rng_uniform(rng, 0.0, 1.0), u2 = h_rng_uniform(rng, 0.0, 1.0);
  if (u1 < 1e-300)
    u1 = 1e-300;
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- dtypes -------------------------------------------------------------------------------- */
double h_round_to(ignis_dtype dtype, double x) {
  switch (dtype) {
  case IGNIS_F16:
    return ignis_f16_to_f32(ignis_f32_to_f16((float)x));
  case IGNIS_BF16:
    return ignis_bf16_to_f32(ignis_f32_to_bf16((float)x));
  default:
    return (double)(float)x;
  }
}

double h_dtype_min_subnormal(ignis_dtype dtype) {
  switch (dtype) {
  case IGNIS_F16:
    return ldexp(1.0, -24);
  case IGNIS_BF16:
    return ldexp(1.0, -133);
  default:
    return ldexp(1.0, -149);
  }
}

h_tol h_tol_for(ignis_dtype dtype, double scale) {
  double rtol = dtype == IGNIS_BF16 ? 1e-2 : dtype == IGNIS_F16 ? 1e-3 : 1e-5;
  h_tol tol = {rtol, fmax(rtol * scale * 0.1, h_dtype_min_subnormal(dtype))};
  return tol;
}

/* ---- buffers ------------------------------------------------------------------------------ */
static void fatal(const char *what) {
  printf("FATAL: %s\n", what);
  printf("%" PRId64 " passed, %" PRId64 " failed\n", passed_count, failed_count + 1);
  exit(1);
}

h_buf h_buf_alloc(h_backend backend, ignis_dtype dtype, int64_t count) {
  h_buf buf;
  memset(&buf, 0, sizeof buf);
  buf.backend = backend;
  buf.dtype = dtype;
  buf.count = count;
  buf.elem_size = ignis_dtype_size(dtype);
  size_t bytes = (size_t)(count > 0 ? count : 1) * buf.elem_size;
  /* 256-byte aligned like cudaMalloc, so the CPU sees the same alignment cases. */
  size_t rounded = (bytes + 255) / 256 * 256;
  buf.host = aligned_alloc(256, rounded);
  buf.snapshot = malloc(bytes);
  if (!buf.host || !buf.snapshot)
    fatal("out of host memory");
  memset(buf.host, 0, rounded);
  memset(buf.snapshot, 0, bytes);
  buf.data = buf.host;
#ifdef IGNIS_HAVE_CUDA
  if (backend == H_CUDA) {
    if (cudaMalloc(&buf.data, bytes) != cudaSuccess)
      fatal("cudaMalloc failed");
    cudaMemset(buf.data, 0, bytes);
  }
#endif
  return buf;
}

void h_buf_free(h_buf *buf) {
#ifdef IGNIS_HAVE_CUDA
  if (buf->backend == H_CUDA && buf->data)
    cudaFree(buf->data);
#endif
  free(buf->host);
  free(buf->snapshot);
  memset(buf, 0, sizeof *buf);
}

void h_buf_upload(h_buf *buf) {
  size_t bytes = (size_t)buf->count * buf->elem_size;
  memcpy(buf->snapshot, buf->host, bytes);
#ifdef IGNIS_HAVE_CUDA
  if (buf->backend == H_CUDA && bytes > 0 &&
      cudaMemcpy(buf->data, buf->host, bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    fatal("cudaMemcpy host to device failed");
#endif
}

void h_buf_download(h_buf *buf) {
#ifdef IGNIS_HAVE_CUDA
  if (buf->backend == H_CUDA) {
    cudaError_t err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      printf("CUDA error after the op: %s\n", cudaGetErrorString(err));
      fatal("cudaDeviceSynchronize failed");
    }
    size_t bytes = (size_t)buf->count * buf->elem_size;
    if (bytes > 0 && cudaMemcpy(buf->host, buf->data, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      fatal("cudaMemcpy device to host failed");
  }
#else
  (void)buf;
#endif
}

/* Quiet NaNs with a recognizable payload. */
static void poison_pattern(ignis_dtype dtype, unsigned char *out, size_t size) {
  switch (dtype) {
  case IGNIS_F32: {
    uint32_t bits = 0x7FC0BAD5u;
    memcpy(out, &bits, 4);
    break;
  }
  case IGNIS_F16: {
    uint16_t bits = 0x7E5Au;
    memcpy(out, &bits, 2);
    break;
  }
  case IGNIS_BF16: {
    uint16_t bits = 0x7FE5u;
    memcpy(out, &bits, 2);
    break;
  }
  default:
    memset(out, 0xA5, size);
    break;
  }
}

void h_buf_poison(h_buf *buf) {
  unsigned char pattern[8];
  poison_pattern(buf->dtype, pattern, buf->elem_size);
  for (int64_t i = 0; i < buf->count; ++i)
    memcpy((char *)buf->host + (size_t)i * buf->elem_size, pattern, buf->elem_size);
}

int h_is_poison(const h_buf *buf, int64_t index) {
  unsigned char pattern[8];
  poison_pattern(buf->dtype, pattern, buf->elem_size);
  return memcmp((const char *)buf->host + (size_t)index * buf->elem_size, pattern, buf->elem_size) == 0;
}

double h_get(const h_buf *buf, int64_t i) {
  const void *p = (const char *)buf->host + (size_t)i * buf->elem_size;
  switch (buf->dtype) {
  case IGNIS_F32: {
    float v;
    memcpy(&v, p, 4);
    return v;
  }
  case IGNIS_F16: {
    uint16_t v;
    memcpy(&v, p, 2);
    return ignis_f16_to_f32(v);
  }
  case IGNIS_BF16: {
    uint16_t v;
    memcpy(&v, p, 2);
    return ignis_bf16_to_f32(v);
  }
  case IGNIS_FP8_E4M3:
    return ignis_fp8_e4m3_to_f32(*(const uint8_t *)p);
  case IGNIS_FP8_E5M2:
    return ignis_fp8_e5m2_to_f32(*(const uint8_t *)p);
  case IGNIS_I32: {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  case IGNIS_I64: {
    int64_t v;
    memcpy(&v, p, 8);
    return (double)v;
  }
  case IGNIS_U8:
    return *(const uint8_t *)p;
  default:
    return NAN;
  }
}

double h_get_snapshot(const h_buf *buf, int64_t index) {
  h_buf view = *buf;
  view.host = buf->snapshot;
  return h_get(&view, index);
}

void h_set(h_buf *buf, int64_t i, double value) {
  void *p = (char *)buf->host + (size_t)i * buf->elem_size;
  switch (buf->dtype) {
  case IGNIS_F32: {
    float v = (float)value;
    memcpy(p, &v, 4);
    break;
  }
  case IGNIS_F16: {
    uint16_t v = ignis_f32_to_f16((float)value);
    memcpy(p, &v, 2);
    break;
  }
  case IGNIS_BF16: {
    uint16_t v = ignis_f32_to_bf16((float)value);
    memcpy(p, &v, 2);
    break;
  }
  case IGNIS_FP8_E4M3:
    *(uint8_t *)p = ignis_f32_to_fp8_e4m3((float)value);
    break;
  case IGNIS_FP8_E5M2:
    *(uint8_t *)p = ignis_f32_to_fp8_e5m2((float)value);
    break;
  case IGNIS_I32: {
    int32_t v = (int32_t)value;
    memcpy(p, &v, 4);
    break;
  }
  case IGNIS_I64: {
    int64_t v = (int64_t)value;
    memcpy(p, &v, 8);
    break;
  }
  case IGNIS_U8:
    *(uint8_t *)p = (uint8_t)value;
    break;
  default:
    break;
  }
}

int h_elem_unchanged(const h_buf *buf, int64_t index) {
  size_t at = (size_t)index * buf->elem_size;
  return memcmp((const char *)buf->host + at, buf->snapshot + at, buf->elem_size) == 0;
}

int64_t h_buf_changed(const h_buf *buf, const unsigned char *mask) {
  int64_t changed = 0;
  for (int64_t i = 0; i < buf->count; ++i)
    if ((!mask || !mask[i]) && !h_elem_unchanged(buf, i))
      ++changed;
  return changed;
}

int h_buf_untouched(h_buf *buf) {
  h_buf_download(buf);
  return h_buf_changed(buf, NULL) == 0;
}

/* ---- views -------------------------------------------------------------------------------- */
int64_t h_view_extent(int64_t offset, int ndim, const int64_t *shape, const int64_t *strides) {
  int64_t last = offset;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 0)
      return offset;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

ignis_tensor h_view(const h_buf *buf, int64_t offset, int ndim, const int64_t *shape,
                    const int64_t *strides) {
  ignis_tensor t;
  memset(&t, 0, sizeof t);
  t.data = (char *)buf->data + (size_t)offset * buf->elem_size;
  t.dtype = buf->dtype;
  t.ndim = ndim;
  t.device = h_backend_device(buf->backend);
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[d];
    t.strides[d] = strides ? strides[d] : stride;
    stride *= shape[d] > 0 ? shape[d] : 1;
  }
  return t;
}

int64_t h_index(const h_buf *buf, const ignis_tensor *t, const int64_t *idx) {
  int64_t at = ((const char *)t->data - (const char *)buf->data) / (int64_t)buf->elem_size;
  for (int d = 0; d < t->ndim; ++d)
    at += idx[d] * t->strides[d];
  return at;
}

void h_view_mark(const h_buf *buf, const ignis_tensor *t, unsigned char *mask) {
  if (ignis_tensor_numel(t) == 0)
    return;
  int64_t idx[IGNIS_MAX_DIMS] = {0};
  for (;;) {
    mask[h_index(buf, t, idx)] = 1;
    int d = t->ndim - 1;
    while (d >= 0 && ++idx[d] == t->shape[d])
      idx[d--] = 0;
    if (d < 0)
      return;
  }
}

/* ---- comparison ---------------------------------------------------------------------------- */
void h_cmp_init(h_cmp *cmp) {
  memset(cmp, 0, sizeof *cmp);
  cmp->worst_index = -1;
  cmp->first_bad_index = -1;
}

void h_cmp_add(h_cmp *cmp, int64_t index, double got, double ref, double tolerance) {
  ++cmp->count;
  double ratio;
  int ok;
  if (isnan(ref)) {
    ok = isnan(got);
    ratio = ok ? 0.0 : INFINITY;
  } else if (isnan(got)) {
    ok = 0;
    ratio = INFINITY;
    ++cmp->unwritten;
  } else if (isinf(ref) || isinf(got)) {
    ok = got == ref;
    ratio = ok ? 0.0 : INFINITY;
  } else {
    double err = fabs(got - ref);
    ok = err <= tolerance;
    ratio = tolerance > 0 ? err / tolerance : (err > 0 ? INFINITY : 0.0);
  }
  if (ratio > cmp->worst_ratio || cmp->worst_index < 0) {
    cmp->worst_ratio = ratio;
    cmp->worst_index = index;
    cmp->worst_got = got;
    cmp->worst_ref = ref;
  }
  if (!ok) {
    if (cmp->bad == 0) {
      cmp->first_bad_index = index;
      cmp->first_bad_got = got;
      cmp->first_bad_ref = ref;
    }
    ++cmp->bad;
  }
}

void h_cmp_add_tol(h_cmp *cmp, int64_t index, double got, double ref, h_tol tol) {
  h_cmp_add(cmp, index, got, ref, tol.atol + tol.rtol * fabs(ref));
}

int h_cmp_check(const h_cmp *cmp, const char *file, int line, const char *what) {
  if (cmp->bad == 0) {
    if (verbose())
      printf("ok %s:%d: %s: %lld elements, worst error/tolerance %.3g (%s)\n", file, line, what,
             (long long)cmp->count, cmp->worst_ratio, case_description);
    return h_check(1, file, line, what, "%s", "");
  }
  return h_check(0, file, line, what,
                 "%" PRId64 " of %" PRId64 " elements out of tolerance (%" PRId64
                 " NaN/unwritten); first bad at buffer index %" PRId64 ": got %.9g, expected %.9g; "
                 "worst error/tolerance %.3g at index %" PRId64 " (got %.9g, expected %.9g)",
                 cmp->bad, cmp->count, cmp->unwritten, cmp->first_bad_index, cmp->first_bad_got,
                 cmp->first_bad_ref, cmp->worst_ratio, cmp->worst_index, cmp->worst_got, cmp->worst_ref);
}
