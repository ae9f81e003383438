/* The small-M (decode) 16-bit GEMM kernel: out[M, N] = a[M, K] @ w[N, K]^T (+ bias[N]) for M up to
 * 64, where the work is streaming the weight once. The kernel template and its host launcher are
 * here so that src/cuda/gemm/gemm_skinny.cu instantiates the library's shape and
 * bench/micro/skinny_gemm.cu the shapes it compares.
 *
 * Layout: a [M, K] row-major (row stride lda), w [N, K] row-major (row stride ldw: the weight of the
 * NT form), out [M, N] row-major (row stride ldo), f16 or bf16 inputs, out bf16, f16 or f32, bias
 * f32 or out's dtype; K a multiple of 8 and a, w rows 16-byte aligned.
 *
 * Idea (swap-AB): out^T = w a^T, so weight rows fill the 16-row side of mma.sync m16n8k16 and the
 * M rows of a the 8-column side (NT tiles of 8: M padded to 8 * NT). Because a sum over K may run
 * in any order, a thread's four A-fragment words are one 16-byte load of a weight row (lane (g, t)
 * loads 8 consecutive k of rows g and g + 8 at k0 + 8t), and its B-fragment words one 16-byte load
 * of a's row g at the same k: two mma per 16 bytes, no ldmatrix, no shuffles. A warp owns 16 * RT
 * weight rows; a block of 8 warps owns BN = 128 * RT rows and a K range (split-K), which it walks
 * in chunks of KCH: a's chunk [8 NT, KCH] is staged in shared memory by cp.async (rows padded by
 * 64 bytes so the 16-byte reads of the 8 rows of a quarter-warp hit distinct banks; rows >= M and
 * k past the range are zero-filled), while the warp streams its weight slice with
 * ld.global.nc.L1::no_allocate, U steps of 32 k (2 * RT * U 16-byte loads per thread) in flight,
 * and with PREFETCH the next U steps loaded while the current ones multiply. Every weight byte is
 * read exactly once, by one warp.
 *
 * Split-K: the grid is (row blocks, splits). With one split the block writes out (+ bias)
 * directly. Otherwise each block writes its f32 partial sums to partials[split][M][N], and the last
 * block of a row block to arrive (a counter per row block, counters[row block], taken with
 * atomicAdd after a fence) adds the splits in split order 0..S-1, adds bias and writes out, then
 * resets the counter to 0 for the next call: the result does not depend on which block finishes
 * last, and no memset is needed between calls (CUDA-graph safe). The split count comes from the
 * plan (ignis_skinny_plan): enough blocks for `per_sm` resident blocks on every SM, each split at
 * least one step of 32 U k, within the partials' capacity.
 *
 * The kernel is launched with PDL (ignis_launch) and waits (griddepcontrol.wait) before its first
 * global access. */
#ifndef IGNIS_CUDA_GEMM_SKINNY_CUH
#define IGNIS_CUDA_GEMM_SKINNY_CUH

#include "core/gemm_params.h"
#include "cuda/common/cuda_common.cuh"

#define IGNIS_SKINNY_THREADS 256
#define IGNIS_SKINNY_MAX_M 64

/* The device-side arguments; element offsets in elements of each tensor. */
struct ignis_skinny_args {
  const void *a, *w;
  void *out;
  const void *bias;
  int64_t lda, ldw, ldo;
  int m, n, k;
  int out_kind;  /* 0 bf16, 1 f16, 2 f32 */
  int bias_kind; /* 0 none, 1 f32, 2 out's dtype */
  int splits, k_per_split;
  float *partials;    /* [splits, M, N] when splits > 1 */
  unsigned *counters; /* one per row block, zero between calls */
};

/* How weight loads treat the L2: plain, with the .L2::256B prefetch hint, or marked evict-first
 * (an L2 cache policy, so the streamed weight does not push out a and the split-K partials). */
enum ignis_skinny_load {
  IGNIS_SKINNY_LOAD_PLAIN = 0,
  IGNIS_SKINNY_LOAD_L2_256B = 1,
  IGNIS_SKINNY_LOAD_EVICT_FIRST = 2
};

