/* CUDA all-reduce (include/ignis/comm.h): ONESHOT and TWOSHOT kernels over the ranks' regions
 * (comm_state.h), plain or fused with the residual add, RMSNorm and fp8 quantization, and the NCCL
 * algorithm (comm_nccl.c), whose fused forms reduce with NCCL into the own data area and then run
 * the fused kernel there in local mode (one "rank", no copy, no barrier).
 *
 * Work split. Every rank launches the same grid for a call (same shapes, same algorithm), of at
 * most max_blocks blocks (the fewest SMs of any rank divided by the most ranks sharing one GPU, at
 * most COMM_MAX_BLOCKS) so that the blocks of all ranks on a GPU are resident at once. Block b of a
 * rank only ever synchronizes with block b of the other ranks, so it owns the same part of the
 * message on every rank, and the partition depends on nothing a rank may see differently (such as
 * its pointers' alignment). The plain form cuts the flat message into 16-byte units and moves them
 * as one vector of N = 16 / sizeof(T) elements when its pointers are 16-byte aligned and N divides
 * the count, else element by element; the fused forms cut it into whole rows (the sum of squares
 * needs the row), the row's f32 sum staged in shared memory (hidden <= 16384), vectors again where
 * the row and pointers allow.
 *   ONESHOT: block b copies its part of the input into its rank's data area; barrier 1; it reads
 *     its part from every rank's data area, reduces and writes the outputs; barrier 2.
 *   TWOSHOT: the units (chunks or rows) are cut into W slices, slice s owned by rank s, and each
 *     slice into the G blocks' parts. Block b copies part b of every slice; barrier 1; it reduces
 *     part b of its rank's slice from every rank's data area and writes the results to its own
 *     outputs and to its region's result areas; barrier 2; it copies part b of every other slice
 *     from the owner's result areas into its outputs; barrier 3.
 * The last barrier of a call keeps the region from being overwritten by the next call while a peer
 * still reads it: a rank's next call starts (stream order, or griddepcontrol.wait under PDL) only
 * when its whole previous grid has finished, and each of its blocks finished only after every
 * peer's block of the same index arrived at the last barrier, that is, after every peer finished
 * reading this rank's region (every part, whichever partition the next call uses).
 *
 * Barrier protocol, per block b, for a barrier with epoch e (64-bit: never wraps):
 *   arrive: __syncthreads() (the block's earlier reads and writes are done), then thread s < W
 *     stores e to flag[b][r] in rank s's region with st.release.sys (r: this rank; s = r included).
 *     A release is cumulative: the block's writes ordered before it by the CTA barrier are visible
 *     to whoever acquires e.
 *   wait: thread s < W spins with ld.relaxed.sys on flag[b][s] in its own region until it is >= e,
 *     then fence.acq_rel.sys (a relaxed load that observed the release, then a fence: PTX's acquire
 *     pattern, without an acquire on every poll), and __syncthreads_or (a CTA barrier) passes the
 *     acquired view to the whole block. Data the peers wrote is then read with ld.global.cg (L2,
 *     never a stale L1 line).
 *   epochs: block b's call counter is flag[b][r] in its own region (the epoch it last announced to
 *     itself, read at kernel start after griddepcontrol.wait): barrier k of the call has epoch
 *     base + k. Every rank launches the same grids in the same order, so block b's counter is the
 *     same on every rank; blocks a call does not launch keep theirs, on every rank alike. A peer
 *     is at most one barrier ahead (it passes barrier e only after this block arrived), so the
 *     flag a waiter reads is below e (not there yet), e or e + 1, and >= e is the right test.
 *   timeout: a waiter reads %globaltimer; past the communicator's timeout it stores
 *     IGNIS_ERROR_TIMEOUT in its region's error word (comm_check reports it) and its block leaves
 *     the call at once, announcing nothing more. Every later kernel of this rank finds the error
 *     word set and returns at its start. So a peer that was merely slow times out in turn instead
 *     of reading a region that has moved on: every rank records the failure, none is silently
 *     wrong, and outputs are unspecified. The communicator is then out of step: destroy it.
 *
 * Arithmetic (every f32 operation spelled with its _rn intrinsic, so no contraction changes it;
 * the same operations as src/cpu/norm_common.h in the same order): a = rank 0's value + rank 1's
 * + ... in rank order; s = a + residual_in; residual_out = s rounded; sum_sq = the sum over the row
 * of (double)s * s (exact products, added in double: each thread over its groups of 16 bytes of
 * elements, then the warp and block trees, in an order set by hidden and the dtype alone, so the
 * same on every rank whichever path its pointers take; another order than the CPU's sequential
 * loop, so the f32 mean square can differ from the CPU's only where the double sum lies within a
 * few double ulps of an f32 rounding boundary); rstd = 1 / sqrtf((float)(sum_sq / hidden) + eps);
 * n = s * rstd * (gamma + weight_bias); norm_out = n rounded; quant_out = cvt.rn.satfinite e4m3 of
 * n * (1 / scale_factor[0]).
 *
 * Kernels launch with ignis_launch (PDL on sm_90+): griddepcontrol.wait comes before the first
 * global access (the flags included); the trigger is left to the grid's exit. Nothing here
 * allocates or synchronizes, so a call can be captured in a CUDA graph. */
