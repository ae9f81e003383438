/* Tests of the core API (include/ignis/core.h) and two internal pieces (workspace carving,
 * src/core/workspace.h; the CPU backend's inline f16/bf16 conversions, src/cpu/cpu_common.h).
 *
 * - status names and messages for every status, and the thread-local last-error message (set on
 *   failure, cleared by the next successful call, not shared between threads);
 * - version macros against ignis_version()/ignis_version_string(), the build string;
 * - dtype names and sizes;
 * - host conversions: every f16/bf16/fp8 code decoded against an independent formula and round
 *   tripped; narrowing checked against an independent round-to-nearest-even (a search over the
 *   sorted table of representable values, ties to the even code) on every midpoint between
 *   neighbouring codes (+-1 f32 ulp) and on random floats; the documented special rules (e4m3
 *   saturates to +-448 and has no infinity, e5m2 and f16 overflow to infinity, NaN stays NaN);
 * - ignis_tensor_init / numel / is_contiguous;
 * - workspace carving: the counting-mode size suffices for a real carve over any misaligned base,
 *   pieces are aligned and disjoint, a short buffer reports INSUFFICIENT_WORKSPACE naming the piece;
 * - contexts and device info for the CPU (and CUDA when present);
 * - dispatch: tensors claiming CUDA without a GPU -> BACKEND_UNAVAILABLE; a mixture of devices ->
 *   INVALID_ARGUMENT naming the parameter; with a GPU, host pointers claiming CUDA are caught. */
#define _POSIX_C_SOURCE 200809L
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/config.h"
#include "core/env.h"
#include "core/workspace.h"
#include "cpu/cpu_common.h"
#include "harness.h"

static uint32_t float_bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

static float bits_float(uint32_t b) {
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* ---- status, errors, versions, dtypes --------------------------------------------------- */
static void test_status(void) {
  h_case("status names and messages");
  static const struct {
    ignis_status status;
    int value;
    const char *name, *message;
  } expected[] = {
      {IGNIS_OK, 0, "IGNIS_OK", "success"},
      {IGNIS_ERROR_INVALID_ARGUMENT, 1, "IGNIS_ERROR_INVALID_ARGUMENT", "invalid argument"},
      {IGNIS_ERROR_UNSUPPORTED, 2, "IGNIS_ERROR_UNSUPPORTED", "valid request with no compiled variant"},
      {IGNIS_ERROR_INSUFFICIENT_WORKSPACE, 3, "IGNIS_ERROR_INSUFFICIENT_WORKSPACE", "workspace too small"},
      {IGNIS_ERROR_CUDA, 4, "IGNIS_ERROR_CUDA", "CUDA error"},
      {IGNIS_ERROR_INTERNAL, 5, "IGNIS_ERROR_INTERNAL", "internal error"},
      {IGNIS_ERROR_BACKEND_UNAVAILABLE, 6, "IGNIS_ERROR_BACKEND_UNAVAILABLE",
       "backend not built or no device present"},
      {IGNIS_ERROR_TIMEOUT, 7, "IGNIS_ERROR_TIMEOUT", "a peer did not arrive in time"},
  };
  int map_count = 0;
#define COUNT_STATUS_(name, value, msg) ++map_count;
  IGNIS_STATUS_MAP(COUNT_STATUS_)
#undef COUNT_STATUS_
  CHECKF(map_count == (int)(sizeof expected / sizeof expected[0]), "IGNIS_STATUS_MAP has %d entries",
         map_count);
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; ++i) {
    CHECK((int)expected[i].status == expected[i].value);
    CHECKF(strcmp(ignis_status_string(expected[i].status), expected[i].name) == 0, "%s vs %s",
           ignis_status_string(expected[i].status), expected[i].name);
    CHECKF(strcmp(ignis_status_message(expected[i].status), expected[i].message) == 0, "%s vs %s",
           ignis_status_message(expected[i].status), expected[i].message);
  }
  CHECK(strcmp(ignis_status_string((ignis_status)99), "IGNIS_UNKNOWN_STATUS") == 0);
  CHECK(strcmp(ignis_status_string((ignis_status)-1), "IGNIS_UNKNOWN_STATUS") == 0);
  CHECK(ignis_status_message((ignis_status)99) != NULL && ignis_status_message((ignis_status)99)[0] != '\0');
}

static void *thread_makes_error(void *arg) {
  int64_t shape[1] = {-3};
  ignis_tensor t;
  ignis_status s = ignis_tensor_init(&t, NULL, IGNIS_F32, 1, shape, (ignis_device){IGNIS_DEVICE_CPU, 0});
  int *ok = arg;
  *ok = s == IGNIS_ERROR_INVALID_ARGUMENT && strstr(ignis_last_error(), "shape[0]") != NULL;
  return NULL;
}

