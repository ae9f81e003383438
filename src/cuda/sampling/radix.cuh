/* The radix threshold search of the sampling kernels, one block per row (src/cpu/sampling.c states
 * the same algorithm sequentially; both must give the same thresholds bit for bit).
 *
 * An element of the row has an order key (core/philox.h: ignis_order_key) and, in weight mode, a
 * weight w > 0 whose fixed-point mass is exact. The search finds the largest key thr such that the
 * elements with key >= thr reach a target: a count k (top-k) or a mass (top-p). Three levels of
 * digits, bits 31..20, 19..9 and 8..0 of the key: each level is a histogram of the elements whose
 * higher digits equal the bins chosen so far (counts, and masses when asked), in shared memory with
 * run-length merged atomics (a thread adds up a run of elements that fall in one bin and flushes it
 * once, so constant or clustered rows do not serialize on one counter); then `pick` takes the
 * largest digit whose suffix sum reaches the target, from exact integer suffix sums over the block.
 * The level-1 histogram stays in shared memory (cnt1/mass1) so a second search (top-p after top-k)
 * starts from it without a pass.
 *
 * Passes: level 1 reads the whole row. When the chosen level-1 bin holds at most GATHER_CAP
 * elements (the usual case: a bin is 1/8 of a binade), one more pass copies their keys into shared
 * memory (warp-aggregated slots; the order does not matter, the histograms are exact sums) and
 * levels 2 and 3 run on that list; otherwise levels 2 and 3 each read the row. So a search costs
 * 2 passes, 3 at worst.
 *
 * Logits: the weight exp(x - x_max) of every element is needed only in level 1; a pass that looks
 * for elements at or above a weight w_lo skips the exp of any x below x_max + ln(w_lo) - margin
 * (x_floor; the margin covers the rounding of both sides many times over, so no element at or
 * above w_lo is ever skipped).
 *
 * Row access: chunks of 4 elements (sampling_common.cuh), UNROLL chunks loaded per thread before
 * any is used, so ~64 KB of a row are in flight per block. */
#ifndef IGNIS_CUDA_SAMPLING_RADIX_CUH
#define IGNIS_CUDA_SAMPLING_RADIX_CUH

#include "cuda/sampling/sampling_common.cuh"