#include "cuda/comm/comm_state.h"
#include "cuda/common/cuda_common.cuh"
#include "cuda/common/fp8_convert.cuh"

enum {
  BLOCK_THREADS = 512,     /* the plain kernel's block (one chunk per thread and part, up to the SM count
                              of blocks); the fused kernel's largest */
  MAX_FUSED_HIDDEN = 16384 /* the f32 row in shared memory: 64 KB */
};

/* The kernels' arguments (by value: the peer pointers live in the parameter bank). */
struct ar_args {
  char *region[IGNIS_COMM_MAX_WORLD]; /* every rank's region as this process maps it */
  int32_t world, rank;
  int32_t twoshot;
  int32_t local;        /* NCCL's fused forms: the sum is already in the own data area; no exchange */
  int64_t rows, hidden; /* the plain form: one row of rows * hidden elements */
  int64_t slice_units;  /* units (plain: chunks; fused: rows) per slice: all of them on ONESHOT */
  int64_t part_units;   /* units per block within a slice */
  const void *input;
  void *output;
  const void *residual_in;
  void *residual_out, *norm_out;
  uint8_t *quant_out;
  const void *gamma;
  const float *scale_factor;
  float eps, weight_bias;
  uint64_t sum_offset, norm_offset, quant_offset;
  uint64_t timeout_ns;
};

/* ---- the barrier ------------------------------------------------------------------------------ */
__device__ __forceinline__ uint64_t load_relaxed_sys(const uint64_t *ptr) {
  uint64_t value;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(value) : "l"(ptr) : "memory");
  return value;
}
__device__ __forceinline__ void fence_acq_rel_sys() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}
__device__ __forceinline__ void store_release_sys(uint64_t *ptr, uint64_t value) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(ptr), "l"(value) : "memory");
}
__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint64_t *flag_of(char *region, int block, int rank) {
  return reinterpret_cast<uint64_t *>(region + COMM_FLAGS_OFFSET) + (size_t)block * IGNIS_COMM_MAX_WORLD +
         rank;
}

__device__ __forceinline__ unsigned int *error_word(const ar_args &a) {
  return reinterpret_cast<unsigned int *>(a.region[a.rank] + COMM_ERROR_OFFSET);
}

/* Block b's call counter (see the header); every thread reads it before the first barrier. */
__device__ __forceinline__ uint64_t call_base(const ar_args &a) {
  return *reinterpret_cast<volatile uint64_t *>(flag_of(a.region[a.rank], blockIdx.x, a.rank));
}

/* Every thread of the block calls it; false (for every thread) when a wait timed out. */
__device__ __forceinline__ bool cross_rank_barrier(const ar_args &a, uint64_t epoch) {
  __syncthreads();
  const int s = threadIdx.x;
  int timed_out = 0;
  if (s < a.world) {
    store_release_sys(flag_of(a.region[s], blockIdx.x, a.rank), epoch);
    const uint64_t *flag = flag_of(a.region[a.rank], blockIdx.x, s);
    const uint64_t start = global_timer_ns();
    while (load_relaxed_sys(flag) < epoch)
      if (global_timer_ns() - start > a.timeout_ns) {
        atomicExch(error_word(a), (unsigned int)IGNIS_ERROR_TIMEOUT);
        timed_out = 1;
        break;
      }
    fence_acq_rel_sys();
  }
  return !__syncthreads_or(timed_out);
}

