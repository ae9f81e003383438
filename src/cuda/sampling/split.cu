/* CUDA backend of the sampling ops at small batches: each output row shared among many blocks that
 * meet through the caller's workspace (the multi-block path of include/ignis/sampling.h; layout in
 * core/sampling_split.h). The results are the exact quantities the header defines, the same as the
 * one-block kernel's (filter.cu) and the CPU backend's: only the way there differs.
 *
 * Why: one block per row (filter.cu) is bound by one SM's instruction rate, ~80 us for a top-p row
 * of 128K at batch 1 while the rest of the GPU idles. Here a row of n elements is cut into tiles of
 * 2048 (one 4-element chunk per thread of a 512-thread block), S blocks share the row (as many as
 * fit the GPU at once beside the other rows: a cooperative launch, 2 blocks per SM), each taking
 * consecutive tiles, and the blocks of a row run these phases separated by grid barriers (a counter
 * per row in the workspace). A block of one tile keeps its chunk in registers; one of several
 * re-reads its tiles in every phase.
 *   A  the row's largest key (atomicMax): its exponent scales every fixed-point mass;
 *   B  top-k / top-p: a level-1 histogram of each tile in shared memory (key bits 30..20: 2048
 *      bins, count and exact mass; the mass per bin comes from two 32-bit sums, see bin_mass), added
 *      into the row's histogram in the workspace. Other filters: each tile's allowed mass.
 *   C  top-k / top-p: every block scans the row's histogram for the level-1 bins where the suffix
 *      count (k) or mass (p) reaches the target (the first level of the CPU backend's radix
 *      search) and picks a plan (split_plan): for top-p alone the list takes the keys of that bin
 *      and each tile's mass above it is summed; with a top-k set (alone, joint with
 *      top-p, or top-p within it) the list takes every key in or above the count target's bin
 *      (fewer than k lie above it).
 *   D  the last block of the row to finish C (a counter, no barrier) runs the rest of the radix
 *      search over the list (list_search: 11, 11 and 9 bits, in shared memory), adds the list's
 *      allowed masses to their tiles, draws the one 64-bit uniform, finds the tile that holds the
 *      target by a prefix over the tiles' masses and the element by a prefix over that tile: the
 *      inverse transform in index order. It then zeroes the row's counters for the next call.
 * Every sum is an integer sum, so no order matters and the samples equal the CPU backend's. */
#include "core/sampling_split.h"
#include "cuda/sampling/search.cuh"

