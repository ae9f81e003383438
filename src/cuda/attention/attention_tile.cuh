/* Device and host pieces shared by the tensor-core attention kernels (decode.cu, prefill.cu).
 *
 * Tiles: rows of 16-byte chunks in shared memory, chunk c of row r stored at chunk c ^ (r & SWIZZLE)
 * (swizzled), so the 8 row addresses of an ldmatrix phase hit distinct banks. They are filled with
 * 16-byte cp.async copies (zero-filled when the source is masked) and read with ldmatrix (.trans for
 * V) into the fragments of mma.sync m16n8k16 (16-bit inputs, f32 accumulators); movmatrix turns
 * an 8x8 block of a C fragment into the B fragment of its transpose. fp8 K/V bytes
 * become f16 pairs (e4m3 by the hardware conversion, e5m2 by a byte permute).
 *
 * Scores: ALiBi slopes and the soft cap as the kernels take them (attention_score_transform,
 * filled on the host). Split-KV: attention_merge_partials combines the f32 partial rows of one
 * output row by their base-2 LSEs (lse_merge.cuh) and joins the sink, one thread per 8 values
 * (prefill's merge; decode's spreads a row's partials over warps, for single requests cut into
 * ~50 chunks).
 * Host: the 16-byte alignment check of the kernels' operands, the dispatch on the q dtype, the K/V
 * kind of a call, and the head dims a build compiles (IGNIS_HEAD_DIMS in CMake; a lone nvcc compile gets them all). */
#ifndef IGNIS_CUDA_ATTENTION_TILE_CUH
#define IGNIS_CUDA_ATTENTION_TILE_CUH

#include <cuda_fp8.h>
#include <math_constants.h>
#include <stdint.h>

#include "cuda/attention/lse_merge.cuh"
#include "cuda/common/cuda_common.cuh"
#include "cuda/common/hopper.cuh"
#include "ignis/decode.h"

#if !defined(IGNIS_WITH_HEAD_DIM_64) && !defined(IGNIS_WITH_HEAD_DIM_128) && !defined(IGNIS_WITH_HEAD_DIM_256)
#define IGNIS_WITH_HEAD_DIM_64 1
#define IGNIS_WITH_HEAD_DIM_128 1
#define IGNIS_WITH_HEAD_DIM_256 1
#endif

enum kv_kind { KV_F16 = 0, KV_BF16 = 1, KV_E4M3 = 2, KV_E5M2 = 3 };

#define IGNIS_LOG2E_F 1.4426950408889634f

/* Byte offset of chunk c of row r in a swizzled tile. */
template <int ROW_BYTES, int SWIZZLE> __device__ __forceinline__ uint32_t swizzled(int r, int c) {
  return (uint32_t)(r * ROW_BYTES + ((c ^ (r & SWIZZLE)) << 4));
}