/* ---- chunks ---------------------------------------------------------------------------------- */
/* Units (chunks or rows) [lo, hi) of this block in slice s: slices of a.slice_units units, parts of
 * a.part_units, both computed on the host (no division here), clamped to the message. */
__device__ __forceinline__ void part_of(const ar_args &a, int64_t units, int s, int64_t *lo, int64_t *hi) {
  const int64_t slice_lo = min((int64_t)s * a.slice_units, units);
  const int64_t slice_hi = min(slice_lo + a.slice_units, units);
  *lo = min(slice_lo + (int64_t)blockIdx.x * a.part_units, slice_hi);
  *hi = min(*lo + a.part_units, slice_hi);
}

template <int BYTES> struct bits_of;
template <> struct bits_of<1> { typedef unsigned char type; };
template <> struct bits_of<2> { typedef unsigned short type; };
template <> struct bits_of<4> { typedef unsigned int type; };
template <> struct bits_of<8> { typedef uint2 type; };
template <> struct bits_of<16> { typedef uint4 type; };

/* Copy BYTES (1, 2, 4, 8 or 16, both pointers aligned to it); HINT as ignis_load_hinted. */
template <int BYTES, int HINT> __device__ __forceinline__ void copy_bytes(void *dst, const void *src) {
  typedef typename bits_of<BYTES>::type U;
  const U v = ignis_load_hinted<HINT>(static_cast<const U *>(src));
  if constexpr (BYTES == 16)
    ignis_store_raw(dst, v);
  else
    *static_cast<U *>(dst) = v;
}

/* One element of T read through L2, as f32. */
template <typename T> __device__ __forceinline__ float load_l2_one(const void *ptr) {
  float f[2];
  if constexpr (sizeof(T) == 4)
    ignis_unpack_word<T>(__ldcg(static_cast<const unsigned int *>(ptr)), f);
  else
    ignis_unpack_word<T>(__ldcg(static_cast<const unsigned short *>(ptr)), f);
  return f[0];
}

/* acc = the N elements at byte `offset` of every rank's region, summed in f32 in rank order from
 * rank 0's value. The loads of RANK_BATCH ranks are issued before their adds (all of them for
 * W <= 8; batches keep the registers of W = 16 bounded). */
enum { RANK_BATCH = 8 };
template <typename T, int N>
__device__ __forceinline__ void sum_ranks(const ar_args &a, size_t offset, float (&acc)[N]) {
#pragma unroll
  for (int first = 0; first < IGNIS_COMM_MAX_WORLD; first += RANK_BATCH) {
    if (first >= a.world)
      break;
    if constexpr (N * sizeof(T) == 16) {
      uint4 raw[RANK_BATCH];
#pragma unroll
      for (int i = 0; i < RANK_BATCH; ++i)
        if (first + i < a.world)
          raw[i] = __ldcg(reinterpret_cast<const uint4 *>(a.region[first + i] + offset));
#pragma unroll
      for (int i = 0; i < RANK_BATCH; ++i)
        if (first + i < a.world) {
          float v[N];
          ignis_raw_to_floats<T>(raw[i], v);
#pragma unroll
          for (int k = 0; k < N; ++k)
            acc[k] = first + i == 0 ? v[k] : __fadd_rn(acc[k], v[k]);
        }
    } else {
      static_assert(N == 1, "element path");
      float v[RANK_BATCH];
#pragma unroll
      for (int i = 0; i < RANK_BATCH; ++i)
        if (first + i < a.world)
          v[i] = load_l2_one<T>(a.region[first + i] + offset);
#pragma unroll
      for (int i = 0; i < RANK_BATCH; ++i)
        if (first + i < a.world)
          acc[0] = first + i == 0 ? v[i] : __fadd_rn(acc[0], v[i]);
    }
  }
}

