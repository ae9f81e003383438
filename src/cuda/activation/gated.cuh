/* The gated-activation kernel of the CUDA backend (activation.cu), as a template over its memory
 * shape, so that the library and the micro benchmark bench/micro/act_variants.cu compile the very
 * same kernel: the benchmark times several shapes on one GPU, the library launches the shape that
 * won. out[h] = act(a[h]) * b[h] with a = input[..., :H] and b = input[..., H:], in f32 (the math
 * of src/cpu/activation.c); the shape never changes the math, so every shape writes the same bits.
 *
 * Rows to threads: the leading dimensions form a 2-level row index (core/params.h). A row of H
 * outputs is cut into chunks (16-byte vectors, or single elements on the scalar path). A unit is
 * WIDTH consecutive chunks (WIDTH 2: a thread reads 32 contiguous bytes, the two 16-byte halves of
 * a 32-byte sector, by two loads). A block of (G, R) threads, G * R = THREADS, covers R rows times
 * one column tile of G * UNITS units: thread x takes units x, x + G, ..., x + (UNITS - 1) G of the
 * tile, so a warp's loads and stores stay contiguous and each thread has 2 * UNITS * WIDTH loads
 * (of a and of b) in flight before it computes. G is the smallest power of two for which one tile
 * spans the row, at most THREADS; shorter rows share a block (R = THREADS / G). blockIdx.x steps
 * over column tiles, blockIdx.y over groups of R rows, both in grid-stride loops; the grid has one
 * block per tile (or at most ROW_BLOCKS per row group, which then walk the row's tiles in turn)
 * and row group, or (persistent) at most a given number of row groups.
 *
 * Cache policies (template LOAD, STORE), written as PTX so that the instruction is the one named:
 * loads plain (ld.global), read-only (ld.global.nc), streaming (ld.global.cs), read-only with a
 * 256-byte L2 prefetch (ld.global.nc.L2::256B), or no L1 allocation with an L2 evict-first policy;
 * stores plain (st.global), streaming (st.global.cs) or no L1 allocation with L2 evict-first. The
 * scalar path always loads element by element with ld.global.cs and stores plainly.
 *
 * Functions: cuda/common/activation_math.cuh (shared with the fused fp8 form in quant/quant.cu).
 *
 * Launched with ignis_launch (programmatic dependent launch on sm_90+, see cuda_common.cuh): the
 * kernel calls ignis_pdl_wait() before its first global access and ignis_pdl_launch_dependents()
 * once a thread has issued the loads of its first tile (the call only lets the next kernel start
 * launching, its own wait still covers this kernel's stores). */
#ifndef IGNIS_CUDA_ACTIVATION_GATED_CUH
#define IGNIS_CUDA_ACTIVATION_GATED_CUH

#include "cuda/common/activation_math.cuh"
#include "cuda/common/cuda_common.cuh"

enum ignis_gated_load {
  GATED_LOAD_PLAIN = 0,
  GATED_LOAD_READ_ONLY = 1,
  GATED_LOAD_STREAM = 2,
  GATED_LOAD_READ_ONLY_256B = 3,
  GATED_LOAD_EVICT_FIRST = 4
};
enum ignis_gated_store { GATED_STORE_PLAIN = 0, GATED_STORE_STREAM = 1, GATED_STORE_EVICT_FIRST = 2 };

/* The memory shape of a launch: threads per block, units per thread and tile, chunks per unit,
 * the load and store policies, the blocks per SM the registers must allow (__launch_bounds__'s
 * minimum: 2 for 1024 threads caps a thread at 32 registers, so two blocks fill an SM), and the
 * blocks per row group (0: one per column tile; k: at most k, each walking its tiles in turn, one
 * tile's loads in flight at a time). */