static void test_last_error(void) {
  h_case("last error");
  ignis_device cpu = {IGNIS_DEVICE_CPU, 0};
  ignis_tensor t;
  int64_t shape[2] = {2, 3};
  CHECK_ERROR(ignis_tensor_init(&t, NULL, IGNIS_F32, 9, shape, cpu), IGNIS_ERROR_INVALID_ARGUMENT, "ndim");
  CHECK(strstr(ignis_last_error(), "ignis_tensor_init") != NULL);
  CHECK_STATUS(ignis_tensor_init(&t, NULL, IGNIS_F32, 2, shape, cpu), IGNIS_OK);
  CHECK(ignis_last_error()[0] == '\0');

  /* a successful op clears the message too */
  float x[6] = {1, 2, 3, 4, 5, 6}, w[3] = {1, 1, 1}, y[6];
  int64_t wshape[1] = {3};
  ignis_tensor in, weight, out;
  ignis_tensor_init(&in, x, IGNIS_F32, 2, shape, cpu);
  ignis_tensor_init(&weight, w, IGNIS_F32, 1, wshape, cpu);
  ignis_tensor_init(&out, y, IGNIS_F32, 2, shape, cpu);
  CHECK_ERROR(ignis_rmsnorm(&in, &weight, -1.0, &out, NULL), IGNIS_ERROR_INVALID_ARGUMENT,
              "ignis_rmsnorm: eps");
  CHECK_STATUS(ignis_rmsnorm(&in, &weight, 1e-6, &out, NULL), IGNIS_OK);
  CHECK_ERROR(ignis_silu_and_mul(&in, &in, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "ignis_silu_and_mul");
  ignis_device_info info = IGNIS_DEVICE_INFO_INIT;
  CHECK_STATUS(ignis_get_device_info(cpu, &info), IGNIS_OK);

  /* the message is per thread */
  CHECK_ERROR(ignis_rmsnorm(&in, NULL, 1e-6, &out, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "weight is NULL");
  pthread_t thread;
  int thread_ok = 0;
  CHECK(pthread_create(&thread, NULL, thread_makes_error, &thread_ok) == 0);
  pthread_join(thread, NULL);
  CHECK(thread_ok);
  CHECKF(strstr(ignis_last_error(), "weight is NULL") != NULL, "main thread's message became \"%s\"",
         ignis_last_error());
}

static void test_versions(void) {
  h_case("versions");
  CHECK(ignis_version() == IGNIS_VERSION_NUMBER);
  CHECK(IGNIS_VERSION_NUMBER ==
        IGNIS_VERSION_MAJOR * 10000 + IGNIS_VERSION_MINOR * 100 + IGNIS_VERSION_PATCH);
  CHECK(strcmp(ignis_version_string(), IGNIS_VERSION_STRING) == 0);
  char built[32];
  snprintf(built, sizeof built, "%d.%d.%d", IGNIS_VERSION_MAJOR, IGNIS_VERSION_MINOR, IGNIS_VERSION_PATCH);
  CHECK(strcmp(built, IGNIS_VERSION_STRING) == 0);
  const char *info = ignis_build_info();
  CHECK(info != NULL && strstr(info, IGNIS_VERSION_STRING) != NULL && strstr(info, "cpu") != NULL);
#ifdef IGNIS_HAVE_CUDA
  CHECK(strstr(info, "cuda") != NULL);
#endif
}

static void test_dtypes(void) {
  h_case("dtype names and sizes");
  static const struct {
    ignis_dtype dtype;
    const char *name;
    size_t size;
  } expected[] = {{IGNIS_F32, "f32", 4},           {IGNIS_F16, "f16", 2},
                  {IGNIS_BF16, "bf16", 2},         {IGNIS_FP8_E4M3, "fp8_e4m3", 1},
                  {IGNIS_FP8_E5M2, "fp8_e5m2", 1}, {IGNIS_I32, "i32", 4},
                  {IGNIS_I64, "i64", 8},           {IGNIS_U8, "u8", 1}};
  CHECK(IGNIS_DTYPE_COUNT == (int)(sizeof expected / sizeof expected[0]));
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; ++i) {
    CHECKF(strcmp(ignis_dtype_name(expected[i].dtype), expected[i].name) == 0, "%s", expected[i].name);
    CHECKF(ignis_dtype_size(expected[i].dtype) == expected[i].size, "%s", expected[i].name);
  }
  CHECK(strcmp(ignis_dtype_name(IGNIS_DTYPE_COUNT), "invalid") == 0);
  CHECK(strcmp(ignis_dtype_name((ignis_dtype)-1), "invalid") == 0);
  CHECK(ignis_dtype_size(IGNIS_DTYPE_COUNT) == 0 && ignis_dtype_size((ignis_dtype)-1) == 0);
}

/* ---- conversions ---------------------------------------------------------------------------- */
/* A narrow float format described independently of the library: field widths, bias, whether the
 * top exponent holds inf/NaN (IEEE-like) or only S.1111.111 is NaN (e4m3), and what overflow does. */
typedef struct narrow_format {
  const char *name;
  int bits, exp_bits, man_bits, bias;
  int ieee_special; /* top exponent = inf (mantissa 0) or NaN */
  int saturates;    /* overflow and infinity go to the largest finite value */
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
} narrow_format;

static uint32_t enc_f16(float x) {
  return ignis_f32_to_f16(x);
}
static float dec_f16(uint32_t c) {
  return ignis_f16_to_f32((uint16_t)c);
}
static uint32_t enc_bf16(float x) {
  return ignis_f32_to_bf16(x);
}
static float dec_bf16(uint32_t c) {
  return ignis_bf16_to_f32((uint16_t)c);
}
static uint32_t enc_e4m3(float x) {
  return ignis_f32_to_fp8_e4m3(x);
}
static float dec_e4m3(uint32_t c) {
  return ignis_fp8_e4m3_to_f32((uint8_t)c);
}
static uint32_t enc_e5m2(float x) {
  return ignis_f32_to_fp8_e5m2(x);
}
static float dec_e5m2(uint32_t c) {
  return ignis_fp8_e5m2_to_f32((uint8_t)c);
}

static const narrow_format formats[] = {
    {"f16", 16, 5, 10, 15, 1, 0, enc_f16, dec_f16},
    {"bf16", 16, 8, 7, 127, 1, 0, enc_bf16, dec_bf16},
    {"fp8_e4m3", 8, 4, 3, 7, 0, 1, enc_e4m3, dec_e4m3},
    {"fp8_e5m2", 8, 5, 2, 15, 1, 0, enc_e5m2, dec_e5m2},
};

static int code_is_nan(const narrow_format *f, uint32_t code) {
  uint32_t magnitude = code & ((1u << (f->bits - 1)) - 1);
  uint32_t exp_field = magnitude >> f->man_bits, max_exp = (1u << f->exp_bits) - 1;
  if (f->ieee_special)
    return exp_field == max_exp && (magnitude & ((1u << f->man_bits) - 1)) != 0;
  return magnitude == (1u << (f->bits - 1)) - 1;
}

/* The value of a code, from the field definitions: (-1)^s 2^(e-bias) 1.m, subnormals 2^(1-bias) 0.m. */
static double ref_decode(const narrow_format *f, uint32_t code) {
  uint32_t sign = code >> (f->bits - 1);
  uint32_t exp_field = (code >> f->man_bits) & ((1u << f->exp_bits) - 1);
  uint32_t mantissa = code & ((1u << f->man_bits) - 1);
  if (code_is_nan(f, code))
    return NAN;
  double v;
  if (f->ieee_special && exp_field == (1u << f->exp_bits) - 1)
    v = INFINITY;
  else if (exp_field == 0)
    v = ldexp((double)mantissa, 1 - f->bias - f->man_bits);
  else
    v = ldexp((double)((1u << f->man_bits) + mantissa), (int)exp_field - f->bias - f->man_bits);
  return sign ? -v : v;
}

/* Largest finite positive code; positive codes 0..max are increasing in value. */
static uint32_t max_finite_code(const narrow_format *f) {
  if (f->ieee_special)
    return (((1u << f->exp_bits) - 1) << f->man_bits) - 1;
  return (1u << (f->bits - 1)) - 2;
}

/* Round-to-nearest-even by search: the code whose value is nearest; on a tie the even code. Beyond
 * the largest finite value the next step up would be one more ulp; past half of it the result
 * overflows (infinity, or the largest finite value for a saturating format). */
static uint32_t ref_encode(const narrow_format *f, float x) {
  uint32_t sign = (float_bits(x) >> 31) << (f->bits - 1);
  uint32_t max_code = max_finite_code(f);
  uint32_t inf_code = f->saturates ? max_code : (max_code + 1);
  double a = fabs((double)x);
  if (isinf(x))
    return sign | inf_code;
  double vmax = ref_decode(f, max_code);
  if (a > vmax) {
    double next = vmax + (vmax - ref_decode(f, max_code - 1));
    double mid = 0.5 * (vmax + next);
    if (a < mid || (a == mid && (max_code & 1) == 0))
      return sign | max_code;
    return sign | inf_code;
  }
  uint32_t lo = 0, hi = max_code; /* largest code with value <= a */
  while (lo < hi) {
    uint32_t mid = (lo + hi + 1) / 2;
    if (ref_decode(f, mid) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  if (ref_decode(f, lo) == a || lo == max_code)
    return sign | lo;
  double below = a - ref_decode(f, lo), above = ref_decode(f, lo + 1) - a;
  uint32_t code = below < above ? lo : above < below ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return sign | code;
}

typedef struct mismatch_log {
  int64_t count, bad;
  float first_x;
  uint32_t first_got, first_want;
} mismatch_log;

static void encode_check(const narrow_format *f, float x, mismatch_log *log) {
  uint32_t got = f->encode(x);
  int ok;
  uint32_t want = 0;
  if (isnan(x)) {
    ok = code_is_nan(f, got);
  } else {
    want = ref_encode(f, x);
    ok = got == want;
  }
  ++log->count;
  if (!ok && log->bad++ == 0) {
    log->first_x = x;
    log->first_got = got;
    log->first_want = want;
  }
}

static void test_format(const narrow_format *f, h_rng *rng) {
  h_case("conversions %s", f->name);
  uint32_t codes = 1u << f->bits;
  /* every code: decode against the formula; encode(decode(c)) == c (NaN stays NaN) */
  int64_t decode_bad = 0, trip_bad = 0;
  uint32_t first_decode_bad = 0, first_trip_bad = 0;
  for (uint32_t c = 0; c < codes; ++c) {
    double want = ref_decode(f, c);
    float got = f->decode(c);
    int ok = isnan(want) ? isnan(got) : ((double)got == want && !signbit(got) == !signbit(want));
    if (!ok && decode_bad++ == 0)
      first_decode_bad = c;
    uint32_t back = f->encode(got);
    int trip_ok = isnan(want) ? code_is_nan(f, back) : back == c;
    if (!trip_ok && trip_bad++ == 0)
      first_trip_bad = c;
  }
  CHECKF(decode_bad == 0, "%s: %lld codes decode wrongly, first 0x%x", f->name, (long long)decode_bad,
         first_decode_bad);
  CHECKF(trip_bad == 0, "%s: %lld codes do not round trip, first 0x%x", f->name, (long long)trip_bad,
         first_trip_bad);

  /* midpoints between neighbouring codes (exact ties) and one f32 ulp either side, both signs */
  mismatch_log log = {0};
  uint32_t max_code = max_finite_code(f);
  int64_t inexact_midpoints = 0;
  for (uint32_t c = 0; c < max_code; ++c) {
    double exact_mid = 0.5 * (ref_decode(f, c) + ref_decode(f, c + 1));
    float mid = (float)exact_mid;
    inexact_midpoints += (double)mid != exact_mid;
    float probes[3] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY)};
    for (int p = 0; p < 3; ++p) {
      encode_check(f, probes[p], &log);
      encode_check(f, -probes[p], &log);
    }
  }
  CHECKF(inexact_midpoints == 0, "%lld midpoints are not f32 values", (long long)inexact_midpoints);
  /* around the overflow threshold */
  double vmax = ref_decode(f, max_code);
  double threshold = vmax + 0.5 * (vmax - ref_decode(f, max_code - 1));
  if (threshold < FLT_MAX) {
    float t = (float)threshold;
    float probes[5] = {t, nextafterf(t, 0.0f), nextafterf(t, INFINITY), (float)vmax, 2.0f * t};
    for (int p = 0; p < 5; ++p) {
      encode_check(f, probes[p], &log);
      encode_check(f, -probes[p], &log);
    }
  }
  /* random floats: every f32 bit pattern class, and values near the format's range */
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = (uint32_t)h_rng_u64(rng);
    encode_check(f, bits_float(bits), &log);
    int e = (int)h_rng_int(rng, -f->bias - f->man_bits - 3, f->bias + 3);
    float near_range = (float)ldexp(h_rng_uniform(rng, 1.0, 2.0), e);
    encode_check(f, (h_rng_u64(rng) & 1) ? near_range : -near_range, &log);
  }
  /* specials */
  float specials[] = {0.0f,     -0.0f,   INFINITY,     -INFINITY, FLT_MAX,
                      -FLT_MAX, FLT_MIN, FLT_TRUE_MIN, 1.0f,      -1.0f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i)
    encode_check(f, specials[i], &log);
  uint32_t nans[] = {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFFFFFFFFu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; ++i)
    encode_check(f, bits_float(nans[i]), &log);
  CHECKF(log.bad == 0,
         "%s: %lld of %lld encodings differ from round-to-nearest-even; first x=%.9g (0x%08x): got 0x%x, "
         "want 0x%x",
         f->name, (long long)log.bad, (long long)log.count, log.first_x, float_bits(log.first_x),
         log.first_got, log.first_want);
}

