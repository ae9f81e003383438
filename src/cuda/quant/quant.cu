/* CUDA backend of fp8 quantization (include/ignis/quant.h): plain, per-tensor static, dynamic
 * per-tensor (absmax pass), per-token and per-token-group scales, behind an optional prologue
 * (RMSNorm / LayerNorm with the fused residual add, or silu_and_mul), with the math of
 * src/cpu/quant.c: f32 values, the scale rules of core/quant_math.h (shared with the CPU, so scales
 * agree bit for bit), and q = cvt.rn.satfinite(v * (1 / s)): round to nearest even, saturating at
 * the format's max, NaN kept.
 *
 * Rows to threads, vector path (quant_rows_in_registers): a row is cut into chunks of 16 values
 * (two 16-byte vectors of f16/bf16 input, four of f32, twice that for silu's gate and up; one
 * 16-byte vector of fp8 output). A block of (G, R) threads holds R rows, G threads each; thread x
 * holds chunks x, x + G, ... (VPT of them, 1, 2 or 4) raw in registers, every load issued before
 * the first use, so the row is read once with streaming loads. Short rows (G <= 32) live in warp
 * slices and reduce with shuffles; longer rows take a whole block (R = 1) and reduce through shared
 * memory. The norm's statistics are one reduction (two for LayerNorm); a group's absmax is a
 * shuffle over the group_size / 16 consecutive lanes that hold it (a power of two dividing G), or a
 * row reduction when the group is the whole row (per token). Values are formed from the registers
 * twice for dynamic scales (absmax, then quantize; the weight is re-read from L1), once for static
 * ones. Conditions, checked on the host: hidden and group_size multiples of 16, rows of every
 * tensor and the weight/bias 16-byte aligned, at most 256 * 4 chunks per row (hidden 16384).
 *
 * Everything else (any hidden, group size, alignment, longer rows): quant_rows_looped, one block
 * of 256 threads per row in a grid-stride loop, element by element; it reads the row once for the
 * norm's statistics, then again to write: the block strides over the row (static scales), or
 * each warp takes a group and reads it twice, for its absmax and for its output (L1/L2 hits). The
 * residual sum is written in the last pass, as in src/cuda/norm/norm.cu's looped kernel.
 *
 * Dynamic per-tensor: cudaMemsetAsync zeroes scale[0]; the ABSMAX pass folds each row's absmax in
 * with atomicMax on the f32 bits (non-negative floats order as unsigned integers); a one-thread
 * kernel turns the absmax into the scale; the static pass quantizes. Kernels launch with
 * ignis_launch (PDL on sm_90+) and wait (ignis_pdl_wait) before touching memory. */
#include "core/quant_math.h"
#include "cuda/common/activation_math.cuh"
#include "cuda/common/cuda_common.cuh"
#include "cuda/common/fp8_convert.cuh"

enum {
  CHUNK = 16,          /* values per chunk: one 16-byte vector of fp8 */
  BLOCK_THREADS = 256, /* G * R of the register kernel; the looped kernel's block */
  MAX_VPT = 4,
  LOOPED_GRID_LIMIT = 65535
};

/* ---- values ------------------------------------------------------------------------------ */
/* silu(a) * b as the unfused silu_and_mul computes it for T (activation/activation.cu). */
template <typename T> __device__ __forceinline__ float silu_mul(float a, float b) {
  return ignis_activate<IGNIS_ACT_SILU, sizeof(T) == 4>(a) * b;
}

/* 16 values times inv as one 16-byte vector of fp8. */
__device__ __forceinline__ uint4 quantize_chunk(const float (&v)[CHUNK], float inv, bool e4m3) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = ignis_fp8x2(v[4 * i] * inv, v[4 * i + 1] * inv, e4m3) |
           ignis_fp8x2(v[4 * i + 2] * inv, v[4 * i + 3] * inv, e4m3) << 16;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/* Round to T and back (the block form quantizes the norm as stored in normed_out). */
template <typename T> __device__ __forceinline__ float round_to(float x) {
  return ignis_to_float(ignis_from_float<T>(x));
}

__device__ __forceinline__ void store_scale(const ignis_quant_params &p, int64_t row, int64_t group,
                                            float s) {
  const int64_t at = row * p.scale_stride_row + group * p.scale_stride_group;
  if (p.scale_dtype == IGNIS_U8)
    static_cast<uint8_t *>(p.scale)[at] = ignis_quant_e8m0(s);
  else
    static_cast<float *>(p.scale)[at] = s;
}