template <int THREADS, int UNITS, int WIDTH, int LOAD, int STORE, int MIN_BLOCKS = 1, int ROW_BLOCKS = 0>
struct gated_shape {
  static constexpr int threads = THREADS, units = UNITS, width = WIDTH, load = LOAD, store = STORE,
                       min_blocks = MIN_BLOCKS, row_blocks = ROW_BLOCKS;
  static_assert(THREADS >= 32 && THREADS <= 1024 && (THREADS & (THREADS - 1)) == 0, "power-of-two block");
  static_assert(WIDTH == 1 || WIDTH == 2 || WIDTH == 4, "1, 2 or 4 chunks per unit");
};

enum { GATED_MAX_GRID_Y = 65535 };

/* The L2 evict-first policy of the EVICT_FIRST loads and stores. */
__device__ __forceinline__ uint64_t gated_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

template <int LOAD> __device__ __forceinline__ uint4 gated_load_vec(const void *ptr, uint64_t policy) {
  uint4 v;
  if constexpr (LOAD == GATED_LOAD_PLAIN)
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  else if constexpr (LOAD == GATED_LOAD_READ_ONLY)
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  else if constexpr (LOAD == GATED_LOAD_STREAM)
    asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  else if constexpr (LOAD == GATED_LOAD_READ_ONLY_256B)
    asm volatile("ld.global.nc.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr));
  else
    asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(ptr), "l"(policy));
  return v;
}

template <int STORE> __device__ __forceinline__ void gated_store_vec(void *ptr, uint4 v, uint64_t policy) {
  if constexpr (STORE == GATED_STORE_PLAIN)
    asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  else if constexpr (STORE == GATED_STORE_STREAM)
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  else
    asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(ptr),
                 "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy)
                 : "memory");
}

/* A chunk as loaded, kept raw until it is used: a 16-byte vector (N = 16 / sizeof(T)), or one
 * element in the low bits of .x (N = 1). Raw, a 16-byte vector of f16/bf16 takes 4 registers
 * instead of 8 as f32. */
__device__ __forceinline__ uint32_t gated_element_bits(float x) {
  return __float_as_uint(x);
}
__device__ __forceinline__ uint32_t gated_element_bits(__half x) {
  return __half_as_ushort(x);
}
__device__ __forceinline__ uint32_t gated_element_bits(__nv_bfloat16 x) {
  return __bfloat16_as_ushort(x);
}

template <typename T, int N, int LOAD>
__device__ __forceinline__ uint4 gated_load_chunk(const T *ptr, uint64_t policy) {
  if constexpr (N == 1)
    return make_uint4(gated_element_bits(__ldcs(ptr)), 0, 0, 0);
  else
    return gated_load_vec<LOAD>(ptr, policy);
}

template <typename T, int N>
__device__ __forceinline__ void gated_chunk_to_floats(uint4 raw, float (&out)[N]) {
  if constexpr (N == 1) {
    float word[4 / sizeof(T)];
    ignis_unpack_word<T>(raw.x, word);
    out[0] = word[0];
  } else {
    ignis_raw_to_floats<T>(raw, out);
  }
}

template <typename T, int N, int STORE>
__device__ __forceinline__ void gated_store_chunk(T *ptr, const float (&y)[N], uint64_t policy) {
  if constexpr (N == 1)
    *ptr = ignis_from_float<T>(y[0]);
  else
    gated_store_vec<STORE>(ptr, ignis_floats_to_raw<T>(y), policy);
}