static void test_conversion_rules(void) {
  h_case("documented conversion rules");
  /* e4m3: no infinity, saturates to +-448; NaN maps to its NaN code */
  CHECK(ignis_f32_to_fp8_e4m3(448.0f) == 0x7E);
  CHECK(ignis_f32_to_fp8_e4m3(464.0f) == 0x7E); /* tie between 448 and 480: even code, still 448 */
  CHECK(ignis_f32_to_fp8_e4m3(470.0f) == 0x7E);
  CHECK(ignis_f32_to_fp8_e4m3(1e6f) == 0x7E);
  CHECK(ignis_f32_to_fp8_e4m3(-1e6f) == 0xFE);
  CHECK(ignis_f32_to_fp8_e4m3(INFINITY) == 0x7E);
  CHECK(ignis_f32_to_fp8_e4m3(-INFINITY) == 0xFE);
  CHECK((ignis_f32_to_fp8_e4m3(NAN) & 0x7F) == 0x7F);
  CHECK(isnan(ignis_fp8_e4m3_to_f32(0x7F)) && isnan(ignis_fp8_e4m3_to_f32(0xFF)));
  CHECK(ignis_fp8_e4m3_to_f32(0x7E) == 448.0f && ignis_fp8_e4m3_to_f32(0x01) == ldexpf(1.0f, -9));
  CHECK(ignis_fp8_e4m3_to_f32(0x78) == 256.0f); /* exponent field 15 is finite in e4m3 */
  /* e5m2: overflows to infinity */
  CHECK(ignis_f32_to_fp8_e5m2(57344.0f) == 0x7B);
  CHECK(ignis_f32_to_fp8_e5m2(61439.0f) == 0x7B);
  CHECK(ignis_f32_to_fp8_e5m2(61440.0f) == 0x7C); /* tie: the even neighbour is infinity */
  CHECK(ignis_f32_to_fp8_e5m2(1e6f) == 0x7C && ignis_f32_to_fp8_e5m2(-1e6f) == 0xFC);
  CHECK(ignis_f32_to_fp8_e5m2(INFINITY) == 0x7C && ignis_f32_to_fp8_e5m2(-INFINITY) == 0xFC);
  CHECK(isinf(ignis_fp8_e5m2_to_f32(0x7C)) && isnan(ignis_fp8_e5m2_to_f32(0x7D)));
  {
    uint8_t n = ignis_f32_to_fp8_e5m2(NAN);
    CHECK((n & 0x7C) == 0x7C && (n & 0x03) != 0);
  }
  /* f16 */
  CHECK(ignis_f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(ignis_f32_to_f16(65519.0f) == 0x7BFF);
  CHECK(ignis_f32_to_f16(65520.0f) == 0x7C00);
  CHECK(ignis_f32_to_f16(-INFINITY) == 0xFC00);
  CHECK(ignis_f32_to_f16(ldexpf(1.0f, -25)) == 0x0000);                   /* tie to even: zero */
  CHECK(ignis_f32_to_f16(nextafterf(ldexpf(1.0f, -25), 1.0f)) == 0x0001); /* just above: subnormal */
  CHECK(ignis_f32_to_f16(-0.0f) == 0x8000);
  {
    uint16_t n = ignis_f32_to_f16(NAN);
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
  }
  /* bf16: truncation of f32 with round-to-nearest-even */
  CHECK(ignis_f32_to_bf16(1.0f) == 0x3F80);
  CHECK(ignis_f32_to_bf16(bits_float(0x3F808000u)) == 0x3F80); /* tie, even stays */
  CHECK(ignis_f32_to_bf16(bits_float(0x3F818000u)) == 0x3F82); /* tie, odd rounds up */
  CHECK(ignis_f32_to_bf16(FLT_MAX) == 0x7F80);
  CHECK(isnan(ignis_bf16_to_f32(ignis_f32_to_bf16(bits_float(0x7F800001u))))); /* sNaN does not become inf */
}

/* The CPU backend loads and stores f16/bf16 with its own inline code: it must agree with the
 * public conversions. */
static void test_cpu_backend_conversions(h_rng *rng) {
  h_case("CPU backend inline conversions");
  int64_t bad = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    float a = ignis_cpu_half_to_float((uint16_t)c), b = ignis_f16_to_f32((uint16_t)c);
    if (!(isnan(b) ? isnan(a) : float_bits(a) == float_bits(b)))
      ++bad;
    a = ignis_cpu_bf16_to_float((uint16_t)c);
    b = ignis_bf16_to_f32((uint16_t)c);
    if (!(isnan(b) ? isnan(a) : float_bits(a) == float_bits(b)))
      ++bad;
  }
  CHECKF(bad == 0, "%lld decodes differ", (long long)bad);
  int64_t enc_bad = 0;
  float first = 0.0f;
  for (int i = 0; i < 300000; ++i) {
    float x = i % 2 ? bits_float((uint32_t)h_rng_u64(rng))
                    : (float)ldexp(h_rng_uniform(rng, -2.0, 2.0), (int)h_rng_int(rng, -30, 17));
    int ok_half = isnan(x) ? (ignis_cpu_float_to_half(x) & 0x7FFF) > 0x7C00
                           : ignis_cpu_float_to_half(x) == ignis_f32_to_f16(x);
    int ok_bf16 = isnan(x) ? (ignis_cpu_float_to_bf16(x) & 0x7FFF) > 0x7F80
                           : ignis_cpu_float_to_bf16(x) == ignis_f32_to_bf16(x);
    if ((!ok_half || !ok_bf16) && enc_bad++ == 0)
      first = x;
  }
  CHECKF(enc_bad == 0, "%lld encodes differ, first x=%.9g", (long long)enc_bad, first);
}

