/* CUDA backend of RoPE (include/ignis/rope.h; the math is stated plainly in src/cpu/rope.c).
 *
 * Mapping. A block owns a run of consecutive tokens (1..32) and all their q and k heads. Its
 * threads form a grid rows x units_per_head. A thread's column is a fixed unit of a head: in the
 * vector kernel (16-byte loads, V = 16 / sizeof(T) elements) a NeoX unit is the vector at element
 * c*V together with its partner at rotary_dim/2 + c*V, a GPT-J unit is the vector at c*V whose
 * pairs lie inside it, and a unit past rotary_dim is one vector to copy. Its row walks the block's
 * (token, head) slots, K slots per batch, so every load of a batch is in flight at once. The
 * scalar kernel is the same with one pair (or one copied element) per unit; it serves the layouts
 * the vector kernel cannot (a stride, pointer or rotary_dim/2 that is not a multiple of V).
 *
 * A block (1) issues the loads of its first batch, (2) finds its tokens' positions, from pos_ids
 * or by searching indptr (a warp per token, 32 candidates per step, so a few dependent loads even
 * for a huge batch), (3) fills shared memory with cos/sin of every (token, pair), either
 * sincosf(pos * f_i) in f32 with f_i computed on the host by the CPU backend's formula and passed
 * in the kernel arguments, or the row of the f32 cos/sin cache, and (4) rotates and stores, then
 * does the later batches, if any. So cos/sin are computed once per token and pair and reused by
 * every head. Products are rounded separately (no FMA) as in the CPU backend.
 *
 * Launch: through ignis_launch (programmatic dependent launch on sm_90+: ignis_pdl_wait() before
 * the first global access, ignis_pdl_launch_dependents() once a thread has issued its last loads);
 * about 256 threads a block (3 blocks per SM fit in 80 registers), K slots per thread per
 * batch (128 bytes of loads in flight per thread), tokens per block chosen on the host so the
 * slots fill the batches (3 tokens of 32 q + 8 k heads of 128 bf16), one token per block when
 * that is what it takes to give every SM work.
 *
 * Cos/sin cache form: a position outside [0, max_position) is not read; that token's values are
 * written unrotated (copied). Positions and indptr/offsets are read only inside their lengths,
 * even when indptr is malformed. */
#include <math.h>
#include <string.h>

#include "cuda/common/cuda_common.cuh"

#define ROPE_BLOCK_THREADS 256 /* rows * units_per_head is at most this (or one row) */
#define ROPE_MAX_TOKENS_PER_BLOCK 32
#define ROPE_TABLE_FLOATS 4096 /* cos + sin entries of a block's shared table (16 KB) */
#define ROPE_MAX_HALF (IGNIS_ROPE_MAX_HEAD_DIM / 2)

typedef struct rope_args {
  const void *q, *k;
  void *q_out, *k_out;
  int64_t q_stride_token, q_stride_head, k_stride_token, k_stride_head;
  int64_t q_out_stride_token, q_out_stride_head, k_out_stride_token, k_out_stride_head;
  int64_t nnz;
  int32_t num_q_heads, num_heads; /* q heads; q + k heads */
  int32_t half, rotary_dim;
  int32_t units_rotary, units_per_head, rows, tokens_per_block;
  int32_t rows_tokens, rows_heads;  /* rows = rows_tokens * num_heads + rows_heads */
  int32_t copy_tail_q, copy_tail_k; /* out of place: dims past rotary_dim are copied */
  int32_t use_indptr, index_i64;
  const void *positions, *indptr, *offsets;
  int64_t batch_size;
  const float *cos_sin_cache; /* NULL: frequencies below */
  int64_t cache_stride, max_position;
  float freq[ROPE_MAX_HALF];
} rope_args;

/* Compile-time shape of a kernel variant. */
template <typename T, bool INTERLEAVE, bool VEC> struct rope_layout {
  static constexpr int V = VEC ? 16 / (int)sizeof(T) : 1; /* elements per load */
  static constexpr bool SPLIT = !(INTERLEAVE && VEC);     /* x and y of a pair in two loads */
  static constexpr int PAIRS = SPLIT ? V : V / 2;         /* pairs per rotary unit */
  /* slots per thread per batch: 128 bytes of loads in flight per thread, within 80 registers */
  static constexpr int K = !VEC ? 8 : SPLIT ? 4 : sizeof(T) == 2 ? 8 : 6;
};

