/* CUDA backend of the norm ops (include/ignis/norm.h): RMSNorm, Gemma RMSNorm (weight + 1), fused
 * residual add + RMSNorm and LayerNorm, with the math of src/cpu/norm.c: f32 arithmetic, the fused
 * sum x + residual kept in f32 for the norm and stored rounded to residual, LayerNorm's mean and
 * variance in two passes.
 *
 * Rows to threads: the leading dimensions form a 2-level row index (core/params.h). A block of
 * (G, R) threads normalizes R rows at a time with G threads per row and steps over the rows in a
 * grid-stride loop. Short rows get G <= 32, a power of two, so a row belongs to an aligned slice of
 * one warp and is reduced with shuffles; R = 256 / G. Longer rows get R = 1 and G = 64..1024 threads
 * reducing through shared memory (ignis_block_sum).
 *
 * Vector path, when hidden is a multiple of 16 / sizeof(T) and every row, the weight and the bias
 * start 16-byte aligned (checked on the host): norm_rows_in_registers. Thread x of a row holds the
 * row's 16-byte vectors x, x + G, ... (VPT of them, a compile-time 1, 2 or 4) in registers as
 * loaded, 4 registers per vector, and converts them to f32 where they are used: the row is read
 * from memory once with streaming loads (all of a thread's loads issued before the first use, the
 * weight lines prefetched into L1 meanwhile), reduced, scaled and written, so the kernel moves only
 * the bytes the op must move. Rows of up to 2048 vectors (hidden 16384 in f16/bf16, 8192 in f32)
 * fit; VPT is the smallest that keeps G <= 256 (<= 512 past 1024 vectors).
 *
 * Everything else (any hidden, any alignment, longer rows): norm_rows_looped strides over the row in
 * chunks (16-byte vectors when the vector conditions hold, else single elements) and reads it again
 * for each pass; the later passes mostly hit L1/L2. In the fused form the f32 sum is formed again,
 * bit for bit, in the last pass and stored to residual only there. */
#include "cuda/common/cuda_common.cuh"

enum {
  SHORT_ROW_BLOCK_THREADS = 256, /* G * R when G <= 32 */
  MAX_REGISTER_GROUP = 512,      /* the largest G of norm_rows_in_registers */
  MAX_LOOPED_GROUP = 1024,       /* the largest G of norm_rows_looped */
  MAX_VECS_PER_THREAD = 4,       /* the largest VPT */
  LOOPED_CHUNKS_PER_THREAD = 8   /* chunks per thread and pass the looped kernel is sized for */
};

/* Sum over the G = blockDim.x threads of one row. G <= 32 is a power of two, so a row is an aligned
 * slice of a warp; a larger G spans the whole block (blockDim.y == 1). Every thread of the block
 * must call it. */
__device__ __forceinline__ float row_sum(float x, float *scratch) {
  if (blockDim.x > 32)
    return ignis_block_sum(x, scratch);
  for (int offset = blockDim.x >> 1; offset > 0; offset >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

/* y = (x - mean) * rstd * (weight + weight_offset) [+ bias] for the N elements at h. */
template <typename W, int N>
__device__ __forceinline__ void normalize(const ignis_norm_params &p, int64_t h, const float (&x)[N],
                                          float mean, float rstd, float (&y)[N]) {
  float w[N];
  ignis_load_floats<IGNIS_CACHE_READ_ONLY>(static_cast<const W *>(p.weight) + h, w);
#pragma unroll
  for (int k = 0; k < N; ++k)
    y[k] = (x[k] - mean) * rstd * (w[k] + p.weight_offset);
  if (p.bias) {
    float b[N];
    ignis_load_floats<IGNIS_CACHE_READ_ONLY>(static_cast<const W *>(p.bias) + h, b);
#pragma unroll
    for (int k = 0; k < N; ++k)
      y[k] += b[k];
  }
}

/* Vector j of the row as f32: the input, plus the residual in the fused form (the same f32 sum
 * every time it is formed). */
template <typename T>
__device__ __forceinline__ void row_vector(uint4 in, uint4 res, bool fused, float (&x)[16 / sizeof(T)]) {
  ignis_raw_to_floats<T>(in, x);
  if (fused) {
    float r[16 / sizeof(T)];
    ignis_raw_to_floats<T>(res, r);
#pragma unroll
    for (int k = 0; k < ignis_vec<T>::size; ++k)
      x[k] += r[k];
  }
}

/* Ask L1 for the line holding ptr without waiting for it (CCTL.E.PF1). */
__device__ __forceinline__ void prefetch_l1(const void *ptr) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(ptr));
}