/* A compile-time shape: RT 16-row tiles per warp, U steps of 32 k per load batch, PREFETCH the
 * next batch while multiplying, LOAD the weight loads' L2 treatment (ignis_skinny_load),
 * MIN_BLOCKS __launch_bounds__'s minimum resident blocks. */
template <int RT, int U, bool PREFETCH, int LOAD, int MIN_BLOCKS> struct ignis_skinny_config {
  static constexpr int row_tiles = RT, unroll = U, min_blocks = MIN_BLOCKS, load = LOAD;
  static constexpr bool prefetch = PREFETCH;
  static constexpr int step = 32 * U;
  static constexpr int block_rows = 16 * RT * (IGNIS_SKINNY_THREADS / 32);
};

/* The K chunk of a staged in shared memory: about 64 KB of a per block (NT = 1: 32 KB). */
template <int NT> constexpr int ignis_skinny_chunk() {
  return NT == 1 ? 2048 : 4096 / NT;
}
template <typename T, int NT> constexpr size_t ignis_skinny_smem_bytes() {
  return (size_t)8 * NT * (ignis_skinny_chunk<NT>() + 32) * sizeof(T);
}

template <typename T> struct ignis_skinny_mma;
template <> struct ignis_skinny_mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};
template <> struct ignis_skinny_mma<__half> {
  static __device__ __forceinline__ void run(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};

/* A weight load: read once, so not kept in L1. */
template <int LOAD> __device__ __forceinline__ uint4 ignis_skinny_load_w(const void *ptr, uint64_t policy) {
  uint4 v;
  if constexpr (LOAD == IGNIS_SKINNY_LOAD_EVICT_FIRST)
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr), "l"(policy));
  else if constexpr (LOAD == IGNIS_SKINNY_LOAD_L2_256B)
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  else
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  return v;
}

