/* Threshold search and inverse-transform sampling of the sampling kernels, one block of 1024
 * threads per row. The results are the exact quantities include/ignis/sampling.h defines (the
 * k-th largest key, the largest key whose suffix mass reaches p * base, the inverse transform in
 * index order), so they equal those of the CPU backend (src/cpu/sampling.c), which computes them
 * plainly; only the way there differs.
 *
 * Keys and masses. Every element has a 32-bit order key (core/philox.h); a positive weight also has
 * an exact fixed-point mass at the row's largest exponent (weight_mass). A threshold is a key: the
 * allowed set is {key >= thr}.
 *
 * Why this shape: a row is 128K elements and one block handles it, so the cost is instructions per
 * element per pass. The full-row passes therefore do no 64-bit shared atomics (those compile to
 * compare-and-swap loops that serialize on the few hot bins of a real distribution) and no
 * per-element random numbers: they count (a +1 atomic, which the hardware aggregates per address)
 * and add masses in registers.
 *
 * Search (search()): a histogram of counts over 15-bit digits of the key (BINS bins, level 1: keys
 * >> 16 of the weights, >> 17 of any float), then a window of candidate keys:
 *   count target (top-k): the one bin where the suffix count reaches k: exact.
 *   mass target (top-p):  masses per bin are bounded by count * mass(lowest key of the bin) and
 *                         count * mass(highest key present), so the suffix mass is known to within
 *                         a bin's width (1/128 of a binade at level 1); the window is the bins
 *                         where the bounds straddle the target. The target p * W itself is bounded
 *                         the same way until a pass has summed W exactly.
 * The next pass over the row then
 *   gathers the window's keys (with their indices) into shared memory when they fit (LIST_CAP;
 *   when everything above the window fits too, it gathers all of it), sums the exact mass above
 *   the window in registers, and the list is resolved exactly by a radix select in shared memory
 *   (list_select: 8-bit digits, ~3 rounds, no sort): the k-th key, or the largest key whose exact
 *   suffix mass reaches the target;
 *   or, when the window holds more keys than fit, histograms the window alone at a finer digit
 *   with the exact mass above it (a refine pass), and the search repeats; when the window cannot
 *   shrink that way it is cut in two halves with the exact mass of the upper one (a bisect pass).
 * A top-k or top-p search of a real row is 2 passes: the histogram and the gather (a top-p near 1
 * may need one refine); ties and narrow rows end in single-key bins, where counts give exact masses.
 * Two targets (joint top-k and top-p) share the passes: a target whose window lies wholly below
 * the other's cannot set the maximum and is dropped.
 *
 * Sampling (sample_tiles()): the row is cut into tiles of 2^tile_shift * 4096 elements (at most
 * MAX_TILES tiles); the allowed mass of each tile is summed in shared memory (two 32-bit words per
 * tile with the carry added explicitly, so every add is a native atomic) by the pass that knows the
 * threshold (the gather, or a tile pass) plus the resolved list entries. One 64-bit uniform U per
 * row gives the target t = floor(U * M / 2^64) below the allowed mass M; a scan over the tiles
 * finds the tile holding t, and a scan over that tile's elements (re-read, 1 to 2 chunks per thread)
 * the element: the inverse transform in index order, exact in integers.
 *
 * Shared memory: the tiles and the reduction scratch (17 KB), the select scratch (3 KB), then the
 * histogram (128 KB) whose space the gathered list reuses: ~148 KB per block, within sm_80's 163 KB.
 *
 * Row access: chunks of 4 elements (sampling_common.cuh), UNROLL chunks per thread loaded before
 * any is used; every thread takes every step, so warps stay whole for the ballots and shuffles.
 * Logits: weights exp(x - x_max) are computed only for elements a pass may need; a pass that looks
 * for weights at or above w_lo skips the exp of any x below x_max + ln(w_lo) - margin (the margin
 * covers the rounding of both sides many times over). */
#ifndef IGNIS_CUDA_SAMPLING_SEARCH_CUH
#define IGNIS_CUDA_SAMPLING_SEARCH_CUH

#include "cuda/sampling/sampling_common.cuh"

/* A hook for bench/micro/sampling_passes.cu, which defines it before including this file to stamp
 * the steps of a search (a barrier and a clock read each); nothing in the library. */
#ifndef IGNIS_SAMPLING_MARK
#define IGNIS_SAMPLING_MARK(step) ((void)0)
#endif