namespace {
using namespace ignis_sampling;

constexpr int SPLIT_THREADS = 512;
constexpr int TILE = IGNIS_SPLIT_TILE; /* one chunk of 4 elements per thread */
static_assert(TILE == 4 * SPLIT_THREADS, "a tile is one chunk per thread");
/* A block re-reads its tiles in each of its 3 passes, so with many tiles a block the path loses to
 * the one-block kernel's 2 passes (H100, V 128256, top-p: 53 against 82 us at batch 16, 4 tiles a
 * block; 117 against 86 at batch 64, 16 tiles; 208 against 101 at batch 128, 32 tiles). */
constexpr int64_t SPLIT_MAX_TILES_PER_BLOCK = 4;
constexpr int L2_BINS = 2048; /* key bits 19..9 */
constexpr int L3_BINS = 512;  /* key bits 8..0 */
constexpr int BINS_PER_THREAD = IGNIS_SPLIT_BINS / SPLIT_THREADS;
static_assert(L2_BINS == IGNIS_SPLIT_BINS && L3_BINS == SPLIT_THREADS, "one scan shape per level");

enum split_state_word { ST_ARRIVE = 0, ST_DONE = 1, ST_MAX_KEY = 2, ST_LIST_LEN = 3 };

/* The workspace regions of the launch (core/sampling_split.h) and the cut of the rows. */
struct split_args {
  uint32_t *state;      /* [MAX_ROWS][4] */
  uint32_t *hist_count; /* [rows][2048] */
  uint64_t *hist_mass;  /* [rows][2048] */
  uint64_t *tile_mass;  /* [rows][tiles] */
  uint64_t *list;       /* [rows][n] */
  int blocks;           /* S */
  int tiles_per_block;  /* consecutive tiles of TILE elements per block */
  int tiles;            /* tiles of the row */
  bool vec;
};

struct split_smem {
  union {
    struct {
      uint32_t count[IGNIS_SPLIT_BINS];
      uint32_t q[IGNIS_SPLIT_BINS]; /* sums of the elements' reduced low bits (bin_mass) */
    } l1;
    struct {
      uint32_t count[L2_BINS];
      uint32_t lo[L2_BINS], hi[L2_BINS]; /* exact masses: low word, high word with the carries */
    } fine;
  } h;
  reduce_scratch red;
  uint32_t list_local, list_base, last;
  int32_t digit, tile_hit;
  uint64_t above, total, rest;
  int64_t token;
};

/* ---- the grid barrier of a row --------------------------------------------------------------------- */
__device__ __forceinline__ uint32_t load_acquire(const uint32_t *p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/* Every block of the row arrives; returns once `target` arrivals (S per barrier so far) are in. */
__device__ __forceinline__ void row_barrier(uint32_t *arrive, uint32_t target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(arrive, 1u);
    while (load_acquire(arrive) < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

/* ---- masses ------------------------------------------------------------------------------------------- */
/* Level-1 bins hold the keys of one exponent and the top 3 significand bits, so an element's mass
 * weight_mass(key) = (sig << 15) >> s (s = e_max - max(e, 1), sig = base + r, base = the bin's
 * significand bits above bit 20, r the low 20 bits) is base- and r-separable:
 *   s <= 15: (base + r) << (15 - s);
 *   s > 15:  (base >> k) + (r >> k) with k = s - 15 (base has 20 low zero bits, so no carry of the
 *            r part is lost; for k > 20 both sides are base >> k).
 * A block adds q = (s <= 15 ? r : r >> k) per element in 32 bits (2048 elements of < 2^20), and
 * bin_mass rebuilds the bin's exact mass from the count and that sum. */
__device__ __forceinline__ uint32_t mass_low_part(uint32_t key, int e_max) {
  const uint32_t bits = key & 0x7FFFFFFFu, e = bits >> 23, r = bits & 0xFFFFFu;
  const int s = e_max - (int)max(e, 1u);
  return s <= 15 ? r : (s - 15 >= 20 ? 0u : r >> (s - 15));
}

__device__ __forceinline__ uint64_t bin_mass(int bin, uint32_t count, uint32_t low_sum, int e_max) {
  const uint32_t e = (uint32_t)bin >> 3;
  const uint64_t base = (uint64_t)((e ? 8u : 0u) | ((uint32_t)bin & 7u)) << 20;
  const int s = e_max - (int)max(e, 1u);
  if (s <= 15)
    return ((uint64_t)count * base + low_sum) << (15 - s);
  const int k = s - 15;
  return (k >= 24 ? 0ull : (uint64_t)count * (base >> k)) + low_sum;
}

/* ---- scans over bins --------------------------------------------------------------------------------- */
enum search_by { BY_COUNT = 0, BY_MASS = 1 };

/* The search condition of one bin: the suffix through it (above + own) reaches the target. */
__device__ __forceinline__ bool reaches(int by, uint64_t suffix, uint64_t count_target, double mass_target) {
  return by == BY_COUNT ? suffix >= count_target : __ull2double_rn(suffix) >= mass_target;
}

/* The highest bin among this thread's N consecutive bins (first = its lowest) whose suffix reaches
 * the target, given `base` (everything above all bins of the scan); the block's answer (the highest
 * bin of any thread, -1 when none) lands in sm.digit and the suffix above it in sm.above, and the
 * sum of all bins in sm.total. Values in the search's unit: counts or masses. */
template <int N>
__device__ __forceinline__ void scan_bins(int by, const uint64_t (&val)[N], int first, uint64_t base,
                                          uint64_t count_target, double mass_target, split_smem &sm) {
  uint64_t mine[3] = {0, 0, 0}, above[3], total[3];
#pragma unroll
  for (int i = 0; i < N; ++i)
    mine[0] += val[i];
  block_suffix3(mine, above, total, sm.red);
  uint64_t acc = base + above[0];
  int hit = -1;
  uint64_t hit_above = 0;
#pragma unroll
  for (int i = N - 1; i >= 0; --i) {
    if (hit < 0 && reaches(by, acc + val[i], count_target, mass_target)) {
      hit = first + i;
      hit_above = acc;
    }
    acc += val[i];
  }
  uint32_t best = (uint32_t)(hit + 1);
  uint64_t unused_a = 0, unused_b = 0, unused_c = 0;
  block_sums(best, unused_a, unused_b, unused_c, sm.red);
  if (hit >= 0 && (uint32_t)(hit + 1) == best) {
    sm.digit = hit;
    sm.above = hit_above;
  }
  if (threadIdx.x == 0) {
    if (best == 0)
      sm.digit = -1;
    sm.total = total[0];
  }
  __syncthreads();
}

/* ---- the search over the candidate list (the last block) ------------------------------------------- */
/* The radix search of the CPU backend over the list's keys >= floor, from level `level` (0: key bits
 * 30..20, 1: 19..9, 2: 8..0) inside the bin `prefix` of the levels before it, `base` being the
 * count or mass of everything above that bin: the largest key whose suffix reaches the target.
 * Returns 0 when the target is not reached (the CPU backend's "nothing filtered"); the callers only
 * search lists that hold every key the answer can depend on. */
__device__ uint32_t list_search(const uint64_t *entries, uint32_t len, uint32_t floor, int level,
                                uint32_t prefix, uint64_t base, int by, uint64_t count_target,
                                double mass_target, int e_max, split_smem &sm) {
  const int tid = threadIdx.x;
  for (; level < 3; ++level) {
    const int shift = level == 0 ? 20 : (level == 1 ? 9 : 0);
    const int bits = level == 2 ? 9 : 11;
    const int bins = 1 << bits;
    for (int g = tid; g < bins; g += SPLIT_THREADS) {
      sm.h.fine.count[g] = 0;
      sm.h.fine.lo[g] = 0;
      sm.h.fine.hi[g] = 0;
    }
    __syncthreads();
    for (uint32_t i = tid; i < len; i += SPLIT_THREADS) {
      const uint32_t key =
          (uint32_t)(__ldcg(reinterpret_cast<const unsigned long long *>(entries) + i) >> 32);
      if (key < floor || (level > 0 && ((key & 0x7FFFFFFFu) >> (shift + bits)) != prefix))
        continue;
      const int g = (int)((key >> shift) & (uint32_t)(bins - 1));
      if (by == BY_COUNT)
        atomicAdd(&sm.h.fine.count[g], 1u);
      else
        shared_add_u64(&sm.h.fine.lo[g], &sm.h.fine.hi[g], weight_mass(key, e_max));
    }
    __syncthreads();
    int digit;
    if (level < 2) {
      const int first = tid * BINS_PER_THREAD;
      uint64_t val[BINS_PER_THREAD];
#pragma unroll
      for (int i = 0; i < BINS_PER_THREAD; ++i)
        val[i] = by == BY_COUNT ? (uint64_t)sm.h.fine.count[first + i]
                                : ((uint64_t)sm.h.fine.hi[first + i] << 32 | sm.h.fine.lo[first + i]);
      scan_bins<BINS_PER_THREAD>(by, val, first, base, count_target, mass_target, sm);
    } else {
      uint64_t val[1] = {by == BY_COUNT ? (uint64_t)sm.h.fine.count[tid]
                                        : ((uint64_t)sm.h.fine.hi[tid] << 32 | sm.h.fine.lo[tid])};
      scan_bins<1>(by, val, tid, base, count_target, mass_target, sm);
    }
    digit = sm.digit;
    if (digit < 0)
      return 0;
    prefix = prefix << bits | (uint32_t)digit;
    base = sm.above;
  }
  return 0x80000000u | prefix;
}

/* Mass of the list's keys >= thr (every thread gets it). */
__device__ uint64_t list_mass(const uint64_t *entries, uint32_t len, uint32_t thr, int e_max,
                              split_smem &sm) {
  uint64_t m = 0;
  for (uint32_t i = threadIdx.x; i < len; i += SPLIT_THREADS) {
    const uint32_t key = (uint32_t)(__ldcg(reinterpret_cast<const unsigned long long *>(entries) + i) >> 32);
    if (key >= thr)
      m += weight_mass(key, e_max);
  }
  uint32_t unused_m = 0;
  uint64_t unused_b = 0, unused_c = 0;
  block_sums(unused_m, m, unused_b, unused_c, sm.red);
  return m;
}

/* ---- the kernel ---------------------------------------------------------------------------------------- */
/* How a row's allowed set is found after the level-1 scan (block-uniform):
 *   PLAN_ALL   no filter (or one that does not filter): every valid key >= thr (min-p's, or +0);
 *   PLAN_TOP_P the level-1 bin d1 of the top-p target: the list holds that bin, the tiles' masses
 *              above it are summed by the blocks, and the last block searches levels 2-3;
 *   PLAN_LIST  a top-k set (with top-p joint or within it): the list holds every key in or above
 *              the bin d1 of the count target (fewer than k keys lie above it), and the last block
 *              runs every search over the list. */
enum split_plan { PLAN_ALL = 0, PLAN_TOP_P = 1, PLAN_LIST = 2 };

/* Chunk `tid` of tile t of the row: its 4 values (0 past the row) and how many lie inside. */
template <typename T>
__device__ __forceinline__ int load_tile_chunk(const row_view<T> &r, int t, float (&v)[4]) {
  const int64_t c = (int64_t)t * SPLIT_THREADS + threadIdx.x;
#pragma unroll
  for (int e = 0; e < 4; ++e)
    v[e] = 0.0f;
  if (c * 4 >= r.n)
    return 0;
  load_chunk(r.row, c, r.n, r.vec, v);
  return chunk_valid(r.n, c);
}

/* Keys and validity of a chunk's weights (valid: inside the row, weight > 0). */
template <typename T, int KIND>
__device__ __forceinline__ void chunk_keys(const row_view<T> &r, const float (&v)[4], int count, bool empty,
                                           uint32_t (&key)[4], bool (&valid)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    float w;
    key[e] = 0;
    valid[e] = e < count && !empty && decode<T, KIND>(r, v[e], 0.0f, -INFINITY, key[e], w);
  }
}

template <typename T, int KIND>
__global__ void __launch_bounds__(SPLIT_THREADS)
    split_rows(const __grid_constant__ ignis_sampling_params p, const __grid_constant__ split_args a) {
  __shared__ split_smem sm;
  const int j = blockIdx.x, tid = threadIdx.x;
  const int64_t b = blockIdx.y;
  const int S = a.blocks;
  const int64_t src = p.indices ? load_index(p.indices, p.indices_dtype, b) : b;
  if (src < 0 || src >= p.num_rows) {
    if (j == 0 && tid == 0)
      store_index(p.samples, p.samples_dtype, b, 0);
    return; /* every block of the row leaves before touching the row's state */
  }
  uint32_t *state = a.state + b * IGNIS_SPLIT_STATE_WORDS;
  uint32_t *hist_count = a.hist_count + b * IGNIS_SPLIT_BINS;
  uint64_t *hist_mass = a.hist_mass + b * IGNIS_SPLIT_BINS;
  uint64_t *tile_mass = a.tile_mass + b * a.tiles;
  uint64_t *list = a.list + b * p.vocab_size;

  row_view<T> r;
  r.row = static_cast<const T *>(p.input) + src * p.input_row_stride;
  r.minus = nullptr;
  r.n = p.vocab_size;
  r.vec = a.vec;
  r.x_max = 0.0f;

  const ignis_sampling_filter filter = p.filter;
  const row_filter f = row_filter_of(p, b, r.n);
  const int64_t k = f.k;
  const double top_p = f.top_p;
  const bool use_k = f.use_k, use_p = f.use_p;
  const bool first_k = filter == IGNIS_SAMPLING_TOP_K_THEN_TOP_P;
  const bool search = use_k || use_p;

  /* This block's tiles; a block of one tile keeps its chunk in registers through every phase. */
  const int t0 = j * a.tiles_per_block;
  const int t1 = t0 + a.tiles_per_block < a.tiles ? t0 + a.tiles_per_block : a.tiles;
  const bool single = t1 - t0 == 1;
  float v[4];
  int count = 0;

  /* A: the row's largest key. */
  uint32_t max_key = 0;
  for (int t = t0; t < t1; ++t) {
    count = load_tile_chunk(r, t, v);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (e >= count)
        continue;
      uint32_t key;
      if constexpr (KIND == ROW_LOGITS) {
        key = ignis_order_key(sanitize_logit(v[e]));
      } else {
        float w;
        decode<T, KIND>(r, v[e], 0.0f, -INFINITY, key, w);
      }
      max_key = key > max_key ? key : max_key;
    }
  }
  {
    uint64_t unused_a = 0, unused_b = 0, unused_c = 0;
    block_sums(max_key, unused_a, unused_b, unused_c, sm.red);
  }
  if (tid == 0) {
    atomicMax(state + ST_MAX_KEY, max_key);
    sm.list_local = 0;
  }
  if (search) {
    const int per = (IGNIS_SPLIT_BINS + S - 1) / S;
    for (int g = j * per + tid; g < (j + 1) * per && g < IGNIS_SPLIT_BINS; g += SPLIT_THREADS) {
      hist_count[g] = 0;
      hist_mass[g] = 0;
    }
    for (int g = tid; g < IGNIS_SPLIT_BINS; g += SPLIT_THREADS) {
      sm.h.l1.count[g] = 0;
      sm.h.l1.q[g] = 0;
    }
  }
  row_barrier(state + ST_ARRIVE, (uint32_t)S);

  /* B: weights, keys and masses at the row's scale. */
  const uint32_t row_max = __ldcg(state + ST_MAX_KEY);
  bool empty;
  uint32_t weight_max_key;
  if constexpr (KIND == ROW_LOGITS) {
    r.x_max = ignis_key_float(row_max);
    empty = r.x_max == -INFINITY;
    weight_max_key = empty ? 0u : ignis_order_key(1.0f);
  } else {
    empty = row_max <= WEIGHT_FLOOR;
    weight_max_key = row_max;
  }
  const int e_max = ignis_mass_exponent(weight_max_key & 0x7FFFFFFFu);
  uint32_t thr = WEIGHT_FLOOR;
  if (filter == IGNIS_SAMPLING_MIN_P && !empty)
    thr = ignis_order_key(IGNIS_FMUL(row_min_p(p, b), ignis_key_float(weight_max_key)));
  uint32_t key[4];
  bool valid[4];
  const bool level1_mass = use_p; /* the p target's level-1 scan needs the bins' masses */
  if (!search) {
    /* every valid key >= thr is allowed: the tiles' allowed masses */
    for (int t = t0; t < t1; ++t) {
      if (!single)
        count = load_tile_chunk(r, t, v);
      chunk_keys<T, KIND>(r, v, count, empty, key, valid);
      uint64_t allowed = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (valid[e] && key[e] >= thr)
          allowed += weight_mass(key[e], e_max);
      uint32_t unused_m = 0;
      uint64_t unused_b = 0, unused_c = 0;
      block_sums(unused_m, allowed, unused_b, unused_c, sm.red);
      if (tid == 0)
        tile_mass[t] = allowed;
    }
  } else if (!empty) {
    /* the level-1 histogram, added to the row's tile by tile (each bin's 32-bit sum of the low
       parts then holds at most TILE of them) */
    for (int t = t0; t < t1; ++t) {
      if (!single)
        count = load_tile_chunk(r, t, v);
      chunk_keys<T, KIND>(r, v, count, empty, key, valid);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (valid[e]) {
          const int g = (int)((key[e] >> 20) & (IGNIS_SPLIT_BINS - 1));
          atomicAdd(&sm.h.l1.count[g], 1u);
          if (level1_mass)
            atomicAdd(&sm.h.l1.q[g], mass_low_part(key[e], e_max));
        }
      __syncthreads();
      for (int g = tid; g < IGNIS_SPLIT_BINS; g += SPLIT_THREADS) {
        const uint32_t c = sm.h.l1.count[g];
        if (c) {
          atomicAdd(hist_count + g, c);
          if (level1_mass)
            atomicAdd(reinterpret_cast<unsigned long long *>(hist_mass + g),
                      (unsigned long long)bin_mass(g, c, sm.h.l1.q[g], e_max));
          sm.h.l1.count[g] = 0;
          sm.h.l1.q[g] = 0;
        }
      }
      __syncthreads();
    }
  }

  /* C: the level-1 bins of the targets, the plan, then this block's tiles: their allowed mass
   * outside the list and their keys in the list. */
  int plan = PLAN_ALL, d1 = -1;
  uint64_t above1 = 0, row_mass = 0;
  if (search) {
    row_barrier(state + ST_ARRIVE, 2u * (uint32_t)S);
    if (!empty) {
      const int first = tid * BINS_PER_THREAD;
      int d1k = -1, d1p = -1;
      uint64_t above1p = 0;
      if (use_k) {
        uint64_t val[BINS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < BINS_PER_THREAD; ++i)
          val[i] = __ldcg(hist_count + first + i);
        scan_bins<BINS_PER_THREAD>(BY_COUNT, val, first, 0, (uint64_t)k, 0.0, sm);
        d1k = sm.digit;
      }
      if (use_p) {
        uint64_t val[BINS_PER_THREAD];
#pragma unroll
        for (int i = 0; i < BINS_PER_THREAD; ++i)
          val[i] = __ldcg(reinterpret_cast<const unsigned long long *>(hist_mass) + first + i);
        /* the row's exact mass (the scan's total) sets the target: one scan for the sum, one to search */
        scan_bins<BINS_PER_THREAD>(BY_MASS, val, first, 0, 0, INFINITY, sm);
        row_mass = sm.total;
        if (!(first_k && d1k >= 0)) {
          scan_bins<BINS_PER_THREAD>(BY_MASS, val, first, 0, 0, IGNIS_DMUL(top_p, __ull2double_rn(row_mass)),
                                     sm);
          d1p = sm.digit;
          above1p = sm.above;
        }
      }
      if (d1k >= 0 && (first_k || d1p < 0 || d1k >= d1p)) {
        plan = PLAN_LIST;
        d1 = d1k;
      } else if (d1p >= 0) {
        plan = PLAN_TOP_P;
        d1 = d1p;
        above1 = above1p;
      }
    }
    for (int t = t0; t < t1; ++t) {
      if (!single)
        count = load_tile_chunk(r, t, v);
      chunk_keys<T, KIND>(r, v, count, empty, key, valid);
      uint32_t slot[4] = {0, 0, 0, 0};
      bool listed[4];
      uint64_t outside = 0; /* PLAN_TOP_P: above the bin; PLAN_ALL: everything valid */
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int g = (int)((key[e] >> 20) & (IGNIS_SPLIT_BINS - 1));
        listed[e] = valid[e] && plan != PLAN_ALL && (plan == PLAN_LIST ? g >= d1 : g == d1);
        if (valid[e] && (plan == PLAN_ALL || (plan == PLAN_TOP_P && g > d1)))
          outside += weight_mass(key[e], e_max);
        if (listed[e])
          slot[e] = atomicAdd(&sm.list_local, 1u);
      }
      __syncthreads();
      if (tid == 0) {
        sm.list_base = sm.list_local ? atomicAdd(state + ST_LIST_LEN, sm.list_local) : 0u;
        sm.list_local = 0;
      }
      __syncthreads();
      const int64_t index0 = ((int64_t)t * SPLIT_THREADS + tid) * 4;
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (listed[e])
          list[sm.list_base + slot[e]] = (uint64_t)key[e] << 32 | (uint32_t)(index0 + e);
      uint32_t unused_m = 0;
      uint64_t unused_b = 0, unused_c = 0;
      block_sums(unused_m, outside, unused_b, unused_c, sm.red);
      if (tid == 0)
        tile_mass[t] = outside;
    }
  }

  /* The last block of the row goes on. */
  __threadfence();
  __syncthreads();
  if (tid == 0)
    sm.last = atomicAdd(state + ST_DONE, 1u) == (uint32_t)S - 1;
  __syncthreads();
  if (!sm.last)
    return;
  __threadfence();

  /* D: the threshold over the list, the tiles' allowed masses, the draw. */
  if (plan != PLAN_ALL) {
    const uint32_t len = __ldcg(state + ST_LIST_LEN);
    if (plan == PLAN_TOP_P) {
      thr = list_search(list, len, 0, 1, (uint32_t)d1, above1, BY_MASS, 0,
                        IGNIS_DMUL(top_p, __ull2double_rn(row_mass)), e_max, sm);
    } else {
      thr = list_search(list, len, 0, 0, 0, 0, BY_COUNT, (uint64_t)k, 0.0, e_max, sm);
      if (use_p && first_k) {
        const uint64_t mass_k = list_mass(list, len, thr, e_max, sm);
        const uint32_t thr_p = list_search(list, len, thr, 0, 0, 0, BY_MASS, 0,
                                           IGNIS_DMUL(top_p, __ull2double_rn(mass_k)), e_max, sm);
        thr = thr_p > thr ? thr_p : thr;
      } else if (use_p) {
        /* joint: the list holds every key from the bin d1 up; a p target below d1 is not reached
           there (0), and then cannot raise the threshold either */
        const uint32_t thr_p = list_search(list, len, 0, 0, 0, 0, BY_MASS, 0,
                                           IGNIS_DMUL(top_p, __ull2double_rn(row_mass)), e_max, sm);
        thr = thr_p > thr ? thr_p : thr;
      }
    }
    /* the list's allowed masses, into their tiles */
    for (uint32_t i = tid; i < len; i += SPLIT_THREADS) {
      const uint64_t entry = __ldcg(reinterpret_cast<const unsigned long long *>(list) + i);
      const uint32_t kk = (uint32_t)(entry >> 32);
      if (kk >= thr)
        atomicAdd(reinterpret_cast<unsigned long long *>(tile_mass + (uint32_t)entry / (uint32_t)TILE),
                  (unsigned long long)weight_mass(kk, e_max));
    }
    __threadfence();
    __syncthreads();
  }
  /* the tile holding the target: a prefix over runs of tiles, one run per thread */
  const int per = (a.tiles + SPLIT_THREADS - 1) / SPLIT_THREADS;
  const int r0 = tid * per, r1 = r0 + per < a.tiles ? r0 + per : a.tiles;
  uint64_t mine = 0;
  for (int t = r0; t < r1; ++t)
    mine += __ldcg(reinterpret_cast<const unsigned long long *>(tile_mass) + t);
  uint64_t total_mass;
  const uint64_t before = block_prefix<uint64_t>(mine, total_mass, sm.red);
  int64_t token = 0;
  if (!empty && total_mass > 0) {
    const uint64_t target =
        __umul64hi(row_uniform(rng_seed(p.rng, b), rng_offset(p.rng, b), 0, b), total_mass);
    if (mine > 0 && before <= target && target - before < mine) {
      uint64_t run = before;
      for (int t = r0; t < r1; ++t) {
        const uint64_t m = __ldcg(reinterpret_cast<const unsigned long long *>(tile_mass) + t);
        if (target - run < m) {
          sm.tile_hit = t;
          sm.rest = target - run;
          break;
        }
        run += m;
      }
    }
    __syncthreads();
    const int hit = sm.tile_hit;
    const uint64_t rest = sm.rest;
    float x[4];
    const int n_in = load_tile_chunk(r, hit, x);
    const int64_t c = (int64_t)hit * SPLIT_THREADS + tid;
    uint64_t m[4], sum = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      uint32_t kk;
      float w;
      const bool ok = e < n_in && decode<T, KIND>(r, x[e], 0.0f, -INFINITY, kk, w) && kk >= thr;
      m[e] = ok ? weight_mass(kk, e_max) : 0;
      sum += m[e];
    }
    uint64_t unused_total;
    uint64_t run = block_prefix<uint64_t>(sum, unused_total, sm.red);
    if (run <= rest && rest - run < sum) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        run += m[e];
        if (run > rest) {
          sm.token = c * 4 + e;
          break;
        }
      }
    }
    __syncthreads();
    token = sm.token;
  }
  if (tid == 0) {
    store_index(p.samples, p.samples_dtype, b, token);
    state[ST_ARRIVE] = 0;
    state[ST_DONE] = 0;
    state[ST_MAX_KEY] = 0;
    state[ST_LIST_LEN] = 0;
  }
}