template <typename T, typename W, int VPT>
__global__ void __launch_bounds__(MAX_REGISTER_GROUP, 2) norm_rows_in_registers(ignis_norm_params p) {
  constexpr int VEC = ignis_vec<T>::size;
  __shared__ float scratch[32];
  const int64_t rows = p.num_rows_outer * p.num_rows_inner;
  const int num_vecs = (int)(p.hidden / VEC);
  const float inv_hidden = 1.0f / (float)p.hidden;
  const W *weight = static_cast<const W *>(p.weight), *bias = static_cast<const W *>(p.bias);
  for (int64_t first = (int64_t)blockIdx.x * blockDim.y; first < rows;
       first += (int64_t)gridDim.x * blockDim.y) {
    const int64_t row = first + threadIdx.y;
    int64_t outer, inner;
    ignis_split_row(row, p.num_rows_inner, &outer, &inner);
    const T *in = static_cast<const T *>(p.input) + ignis_row_offset(outer, inner, p.input_layout);
    T *res = p.residual ? static_cast<T *>(p.residual) + ignis_row_offset(outer, inner, p.residual_layout)
                        : nullptr;
    T *out = static_cast<T *>(p.out) + ignis_row_offset(outer, inner, p.out_layout);
    bool valid[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      valid[j] = row < rows && (int)threadIdx.x + j * (int)blockDim.x < num_vecs;

    /* Issue every load of the row (input, residual) before using any of it, and have the weight
     * (and bias) lines on their way to L1 for the last step. The row stays in registers as
     * loaded, 4 registers per 16-byte vector; vectors past the row are zero. */
    uint4 in_vec[VPT], res_vec[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int64_t h = (int64_t)(threadIdx.x + j * blockDim.x) * VEC;
      in_vec[j] = res_vec[j] = make_uint4(0, 0, 0, 0);
      if (valid[j]) {
        in_vec[j] = __ldcs(reinterpret_cast<const uint4 *>(in + h));
        if (res)
          res_vec[j] = __ldcs(reinterpret_cast<const uint4 *>(res + h));
        prefetch_l1(weight + h);
        if (bias)
          prefetch_l1(bias + h);
      }
    }
    if (res) {
#pragma unroll
      for (int j = 0; j < VPT; ++j)
        if (valid[j]) {
          float x[VEC];
          row_vector<T>(in_vec[j], res_vec[j], true, x);
          ignis_store_floats(res + (int64_t)(threadIdx.x + j * blockDim.x) * VEC, x);
        }
    }

    float mean = 0.0f;
    if (p.kind == IGNIS_NORM_LAYER) {
      float sum = 0.0f; /* the zeros of vectors past the row add nothing */
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        float x[VEC];
        row_vector<T>(in_vec[j], res_vec[j], res != nullptr, x);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          sum += x[k];
      }
      mean = row_sum(sum, scratch) * inv_hidden;
    }
    float sum_sq = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (valid[j]) {
        float x[VEC];
        row_vector<T>(in_vec[j], res_vec[j], res != nullptr, x);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          sum_sq += (x[k] - mean) * (x[k] - mean);
      }
    const float rstd = rsqrtf(row_sum(sum_sq, scratch) * inv_hidden + p.eps);

#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (valid[j]) {
        const int64_t h = (int64_t)(threadIdx.x + j * blockDim.x) * VEC;
        float x[VEC], y[VEC];
        row_vector<T>(in_vec[j], res_vec[j], res != nullptr, x);
        normalize<W>(p, h, x, mean, rstd, y);
        ignis_store_floats(out + h, y);
      }
  }
}