namespace ignis_sampling {

constexpr int THREADS = 1024;
constexpr int UNROLL = 4;
constexpr int LOG_BINS = 15;
constexpr int BINS = 1 << LOG_BINS;
constexpr int WEIGHT_SHIFT = 31 - LOG_BINS; /* level-1 digit of a weight key (top bit set): 1/128 binade */
constexpr int ANY_SHIFT = 32 - LOG_BINS;    /* level-1 digit of any key */
constexpr int LIST_CAP = 16384;             /* gathered keys: the histogram's memory */
constexpr int COUNT_TRASH = BINS;           /* histogram slot of the elements that do not count */
constexpr int MAX_TILES = 2048;
constexpr uint32_t WEIGHT_FLOOR = 0x80000000u; /* key of +0: every positive weight is above it */
constexpr uint32_t WEIGHT_TOP = 0xFF7FFFFFu;   /* key of FLT_MAX: the largest weight */
constexpr uint32_t ANY_TOP = 0xFFFFFFFFu;

/* What a row holds and how its elements take part (a template parameter of every pass, so the
 * per-element code has no branch on it). */
enum row_kind {
  ROW_PROBS = 0,    /* probabilities: weights w = p if finite and > 0; only w > 0 take part */
  ROW_LOGITS = 1,   /* logits: w = exp(x - x_max) */
  ROW_RESIDUAL = 2, /* two probability rows: w = max(0, row - minus) (speculative sampling) */
  ROW_MASK = 3,     /* every element, keyed by its value, NaN as -inf */
  ROW_SELECT = 4    /* every element, keyed by its value, NaN below -inf */
};
__host__ __device__ constexpr bool weight_kind(int kind) {
  return kind <= ROW_RESIDUAL;
}

/* A row being searched or sampled. */
template <typename T> struct row_view {
  const T *row;
  const T *minus; /* ROW_RESIDUAL: the subtracted row */
  int64_t n;
  bool vec;
  float x_max; /* ROW_LOGITS: the largest sanitized logit */
};

/* Block-uniform results, written by one thread and read by all after a barrier. */
struct pick_hit {
  int32_t bin;            /* -1: the target is not reached */
  uint64_t count_above;   /* keys above the bin (including those above the histogram) */
  uint64_t count_through; /* keys in or above the bin */
};

struct block_state {
  pick_hit hit_k, hit_lo, hit_hi;
  uint32_t list_len;
  uint32_t key;
  int32_t tile;
  uint64_t rest;
  int64_t token;
};

/* Shared memory of the sampling passes (tiles, reductions): the start of every sampling kernel's
 * dynamic shared memory. */
struct tile_smem {
  uint32_t tile_lo[MAX_TILES]; /* allowed mass per tile, low and high 32-bit words */
  uint32_t tile_hi[MAX_TILES];
  reduce_scratch red;
  block_state st;
};

/* The histogram (and its COUNT_TRASH slot), or the gathered list in its place. */
union __align__(16) search_space {
  uint32_t hist[BINS + 1];
  uint64_t list[LIST_CAP]; /* key << 32 | (0xFFFFFFFF - index) */
};

/* Radix select over the gathered list (list_select): one round's digit histogram and the state the
 * round leaves for the next. */
constexpr int SELECT_BINS = 256;
struct select_space {
  uint32_t count[SELECT_BINS];
  uint32_t mass_lo[SELECT_BINS]; /* mass per digit, low and high 32-bit words */
  uint32_t mass_hi[SELECT_BINS];
  uint32_t lo, hi; /* the keys still in range */
  uint64_t count_above, mass_above;
  int32_t mode; /* SELECT_COUNT / SELECT_MASS */
  int32_t done;
  int64_t need;
};

/* Shared memory of a search: the tiles, the select scratch, then the search space. */
struct search_smem {
  tile_smem t;
  select_space sel;
  search_space u;
};

/* The kernels' dynamic shared memory, typed (the passes are separate functions; reaching the memory
 * through this keeps their accesses and atomics in the shared address space). */
extern __shared__ __align__(16) unsigned char ignis_sampling_smem[];
__device__ __forceinline__ search_smem &search_mem() {
  return *reinterpret_cast<search_smem *>(ignis_sampling_smem);
}
__device__ __forceinline__ tile_smem &tile_mem() {
  return *reinterpret_cast<tile_smem *>(ignis_sampling_smem);
}

/* The steps IGNIS_SAMPLING_MARK names. */
enum search_mark {
  MARK_PICK = 1,
  MARK_GATHER,
  MARK_SELECT,
  MARK_LIST_MASS,
  MARK_BISECT,
  MARK_REFINE,
  MARK_PICK_RUNS,
  MARK_PICK_SCAN
};

/* ---- elements ---------------------------------------------------------------------------------------- */
/* Key and weight of an element of value raw (sub: the same element of the subtracted row); false
 * when it takes no part. Logits below x_floor count as weight 0 without their exp. */
template <typename T, int KIND>
__device__ __forceinline__ bool decode(const row_view<T> &r, float raw, float sub, float x_floor,
                                       uint32_t &key, float &w) {
  if constexpr (KIND == ROW_MASK) {
    w = raw;
    key = ignis_order_key(isnan(raw) ? -INFINITY : raw);
    return true;
  } else if constexpr (KIND == ROW_SELECT) {
    w = raw;
    key = isnan(raw) ? 0u : ignis_order_key(raw);
    return true;
  } else {
    if constexpr (KIND == ROW_RESIDUAL) {
      const float d = sanitize_prob(raw) - sanitize_prob(sub);
      w = d > 0.0f ? d : 0.0f;
    } else if constexpr (KIND == ROW_LOGITS) {
      const float x = sanitize_logit(raw);
      w = (r.x_max == -INFINITY || x < x_floor) ? 0.0f : ignis_exp_nonpos(x - r.x_max);
    } else {
      w = sanitize_prob(raw);
    }
    key = ignis_float_bits(w) | 0x80000000u; /* the order key of w >= 0 */
    return w > 0.0f;
  }
}

/* Mass of the weight (>= 0) of key `key` at exponent field e_max (>= its own): ignis_mass_at of
 * ignis_mass_own (core/philox.h), with the shift clamped instead of tested (a mass is < 2^39). */
__device__ __forceinline__ uint64_t weight_mass(uint32_t key, int e_max) {
  const uint32_t bits = key & 0x7FFFFFFFu, e = bits >> 23;
  const uint32_t significand = (bits & 0x7FFFFFu) | (e ? 0x800000u : 0u);
  const int shift = min(e_max - (int)max(e, 1u), 63);
  return ((uint64_t)significand << 15) >> shift;
}

/* The same mass from the weight itself, for the element loops: floor(w * 2^(165 - e_max)) (which is
 * what the shifts of weight_mass compute) as two float products by powers of two and a truncating
 * conversion: 3 instructions for 9. Each product is exact unless it falls below 2^-126, and then the
 * mass is below 1 and both ways give 0 (denormal results are kept: no flush to zero here). */
struct mass_scale {
  float first, second; /* 2^k1 and 2^k2, k1 + k2 = 165 - e_max, each within the normal range */
};
__device__ __forceinline__ mass_scale mass_scale_of(int e_max) {
  const int k = 165 - e_max, k1 = k >> 1;
  return {__int_as_float((k1 + 127) << 23), __int_as_float((k - k1 + 127) << 23)};
}
__device__ __forceinline__ uint64_t weight_mass_of(float w, mass_scale s) {
  return __float2ull_rz(__fmul_rn(__fmul_rn(w, s.first), s.second));
}

/* The lowest logit whose weight can reach the weight of key lowest_key; -inf when all count (and
 * for rows that are not logits). */
template <typename T, int KIND>
__device__ __forceinline__ float logit_floor(const row_view<T> &r, uint32_t lowest_key) {
  if (KIND != ROW_LOGITS || r.x_max == -INFINITY || lowest_key <= WEIGHT_FLOOR)
    return -INFINITY;
  return r.x_max + logf(ignis_key_float(lowest_key)) - (1e-3f + 1e-6f * fabsf(r.x_max));
}

__device__ __forceinline__ uint64_t pack_entry(uint32_t key, int64_t index) {
  return (uint64_t)key << 32 | (uint64_t)(0xFFFFFFFFu - (uint32_t)index);
}
__device__ __forceinline__ uint32_t entry_key(uint64_t e) {
  return (uint32_t)(e >> 32);
}
__device__ __forceinline__ int64_t entry_index(uint64_t e) {
  return (int64_t)(0xFFFFFFFFu - (uint32_t)e);
}

/* Elements of chunk c inside a row of n: 4, fewer in the last chunk, 0 past the row. */
__device__ __forceinline__ int chunk_valid(int64_t n, int64_t c) {
  const int64_t left = n - c * 4;
  return left >= 4 ? 4 : (left > 0 ? (int)left : 0);
}

/* Chunk c of a row that holds it whole, by one vector load through the read-only path. */
template <typename T>
__device__ __forceinline__ void load_whole_chunk(const T *row, int64_t c, float (&v)[4]) {
  if constexpr (sizeof(T) == 4) {
    const float4 f = __ldg(reinterpret_cast<const float4 *>(row + c * 4));
    v[0] = f.x;
    v[1] = f.y;
    v[2] = f.z;
    v[3] = f.w;
  } else {
    const uint2 raw = __ldg(reinterpret_cast<const uint2 *>(row + c * 4));
    ignis_unpack_word<T>(raw.x, v);
    ignis_unpack_word<T>(raw.y, v + 2);
  }
}

/* Asks L2 for the elements of step `step` of the row (the UNROLL * THREADS chunks it loads) ahead of
 * their loads: a pass holds 16 elements per thread in flight, too few to cover the memory's latency
 * on their own. sm_90: thread 0 alone, in bulk requests of a quarter step each (spread over the
 * warps, the address arithmetic stayed live in every thread's registers and the element loops
 * spilled). Other targets: nothing (per-line prefetches would cost thread 0 ~500 instructions a
 * step). */
template <typename T> __device__ __forceinline__ void prefetch_step(const T *row, int64_t n, int64_t step) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (threadIdx.x != 0)
    return;
  constexpr int64_t STEP = (int64_t)UNROLL * THREADS * 4, QUARTER = STEP / 4;
  for (int64_t lo = step * STEP; lo < (step + 1) * STEP && lo < n; lo += QUARTER) {
    const int64_t hi = lo + QUARTER < n ? lo + QUARTER : n;
    const size_t a = __cvta_generic_to_global(row + lo) & ~(size_t)15;
    const size_t b = (__cvta_generic_to_global(row + hi) + 15) & ~(size_t)15;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"((uint32_t)(b - a)) : "memory");
  }
#else
  (void)row;
  (void)n;
  (void)step;
#endif
}