/* 16 bytes global -> shared, asynchronously; bytes == 0 writes zeros. */
__device__ __forceinline__ void ignis_skinny_cp_async(void *smem, const void *global, int bytes) {
  const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(global), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void ignis_skinny_store(const ignis_skinny_args &p, int m, int n, float v) {
  if (p.bias_kind == 1)
    v += static_cast<const float *>(p.bias)[n];
  else if (p.bias_kind == 2)
    v += p.out_kind == 0   ? __bfloat162float(static_cast<const __nv_bfloat16 *>(p.bias)[n])
         : p.out_kind == 1 ? __half2float(static_cast<const __half *>(p.bias)[n])
                           : static_cast<const float *>(p.bias)[n];
  const int64_t at = (int64_t)m * p.ldo + n;
  if (p.out_kind == 0)
    static_cast<__nv_bfloat16 *>(p.out)[at] = __float2bfloat16_rn(v);
  else if (p.out_kind == 1)
    static_cast<__half *>(p.out)[at] = __float2half_rn(v);
  else
    static_cast<float *>(p.out)[at] = v;
}

/* The warp's weight slice for one batch of U steps at k (columns k + 32u + 8t of its rows);
 * PREDICATED: zeros for columns at or past k_stop (K is a multiple of 8, so a 16-byte piece is all
 * in or all out). */
template <typename Cfg, bool PREDICATED, typename T>
__device__ __forceinline__ void ignis_skinny_load_batch(uint4 (&buf)[Cfg::row_tiles][2][Cfg::unroll],
                                                        const T *(&rows)[Cfg::row_tiles][2], int k,
                                                        int k_stop, int t, uint64_t policy) {
#pragma unroll
  for (int u = 0; u < Cfg::unroll; ++u) {
    const int col = k + 32 * u + 8 * t;
#pragma unroll
    for (int r = 0; r < Cfg::row_tiles; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        buf[r][h][u] = !PREDICATED || col < k_stop ? ignis_skinny_load_w<Cfg::load>(rows[r][h] + col, policy)
                                                   : make_uint4(0, 0, 0, 0);
  }
}

/* Multiply one batch: a's rows 8j + g at chunk offset koff + 32u + 8t from shared memory. */
template <typename T, int NT, typename Cfg>
__device__ __forceinline__ void ignis_skinny_multiply(float (&acc)[Cfg::row_tiles][NT][4],
                                                      const uint4 (&buf)[Cfg::row_tiles][2][Cfg::unroll],
                                                      const T *a_lane, int koff) {
  constexpr int AS = ignis_skinny_chunk<NT>() + 32;
#pragma unroll
  for (int u = 0; u < Cfg::unroll; ++u)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const uint4 av = *reinterpret_cast<const uint4 *>(a_lane + j * 8 * AS + koff + 32 * u);
#pragma unroll
      for (int r = 0; r < Cfg::row_tiles; ++r) {
        const uint4 lo = buf[r][0][u], hi = buf[r][1][u];
        ignis_skinny_mma<T>::run(acc[r][j], lo.x, hi.x, lo.y, hi.y, av.x, av.y);
        ignis_skinny_mma<T>::run(acc[r][j], lo.z, hi.z, lo.w, hi.w, av.z, av.w);
      }
    }
}

template <typename T, int NT, typename Cfg>
__global__ void __launch_bounds__(IGNIS_SKINNY_THREADS, Cfg::min_blocks)
    ignis_skinny_gemm_kernel(const ignis_skinny_args p) {
  constexpr int RT = Cfg::row_tiles, U = Cfg::unroll, STEP = Cfg::step;
  constexpr int KCH = ignis_skinny_chunk<NT>(), AS = KCH + 32, ROWS = 8 * NT;
  extern __shared__ __align__(16) unsigned char ignis_skinny_smem[];
  T *a_s = reinterpret_cast<T *>(ignis_skinny_smem);
  __shared__ int is_last;

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int n_block = blockIdx.x * Cfg::block_rows, n_warp = n_block + warp * 16 * RT;
  const int k_begin = blockIdx.y * p.k_per_split, k_end = min(p.k, k_begin + p.k_per_split);
  const T *w = static_cast<const T *>(p.w);
  const T *a = static_cast<const T *>(p.a);

  /* rows past N read row N - 1 (their results are never written); a warp with no row below N
   * loads nothing */
  const bool live = n_warp < p.n;
  const T *rows[RT][2];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      rows[r][h] = w + (int64_t)min(n_warp + 16 * r + 8 * h + g, p.n - 1) * p.ldw;
  const T *a_lane = a_s + g * AS + 8 * t;

  float acc[RT][NT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[r][j][e] = 0.0f;

  uint64_t policy = 0;
  if constexpr (Cfg::load == IGNIS_SKINNY_LOAD_EVICT_FIRST)
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));

  ignis_pdl_wait();
  uint4 buf0[RT][2][U], buf1[RT][2][U];
  for (int kc = k_begin; kc < k_end; kc += KCH) {
    const int len = min(KCH, k_end - kc), k_stop = kc + len;
    const int steps = (len + STEP - 1) / STEP, pieces = steps * STEP / 8;
    const bool ragged = len % STEP != 0; /* the last step is predicated */
    if (kc != k_begin)
      __syncthreads(); /* every warp is done with the previous chunk of a */
    for (int i = threadIdx.x; i < ROWS * pieces; i += IGNIS_SKINNY_THREADS) {
      const int row = i / pieces, col = (i - row * pieces) * 8;
      const bool valid = row < p.m && kc + col < k_stop;
      ignis_skinny_cp_async(a_s + row * AS + col, valid ? a + (int64_t)row * p.lda + kc + col : a,
                            valid ? 16 : 0);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    if (live) {
      if (ragged && steps == 1)
        ignis_skinny_load_batch<Cfg, true>(buf0, rows, kc, k_stop, t, policy);
      else
        ignis_skinny_load_batch<Cfg, false>(buf0, rows, kc, k_stop, t, policy);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    if (!live)
      continue;
    if constexpr (Cfg::prefetch) {
      for (int s = 0; s < steps; s += 2) {
        if (s + 1 < steps) {
          if (ragged && s + 2 == steps)
            ignis_skinny_load_batch<Cfg, true>(buf1, rows, kc + (s + 1) * STEP, k_stop, t, policy);
          else
            ignis_skinny_load_batch<Cfg, false>(buf1, rows, kc + (s + 1) * STEP, k_stop, t, policy);
        }
        ignis_skinny_multiply<T, NT, Cfg>(acc, buf0, a_lane, s * STEP);
        if (s + 2 < steps) {
          if (ragged && s + 3 == steps)
            ignis_skinny_load_batch<Cfg, true>(buf0, rows, kc + (s + 2) * STEP, k_stop, t, policy);
          else
            ignis_skinny_load_batch<Cfg, false>(buf0, rows, kc + (s + 2) * STEP, k_stop, t, policy);
        }
        if (s + 1 < steps)
          ignis_skinny_multiply<T, NT, Cfg>(acc, buf1, a_lane, (s + 1) * STEP);
      }
    } else {
      (void)buf1;
      for (int s = 0; s < steps; ++s) {
        if (s > 0) {
          if (ragged && s + 1 == steps)
            ignis_skinny_load_batch<Cfg, true>(buf0, rows, kc + s * STEP, k_stop, t, policy);
          else
            ignis_skinny_load_batch<Cfg, false>(buf0, rows, kc + s * STEP, k_stop, t, policy);
        }
        ignis_skinny_multiply<T, NT, Cfg>(acc, buf0, a_lane, s * STEP);
      }
    }
  }
  ignis_pdl_launch_dependents();

  /* acc[r][j][e]: weight row n_warp + 16r + g + 8(e >> 1), a row 8j + 2t + (e & 1) */
  if (p.splits == 1) {
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = n_warp + 16 * r + g + 8 * (e >> 1), m = 8 * j + 2 * t + (e & 1);
          if (m < p.m && n < p.n)
            ignis_skinny_store(p, m, n, acc[r][j][e]);
        }
    return;
  }
  float *part = p.partials + (int64_t)blockIdx.y * p.m * p.n;
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int n = n_warp + 16 * r + g + 8 * (e >> 1), m = 8 * j + 2 * t + (e & 1);
        if (m < p.m && n < p.n)
          __stcg(part + (int64_t)m * p.n + n, acc[r][j][e]);
      }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0)
    is_last = atomicAdd(p.counters + blockIdx.x, 1u) == (unsigned)p.splits - 1;
  __syncthreads();
  if (!is_last)
    return;
  __threadfence();
  const int cols = min(Cfg::block_rows, p.n - n_block);
  for (int i = threadIdx.x; i < p.m * cols; i += IGNIS_SKINNY_THREADS) {
    const int m = i / cols, n = n_block + (i - m * cols);
    const float *src = p.partials + (int64_t)m * p.n + n;
    float sum = 0.0f;
    for (int s = 0; s < p.splits; ++s)
      sum += __ldcg(src + (int64_t)s * p.m * p.n);
    ignis_skinny_store(p, m, n, sum);
  }
  if (threadIdx.x == 0)
    p.counters[blockIdx.x] = 0u;
}

