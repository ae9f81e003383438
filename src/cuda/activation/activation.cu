/* CUDA backend of the gated activations (include/ignis/activation.h): out[h] = act(a[h]) * b[h] with
 * a = input[..., :H] and b = input[..., H:], in f32 (the math of src/cpu/activation.c).
 *
 * Rows to threads: the leading dimensions form a 2-level row index (core/params.h). A row of H
 * outputs is cut into chunks (16-byte vectors, or single elements on the scalar path), and a
 * block of (G, R) threads, G * R = 256, covers R rows times one column tile of G * 4 chunks:
 * thread x takes chunks x, x + G, x + 2G, x + 3G of the tile, so a warp's loads and stores are
 * contiguous and each thread has 8 loads (4 of a, 4 of b) in flight before it computes. G is the
 * smallest power of two for which one tile spans the row, at most 256; shorter rows share a block
 * (R = 256 / G). blockIdx.x steps over column tiles, blockIdx.y over groups of R rows, both in
 * grid-stride loops.
 *
 * Vector path when H is a multiple of 16 / sizeof(T) and every input and output row starts 16-byte
 * aligned (checked on the host): 16-byte streaming loads and 16-byte stores. Otherwise the same
 * kernel with one element per chunk.
 *
 * Functions: cuda/common/activation_math.cuh (shared with the fused fp8 form in quant/quant.cu).
 *
 * Launched with ignis_launch (programmatic dependent launch on sm_90+, see cuda_common.cuh): the
 * kernel calls ignis_pdl_wait() before its first global access and ignis_pdl_launch_dependents()
 * once a thread has issued the loads of its first tile (almost every thread has only one; the call
 * only lets the next kernel start launching, its own wait still covers this kernel's stores). */
#include "cuda/common/activation_math.cuh"
#include "cuda/common/cuda_common.cuh"

enum { BLOCK_THREADS = 256, CHUNKS_PER_THREAD = 4, MAX_GRID_Y = 65535 };

/* A chunk as loaded, kept raw until it is used: a 16-byte vector (N = 16 / sizeof(T)), or one
 * element in the low bits of .x (N = 1). Raw, a 16-byte vector of f16/bf16 takes 4 registers
 * instead of 8 as f32. */
__device__ __forceinline__ uint32_t element_bits(float x) {
  return __float_as_uint(x);
}
__device__ __forceinline__ uint32_t element_bits(__half x) {
  return __half_as_ushort(x);
}
__device__ __forceinline__ uint32_t element_bits(__nv_bfloat16 x) {
  return __bfloat16_as_ushort(x);
}

template <typename T, int N> __device__ __forceinline__ uint4 load_chunk(const T *ptr) {
  if constexpr (N == 1)
    return make_uint4(element_bits(__ldcs(ptr)), 0, 0, 0);
  else
    return __ldcs(reinterpret_cast<const uint4 *>(ptr));
}

template <typename T, int N> __device__ __forceinline__ void chunk_to_floats(uint4 raw, float (&out)[N]) {
  if constexpr (N == 1) {
    float word[4 / sizeof(T)];
    ignis_unpack_word<T>(raw.x, word);
    out[0] = word[0];
  } else {
    ignis_raw_to_floats<T>(raw, out);
  }
}