template <typename T, int N> struct alignas(sizeof(T) * N) rope_chunk { T e[N]; };

template <typename T, int N> __device__ __forceinline__ rope_chunk<T, N> rope_load(const T *p) {
  rope_chunk<T, N> c;
  if constexpr (sizeof(c) == 16) {
    *reinterpret_cast<uint4 *>(&c) = *reinterpret_cast<const uint4 *>(p);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j)
      c.e[j] = p[j];
  }
  return c;
}

template <typename T, int N> __device__ __forceinline__ void rope_store(T *p, const rope_chunk<T, N> &c) {
  if constexpr (sizeof(c) == 16) {
    *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(&c);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j)
      p[j] = c.e[j];
  }
}

/* A cos/sin cache entry, kept in L2 ahead of the streaming q/k traffic (evict_last): the cache is
 * a model constant every call gathers from, and a miss there is the second of two dependent round
 * trips. */
__device__ __forceinline__ float rope_load_cache(const float *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float v;
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  asm volatile("ld.global.nc.L2::cache_hint.f32 %0, [%1], %2;" : "=f"(v) : "l"(p), "l"(policy));
  return v;
#else
  return __ldg(p);
#endif
}

/* P consecutive floats of the shared cos/sin table (aligned to their vector size). */
template <int P> __device__ __forceinline__ void rope_load_table(const float *p, float (&v)[P]) {
  if constexpr (P % 4 == 0) {
#pragma unroll
    for (int j = 0; j < P; j += 4) {
      float4 f = *reinterpret_cast<const float4 *>(p + j);
      v[j] = f.x, v[j + 1] = f.y, v[j + 2] = f.z, v[j + 3] = f.w;
    }
  } else if constexpr (P == 2) {
    float2 f = *reinterpret_cast<const float2 *>(p);
    v[0] = f.x, v[1] = f.y;
  } else {
#pragma unroll
    for (int j = 0; j < P; ++j)
      v[j] = p[j];
  }
}

/* (x, y) -> (x cos - y sin, x sin + y cos), products rounded separately as on the CPU. */
template <typename T> __device__ __forceinline__ void rope_rotate(T &x, T &y, float cos_v, float sin_v) {
  float xf = ignis_to_float(x), yf = ignis_to_float(y);
  x = ignis_from_float<T>(__fmul_rn(xf, cos_v) - __fmul_rn(yf, sin_v));
  y = ignis_from_float<T>(__fmul_rn(xf, sin_v) + __fmul_rn(yf, cos_v));
}

__device__ __forceinline__ int64_t rope_index(const void *base, int32_t i64, int64_t i) {
  return i64 ? static_cast<const int64_t *>(base)[i] : (int64_t) static_cast<const int32_t *>(base)[i];
}

/* The request of token t: the last b in [0, batch) with indptr[b] <= t (0 if none), the answer
 * of the CPU backend's binary search, narrowed 32 ways per step by the whole warp. */
__device__ int64_t rope_find_request(const rope_args &a, int64_t t, int lane) {
  int64_t lo = 0, hi = a.batch_size - 1;
  while (lo < hi) {
    int64_t step = (hi - lo + 32) / 32; /* ceil((hi - lo + 1) / 32) */
    int64_t b = lo + lane * step;
    bool at_or_below = lane == 0 || (b <= hi && rope_index(a.indptr, a.index_i64, b) <= t);
    unsigned mask = __ballot_sync(0xffffffffu, at_or_below);
    lo += (int64_t)(31 - __clz(mask)) * step;
    hi = min(hi, lo + step - 1);
  }
  return lo;
}

/* One batch of a thread's slots: registers of the loaded units and where they go. */
template <typename T, bool INTERLEAVE, bool VEC> struct rope_batch {
  using L = rope_layout<T, INTERLEAVE, VEC>;
  rope_chunk<T, L::V> x[L::K], y[L::K]; /* y: second load of split units */
  T *dst[L::K];
  int token[L::K]; /* token within the block, -1: no work */
};

/* The thread's fixed unit (element offsets of its loads within a head, first cos/sin column) and
 * its current slot (token within the block, head among q then k heads). */
struct rope_cursor {
  bool tail;
  int off_x, off_y, col;
  int token, head;
};

