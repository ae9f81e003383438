/* Micro benchmark of the sampling kernel's passes (issue 22: top-p at batch 1 within 40 us): where
 * the time of one row goes. A kernel here runs the same device functions as the library's
 * filter_rows (src/cuda/sampling/filter.cu, passes in search.cuh) for top-p and for plain sampling
 * from probabilities, and marks every step: after a barrier, thread 0 appends (step, clock64) to
 * its row's list (sampling_mark, also search.cuh's IGNIS_SAMPLING_MARK inside the search). Built by
 * CMake as build/ignis_sampling_passes when CUDA is on. Usage: ignis_sampling_passes.
 *
 * Data: batch rows of vocabulary 128256, probabilities softmax(N(0, 1) logits) in fp32, as in
 * bench/sampling_compare.py. Check: the kernel's samples must equal the library's
 * (ignis_top_p_sampling_from_probs, ignis_sampling_from_probs) for the same seed and offset, so the
 * marks time the path the library runs; the program exits 1 otherwise.
 *
 * Columns: batch; the library call's µs (bench/micro/timing.cuh: bursts behind a GPU spin, median);
 * this kernel's µs the same way; then each step in µs, the median over runs and over the rows whose
 * steps are row 0's, of the marks' differences at the SM clock measured here against %globaltimer:
 *   top-p         hist (the level-1 histogram pass, reads the row); the search's steps: the pick
 *                 over the histogram (its runs over the bins, its block scan, the walk to the bins),
 *                 the gather pass (reads the row), the select over the list, the list's masses, any
 *                 refine or bisect pass; tiles (a tile pass, when the search left the tile masses
 *                 unknown; reads the row); draw (a scan over the tiles, then over one tile's elements)
 *   plain         max (reads the row), tiles (reads the row), draw
 *   read only     one pass of loads only (a store that depends on every load keeps them)
 *   top-p parts   top-p, then the costs of its pieces: the gather pass again over a window of ten
 *                 level-1 bins from the threshold in its variants (no masses; masses; with the tiles;
 *                 with the total; an empty window), a tile pass, the level-1 histogram with masses,
 *                 and the level-1 histogram plain and with every element counted in one slot, each
 *                 followed by a read of the bins ("drain": what the pass's shared-memory reductions
 *                 still owe after its barrier). */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"
#include "timing.cuh"

/* The marks: thread 0 appends (step, clock64) to its row's slots in mark_rows after a barrier; slot 0
 * holds the count. Step 0 (MARK_START) starts the list. */
constexpr int MARK_SLOTS = 32;
__device__ long long *mark_rows;
__device__ __forceinline__ void sampling_mark(int step) {
  __shared__ int count; /* marks so far (kept here: the list is only stored to, never loaded) */
  __syncthreads();
  if (threadIdx.x == 0) {
    long long *m = mark_rows + (size_t)blockIdx.x * (1 + 2 * MARK_SLOTS);
    const int n = step == 0 ? 0 : count;
    if ((unsigned)n < (unsigned)MARK_SLOTS) {
      m[1 + 2 * n] = step;
      m[2 + 2 * n] = clock64();
      m[0] = n + 1;
      count = n + 1;
    }
  }
}
#define IGNIS_SAMPLING_MARK(step) sampling_mark(step)
#include "cuda/sampling/search.cuh"
#include "ignis/ignis.h"

using namespace ignis_sampling;