/* ---- host --------------------------------------------------------------------------------- */
/* The split of a call: `splits` blocks along K of k_per_split each (a multiple of `step`; the last
 * may be shorter). Enough blocks for min(resident, per_sm) blocks on each of `sms` SMs, but no more
 * than one wave (sms * resident), at least one step per split, partials within partial_floats, a
 * counter per row block. */
static inline void ignis_skinny_plan(int m, int n, int k, int block_rows, int step, int sms, int resident,
                                     int per_sm, size_t partial_floats, int counters, int *splits,
                                     int *k_per_split) {
  const int row_blocks = (n + block_rows - 1) / block_rows;
  const int target = sms * (resident < per_sm ? resident : per_sm);
  int s = (target + row_blocks - 1) / row_blocks;
  const int most_by_wave = sms * resident / row_blocks;
  const int most_by_k = (k + step - 1) / step;
  const size_t most_by_partials = partial_floats / ((size_t)m * n);
  if (s > most_by_wave)
    s = most_by_wave;
  if (s > most_by_k)
    s = most_by_k;
  if ((size_t)s > most_by_partials)
    s = (int)most_by_partials;
  if (s < 1 || row_blocks > counters)
    s = 1;
  int per = (k + s - 1) / s;
  per = (per + step - 1) / step * step;
  *k_per_split = per;
  *splits = (k + per - 1) / per;
}