/* N: elements per chunk, 16 / sizeof(T) (vector path) or 1. */
template <typename T, int N, ignis_activation_kind KIND>
__global__ void __launch_bounds__(BLOCK_THREADS) gated_activation(ignis_activation_params p) {
  const int64_t rows = p.num_rows_outer * p.num_rows_inner;
  const int64_t num_chunks = p.hidden / N;
  const int64_t tile = (int64_t)blockDim.x * CHUNKS_PER_THREAD;
  const int64_t num_tiles = (num_chunks + tile - 1) / tile;
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
      const int64_t first = t * tile + threadIdx.x;
      uint4 gate_raw[CHUNKS_PER_THREAD], up_raw[CHUNKS_PER_THREAD];
#pragma unroll
      for (int i = 0; i < CHUNKS_PER_THREAD; ++i) {
        const int64_t c = first + (int64_t)i * blockDim.x;
        if (c < num_chunks) {
          gate_raw[i] = load_chunk<T, N>(gate + c * N);
          up_raw[i] = load_chunk<T, N>(up + c * N);
        }
      }
      if (!dependents_launched) {
        ignis_pdl_launch_dependents();
        dependents_launched = true;
      }
#pragma unroll
      for (int i = 0; i < CHUNKS_PER_THREAD; ++i) {
        const int64_t c = first + (int64_t)i * blockDim.x;
        if (c < num_chunks) {
          float a[N], b[N], y[N];
          chunk_to_floats<T, N>(gate_raw[i], a);
          chunk_to_floats<T, N>(up_raw[i], b);
#pragma unroll
          for (int k = 0; k < N; ++k)
            y[k] = ignis_activate<KIND, sizeof(T) == 4>(a[k]) * b[k];
          ignis_store_floats(out + c * N, y);
        }
      }
    }
  }
}

template <typename T, int N>
static cudaError_t launch_gated(const ignis_activation_params *p, cudaStream_t stream) {
  const int64_t num_chunks = p->hidden / N;
  const int64_t per_row = (num_chunks + CHUNKS_PER_THREAD - 1) / CHUNKS_PER_THREAD;
  int group = 1;
  while (group < per_row && group < BLOCK_THREADS)
    group <<= 1;
  const dim3 block(group, BLOCK_THREADS / group);
  const int64_t tiles =
      (num_chunks + (int64_t)group * CHUNKS_PER_THREAD - 1) / ((int64_t)group * CHUNKS_PER_THREAD);
  const int64_t row_groups = (p->num_rows_outer * p->num_rows_inner + block.y - 1) / block.y;
  const dim3 grid((unsigned)(tiles < INT32_MAX ? tiles : INT32_MAX),
                  (unsigned)(row_groups < MAX_GRID_Y ? row_groups : (int64_t)MAX_GRID_Y));
  switch (p->kind) {
  case IGNIS_ACT_SILU:
    return ignis_launch(gated_activation<T, N, IGNIS_ACT_SILU>, grid, block, 0, stream, *p);
  case IGNIS_ACT_GELU:
    return ignis_launch(gated_activation<T, N, IGNIS_ACT_GELU>, grid, block, 0, stream, *p);
  default: /* IGNIS_ACT_GELU_TANH */
    return ignis_launch(gated_activation<T, N, IGNIS_ACT_GELU_TANH>, grid, block, 0, stream, *p);
  }
}

template <typename T> static cudaError_t launch_for_dtype(const ignis_activation_params *p, cudaStream_t stream) {
  constexpr int VEC = ignis_vec<T>::size;
  const bool vector =
      p->hidden % VEC == 0 &&
      ignis_rows_aligned16(p->input, p->input_layout, p->num_rows_outer, p->num_rows_inner, sizeof(T)) &&
      ignis_rows_aligned16(p->out, p->out_layout, p->num_rows_outer, p->num_rows_inner, sizeof(T));
  return vector ? launch_gated<T, VEC>(p, stream) : launch_gated<T, 1>(p, stream);
}

extern "C" ignis_status ignis_cuda_activation(const ignis_activation_params *params, int32_t device,
                                              void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  switch (params->dtype) {
  case IGNIS_F32:
    err = launch_for_dtype<float>(params, s);
    break;
  case IGNIS_F16:
    err = launch_for_dtype<__half>(params, s);
    break;
  case IGNIS_BF16:
    err = launch_for_dtype<__nv_bfloat16>(params, s);
    break;
  default:
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_cuda_activation: dtype %s reached the CUDA backend",
                           ignis_dtype_name(params->dtype));
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis_cuda_activation: kernel launch failed: %s",
                           cudaGetErrorString(err));
  }
  return ignis_check_launch("ignis_cuda_activation");
}