namespace {

constexpr int64_t VOCAB = 128256;
constexpr double TOP_P = 0.9;
constexpr uint64_t SEED = 1234, OFFSET = 77;

enum mode { MODE_TOP_P = 0, MODE_PLAIN = 1, MODE_READ = 2, MODE_PARTS = 3, MODES = 4 };
const char *const mode_names[MODES] = {"top-p 0.9", "plain", "read only", "top-p parts"};

/* The marks this file adds after search.cuh's (search_mark: 1 .. MARK_PICK_SCAN), and every
 * mark's name. */
enum bench_mark {
  MARK_START = 0,
  MARK_HIST = 20,
  MARK_TILES,
  MARK_DRAW,
  MARK_MAX,
  MARK_READ,
  MARK_GATHER_PLAIN,
  MARK_GATHER_MASSES,
  MARK_GATHER_TILES,
  MARK_GATHER_TOTAL,
  MARK_GATHER_EMPTY,
  MARK_TILE_PASS,
  MARK_HIST_MASSES,
  MARK_DRAIN_MASSES,
  MARK_HIST_PLAIN,
  MARK_DRAIN_PLAIN,
  MARK_HIST_ONE_SLOT,
  MARK_DRAIN_ONE_SLOT,
  MARK_END
};
const char *mark_name(long long id) {
  static const char *const search_names[] = {"start",  "pick (walk)", "gather",    "select",   "list mass",
                                             "bisect", "refine",      "pick runs", "pick scan"};
  static const char *const bench_names[] = {"hist",
                                            "tiles",
                                            "draw",
                                            "max",
                                            "read",
                                            "gather plain",
                                            "gather +masses",
                                            "gather +masses+tiles",
                                            "gather +masses+tiles+total",
                                            "gather empty window +all",
                                            "tile pass",
                                            "hist +masses+total",
                                            "drain",
                                            "hist level 1",
                                            "drain",
                                            "hist one slot",
                                            "drain"};
  if (id >= 0 && id <= MARK_PICK_SCAN)
    return search_names[id];
  return id >= MARK_HIST && id < MARK_END ? bench_names[id - MARK_HIST] : "?";
}

/* The costs of top-p's pieces (MODE_PARTS), after the row's top-p threshold thr is known. */
__device__ void time_parts(const row_view<float> &r, uint32_t thr, int e_max, int tile_shift, int64_t *sink) {
  const uint32_t lo = thr, hi = thr + (10u << WEIGHT_SHIFT);
  gather_pass<float, ROW_PROBS, false>(r, lo, hi, e_max, false, false, tile_shift);
  sampling_mark(MARK_GATHER_PLAIN);
  gather_pass<float, ROW_PROBS, true>(r, lo, hi, e_max, false, false, tile_shift);
  sampling_mark(MARK_GATHER_MASSES);
  gather_pass<float, ROW_PROBS, true>(r, lo, hi, e_max, true, false, tile_shift);
  sampling_mark(MARK_GATHER_TILES);
  gather_pass<float, ROW_PROBS, true>(r, lo, hi, e_max, true, true, tile_shift);
  sampling_mark(MARK_GATHER_TOTAL);
  gather_pass<float, ROW_PROBS, true>(r, WEIGHT_TOP, WEIGHT_TOP, e_max, true, true, tile_shift);
  sampling_mark(MARK_GATHER_EMPTY);
  tile_pass<float, ROW_PROBS>(r, lo, e_max, tile_shift);
  sampling_mark(MARK_TILE_PASS);
  /* each histogram, then a read of every bin after its barrier: waits for its shared reductions */
  uint32_t drained = 0;
  auto drain = [&](int bins) {
    for (int i = threadIdx.x; i < bins; i += THREADS)
      drained += search_mem().u.hist[i];
  };
  histogram_pass<float, ROW_PROBS, true>(r, WEIGHT_FLOOR, WEIGHT_TOP, WEIGHT_SHIFT, e_max, true, false, 0,
                                         true);
  sampling_mark(MARK_HIST_MASSES);
  drain(BINS);
  sampling_mark(MARK_DRAIN_MASSES);
  histogram_pass<float, ROW_PROBS, false>(r, WEIGHT_FLOOR, WEIGHT_TOP, WEIGHT_SHIFT, 1, false, false, 0,
                                          false);
  sampling_mark(MARK_HIST_PLAIN);
  drain(BINS);
  sampling_mark(MARK_DRAIN_PLAIN);
  histogram_pass<float, ROW_PROBS, false>(r, WEIGHT_TOP, WEIGHT_TOP, WEIGHT_SHIFT, 1, false, false, 0, false);
  sampling_mark(MARK_HIST_ONE_SLOT);
  drained += search_mem().u.hist[COUNT_TRASH];
  sampling_mark(MARK_DRAIN_ONE_SLOT);
  if (drained == 0xFFFFFFFFu) /* (a store that depends on the reads keeps them) */
    *sink = -1;
}

template <int MODE>
__global__ void __launch_bounds__(THREADS, 1)
    timed_rows(const float *probs, int64_t n, bool vec, int64_t *samples) {
  const int64_t b = blockIdx.x;
  row_view<float> r;
  r.row = probs + b * n;
  r.minus = nullptr;
  r.n = n;
  r.vec = vec;
  r.x_max = 0.0f;
  const int tile_shift = tile_shift_of(n);
  const uint64_t uniform = row_uniform(SEED, OFFSET, 0, b);
  sampling_mark(MARK_START);
  int64_t token = -1;
  if constexpr (MODE == MODE_TOP_P || MODE == MODE_PARTS) {
    const pass_sums level1 = histogram_pass<float, ROW_PROBS, false>(r, WEIGHT_FLOOR, WEIGHT_TOP,
                                                                     WEIGHT_SHIFT, 1, false, false, 0, false);
    sampling_mark(MARK_HIST);
    if (level1.max_key != 0) {
      const int e_max = ignis_mass_exponent(level1.max_key & 0x7FFFFFFFu);
      const targets tg = {false, 0, true, TOP_P, false, 0};
      const search_result res = search<float, ROW_PROBS>(r, tg, WEIGHT_FLOOR, WEIGHT_TOP, WEIGHT_SHIFT, e_max,
                                                         level1.max_key, false, true, tile_shift);
      if (!res.tiles) {
        tile_pass<float, ROW_PROBS>(r, res.thr, e_max, tile_shift);
        sampling_mark(MARK_TILES);
      }
      token = sample_tiles<float, ROW_PROBS>(r, res.thr, e_max, tile_shift, uniform);
      sampling_mark(MARK_DRAW);
      if constexpr (MODE == MODE_PARTS)
        time_parts(r, res.thr, e_max, tile_shift, &samples[b]);
    }
  } else if constexpr (MODE == MODE_PLAIN) {
    const uint32_t max_key = max_key_pass<float, ROW_PROBS>(r);
    sampling_mark(MARK_MAX);
    if (max_key != 0) {
      const int e_max = ignis_mass_exponent(max_key & 0x7FFFFFFFu);
      tile_pass<float, ROW_PROBS>(r, WEIGHT_FLOOR, e_max, tile_shift);
      sampling_mark(MARK_TILES);
      token = sample_tiles<float, ROW_PROBS>(r, WEIGHT_FLOOR, e_max, tile_shift, uniform);
      sampling_mark(MARK_DRAW);
    }
  } else {
    float sum = 0.0f;
    for_each_chunk<float, ROW_PROBS>(r, [&](int, int64_t, const float(&v)[4], const float(&)[4], int valid) {
      sum += valid > 0 ? v[0] + v[1] + v[2] + v[3] : 0.0f;
    });
    sampling_mark(MARK_READ);
    if (sum == -1.0f) /* never, for probabilities; a store that depends on every load keeps them */
      samples[b] = 1;
  }
  __syncthreads();
  if (MODE != MODE_READ && threadIdx.x == 0)
    samples[b] = token < 0 ? 0 : token;
}

/* Cycles of the SM clock per nanosecond of %globaltimer, over a spin of ~20 ms. */
__global__ void clock_rate(long long cycles, double *per_ns) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  while (clock64() - c0 < cycles) {
  }
  const long long c1 = clock64();
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  *per_ns = (double)(c1 - c0) / (double)(t1 - t0);
}

