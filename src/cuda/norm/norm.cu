/* CUDA backend of the norm ops (include/ignis/norm.h): RMSNorm, Gemma RMSNorm (weight + 1), fused
 * residual add + RMSNorm and LayerNorm, with the math of src/cpu/norm.c: f32 arithmetic, the fused
 * sum x + residual kept in f32 for the norm and stored rounded to residual, LayerNorm's mean and
 * variance in two passes.
 *
 * Rows to threads: the leading dimensions form a 2-level row index (core/params.h). A block of
 * (G, R) threads normalizes R rows at a time with G threads per row and steps over the rows in a
 * grid-stride loop. Short rows get G <= 32, a power of two, so a row belongs to an aligned slice of
 * one warp and is reduced with shuffles; R = 256 / G. Longer rows get R = 1 and G = 64..1024 threads
 * reducing through shared memory.
 *
 * Vector path, when hidden is a multiple of 16 / sizeof(T) and every row, the weight and the bias
 * start 16-byte aligned (checked on the host): norm_rows_in_registers. Thread x of a row holds the
 * row's 16-byte vectors x, x + G, ... (VPT of them, a compile-time 1, 2 or 4) in registers as
 * loaded, 4 registers per vector, and converts them to f32 where they are used: the row is read
 * from memory once with streaming loads, reduced, scaled and written, so the kernel moves only the
 * bytes the op must move. Rows of up to 2048 vectors (hidden 16384 in f16/bf16, 8192 in f32) fit.
 * VPT is the smallest that keeps G <= 256 (<= 512 past 1024 vectors); with fewer rows than twice
 * the SMs it is the smallest that keeps G <= 512, so each thread's chain of dependent steps is short.
 * The grid is persistent when the rows outnumber the resident blocks: as many blocks as fit on the
 * GPU (occupancy, cached per kernel and configuration), each looping over its rows. Such a block
 * stages the weight (and bias), in their own dtype, once in dynamic shared memory instead of
 * reading them from L1/L2 for every row, unless that would cost more than half the resident blocks;
 * otherwise weight lines are prefetched into L1 while the row loads. Without the fused residual the
 * loop is software-pipelined: a block issues the loads of its next row before it reduces and writes
 * the current one (two rows in registers), so loads stay in flight through the reductions and
 * stores. The fused form already has twice the loads in flight per row and keeps one row.
 *
 * Everything else (any hidden, any alignment, longer rows): norm_rows_looped strides over the row in
 * chunks (16-byte vectors when the vector conditions hold, else single elements) and reads it again
 * for each pass; the later passes mostly hit L1/L2. In the fused form the f32 sum is formed again,
 * bit for bit, in the last pass and stored to residual only there.
 *
 * Both kernels are launched with ignis_launch (programmatic dependent launch on sm_90+, see
 * cuda_common.cuh): they call ignis_pdl_wait() before their first global access; the register
 * kernel calls ignis_pdl_launch_dependents() once a block has issued the loads of its last rows, the
 * looped one leaves the trigger to its exit. */
#include "cuda/common/cuda_common.cuh"

enum {
  SHORT_ROW_BLOCK_THREADS = 256, /* G * R when G <= 32 */
  MAX_REGISTER_GROUP = 512,      /* the largest G of norm_rows_in_registers */
  MAX_LOOPED_GROUP = 1024,       /* the largest G of norm_rows_looped */
  MAX_VECS_PER_THREAD = 4,       /* the largest VPT */
  LOOPED_CHUNKS_PER_THREAD = 8   /* chunks per thread and pass the looped kernel is sized for */
};

/* Sum over the G = blockDim.x threads of one row. G <= 32 is a power of two, so a row is an aligned
 * slice of a warp; a larger G spans the whole block (blockDim.y == 1) and reduces through
 * scratch[parity], flipping parity: consecutive sums use the two halves in turn, so one barrier per
 * sum suffices (a half is rewritten only after every thread has passed the next sum's barrier, hence
 * finished reading it). Every thread of the block must call it. */
__device__ __forceinline__ float row_sum(float x, float (&scratch)[2][32], int &parity) {
  if (blockDim.x <= 32) {
    for (int offset = blockDim.x >> 1; offset > 0; offset >>= 1)
      x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
  }
  float *half = scratch[parity];
  parity ^= 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = blockDim.x >> 5;
  x = ignis_warp_sum(x);
  if (lane == 0)
    half[warp] = x;
  __syncthreads();
  return ignis_warp_sum(lane < num_warps ? half[lane] : 0.0f);
}

