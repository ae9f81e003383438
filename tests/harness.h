/* Test harness shared by every C test of ignis.
 *
 * Checks: CHECK(cond) / CHECKF(cond, fmt, ...) count passes and failures and print file:line with
 * the current case (h_case) on failure; CHECK_STATUS and CHECK_ERROR check a returned status and,
 * for errors, that ignis_last_error() names the parameter. A test ends with `return h_finish();`,
 * which prints the closing line "N passed, M failed" and returns nonzero on failure.
 *
 * Backends: every op test loops over h_backend_count() backends: the CPU backend always, and the
 * CUDA backend when the tests are built with IGNIS_HAVE_CUDA and ignis_cuda_device_count() > 0.
 * Data lives in h_buf: a host mirror the test reads and writes (as doubles, through h_get/h_set,
 * rounding to the buffer's dtype), and the memory the op sees (the mirror itself on the CPU, a
 * cudaMalloc'ed copy on CUDA). h_buf_upload copies the mirror to the op's memory and keeps a
 * snapshot; h_buf_download synchronizes and copies back, so h_buf_changed / h_buf_untouched can
 * compare against the snapshot. Outputs are filled with a NaN bit pattern (h_buf_poison) before a
 * call, so an element the op forgot to write shows up as NaN, and an element outside the view
 * that the op wrongly wrote shows up as a changed byte.
 *
 * Views: h_view makes an ignis_tensor over part of a buffer (element offset, shape, strides);
 * h_view_mark marks the buffer elements a view covers, to tell "inside" from "outside".
 *
 * Comparison: h_cmp accumulates |got - ref| against a per-element tolerance (h_tol: atol + rtol *
 * |ref|, rtol from the dtype: bf16 1e-2, f16 1e-3, f32 1e-5) and reports once per case with the
 * worst element; NaN where a value was expected counts as unwritten. References are computed in
 * fp64 from the already-rounded inputs (read back with h_get). With IGNIS_TEST_VERBOSE=1 in the
 * environment every passing comparison prints its worst error/tolerance ratio. */
#ifndef IGNIS_TESTS_HARNESS_H
#define IGNIS_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ignis/ignis.h"

/* ---- checks and counters ----------------------------------------------------------------- */
#if defined(__GNUC__)
#define H_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define H_PRINTF_LIKE(fmt, args)
#endif

/* Print the test name, build info and the backends that will run. */
void h_init(const char *test_name);
/* Print "N passed, M failed"; returns 0 when nothing failed, 1 otherwise. */
int h_finish(void);
/* Describe the case being run; printed with every failure until the next h_case. With
 * IGNIS_TEST_TRACE=1 (tools/gpu-check's ctest step) every case is also printed as it starts, with
 * the seconds since the first, so a test cut by a timeout shows where its time went. */
void h_case(const char *format, ...) H_PRINTF_LIKE(1, 2);
/* Count one check; on failure print file:line, the expression, the detail and the case. */
int h_check(int ok, const char *file, int line, const char *expr, const char *format, ...)
    H_PRINTF_LIKE(5, 6);

#define CHECK(cond) h_check(!!(cond), __FILE__, __LINE__, #cond, "%s", "")
#define CHECKF(cond, ...) h_check(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)

int h_check_status(ignis_status got, ignis_status expected, const char *file, int line, const char *expr,
                   const char *needle);
/* expr must return `expected`; on success ignis_last_error() must be "" (cleared), on an error it
 * must be non-empty. */