/* Visits the row in steps that every thread takes: step s loads chunks (s * UNROLL + u) * THREADS
 * + threadIdx.x for u < UNROLL, then calls visit(group, chunk, values, subtracted values, valid) for
 * each (group = chunk / THREADS, the same across the block; valid = the chunk's elements inside the
 * row, chunk_valid). The steps whose chunks all lie whole inside a vector row (all but the last, on
 * a real row) load without bounds checks and pass valid = 4, a constant, so the visitor's element
 * checks fold away there. Elements past `valid` read as 0 and must be skipped by visit; no thread
 * leaves early. Each step asks L2 for the step two ahead (prefetch_step). */
template <typename T, int KIND, typename Visit>
__device__ __forceinline__ void for_each_chunk(const row_view<T> &r, Visit &&visit) {
  const int64_t chunks = (r.n + 3) / 4;
  const int64_t steps = (chunks + (int64_t)UNROLL * THREADS - 1) / ((int64_t)UNROLL * THREADS);
  const int64_t whole_steps = r.vec ? (r.n / 4) / ((int64_t)UNROLL * THREADS) : 0;
  auto prefetch = [&](int64_t step) {
    prefetch_step(r.row, r.n, step);
    if constexpr (KIND == ROW_RESIDUAL)
      prefetch_step(r.minus, r.n, step);
  };
  prefetch(0);
  prefetch(1);
  for (int64_t step = 0; step < whole_steps; ++step) {
    prefetch(step + 2);
    const int64_t base = step * UNROLL * THREADS + threadIdx.x;
    float v[UNROLL][4], q[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      load_whole_chunk(r.row, base + (int64_t)u * THREADS, v[u]);
      if constexpr (KIND == ROW_RESIDUAL)
        load_whole_chunk(r.minus, base + (int64_t)u * THREADS, q[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      visit((int)(step * UNROLL + u), base + (int64_t)u * THREADS, v[u], q[u], 4);
  }
  for (int64_t step = whole_steps; step < steps; ++step) {
    prefetch(step + 2);
    const int64_t base = step * UNROLL * THREADS + threadIdx.x;
    float v[UNROLL][4], q[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      load_chunk(r.row, base + (int64_t)u * THREADS, r.n, r.vec, v[u]);
      if constexpr (KIND == ROW_RESIDUAL)
        load_chunk(r.minus, base + (int64_t)u * THREADS, r.n, r.vec, q[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t c = base + (int64_t)u * THREADS;
      visit((int)(step * UNROLL + u), c, v[u], q[u], chunk_valid(r.n, c));
    }
  }
}

/* hist[slot] += 1: a shared-memory reduction at the histogram's 32-bit shared address, taken once
 * per pass (through a generic pointer the compiler rebuilt the shared window base for every
 * element); same-address increments of a warp are combined by the hardware. Elements that do not
 * count go to a slot past the bins (COUNT_TRASH), not around a branch. */
__device__ __forceinline__ void count_at(uint32_t hist_base, uint32_t slot) {
  asm volatile("red.shared.add.u32 [%0], 1;" ::"r"(hist_base + slot * 4) : "memory");
}

/* ---- tiles ------------------------------------------------------------------------------------------- */
/* Tiles: 2^tile_shift groups of THREADS chunks each, the smallest power of two that keeps the row
 * within MAX_TILES tiles. */
__device__ __forceinline__ int64_t group_count(int64_t n) {
  return ((n + 3) / 4 + THREADS - 1) / THREADS;
}

__device__ __forceinline__ int tile_shift_of(int64_t n) {
  int shift = 0;
  while ((group_count(n) + (1 << shift) - 1) >> shift > MAX_TILES)
    ++shift;
  return shift;
}

__device__ __forceinline__ void tile_add(int tile, uint64_t v) {
  tile_smem &t = tile_mem();
  if (tile < 0 || tile >= MAX_TILES || v == 0)
    return;
  shared_add_u64(&t.tile_lo[tile], &t.tile_hi[tile], v);
}

__device__ __forceinline__ uint64_t tile_mass(int tile) {
  const tile_smem &t = tile_mem();
  return (uint64_t)t.tile_hi[tile] << 32 | t.tile_lo[tile];
}

/* Sum over the warp of the lanes' chunk masses (each < 2^41: four masses < 2^39): two 32-bit
 * hardware reductions, of the low 24 bits and of the rest, where sm_80+ has them. */
__device__ __forceinline__ uint64_t warp_sum_chunk_mass(uint64_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t low = __reduce_add_sync(0xffffffffu, (uint32_t)v & 0xFFFFFFu);
  const uint32_t high = __reduce_add_sync(0xffffffffu, (uint32_t)(v >> 24));
  return ((uint64_t)high << 24) + low;
#else
  return warp_sum_u64(v);
#endif
}

/* Zero the tiles. Starts and ends with a barrier. */
__device__ __forceinline__ void clear_tiles() {
  tile_smem &t = tile_mem();
  __syncthreads();
  for (int i = threadIdx.x; i < MAX_TILES; i += THREADS) {
    t.tile_lo[i] = 0;
    t.tile_hi[i] = 0;
  }
  __syncthreads();
}

/* ---- whole-row passes -------------------------------------------------------------------------------- */
/* The largest weight key of the row (0 if no weight is positive). */
template <typename T, int KIND> __device__ __noinline__ uint32_t max_key_pass(const row_view<T> r) {
  uint32_t best = 0;
  for_each_chunk<T, KIND>(r, [&](int, int64_t, const float(&v)[4], const float(&q)[4], int valid) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t key;
      float w;
      const bool part = decode<T, KIND>(r, v[j], q[j], -INFINITY, key, w) && j < valid;
      best = part && key > best ? key : best;
    }
  });
  uint64_t unused_a = 0, unused_b = 0, unused_c = 0;
  block_sums(best, unused_a, unused_b, unused_c, tile_mem().red);
  return best;
}

/* Allowed mass {weight > 0, key >= thr} per tile into the tiles; returns the total. */
template <typename T, int KIND>
__device__ __noinline__ uint64_t tile_pass(const row_view<T> r, uint32_t thr, int e_max, int tile_shift) {
  clear_tiles();
  const float x_floor = logit_floor<T, KIND>(r, thr);
  const mass_scale scale = mass_scale_of(e_max);
  const int lane = threadIdx.x & 31;
  uint64_t total = 0;
  for_each_chunk<T, KIND>(r, [&](int group, int64_t, const float(&v)[4], const float(&q)[4], int valid) {
    uint64_t chunk_mass = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t key;
      float w;
      decode<T, KIND>(r, v[j], q[j], x_floor, key, w);
      /* (a weight of 0 has mass 0: only the row's end needs a check) */
      chunk_mass += j < valid && key >= thr ? weight_mass_of(w, scale) : 0;
    }
    total += chunk_mass;
    const uint64_t warp_mass = warp_sum_chunk_mass(chunk_mass);
    if (lane == 0)
      tile_add(group >> tile_shift, warp_mass);
  });
  uint32_t unused_m = 0;
  uint64_t unused_b = 0, unused_c = 0;
  block_sums(unused_m, total, unused_b, unused_c, tile_mem().red);
  return total;
}

/* Sums of a histogram or gather pass. */
struct pass_sums {
  uint32_t max_key;    /* the largest key taking part */
  uint64_t mass_above; /* mass of the keys > hi */
  uint64_t mass_cut;   /* mass of the keys >= cut */
  uint64_t total;      /* mass of every weight */
};

/* Histogram of the keys in [lo, hi] by (key - lo) >> shift ((hi - lo) >> shift < BINS) into
 * sm.u.hist, and with MASSES the sums asked for (at e_max: with_mass the mass above hi, with_cut
 * the mass from cut, with_total all). Starts and ends with a barrier. */
template <typename T, int KIND, bool MASSES>
__device__ __noinline__ pass_sums histogram_pass(const row_view<T> r, uint32_t lo, uint32_t hi, int shift,
                                                 int e_max, bool with_mass, bool with_cut, uint32_t cut,
                                                 bool with_total) {
  uint32_t *const hist = search_mem().u.hist;
  const uint32_t hist_base = (uint32_t)__cvta_generic_to_shared(hist);
  const int bins = (int)((hi - lo) >> shift) + 1;
  __syncthreads();
  for (int i = threadIdx.x * 4; i < bins; i += THREADS * 4)
    *reinterpret_cast<uint4 *>(&hist[i]) = make_uint4(0, 0, 0, 0);
  __syncthreads();
  const float x_floor = MASSES && with_total ? -INFINITY : logit_floor<T, KIND>(r, lo);
  const uint32_t span = hi - lo;
  const mass_scale scale = mass_scale_of(e_max);
  pass_sums s = {0, 0, 0, 0};
  for_each_chunk<T, KIND>(r, [&](int, int64_t, const float(&v)[4], const float(&q)[4], int valid) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t key;
      float w;
      const bool part = decode<T, KIND>(r, v[j], q[j], x_floor, key, w) && j < valid;
      if constexpr (weight_kind(KIND))
        s.max_key = max(s.max_key, j < valid ? key : 0u); /* a weight of 0 has the floor key */
      else
        s.max_key = part && key > s.max_key ? key : s.max_key;
      const uint32_t offset = key - lo;
      count_at(hist_base, part && offset <= span ? offset >> shift : (uint32_t)COUNT_TRASH);
      if constexpr (MASSES) {
        const uint64_t m = j < valid ? weight_mass_of(w, scale) : 0;
        s.mass_above += with_mass && key > hi ? m : 0;
        s.mass_cut += with_cut && key >= cut ? m : 0;
        s.total += with_total ? m : 0;
      }
    }
  });
  block_sums(s.max_key, s.mass_above, s.mass_cut, s.total, tile_mem().red);
  if (weight_kind(KIND) && s.max_key <= WEIGHT_FLOOR)
    s.max_key = 0; /* no positive weight */
  return s;
}