template <typename T, bool INTERLEAVE, bool VEC>
__device__ __forceinline__ void rope_load_batch(const rope_args &a, rope_cursor &u, int64_t t0, int ntok,
                                                rope_batch<T, INTERLEAVE, VEC> &batch) {
  using L = rope_layout<T, INTERLEAVE, VEC>;
#pragma unroll
  for (int k = 0; k < L::K; ++k) {
    int tl = u.token, h = u.head;
    u.token += a.rows_tokens; /* next slot: rows further */
    u.head += a.rows_heads;
    if (u.head >= a.num_heads) {
      u.head -= a.num_heads;
      ++u.token;
    }
    batch.token[k] = -1;
    if (tl >= ntok)
      continue;
    bool is_q = h < a.num_q_heads;
    if (!is_q)
      h -= a.num_q_heads;
    if (u.tail && !(is_q ? a.copy_tail_q : a.copy_tail_k))
      continue;
    int64_t t = t0 + tl;
    const T *src = static_cast<const T *>(is_q ? a.q : a.k) +
                   t * (is_q ? a.q_stride_token : a.k_stride_token) +
                   h * (is_q ? a.q_stride_head : a.k_stride_head);
    batch.dst[k] = static_cast<T *>(is_q ? a.q_out : a.k_out) +
                   t * (is_q ? a.q_out_stride_token : a.k_out_stride_token) +
                   h * (is_q ? a.q_out_stride_head : a.k_out_stride_head);
    batch.x[k] = rope_load<T, L::V>(src + u.off_x);
    if (L::SPLIT && !u.tail)
      batch.y[k] = rope_load<T, L::V>(src + u.off_y);
    batch.token[k] = tl;
  }
}

template <typename T, bool INTERLEAVE, bool VEC>
__device__ __forceinline__ void rope_store_batch(const rope_args &a, const rope_cursor &u, const float *s_cos,
                                                 const float *s_sin, const int64_t *s_pos,
                                                 rope_batch<T, INTERLEAVE, VEC> &batch) {
  using L = rope_layout<T, INTERLEAVE, VEC>;
#pragma unroll
  for (int k = 0; k < L::K; ++k) {
    int tl = batch.token[k];
    if (tl < 0)
      continue;
    T *dst = batch.dst[k];
    if (u.tail) {
      rope_store<T, L::V>(dst + u.off_x, batch.x[k]);
      continue;
    }
    bool rotate = true;
    if (a.cos_sin_cache) {
      int64_t pos = s_pos[tl];
      rotate = pos >= 0 && pos < a.max_position;
    }
    if (rotate) {
      float cos_v[L::PAIRS], sin_v[L::PAIRS];
      rope_load_table<L::PAIRS>(s_cos + tl * a.half + u.col, cos_v);
      rope_load_table<L::PAIRS>(s_sin + tl * a.half + u.col, sin_v);
#pragma unroll
      for (int j = 0; j < L::PAIRS; ++j) {
        if (L::SPLIT)
          rope_rotate(batch.x[k].e[j], batch.y[k].e[j], cos_v[j], sin_v[j]);
        else
          rope_rotate(batch.x[k].e[2 * j], batch.x[k].e[2 * j + 1], cos_v[j], sin_v[j]);
      }
    }
    rope_store<T, L::V>(dst + u.off_x, batch.x[k]);
    if (L::SPLIT)
      rope_store<T, L::V>(dst + u.off_y, batch.y[k]);
  }
}

/* CACHE: cos/sin come from the cos/sin cache. That form has no sincosf, so it fits 4 blocks per SM
 * instead of 3, and it loads its positions before the q/k batch: its cos/sin sit two dependent
 * round trips away (position, then cache row), and the extra resident blocks keep loads in flight
 * while a block waits for them. */