/* N values times inv as N fp8 e4m3 codes at dst (aligned to N bytes). */
template <int N> __device__ __forceinline__ void store_fp8(uint8_t *dst, const float (&y)[N], float inv) {
  if constexpr (N == 1) {
    *dst = ignis_fp8x1(__fmul_rn(y[0], inv), true);
  } else {
    uint32_t w[N / 4];
#pragma unroll
    for (int i = 0; i < N / 4; ++i)
      w[i] = ignis_fp8x2(__fmul_rn(y[4 * i], inv), __fmul_rn(y[4 * i + 1], inv), true) |
             ignis_fp8x2(__fmul_rn(y[4 * i + 2], inv), __fmul_rn(y[4 * i + 3], inv), true) << 16;
    if constexpr (N == 4)
      *reinterpret_cast<uint32_t *>(dst) = w[0];
    else
      *reinterpret_cast<uint2 *>(dst) = make_uint2(w[0], w[1]);
  }
}

/* ---- the plain all-reduce ---------------------------------------------------------------------- */
/* Chunks [lo, hi): input into the own data area. */
template <typename T, int N>
__device__ __forceinline__ void stage_chunks(const ar_args &a, int64_t lo, int64_t hi) {
  char *data = a.region[a.rank] + COMM_DATA_OFFSET;
  for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x)
    copy_bytes<N * sizeof(T), IGNIS_CACHE_STREAM>(data + c * N * sizeof(T),
                                                  static_cast<const char *>(a.input) + c * N * sizeof(T));
}

/* Units are 16 bytes of the message (VEC elements; the last one may be short), whatever N, so that
 * every rank cuts the message alike even where one rank takes the element path (its pointers
 * unaligned) and another the vector path. Chunks [first, last) of a part, N elements each. */
template <typename T, int N>
__device__ __forceinline__ void chunks_of(const ar_args &a, int s, int64_t *first, int64_t *last) {
  constexpr int CHUNKS_PER_UNIT = 16 / sizeof(T) / N;
  const int64_t count = a.rows * a.hidden;
  const int64_t units = (count * (int64_t)sizeof(T) + 15) / 16;
  int64_t lo, hi;
  part_of(a, units, s, &lo, &hi);
  *first = lo * CHUNKS_PER_UNIT;
  *last = min(hi * CHUNKS_PER_UNIT, count / N);
}

template <typename T, int N>
__global__ void __launch_bounds__(BLOCK_THREADS, 1) allreduce_plain(const ar_args a) {
  ignis_pdl_wait();
  if (*reinterpret_cast<volatile unsigned int *>(error_word(a)) != 0)
    return;
  const uint64_t base = call_base(a);
  constexpr size_t CHUNK_BYTES = N * sizeof(T);
  T *output = static_cast<T *>(a.output);
  int64_t lo, hi;
  if (!a.twoshot) {
    chunks_of<T, N>(a, 0, &lo, &hi);
    stage_chunks<T, N>(a, lo, hi);
    if (!cross_rank_barrier(a, base + 1))
      return;
    for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) {
      float acc[N];
      sum_ranks<T, N>(a, COMM_DATA_OFFSET + c * CHUNK_BYTES, acc);
      ignis_store_floats(output + c * N, acc);
    }
    cross_rank_barrier(a, base + 2);
    return;
  }
  for (int s = 0; s < a.world; ++s) {
    chunks_of<T, N>(a, s, &lo, &hi);
    stage_chunks<T, N>(a, lo, hi);
  }
  if (!cross_rank_barrier(a, base + 1))
    return;
  chunks_of<T, N>(a, a.rank, &lo, &hi);
  T *reduced = reinterpret_cast<T *>(a.region[a.rank] + a.sum_offset);
  for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) {
    float acc[N];
    sum_ranks<T, N>(a, COMM_DATA_OFFSET + c * CHUNK_BYTES, acc);
    ignis_store_floats(output + c * N, acc);
    ignis_store_floats(reduced + c * N, acc);
  }
  if (!cross_rank_barrier(a, base + 2))
    return;
  for (int s = 0; s < a.world; ++s) {
    if (s == a.rank)
      continue;
    chunks_of<T, N>(a, s, &lo, &hi);
    const char *owner = a.region[s] + a.sum_offset;
    for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x)
      copy_bytes<CHUNK_BYTES, IGNIS_CACHE_L2>(output + c * N, owner + c * CHUNK_BYTES);
  }
  cross_rank_barrier(a, base + 3);
}

