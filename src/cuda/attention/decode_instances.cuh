/* The decode kernel instances, listed once. DECODE_INSTANCES(X, HEAD_DIM) has a line per q dtype,
 * K/V kind and RoPE of one head dim; each line becomes an entry of that head dim's table, which
 * compiles the instance's m16 kernel and its transposed kernel where that takes the head dim
 * (decode_attention_kernel), its page kernel where the page kernel takes it, and the merge kernel of
 * its q dtype and head dim. The tables are defined by decode_hd64.cu, decode_hd128.cu,
 * decode_hd256.cu and decode_hd512.cu, a translation unit per head dim so that they compile in
 * parallel, each only when IGNIS_HEAD_DIMS names its head dim; decode.cu selects from them. */
#ifndef IGNIS_CUDA_DECODE_INSTANCES_CUH
#define IGNIS_CUDA_DECODE_INSTANCES_CUH

#include <type_traits>

#include "cuda/attention/decode_attention.cuh"
#include "cuda/attention/decode_page.cuh"

#define DECODE_INSTANCES(X, HEAD_DIM)                                                                        \
  X(__half, KV_F16, HEAD_DIM, false)                                                                         \
  X(__half, KV_F16, HEAD_DIM, true)                                                                          \
  X(__half, KV_E4M3, HEAD_DIM, false)                                                                        \
  X(__half, KV_E4M3, HEAD_DIM, true)                                                                         \
  X(__half, KV_E5M2, HEAD_DIM, false)                                                                        \
  X(__half, KV_E5M2, HEAD_DIM, true)                                                                         \
  X(__nv_bfloat16, KV_BF16, HEAD_DIM, false)                                                                 \
  X(__nv_bfloat16, KV_BF16, HEAD_DIM, true)                                                                  \
  X(__nv_bfloat16, KV_E4M3, HEAD_DIM, false)                                                                 \
  X(__nv_bfloat16, KV_E4M3, HEAD_DIM, true)                                                                  \
  X(__nv_bfloat16, KV_E5M2, HEAD_DIM, false)                                                                 \
  X(__nv_bfloat16, KV_E5M2, HEAD_DIM, true)

#define DECODE_COUNT_ONE(QT, KIND, HEAD_DIM, ROPE) +1
enum { DECODE_INSTANCES_PER_HEAD_DIM = 0 DECODE_INSTANCES(DECODE_COUNT_ONE, 0) };

/* The kernel families (m16, transposed, page); decode.cu chooses one per launch. */
enum decode_family { DECODE_MMA, DECODE_TRANSPOSED, DECODE_PAGE };

typedef void (*decode_kernel_fn)(ignis_decode_params, decode_config);

/* A family's kernel of an instance and its launch shape. */
struct decode_kernel {
  decode_kernel_fn attention;
  decode_kernel_fn merge; /* decode_merge_kernel of the instance's q dtype and head dim */
  size_t smem;            /* dynamic shared memory of `attention` */
  int32_t threads;
  int32_t heads_per_block; /* KV heads a block of `attention` takes */
};

struct decode_instance {
  ignis_dtype dtype; /* of q and out */
  int32_t kv_kind;
  int32_t head_dim;
  bool rope; /* ROPE_LLAMA */
  /* Fills k with the family's kernel (DECODE_PAGE only where decode_page_takes, DECODE_TRANSPOSED
   * only where decode_transposed_takes: the m16 kernel otherwise) and allows it its
   * dynamic shared memory on the current device; with blocks_per_sm, gives its resident blocks per
   * SM there instead (from the runtime once per device; 1 when the query fails). */
  cudaError_t (*kernel)(decode_family family, decode_kernel *k, int *blocks_per_sm);
};

extern const decode_instance decode_instances_hd64[DECODE_INSTANCES_PER_HEAD_DIM];
extern const decode_instance decode_instances_hd128[DECODE_INSTANCES_PER_HEAD_DIM];
extern const decode_instance decode_instances_hd256[DECODE_INSTANCES_PER_HEAD_DIM];
extern const decode_instance decode_instances_hd512[DECODE_INSTANCES_PER_HEAD_DIM];

/* Whether the transposed kernel has instances of a head dim: not 512, whose Q and O fragments do not
 * fit a warp (the m16 kernel splits the head dim across its warps there: decode_tile). */
constexpr bool decode_transposed_takes(int64_t head_dim) {
  return head_dim <= 256;
}

template <auto KERNEL>
static cudaError_t decode_kernel_set(size_t smem, int threads, int heads_per_block, decode_kernel *k,
                                     int *blocks_per_sm) {
  k->attention = KERNEL;
  k->smem = smem;
  k->threads = threads;
  k->heads_per_block = heads_per_block;
  if (blocks_per_sm != nullptr) {
    *blocks_per_sm = ignis_resident_blocks<KERNEL>(threads, smem);
    return cudaSuccess;
  }
  return ignis_allow_dynamic_smem<KERNEL>(smem);
}

template <typename QT, int KIND, int HEAD_DIM, bool ROPE>
static cudaError_t decode_kernel_of(decode_family family, decode_kernel *k, int *blocks_per_sm) {
  constexpr int KV_BYTES = (KIND == KV_E4M3 || KIND == KV_E5M2) ? 1 : 2;
  k->merge = decode_merge_kernel<QT, HEAD_DIM>;
  if constexpr (decode_page_takes(KIND, HEAD_DIM))
    if (family == DECODE_PAGE)
      return decode_kernel_set<decode_page_kernel<QT, KIND, ROPE>>(PAGE_SMEM_BYTES, PAGE_THREADS, PAGE_HEADS,
                                                                   k, blocks_per_sm);
  if constexpr (decode_transposed_takes(HEAD_DIM))
    if (family == DECODE_TRANSPOSED)
      return decode_kernel_set<decode_attention_kernel<QT, KIND, HEAD_DIM, ROPE, true>>(
          decode_tile<HEAD_DIM, KV_BYTES, true>::SMEM_BYTES, DECODE_THREADS, 1, k, blocks_per_sm);
  return decode_kernel_set<decode_attention_kernel<QT, KIND, HEAD_DIM, ROPE, false>>(
      decode_tile<HEAD_DIM, KV_BYTES, false>::SMEM_BYTES, DECODE_THREADS, 1, k, blocks_per_sm);
}

#define DECODE_INSTANCE_ENTRY(QT, KIND, HEAD_DIM, ROPE)                                                      \
  {std::is_same<QT, __half>::value ? IGNIS_F16 : IGNIS_BF16, KIND, HEAD_DIM, ROPE,                           \
   decode_kernel_of<QT, KIND, HEAD_DIM, ROPE>},

/* The definition of head dim HEAD_DIM's table (its translation unit). */
#define DECODE_INSTANCE_TABLE(HEAD_DIM)                                                                      \
  const decode_instance decode_instances_hd##HEAD_DIM[DECODE_INSTANCES_PER_HEAD_DIM] = {                     \
      DECODE_INSTANCES(DECODE_INSTANCE_ENTRY, HEAD_DIM)}

#endif