__device__ __forceinline__ void fold_absmax_global(const ignis_quant_params &p, float m) {
  atomicMax(static_cast<unsigned int *>(p.scale), __float_as_uint(m));
}

/* ---- reductions over a row slot ----------------------------------------------------------- */
/* Sum or max over the G = blockDim.x threads of a slot. G <= 32: an aligned warp slice
 * (shuffles); else the whole block (R = 1) through scratch (32 floats), with a trailing barrier. */
template <bool MAX> __device__ __forceinline__ float combine(float a, float b) {
  return MAX ? fmaxf(a, b) : a + b;
}

/* Max over the block (every thread gets it); scratch as for ignis_block_sum, trailing barrier. */
__device__ __forceinline__ float block_max(float x, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  if (lane == 0)
    scratch[warp] = x;
  __syncthreads();
  x = lane < num_warps ? scratch[lane] : 0.0f;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  __syncthreads();
  return x;
}

template <bool MAX> __device__ __forceinline__ float slot_reduce(float x, float *scratch) {
  if (blockDim.x <= 32) {
    for (int offset = blockDim.x >> 1; offset > 0; offset >>= 1)
      x = combine<MAX>(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
  }
  return MAX ? block_max(x, scratch) : ignis_block_sum(x, scratch);
}

/* Max over `lanes` consecutive lanes (a power of two <= 32, aligned). */
__device__ __forceinline__ float lanes_max(float x, int lanes) {
  for (int offset = lanes >> 1; offset > 0; offset >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/* ---- the register kernel ------------------------------------------------------------------ */
enum prologue_kind { PRO_PLAIN = 0, PRO_NORM = 1, PRO_SILU = 2 };

/* The raw registers of one chunk: NV vectors of input (and NV of residual or of up). */
template <typename T> struct chunk_raw {
  static constexpr int NV = CHUNK * sizeof(T) / 16;
  uint4 a[NV];
  uint4 b[NV];
};

template <typename T, int PRO, bool SECOND>
__device__ __forceinline__ void load_chunk(chunk_raw<T> &c, const T *in, const T *second, int h) {
#pragma unroll
  for (int i = 0; i < chunk_raw<T>::NV; ++i) {
    c.a[i] = __ldcs(reinterpret_cast<const uint4 *>(in + h) + i);
    if (SECOND)
      c.b[i] = __ldcs(reinterpret_cast<const uint4 *>(second + h) + i);
  }
}

/* The chunk's input as f32 (plus the residual when SECOND in the norm form: the f32 sum). */
template <typename T, int PRO, bool SECOND>
__device__ __forceinline__ void chunk_input(const chunk_raw<T> &c, float (&x)[CHUNK]) {
  constexpr int PER = 16 / sizeof(T);
#pragma unroll
  for (int i = 0; i < chunk_raw<T>::NV; ++i)
    ignis_raw_to_floats<T>(c.a[i], x + i * PER);
  if (SECOND) {
    float y[CHUNK];
#pragma unroll
    for (int i = 0; i < chunk_raw<T>::NV; ++i)
      ignis_raw_to_floats<T>(c.b[i], y + i * PER);
#pragma unroll
    for (int k = 0; k < CHUNK; ++k)
      x[k] = PRO == PRO_SILU ? silu_mul<T>(x[k], y[k]) : x[k] + y[k];
  }
}

/* The chunk's values v at column h: the input, silu * up, or the normalized row. */
template <typename T, typename W, int PRO, bool SECOND>
__device__ __forceinline__ void chunk_values(const ignis_quant_params &p, const chunk_raw<T> &c, int h,
                                             float mean, float rstd, float (&v)[CHUNK]) {
  chunk_input<T, PRO, SECOND>(c, v);
  if (PRO == PRO_NORM) {
    float w[CHUNK];
    ignis_load_floats<IGNIS_CACHE_READ_ONLY>(static_cast<const W *>(p.weight) + h, w);
#pragma unroll
    for (int k = 0; k < CHUNK; ++k)
      v[k] = (v[k] - mean) * rstd * w[k];
    if (p.bias) {
      float b[CHUNK];
      ignis_load_floats<IGNIS_CACHE_READ_ONLY>(static_cast<const W *>(p.bias) + h, b);
#pragma unroll
      for (int k = 0; k < CHUNK; ++k)
        v[k] += b[k];
    }
    if (p.normed_out) {
#pragma unroll
      for (int k = 0; k < CHUNK; ++k)
        v[k] = round_to<T>(v[k]);
    }
  }
}

/* PRO: the prologue; SECOND: a second input row (residual for the norm, always for silu). */
template <typename T, typename W, int VPT, int PRO, bool SECOND>
__global__ void __launch_bounds__(BLOCK_THREADS) quant_rows_in_registers(ignis_quant_params p) {
  __shared__ float scratch[32];
  const int64_t rows = p.num_rows_outer * p.num_rows_inner;
  const int64_t row = (int64_t)blockIdx.x * blockDim.y + threadIdx.y;
  const int num_chunks = (int)(p.hidden / CHUNK);
  const bool e4m3 = p.out_dtype == IGNIS_FP8_E4M3;
  ignis_pdl_wait();

  int64_t outer, inner;
  ignis_split_row(row < rows ? row : 0, p.num_rows_inner, &outer, &inner);
  const T *in = static_cast<const T *>(p.input) + ignis_row_offset(outer, inner, p.input_layout);
  T *second = PRO == PRO_SILU ? const_cast<T *>(in) + p.hidden
              : SECOND ? static_cast<T *>(p.residual) + ignis_row_offset(outer, inner, p.residual_layout)
                       : nullptr;
  uint8_t *out = static_cast<uint8_t *>(p.out) + ignis_row_offset(outer, inner, p.out_layout);

  chunk_raw<T> raw[VPT];
  bool valid[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    valid[j] = row < rows && c < num_chunks;
#pragma unroll
    for (int i = 0; i < chunk_raw<T>::NV; ++i)
      raw[j].a[i] = raw[j].b[i] = make_uint4(0, 0, 0, 0);
    if (valid[j])
      load_chunk<T, PRO, SECOND>(raw[j], in, second, c * CHUNK);
  }
  ignis_pdl_launch_dependents();

  float mean = 0.0f, rstd = 1.0f;
  if (PRO == PRO_NORM) {
    /* residual = input + residual, rounded */
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (SECOND && valid[j]) {
        float x[CHUNK];
        chunk_input<T, PRO, SECOND>(raw[j], x);
        ignis_store_floats(second + (threadIdx.x + j * blockDim.x) * CHUNK, x);
      }
    const float inv_hidden = 1.0f / (float)p.hidden;
    if (p.norm_kind == IGNIS_NORM_LAYER) {
      float sum = 0.0f; /* chunks past the row are zeros */
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        float x[CHUNK];
        chunk_input<T, PRO, SECOND>(raw[j], x);
#pragma unroll
        for (int k = 0; k < CHUNK; ++k)
          sum += x[k];
      }
      mean = slot_reduce<false>(sum, scratch) * inv_hidden;
    }
    float sum_sq = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (valid[j]) {
        float x[CHUNK];
        chunk_input<T, PRO, SECOND>(raw[j], x);
#pragma unroll
        for (int k = 0; k < CHUNK; ++k)
          sum_sq += (x[k] - mean) * (x[k] - mean);
      }
    rstd = rsqrtf(slot_reduce<false>(sum_sq, scratch) * inv_hidden + p.eps);
  }

  if (p.scale_mode == IGNIS_QUANT_SCALE_STATIC) {
    const float inv = 1.0f / *static_cast<const float *>(p.scale);
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (valid[j]) {
        const int h = (threadIdx.x + j * blockDim.x) * CHUNK;
        float v[CHUNK];
        chunk_values<T, W, PRO, SECOND>(p, raw[j], h, mean, rstd, v);
        ignis_store_raw(out + h, quantize_chunk(v, inv, e4m3));
      }
    return;
  }

  /* dynamic: absmax per chunk, then per group (or row), then quantize */
  float absmax[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    absmax[j] = 0.0f;
    if (valid[j]) {
      float v[CHUNK];
      chunk_values<T, W, PRO, SECOND>(p, raw[j], (threadIdx.x + j * blockDim.x) * CHUNK, mean, rstd, v);
#pragma unroll
      for (int k = 0; k < CHUNK; ++k)
        absmax[j] = ignis_quant_absmax_fold(absmax[j], v[k]);
    }
  }
  const int group_chunks = (int)(p.group_size / CHUNK);
  const bool whole_row = p.scale_mode == IGNIS_QUANT_SCALE_ABSMAX || group_chunks == num_chunks;
  if (whole_row) {
    float m = absmax[0];
#pragma unroll
    for (int j = 1; j < VPT; ++j)
      m = fmaxf(m, absmax[j]);
    m = slot_reduce<true>(m, scratch);
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      absmax[j] = m;
    if (p.scale_mode == IGNIS_QUANT_SCALE_ABSMAX) {
      if (threadIdx.x == 0 && row < rows)
        fold_absmax_global(p, m);
      return;
    }
  } else {
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      absmax[j] = lanes_max(absmax[j], group_chunks);
  }
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (valid[j]) {
      const int c = threadIdx.x + j * blockDim.x, h = c * CHUNK;
      const float s = ignis_quant_scale(absmax[j], p.min_absmax, p.fp8_max, p.ue8m0);
      if (c % group_chunks == 0)
        store_scale(p, row, c / group_chunks, s);
      float v[CHUNK];
      chunk_values<T, W, PRO, SECOND>(p, raw[j], h, mean, rstd, v);
      if (PRO == PRO_NORM && p.normed_out) {
        T *normed = static_cast<T *>(p.normed_out) + ignis_row_offset(outer, inner, p.normed_layout);
        ignis_store_floats(normed + h, v);
      }
      ignis_store_raw(out + h, quantize_chunk(v, 1.0f / s, e4m3));
    }
}

/* ---- the looped kernel (any shape) -------------------------------------------------------- */
template <typename T, typename W> struct row_ptrs {
  const T *in;
  T *second; /* residual (norm) or up (silu) */
  uint8_t *out;
  T *normed;
};

/* Value h of the row; the fused sum x is also returned (stored to residual by the last pass). */
template <typename T, typename W>
__device__ __forceinline__ float element_value(const ignis_quant_params &p, const row_ptrs<T, W> &r,
                                               int64_t h, float mean, float rstd, float *sum) {
  float x = ignis_to_float(r.in[h]);
  if (p.prologue == IGNIS_QUANT_SILU_MUL)
    return silu_mul<T>(x, ignis_to_float(r.second[h]));
  if (p.prologue == IGNIS_QUANT_PLAIN)
    return x;
  if (r.second)
    x += ignis_to_float(r.second[h]);
  *sum = x;
  float v = (x - mean) * rstd * ignis_to_float(static_cast<const W *>(p.weight)[h]);
  if (p.bias)
    v += ignis_to_float(static_cast<const W *>(p.bias)[h]);
  return r.normed ? round_to<T>(v) : v;
}

/* The last pass over [h0, h1): quantize, and write the residual sum and normed_out. */
template <typename T, typename W>
__device__ __forceinline__ void write_span(const ignis_quant_params &p, const row_ptrs<T, W> &r, int64_t h0,
                                           int64_t h1, int64_t step, float mean, float rstd, float inv,
                                           bool e4m3) {
  for (int64_t h = h0; h < h1; h += step) {
    float sum = 0.0f;
    const float v = element_value<T, W>(p, r, h, mean, rstd, &sum);
    if (p.prologue == IGNIS_QUANT_NORM && r.second)
      r.second[h] = ignis_from_float<T>(sum);
    if (r.normed)
      r.normed[h] = ignis_from_float<T>(v);
    r.out[h] = ignis_fp8x1(v * inv, e4m3);
  }
}

template <typename T, typename W>
__global__ void __launch_bounds__(BLOCK_THREADS) quant_rows_looped(ignis_quant_params p) {
  __shared__ float scratch[32];
  const int64_t rows = p.num_rows_outer * p.num_rows_inner, n = p.hidden;
  const bool e4m3 = p.out_dtype == IGNIS_FP8_E4M3;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
  ignis_pdl_wait();
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    int64_t outer, inner;
    ignis_split_row(row, p.num_rows_inner, &outer, &inner);
    row_ptrs<T, W> r;
    r.in = static_cast<const T *>(p.input) + ignis_row_offset(outer, inner, p.input_layout);
    r.second = p.prologue == IGNIS_QUANT_SILU_MUL ? const_cast<T *>(r.in) + n
               : p.residual ? static_cast<T *>(p.residual) + ignis_row_offset(outer, inner, p.residual_layout)
                            : nullptr;
    r.out = static_cast<uint8_t *>(p.out) + ignis_row_offset(outer, inner, p.out_layout);
    r.normed = p.normed_out ? static_cast<T *>(p.normed_out) + ignis_row_offset(outer, inner, p.normed_layout)
                            : nullptr;

    float mean = 0.0f, rstd = 1.0f;
    if (p.prologue == IGNIS_QUANT_NORM) {
      const float inv_hidden = 1.0f / (float)n;
      if (p.norm_kind == IGNIS_NORM_LAYER) {
        float acc = 0.0f;
        for (int64_t h = threadIdx.x; h < n; h += blockDim.x)
          acc += ignis_to_float(r.in[h]) + (r.second ? ignis_to_float(r.second[h]) : 0.0f);
        mean = ignis_block_sum(acc, scratch) * inv_hidden;
      }
      float acc = 0.0f;
      for (int64_t h = threadIdx.x; h < n; h += blockDim.x) {
        const float x = ignis_to_float(r.in[h]) + (r.second ? ignis_to_float(r.second[h]) : 0.0f) - mean;
        acc += x * x;
      }
      rstd = rsqrtf(ignis_block_sum(acc, scratch) * inv_hidden + p.eps);
    }

    if (p.scale_mode == IGNIS_QUANT_SCALE_STATIC) {
      write_span<T, W>(p, r, threadIdx.x, n, blockDim.x, mean, rstd,
                       1.0f / *static_cast<const float *>(p.scale), e4m3);
      continue;
    }
    if (p.scale_mode == IGNIS_QUANT_SCALE_ABSMAX) {
      float m = 0.0f, unused;
      for (int64_t h = threadIdx.x; h < n; h += blockDim.x)
        m = ignis_quant_absmax_fold(m, element_value<T, W>(p, r, h, mean, rstd, &unused));
      m = slot_reduce<true>(m, scratch);
      if (threadIdx.x == 0)
        fold_absmax_global(p, m);
      continue;
    }
    const int64_t groups = n / p.group_size;
    for (int64_t g = warp; g < groups; g += num_warps) {
      const int64_t h0 = g * p.group_size, h1 = h0 + p.group_size;
      float m = 0.0f, unused;
      for (int64_t h = h0 + lane; h < h1; h += 32)
        m = ignis_quant_absmax_fold(m, element_value<T, W>(p, r, h, mean, rstd, &unused));
      m = lanes_max(m, 32);
      const float s = ignis_quant_scale(m, p.min_absmax, p.fp8_max, p.ue8m0);
      if (lane == 0)
        store_scale(p, row, g, s);
      write_span<T, W>(p, r, h0 + lane, h1, 32, mean, rstd, 1.0f / s, e4m3);
    }
  }
}

__global__ void absmax_to_scale(float *scale, float min_absmax, float fp8_max) {
  ignis_pdl_wait();
  *scale = ignis_quant_scale(*scale, min_absmax, fp8_max, 0);
}

/* ---- host side ---------------------------------------------------------------------------- */
static int next_pow2(int64_t x) {
  int p = 1;
  while (p < x)
    p <<= 1;
  return p;
}

static bool rows_aligned(const void *data, ignis_row_layout layout, const ignis_quant_params *p,
                         size_t elem) {
  return ignis_rows_aligned16(data, layout, p->num_rows_outer, p->num_rows_inner, elem) != 0;
}

template <typename T, typename W, int VPT, int PRO, bool SECOND>
static cudaError_t launch_registers_at(const ignis_quant_params *p, dim3 block, cudaStream_t stream) {
  const int64_t rows = p->num_rows_outer * p->num_rows_inner;
  const dim3 grid((unsigned)((rows + block.y - 1) / block.y));
  return ignis_launch(quant_rows_in_registers<T, W, VPT, PRO, SECOND>, grid, block, 0, stream, *p);
}

template <typename T, typename W, int PRO, bool SECOND>
static cudaError_t launch_registers(const ignis_quant_params *p, int vpt, dim3 block, cudaStream_t stream) {
  if (vpt == 1)
    return launch_registers_at<T, W, 1, PRO, SECOND>(p, block, stream);
  if (vpt == 2)
    return launch_registers_at<T, W, 2, PRO, SECOND>(p, block, stream);
  return launch_registers_at<T, W, 4, PRO, SECOND>(p, block, stream);
}

/* The register kernel's shape for this call, or false when it cannot take it. */
static bool register_shape(const ignis_quant_params *p, size_t elem, int *vpt, dim3 *block) {
  const int64_t rows = p->num_rows_outer * p->num_rows_inner;
  if (p->hidden % CHUNK != 0 || rows > INT32_MAX || p->hidden / CHUNK > (int64_t)BLOCK_THREADS * MAX_VPT)
    return false;
  if (!rows_aligned(p->input, p->input_layout, p, elem) || !rows_aligned(p->out, p->out_layout, p, 1))
    return false;
  if (p->residual && !rows_aligned(p->residual, p->residual_layout, p, elem))
    return false;
  if (p->normed_out && !rows_aligned(p->normed_out, p->normed_layout, p, elem))
    return false;
  if (p->prologue == IGNIS_QUANT_SILU_MUL && p->hidden * (int64_t)elem % 16 != 0)
    return false;
  if ((uintptr_t)p->weight % 16 != 0 || (uintptr_t)p->bias % 16 != 0)
    return false;
  const int64_t chunks = p->hidden / CHUNK;
  int v = 1;
  while (v < MAX_VPT && (chunks + v - 1) / v > BLOCK_THREADS)
    v <<= 1;
  const int64_t need = (chunks + v - 1) / v;
  const int group = need <= 32 ? next_pow2(need) : (int)((need + 31) / 32 * 32);
  if (p->scale_mode == IGNIS_QUANT_SCALE_GROUP && p->group_size != p->hidden) {
    const int64_t gc = p->group_size / CHUNK;
    if (p->group_size % CHUNK != 0 || gc > 32 || (gc & (gc - 1)) != 0 || group % gc != 0)
      return false;
  }
  *vpt = v;
  *block = dim3(group, group <= 32 ? BLOCK_THREADS / group : 1);
  return true;
}

template <typename T, typename W>
static cudaError_t launch_for(const ignis_quant_params *p, cudaStream_t stream) {
  int vpt;
  dim3 block;
  if (register_shape(p, sizeof(T), &vpt, &block)) {
    if (p->prologue == IGNIS_QUANT_SILU_MUL)
      return launch_registers<T, W, PRO_SILU, true>(p, vpt, block, stream);
    if (p->prologue == IGNIS_QUANT_PLAIN)
      return launch_registers<T, W, PRO_PLAIN, false>(p, vpt, block, stream);
    if (p->residual)
      return launch_registers<T, W, PRO_NORM, true>(p, vpt, block, stream);
    return launch_registers<T, W, PRO_NORM, false>(p, vpt, block, stream);
  }
  const int64_t rows = p->num_rows_outer * p->num_rows_inner;
  const dim3 grid((unsigned)(rows < LOOPED_GRID_LIMIT ? rows : LOOPED_GRID_LIMIT));
  return ignis_launch(quant_rows_looped<T, W>, grid, dim3(BLOCK_THREADS), 0, stream, *p);
}

/* The weight dtype matters only for the norm prologue. */
template <typename T> static cudaError_t launch_for_weight(const ignis_quant_params *p, cudaStream_t stream) {
  if (p->prologue == IGNIS_QUANT_NORM && p->weight_dtype == IGNIS_F32)
    return launch_for<T, float>(p, stream);
  return launch_for<T, T>(p, stream);
}

extern "C" ignis_status ignis_cuda_quant(const ignis_quant_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  switch (params->dtype) {
  case IGNIS_F32:
    err = launch_for<float, float>(params, s);
    break;
  case IGNIS_F16:
    err = launch_for_weight<__half>(params, s);
    break;
  case IGNIS_BF16:
    err = launch_for_weight<__nv_bfloat16>(params, s);
    break;
  default:
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_cuda_quant: dtype %s reached the CUDA backend",
                           ignis_dtype_name(params->dtype));
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis_cuda_quant: kernel launch failed: %s",
                           cudaGetErrorString(err));
  }
  return ignis_check_launch("ignis_cuda_quant");
}

extern "C" ignis_status ignis_cuda_quant_absmax_begin(float *scale, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  IGNIS_CUDA_CHECK(cudaMemsetAsync(scale, 0, sizeof(float), static_cast<cudaStream_t>(stream)));
  return IGNIS_OK;
}

extern "C" ignis_status ignis_cuda_quant_absmax_finish(float *scale, float min_absmax, float fp8_max,
                                                       int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaError_t err = ignis_launch(absmax_to_scale, dim3(1), dim3(1), 0, static_cast<cudaStream_t>(stream),
                                 scale, min_absmax, fp8_max);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis_cuda_quant: absmax kernel launch failed: %s",
                           cudaGetErrorString(err));
  }
  return ignis_check_launch("ignis_cuda_quant_absmax_finish");
}