/* ---- the fused all-reduce ---------------------------------------------------------------------- */
/* Sum over the block in double; every thread gets it. scratch: >= 32 doubles; ends with a barrier. */
__device__ __forceinline__ double block_sum_double(double x, double *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, num_warps = (blockDim.x + 31) >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    x = __dadd_rn(x, __shfl_xor_sync(0xffffffffu, x, offset));
  if (lane == 0)
    scratch[warp] = x;
  __syncthreads();
  double total = lane < num_warps ? scratch[lane] : 0.0;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    total = __dadd_rn(total, __shfl_xor_sync(0xffffffffu, total, offset));
  __syncthreads();
  return total;
}

/* Elements of a fused row per thread and step: the vector path's width whatever N, so that a thread
 * owns the same elements, and the block (launch_fused) has the same size, on the vector and the
 * element path; the sum of squares is then added in the same order on every rank even where one
 * rank's pointers send it down the other path. */
template <typename T> constexpr int fused_group() {
  return 16 / (int)sizeof(T);
}

/* One row: the rank sum, the residual, the norm and the quantization (see the header), written to
 * the outputs the pattern has and, when `mirror`, to the own region's result areas too (TWOSHOT).
 * Thread t takes groups t, t + blockDim.x, ... of fused_group<T>() elements, N at a time (a short
 * last group only on the element path, where hidden need not be whole groups), and stages and
 * re-reads only its own elements of row_sum. */
template <typename T, typename G, int N>
__device__ __forceinline__ void fused_row(const ar_args &a, int64_t row, bool mirror, float inv_scale,
                                          float *row_sum, double *scratch) {
  constexpr int GROUP = fused_group<T>();
  const int64_t groups = (a.hidden + GROUP - 1) / GROUP;
  char *own = a.region[a.rank];
  double sum_sq = 0.0;
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
#pragma unroll
    for (int v = 0; v < GROUP; v += N) {
      const int64_t col = g * GROUP + v;
      if (col >= a.hidden)
        break;
      const int64_t e = row * a.hidden + col;
      float s[N];
      sum_ranks<T, N>(a, COMM_DATA_OFFSET + e * sizeof(T), s);
      if (a.residual_in) {
        float r[N];
        ignis_load_floats<IGNIS_CACHE_STREAM>(static_cast<const T *>(a.residual_in) + e, r);
#pragma unroll
        for (int k = 0; k < N; ++k)
          s[k] = __fadd_rn(s[k], r[k]);
      }
      if (a.residual_out)
        ignis_store_floats(static_cast<T *>(a.residual_out) + e, s);
      if (mirror) /* whether or not this rank keeps the sum: a peer that passed residual_out gathers it */
        ignis_store_floats(reinterpret_cast<T *>(own + a.sum_offset) + e, s);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        row_sum[col + k] = s[k];
        sum_sq = __dadd_rn(sum_sq, __dmul_rn((double)s[k], (double)s[k]));
      }
    }
  }
  const double total = block_sum_double(sum_sq, scratch);
  const float mean_sq = __double2float_rn(__ddiv_rn(total, (double)a.hidden));
  const float rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, a.eps)));
  for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
#pragma unroll
    for (int v = 0; v < GROUP; v += N) {
      const int64_t col = g * GROUP + v;
      if (col >= a.hidden)
        break;
      const int64_t e = row * a.hidden + col;
      float gm[N], y[N];
      ignis_load_floats<IGNIS_CACHE_READ_ONLY>(static_cast<const G *>(a.gamma) + col, gm);
#pragma unroll
      for (int k = 0; k < N; ++k)
        y[k] = __fmul_rn(__fmul_rn(row_sum[col + k], rstd), __fadd_rn(gm[k], a.weight_bias));
      if (a.norm_out) {
        ignis_store_floats(static_cast<T *>(a.norm_out) + e, y);
        if (mirror)
          ignis_store_floats(reinterpret_cast<T *>(own + a.norm_offset) + e, y);
      }
      if (a.quant_out) {
        store_fp8<N>(a.quant_out + e, y, inv_scale);
        if (mirror)
          store_fp8<N>(reinterpret_cast<uint8_t *>(own + a.quant_offset) + e, y, inv_scale);
      }
    }
  }
}