/* Chunk c of the row as f32: input, plus the residual in the fused form. */
template <int HINT, typename T, int N>
__device__ __forceinline__ void load_row_chunk(const T *in, const T *res, int64_t c, float (&x)[N]) {
  ignis_load_floats<HINT>(in + c * N, x);
  if (res) {
    float r[N];
    ignis_load_floats<HINT>(res + c * N, r);
#pragma unroll
    for (int k = 0; k < N; ++k)
      x[k] += r[k];
  }
}

template <typename T, typename W, int N>
__global__ void __launch_bounds__(MAX_LOOPED_GROUP) norm_rows_looped(ignis_norm_params p) {
  __shared__ float scratch[32];
  const int64_t rows = p.num_rows_outer * p.num_rows_inner;
  const int64_t num_chunks = p.hidden / N;
  const float inv_hidden = 1.0f / (float)p.hidden;
  const bool layer = p.kind == IGNIS_NORM_LAYER;
  for (int64_t first = (int64_t)blockIdx.x * blockDim.y; first < rows;
       first += (int64_t)gridDim.x * blockDim.y) {
    const int64_t row = first + threadIdx.y;
    const int64_t row_chunks = row < rows ? num_chunks : 0;
    int64_t outer, inner;
    ignis_split_row(row, p.num_rows_inner, &outer, &inner);
    const T *in = static_cast<const T *>(p.input) + ignis_row_offset(outer, inner, p.input_layout);
    T *res = p.residual ? static_cast<T *>(p.residual) + ignis_row_offset(outer, inner, p.residual_layout)
                        : nullptr;
    T *out = static_cast<T *>(p.out) + ignis_row_offset(outer, inner, p.out_layout);

    /* Pass 1: sum of squares (RMS) or sum (LayerNorm). */
    float acc = 0.0f;
#pragma unroll 4
    for (int64_t c = threadIdx.x; c < row_chunks; c += blockDim.x) {
      float x[N];
      load_row_chunk<IGNIS_CACHE_DEFAULT>(in, res, c, x);
#pragma unroll
      for (int k = 0; k < N; ++k)
        acc += layer ? x[k] : x[k] * x[k];
    }
    float mean = 0.0f;
    if (layer) {
      mean = row_sum(acc, scratch) * inv_hidden;
      acc = 0.0f;
#pragma unroll 4
      for (int64_t c = threadIdx.x; c < row_chunks; c += blockDim.x) {
        float x[N];
        load_row_chunk<IGNIS_CACHE_DEFAULT>(in, res, c, x);
#pragma unroll
        for (int k = 0; k < N; ++k)
          acc += (x[k] - mean) * (x[k] - mean);
      }
    }
    const float rstd = rsqrtf(row_sum(acc, scratch) * inv_hidden + p.eps);

    /* Last pass: the same thread reads and writes each chunk, so in-place out and residual are safe. */
#pragma unroll 4
    for (int64_t c = threadIdx.x; c < row_chunks; c += blockDim.x) {
      float x[N];
      load_row_chunk<IGNIS_CACHE_STREAM>(in, res, c, x);
      if (res)
        ignis_store_floats(res + c * N, x);
      float y[N];
      normalize<W>(p, c * N, x, mean, rstd, y);
      ignis_store_floats(out + c * N, y);
    }
  }
}

/* ---- host side ---------------------------------------------------------------------------------- */

static int next_pow2(int64_t x) {
  int p = 1;
  while (p < x)
    p <<= 1;
  return p;
}

