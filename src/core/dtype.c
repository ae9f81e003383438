/* The dtype table (names and sizes from IGNIS_DTYPE_MAP) and exact host-side conversions between
 * f32 and the narrow float formats: f16 (IEEE binary16), bf16, fp8 e4m3 (OCP "fn": bias 7, no
 * infinity, max 448, S.1111.111 is NaN) and fp8 e5m2 (bias 15, IEEE-like with infinities).
 * Narrowing rounds to nearest even. The narrow encoders share one routine parameterized by
 * exponent and mantissa width. */
#include <math.h>
#include <string.h>

#include "ignis/core.h"

const char *ignis_dtype_name(ignis_dtype dtype) {
  switch (dtype) {
#define IGNIS_DTYPE_NAME_(name, value, str, size)                                                  \
  case name:                                                                                       \
    return str;
    IGNIS_DTYPE_MAP(IGNIS_DTYPE_NAME_)
#undef IGNIS_DTYPE_NAME_
  default:
    return "invalid";
  }
}

size_t ignis_dtype_size(ignis_dtype dtype) {
  switch (dtype) {
#define IGNIS_DTYPE_SIZE_(name, value, str, size)                                                  \
  case name:                                                                                       \
    return size;
    IGNIS_DTYPE_MAP(IGNIS_DTYPE_SIZE_)
#undef IGNIS_DTYPE_SIZE_
  default:
    return 0;
  }
}

static uint32_t f32_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

static float bits_f32(uint32_t bits) {
  float value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* Encode a finite or infinite f32 into a small float with `exp_bits` exponent bits and
 * `man_bits` mantissa bits (sign in the top bit), rounding to nearest even. Values at or above
 * `max_finite` + half an ulp become `overflow_code` (infinity or a saturated maximum). */
static uint32_t encode_small_float(float value, int exp_bits, int man_bits, uint32_t overflow_code,
                                   uint32_t nan_code) {
  uint32_t sign = (f32_bits(value) >> 31) << (exp_bits + man_bits);
  if (isnan(value))
    return sign | nan_code;
  double magnitude = fabs((double)value);
  int bias = (1 << (exp_bits - 1)) - 1;
  int min_exp = 1 - bias; /* exponent of the smallest normal */
  if (magnitude == 0.0)
    return sign;
  int exponent;
  frexp(magnitude, &exponent); /* magnitude = f * 2^exponent, f in [0.5, 1) */
  exponent -= 1;               /* now magnitude = 1.m * 2^exponent */
  if (exponent < min_exp)
    exponent = min_exp; /* subnormal: fixed scale */
  double scaled = ldexp(magnitude, man_bits - exponent); /* units of the last mantissa place */
  double rounded = nearbyint(scaled);                    /* default mode: nearest even */
  uint64_t units = (uint64_t)rounded;
  if (units >= (2ull << man_bits)) { /* rounding carried into the next binade */
    units >>= 1;
    exponent += 1;
  }
  uint32_t code;
  if (units < (1ull << man_bits)) {
    code = (uint32_t)units; /* subnormal (exponent field 0) */
  } else {
    uint32_t exp_field = (uint32_t)(exponent + bias);
    code = (exp_field << man_bits) | (uint32_t)(units - (1ull << man_bits));
  }
  if (code > overflow_code)
    code = overflow_code;
  return sign | code;
}

static float decode_small_float(uint32_t code, int exp_bits, int man_bits) {
  uint32_t sign = (code >> (exp_bits + man_bits)) & 1u;
  uint32_t exp_field = (code >> man_bits) & ((1u << exp_bits) - 1);
  uint32_t mantissa = code & ((1u << man_bits) - 1);
  int bias = (1 << (exp_bits - 1)) - 1;
  double magnitude;
  if (exp_field == 0)
    magnitude = ldexp((double)mantissa, 1 - bias - man_bits);
  else
    magnitude = ldexp((double)((1u << man_bits) | mantissa), (int)exp_field - bias - man_bits);
  return (float)(sign ? -magnitude : magnitude);
}

uint16_t ignis_f32_to_f16(float value) {
  if (isinf(value))
    return (uint16_t)(value < 0 ? 0xFC00 : 0x7C00);
  return (uint16_t)encode_small_float(value, 5, 10, 0x7C00, 0x7E00);
}

/* By bits (the CPU backend converts every f16 element it reads): a normal half moves its exponent
 * from bias 15 to bias 127; a subnormal is its mantissa times 2^-24, exact in f32. */
float ignis_f16_to_f32(uint16_t bits) {
  uint32_t sign = (uint32_t)(bits & 0x8000) << 16, exp_field = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
  if (exp_field == 0x1F) {
    if (mantissa)
      return NAN;
    return sign ? -INFINITY : INFINITY;
  }
  if (exp_field == 0) {
    float value = (float)mantissa * 0x1p-24f;
    return sign ? -value : value;
  }
  return bits_f32(sign | (exp_field + 112) << 23 | mantissa << 13);
}

uint16_t ignis_f32_to_bf16(float value) {
  uint32_t bits = f32_bits(value);
  if (isnan(value))
    return (uint16_t)((bits >> 16) | 0x40);
  uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return (uint16_t)((bits + rounding) >> 16);
}

float ignis_bf16_to_f32(uint16_t bits) { return bits_f32((uint32_t)bits << 16); }

uint8_t ignis_f32_to_fp8_e4m3(float value) {
  /* 0x7E = 448 is the largest finite; infinities saturate too. */
  if (isinf(value))
    return (uint8_t)(value < 0 ? 0xFE : 0x7E);
  return (uint8_t)encode_small_float(value, 4, 3, 0x7E, 0x7F);
}

float ignis_fp8_e4m3_to_f32(uint8_t bits) {
  if ((bits & 0x7F) == 0x7F)
    return NAN;
  return decode_small_float(bits, 4, 3);
}

uint8_t ignis_f32_to_fp8_e5m2(float value) {
  if (isinf(value))
    return (uint8_t)(value < 0 ? 0xFC : 0x7C);
  return (uint8_t)encode_small_float(value, 5, 2, 0x7C, 0x7E);
}

float ignis_fp8_e5m2_to_f32(uint8_t bits) {
  uint32_t exp_field = (bits >> 2) & 0x1F;
  if (exp_field == 0x1F) {
    if (bits & 0x3)
      return NAN;
    return (bits & 0x80) ? -INFINITY : INFINITY;
  }
  return decode_small_float(bits, 5, 2);
}