/* Rows [lo, hi): input into the own data area. */
template <typename T, int N>
__device__ __forceinline__ void stage_rows(const ar_args &a, int64_t lo, int64_t hi) {
  const int64_t row_chunks = a.hidden / N;
  stage_chunks<T, N>(a, lo * row_chunks, hi * row_chunks);
}

/* Rows [lo, hi) of rank `owner`'s TWOSHOT results into this rank's outputs. */
template <typename T, int N>
__device__ __forceinline__ void gather_rows(const ar_args &a, int owner, int64_t lo, int64_t hi) {
  const int64_t row_chunks = a.hidden / N;
  const char *region = a.region[owner];
  for (int64_t c = lo * row_chunks + threadIdx.x; c < hi * row_chunks; c += blockDim.x) {
    const int64_t e = c * N;
    if (a.residual_out)
      copy_bytes<N * sizeof(T), IGNIS_CACHE_L2>(static_cast<T *>(a.residual_out) + e,
                                                region + a.sum_offset + e * sizeof(T));
    if (a.norm_out)
      copy_bytes<N * sizeof(T), IGNIS_CACHE_L2>(static_cast<T *>(a.norm_out) + e,
                                                region + a.norm_offset + e * sizeof(T));
    if (a.quant_out)
      copy_bytes<N, IGNIS_CACHE_L2>(a.quant_out + e, region + a.quant_offset + e);
  }
}

template <typename T, typename G, int N>
__global__ void __launch_bounds__(BLOCK_THREADS, 1) allreduce_fused(const ar_args a) {
  extern __shared__ float row_sum[]; /* hidden floats */
  __shared__ double scratch[32];
  ignis_pdl_wait();
  const float inv_scale = a.quant_out ? __fdiv_rn(1.0f, *a.scale_factor) : 0.0f;
  int64_t lo, hi;
  if (a.local) {
    part_of(a, a.rows, 0, &lo, &hi);
    for (int64_t row = lo; row < hi; ++row)
      fused_row<T, G, N>(a, row, false, inv_scale, row_sum, scratch);
    return;
  }
  if (*reinterpret_cast<volatile unsigned int *>(error_word(a)) != 0)
    return;
  const uint64_t base = call_base(a);
  if (!a.twoshot) {
    part_of(a, a.rows, 0, &lo, &hi);
    stage_rows<T, N>(a, lo, hi);
    if (!cross_rank_barrier(a, base + 1))
      return;
    for (int64_t row = lo; row < hi; ++row)
      fused_row<T, G, N>(a, row, false, inv_scale, row_sum, scratch);
    cross_rank_barrier(a, base + 2);
    return;
  }
  for (int s = 0; s < a.world; ++s) {
    part_of(a, a.rows, s, &lo, &hi);
    stage_rows<T, N>(a, lo, hi);
  }
  if (!cross_rank_barrier(a, base + 1))
    return;
  part_of(a, a.rows, a.rank, &lo, &hi);
  for (int64_t row = lo; row < hi; ++row)
    fused_row<T, G, N>(a, row, true, inv_scale, row_sum, scratch);
  if (!cross_rank_barrier(a, base + 2))
    return;
  for (int s = 0; s < a.world; ++s) {
    if (s == a.rank)
      continue;
    part_of(a, a.rows, s, &lo, &hi);
    gather_rows<T, N>(a, s, lo, hi);
  }
  cross_rank_barrier(a, base + 3);
}

/* ---- host side --------------------------------------------------------------------------------- */
static bool aligned16(const void *ptr) {
  return (uintptr_t)ptr % 16 == 0;
}

static int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

/* The grid for `units` units (slices of them on TWOSHOT) at `per_block` units per block, at most
 * max_blocks (the same on every rank: see comm_setup.cu), and the kernel's slice and part sizes. */
static dim3 split_units(ar_args *a, int64_t units, int64_t per_block, int max_blocks) {
  a->slice_units = a->twoshot ? ceil_div(units, a->world) : units;
  int64_t blocks = ceil_div(a->slice_units, per_block);
  blocks = blocks < 1 ? 1 : blocks < max_blocks ? blocks : max_blocks;
  a->part_units = ceil_div(a->slice_units, blocks);
  return dim3((unsigned)blocks);
}

