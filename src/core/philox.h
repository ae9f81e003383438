/* Random numbers and bit-exact float helpers shared by the CPU and CUDA sampling backends.
 *
 * Generator: Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), a
 * counter-based generator: a 128-bit counter and a 64-bit key give four 32-bit words, with no state.
 * The sampling ops use key = seed and counter
 *     c0 = group (a counter group: group 0 gives a row's sampling uniform; speculative sampling
 *          gives elements 4*group .. 4*group+3 of a row words 0..3),
 *     c1 = output row,
 *     c2 = offset bits 0..31,
 *     c3 = offset bits 32..47 | draw << 16   (draw: which of an op's independent streams),
 * so a row's numbers depend only on (seed, offset, row, draw, element), never on the launch.
 *
 * Every function here gives the same bits on the host compiler and under nvcc: integer work, IEEE
 * float/double operations that are correctly rounded on both (+, -, *, /, fmaf), and no operation
 * the compilers could contract differently (products feeding a sum are written as fmaf, and the
 * IGNIS_FMUL / IGNIS_DMUL macros stop nvcc from fusing a product into a later add). That is what
 * lets the CPU backend draw exactly the samples the GPU draws.
 *
 * ignis_exp_nonpos(d): e^d for d <= 0 (0 below -104), range reduction by ln 2 in two pieces and a
 * degree-7 polynomial; a few ulp. Used for the weights exp(logit - max) of the logits ops.
 *
 * ignis_order_key(v): the float's bits mapped to a uint32 that orders like the value (negative
 * values flipped, the sign bit set for non-negative ones); callers map NaN away first.
 *
 * Fixed-point mass: the mass of a positive float p with exponent field E (denormals: E = 1) is
 * counted in units of 2^(E - 127 - 38): ignis_mass_own(p) = significand << 15 (< 2^39), exact. Sums
 * over a row at the row's largest exponent field Emax shift each term right by Emax - E
 * (ignis_mass_at), so sums of masses are exact 64-bit integers for rows of up to 2^24 elements,
 * the same in any order, on any backend. */
#ifndef IGNIS_CORE_PHILOX_H
#define IGNIS_CORE_PHILOX_H

#include <stdint.h>

#ifdef __CUDACC__
#define IGNIS_HOST_DEVICE __host__ __device__
#else
#define IGNIS_HOST_DEVICE
#endif

#if defined(__CUDA_ARCH__)
#define IGNIS_FMUL(a, b) __fmul_rn((a), (b))
#define IGNIS_DMUL(a, b) __dmul_rn((a), (b))
#else
#define IGNIS_FMUL(a, b) ((a) * (b))
#define IGNIS_DMUL(a, b) ((a) * (b))
#endif

#include <math.h>

typedef struct ignis_philox_out {
  uint32_t w[4];
} ignis_philox_out;

static inline IGNIS_HOST_DEVICE uint32_t ignis_mulhi32(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return (uint32_t)(((uint64_t)a * b) >> 32);
#endif
}

/* Philox 4x32 with 10 rounds. */
static inline IGNIS_HOST_DEVICE ignis_philox_out ignis_philox4x32(uint32_t c0, uint32_t c1, uint32_t c2,
                                                                  uint32_t c3, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const uint32_t lo0 = 0xD2511F53u * c0, hi0 = ignis_mulhi32(0xD2511F53u, c0);
    const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = ignis_mulhi32(0xCD9E8D57u, c2);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  ignis_philox_out out;
  out.w[0] = c0;
  out.w[1] = c1;
  out.w[2] = c2;
  out.w[3] = c3;
  return out;
}

/* The four words of counter group `group` of `row` (see the header for the counter layout). */
static inline IGNIS_HOST_DEVICE ignis_philox_out ignis_philox_group(uint64_t seed, uint64_t offset,
                                                                    uint32_t draw, uint64_t row,
                                                                    uint64_t group) {
  return ignis_philox4x32((uint32_t)group, (uint32_t)row, (uint32_t)offset,
                          (uint32_t)((offset >> 32) & 0xFFFFu) | (draw << 16), (uint32_t)seed,
                          (uint32_t)(seed >> 32));
}

static inline IGNIS_HOST_DEVICE uint32_t ignis_float_bits(float v) {
  union {
    float f;
    uint32_t u;
  } b;
  b.f = v;
  return b.u;
}

static inline IGNIS_HOST_DEVICE float ignis_bits_float(uint32_t u) {
  union {
    float f;
    uint32_t u;
  } b;
  b.u = u;
  return b.f;
}

/* e^d for d <= 0; 0 below -104 (and for -inf). */
static inline IGNIS_HOST_DEVICE float ignis_exp_nonpos(float d) {
  if (!(d > -104.0f))
    return 0.0f;
  if (d >= 0.0f)
    return 1.0f;
  const float t = IGNIS_FMUL(d, 1.44269504088896341f);
  const float n = (float)(int)(t - 0.5f); /* round half away from zero for t <= 0 */
  float r = fmaf(-n, 0.693145751953125f, d);
  r = fmaf(-n, 1.428606765330187e-06f, r); /* |r| <= ln2 / 2 + tiny */
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  int k = (int)n; /* -151 <= k <= 0 */
  if (k < -126) {
    p = IGNIS_FMUL(p, 0x1p-64f);
    k += 64;
  }
  return IGNIS_FMUL(p, ignis_bits_float((uint32_t)(k + 127) << 23));
}

/* Order-preserving map of a non-NaN float to uint32. */
static inline IGNIS_HOST_DEVICE uint32_t ignis_order_key(float v) {
  const uint32_t bits = ignis_float_bits(v);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

static inline IGNIS_HOST_DEVICE float ignis_key_float(uint32_t key) {
  return ignis_bits_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

/* Exponent field of a positive float for the mass scale (denormals count as 1). */
static inline IGNIS_HOST_DEVICE int ignis_mass_exponent(uint32_t bits) {
  const int e = (int)((bits >> 23) & 0xFFu);
  return e > 0 ? e : 1;
}

/* Mass of a positive float in units of 2^(E - 165) of its own exponent field E. */
static inline IGNIS_HOST_DEVICE uint64_t ignis_mass_own(uint32_t bits) {
  const uint32_t significand = (bits & 0x7FFFFFu) | (((bits >> 23) & 0xFFu) ? 0x800000u : 0u);
  return (uint64_t)significand << 15;
}

/* An own-scale mass of exponent field e converted to the scale of exponent field e_max >= e. */
static inline IGNIS_HOST_DEVICE uint64_t ignis_mass_at(uint64_t own, int e, int e_max) {
  const int shift = e_max - e;
  return shift >= 64 ? 0 : own >> shift;
}

#endif