template <typename T, bool INTERLEAVE, bool VEC, bool CACHE>
__global__ void __launch_bounds__(VEC ? ROPE_BLOCK_THREADS : 2 * ROPE_BLOCK_THREADS, VEC ? (CACHE ? 4 : 3) : 1)
    rope_kernel(const __grid_constant__ rope_args a) {
  using L = rope_layout<T, INTERLEAVE, VEC>;
  extern __shared__ __align__(16) float rope_smem[];
  const int tokens = a.tokens_per_block;
  float *s_cos = rope_smem, *s_sin = rope_smem + tokens * a.half;
  int64_t *s_pos = reinterpret_cast<int64_t *>(rope_smem + 2 * tokens * a.half);

  const int64_t t0 = (int64_t)blockIdx.x * tokens;
  const int ntok = (int)min((int64_t)tokens, a.nnz - t0);
  const int row = threadIdx.x / a.units_per_head, c = threadIdx.x - row * a.units_per_head;

  rope_cursor u;
  u.token = row / a.num_heads;
  u.head = row - u.token * a.num_heads;
  u.tail = c >= a.units_rotary;
  u.off_y = 0;
  u.col = 0;
  if (u.tail) {
    u.off_x = a.rotary_dim + (c - a.units_rotary) * L::V;
  } else if (!L::SPLIT) {
    u.off_x = c * L::V;
    u.col = c * L::PAIRS;
  } else if (INTERLEAVE) {
    u.off_x = 2 * c;
    u.off_y = u.off_x + 1;
    u.col = c;
  } else {
    u.off_x = c * L::V;
    u.off_y = a.half + u.off_x;
    u.col = u.off_x;
  }

  rope_batch<T, INTERLEAVE, VEC> batch;
  ignis_pdl_wait();
  int64_t early_pos = 0; /* blocks have >= 128 threads and <= 32 tokens: one position a thread */
  if (CACHE && threadIdx.x < ntok)
    early_pos = rope_index(a.positions, a.index_i64, t0 + threadIdx.x);
  rope_load_batch(a, u, t0, ntok, batch);

  if (CACHE) {
    if (threadIdx.x < ntok)
      s_pos[threadIdx.x] = early_pos;
  } else if (a.use_indptr) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, full_warps = blockDim.x >> 5;
    if (warp < full_warps)
      for (int tl = warp; tl < ntok; tl += full_warps) {
        int64_t t = t0 + tl, b = rope_find_request(a, t, lane);
        if (lane == 0)
          s_pos[tl] = rope_index(a.offsets, a.index_i64, b) + t - rope_index(a.indptr, a.index_i64, b);
      }
  } else {
    for (int tl = threadIdx.x; tl < ntok; tl += blockDim.x)
      s_pos[tl] = rope_index(a.positions, a.index_i64, t0 + tl);
  }
  __syncthreads();

  for (int idx = threadIdx.x; idx < ntok * a.half; idx += blockDim.x) {
    int tl = idx / a.half, i = idx - tl * a.half;
    int64_t pos = s_pos[tl];
    float cos_v = 1.0f, sin_v = 0.0f;
    if (CACHE) {
      if (pos >= 0 && pos < a.max_position) {
        const float *cache_row = a.cos_sin_cache + pos * a.cache_stride;
        cos_v = rope_load_cache(cache_row + i);
        sin_v = rope_load_cache(cache_row + a.half + i);
      }
    } else {
      sincosf(__fmul_rn((float)pos, a.freq[i]), &sin_v, &cos_v);
    }
    s_cos[idx] = cos_v;
    s_sin[idx] = sin_v;
  }
  __syncthreads();

  for (;;) {
    const bool last = u.token >= ntok; /* this thread has no slot left to load */
    if (last)
      ignis_pdl_launch_dependents();
    rope_store_batch(a, u, s_cos, s_sin, s_pos, batch);
    if (last)
      break;
    rope_load_batch(a, u, t0, ntok, batch);
  }
}

/* ---- host side ----------------------------------------------------------------------------- */

/* f_i exactly as src/cpu/rope.c computes it (same expression, same libm), so both backends rotate
 * by bit-identical angles. The last table is kept per thread: engines call with one config. */
static void rope_frequencies(const ignis_rope_params *p, float *freq) {
  static thread_local struct {
    int valid;
    int64_t rotary_dim;
    float theta, rcp_scale, smooth_a, smooth_b;
    float freq[ROPE_MAX_HALF];
  } last;
  if (!(last.valid && last.rotary_dim == p->rotary_dim && last.theta == p->rope_theta &&
        last.rcp_scale == p->rope_rcp_scale && last.smooth_a == p->smooth_a &&
        last.smooth_b == p->smooth_b)) {
    for (int64_t i = 0; i < p->rotary_dim / 2; ++i) {
      float f = powf(p->rope_theta, -(float)(2 * i) / (float)p->rotary_dim);
      float s = fminf(fmaxf(f * p->smooth_a + p->smooth_b, 0.0f), 1.0f);
      last.freq[i] = (1.0f - s) * f * p->rope_rcp_scale + s * f;
    }
    last.valid = 1;
    last.rotary_dim = p->rotary_dim;
    last.theta = p->rope_theta;
    last.rcp_scale = p->rope_rcp_scale;
    last.smooth_a = p->smooth_a;
    last.smooth_b = p->smooth_b;
  }
  memcpy(freq, last.freq, sizeof(float) * (size_t)(p->rotary_dim / 2));
}