/* ---- host ---------------------------------------------------------------------------------------------- */
static bool split_disabled() {
  static const bool off = [] {
    const char *value = ignis_env(IGNIS_ENV_SAMPLING_SPLIT);
    return value != nullptr && strcmp(value, "0") == 0;
  }();
  return off;
}

/* Launches the multi-block kernel when the call qualifies (*taken = true), else leaves it to the
 * one-block kernel. */
template <typename T, int KIND>
static cudaError_t try_launch(const ignis_sampling_params *p, int device, cudaStream_t stream, bool *taken) {
  *taken = false;
  const int64_t rows = p->batch_size, n = p->vocab_size;
  /* blocks resident at once on the device: a cooperative launch may not exceed it */
  const int resident =
      ignis_resident_blocks<split_rows<T, KIND>>(SPLIT_THREADS, 0) * ignis_cuda_sm_count(device);
  const int64_t tiles = (n + TILE - 1) / TILE;
  int64_t blocks = resident / rows < tiles ? resident / rows : tiles;
  if (blocks < 2)
    return cudaSuccess;
  const int64_t per_block = (tiles + blocks - 1) / blocks;
  if (per_block > SPLIT_MAX_TILES_PER_BLOCK)
    return cudaSuccess;
  blocks = (tiles + per_block - 1) / per_block;

  const ignis_split_layout l = ignis_split_layout_of(rows, n);
  unsigned char *ws = static_cast<unsigned char *>(p->workspace);
  split_args a;
  a.state = reinterpret_cast<uint32_t *>(ws + l.state);
  a.hist_count = reinterpret_cast<uint32_t *>(ws + l.hist_count);
  a.hist_mass = reinterpret_cast<uint64_t *>(ws + l.hist_mass);
  a.tile_mass = reinterpret_cast<uint64_t *>(ws + l.tile_mass);
  a.list = reinterpret_cast<uint64_t *>(ws + l.list);
  a.blocks = (int)blocks;
  a.tiles_per_block = (int)per_block;
  a.tiles = (int)tiles;
  a.vec = rows_chunk_aligned(p->input, p->input_row_stride, p->num_rows, sizeof(T));

  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeCooperative;
  attribute.val.cooperative = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((unsigned)blocks, (unsigned)rows);
  config.blockDim = dim3(SPLIT_THREADS);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  *taken = true;
  return cudaLaunchKernelEx(&config, split_rows<T, KIND>, *p, a);
}

} // namespace

