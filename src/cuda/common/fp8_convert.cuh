/* f32 to fp8 on the device, as every quantizing kernel writes it: cvt.rn.satfinite, round to
 * nearest even, saturating at the format's largest finite value (448 e4m3, 57344 e5m2), NaN kept.
 * The CPU backend's ignis_cpu_to_fp8 (src/cpu/cpu_common.h) gives the same codes bit for bit, so
 * quantized outputs agree across backends. */
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

#endif