namespace ignis_sampling {

constexpr int THREADS = 1024;
constexpr int UNROLL = 4;
constexpr int RACE_UNROLL = 2; /* the race computes more per element: fewer loads in flight suffice */
constexpr int L1_DIGITS = 4096;
constexpr int L2_DIGITS = 2048;
constexpr int POSITIVE_L1 = 2048; /* level-1 digits of positive keys: 2048 .. 4095 */
constexpr int GATHER_CAP = 8192;  /* keys of one level-1 bin kept in shared memory */

__device__ __forceinline__ int level_shift(int level) {
  return level == 0 ? 20 : level == 1 ? 9 : 0;
}
__device__ __forceinline__ int level_bits(int level) {
  return level == 0 ? 12 : level == 1 ? 11 : 9;
}

enum key_mode {
  KEY_WEIGHT = 0, /* weights w > 0 only, key of w */
  KEY_MASK = 1,   /* every element, NaN as -inf */
  KEY_SELECT = 2  /* every element, NaN below -inf */
};

struct radix_smem {
  uint32_t cnt1[L1_DIGITS];
  uint64_t mass1[L1_DIGITS - POSITIVE_L1]; /* digit d at d - 2048 */
  uint32_t cnt2[L2_DIGITS];
  uint64_t mass2[L2_DIGITS];
  uint32_t list[GATHER_CAP];
  uint32_t list_len;
  reduce_scratch red;
  int32_t top_digit;
  int32_t digit;
  int32_t is_short;
  uint64_t above_count, above_mass, digit_count, digit_mass, total_count, total_mass;
};

/* A row being searched. */
template <typename T> struct radix_row {
  const T *row;
  int64_t n;
  bool vec;
  int mode;
  bool logits; /* KEY_WEIGHT: the row holds logits, w = exp(x - x_max) */
  float x_max;
  float x_floor; /* logits below it have a weight below what the pass looks for (-inf: none) */
};

/* Key and weight of one element; false when it takes no part. */
template <typename T>
__device__ __forceinline__ bool element_key(const radix_row<T> &r, float raw, uint32_t &key, float &w) {
  if (r.mode == KEY_WEIGHT) {
    if (r.logits) {
      const float x = sanitize_logit(raw);
      w = (r.x_max == -INFINITY || x < r.x_floor) ? 0.0f : ignis_exp_nonpos(x - r.x_max);
    } else {
      w = sanitize_prob(raw);
    }
    key = ignis_order_key(w);
    return w > 0.0f;
  }
  w = raw;
  if (r.mode == KEY_MASK)
    key = ignis_order_key(isnan(raw) ? -INFINITY : raw);
  else
    key = isnan(raw) ? 0u : ignis_order_key(raw);
  return true;
}

/* The row view of a pass that looks only at weights >= the positive float of key lowest_key. */
template <typename T>
__device__ __forceinline__ radix_row<T> with_floor(radix_row<T> r, uint32_t lowest_key) {
  if (r.logits && r.x_max != -INFINITY && lowest_key > 0x80000000u) {
    const float w_lo = ignis_key_float(lowest_key);
    r.x_floor = r.x_max + logf(w_lo) - (1e-3f + 1e-6f * fabsf(r.x_max));
  }
  return r;
}

/* Copy the keys of the elements in level-1 bin `digit` into sm.list (count known <= GATHER_CAP).
 * Ends with a barrier. */
template <typename T> __device__ void gather_bin(const radix_row<T> &row, uint32_t digit, radix_smem &sm) {
  const radix_row<T> r = with_floor(row, digit << 20);
  if (threadIdx.x == 0)
    sm.list_len = 0;
  __syncthreads();
  const int lane = threadIdx.x & 31;
  const int64_t chunks = (r.n + 3) / 4;
  const int64_t steps = (chunks + (int64_t)UNROLL * blockDim.x - 1) / ((int64_t)UNROLL * blockDim.x);
  for (int64_t step = 0; step < steps; ++step) { /* whole warps take every step (ballots below) */
    const int64_t base = step * UNROLL * blockDim.x + threadIdx.x;
    float v[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      load_chunk(r.row, base + (int64_t)u * blockDim.x, r.n, r.vec, v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t c = base + (int64_t)u * blockDim.x;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t key = 0;
        float w;
        const bool in_bin =
            c < chunks && c * 4 + j < r.n && element_key(r, v[u][j], key, w) && (key >> 20) == digit;
        const uint32_t mask = __ballot_sync(0xffffffffu, in_bin);
        if (mask == 0)
          continue;
        uint32_t first = 0;
        if (lane == __ffs(mask) - 1)
          first = atomicAdd(&sm.list_len, (uint32_t)__popc(mask));
        first = __shfl_sync(0xffffffffu, first, __ffs(mask) - 1);
        if (in_bin)
          sm.list[first + __popc(mask & ((1u << lane) - 1))] = key;
      }
    }
  }
  __syncthreads();
}

/* Level 2 or 3 histogram over the gathered keys (as histogram_pass does over the row). */
__device__ inline void histogram_list(const radix_smem &sm, int level, uint32_t prefix, bool with_mass,
                                      int e_max, uint32_t *cnt, uint64_t *mass) {
  const int digits = 1 << level_bits(level);
  for (int d = threadIdx.x; d < digits; d += blockDim.x) {
    cnt[d] = 0;
    if (with_mass)
      mass[d] = 0;
  }
  __syncthreads();
  const int shift = level_shift(level), prefix_shift = shift + level_bits(level);
  const uint32_t level1_digit = level == 2 ? prefix >> 11 : prefix;
  const int bin_e = ignis_mass_exponent((level1_digit & 0x7FFu) << 20);
  for (uint32_t i = threadIdx.x; i < sm.list_len; i += blockDim.x) {
    const uint32_t key = sm.list[i];
    if ((key >> prefix_shift) != prefix)
      continue;
    const int d = (int)((key >> shift) & (uint32_t)(digits - 1));
    atomicAdd(&cnt[d], 1u);
    if (with_mass) /* weight keys: the float's bits are the key without its top bit */
      atomicAdd(reinterpret_cast<unsigned long long *>(&mass[d]),
                (unsigned long long)ignis_mass_at(ignis_mass_own(key & 0x7FFFFFFFu), bin_e, e_max));
  }
  __syncthreads();
}

/* Histogram of level `level` over the elements of bin `prefix` into cnt (and mass, level 0: own
 * exponent units, levels 1-2: units of e_max). Ends with a barrier. */
template <typename T>
__device__ void histogram_pass(const radix_row<T> &row, int level, uint32_t prefix, bool with_mass, int e_max,
                               uint32_t *cnt, uint64_t *mass) {
  const radix_row<T> r =
      level == 0 ? row : with_floor(row, prefix << (level_shift(level) + level_bits(level)));
  const int digits = 1 << level_bits(level);
  for (int d = threadIdx.x; d < digits; d += blockDim.x) {
    cnt[d] = 0;
    if (with_mass && (level > 0 || d >= POSITIVE_L1))
      mass[level == 0 ? d - POSITIVE_L1 : d] = 0;
  }
  __syncthreads();
  const int shift = level_shift(level), prefix_shift = shift + level_bits(level);
  const uint32_t level1_digit = level == 2 ? prefix >> 11 : prefix;
  const int bin_e = ignis_mass_exponent((level1_digit & 0x7FFu) << 20);
  int run_digit = -1;
  uint32_t run_count = 0;
  uint64_t run_mass = 0;
  auto flush = [&]() {
    if (run_digit >= 0) {
      atomicAdd(&cnt[run_digit], run_count);
      if (with_mass)
        atomicAdd(
            reinterpret_cast<unsigned long long *>(&mass[level == 0 ? run_digit - POSITIVE_L1 : run_digit]),
            (unsigned long long)run_mass);
    }
  };
  const int64_t chunks = (r.n + 3) / 4;
  for (int64_t base = threadIdx.x; base < chunks; base += (int64_t)UNROLL * blockDim.x) {
    float v[UNROLL][4];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
      load_chunk(r.row, base + (int64_t)u * blockDim.x, r.n, r.vec, v[u]);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int64_t c = base + (int64_t)u * blockDim.x;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t key;
        float w;
        if (c * 4 + j >= r.n || !element_key(r, v[u][j], key, w))
          continue;
        if (level > 0 && (key >> prefix_shift) != prefix)
          continue;
        const int d = (int)((key >> shift) & (uint32_t)(digits - 1));
        uint64_t m = 0;
        if (with_mass) {
          const uint64_t own = ignis_mass_own(ignis_float_bits(w));
          m = level == 0 ? own : ignis_mass_at(own, bin_e, e_max);
        }
        if (d != run_digit) {
          flush();
          run_digit = d;
          run_count = 0;
          run_mass = 0;
        }
        run_count += 1;
        run_mass += m;
      }
    }
  }
  flush();
  __syncthreads();
}