/* ---- tensors -------------------------------------------------------------------------------- */
static void test_tensors(void) {
  h_case("tensor descriptors");
  ignis_device cpu = {IGNIS_DEVICE_CPU, 0};
  ignis_tensor t;
  float data[120];
  int64_t shape[3] = {4, 5, 6};
  CHECK_STATUS(ignis_tensor_init(&t, data, IGNIS_F32, 3, shape, cpu), IGNIS_OK);
  CHECK(t.data == data && t.dtype == IGNIS_F32 && t.ndim == 3 && t.device.type == IGNIS_DEVICE_CPU);
  CHECK(t.shape[0] == 4 && t.shape[1] == 5 && t.shape[2] == 6);
  CHECK(t.strides[0] == 30 && t.strides[1] == 6 && t.strides[2] == 1);
  CHECK(ignis_tensor_numel(&t) == 120);
  CHECK(ignis_tensor_is_contiguous(&t) == 1);
  ignis_tensor p = t; /* permuted leading strides */
  p.strides[0] = 6;
  p.strides[1] = 24;
  CHECK(ignis_tensor_is_contiguous(&p) == 0);
  p = t; /* padded rows */
  p.strides[1] = 8;
  p.strides[0] = 40;
  CHECK(ignis_tensor_is_contiguous(&p) == 0);
  int64_t ones[3] = {1, 5, 1};
  CHECK_STATUS(ignis_tensor_init(&p, data, IGNIS_BF16, 3, ones, cpu), IGNIS_OK);
  p.strides[0] = 1234; /* size-1 dims do not matter */
  p.strides[2] = 77;
  CHECK(ignis_tensor_is_contiguous(&p) == 1);
  CHECK(ignis_tensor_numel(&p) == 5);
  CHECK_STATUS(ignis_tensor_init(&p, data, IGNIS_F32, 0, NULL, cpu), IGNIS_OK);
  CHECK(ignis_tensor_numel(&p) == 1 && ignis_tensor_is_contiguous(&p) == 1);
  int64_t with_zero[2] = {0, 7};
  CHECK_STATUS(ignis_tensor_init(&p, NULL, IGNIS_I64, 2, with_zero, cpu), IGNIS_OK);
  CHECK(ignis_tensor_numel(&p) == 0 && p.strides[0] == 7 && p.strides[1] == 1);
  int64_t eight[8] = {1, 2, 1, 2, 1, 2, 1, 2};
  CHECK_STATUS(ignis_tensor_init(&p, data, IGNIS_U8, IGNIS_MAX_DIMS, eight, cpu), IGNIS_OK);
  CHECK(ignis_tensor_numel(&p) == 16 && p.strides[0] == 16 && p.strides[7] == 1);
  CHECK(ignis_tensor_numel(NULL) == 0 && ignis_tensor_is_contiguous(NULL) == 0);

  int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, negative[2] = {3, -1};
  CHECK_ERROR(ignis_tensor_init(&p, data, IGNIS_F32, 9, nine, cpu), IGNIS_ERROR_INVALID_ARGUMENT, "ndim");
  CHECK_ERROR(ignis_tensor_init(&p, data, IGNIS_F32, -1, nine, cpu), IGNIS_ERROR_INVALID_ARGUMENT, "ndim");
  CHECK_ERROR(ignis_tensor_init(&p, data, IGNIS_F32, 2, negative, cpu), IGNIS_ERROR_INVALID_ARGUMENT,
              "shape[1]");
  CHECK_ERROR(ignis_tensor_init(&p, data, IGNIS_DTYPE_COUNT, 2, shape, cpu), IGNIS_ERROR_INVALID_ARGUMENT,
              "dtype");
  CHECK_ERROR(ignis_tensor_init(NULL, data, IGNIS_F32, 2, shape, cpu), IGNIS_ERROR_INVALID_ARGUMENT,
              "tensor");
  CHECK_ERROR(ignis_tensor_init(&p, data, IGNIS_F32, 2, NULL, cpu), IGNIS_ERROR_INVALID_ARGUMENT, "shape");
}