#define CHECK_STATUS(expr, expected) h_check_status((expr), (expected), __FILE__, __LINE__, #expr, NULL)
/* expr must return `expected` and ignis_last_error() must contain `needle` (e.g. "weight.shape[0]"). */
#define CHECK_ERROR(expr, expected, needle)                                                                  \
  h_check_status((expr), (expected), __FILE__, __LINE__, #expr, (needle))

/* ---- deterministic random numbers (splitmix64) ------------------------------------------ */
typedef struct h_rng {
  uint64_t state;
} h_rng;

h_rng h_rng_make(uint64_t seed);
uint64_t h_rng_u64(h_rng *rng);
/* Uniform in [lo, hi). */
double h_rng_uniform(h_rng *rng, double lo, double hi);
/* Uniform integer in [lo, hi] (inclusive). */
int64_t h_rng_int(h_rng *rng, int64_t lo, int64_t hi);
double h_rng_normal(h_rng *rng);

/* ---- dtypes in fp64 ------------------------------------------------------------------------ */
/* The value x takes when stored in a float dtype (f32, f16 or bf16), as a double. */
double h_round_to(ignis_dtype dtype, double x);

typedef struct h_tol {
  double rtol;
  double atol;
} h_tol;

/* Tolerance for an output of this dtype compared with an fp64 reference on values of order
 * `scale`: rtol from the dtype (bf16 1e-2, f16 1e-3, f32 1e-5), atol = rtol * scale * 0.1 (at
 * least the dtype's smallest subnormal). */
h_tol h_tol_for(ignis_dtype dtype, double scale);
/* Smallest positive subnormal of a float dtype: below it values round with this absolute spacing
 * (2^-24 f16, 2^-133 bf16, 2^-149 f32). */
double h_dtype_min_subnormal(ignis_dtype dtype);

/* ---- backends ----------------------------------------------------------------------------- */
typedef enum h_backend { H_CPU = 0, H_CUDA = 1 } h_backend;

int h_backend_count(void);
/* IGNIS_TEST_QUICK=1 (the sanitizer runs of tools/gpu-check): tests may skip their CPU-backend
 * cases and their largest cases, keeping every kind of GPU case. */
int h_quick(void);
/* IGNIS_TEST_ONLY=text (e.g. to give the sanitizer a few cases): tests that support it run only
 * the cases whose name contains text; 1 when unset. */
int h_selected(const char *case_name);
h_backend h_backend_at(int index);
const char *h_backend_name(h_backend backend);
ignis_device h_backend_device(h_backend backend);

/* ---- buffers ------------------------------------------------------------------------------ */
typedef struct h_buf {
  h_backend backend;
  ignis_dtype dtype;
  int64_t count; /* elements */
  size_t elem_size;
  void *host;              /* host mirror */
  void *data;              /* what the op sees: host itself (CPU) or device memory (CUDA) */
  unsigned char *snapshot; /* host mirror as of the last upload */
} h_buf;

/* Allocate count elements (zero-filled) on the given backend; aborts the test on failure. */
h_buf h_buf_alloc(h_backend backend, ignis_dtype dtype, int64_t count);
void h_buf_free(h_buf *buf);
/* Copy the host mirror to the op's memory and snapshot it. */
void h_buf_upload(h_buf *buf);
/* Wait for the device, then copy the op's memory back into the host mirror. */
void h_buf_download(h_buf *buf);
/* Fill the whole host mirror with the dtype's NaN poison pattern. */
void h_buf_poison(h_buf *buf);
int h_is_poison(const h_buf *buf, int64_t index);
/* Element i of the host mirror, as a double (integers converted too). */
double h_get(const h_buf *buf, int64_t index);
/* Element i as of the last upload (the snapshot), as a double: the input of an in-place op. */
double h_get_snapshot(const h_buf *buf, int64_t index);
/* Store v into element i of the host mirror, rounded to the dtype (integers truncated). */
void h_set(h_buf *buf, int64_t index, double value);
/* 1 if element i's bytes equal the snapshot. */
int h_elem_unchanged(const h_buf *buf, int64_t index);
/* Number of elements whose bytes differ from the snapshot (mask == NULL: all elements; else only
 * elements whose mask entry is 0, i.e. outside the marked views). */
int64_t h_buf_changed(const h_buf *buf, const unsigned char *mask);
/* Download and check that nothing changed since the upload. */
int h_buf_untouched(h_buf *buf);

/* ---- views -------------------------------------------------------------------------------- */
/* Number of elements a view at `offset` with this shape and (non-negative) strides reaches into. */
int64_t h_view_extent(int64_t offset, int ndim, const int64_t *shape, const int64_t *strides);
/* A view into buf: data = buf->data + offset elements, device from the backend. strides == NULL
 * means row-major contiguous. */
ignis_tensor h_view(const h_buf *buf, int64_t offset, int ndim, const int64_t *shape, const int64_t *strides);
/* Buffer index of element idx of view t (t made by h_view over buf). */
int64_t h_index(const h_buf *buf, const ignis_tensor *t, const int64_t *idx);
/* Set mask[i] = 1 for every buffer element the view covers (mask has buf->count entries). */
void h_view_mark(const h_buf *buf, const ignis_tensor *t, unsigned char *mask);

/* ---- comparison ---------------------------------------------------------------------------- */
typedef struct h_cmp {
  int64_t count;
  int64_t bad;
  int64_t unwritten;  /* NaN (poison left) where a finite value was expected */
  double worst_ratio; /* max |got - ref| / tolerance */
  int64_t worst_index;
  double worst_got, worst_ref;
  int64_t first_bad_index;
  double first_bad_got, first_bad_ref;
} h_cmp;

void h_cmp_init(h_cmp *cmp);
/* Compare one element: passes when |got - ref| <= tolerance (NaN matches NaN only). */
void h_cmp_add(h_cmp *cmp, int64_t index, double got, double ref, double tolerance);
/* Same with tolerance = tol.atol + tol.rtol * |ref|. */
void h_cmp_add_tol(h_cmp *cmp, int64_t index, double got, double ref, h_tol tol);
int h_cmp_check(const h_cmp *cmp, const char *file, int line, const char *what);
#define CHECK_CMP(cmp, what) h_cmp_check((cmp), __FILE__, __LINE__, (what))

#endif