/* Gather of the keys in [lo, hi] (their count known to fit LIST_CAP) into sm.u.list, in no particular
 * order, with MASSES the exact mass above hi (and per tile with_tiles) and of all weights
 * (with_total). Starts and ends with a barrier; the list length is in sm.t.st.list_len. */
template <typename T, int KIND, bool MASSES>
__device__ __noinline__ pass_sums gather_pass(const row_view<T> r, uint32_t lo, uint32_t hi, int e_max,
                                              bool with_tiles, bool with_total, int tile_shift) {
  search_smem &sm = search_mem();
  const uint32_t list_base = (uint32_t)__cvta_generic_to_shared(sm.u.list);
  if (MASSES && with_tiles)
    clear_tiles();
  __syncthreads();
  if (threadIdx.x == 0)
    sm.t.st.list_len = 0;
  __syncthreads();
  const float x_floor = MASSES && with_total ? -INFINITY : logit_floor<T, KIND>(r, lo);
  const uint32_t span = hi - lo;
  const mass_scale scale = mass_scale_of(e_max);
  const int lane = threadIdx.x & 31;
  pass_sums s = {0, 0, 0, 0};
  for_each_chunk<T, KIND>(r, [&](int group, int64_t c, const float(&v)[4], const float(&q)[4], int valid) {
    uint64_t chunk_mass = 0;
    uint32_t keys[4], in = 0; /* bit j: element j is gathered */
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float w;
      const bool part = decode<T, KIND>(r, v[j], q[j], x_floor, keys[j], w) && j < valid;
      if constexpr (MASSES) {
        const uint64_t m = j < valid ? weight_mass_of(w, scale) : 0; /* (0 for a weight of 0) */
        chunk_mass += keys[j] > hi ? m : 0;
        s.total += with_total ? m : 0;
      }
      in |= (part && keys[j] - lo <= span ? 1u : 0u) << j;
    }
    /* A slot per gathered element by a shared atomic add, which nvcc combines over the lanes that
     * take the branch (one ATOMS a warp); the list's order is free (only order-free histograms,
     * sums and sorts read it). A window holds ~1% of a real row, yet most warp chunks hold one of
     * its elements, so this path is hot. */
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (in >> j & 1u) {
        const uint32_t slot = atomicAdd(&sm.t.st.list_len, 1u);
        if (slot < LIST_CAP)
          asm volatile("st.shared.u64 [%0], %1;" ::"r"(list_base + slot * 8), "l"(pack_entry(keys[j], c * 4 + j))
                       : "memory");
      }
    if constexpr (MASSES) {
      s.mass_above += chunk_mass;
      if (with_tiles) {
        const uint64_t warp_mass = warp_sum_chunk_mass(chunk_mass);
        if (lane == 0)
          tile_add(group >> tile_shift, warp_mass);
      }
    }
  });
  block_sums(s.max_key, s.mass_above, s.mass_cut, s.total, sm.t.red);
  if (threadIdx.x == 0 && sm.t.st.list_len > LIST_CAP)
    sm.t.st.list_len = LIST_CAP;
  __syncthreads();
  return s;
}