/* The multi-block path for a call that qualifies (include/ignis/sampling.h): returns true with
 * *status set when it launched (or failed to), false when the one-block kernel should run. */
bool ignis_sampling::ignis_cuda_sampling_split(const ignis_sampling_params *p, int32_t device, void *stream,
                                               ignis_status *status) {
  if (!p->workspace || p->output != IGNIS_SAMPLING_OUT_SAMPLE || split_disabled())
    return false;
  if (p->batch_size < 1 || p->batch_size > IGNIS_SAMPLING_SPLIT_MAX_ROWS ||
      p->vocab_size < IGNIS_SPLIT_MIN_VOCAB)
    return false;
  if (p->workspace_bytes < ignis_split_layout_of(p->batch_size, p->vocab_size).bytes)
    return false;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  bool taken = false;
  cudaError_t err = cudaSuccess;
  switch (p->dtype) {
  case IGNIS_F32:
    err = p->logits ? try_launch<float, ROW_LOGITS>(p, device, s, &taken)
                    : try_launch<float, ROW_PROBS>(p, device, s, &taken);
    break;
  case IGNIS_F16:
    err = p->logits ? try_launch<__half, ROW_LOGITS>(p, device, s, &taken)
                    : try_launch<__half, ROW_PROBS>(p, device, s, &taken);
    break;
  case IGNIS_BF16:
    err = p->logits ? try_launch<__nv_bfloat16, ROW_LOGITS>(p, device, s, &taken)
                    : try_launch<__nv_bfloat16, ROW_PROBS>(p, device, s, &taken);
    break;
  default:
    return false;
  }
  if (!taken)
    return false;
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    *status = ignis_set_error(IGNIS_ERROR_CUDA, "ignis_cuda_sampling: multi-block launch failed: %s",
                              cudaGetErrorString(err));
    return true;
  }
  *status = ignis_check_launch("ignis_cuda_sampling");
  return true;
}