/* ---- PTX wrappers ------------------------------------------------------------------------------ */
__device__ __forceinline__ void copy_async16(uint32_t smem_dst, const void *src, bool fill) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(smem_dst), "l"(src),
               "r"(fill ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
/* mbarriers (sm_90 for try_wait and the bulk copies): cuda/common/hopper.cuh's ignis_mbar_init,
 * ignis_mbar_arrive, ignis_mbar_arrive_expect_tx and ignis_mbar_wait, plus an arrival once every
 * cp.async this thread issued so far has landed (counted in the init). */
__device__ __forceinline__ void mbar_arrive_copies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
/* Bulk copy (copy engine, sm_90) of `bytes` (a multiple of 16, both addresses 16-byte aligned)
 * from global to shared memory, counted on bar's transaction count as it lands. */
__device__ __forceinline__ void bulk_copy_to_shared(uint32_t smem_dst, const void *src, uint32_t bytes, uint32_t bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
#endif
}

/* 16-byte shared-memory load and store at a shared-window address. */
__device__ __forceinline__ uint4 load_shared16(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void store_shared16(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
/* The transpose of an 8x8 matrix of 16-bit values spread over the warp as an mma fragment (lane l:
 * row l / 4, columns 2 (l % 4) and + 1, the lower column in the low half), in the same layout. */
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
/* d += a * b, m16n8k16, 16-bit inputs (bf16 when BF16, else f16), f32 accumulators. */
template <bool BF16>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if (BF16)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 2^x by the hardware approximation alone (ex2.approx.ftz: relative error ~2^-22, results below
 * 2^-126 flushed to 0, 2^-inf = 0). For softmax weights 2^(s - max) <= 1, where exp2f's
 * subnormal-range fix-up (a compare, a multiply and a square around each ex2) buys nothing. */
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* Online softmax, one row: moves the running maximum m (base-2 logits) up to include mx, sets
 * *rescale to the factor for the row's earlier sum and output, and returns the offset to subtract
 * from the row's logits: the new maximum, or 0 while the row has seen only masked keys (so -inf
 * logits give 0, not NaN). APPROX: the rescale by exp2_approx. */
template <bool APPROX = false> __device__ __forceinline__ float online_max(float &m, float mx, float *rescale) {
  const float m_new = fmaxf(m, mx);
  const float m_use = m_new == -CUDART_INF_F ? 0.0f : m_new;
  *rescale = APPROX ? exp2_approx(m - m_use) : exp2f(m - m_use);
  m = m_new;
  return m_use;
}

/* o *= rescale[row] over a warpgroup's m64nN wgmma accumulators (element i in the thread's row
 * (i >> 1) & 1), skipped when no row of the warp moved. */
template <int N> __device__ __forceinline__ void wgmma_rescale_rows(float (&o)[N], const float (&rescale)[2]) {
  if (__any_sync(0xffffffffu, rescale[0] != 1.0f || rescale[1] != 1.0f)) {
#pragma unroll
    for (int i = 0; i < N; ++i)
      o[i] *= rescale[(i >> 1) & 1];
  }
}

/* Two fp8 values (low byte first) to an f16 pair (low half first). e5m2 is the top byte of an f16,
 * so one byte permute places it exactly; e4m3 takes the hardware conversion. */
template <int KIND> __device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t two) {
  if constexpr (KIND == KV_E5M2)
    return __byte_perm(two, 0u, 0x1404);
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two & 0xffffu),
                                                   KIND == KV_E4M3 ? __NV_E4M3 : __NV_E5M2);
  return (uint32_t)h.x | ((uint32_t)h.y << 16);
}

/* Four fp8 values (bytes 0..3) to two f16 pairs: lo from bytes 0, 1, hi from bytes 2, 3. The
 * hardware conversion reads the high half of the word in place (no shift, as fp8x2_to_f16x2 of
 * `four >> 16` needs). */
template <int KIND> __device__ __forceinline__ void fp8x4_to_f16x2x2(uint32_t four, uint32_t &lo, uint32_t &hi) {
  if constexpr (KIND == KV_E5M2) {
    lo = __byte_perm(four, 0u, 0x1404);
    hi = __byte_perm(four, 0u, 0x3424);
  } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, l;\n\tcvt.rn.f16x2.e4m3x2 %1, h;}"
        : "=r"(lo), "=r"(hi)
        : "r"(four));
#else
    lo = fp8x2_to_f16x2<KIND>(four);
    hi = fp8x2_to_f16x2<KIND>(four >> 16);
#endif
  }
}

/* ---- scores ------------------------------------------------------------------------------------ */
/* ALiBi and the soft cap as the kernels apply them: x (natural units) += slope_h * (j - q_pos),
 * then x = cap_out * tanh(x * cap_in), which is cap * tanh(x / cap) already in base 2. */
struct attention_score_transform {
  float cap_in;    /* 1 / cap; 0: no soft cap */
  float cap_out;   /* cap * log2(e) */
  int32_t alibi_n; /* the largest power of two <= num_qo_heads; 0: no ALiBi */
};

static inline attention_score_transform
attention_score_transform_of(float logits_soft_cap, int32_t pos_encoding, int64_t num_qo_heads) {
  attention_score_transform s;
  const double cap = logits_soft_cap;
  s.cap_in = cap > 0.0 ? (float)(1.0 / cap) : 0.0f;
  s.cap_out = cap > 0.0 ? (float)(cap * 1.4426950408889634) : 0.0f;
  s.alibi_n = 0;
  if (pos_encoding == IGNIS_POS_ENCODING_ALIBI) {
    s.alibi_n = 1;
    while ((int64_t)s.alibi_n * 2 <= num_qo_heads)
      s.alibi_n *= 2;
  }
  return s;
}