/* ---- the gathered list ---------------------------------------------------------------------------- */
/* Sort sm.u.list[0, len) descending: a bitonic network over the next power of two, padded with 0.
 * Starts and ends with a barrier. */
static __device__ __noinline__ void sort_list(uint32_t len) {
  search_smem &sm = search_mem();
  uint32_t size = 2;
  while (size < len)
    size <<= 1;
  __syncthreads();
  for (uint32_t i = len + threadIdx.x; i < size; i += THREADS)
    sm.u.list[i] = 0;
  __syncthreads();
  for (uint32_t block = 2; block <= size; block <<= 1)
    for (uint32_t stride = block >> 1; stride > 0; stride >>= 1) {
      for (uint32_t t = threadIdx.x; t < size / 2; t += THREADS) {
        const uint32_t i = 2 * t - (t & (stride - 1)), l = i + stride;
        const uint64_t a = sm.u.list[i], b = sm.u.list[l];
        if ((i & block) == 0 ? a < b : a > b) {
          sm.u.list[i] = b;
          sm.u.list[l] = a;
        }
      }
      __syncthreads();
    }
}

enum { SELECT_COUNT = 0, SELECT_MASS = 1 };

/* In the gathered list (len entries in any order, keys in [lo, hi]): the largest key K whose entries
 * at or above it reach the target: by count, at least `need` of them; by mass, base + their exact
 * mass >= target (compared in f64). The largest key when the target is met before any entry, the
 * smallest when the whole list falls short: the key at which the running count or mass of the list
 * sorted by key (descending) first reaches the target, as a sort would find it, without the sort.
 * A radix select: each round histograms the entries still in range by an 8-bit digit of their span
 * (counts, and exact masses as two 32-bit words with the carry added explicitly), then one warp
 * scans the digits from the top and narrows the range to the digit where the target is reached. A
 * gathered window of ~2^20 keys takes 3 rounds. Ends with a barrier. */
static __device__ __noinline__ uint32_t list_select(uint32_t len, uint32_t lo, uint32_t hi, int mode,
                                                    int64_t need, uint64_t base, double target, int e_max) {
  search_smem &sm = search_mem();
  select_space &sel = sm.sel;
  if (len == 0)
    return 0u;
  const int lane = threadIdx.x & 31;
  __syncthreads();
  if (threadIdx.x == 0) {
    sel.lo = lo;
    sel.hi = hi;
    sel.count_above = 0;
    sel.mass_above = base;
    sel.mode = mode;
    sel.need = need;
    sel.done = 0;
  }
  for (int round = 0;; ++round) {
    __syncthreads();
    const uint32_t r_lo = sel.lo, r_hi = sel.hi;
    const int r_mode = sel.mode;
    if (sel.done || r_lo == r_hi)
      break;
    const int span_bits = 32 - __clz(r_hi - r_lo);
    const int shift = span_bits > 8 ? span_bits - 8 : 0;
    for (int i = threadIdx.x; i < SELECT_BINS; i += THREADS) {
      sel.count[i] = 0;
      sel.mass_lo[i] = 0;
      sel.mass_hi[i] = 0;
    }
    __syncthreads();
    for (uint32_t i = threadIdx.x; i < len; i += THREADS) {
      const uint32_t key = entry_key(sm.u.list[i]);
      if (key < r_lo || key > r_hi)
        continue;
      const uint32_t bin = (key - r_lo) >> shift;
      atomicAdd(&sel.count[bin], 1u);
      if (r_mode == SELECT_MASS)
        shared_add_u64(&sel.mass_lo[bin], &sel.mass_hi[bin], weight_mass(key, e_max));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      /* Lane l holds digits 8l .. 8l+7; suffix sums over the lanes from the top. */
      uint64_t c = 0, m = 0;
#pragma unroll
      for (int j = 0; j < SELECT_BINS / 32; ++j) {
        const int d = lane * (SELECT_BINS / 32) + j;
        c += sel.count[d];
        m += (uint64_t)sel.mass_hi[d] << 32 | sel.mass_lo[d];
      }
      uint64_t c_inc = c, m_inc = m;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const uint64_t c_next = __shfl_down_sync(0xffffffffu, c_inc, o);
        const uint64_t m_next = __shfl_down_sync(0xffffffffu, m_inc, o);
        if (lane + o < 32) {
          c_inc += c_next;
          m_inc += m_next;
        }
      }
      const uint64_t c_total = __shfl_sync(0xffffffffu, c_inc, 0),
                     m_total = __shfl_sync(0xffffffffu, m_inc, 0);
      const uint64_t c_above = sel.count_above, m_above = sel.mass_above;
      int w_mode = r_mode;
      int64_t w_need = sel.need;
      auto reached = [&](uint64_t cc, uint64_t mm) {
        return w_mode == SELECT_COUNT ? (int64_t)(c_above + cc) >= w_need
                                      : __ull2double_rn(m_above + mm) >= target;
      };
      if (round == 0 && reached(0, 0)) {
        w_mode = SELECT_COUNT; /* met before any entry: the largest key */
        w_need = 1;
      } else if (round == 0 && !reached(c_total, m_total)) {
        w_mode = SELECT_COUNT; /* never met: the smallest key */
        w_need = (int64_t)c_total;
      }
      if (lane == 0)
        sel.done = 1; /* unless a digit below narrows the range */
      __syncwarp();
      const uint64_t c_ex = c_inc - c, m_ex = m_inc - m;
      if (!reached(c_ex, m_ex) && reached(c_inc, m_inc)) {
        uint64_t cr = c_ex, mr = m_ex;
        for (int j = SELECT_BINS / 32 - 1; j >= 0; --j) {
          const int d = lane * (SELECT_BINS / 32) + j;
          const uint64_t c_before = cr, m_before = mr;
          cr += sel.count[d];
          mr += (uint64_t)sel.mass_hi[d] << 32 | sel.mass_lo[d];
          if (reached(cr, mr)) {
            const uint32_t d_lo = r_lo + ((uint32_t)d << shift);
            const uint64_t d_hi = (uint64_t)d_lo + ((1ull << shift) - 1);
            sel.lo = d_lo;
            sel.hi = d_hi < (uint64_t)r_hi ? (uint32_t)d_hi : r_hi;
            sel.count_above = c_above + c_before;
            sel.mass_above = m_above + m_before;
            sel.mode = w_mode;
            sel.need = w_need;
            sel.done = shift == 0;
            break;
          }
        }
      }
    }
  }
  const uint32_t key = sel.lo;
  __syncthreads();
  return key;
}

