/* CUDA backend of the norm ops (include/ignis/norm.h): RMSNorm, Gemma RMSNorm (weight + 1), fused
 * residual add + RMSNorm and LayerNorm, with the math of src/cpu/norm.c: f32 arithmetic, the fused
 * sum x + residual kept in f32 for the norm and stored rounded to residual, LayerNorm's mean and
 * variance in two passes.
 *
 * Rows to threads: the leading dimensions form a 2-level row index (core/params.h). A block of
 * (G, R) threads has R row slots of G threads each. Short rows get G <= 32, a power of two, so a
 * slot is an aligned slice of one warp and reduces with shuffles; R = 256 / G. Longer rows get
 * R = 1 and G = 64..1024 threads reducing through shared memory.
 *
 * Vector path, when hidden is a multiple of 16 / sizeof(T) and every row, the weight and the bias
 * start 16-byte aligned (checked on the host): norm_rows_in_registers, one block per group of rows
 * (not a persistent grid: blocks start and finish at their own pace instead of loading and
 * computing in lock step, which keeps more requests in flight). Thread x of a slot holds the row's
 * 16-byte vectors x, x + G, ... (VPT of them, a compile-time 1, 2 or 4) in registers as loaded, 4
 * registers per vector, and converts them to f32 where they are used: every load of the thread is
 * issued before the first use (the weight and bias lines are prefetched into L1 meanwhile), so the
 * row is read once with streaming loads, reduced, scaled and written, and the kernel moves only the
 * bytes the op must move. Rows of up to 2048 vectors (hidden 16384 in f16/bf16, 8192 in f32) fit.
 * Bytes in flight bound the bandwidth. The fused form holds two vectors per column (input and
 * residual) of one row; the unfused forms, when there are many rows, give each slot two rows
 * (ROWS = 2: the thread holds the same columns of both), so they keep as many bytes in flight per
 * register as the fused form, reduce both rows' sums in one pass (the barriers of one sum) and
 * read each weight (and bias) vector once for both rows. With many rows (at least twice the SMs)
 * rows longer than 128 vectors take VPT = 4, the most data per register; with fewer rows VPT is
 * the smallest that keeps G <= 512 and a slot holds one row, so each thread's chain of dependent
 * steps is short (latency-bound shapes). Rows of up to 128 vectors stay within a warp.
 *
 * Everything else (any hidden, any alignment, longer rows, more than 2^31 - 1 rows):
 * norm_rows_looped strides over the row in chunks (16-byte vectors when the vector conditions hold,
 * else single elements) and reads it again for each pass; the later passes mostly hit L1/L2. Its
 * grid, one block per R rows, is clamped to the grid limit and the blocks loop over the rest. In
 * the fused form the f32 sum is formed again, bit for bit, in the last pass and stored to residual
 * only there.
 *
 * Both kernels are launched with ignis_launch (programmatic dependent launch on sm_90+, see
 * cuda_common.cuh): they call ignis_pdl_wait() before their first global access; the register
 * kernel calls ignis_pdl_launch_dependents() once a block has issued its loads, the looped one
 * leaves the trigger to its exit. */
#include "cuda/common/cuda_common.cuh"

enum {
  SHORT_ROW_BLOCK_THREADS = 256, /* G * R when G <= 32 */
  MAX_REGISTER_GROUP = 512,      /* the largest G of norm_rows_in_registers */
  MAX_LOOPED_GROUP = 1024,       /* the largest G of norm_rows_looped */
  MAX_VECS_PER_THREAD = 4,       /* the largest VPT */
  LOOPED_CHUNKS_PER_THREAD = 8   /* chunks per thread and pass the looped kernel is sized for */
};