/* G threads per row and R rows per block for rows of `units` chunks, `per_thread` chunks each. */
static dim3 row_block(int64_t units, int per_thread, int max_group) {
  const int64_t need = (units + per_thread - 1) / per_thread;
  if (need <= 32) {
    const int group = next_pow2(need);
    return dim3(group, SHORT_ROW_BLOCK_THREADS / group);
  }
  const int64_t group = (need + 31) / 32 * 32;
  return dim3((unsigned)(group < max_group ? group : max_group), 1);
}

static dim3 row_grid(const ignis_norm_params *p, dim3 block) {
  const int64_t rows = p->num_rows_outer * p->num_rows_inner;
  const int64_t blocks = (rows + block.y - 1) / block.y;
  return dim3((unsigned)(blocks < INT32_MAX ? blocks : INT32_MAX));
}

/* Vectors per thread of the register kernel: the fewest that keep a row's group at <= 256 threads
 * (<= 512 for the longest rows); short rows (<= 128 vectors) stay within one warp. */
static int vectors_per_thread(int64_t num_vecs) {
  if (num_vecs <= 128)
    return num_vecs <= 32 ? 1 : num_vecs <= 64 ? 2 : 4;
  return num_vecs <= 256 ? 1 : num_vecs <= 512 ? 2 : 4;
}

template <typename T, typename W> static void launch_norm(const ignis_norm_params *p, cudaStream_t stream) {
  constexpr int VEC = ignis_vec<T>::size;
  const bool vector =
      p->hidden % VEC == 0 &&
      ignis_rows_aligned16(p->input, p->input_layout, p->num_rows_outer, p->num_rows_inner, sizeof(T)) &&
      ignis_rows_aligned16(p->out, p->out_layout, p->num_rows_outer, p->num_rows_inner, sizeof(T)) &&
      (!p->residual || ignis_rows_aligned16(p->residual, p->residual_layout, p->num_rows_outer,
                                            p->num_rows_inner, sizeof(T))) &&
      (uintptr_t)p->weight % 16 == 0 && (uintptr_t)p->bias % 16 == 0;
  const int64_t num_vecs = p->hidden / VEC;
  if (vector && num_vecs <= (int64_t)MAX_REGISTER_GROUP * MAX_VECS_PER_THREAD) {
    const int vpt = vectors_per_thread(num_vecs);
    const dim3 block = row_block(num_vecs, vpt, MAX_REGISTER_GROUP);
    const dim3 grid = row_grid(p, block);
    if (vpt == 1)
      norm_rows_in_registers<T, W, 1><<<grid, block, 0, stream>>>(*p);
    else if (vpt == 2)
      norm_rows_in_registers<T, W, 2><<<grid, block, 0, stream>>>(*p);
    else
      norm_rows_in_registers<T, W, 4><<<grid, block, 0, stream>>>(*p);
  } else if (vector) {
    const dim3 block = row_block(num_vecs, LOOPED_CHUNKS_PER_THREAD, MAX_LOOPED_GROUP);
    norm_rows_looped<T, W, VEC><<<row_grid(p, block), block, 0, stream>>>(*p);
  } else {
    const dim3 block = row_block(p->hidden, LOOPED_CHUNKS_PER_THREAD, MAX_LOOPED_GROUP);
    norm_rows_looped<T, W, 1><<<row_grid(p, block), block, 0, stream>>>(*p);
  }
}

extern "C" ignis_status ignis_cuda_norm(const ignis_norm_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool f32_weight = params->weight_dtype == IGNIS_F32;
  switch (params->dtype) {
  case IGNIS_F32:
    launch_norm<float, float>(params, s);
    break;
  case IGNIS_F16:
    f32_weight ? launch_norm<__half, float>(params, s) : launch_norm<__half, __half>(params, s);
    break;
  case IGNIS_BF16:
    f32_weight ? launch_norm<__nv_bfloat16, float>(params, s)
               : launch_norm<__nv_bfloat16, __nv_bfloat16>(params, s);
    break;
  default:
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_cuda_norm: dtype %s reached the CUDA backend",
                           ignis_dtype_name(params->dtype));
  }
  return ignis_check_launch("ignis_cuda_norm");
}