/* Mass of the list entries with key >= thr; with_tiles also adds each to its tile. */
static __device__ __noinline__ uint64_t list_mass_from(uint32_t len, uint32_t thr, int e_max, bool with_tiles,
                                                       int tile_shift) {
  search_smem &sm = search_mem();
  uint64_t mine = 0;
  for (uint32_t i = threadIdx.x; i < len; i += THREADS) {
    const uint64_t e = sm.u.list[i];
    if (entry_key(e) < thr)
      continue;
    const uint64_t m = weight_mass(entry_key(e), e_max);
    mine += m;
    if (with_tiles)
      tile_add((int)((entry_index(e) / (4 * THREADS)) >> tile_shift), m);
  }
  uint32_t unused_m = 0;
  uint64_t unused_b = 0, unused_c = 0;
  block_sums(unused_m, mine, unused_b, unused_c, sm.t.red);
  return mine;
}

/* ---- search ------------------------------------------------------------------------------------------ */
/* What a search looks for: the k-th largest key (use_k), and/or the largest key whose suffix mass
 * reaches p * base (use_p; base = the mass of every weight when !base_known). */
struct targets {
  bool use_k;
  int64_t k;
  bool use_p;
  double p;
  bool base_known;
  uint64_t base;
};

struct search_result {
  uint32_t thr;   /* allowed: key >= thr (the floor when no target filters) */
  bool filtered;  /* a target filters (else thr is the floor) */
  bool have_mass; /* mass: exact mass of the weights with key >= thr */
  uint64_t mass;
  uint64_t count_above; /* count targets: keys > thr */
  bool tiles;           /* the tiles hold the allowed mass */
  bool list_all;        /* the list (unsorted) holds every key >= the lowest key in it */
  uint32_t list_len;
};

/* The histogram in sm.u.hist covers [lo, hi] at `shift` (bin b: keys lo + (b << shift) ...). For
 * each target the bin where it is reached, into sm.t.st (hit_k; hit_lo / hit_hi: the lowest and the
 * highest bin where the mass target can be reached, from the bounds). t_lo / t_hi: the mass target's
 * bounds; when !tg.base_known they are computed here from the histogram's bounds on the total mass
 * (the histogram must then cover every weight). Ends with a barrier.
 * Each thread sums a run of `per` consecutive bins by 16-byte loads of 4 bins, skipping empty groups,
 * the lanes of a warp starting at staggered groups of their runs (runs of 32 bins read in step put
 * all 32 lanes on one bank: 32-way conflicts on every load); only a thread whose run holds a
 * crossing walks it again, bin by bin. */
static __device__ __noinline__ void pick(uint32_t lo, uint32_t hi, int shift, int e_max, uint32_t max_key,
                                         uint64_t count_above, uint64_t mass_above, const targets tg,
                                         double &t_lo, double &t_hi) {
  search_smem &sm = search_mem();
  /* Bins above the largest key are empty, and so are those below the lowest non-empty 4-bin group
   * (found first: each thread looks at groups t, t + THREADS, ... up to its first non-empty one).
   * The runs cover the bins between, whole 4-bin groups each: a real row's keys span ~2K of the 32K
   * level-1 bins, which runs from bin 0 would leave to a few threads to sum and walk alone. */
  const uint32_t top = max_key < hi ? max_key : hi;
  const int used = max_key < lo ? 1 : (int)((top - lo) >> shift) + 1;
  uint32_t low_group = 0xFFFFFFFFu;
  for (int g = threadIdx.x; 4 * g < used; g += THREADS) {
    const uint4 group = *reinterpret_cast<const uint4 *>(&sm.u.hist[4 * g]);
    if ((group.x | group.y | group.z | group.w) != 0) {
      low_group = (uint32_t)g;
      break;
    }
  }
  {
    uint32_t not_low = ~low_group; /* the block's lowest group: the max of the complements */
    uint64_t unused_a = 0, unused_b = 0, unused_c = 0;
    block_sums(not_low, unused_a, unused_b, unused_c, sm.t.red);
    low_group = ~not_low;
  }
  const int lowest_bin = low_group == 0xFFFFFFFFu ? 0 : (int)low_group * 4;
  const int per = ((used - lowest_bin + THREADS - 1) / THREADS + 3) & ~3, groups = per >> 2;
  const int first = lowest_bin + (int)threadIdx.x * per, last = min(first + per, used);
  const int stagger = (int)(((threadIdx.x & 31) * (uint32_t)groups) >> 3) % groups;
  auto bounds = [&](int b, uint64_t c, uint64_t &low, uint64_t &high) {
    low = high = 0;
    if (!tg.use_p || c == 0)
      return;
    const uint32_t a = lo + ((uint32_t)b << shift);
    const uint64_t z64 = (uint64_t)a + ((1ull << shift) - 1);
    uint32_t z = z64 < (uint64_t)hi ? (uint32_t)z64 : hi;
    z = z < max_key ? z : max_key;
    low = c * weight_mass(a, e_max);
    high = c * weight_mass(z, e_max);
  };
  uint64_t local[3] = {0, 0, 0};
  for (int i = 0, g = stagger; i < groups; ++i, g = g + 1 == groups ? 0 : g + 1) {
    const int b0 = first + 4 * g;
    if (b0 >= last)
      continue;
    const uint4 group = *reinterpret_cast<const uint4 *>(&sm.u.hist[b0]);
    const uint32_t counts[4] = {group.x, b0 + 1 < last ? group.y : 0u, b0 + 2 < last ? group.z : 0u,
                                b0 + 3 < last ? group.w : 0u};
    if ((counts[0] | counts[1] | counts[2] | counts[3]) == 0)
      continue; /* most groups of a real row */
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint64_t low, high;
      bounds(b0 + j, counts[j], low, high);
      local[0] += counts[j];
      local[1] += low;
      local[2] += high;
    }
  }
  IGNIS_SAMPLING_MARK(MARK_PICK_RUNS);
  if (threadIdx.x == 0) {
    sm.t.st.hit_k.bin = -1;
    sm.t.st.hit_lo.bin = -1;
    sm.t.st.hit_hi.bin = -1;
  }
  uint64_t above[3], total[3];
  block_suffix3(local, above, total, sm.t.red);
  IGNIS_SAMPLING_MARK(MARK_PICK_SCAN);
  if (tg.use_p && !tg.base_known) {
    t_lo = IGNIS_DMUL(tg.p, __ull2double_rn(mass_above + total[1]));
    t_hi = IGNIS_DMUL(tg.p, __ull2double_rn(mass_above + total[2]));
  }
  uint64_t cs = count_above + above[0], sl = mass_above + above[1], sh = mass_above + above[2];
  /* A target is found in this run when it is not reached above the run but is through it. */
  bool got_k = !tg.use_k || (int64_t)cs >= tg.k || (int64_t)(cs + local[0]) < tg.k;
  bool got_hi = !tg.use_p || __ull2double_rn(sh) >= t_lo || !(__ull2double_rn(sh + local[2]) >= t_lo);
  bool got_lo = !tg.use_p || __ull2double_rn(sl) >= t_hi || !(__ull2double_rn(sl + local[1]) >= t_hi);
  for (int b = last - 1; b >= first && !(got_k && got_hi && got_lo); --b) {
    const uint64_t c = sm.u.hist[b];
    uint64_t low, high;
    bounds(b, c, low, high);
    const uint64_t before = cs;
    cs += c;
    sl += low;
    sh += high;
    const pick_hit hit = {b, before, cs};
    if (!got_k && (int64_t)cs >= tg.k) {
      sm.t.st.hit_k = hit;
      got_k = true;
    }
    if (!got_hi && __ull2double_rn(sh) >= t_lo) {
      sm.t.st.hit_hi = hit;
      got_hi = true;
    }
    if (!got_lo && __ull2double_rn(sl) >= t_hi) {
      sm.t.st.hit_lo = hit;
      got_lo = true;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const pick_hit lowest = {lowest_bin, count_above + total[0] - sm.u.hist[lowest_bin], count_above + total[0]};
    if (sm.t.st.hit_lo.bin < 0)
      sm.t.st.hit_lo = lowest; /* not reached by the lower bounds: the lowest bin with keys */
    if (tg.use_p && sm.t.st.hit_hi.bin < 0)
      sm.t.st.hit_hi = lowest; /* (the upper bounds always reach a reachable target) */
  }
  __syncthreads();
}