/* y = (x - mean) * rstd * (weight + weight_offset) [+ bias] for the N elements at h; weight and
 * bias read from global memory (HINT read-only) or from their staged copies in shared memory. */
template <int HINT, typename W, int N>
__device__ __forceinline__ void normalize(const ignis_norm_params &p, const W *weight, const W *bias, int64_t h,
                                          const float (&x)[N], float mean, float rstd, float (&y)[N]) {
  float w[N];
  ignis_load_floats<HINT>(weight + h, w);
#pragma unroll
  for (int k = 0; k < N; ++k)
    y[k] = (x[k] - mean) * rstd * (w[k] + p.weight_offset);
  if (bias) {
    float b[N];
    ignis_load_floats<HINT>(bias + h, b);
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

/* The 16-byte vectors of one row a thread holds, as loaded: input, and residual in the fused form. */
template <int VPT, bool FUSED> struct row_registers {
  uint4 in[VPT];
  uint4 res[FUSED ? VPT : 1];
};

template <typename T>
__device__ __forceinline__ const T *row_pointer(const void *base, int64_t row, int64_t num_rows_inner,
                                                ignis_row_layout layout) {
  int64_t outer, inner;
  ignis_split_row(row, num_rows_inner, &outer, &inner);
  return static_cast<const T *>(base) + ignis_row_offset(outer, inner, layout);
}

/* Issue the streaming loads of this thread's vectors of `row`; vectors past the row (or of a row
 * past the end) are zero. Unless the weight is staged, its lines (and the bias's) are prefetched
 * into L1 for the last step. */
template <typename T, typename W, int VPT, bool FUSED>
__device__ __forceinline__ void load_row(const ignis_norm_params &p, int64_t row, int64_t rows, int num_vecs,
                                         bool prefetch_weight, row_registers<VPT, FUSED> &r) {
  constexpr int VEC = ignis_vec<T>::size;
  const T *in = row_pointer<T>(p.input, row, p.num_rows_inner, p.input_layout);
  const T *res = FUSED ? row_pointer<T>(p.residual, row, p.num_rows_inner, p.residual_layout) : nullptr;
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    const int v = threadIdx.x + j * blockDim.x;
    r.in[j] = make_uint4(0, 0, 0, 0);
    if (FUSED)
      r.res[j] = make_uint4(0, 0, 0, 0);
    if (row < rows && v < num_vecs) {
      r.in[j] = __ldcs(reinterpret_cast<const uint4 *>(in + (int64_t)v * VEC));
      if (FUSED)
        r.res[j] = __ldcs(reinterpret_cast<const uint4 *>(res + (int64_t)v * VEC));
      if (prefetch_weight) {
        prefetch_l1(static_cast<const W *>(p.weight) + (int64_t)v * VEC);
        if (p.bias)
          prefetch_l1(static_cast<const W *>(p.bias) + (int64_t)v * VEC);
      }
    }
  }
}

/* Copy weight (and bias) into shared memory, 16 bytes per thread and step, two steps' loads issued
 * before their stores; hidden * sizeof(W) is a multiple of 16 on the vector path. The caller
 * synchronizes before reading the copy. */
template <typename W> __device__ __forceinline__ void stage_weights(const ignis_norm_params &p, uint4 *staged) {
  constexpr int BATCH = 2;
  const int units = (int)(p.hidden * (int64_t)sizeof(W) / 16);
  const int threads = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
  const uint4 *weight = static_cast<const uint4 *>(p.weight), *bias = static_cast<const uint4 *>(p.bias);
  for (int base = tid; base < units; base += BATCH * threads) {
    uint4 w[BATCH], b[BATCH];
#pragma unroll
    for (int k = 0; k < BATCH; ++k)
      if (base + k * threads < units) {
        w[k] = __ldg(weight + base + k * threads);
        if (bias)
          b[k] = __ldg(bias + base + k * threads);
      }
#pragma unroll
    for (int k = 0; k < BATCH; ++k)
      if (base + k * threads < units) {
        staged[base + k * threads] = w[k];
        if (bias)
          staged[units + base + k * threads] = b[k];
      }
  }
}

/* Reduce, scale and write one row held in registers (and store the rounded fused sum first). */
template <typename T, typename W, int VPT, bool FUSED>
__device__ __forceinline__ void normalize_row(const ignis_norm_params &p, int64_t row, int64_t rows, int num_vecs,
                                              const row_registers<VPT, FUSED> &r, const W *staged_weight,
                                              float (&scratch)[2][32], int &parity) {
  constexpr int VEC = ignis_vec<T>::size;
  const float inv_hidden = 1.0f / (float)p.hidden;
  bool valid[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    valid[j] = row < rows && (int)threadIdx.x + j * (int)blockDim.x < num_vecs;
  if (FUSED) {
    T *res = const_cast<T *>(row_pointer<T>(p.residual, row, p.num_rows_inner, p.residual_layout));
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (valid[j]) {
        float x[VEC];
        row_vector<T>(r.in[j], r.res[FUSED ? j : 0], true, x);
        ignis_store_floats(res + (int64_t)(threadIdx.x + j * blockDim.x) * VEC, x);
      }
  }

  float mean = 0.0f;
  if (p.kind == IGNIS_NORM_LAYER) {
    float sum = 0.0f; /* the zeros of vectors past the row add nothing */
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      float x[VEC];
      row_vector<T>(r.in[j], r.res[FUSED ? j : 0], FUSED, x);
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        sum += x[k];
    }
    mean = row_sum(sum, scratch, parity) * inv_hidden;
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (valid[j]) {
      float x[VEC];
      row_vector<T>(r.in[j], r.res[FUSED ? j : 0], FUSED, x);
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        sum_sq += (x[k] - mean) * (x[k] - mean);
    }
  const float rstd = rsqrtf(row_sum(sum_sq, scratch, parity) * inv_hidden + p.eps);

  T *out = const_cast<T *>(row_pointer<T>(p.out, row, p.num_rows_inner, p.out_layout));
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (valid[j]) {
      const int64_t h = (int64_t)(threadIdx.x + j * blockDim.x) * VEC;
      float x[VEC], y[VEC];
      row_vector<T>(r.in[j], r.res[FUSED ? j : 0], FUSED, x);
      if (staged_weight)
        normalize<IGNIS_CACHE_DEFAULT, W>(p, staged_weight, p.bias ? staged_weight + p.hidden : nullptr, h, x,
                                          mean, rstd, y);
      else
        normalize<IGNIS_CACHE_READ_ONLY, W>(p, static_cast<const W *>(p.weight), static_cast<const W *>(p.bias),
                                            h, x, mean, rstd, y);
      ignis_store_floats(out + h, y);
    }
}

/* staged: weight (then bias) are copied into the dynamic shared memory, hidden elements each. */
template <typename T, typename W, int VPT, bool FUSED>
__global__ void __launch_bounds__(MAX_REGISTER_GROUP, 2) norm_rows_in_registers(ignis_norm_params p, int staged) {
  constexpr bool PIPELINED = !FUSED;
  extern __shared__ uint4 staged_weights[];
  __shared__ float scratch[2][32];
  int parity = 0;
  const int64_t rows = p.num_rows_outer * p.num_rows_inner;
  const int num_vecs = (int)(p.hidden / ignis_vec<T>::size);
  const int64_t step = (int64_t)gridDim.x * blockDim.y;
  ignis_pdl_wait();

  /* The loop over `first` is uniform over the block (each block has R rows at a time). */
  int64_t first = (int64_t)blockIdx.x * blockDim.y;
  row_registers<VPT, FUSED> current;
  if (PIPELINED)
    load_row<T, W, VPT, FUSED>(p, first + threadIdx.y, rows, num_vecs, !staged, current);
  if (staged) {
    stage_weights<W>(p, staged_weights);
    __syncthreads();
  }
  const W *staged_weight = staged ? reinterpret_cast<const W *>(staged_weights) : nullptr;
  for (; first < rows; first += step) {
    const bool last = first + step >= rows;
    row_registers<VPT, FUSED> next;
    if (!PIPELINED)
      load_row<T, W, VPT, FUSED>(p, first + threadIdx.y, rows, num_vecs, !staged, current);
    else if (!last)
      load_row<T, W, VPT, FUSED>(p, first + step + threadIdx.y, rows, num_vecs, !staged, next);
    if (last)
      ignis_pdl_launch_dependents();
    normalize_row<T, W, VPT, FUSED>(p, first + threadIdx.y, rows, num_vecs, current, staged_weight, scratch,
                                    parity);
    if (PIPELINED)
      current = next;
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

/* row_sum with one scratch buffer and ignis_block_sum's trailing barrier (for the looped kernel,
 * where the alternating halves cost registers under its 1024-thread bound). */
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
      float x[N];
      load_row_chunk<IGNIS_CACHE_STREAM>(in, res, c, x);
      if (res)
        ignis_store_floats(res + c * N, x);
      float y[N];
      normalize<IGNIS_CACHE_READ_ONLY, W>(p, static_cast<const W *>(p.weight), static_cast<const W *>(p.bias),
                                          c * N, x, mean, rstd, y);
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
 * (<= 512 for the longest rows), or at <= 512 threads when there are fewer rows than twice the SMs
 * (latency-bound: shorter per-thread chains); short rows (<= 128 vectors) stay within one warp. */
static int vectors_per_thread(int64_t num_vecs, int64_t rows, int sm_count) {
  if (num_vecs <= 128)
    return num_vecs <= 32 ? 1 : num_vecs <= 64 ? 2 : 4;
  if (rows < 2 * (int64_t)sm_count)
    return num_vecs <= 512 ? 1 : num_vecs <= 1024 ? 2 : 4;
  return num_vecs <= 256 ? 1 : num_vecs <= 512 ? 2 : 4;
}

/* Grid of the register kernel: one block per group of R rows while they fit on the GPU at once;
 * beyond that a persistent grid of the resident blocks (evened out so that every block gets the
 * same number of row groups, give or take one), which stages the weight in shared memory when
 * that keeps at least half the resident blocks. */
template <typename T, typename W, int VPT, bool FUSED>
static cudaError_t launch_in_registers(const ignis_norm_params *p, int device, dim3 block, cudaStream_t stream) {
  void (*kernel)(ignis_norm_params, int) = norm_rows_in_registers<T, W, VPT, FUSED>;
  const int threads = (int)(block.x * block.y);
  const int64_t row_groups = (p->num_rows_outer * p->num_rows_inner + block.y - 1) / block.y;
  const int64_t sm_count = ignis_cuda_sm_count(device);
  int64_t resident = sm_count * ignis_cuda_blocks_per_sm((const void *)kernel, device, threads, 0);
  if (resident < 1)
    resident = sm_count;
  size_t smem = 0;
  int staged = 0;
  if (row_groups >= 2 * resident) {
    const size_t stage_bytes = (size_t)p->hidden * sizeof(W) * (p->bias ? 2 : 1);
    const int64_t resident_staged =
        sm_count * ignis_cuda_blocks_per_sm((const void *)kernel, device, threads, stage_bytes);
    if (2 * resident_staged >= resident) {
      staged = 1;
      smem = stage_bytes;
      resident = resident_staged;
    }
  }
  int64_t blocks = row_groups;
  if (row_groups > resident) {
    const int64_t groups_per_block = (row_groups + resident - 1) / resident;
    blocks = (row_groups + groups_per_block - 1) / groups_per_block;
  }
  return ignis_launch(kernel, dim3((unsigned)blocks), block, smem, stream, *p, staged);
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
  const int64_t num_vecs = p->hidden / VEC;
  if (vector && num_vecs <= (int64_t)MAX_REGISTER_GROUP * MAX_VECS_PER_THREAD) {
    const int vpt =
        vectors_per_thread(num_vecs, p->num_rows_outer * p->num_rows_inner, ignis_cuda_sm_count(device));
    const dim3 block = row_block(num_vecs, vpt, MAX_REGISTER_GROUP);
    if (p->residual) {
      if (vpt == 1)
        return launch_in_registers<T, W, 1, true>(p, device, block, stream);
      if (vpt == 2)
        return launch_in_registers<T, W, 2, true>(p, device, block, stream);
      return launch_in_registers<T, W, 4, true>(p, device, block, stream);
    }
    if (vpt == 1)
      return launch_in_registers<T, W, 1, false>(p, device, block, stream);
    if (vpt == 2)
      return launch_in_registers<T, W, 2, false>(p, device, block, stream);
    return launch_in_registers<T, W, 4, false>(p, device, block, stream);
  }
  if (vector) {
    const dim3 block = row_block(num_vecs, LOOPED_CHUNKS_PER_THREAD, MAX_LOOPED_GROUP);
    return ignis_launch(norm_rows_looped<T, W, VEC>, row_grid(p, block), block, 0, stream, *p);
  }
  const dim3 block = row_block(p->hidden, LOOPED_CHUNKS_PER_THREAD, MAX_LOOPED_GROUP);
  return ignis_launch(norm_rows_looped<T, W, 1>, row_grid(p, block), block, 0, stream, *p);
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