/* Blocks are sized in 16-byte units: BLOCK_THREADS of them per block (one chunk per thread on the
 * vector path). */
template <typename T, int N> static cudaError_t launch_plain(ar_args a, int max_blocks, cudaStream_t stream) {
  const int64_t units = (a.rows * a.hidden * (int64_t)sizeof(T) + 15) / 16;
  const dim3 grid = split_units(&a, units, BLOCK_THREADS, max_blocks);
  return ignis_launch(allreduce_plain<T, N>, grid, dim3(BLOCK_THREADS), 0, stream, a);
}

template <typename T, typename G, int N>
static cudaError_t launch_fused(ar_args a, int max_blocks, cudaStream_t stream) {
  const size_t smem = (size_t)a.hidden * sizeof(float);
  cudaError_t err = ignis_allow_dynamic_smem<allreduce_fused<T, G, N>>(smem);
  if (err != cudaSuccess)
    return err;
  /* one thread per fused_group<T>() elements on either path (fused_row) */
  const int64_t threads = ceil_div(ceil_div(a.hidden, fused_group<T>()), 32) * 32;
  const dim3 grid = split_units(&a, a.rows, 1, max_blocks);
  return ignis_launch(allreduce_fused<T, G, N>, grid,
                      dim3((unsigned)(threads < BLOCK_THREADS ? threads : BLOCK_THREADS)), smem, stream, a);
}

/* The element path (N = 1) where a pointer is not 16-byte aligned or the row is not whole vectors;
 * the partition does not depend on it. */
template <typename T>
static cudaError_t launch(const ar_args &a, const ignis_allreduce_params *p, int max_blocks,
                          cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  if (p->pattern == IGNIS_AR_FUSION_ALLREDUCE) {
    const bool vector = (a.rows * a.hidden) % VEC == 0 && aligned16(a.input) && aligned16(a.output);
    return vector ? launch_plain<T, VEC>(a, max_blocks, stream) : launch_plain<T, 1>(a, max_blocks, stream);
  }
  const bool vector = a.hidden % VEC == 0 && aligned16(a.input) && aligned16(a.residual_in) &&
                      aligned16(a.residual_out) && aligned16(a.norm_out) && aligned16(a.quant_out) &&
                      aligned16(a.gamma);
  if (p->gamma_dtype == IGNIS_F32)
    return vector ? launch_fused<T, float, VEC>(a, max_blocks, stream)
                  : launch_fused<T, float, 1>(a, max_blocks, stream);
  return vector ? launch_fused<T, T, VEC>(a, max_blocks, stream)
                : launch_fused<T, T, 1>(a, max_blocks, stream);
}

/* The arguments every kernel gets. */
static ar_args make_args(const ignis_cuda_comm *c, const ignis_allreduce_params *p) {
  ar_args a;
  memset(&a, 0, sizeof a);
  for (int s = 0; s < c->world_size; ++s)
    a.region[s] = c->peer[s];
  a.world = c->world_size;
  a.rank = c->rank;
  a.twoshot = p->algo == IGNIS_ALLREDUCE_TWOSHOT;
  a.rows = p->rows;
  a.hidden = p->hidden;
  a.input = p->input;
  a.output = p->output;
  a.residual_in = p->residual_in;
  a.residual_out = p->residual_out;
  a.norm_out = p->norm_out;
  a.quant_out = static_cast<uint8_t *>(p->quant_out);
  a.gamma = p->gamma;
  a.scale_factor = p->scale_factor;
  a.eps = p->eps;
  a.weight_bias = p->weight_bias;
  a.sum_offset = ignis_cuda_comm_sum_offset(c);
  a.norm_offset = ignis_cuda_comm_norm_offset(c);
  a.quant_offset = ignis_cuda_comm_quant_offset(c);
  a.timeout_ns = c->timeout_ns;
  return a;
}