/* probabilities: softmax of N(0, 1) logits, row by row */
std::vector<float> make_probs(int64_t rows, int64_t n) {
  std::vector<float> p((size_t)(rows * n));
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return ((state >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  };
  std::vector<double> x((size_t)n);
  for (int64_t r = 0; r < rows; ++r) {
    double top = -INFINITY, sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      x[i] = sqrt(-2.0 * log(uniform())) * cos(2.0 * M_PI * uniform());
      top = x[i] > top ? x[i] : top;
    }
    for (int64_t i = 0; i < n; ++i)
      sum += exp(x[i] - top);
    for (int64_t i = 0; i < n; ++i)
      p[(size_t)(r * n + i)] = (float)(exp(x[i] - top) / sum);
  }
  return p;
}

} // namespace

int main() {
  int device = 0;
  CK(cudaSetDevice(device));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, device));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  const micro_timing timing = {3, 15, 10, 2000000};
  const int64_t max_rows = 128;
  const std::vector<float> host = make_probs(max_rows, VOCAB);
  float *probs = nullptr;
  int64_t *samples = nullptr, *lib_samples = nullptr;
  long long *marks = nullptr;
  double *per_ns_dev = nullptr;
  const size_t mark_row = 1 + 2 * MARK_SLOTS;
  CK(cudaMalloc(&probs, host.size() * sizeof(float)));
  CK(cudaMemcpy(probs, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&samples, max_rows * sizeof(int64_t)));
  CK(cudaMalloc(&lib_samples, max_rows * sizeof(int64_t)));
  CK(cudaMalloc(&marks, max_rows * mark_row * sizeof(long long)));
  CK(cudaMemset(marks, 0, max_rows * mark_row * sizeof(long long)));
  CK(cudaMemcpyToSymbol(mark_rows, &marks, sizeof marks));
  CK(cudaMalloc(&per_ns_dev, sizeof(double)));
  void (*const kernels[MODES])(const float *, int64_t, bool, int64_t *) = {
      timed_rows<MODE_TOP_P>, timed_rows<MODE_PLAIN>, timed_rows<MODE_READ>, timed_rows<MODE_PARTS>};
  for (const auto kernel : kernels)
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(search_smem)));
  clock_rate<<<1, 1, 0, stream>>>(40000000, per_ns_dev);
  double per_ns = 0;
  CK(cudaMemcpyAsync(&per_ns, per_ns_dev, sizeof(double), cudaMemcpyDeviceToHost, stream));
  CK(cudaStreamSynchronize(stream));
  printf("# sampling passes: %s, %d SMs, SM clock %.0f MHz (measured), vocabulary %lld fp32, %s\n", prop.name,
         prop.multiProcessorCount, per_ns * 1e3, (long long)VOCAB, ignis_build_info());
  printf("| op | batch | library us | kernel us | steps, us (median over runs and rows) "
         "|\n|---|---|---|---|---|\n");

  ignis_sampling_options options = IGNIS_SAMPLING_OPTIONS_INIT;
  options.seed = SEED;
  options.offset = OFFSET;
  bool all_same = true;
  const int64_t batches[] = {1, 16, 128};
  for (int64_t rows : batches) {
    ignis_tensor t_probs, t_samples;
    const int64_t shape[2] = {rows, VOCAB};
    IK(ignis_tensor_init(&t_probs, probs, IGNIS_F32, 2, shape, ignis_device{IGNIS_DEVICE_CUDA, 0}));
    IK(ignis_tensor_init(&t_samples, lib_samples, IGNIS_I64, 1, &rows, ignis_device{IGNIS_DEVICE_CUDA, 0}));
    for (int mode = 0; mode < MODES; ++mode) {
      const bool sampled = mode != MODE_READ;
      auto launch = [&](int) {
        kernels[mode]<<<(unsigned)rows, THREADS, sizeof(search_smem), stream>>>(probs, VOCAB, true, samples);
      };
      auto library = [&](int) {
        if (mode == MODE_PLAIN)
          IK(ignis_sampling_from_probs(&t_probs, &t_samples, &options, stream));
        else
          IK(ignis_top_p_sampling_from_probs(&t_probs, nullptr, TOP_P, &t_samples, &options, stream));
      };
      const bool timed_library = mode == MODE_TOP_P || mode == MODE_PLAIN;
      const double lib_us = timed_library ? micro_time_us(stream, timing, 1, library) : 0.0;
      const double kernel_us = micro_time_us(stream, timing, 1, launch);
      /* the steps: 20 single launches; row 0's steps name them, the rows with the same steps count */
      std::vector<long long> mk((size_t)rows * mark_row), steps;
      std::vector<std::vector<double>> step_us;
      for (int run = 0; run < 20; ++run) {
        launch(0);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(mk.data(), marks, mk.size() * sizeof(long long), cudaMemcpyDeviceToHost, stream));
        CK(cudaStreamSynchronize(stream));
        for (int64_t r = 0; r < rows; ++r) {
          const long long *m = mk.data() + (size_t)r * mark_row;
          const int n = (int)m[0];
          std::vector<long long> seq;
          for (int i = 0; i < n; ++i)
            seq.push_back(m[1 + 2 * i]);
          if (steps.empty()) {
            steps = seq;
            step_us.assign(seq.size(), {});
          }
          if (seq != steps)
            continue;
          for (int i = 1; i < n; ++i)
            step_us[(size_t)i].push_back((double)(m[2 + 2 * i] - m[2 * i]) / per_ns * 1e-3);
        }
      }
      char text[1024] = "";
      int len = 0;
      for (size_t i = 1; i < steps.size() && len < (int)sizeof text; ++i)
        len += snprintf(text + len, sizeof text - (size_t)len, "%s%s %.1f", i > 1 ? ", " : "",
                        mark_name(steps[i]), micro_median(step_us[i]));
      char lib_text[32] = "-";
      if (timed_library)
        snprintf(lib_text, sizeof lib_text, "%.1f", lib_us);
      printf("| %s | %lld | %s | %.1f | %s |\n", mode_names[mode], (long long)rows, lib_text, kernel_us,
             text);
      if (sampled) {
        std::vector<int64_t> mine((size_t)rows), lib((size_t)rows);
        library(0);
        launch(0);
        CK(cudaMemcpyAsync(mine.data(), samples, rows * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
        CK(cudaMemcpyAsync(lib.data(), lib_samples, rows * sizeof(int64_t), cudaMemcpyDeviceToHost, stream));
        CK(cudaStreamSynchronize(stream));
        for (int64_t r = 0; r < rows; ++r)
          if (mine[(size_t)r] != lib[(size_t)r]) {
            if (all_same)
              fprintf(stderr, "%s batch %lld row %lld: kernel %lld, library %lld\n", mode_names[mode],
                      (long long)rows, (long long)r, (long long)mine[(size_t)r], (long long)lib[(size_t)r]);
            all_same = false;
          }
      }
    }
  }
  printf("\nsamples equal to the library's: %s\n", all_same ? "yes" : "NO");
  CK(cudaFree(probs));
  CK(cudaFree(samples));
  CK(cudaFree(lib_samples));
  CK(cudaFree(marks));
  CK(cudaFree(per_ns_dev));
  CK(cudaStreamDestroy(stream));
  return all_same ? 0 : 1;
}