/* N: elements per chunk, 16 / sizeof(T) (vector path) or 1. */
template <typename T, int N, ignis_activation_kind KIND, typename S>
__global__ void __launch_bounds__(S::threads, S::min_blocks) gated_activation(ignis_activation_params p) {
  constexpr int W = N == 1 ? 1 : S::width;
  constexpr bool POLICY = N > 1 && (S::load == GATED_LOAD_EVICT_FIRST || S::store == GATED_STORE_EVICT_FIRST);
  const int64_t rows = p.num_rows_outer * p.num_rows_inner;
  const int64_t num_chunks = p.hidden / N;
  const int64_t unit_stride = (int64_t)blockDim.x * W; /* chunks between a thread's units */
  const int64_t tile = unit_stride * S::units;
  const int64_t num_tiles = (num_chunks + tile - 1) / tile;
  const uint64_t policy = POLICY ? gated_evict_first_policy() : 0;
  bool dependents_launched = false;
  ignis_pdl_wait();
  for (int64_t row = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; row < rows;
       row += (int64_t)gridDim.y * blockDim.y) {
    int64_t outer, inner;
    ignis_split_row(row, p.num_rows_inner, &outer, &inner);
    const T *gate = static_cast<const T *>(p.input) + ignis_row_offset(outer, inner, p.input_layout);
    const T *up = gate + p.hidden;
    T *out = static_cast<T *>(p.out) + ignis_row_offset(outer, inner, p.out_layout);
    for (int64_t t = blockIdx.x; t < num_tiles; t += gridDim.x) {
      const int64_t first = t * tile + (int64_t)threadIdx.x * W;
      uint4 gate_raw[S::units][W], up_raw[S::units][W];
#pragma unroll
      for (int i = 0; i < S::units; ++i)
#pragma unroll
        for (int w = 0; w < W; ++w) {
          const int64_t c = first + i * unit_stride + w;
          if (c < num_chunks) {
            gate_raw[i][w] = gated_load_chunk<T, N, S::load>(gate + c * N, policy);
            up_raw[i][w] = gated_load_chunk<T, N, S::load>(up + c * N, policy);
          }
        }
      if (!dependents_launched) {
        ignis_pdl_launch_dependents();
        dependents_launched = true;
      }
#pragma unroll
      for (int i = 0; i < S::units; ++i)
#pragma unroll
        for (int w = 0; w < W; ++w) {
          const int64_t c = first + i * unit_stride + w;
          if (c < num_chunks) {
            float a[N], b[N], y[N];
            gated_chunk_to_floats<T, N>(gate_raw[i][w], a);
            gated_chunk_to_floats<T, N>(up_raw[i][w], b);
#pragma unroll
            for (int k = 0; k < N; ++k)
              y[k] = ignis_activate<KIND, sizeof(T) == 4>(a[k]) * b[k];
            gated_store_chunk<T, N, S::store>(out + c * N, y, policy);
          }
        }
    }
  }
}

/* Launch shape S (N = 1: the scalar path) for p->kind. max_row_groups > 0 caps the grid's row
 * groups (a persistent grid whose blocks loop over the rest); 0 launches one block per row group. */
template <typename T, int N, typename S>
static cudaError_t ignis_launch_gated(const ignis_activation_params *p, cudaStream_t stream,
                                      int64_t max_row_groups) {
  constexpr int W = N == 1 ? 1 : S::width;
  const int64_t num_chunks = p->hidden / N;
  const int64_t per_row = (num_chunks + (int64_t)S::units * W - 1) / ((int64_t)S::units * W);
  int group = 1;
  while (group < per_row && group < S::threads)
    group <<= 1;
  const dim3 block(group, S::threads / group);
  const int64_t tile = (int64_t)group * S::units * W;
  int64_t tiles = (num_chunks + tile - 1) / tile;
  if (S::row_blocks > 0 && tiles > S::row_blocks)
    tiles = S::row_blocks;
  int64_t row_groups = (p->num_rows_outer * p->num_rows_inner + block.y - 1) / block.y;
  if (max_row_groups > 0 && row_groups > max_row_groups)
    row_groups = max_row_groups;
  const dim3 grid((unsigned)(tiles < INT32_MAX ? tiles : INT32_MAX),
                  (unsigned)(row_groups < GATED_MAX_GRID_Y ? row_groups : (int64_t)GATED_MAX_GRID_Y));
  switch (p->kind) {
  case IGNIS_ACT_SILU:
    return ignis_launch(gated_activation<T, N, IGNIS_ACT_SILU, S>, grid, block, 0, stream, *p);
  case IGNIS_ACT_GELU:
    return ignis_launch(gated_activation<T, N, IGNIS_ACT_GELU, S>, grid, block, 0, stream, *p);
  default: /* IGNIS_ACT_GELU_TANH */
    return ignis_launch(gated_activation<T, N, IGNIS_ACT_GELU_TANH, S>, grid, block, 0, stream, *p);
  }
}

#endif
