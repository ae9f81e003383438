/* f32 to fp8 on the device, as every quantizing kernel writes it: cvt.rn.satfinite, round to
 * nearest even, saturating at the format's largest finite value (448 e4m3, 57344 e5m2), NaN kept.
 * The CPU backend's ignis_cpu_to_fp8 (src/cpu/cpu_common.h) gives the same codes bit for bit, so
 * quantized outputs agree across backends. Also the decoding of the GEMMs' block scales. */
#ifndef IGNIS_CUDA_FP8_CONVERT_CUH
#define IGNIS_CUDA_FP8_CONVERT_CUH

#include <cuda_fp8.h>
#include <stdint.h>

/* Two values to two fp8 codes (a in the low byte). */
__device__ __forceinline__ uint32_t ignis_fp8x2(float a, float b, bool e4m3) {
  const float2 v = make_float2(a, b);
  return e4m3 ? __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3)
              : __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E5M2);
}

__device__ __forceinline__ uint8_t ignis_fp8x1(float a, bool e4m3) {
  return e4m3 ? __nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E4M3)
              : __nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E5M2);
}

/* A block scale of the fp8 GEMMs as stored, f32 bits or a UE8M0 byte (u8), and its value: the f32,
 * or 2^(e - 127) with 255 read as NaN (e = 0 gives 2^-127, a subnormal). */
__device__ __forceinline__ uint32_t ignis_block_scale_raw(const void *base, bool u8, int64_t i) {
  return u8 ? (uint32_t) static_cast<const unsigned char *>(base)[i] : static_cast<const uint32_t *>(base)[i];
}
__device__ __forceinline__ float ignis_block_scale_value(uint32_t raw, bool u8) {
  if (!u8)
    return __uint_as_float(raw);
  return raw == 255u ? __uint_as_float(0x7fc00000u) : __uint_as_float(raw == 0u ? 0x00400000u : raw << 23);
}

#endif
