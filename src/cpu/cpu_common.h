/* Shared helpers of the CPU backend: element loads and stores in f32 for the float dtypes
 * (f16 and bf16 converted with bit operations, rounding to nearest even), the saturating fp8
 * conversion of the quantizing ops (bit for bit the CUDA backend's cvt.rn.satfinite), and the OpenMP
 * parallel-for wrapper used by every op (serial when the library is built without OpenMP or the
 * work is too small to be worth threads). */
#ifndef IGNIS_CPU_COMMON_H
#define IGNIS_CPU_COMMON_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/quant_math.h"
#include "ignis/core.h"

static inline float ignis_cpu_half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal: normalize */
    int shift = 0;
    while (!(man & 0x400u)) {
      man <<= 1;
      ++shift;
    }
    man &= 0x3FFu;
    bits = sign | ((uint32_t)(113 - shift) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline uint16_t ignis_cpu_float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) /* inf or nan */
    return (uint16_t)(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0));
  if (abs >= 0x477FF000u) /* rounds to >= 65520: infinity */
    return (uint16_t)(sign | 0x7C00u);
  if (abs < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
    if (abs < 0x33000000u)
      return (uint16_t)sign;
    uint32_t exp = abs >> 23;
    uint32_t man = (abs & 0x7FFFFFu) | 0x800000u;
    uint32_t shift = 126u - exp; /* 14..24 */
    uint32_t half_man = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_man & 1)))
      ++half_man;
    return (uint16_t)(sign | half_man);
  }
  uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
  return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

static inline float ignis_cpu_bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static inline uint16_t ignis_cpu_float_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

/* fp8 code (dtype IGNIS_FP8_E4M3 or IGNIS_FP8_E5M2) of v, rounding to nearest even by bits (the
 * library's ignis_f32_to_fp8_* round through frexp / ldexp, too slow for every element); v is
 * saturated to +-fp8_max first, so the code never passes the format's max; NaN gives the NaN code
 * 0x7f (both formats) with v's sign. */
static inline uint8_t ignis_cpu_to_fp8(ignis_dtype dtype, float v, float fp8_max) {
  v = ignis_quant_saturate(v, fp8_max);
  const int man = dtype == IGNIS_FP8_E4M3 ? 3 : 2, bias = dtype == IGNIS_FP8_E4M3 ? 7 : 15;
  uint32_t x;
  memcpy(&x, &v, sizeof x);
  const uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a > 0x7F800000u)
    return sign | 0x7F;
  if ((int)(a >> 23) - 127 < 1 - bias) /* below the smallest normal: units of the subnormal step */
    return sign | (uint8_t)rintf(fabsf(v) * ldexpf(1.0f, bias - 1 + man));
  const int shift = 23 - man;
  const uint32_t rounded = (a + (1u << (shift - 1)) - 1 + ((a >> shift) & 1u)) >> shift;
  return sign | (uint8_t)(rounded - ((uint32_t)(127 - bias) << man));
}

/* Element i of a float-typed array of dtype f32, f16 or bf16, as f32. */
static inline float ignis_cpu_load(const void *base, ignis_dtype dtype, int64_t i) {
  switch (dtype) {
  case IGNIS_F16:
    return ignis_cpu_half_to_float(((const uint16_t *)base)[i]);
  case IGNIS_BF16:
    return ignis_cpu_bf16_to_float(((const uint16_t *)base)[i]);
  default:
    return ((const float *)base)[i];
  }
}

static inline void ignis_cpu_store(void *base, ignis_dtype dtype, int64_t i, float value) {
  switch (dtype) {
  case IGNIS_F16:
    ((uint16_t *)base)[i] = ignis_cpu_float_to_half(value);
    break;
  case IGNIS_BF16:
    ((uint16_t *)base)[i] = ignis_cpu_float_to_bf16(value);
    break;
  default:
    ((float *)base)[i] = value;
    break;
  }
}

/* n consecutive elements to f32 and back. The dtype switch sits outside the loop so each loop
 * is a plain conversion the compiler can vectorize. */
static inline void ignis_cpu_load_row(const void *base, ignis_dtype dtype, int64_t n, float *out) {
  const uint16_t *h = (const uint16_t *)base;
  switch (dtype) {
  case IGNIS_F16:
    for (int64_t i = 0; i < n; ++i)
      out[i] = ignis_cpu_half_to_float(h[i]);
    break;
  case IGNIS_BF16:
    for (int64_t i = 0; i < n; ++i)
      out[i] = ignis_cpu_bf16_to_float(h[i]);
    break;
  case IGNIS_FP8_E4M3:
    for (int64_t i = 0; i < n; ++i)
      out[i] = ignis_fp8_e4m3_to_f32(((const uint8_t *)base)[i]);
    break;
  case IGNIS_FP8_E5M2:
    for (int64_t i = 0; i < n; ++i)
      out[i] = ignis_fp8_e5m2_to_f32(((const uint8_t *)base)[i]);
    break;
  default:
    memcpy(out, base, (size_t)n * sizeof(float));
    break;
  }
}

static inline void ignis_cpu_store_row(void *base, ignis_dtype dtype, int64_t n, const float *in) {
  uint16_t *h = (uint16_t *)base;
  switch (dtype) {
  case IGNIS_F16:
    for (int64_t i = 0; i < n; ++i)
      h[i] = ignis_cpu_float_to_half(in[i]);
    break;
  case IGNIS_BF16:
    for (int64_t i = 0; i < n; ++i)
      h[i] = ignis_cpu_float_to_bf16(in[i]);
    break;
  default:
    memcpy(base, in, (size_t)n * sizeof(float));
    break;
  }
}

/* Address of element offset (in elements) of a typed array. */
static inline const void *ignis_cpu_at(const void *base, ignis_dtype dtype, int64_t offset) {
  return (const char *)base + offset * (int64_t)ignis_dtype_size(dtype);
}

static inline void *ignis_cpu_at_mut(void *base, ignis_dtype dtype, int64_t offset) {
  return (char *)base + offset * (int64_t)ignis_dtype_size(dtype);
}

/* Work below this many elements runs on one thread. */
#define IGNIS_CPU_PARALLEL_MIN_ELEMENTS (1 << 16)

#ifdef _OPENMP
#define IGNIS_CPU_PRAGMA_(x) _Pragma(#x)
/* Put before a `for (int64_t i = 0; i < n; ++i)` loop whose iterations are independent. */
#define IGNIS_CPU_PARALLEL_FOR(total_elements)                                                     \
  IGNIS_CPU_PRAGMA_(omp parallel for schedule(static) if ((total_elements) >= IGNIS_CPU_PARALLEL_MIN_ELEMENTS))
#else
#define IGNIS_CPU_PARALLEL_FOR(total_elements)
#endif

#endif