/* Resolve the targets in the gathered list: it holds the keys in [lo, hi] (every key >= lo), with
 * count_above keys and mass mass_above above them. */
__device__ inline uint32_t resolve_list(const targets &tg, uint32_t len, uint32_t lo, uint32_t hi,
                                        uint64_t count_above, uint64_t mass_above, int e_max) {
  uint32_t thr = 0;
  if (tg.use_k) {
    int64_t need = tg.k - (int64_t)count_above;
    need = need < 1 ? 1 : (need > (int64_t)len ? (int64_t)len : need);
    thr = list_select(len, lo, hi, SELECT_COUNT, need, 0, 0.0, e_max);
  }
  if (tg.use_p) {
    const uint32_t thr_p = list_select(len, lo, hi, SELECT_MASS, 0, mass_above,
                                       IGNIS_DMUL(tg.p, __ull2double_rn(tg.base)), e_max);
    thr = thr_p > thr ? thr_p : thr;
  }
  return thr;
}

/* The search of include/ignis/sampling.h's thresholds over the keys >= floor of a row whose
 * level-1 histogram ([floor, top] at shift) is in sm.u.hist (max_key: the largest key; e_max its
 * exponent field for masses). want_mass: the result's exact mass; want_tiles: the allowed mass per
 * tile (implies want_mass). */
template <typename T, int KIND>
__device__ __noinline__ search_result search(const row_view<T> r, targets tg, uint32_t floor, uint32_t top,
                                             int shift, int e_max, uint32_t max_key, bool want_mass,
                                             bool want_tiles, int tile_shift) {
  search_smem &sm = search_mem();
  want_mass = want_mass || want_tiles;
  search_result res = {floor, false, false, 0, 0, false, false, 0};
  uint32_t lo = floor, hi = top;
  uint64_t count_above = 0, mass_above = 0, count_in = 0;
  bool have_hist = true;
  double t_lo = 0.0, t_hi = 0.0;
  if (tg.use_p && tg.base_known)
    t_lo = t_hi = IGNIS_DMUL(tg.p, __ull2double_rn(tg.base));
  for (;;) {
    uint32_t win_lo = lo, win_hi = hi;
    uint64_t win_above = count_above, win_count = count_in;
    if (have_hist) {
      pick(lo, hi, shift, e_max, max_key, count_above, mass_above, tg, t_lo, t_hi);
      IGNIS_SAMPLING_MARK(MARK_PICK);
      const pick_hit hk = sm.t.st.hit_k, hl = sm.t.st.hit_lo, hh = sm.t.st.hit_hi;
      if (tg.use_k && hk.bin < 0)
        tg.use_k = false; /* fewer keys than k: k does not filter */
      if (tg.use_k && tg.use_p) {
        if (hk.bin > hh.bin)
          tg.use_p = false; /* the top-p threshold is surely below the top-k one */
        else if (hk.bin < hl.bin)
          tg.use_k = false;
      }
      if (!tg.use_k && !tg.use_p)
        return res;
      pick_hit low = tg.use_p ? hl : hk, high = tg.use_p ? hh : hk;
      if (tg.use_k && hk.bin < low.bin)
        low = hk;
      if (tg.use_k && hk.bin > high.bin)
        high = hk;
      win_lo = lo + ((uint32_t)low.bin << shift);
      const uint64_t end = (uint64_t)lo + ((uint64_t)high.bin << shift) + ((1ull << shift) - 1);
      win_hi = end < (uint64_t)hi ? (uint32_t)end : hi;
      win_above = high.count_above;
      win_count = low.count_through - high.count_above;
    }
    const bool t_exact = !tg.use_p || t_lo == t_hi;
    if (win_above + win_count <= LIST_CAP || win_count <= LIST_CAP) {
      /* Gather and resolve. */
      const bool all = win_above + win_count <= LIST_CAP;
      const uint32_t g_hi = all ? ANY_TOP : win_hi;
      const bool with_total = tg.use_p && !tg.base_known;
      pass_sums g;
      if constexpr (weight_kind(KIND)) {
        if ((!all && (want_mass || tg.use_p)) || with_total)
          g = gather_pass<T, KIND, true>(r, win_lo, g_hi, e_max, want_tiles && !all, with_total, tile_shift);
        else
          g = gather_pass<T, KIND, false>(r, win_lo, g_hi, e_max, false, false, tile_shift);
      } else {
        g = gather_pass<T, KIND, false>(r, win_lo, g_hi, e_max, false, false, tile_shift);
      }
      IGNIS_SAMPLING_MARK(MARK_GATHER);
      if (with_total) {
        tg.base = g.total;
        tg.base_known = true;
      }
      const uint32_t len = sm.t.st.list_len;
      const uint64_t above = all ? 0 : win_above;
      res.thr = resolve_list(tg, len, win_lo, g_hi < max_key ? g_hi : max_key, above, g.mass_above, e_max);
      res.filtered = true;
      res.list_all = all;
      res.list_len = len;
      IGNIS_SAMPLING_MARK(MARK_SELECT);
      uint64_t above_in_list = 0;
      for (uint32_t i = threadIdx.x; i < len; i += THREADS)
        above_in_list += entry_key(sm.u.list[i]) > res.thr;
      uint32_t unused_m = 0;
      uint64_t unused_b = 0, unused_c = 0;
      block_sums(unused_m, above_in_list, unused_b, unused_c, sm.t.red);
      res.count_above = above + above_in_list;
      if (want_mass || want_tiles) {
        if (want_tiles && all)
          clear_tiles();
        res.mass = (all ? 0 : g.mass_above) + list_mass_from(len, res.thr, e_max, want_tiles, tile_shift);
        res.have_mass = true;
        res.tiles = want_tiles;
      }
      IGNIS_SAMPLING_MARK(MARK_LIST_MASS);
      return res;
    }
    if (win_lo == win_hi && t_exact) {
      res.thr = win_lo; /* a single key: exact */
      res.filtered = true;
      res.count_above = win_above;
      return res;
    }
    const int range_bits = 32 - __clz(win_hi - win_lo);
    const int need = range_bits > LOG_BINS ? range_bits - LOG_BINS : 0;
    const bool with_total = tg.use_p && !tg.base_known;
    if (have_hist && need >= shift && t_exact && win_hi > win_lo) {
      /* Bisect: the halves below and from cut, with the exact mass from cut. */
      const int half = range_bits - 1;
      const uint32_t cut = win_lo + (1u << half);
      const pass_sums s = histogram_pass<T, KIND, weight_kind(KIND)>(r, win_lo, win_hi, half, e_max, true,
                                                                     true, cut, with_total);
      IGNIS_SAMPLING_MARK(MARK_BISECT);
      const uint64_t c0 = sm.u.hist[0], c1 = sm.u.hist[1];
      if (with_total) {
        tg.base = s.total;
        tg.base_known = true;
      }
      const bool up_k = tg.use_k && (int64_t)(win_above + c1) >= tg.k;
      const bool up_p = tg.use_p && __ull2double_rn(s.mass_cut) >= t_lo;
      if (tg.use_k && tg.use_p && up_k != up_p) {
        if (up_k)
          tg.use_p = false;
        else
          tg.use_k = false;
      }
      if (tg.use_k ? up_k : up_p) {
        lo = cut;
        hi = win_hi;
        count_above = win_above;
        mass_above = s.mass_above;
        count_in = c1;
      } else {
        lo = win_lo;
        hi = cut - 1;
        count_above = win_above + c1;
        mass_above = s.mass_cut;
        count_in = c0;
      }
      have_hist = false;
      continue;
    }
    /* Refine: the window alone at a finer digit, with the exact mass above it. */
    const pass_sums s = histogram_pass<T, KIND, weight_kind(KIND)>(r, win_lo, win_hi, need, e_max, true,
                                                                   false, 0, with_total);
    IGNIS_SAMPLING_MARK(MARK_REFINE);
    if (with_total) {
      tg.base = s.total;
      tg.base_known = true;
      t_lo = t_hi = IGNIS_DMUL(tg.p, __ull2double_rn(tg.base));
    }
    lo = win_lo;
    hi = win_hi;
    shift = need;
    count_above = win_above;
    mass_above = s.mass_above;
    have_hist = true;
  }
}