/* 16-byte vectors of one tensor stay aligned: its pointer and every stride actually stepped over. */
static bool rope_aligned(const void *ptr, int64_t nnz, int64_t heads, int64_t stride_token,
                         int64_t stride_head, int v) {
  return heads == 0 || ((uintptr_t)ptr % 16 == 0 && (nnz == 1 || stride_token % v == 0) &&
                        (heads == 1 || stride_head % v == 0));
}

/* Whether the 16-byte kernel can serve this call (v elements per vector). */
static bool rope_vectorizable(const ignis_rope_params *p, const rope_args &a, int v) {
  int64_t rotary_span = p->interleave ? p->rotary_dim : p->rotary_dim / 2;
  bool copies = a.copy_tail_q || a.copy_tail_k;
  int64_t n = p->nnz, hq = p->num_q_heads, hk = p->num_k_heads;
  return rotary_span % v == 0 && (!copies || (p->head_dim - p->rotary_dim) % v == 0) &&
         rope_aligned(p->q, n, hq, p->q_stride_token, p->q_stride_head, v) &&
         rope_aligned(p->k, n, hk, p->k_stride_token, p->k_stride_head, v) &&
         rope_aligned(p->q_out, n, hq, p->q_out_stride_token, p->q_out_stride_head, v) &&
         rope_aligned(p->k_out, n, hk, p->k_out_stride_token, p->k_out_stride_head, v);
}

/* Tokens per block: the fewest whose slots (tokens x heads) fill the batches of `capacity` slots
 * to 7/8 or more (else the best fill), within the shared table and ROPE_MAX_TOKENS_PER_BLOCK, and
 * no more than it takes to give every SM a block. */
static int32_t rope_tokens_per_block(const rope_args &a, int64_t nnz, int64_t capacity, int64_t sm_count) {
  int64_t most = ROPE_TABLE_FLOATS / (2 * a.half);
  if (most > ROPE_MAX_TOKENS_PER_BLOCK)
    most = ROPE_MAX_TOKENS_PER_BLOCK;
  int64_t spread = (nnz + sm_count - 1) / sm_count;
  if (most > spread)
    most = spread;
  int64_t first = capacity / a.num_heads;
  first = first < 1 ? 1 : first > most ? most : first;
  int64_t best = first, best_fill_num = 0, best_fill_den = 1;
  for (int64_t tokens = first; tokens <= most; ++tokens) {
    int64_t slots = tokens * a.num_heads, room = (slots + capacity - 1) / capacity * capacity;
    if (slots * best_fill_den > best_fill_num * room) {
      best = tokens;
      best_fill_num = slots;
      best_fill_den = room;
    }
    if (8 * slots >= 7 * room)
      break;
  }
  return (int32_t)best;
}

template <typename T, bool INTERLEAVE, bool VEC, bool CACHE>
static ignis_status rope_launch(rope_args &a, const ignis_rope_params *p, int32_t device,
                                cudaStream_t stream) {
  using L = rope_layout<T, INTERLEAVE, VEC>;
  int64_t tail_units = a.copy_tail_q || a.copy_tail_k ? (p->head_dim - p->rotary_dim) / L::V : 0;
  a.units_rotary = (int32_t)((L::SPLIT ? a.half : a.rotary_dim) / L::V);
  a.units_per_head = a.units_rotary + (int32_t)tail_units;
  a.rows = a.units_per_head >= ROPE_BLOCK_THREADS ? 1 : ROPE_BLOCK_THREADS / a.units_per_head;
  a.rows_tokens = a.rows / a.num_heads;
  a.rows_heads = a.rows % a.num_heads;
  a.tokens_per_block = rope_tokens_per_block(a, p->nnz, (int64_t)a.rows * L::K, ignis_cuda_sm_count(device));
  int64_t tokens = a.tokens_per_block;
  int64_t blocks = (p->nnz + tokens - 1) / tokens;
  if (blocks > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "ignis_cuda_rope: nnz=%lld needs more than 2^31 blocks",
                           (long long)p->nnz);
  size_t smem = (size_t)tokens * (2 * (size_t)a.half * sizeof(float) + sizeof(int64_t));
  cudaError_t err = ignis_launch(rope_kernel<T, INTERLEAVE, VEC, CACHE>, dim3((unsigned)blocks),
                                 dim3((unsigned)(a.rows * a.units_per_head)), smem, stream, a);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis_cuda_rope: kernel launch failed: %s",
                           cudaGetErrorString(err));
  }
  return ignis_check_launch("ignis_cuda_rope");
}