/* After the level-1 histogram with masses: the row's largest exponent field (1 if no weights) and
 * the masses converted to its units. Returns e_max. */
__device__ __forceinline__ int level1_to_common_units(radix_smem &sm) {
  if (threadIdx.x == 0)
    sm.top_digit = -1;
  __syncthreads();
  int top = -1;
  for (int d = POSITIVE_L1 + threadIdx.x; d < L1_DIGITS; d += blockDim.x)
    if (sm.cnt1[d])
      top = d;
  if (top >= 0)
    atomicMax(&sm.top_digit, top);
  __syncthreads();
  const int e_max = sm.top_digit < 0 ? 1 : ignis_mass_exponent((uint32_t)(sm.top_digit - POSITIVE_L1) << 20);
  for (int d = POSITIVE_L1 + threadIdx.x; d < L1_DIGITS; d += blockDim.x)
    sm.mass1[d - POSITIVE_L1] = ignis_mass_at(sm.mass1[d - POSITIVE_L1],
                                              ignis_mass_exponent((uint32_t)(d - POSITIVE_L1) << 20), e_max);
  __syncthreads();
  return e_max;
}

/* The largest digit d with suffix(>= d) >= target (by count, or by mass compared in f64), into
 * sm.digit / above_* / digit_*; sm.is_short when the whole histogram is below the target. */