/* ALiBi slope of query head h (natural units). */
__device__ __forceinline__ float alibi_slope(int32_t alibi_n, int64_t h) {
  const float n = (float)alibi_n;
  return h < alibi_n ? exp2f(-8.0f * (float)(h + 1) / n) : exp2f(-4.0f * (float)(2 * (h - alibi_n) + 1) / n);
}

/* ---- split-KV merge ---------------------------------------------------------------------------- */
/* Combine the n partial rows row0 + i * row_stride (i < n) of one output row: their base-2 LSEs in
 * partial_lse, their normalised values in partial_out (head_dim per row; this thread takes the 8
 * values from e0), plus a sink of base-2 score sink2 (-inf: none), by the one LSE merge
 * (lse_merge.cuh). acc gets the merged values, 0 when nothing is visible; returns the merged base-2
 * LSE (-inf then). */
__device__ __forceinline__ float attention_merge_partials(const float *partial_out, const float *partial_lse,
                                                          int64_t row0, int64_t row_stride, int n,
                                                          int64_t head_dim, int e0, float sink2,
                                                          float (&acc)[8]) {
  float m = -CUDART_INF_F, d = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e)
    acc[e] = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int64_t prow = row0 + i * row_stride;
    const float t = partial_lse[prow];
    if (t == -CUDART_INF_F)
      continue;
    float x[8];
    ignis_load_floats<IGNIS_CACHE_STREAM>(partial_out + prow * head_dim + e0, x);
    lse_merge_fold(t, x, m, d, acc);
  }
  return lse_merge_finish(acc, m, d, sink2);
}

/* ---- host ---------------------------------------------------------------------------------------- */
/* ptr and every stride (in elements of elem bytes) keep 16-byte alignment. */
static inline bool attention_aligned16(const void *ptr, int64_t elem, const int64_t *strides, int count) {
  if ((uintptr_t)ptr % 16 != 0)
    return false;
  for (int i = 0; i < count; ++i)
    if (strides[i] * elem % 16 != 0)
      return false;
  return true;
}

/* launch(QT()) for the 16-bit q / out dtype (QT __half or __nv_bfloat16); others are unsupported. */
template <typename Launch> static inline ignis_status attention_by_dtype(ignis_dtype dtype, const char *op, Launch launch) {
  switch (dtype) {
  case IGNIS_F16:
    return launch(__half());
  case IGNIS_BF16:
    return launch(__nv_bfloat16());
  default:
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: dtype must be f16 or bf16", op);
  }
}

/* The kv_kind of a call: fp8 K/V, else K/V of q's 16-bit dtype (the front ends let no other through). */
static inline int attention_kv_kind(ignis_dtype q_dtype, ignis_dtype kv_dtype) {
  switch (kv_dtype) {
  case IGNIS_FP8_E4M3:
    return KV_E4M3;
  case IGNIS_FP8_E5M2:
    return KV_E5M2;
  default:
    return q_dtype == IGNIS_F16 ? KV_F16 : KV_BF16;
  }
}

/* The kernels' 16-byte copies need q and out (16-bit; token and head strides) and K and V (of
 * cache.dtype; token, head and, when paged, page strides) 16-byte aligned. */
static inline bool attention_operands_aligned(const void *q, int64_t q_stride_token, int64_t q_stride_head,
                                              const void *out, int64_t out_stride_token, int64_t out_stride_head,
                                              const ignis_paged_kv_params &cache, bool paged) {
  const int64_t kv_elem = (int64_t)ignis_dtype_size(cache.dtype);
  const int64_t q_strides[] = {q_stride_token, q_stride_head};
  const int64_t out_strides[] = {out_stride_token, out_stride_head};
  const int64_t k_strides[] = {cache.k_stride_token, cache.k_stride_head, cache.k_stride_page};
  const int64_t v_strides[] = {cache.v_stride_token, cache.v_stride_head, cache.v_stride_page};
  return attention_aligned16(q, 2, q_strides, 2) && attention_aligned16(out, 2, out_strides, 2) &&
         attention_aligned16(cache.k_cache, kv_elem, k_strides, paged ? 3 : 2) &&
         attention_aligned16(cache.v_cache, kv_elem, v_strides, paged ? 3 : 2);
}

#endif