/* ---- sampling ---------------------------------------------------------------------------------------- */
/* The inverse transform over the allowed elements {weight > 0, key >= thr}, whose masses per tile
 * are in the tiles: the first element, in index order, at which the running mass exceeds
 * floor(uniform * M / 2^64). Returns -1 when M = 0. */
template <typename T, int KIND>
__device__ __noinline__ int64_t sample_tiles(const row_view<T> r, uint32_t thr, int e_max, int tile_shift,
                                             uint64_t uniform) {
  tile_smem &t = tile_mem();
  const int tiles = (int)((group_count(r.n) + (1 << tile_shift) - 1) >> tile_shift);
  const int per = (tiles + THREADS - 1) / THREADS;
  const int first = (int)threadIdx.x * per, last = min(first + per, tiles);
  uint64_t mine = 0;
  for (int i = first; i < last; ++i)
    mine += tile_mass(i);
  if (threadIdx.x == 0) {
    t.st.tile = -1;
    t.st.token = -1;
  }
  uint64_t total;
  uint64_t run = block_prefix(mine, total, t.red);
  if (total == 0)
    return -1;
  const uint64_t target = __umul64hi(uniform, total);
  if (run <= target && target - run < mine)
    for (int i = first; i < last; ++i) {
      const uint64_t m = tile_mass(i);
      if (target - run < m) {
        t.st.tile = i;
        t.st.rest = target - run;
        break;
      }
      run += m;
    }
  __syncthreads();
  const int tile = t.st.tile;
  const uint64_t rest = t.st.rest;
  /* The tile's elements: 2^tile_shift consecutive chunks per thread, in index order. */
  const int per_thread = 1 << tile_shift;
  const int64_t first_elem = (((int64_t)tile * THREADS + threadIdx.x) << tile_shift) * 4;
  const float x_floor = logit_floor<T, KIND>(r, thr);
  auto element_mass = [&](int64_t i) -> uint64_t {
    if (i >= r.n)
      return 0;
    const float raw = ignis_to_float(r.row[i]);
    const float sub = KIND == ROW_RESIDUAL ? ignis_to_float(r.minus[i]) : 0.0f;
    uint32_t key;
    float w;
    return decode<T, KIND>(r, raw, sub, x_floor, key, w) && key >= thr ? weight_mass(key, e_max) : 0;
  };
  mine = 0;
  if (tile >= 0)
    for (int64_t i = first_elem; i < first_elem + 4 * per_thread; ++i)
      mine += element_mass(i);
  uint64_t unused_total;
  run = block_prefix(mine, unused_total, t.red);
  if (tile >= 0 && run <= rest && rest - run < mine)
    for (int64_t i = first_elem; i < first_elem + 4 * per_thread; ++i) {
      const uint64_t m = element_mass(i);
      if (rest - run < m) {
        t.st.token = i;
        break;
      }
      run += m;
    }
  __syncthreads();
  const int64_t token = t.st.token;
  __syncthreads();
  return token;
}

/* The row's 64-bit uniform of (seed, offset, draw, output row b): words 0 and 1 of counter group 0. */
__device__ __forceinline__ uint64_t row_uniform(uint64_t seed, uint64_t offset, uint32_t draw, int64_t b) {
  const ignis_philox_out words = ignis_philox_group(seed, offset, draw, (uint64_t)b, 0);
  return (uint64_t)words.w[1] << 32 | words.w[0];
}

} // namespace ignis_sampling

#endif