__device__ inline void pick(const uint32_t *cnt, const uint64_t *mass, int mass_offset, int digits,
                            bool by_mass, int64_t count_target, double mass_target, radix_smem &sm) {
  const int per_thread = digits >= (int)blockDim.x ? digits / (int)blockDim.x : 1;
  const int first = threadIdx.x * per_thread;
  const bool active = first < digits;
  auto mass_of = [&](int d) -> uint64_t { return mass && d >= mass_offset ? mass[d - mass_offset] : 0; };
  uint64_t local_count = 0, local_mass = 0;
  if (active)
    for (int d = first; d < first + per_thread; ++d) {
      local_count += cnt[d];
      local_mass += mass_of(d);
    }
  if (threadIdx.x == 0) { /* the result when the target is <= 0: the top digit */
    sm.digit = digits - 1;
    sm.above_count = sm.above_mass = 0;
    sm.digit_count = cnt[digits - 1];
    sm.digit_mass = mass_of(digits - 1);
  }
  uint64_t count_above, mass_above, total_count, total_mass;
  block_suffix2(local_count, local_mass, count_above, mass_above, total_count, total_mass, sm.red);
  if (threadIdx.x == 0) {
    sm.total_count = total_count;
    sm.total_mass = total_mass;
    sm.is_short = by_mass ? (double)total_mass < mass_target : (int64_t)total_count < count_target;
  }
  if (active) {
    for (int d = first + per_thread - 1; d >= first; --d) {
      const uint64_t c = cnt[d], m = mass_of(d);
      const bool reached =
          by_mass ? (double)(mass_above + m) >= mass_target : (int64_t)(count_above + c) >= count_target;
      if (reached) {
        const bool reached_above =
            by_mass ? (double)mass_above >= mass_target : (int64_t)count_above >= count_target;
        if (!reached_above) {
          sm.digit = d;
          sm.above_count = count_above;
          sm.above_mass = mass_above;
          sm.digit_count = c;
          sm.digit_mass = m;
        }
        break;
      }
      count_above += c;
      mass_above += m;
    }
  }
  __syncthreads();
}

/* The chosen level-1 bin fits the gather list (read after a pick, before the next barrier). */
__device__ __forceinline__ bool sm_digit_count_fits(const radix_smem &sm) {
  return sm.digit_count <= GATHER_CAP;
}

struct search_result {
  uint32_t thr;         /* allowed: key >= thr */
  uint64_t mass_above;  /* mass of the elements with key >= thr (with_mass) */
  uint64_t count_above; /* elements with key > thr */
};

/* The search over the level-1 histogram in sm.cnt1/mass1 and, as needed, two more passes. */
template <typename T>
__device__ search_result radix_search(const radix_row<T> &r, bool by_mass, bool with_mass,
                                      int64_t count_target, double mass_target, int e_max, radix_smem &sm) {
  search_result out = {0, 0, 0};
  uint32_t prefix = 0;
  bool from_list = false;
  for (int level = 0; level < 3; ++level) {
    if (level == 1 && sm_digit_count_fits(sm)) {
      gather_bin(r, prefix, sm);
      from_list = true;
    }
    if (level > 0 && from_list)
      histogram_list(sm, level, prefix, with_mass, e_max, sm.cnt2, sm.mass2);
    else if (level > 0)
      histogram_pass(r, level, prefix, with_mass, e_max, sm.cnt2, sm.mass2);
    if (level == 0)
      pick(sm.cnt1, with_mass ? sm.mass1 : nullptr, POSITIVE_L1, L1_DIGITS, by_mass, count_target,
           mass_target, sm);
    else
      pick(sm.cnt2, with_mass ? sm.mass2 : nullptr, 0, 1 << level_bits(level), by_mass, count_target,
           mass_target, sm);
    if (sm.is_short) {
      out.thr = level == 0 ? 0u : prefix << (level_shift(level) + level_bits(level));
      out.mass_above += sm.total_mass;
      out.count_above += sm.total_count; /* not needed by the callers that reach this */
      __syncthreads();
      return out;
    }
    count_target -= (int64_t)sm.above_count;
    mass_target -= (double)sm.above_mass;
    out.mass_above += sm.above_mass;
    out.count_above += sm.above_count;
    prefix = (prefix << level_bits(level)) | (uint32_t)sm.digit;
    if (level == 2)
      out.mass_above += sm.digit_mass;
    __syncthreads();
  }
  out.thr = prefix;
  return out;
}

} // namespace ignis_sampling

#endif