/* Sums over the G = blockDim.x threads of a row slot, ROWS of them at once (one per row the slot
 * holds), in place. G <= 32 is a power of two, so a slot is an aligned slice of a warp; a larger G
 * spans the whole block (blockDim.y == 1) and reduces through scratch[parity], flipping parity:
 * consecutive calls use the two halves in turn, so one barrier per call suffices (a half is
 * rewritten only after every thread has passed the next call's barrier, hence finished reading
 * it). Every thread of the block must call it. */
template <int ROWS>
__device__ __forceinline__ void row_sums(float (&x)[ROWS], float (&scratch)[2][32][ROWS], int &parity) {
  if (blockDim.x <= 32) {
    for (int offset = blockDim.x >> 1; offset > 0; offset >>= 1)
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        x[r] += __shfl_xor_sync(0xffffffffu, x[r], offset);
    return;
  }
  float(*half)[ROWS] = scratch[parity];
  parity ^= 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
    x[r] = ignis_warp_sum(x[r]);
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      half[warp][r] = x[r];
  __syncthreads();
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
    x[r] = ignis_warp_sum(lane < num_warps ? half[lane][r] : 0.0f);
}

/* y[r] = (x[r] - mean[r]) * rstd[r] * (weight + weight_offset) [+ bias] for the N elements at h of
 * ROWS rows: each weight (and bias) element is read once for all the rows, one 16-byte weight
 * vector (or, for N below that, the N elements) at a time, so few weight registers are live. */