/* ---- workspace ------------------------------------------------------------------------------ */
typedef struct piece {
  const char *what;
  int64_t count;
  size_t elem_size;
} piece;

static const piece pieces[] = {{"partial_out", 1000, 4}, {"lse", 3, 4},   {"empty", 0, 8},
                               {"indices", 4097, 8},     {"flags", 1, 1}, {"tile", 33, 2}};
#define PIECE_COUNT ((int)(sizeof pieces / sizeof pieces[0]))

/* ignis_workspace_take is internal: it sets the message on failure but, unlike the public
 * functions, does not clear it on success (the op that calls it did on entry), so successes are
 * checked by status alone. */
static void test_workspace(void) {
  h_case("workspace carving");
  ignis_workspace counting = ignis_workspace_counting();
  void *ptr = (void *)1;
  for (int i = 0; i < PIECE_COUNT; ++i) {
    CHECK(ignis_workspace_take(&counting, "test_fn", pieces[i].what, pieces[i].count, pieces[i].elem_size,
                               &ptr) == IGNIS_OK);
    CHECK(ptr == NULL);
  }
  size_t required = ignis_workspace_required(&counting);
  size_t payload = 0;
  for (int i = 0; i < PIECE_COUNT; ++i)
    payload += (size_t)pieces[i].count * pieces[i].elem_size;
  CHECK(required >= payload);

  unsigned char *raw = malloc(required + 2 * IGNIS_WORKSPACE_ALIGNMENT);
  unsigned char *aligned = raw + (IGNIS_WORKSPACE_ALIGNMENT - (uintptr_t)raw % IGNIS_WORKSPACE_ALIGNMENT);
  int64_t failures = 0, misplaced = 0;
  for (size_t shift = 0; shift < IGNIS_WORKSPACE_ALIGNMENT; ++shift) {
    unsigned char *base = aligned + shift;
    ignis_workspace ws = ignis_workspace_over(base, required);
    unsigned char *prev_end = base;
    for (int i = 0; i < PIECE_COUNT; ++i) {
      void *out = NULL;
      if (ignis_workspace_take(&ws, "test_fn", pieces[i].what, pieces[i].count, pieces[i].elem_size, &out) !=
          IGNIS_OK) {
        ++failures;
        break;
      }
      unsigned char *p = out;
      size_t bytes = (size_t)pieces[i].count * pieces[i].elem_size;
      if ((uintptr_t)p % IGNIS_WORKSPACE_ALIGNMENT != 0 || p < prev_end || p + bytes > base + required)
        ++misplaced;
      prev_end = p + bytes;
    }
  }
  CHECKF(failures == 0, "the counted size was too small for %lld base misalignments", (long long)failures);
  CHECKF(misplaced == 0, "%lld pieces misaligned, overlapping or outside the buffer", (long long)misplaced);

  /* too small: the piece that does not fit is named */
  ignis_workspace small = ignis_workspace_over(aligned, 4100);
  void *out = NULL;
  CHECK(ignis_workspace_take(&small, "test_fn", "partial_out", 1000, 4, &out) == IGNIS_OK);
  CHECK(out == aligned);
  CHECK_ERROR(ignis_workspace_take(&small, "test_fn", "lse_buffer", 16, 4, &out),
              IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "lse_buffer");
  CHECK(strstr(ignis_last_error(), "test_fn") != NULL);
  CHECK(out == NULL);
  ignis_workspace over_null = ignis_workspace_over(aligned, 0);
  CHECK_ERROR(ignis_workspace_take(&over_null, "test_fn", "first", 1, 1, &out),
              IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "first");

  /* bad sizes */
  ignis_workspace ws = ignis_workspace_counting();
  CHECK_ERROR(ignis_workspace_take(&ws, "test_fn", "negative", -1, 4, &out), IGNIS_ERROR_INVALID_ARGUMENT,
              "negative");
  CHECK_ERROR(ignis_workspace_take(&ws, "test_fn", "huge", INT64_MAX / 2, 16, &out),
              IGNIS_ERROR_INVALID_ARGUMENT, "huge");
  free(raw);
}