/* Fill the device arguments from the params (M <= 64, the NT weight form, 16-bit inputs). */
static inline ignis_skinny_args ignis_skinny_args_of(const ignis_gemm_params *p) {
  ignis_skinny_args s = {};
  s.a = p->a;
  s.w = p->b;
  s.out = p->out;
  s.bias = p->bias;
  s.lda = p->a_row_stride;
  s.ldw = p->b_stride_n;
  s.ldo = p->out_row_stride;
  s.m = (int)p->m;
  s.n = (int)p->n;
  s.k = (int)p->k;
  s.out_kind = p->out_dtype == IGNIS_BF16 ? 0 : p->out_dtype == IGNIS_F16 ? 1 : 2;
  s.bias_kind = !p->bias ? 0 : p->bias_dtype == IGNIS_F32 ? 1 : 2;
  return s;
}

/* What a launch ran (for the micro benchmark's report). */
struct ignis_skinny_launch_info {
  int row_blocks, splits, k_per_split, resident;
  size_t smem;
};

/* Plan and launch one call on the current device. partials: room for partial_floats f32;
 * counters: `counters` zeroed counters. per_sm: the resident blocks per SM the split aims at.
 * info (may be NULL) receives the plan. */
template <typename T, int NT, typename Cfg>
static inline ignis_status ignis_skinny_launch(ignis_skinny_args args, int sms, int per_sm, float *partials,
                                               size_t partial_floats, unsigned *counters, int counters_count,
                                               cudaStream_t stream, ignis_skinny_launch_info *info) {
  constexpr auto kernel = ignis_skinny_gemm_kernel<T, NT, Cfg>;
  constexpr size_t smem = ignis_skinny_smem_bytes<T, NT>();
  IGNIS_CUDA_CHECK(ignis_allow_dynamic_smem<kernel>(smem));
  const int resident = ignis_resident_blocks<kernel>(IGNIS_SKINNY_THREADS, smem);
  ignis_skinny_plan(args.m, args.n, args.k, Cfg::block_rows, Cfg::step, sms, resident, per_sm, partial_floats,
                    counters_count, &args.splits, &args.k_per_split);
  args.partials = partials;
  args.counters = counters;
  const dim3 grid((unsigned)((args.n + Cfg::block_rows - 1) / Cfg::block_rows), (unsigned)args.splits);
  if (info)
    *info = ignis_skinny_launch_info{(int)grid.x, args.splits, args.k_per_split, resident, smem};
  IGNIS_CUDA_CHECK(ignis_launch(kernel, grid, dim3(IGNIS_SKINNY_THREADS), smem, stream, args));
  return IGNIS_OK;
}

/* The launcher for M's tile count (M <= 64). */
template <typename T, typename Cfg>
static inline ignis_status ignis_skinny_launch_m(const ignis_skinny_args &args, int sms, int per_sm,
                                                 float *partials, size_t partial_floats, unsigned *counters,
                                                 int counters_count, cudaStream_t stream,
                                                 ignis_skinny_launch_info *info = nullptr) {
  if (args.m <= 8)
    return ignis_skinny_launch<T, 1, Cfg>(args, sms, per_sm, partials, partial_floats, counters,
                                          counters_count, stream, info);
  if (args.m <= 16)
    return ignis_skinny_launch<T, 2, Cfg>(args, sms, per_sm, partials, partial_floats, counters,
                                          counters_count, stream, info);
  if (args.m <= 32)
    return ignis_skinny_launch<T, 4, Cfg>(args, sms, per_sm, partials, partial_floats, counters,
                                          counters_count, stream, info);
  return ignis_skinny_launch<T, 8, Cfg>(args, sms, per_sm, partials, partial_floats, counters, counters_count,
                                        stream, info);
}

#endif