template <typename W, int ROWS, int N>
__device__ __forceinline__ void normalize(const ignis_norm_params &p, int64_t h, const float (&x)[ROWS][N],
                                          const float (&mean)[ROWS], const float (&rstd)[ROWS],
                                          float (&y)[ROWS][N]) {
  constexpr int PIECE = ignis_vec<W>::size < N ? ignis_vec<W>::size : N;
  static_assert(N % PIECE == 0, "whole pieces");
  const W *weight = static_cast<const W *>(p.weight), *bias = static_cast<const W *>(p.bias);
#pragma unroll
  for (int q = 0; q < N; q += PIECE) {
    float w[PIECE];
    ignis_load_floats<IGNIS_CACHE_READ_ONLY>(weight + h + q, w);
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
#pragma unroll
      for (int k = 0; k < PIECE; ++k)
        y[r][q + k] = (x[r][q + k] - mean[r]) * rstd[r] * (w[k] + p.weight_offset);
    if (p.bias) {
      float b[PIECE];
      ignis_load_floats<IGNIS_CACHE_READ_ONLY>(bias + h + q, b);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int k = 0; k < PIECE; ++k)
          y[r][q + k] += b[k];
    }
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

template <typename T>
__device__ __forceinline__ T *row_pointer(const void *base, int64_t row, int64_t num_rows_inner,
                                          ignis_row_layout layout) {
  int64_t outer, inner;
  ignis_split_row(row, num_rows_inner, &outer, &inner);
  return const_cast<T *>(static_cast<const T *>(base)) + ignis_row_offset(outer, inner, layout);
}

/* Block b, slot y holds rows b * R * ROWS + y + r * R, r < ROWS (ROWS = 1 in the fused form, whose
 * residual doubles the registers per column instead). */
template <typename T, typename W, int VPT, int ROWS, bool FUSED>
__global__ void __launch_bounds__(MAX_REGISTER_GROUP, 2) norm_rows_in_registers(ignis_norm_params p) {
  static_assert(!FUSED || ROWS == 1, "the fused form holds one row per slot");
  constexpr int VEC = ignis_vec<T>::size;
  __shared__ float scratch[2][32][ROWS];
  int parity = 0;
  const int64_t rows = p.num_rows_outer * p.num_rows_inner;
  const int num_vecs = (int)(p.hidden / VEC);
  const float inv_hidden = 1.0f / (float)p.hidden;
  ignis_pdl_wait();

  int64_t row[ROWS];
  bool valid[ROWS][VPT]; /* valid[r][j] implies valid[0][j]: row[0] is the smallest */
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    row[r] = ((int64_t)blockIdx.x * ROWS + r) * blockDim.y + threadIdx.y;
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      valid[r][j] = row[r] < rows && (int)(threadIdx.x + j * blockDim.x) < num_vecs;
  }

  /* Issue every load (input, residual) before using any of it; the weight and bias lines go to L1
   * meanwhile. Vectors past the row (or of a row past the end) are zero. Column offsets fit in 32
   * bits (hidden <= 16384). */
  uint4 in[ROWS][VPT], res[FUSED ? VPT : 1];
  T *out[ROWS], *res_row = nullptr;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    int64_t outer, inner;
    ignis_split_row(row[r], p.num_rows_inner, &outer, &inner);
    const T *in_row = static_cast<const T *>(p.input) + ignis_row_offset(outer, inner, p.input_layout);
    out[r] = static_cast<T *>(p.out) + ignis_row_offset(outer, inner, p.out_layout);
    if (FUSED)
      res_row = static_cast<T *>(p.residual) + ignis_row_offset(outer, inner, p.residual_layout);
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      const int h = (int)(threadIdx.x + j * blockDim.x) * VEC;
      in[r][j] = make_uint4(0, 0, 0, 0);
      if (FUSED)
        res[j] = make_uint4(0, 0, 0, 0);
      if (valid[r][j]) {
        in[r][j] = __ldcs(reinterpret_cast<const uint4 *>(in_row + h));
        if (FUSED)
          res[j] = __ldcs(reinterpret_cast<const uint4 *>(res_row + h));
      }
    }
  }
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (valid[0][j]) {
      const int h = (int)(threadIdx.x + j * blockDim.x) * VEC;
      prefetch_l1(static_cast<const W *>(p.weight) + h);
      if (p.bias)
        prefetch_l1(static_cast<const W *>(p.bias) + h);
    }
  ignis_pdl_launch_dependents();

  if (FUSED) {
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (valid[0][j]) {
        float x[VEC];
        row_vector<T>(in[0][j], res[FUSED ? j : 0], true, x);
        ignis_store_floats(res_row + (int)(threadIdx.x + j * blockDim.x) * VEC, x);
      }
  }

  float mean[ROWS], sum[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
    mean[r] = 0.0f;
  if (p.kind == IGNIS_NORM_LAYER) {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      sum[r] = 0.0f; /* the zeros of vectors past the row add nothing */
#pragma unroll
      for (int j = 0; j < VPT; ++j) {
        float x[VEC];
        row_vector<T>(in[r][j], res[FUSED ? j : 0], FUSED, x);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          sum[r] += x[k];
      }
    }
    row_sums<ROWS>(sum, scratch, parity);
#pragma unroll
    for (int r = 0; r < ROWS; ++r)
      mean[r] = sum[r] * inv_hidden;
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    sum[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (valid[r][j]) {
        float x[VEC];
        row_vector<T>(in[r][j], res[FUSED ? j : 0], FUSED, x);
#pragma unroll
        for (int k = 0; k < VEC; ++k)
          sum[r] += (x[k] - mean[r]) * (x[k] - mean[r]);
      }
  }
  row_sums<ROWS>(sum, scratch, parity);
  float rstd[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
    rstd[r] = rsqrtf(sum[r] * inv_hidden + p.eps);

#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (valid[0][j]) {
      const int h = (int)(threadIdx.x + j * blockDim.x) * VEC;
      float x[ROWS][VEC], y[ROWS][VEC];
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        row_vector<T>(in[r][j], res[FUSED ? j : 0], FUSED, x[r]);
      normalize<W>(p, h, x, mean, rstd, y);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        if (valid[r][j])
          ignis_store_floats(out[r] + h, y[r]);
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

/* Sum over the G = blockDim.x threads of a row slot with one scratch buffer and ignis_block_sum's
 * trailing barrier (the alternating halves of row_sums cost registers under this kernel's
 * 1024-thread bound). */
__device__ __forceinline__ float row_sum_one_buffer(float x, float *scratch) {
  if (blockDim.x > 32)
    return ignis_block_sum(x, scratch);
  for (int offset = blockDim.x >> 1; offset > 0; offset >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

template <typename T, typename W, int N>
__global__ void __launch_bounds__(MAX_LOOPED_GROUP) norm_rows_looped(ignis_norm_params p) {
  __shared__ float scratch[32];
  const int64_t rows = p.num_rows_outer * p.num_rows_inner;
  const int64_t num_chunks = p.hidden / N;
  const float inv_hidden = 1.0f / (float)p.hidden;
  const bool layer = p.kind == IGNIS_NORM_LAYER;
  ignis_pdl_wait();
  for (int64_t first = (int64_t)blockIdx.x * blockDim.y; first < rows;
       first += (int64_t)gridDim.x * blockDim.y) {
    const int64_t row = first + threadIdx.y;
    const int64_t row_chunks = row < rows ? num_chunks : 0;
    const T *in = row_pointer<T>(p.input, row, p.num_rows_inner, p.input_layout);
    T *res = p.residual ? row_pointer<T>(p.residual, row, p.num_rows_inner, p.residual_layout) : nullptr;
    T *out = row_pointer<T>(p.out, row, p.num_rows_inner, p.out_layout);

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
      mean = row_sum_one_buffer(acc, scratch) * inv_hidden;
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
    const float rstd = rsqrtf(row_sum_one_buffer(acc, scratch) * inv_hidden + p.eps);

    /* Last pass: the same thread reads and writes each chunk, so in-place out and residual are safe. */
#pragma unroll 4
    for (int64_t c = threadIdx.x; c < row_chunks; c += blockDim.x) {
      float x[1][N], y[1][N];
      const float means[1] = {mean}, rstds[1] = {rstd};
      load_row_chunk<IGNIS_CACHE_STREAM>(in, res, c, x[0]);
      if (res)
        ignis_store_floats(res + c * N, x[0]);
      normalize<W>(p, c * N, x, means, rstds, y);
      ignis_store_floats(out + c * N, y[0]);
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

/* G threads per row slot and R slots per block for rows of `units` chunks, `per_thread` chunks each. */
static dim3 row_block(int64_t units, int per_thread, int max_group) {
  const int64_t need = (units + per_thread - 1) / per_thread;
  if (need <= 32) {
    const int group = next_pow2(need);
    return dim3(group, SHORT_ROW_BLOCK_THREADS / group);
  }
  const int64_t group = (need + 31) / 32 * 32;
  return dim3((unsigned)(group < max_group ? group : max_group), 1);
}

/* One block per group of R * rows_per_slot rows, clamped to the grid limit (only the looped kernel
 * gets that many rows: it loops over the rest). */
static dim3 row_grid(const ignis_norm_params *p, dim3 block, int rows_per_slot) {
  const int64_t rows = p->num_rows_outer * p->num_rows_inner;
  const int64_t per_block = (int64_t)block.y * rows_per_slot;
  const int64_t blocks = (rows + per_block - 1) / per_block;
  return dim3((unsigned)(blocks < INT32_MAX ? blocks : INT32_MAX));
}

/* Vectors per thread of the register kernel. Short rows (<= 128 vectors) stay within one warp.
 * Longer ones take 4 when there are many rows: bandwidth-bound, and 4 holds the most data per
 * register (half of the 64 a thread gets), so the most bytes in flight per SM. With few rows
 * (latency-bound) they take the fewest that keep a slot's group at <= 512 threads, so each
 * thread's chain of dependent steps is short. */
static int vectors_per_thread(int64_t num_vecs, bool many_rows) {
  if (num_vecs <= 128)
    return num_vecs <= 32 ? 1 : num_vecs <= 64 ? 2 : 4;
  if (many_rows)
    return 4;
  return num_vecs <= 512 ? 1 : num_vecs <= 1024 ? 2 : 4;
}

/* The fused form holds one row per slot; the unfused forms two when there are many rows. */
template <typename T, typename W, int VPT>
static cudaError_t launch_in_registers(const ignis_norm_params *p, dim3 block, bool many_rows, cudaStream_t stream) {
  if (p->residual)
    return ignis_launch(norm_rows_in_registers<T, W, VPT, 1, true>, row_grid(p, block, 1), block, 0, stream, *p);
  if (many_rows)
    return ignis_launch(norm_rows_in_registers<T, W, VPT, 2, false>, row_grid(p, block, 2), block, 0, stream, *p);
  return ignis_launch(norm_rows_in_registers<T, W, VPT, 1, false>, row_grid(p, block, 1), block, 0, stream, *p);
}

template <typename T, typename W>
static cudaError_t launch_norm(const ignis_norm_params *p, int device, cudaStream_t stream) {
  constexpr int VEC = ignis_vec<T>::size;
  const bool vector =
      p->hidden % VEC == 0 &&
      ignis_rows_aligned16(p->input, p->input_layout, p->num_rows_outer, p->num_rows_inner, sizeof(T)) &&
      ignis_rows_aligned16(p->out, p->out_layout, p->num_rows_outer, p->num_rows_inner, sizeof(T)) &&
      (!p->residual || ignis_rows_aligned16(p->residual, p->residual_layout, p->num_rows_outer,
                                            p->num_rows_inner, sizeof(T))) &&
      (uintptr_t)p->weight % 16 == 0 && (uintptr_t)p->bias % 16 == 0;
  const int64_t num_vecs = p->hidden / VEC, rows = p->num_rows_outer * p->num_rows_inner;
  if (vector && num_vecs <= (int64_t)MAX_REGISTER_GROUP * MAX_VECS_PER_THREAD && rows <= INT32_MAX) {
    const bool many_rows = rows >= 2 * (int64_t)ignis_cuda_sm_count(device);
    const int vpt = vectors_per_thread(num_vecs, many_rows);
    const dim3 block = row_block(num_vecs, vpt, MAX_REGISTER_GROUP);
    if (vpt == 1)
      return launch_in_registers<T, W, 1>(p, block, many_rows, stream);
    if (vpt == 2)
      return launch_in_registers<T, W, 2>(p, block, many_rows, stream);
    return launch_in_registers<T, W, 4>(p, block, many_rows, stream);
  }
  if (vector) {
    const dim3 block = row_block(num_vecs, LOOPED_CHUNKS_PER_THREAD, MAX_LOOPED_GROUP);
    return ignis_launch(norm_rows_looped<T, W, VEC>, row_grid(p, block, 1), block, 0, stream, *p);
  }
  const dim3 block = row_block(p->hidden, LOOPED_CHUNKS_PER_THREAD, MAX_LOOPED_GROUP);
  return ignis_launch(norm_rows_looped<T, W, 1>, row_grid(p, block, 1), block, 0, stream, *p);
}

extern "C" ignis_status ignis_cuda_norm(const ignis_norm_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool f32_weight = params->weight_dtype == IGNIS_F32;
  cudaError_t err = cudaSuccess;
  switch (params->dtype) {
  case IGNIS_F32:
    err = launch_norm<float, float>(params, device, s);
    break;
  case IGNIS_F16:
    err = f32_weight ? launch_norm<__half, float>(params, device, s) : launch_norm<__half, __half>(params, device, s);
    break;
  case IGNIS_BF16:
    err = f32_weight ? launch_norm<__nv_bfloat16, float>(params, device, s)
                     : launch_norm<__nv_bfloat16, __nv_bfloat16>(params, device, s);
    break;
  default:
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_cuda_norm: dtype %s reached the CUDA backend",
                           ignis_dtype_name(params->dtype));
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis_cuda_norm: kernel launch failed: %s", cudaGetErrorString(err));
  }
  return ignis_check_launch("ignis_cuda_norm");
}