template <typename T, bool CACHE>
static ignis_status rope_dispatch_pairs(rope_args &a, const ignis_rope_params *p, int32_t device,
                                        cudaStream_t stream) {
  bool vec = rope_vectorizable(p, a, 16 / (int)sizeof(T));
  if (p->interleave)
    return vec ? rope_launch<T, true, true, CACHE>(a, p, device, stream)
               : rope_launch<T, true, false, CACHE>(a, p, device, stream);
  return vec ? rope_launch<T, false, true, CACHE>(a, p, device, stream)
             : rope_launch<T, false, false, CACHE>(a, p, device, stream);
}

template <typename T>
static ignis_status rope_dispatch(rope_args &a, const ignis_rope_params *p, int32_t device,
                                  cudaStream_t stream) {
  return p->cos_sin_cache ? rope_dispatch_pairs<T, true>(a, p, device, stream)
                          : rope_dispatch_pairs<T, false>(a, p, device, stream);
}

extern "C" ignis_status ignis_cuda_rope(const ignis_rope_params *p, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  if (p->nnz == 0 || p->num_q_heads + p->num_k_heads == 0)
    return IGNIS_OK;
  if (p->position_source == IGNIS_ROPE_POS_INDPTR && p->batch_size < 1)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                           "ignis_cuda_rope: indptr holds no request but q has %lld tokens",
                           (long long)p->nnz);
  if (p->num_q_heads + p->num_k_heads > (1 << 20))
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "ignis_cuda_rope: %lld q + k heads, at most 2^20",
                           (long long)(p->num_q_heads + p->num_k_heads));
  rope_args a;
  memset(&a, 0, sizeof a);
  a.q = p->q;
  a.k = p->k;
  a.q_out = p->q_out;
  a.k_out = p->k_out;
  a.q_stride_token = p->q_stride_token;
  a.q_stride_head = p->q_stride_head;
  a.k_stride_token = p->k_stride_token;
  a.k_stride_head = p->k_stride_head;
  a.q_out_stride_token = p->q_out_stride_token;
  a.q_out_stride_head = p->q_out_stride_head;
  a.k_out_stride_token = p->k_out_stride_token;
  a.k_out_stride_head = p->k_out_stride_head;
  a.nnz = p->nnz;
  a.num_q_heads = (int32_t)p->num_q_heads;
  a.num_heads = (int32_t)(p->num_q_heads + p->num_k_heads);
  a.half = (int32_t)(p->rotary_dim / 2);
  a.rotary_dim = (int32_t)p->rotary_dim;
  bool q_in_place = p->q_out == p->q && p->q_out_stride_token == p->q_stride_token &&
                    p->q_out_stride_head == p->q_stride_head;
  bool k_in_place = p->k_out == p->k && p->k_out_stride_token == p->k_stride_token &&
                    p->k_out_stride_head == p->k_stride_head;
  bool partial = p->rotary_dim < p->head_dim;
  a.copy_tail_q = partial && !q_in_place && p->num_q_heads > 0;
  a.copy_tail_k = partial && !k_in_place && p->num_k_heads > 0;
  a.use_indptr = p->position_source == IGNIS_ROPE_POS_INDPTR;
  a.index_i64 = p->index_dtype == IGNIS_I64;
  a.positions = p->positions;
  a.indptr = p->indptr;
  a.offsets = p->offsets;
  a.batch_size = p->batch_size;
  a.cos_sin_cache = p->cos_sin_cache;
  a.cache_stride = p->cos_sin_cache_stride;
  a.max_position = p->max_position;
  if (!p->cos_sin_cache)
    rope_frequencies(p, a.freq);

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p->dtype) {
  case IGNIS_F32:
    return rope_dispatch<float>(a, p, device, s);
  case IGNIS_F16:
    return rope_dispatch<__half>(a, p, device, s);
  case IGNIS_BF16:
    return rope_dispatch<__nv_bfloat16>(a, p, device, s);
  default:
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "ignis_cuda_rope: dtype %s", ignis_dtype_name(p->dtype));
  }
}
