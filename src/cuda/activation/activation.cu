/* CUDA backend of the gated activations (include/ignis/activation.h): out[h] = act(a[h]) * b[h] with
 * a = input[..., :H] and b = input[..., H:], in f32 (the math of src/cpu/activation.c). The kernel
 * and its math live in gated.cuh, templated over the memory shape of a launch (threads per block,
 * 16-byte loads in flight per thread, load and store cache policies); this file picks the shape.
 *
 * Vector path when H is a multiple of 16 / sizeof(T) and every input and output row starts 16-byte
 * aligned (checked on the host): 16-byte loads and stores. Otherwise the same kernel with one
 * element per chunk (SMALL_SHAPE's rows, element loads).
 *
 * Shapes (bench/micro/act_variants.cu times these and the alternatives on one GPU):
 *   SMALL_SHAPE  256 threads, 4 units of one 16-byte chunk per thread, streaming loads, plain stores:
 *                launches of fewer than LARGE_ELEMENTS outputs (decode-sized batches, graph-replayed,
 *                latency-bound) and the scalar path; the kernel these shapes have always had.
 *   LARGE_SHAPE  256 threads, one 16-byte chunk of a and of b per thread and tile, one block per row
 *                walking the row's tiles in turn, read-only loads, plain stores, at most 40
 *                registers (6 blocks, 48 warps per SM where SMALL_SHAPE's 73 registers allow 3
 *                blocks, 24 warps): the shape FlashInfer 0.7.2 streams at 4.3 TB/s (256 threads,
 *                a loop over the row, 38-39 registers).
 * Every shape computes the same f32 math per element, so both write the same bits. */
#include "cuda/activation/gated.cuh"

using SMALL_SHAPE = gated_shape<256, 4, 1, GATED_LOAD_STREAM, GATED_STORE_PLAIN>;
using LARGE_SHAPE = gated_shape<256, 1, 1, GATED_LOAD_READ_ONLY, GATED_STORE_PLAIN, 6, 1>;
enum : int64_t { LARGE_ELEMENTS = (int64_t)1 << 20 }; /* outputs (rows x H) from which LARGE_SHAPE runs */

template <typename T>
static cudaError_t launch_for_dtype(const ignis_activation_params *p, cudaStream_t stream) {
  constexpr int VEC = ignis_vec<T>::size;
  const bool vector =
      p->hidden % VEC == 0 &&
      ignis_rows_aligned16(p->input, p->input_layout, p->num_rows_outer, p->num_rows_inner, sizeof(T)) &&
      ignis_rows_aligned16(p->out, p->out_layout, p->num_rows_outer, p->num_rows_inner, sizeof(T));
  if (!vector)
    return ignis_launch_gated<T, 1, SMALL_SHAPE>(p, stream, 0);
  if (p->num_rows_outer * p->num_rows_inner * p->hidden >= LARGE_ELEMENTS)
    return ignis_launch_gated<T, VEC, LARGE_SHAPE>(p, stream, 0);
  return ignis_launch_gated<T, VEC, SMALL_SHAPE>(p, stream, 0);
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
