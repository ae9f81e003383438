/* The scalar rules of fp8 quantization (include/ignis/quant.h), shared by the CPU backend and the
 * CUDA kernels so both compute the same scales bit for bit: the absmax fold that ignores NaN, the
 * dynamic scale (absmax floor, FLT_MAX cap for infinities, UE8M0 rounding up to a power of two),
 * its e8m0 byte, and the saturation bound. Plain C, compiled as host code and as device code. */
#ifndef IGNIS_CORE_QUANT_MATH_H
#define IGNIS_CORE_QUANT_MATH_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define IGNIS_QUANT_FN static __host__ __device__ __forceinline__
#else
#define IGNIS_QUANT_FN static inline
#endif

/* max(m, |v|); a NaN v leaves m unchanged (fmaxf returns the other operand). */
IGNIS_QUANT_FN float ignis_quant_absmax_fold(float m, float v) {
  return fmaxf(m, fabsf(v));
}

/* The scale of a dynamic group whose absmax is `absmax`: max(absmax, min_absmax) capped at FLT_MAX
 * (an infinity gives a finite scale and saturates), over fp8_max (IEEE f32 division); with ue8m0
 * rounded up to the next power of two (exact powers stay). */
IGNIS_QUANT_FN float ignis_quant_scale(float absmax, float min_absmax, float fp8_max, int ue8m0) {
  const float a = fminf(fmaxf(absmax, min_absmax), FLT_MAX);
  float s = a / fp8_max;
  if (ue8m0) {
    uint32_t bits;
    memcpy(&bits, &s, sizeof bits);
    bits = (bits + 0x7FFFFFu) & 0x7F800000u;
    memcpy(&s, &bits, sizeof s);
  }
  return s;
}

/* The e8m0 byte of a power-of-two scale: its biased exponent (2^(byte - 127)). */
IGNIS_QUANT_FN uint8_t ignis_quant_e8m0(float power_of_two) {
  uint32_t bits;
  memcpy(&bits, &power_of_two, sizeof bits);
  return (uint8_t)(bits >> 23);
}

/* Clamp to [-fp8_max, fp8_max]; NaN passes unchanged (both comparisons are false). */
IGNIS_QUANT_FN float ignis_quant_saturate(float v, float fp8_max) {
  return v > fp8_max ? fp8_max : v < -fp8_max ? -fp8_max : v;
}

#endif