/* Launch the kernel of the call's dtype; a launch failure is IGNIS_ERROR_CUDA. */
static ignis_status launch_for_dtype(const ar_args &a, const ignis_allreduce_params *p, int max_blocks,
                                     cudaStream_t stream) {
  cudaError_t err = cudaSuccess;
  switch (p->dtype) {
  case IGNIS_F32:
    err = launch<float>(a, p, max_blocks, stream);
    break;
  case IGNIS_F16:
    err = launch<__half>(a, p, max_blocks, stream);
    break;
  default:
    err = launch<__nv_bfloat16>(a, p, max_blocks, stream);
    break;
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis_allreduce: kernel launch failed: %s",
                           cudaGetErrorString(err));
  }
  return ignis_check_launch("ignis_allreduce");
}

/* NCCL: the plain form in place or out of place; the fused forms reduce into the own data area, then
 * run the fused row math there with no exchange (local mode: one "rank", the own region). */
static ignis_status run_nccl(const ignis_cuda_comm *c, const ignis_allreduce_params *p, ar_args a,
                             cudaStream_t stream) {
  if (!c->nccl_comm)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "ignis_allreduce: algo NCCL needs the communicator created with an nccl_comm");
  const size_t count = (size_t)(p->rows * p->hidden);
  if (p->pattern == IGNIS_AR_FUSION_ALLREDUCE)
    return ignis_cuda_nccl_allreduce(c->nccl_comm, p->input, p->output, count, p->dtype, stream);
  char *sum = c->region + COMM_DATA_OFFSET;
  const ignis_status status = ignis_cuda_nccl_allreduce(c->nccl_comm, p->input, sum, count, p->dtype, stream);
  if (status != IGNIS_OK)
    return status;
  a.local = 1;
  a.world = 1;
  a.rank = 0;
  a.region[0] = c->region;
  a.twoshot = 0;
  a.input = sum;
  return launch_for_dtype(a, p, c->max_blocks, stream);
}

extern "C" ignis_status ignis_cuda_allreduce(const ignis_allreduce_params *p, void *stream) {
  const ignis_cuda_comm *c = static_cast<const ignis_cuda_comm *>(p->state);
  if (c->failed)
    return ignis_set_error(IGNIS_ERROR_TIMEOUT,
                           "ignis_allreduce: rank %d: an earlier call of this communicator gave up waiting "
                           "for its peers, so its ranks are out of step: destroy it and create another",
                           (int)c->rank);
  IGNIS_CUDA_ON_DEVICE(c->device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (p->dtype != IGNIS_F32 && p->dtype != IGNIS_F16 && p->dtype != IGNIS_BF16)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_allreduce: dtype %s reached the CUDA backend",
                           ignis_dtype_name(p->dtype));
  if (p->pattern != IGNIS_AR_FUSION_ALLREDUCE && p->pattern != IGNIS_AR_FUSION_RESIDUAL_RMSNORM &&
      p->pattern != IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP8 &&
      p->pattern != IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis_allreduce_fusion: pattern %d is not supported on CUDA", (int)p->pattern);
  if ((size_t)(p->rows * p->hidden) * ignis_dtype_size(p->dtype) > c->capacity)
    return ignis_set_error(
        IGNIS_ERROR_INSUFFICIENT_WORKSPACE,
        "ignis_allreduce: a message of %lld x %lld %s exceeds the communicator's capacity %zu",
        (long long)p->rows, (long long)p->hidden, ignis_dtype_name(p->dtype), c->capacity);
  if (p->pattern != IGNIS_AR_FUSION_ALLREDUCE && p->hidden > MAX_FUSED_HIDDEN)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis_allreduce_fusion: hidden=%lld exceeds the CUDA fused kernel's %d",
                           (long long)p->hidden, (int)MAX_FUSED_HIDDEN);
  if (p->rows * p->hidden == 0)
    return IGNIS_OK;
  const ar_args a = make_args(c, p);
  if (p->algo == IGNIS_ALLREDUCE_NCCL)
    return run_nccl(c, p, a, s);
  if (p->algo != IGNIS_ALLREDUCE_ONESHOT && p->algo != IGNIS_ALLREDUCE_TWOSHOT)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_allreduce: algo %d reached the CUDA backend",
                           (int)p->algo);
  return launch_for_dtype(a, p, c->max_blocks, s);
}