/* ---- contexts and device info --------------------------------------------------------------- */
static void test_device_info(void) {
  h_case("device info");
  ignis_device cpu = {IGNIS_DEVICE_CPU, 0};
  ignis_device_info info = IGNIS_DEVICE_INFO_INIT;
  CHECK_STATUS(ignis_get_device_info(cpu, &info), IGNIS_OK);
  CHECK(info.size == sizeof(ignis_device_info));
  CHECK(info.device.type == IGNIS_DEVICE_CPU && info.device.id == 0);
  CHECK(info.name[0] != '\0' && memchr(info.name, '\0', sizeof info.name) != NULL);
  CHECK(info.compute_capability == 0);
  CHECK(info.multiprocessor_count >= 1);
  CHECK(info.global_memory_bytes > 0);
  ignis_device_info larger = IGNIS_DEVICE_INFO_INIT; /* a caller built against a newer ignis */
  larger.size = sizeof larger + 8;
  CHECK_ERROR(ignis_get_device_info(cpu, &larger), IGNIS_ERROR_INVALID_ARGUMENT, "info->size");
  ignis_device_info small = IGNIS_DEVICE_INFO_INIT;
  small.size = 8;
  CHECK_ERROR(ignis_get_device_info(cpu, &small), IGNIS_ERROR_INVALID_ARGUMENT, "info->size");
  CHECK_ERROR(ignis_get_device_info(cpu, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "info");
  ignis_device bogus = {(ignis_device_type)7, 0};
  CHECK_ERROR(ignis_get_device_info(bogus, &info), IGNIS_ERROR_INVALID_ARGUMENT, "device.type");

  ignis_device cuda0 = {IGNIS_DEVICE_CUDA, 0}, cuda99 = {IGNIS_DEVICE_CUDA, 99};
  if (ignis_cuda_device_count() == 0) {
    CHECK_ERROR(ignis_get_device_info(cuda0, &info), IGNIS_ERROR_BACKEND_UNAVAILABLE, "device.id");
  } else {
    ignis_device_info gpu = IGNIS_DEVICE_INFO_INIT;
    CHECK_STATUS(ignis_get_device_info(cuda0, &gpu), IGNIS_OK);
    CHECK(gpu.device.type == IGNIS_DEVICE_CUDA && gpu.name[0] != '\0');
    CHECK(gpu.compute_capability >= 70 && gpu.multiprocessor_count > 0 && gpu.global_memory_bytes > 0);
    CHECK(gpu.l2_cache_bytes > 0 && gpu.shared_memory_per_block_optin > 0);
    CHECK_ERROR(ignis_get_device_info(cuda99, &info), IGNIS_ERROR_INVALID_ARGUMENT, "device.id");
  }
}

/* ---- dispatch ------------------------------------------------------------------------------- */
static void test_dispatch(void) {
  h_case("dispatch by device");
  enum { R = 2, H = 8 };
  static float x[R * H], w[H], y[R * H], yy[R * H], qk[2 * 1 * 2 * H], qko[2 * 1 * 2 * H];
  static int32_t pos[2];
  for (int i = 0; i < R * H; ++i)
    y[i] = yy[i] = -7.0f;
  ignis_device cpu = {IGNIS_DEVICE_CPU, 0}, cuda = {IGNIS_DEVICE_CUDA, 0};
  int64_t shape[2] = {R, H}, hidden = H, qs[3] = {2, 1, H}, two = 2;
  ignis_tensor in, weight, out;
  ignis_tensor_init(&in, x, IGNIS_F32, 2, shape, cpu);
  ignis_tensor_init(&weight, w, IGNIS_F32, 1, &hidden, cpu);
  ignis_tensor_init(&out, y, IGNIS_F32, 2, shape, cpu);
  ignis_tensor in_cuda = in, weight_cuda = weight, out_cuda = out;
  in_cuda.device = weight_cuda.device = out_cuda.device = cuda;

  /* a mixture names the tensor that disagrees */
  CHECK_ERROR(ignis_rmsnorm(&in, &weight, 1e-6, &out_cuda, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "out");
  CHECK(strstr(ignis_last_error(), "cuda") != NULL);
  CHECK_ERROR(ignis_rmsnorm(&in, &weight_cuda, 1e-6, &out, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "weight");
  CHECK_ERROR(ignis_fused_add_rmsnorm(&in_cuda, &out, &weight_cuda, 1e-6, NULL), IGNIS_ERROR_INVALID_ARGUMENT,
              "residual");
  ignis_tensor act = out;
  act.shape[1] = H / 2;
  act.strides[0] = H / 2;
  ignis_tensor act_cuda = act;
  act_cuda.device = cuda;
  CHECK_ERROR(ignis_silu_and_mul(&in_cuda, &act, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "out");
  ignis_tensor q, k, qo, ko, p;
  ignis_tensor_init(&q, qk, IGNIS_F32, 3, qs, cpu);
  ignis_tensor_init(&k, qk + 2 * H, IGNIS_F32, 3, qs, cpu);
  ignis_tensor_init(&qo, qko, IGNIS_F32, 3, qs, cpu);
  ignis_tensor_init(&ko, qko + 2 * H, IGNIS_F32, 3, qs, cpu);
  ignis_tensor_init(&p, pos, IGNIS_I32, 1, &two, cpu);
  ignis_tensor p_cuda = p;
  p_cuda.device = cuda;
  ignis_rope_config config = IGNIS_ROPE_CONFIG_INIT;
  CHECK_ERROR(ignis_apply_rope_pos_ids(&q, &k, &p_cuda, &config, &qo, &ko, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "pos_ids");

  if (ignis_cuda_device_count() == 0) {
    /* every tensor says CUDA, but there is no GPU (or no CUDA backend) */
    CHECK_ERROR(ignis_rmsnorm(&in_cuda, &weight_cuda, 1e-6, &out_cuda, NULL), IGNIS_ERROR_BACKEND_UNAVAILABLE,
                "ignis_rmsnorm");
    CHECK(strstr(ignis_last_error(), "cuda") != NULL);
    CHECK_ERROR(ignis_silu_and_mul(&in_cuda, &act_cuda, NULL), IGNIS_ERROR_BACKEND_UNAVAILABLE,
                "ignis_silu_and_mul");
    ignis_tensor qc = q, kc = k, qoc = qo, koc = ko;
    qc.device = kc.device = qoc.device = koc.device = cuda;
    CHECK_ERROR(ignis_apply_rope_pos_ids(&qc, &kc, &p_cuda, &config, &qoc, &koc, NULL),
                IGNIS_ERROR_BACKEND_UNAVAILABLE, "ignis_apply_rope_pos_ids");
  } else {
    /* host memory labelled as CUDA memory is caught before any launch */
    CHECK_ERROR(ignis_rmsnorm(&in_cuda, &weight_cuda, 1e-6, &out_cuda, NULL), IGNIS_ERROR_INVALID_ARGUMENT,
                "input.device");
    ignis_tensor bad_id = in_cuda;
    bad_id.device.id = 99;
    ignis_tensor w99 = weight_cuda, o99 = out_cuda;
    w99.device.id = o99.device.id = 99;
    CHECK_ERROR(ignis_rmsnorm(&bad_id, &w99, 1e-6, &o99, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "device.id");
#ifdef IGNIS_HAVE_CUDA
    /* device memory labelled as host memory is caught too */
    h_buf dev = h_buf_alloc(H_CUDA, IGNIS_F32, R * H);
    ignis_tensor dev_as_cpu = in;
    dev_as_cpu.data = dev.data;
    CHECK_ERROR(ignis_rmsnorm(&dev_as_cpu, &weight, 1e-6, &out, NULL), IGNIS_ERROR_INVALID_ARGUMENT,
                "input.device");
    h_buf_free(&dev);
#endif
  }
  /* nothing was written by any rejected call */
  CHECK(memcmp(y, yy, sizeof y) == 0);
}

/* The environment table: every entry complete and named IGNIS_*, the ids of core/env.h reading
 * the entry of their own name. */
static void test_env_table(void) {
  h_case("environment variable table");
  int count = ignis_env_var_count();
  CHECK(count == IGNIS_ENV_COUNT && count > 0);
  for (int i = 0; i < count; ++i) {
    const ignis_env_var *v = ignis_env_var_at(i);
    if (!CHECKF(v && v->name && v->values && v->unset && v->meaning, "entry %d", i))
      continue;
    CHECKF(strncmp(v->name, "IGNIS_", 6) == 0 && v->values[0] && v->meaning[0], "entry %d: %s", i, v->name);
  }
  CHECK(ignis_env_var_at(-1) == NULL && ignis_env_var_at(count) == NULL);
  CHECK(strcmp(ignis_env_var_at(IGNIS_ENV_DECODE_PAGE_KERNEL)->name, "IGNIS_DECODE_PAGE_KERNEL") == 0);
  for (int i = 0; i < count; ++i)
    CHECKF(ignis_env((ignis_env_id)i) == getenv(ignis_env_var_at(i)->name), "ignis_env(%d)", i);
}

/* Config structs read over their defaults (core/config.h): a caller compiled against an older,
 * shorter layout (here v1, a prefix of v2) gets the defaults for the fields added since; sizes
 * below the first layout or above the library's are refused. Then the public configs: a caller
 * struct of exactly the first released size works, a larger one is refused as unsupported. */
typedef struct config_v2 {
  size_t size;
  int32_t a;
  double b;
  int32_t added; /* new in "v2" */
} config_v2;
typedef struct config_v1 {
  size_t size;
  int32_t a;
  double b;
} config_v1;

static void test_config_growth(void) {
  h_case("config structs grow: older callers read over the defaults");
  static const config_v2 defaults = {sizeof(config_v2), 1, 2.0, 77};
  const size_t first = IGNIS_CONFIG_END(config_v2, b);
  config_v1 old_caller = {sizeof(config_v1), 5, 6.5};
  config_v2 read;
  memset(&read, 0xff, sizeof read);
  CHECK_STATUS(ignis_read_config("f", "config.size", "INIT", &read, &defaults, &old_caller, sizeof read, first),
               IGNIS_OK);
  CHECK(read.size == sizeof(config_v2) && read.a == 5 && read.b == 6.5 && read.added == 77);
  config_v2 new_caller = {sizeof(config_v2), 8, 9.0, 10};
  CHECK_STATUS(ignis_read_config("f", "config.size", "INIT", &read, &defaults, &new_caller, sizeof read, first),
               IGNIS_OK);
  CHECK(read.a == 8 && read.b == 9.0 && read.added == 10);
  old_caller.size = first - 1;
  CHECK_ERROR(ignis_read_config("f", "config.size", "INIT", &read, &defaults, &old_caller, sizeof read, first),
              IGNIS_ERROR_INVALID_ARGUMENT, "config.size");
  new_caller.size = sizeof(config_v2) + 8;
  CHECK_ERROR(ignis_read_config("f", "config.size", "INIT", &read, &defaults, &new_caller, sizeof read, first),
              IGNIS_ERROR_UNSUPPORTED, "newer ignis");

  h_case("public configs at the first released size, and from a newer caller");
  ignis_decode_plan_config decode = IGNIS_DECODE_PLAN_CONFIG_INIT;
  decode.num_qo_heads = 8;
  decode.num_kv_heads = 2;
  decode.head_dim = 128;
  decode.page_size = 16;
  decode.max_batch_size = 4;
  decode.max_kv_len = 1024;
  decode.size = IGNIS_CONFIG_END(ignis_decode_plan_config, options);
  ignis_decode_plan *plan = NULL;
  if (CHECK_STATUS(ignis_decode_plan_create(&decode, &plan), IGNIS_OK))
    CHECK_STATUS(ignis_decode_plan_destroy(plan), IGNIS_OK);
  decode.size = sizeof decode + 16;
  CHECK_ERROR(ignis_decode_plan_create(&decode, &plan), IGNIS_ERROR_UNSUPPORTED, "config.size");
  decode.size = sizeof(size_t);
  CHECK_ERROR(ignis_decode_plan_create(&decode, &plan), IGNIS_ERROR_INVALID_ARGUMENT, "config.size");
}

int main(void) {
  h_init("test_core");
  test_config_growth();
  test_env_table();
  h_rng rng = h_rng_make(2024);
  test_status();
  test_last_error();
  test_versions();
  test_dtypes();
  for (size_t i = 0; i < sizeof formats / sizeof formats[0]; ++i)
    test_format(&formats[i], &rng);
  test_conversion_rules();
  test_cpu_backend_conversions(&rng);
  test_tensors();
  test_workspace();
  test_device_info();
  test_dispatch();
  return h_finish();
}
