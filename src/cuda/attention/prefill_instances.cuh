/* The prefill kernel instances, listed once. PREFILL_INSTANCES(X, DQK, DVO) has a line per q dtype,
 * K/V kind and option set (fast: causal or no mask; general: every option) of one head dim pair;
 * each line becomes an entry of that pair's table, which compiles the instance's
 * prefill_attention_kernel, prefill_wgmma_kernel where the wgmma kernel takes the instance, and the
 * merge kernel of its q dtype and tile. The tables are defined by prefill_hd64.cu (64, 64),
 * prefill_hd128.cu ((128, 128) and (192, 128)), prefill_hd256.cu (256, 256) and prefill_hd512.cu
 * (512, 512), a translation unit per head dim so that they compile in parallel, each only when
 * IGNIS_HEAD_DIMS names its head dim; prefill.cu selects from them. */
#ifndef IGNIS_CUDA_PREFILL_INSTANCES_CUH
#define IGNIS_CUDA_PREFILL_INSTANCES_CUH

#include <type_traits>

#include "cuda/attention/prefill_kernel.cuh"
#include "cuda/attention/prefill_wgmma.cuh"

#define PREFILL_INSTANCES(X, DQK, DVO)                                                                       \
  X(__half, KV_F16, DQK, DVO, false)                                                                         \
  X(__half, KV_F16, DQK, DVO, true)                                                                          \
  X(__half, KV_E4M3, DQK, DVO, false)                                                                        \
  X(__half, KV_E4M3, DQK, DVO, true)                                                                         \
  X(__half, KV_E5M2, DQK, DVO, false)                                                                        \
  X(__half, KV_E5M2, DQK, DVO, true)                                                                         \
  X(__nv_bfloat16, KV_BF16, DQK, DVO, false)                                                                 \
  X(__nv_bfloat16, KV_BF16, DQK, DVO, true)                                                                  \
  X(__nv_bfloat16, KV_E4M3, DQK, DVO, false)                                                                 \
  X(__nv_bfloat16, KV_E4M3, DQK, DVO, true)                                                                  \
  X(__nv_bfloat16, KV_E5M2, DQK, DVO, false)                                                                 \
  X(__nv_bfloat16, KV_E5M2, DQK, DVO, true)

#define PREFILL_COUNT_ONE(QT, KIND, DQK, DVO, GENERAL) +1
enum { PREFILL_INSTANCES_PER_HEAD_DIMS = 0 PREFILL_INSTANCES(PREFILL_COUNT_ONE, 0, 0) };

typedef void (*prefill_kernel_fn)(ignis_prefill_params, prefill_config);
typedef void (*prefill_wgmma_fn)(ignis_prefill_params, prefill_config, prefill_kv_maps);

/* An attention kernel of an instance and its launch shape: the tile kernel (attention) or a form
 * of the wgmma kernel (wgmma), the other NULL. */
struct prefill_kernel {
  prefill_kernel_fn attention;
  prefill_wgmma_fn wgmma;
  size_t smem; /* dynamic shared memory */
  int32_t threads;
};

struct prefill_instance {
  ignis_dtype dtype; /* of q and out */
  int32_t kv_kind;
  int32_t head_dim_qk, head_dim_vo;
  bool general;            /* custom masks, windows, soft cap, ALiBi, ROPE_LLAMA */
  bool wgmma;              /* prefill_wgmma_kernel takes it */
  int32_t rows;            /* packed query rows of a tile (the plan's q_tile_rows) */
  prefill_kernel_fn merge; /* prefill_merge_kernel of its q dtype and tile */
  /* Fills k with a form of prefill_wgmma_kernel (wgmma 1 plain, 2 ping-pong, 3 TMA, 4 TMA and
   * ping-pong; only where `wgmma` above) or prefill_attention_kernel (wgmma 0) and allows it its
   * dynamic shared memory on the current device. */
  cudaError_t (*kernel)(int wgmma, prefill_kernel *k);
};

extern const prefill_instance prefill_instances_64_64[PREFILL_INSTANCES_PER_HEAD_DIMS];
extern const prefill_instance prefill_instances_128_128[PREFILL_INSTANCES_PER_HEAD_DIMS];
extern const prefill_instance prefill_instances_192_128[PREFILL_INSTANCES_PER_HEAD_DIMS];
extern const prefill_instance prefill_instances_256_256[PREFILL_INSTANCES_PER_HEAD_DIMS];
extern const prefill_instance prefill_instances_512_512[PREFILL_INSTANCES_PER_HEAD_DIMS];

/* Whether prefill_wgmma_kernel has an instance for these (the rest of its shape is prefill.cu's). */
constexpr bool prefill_wgmma_takes(int kv_kind, int dqk, int dvo, bool general) {
  return !general && (kv_kind == KV_F16 || kv_kind == KV_BF16) && dqk == WGMMA_D && dvo == WGMMA_D;
}

/* k->wgmma = that form of prefill_wgmma_kernel, allowed its dynamic shared memory (k->smem). */
template <typename QT, bool PINGPONG, bool TMA> static cudaError_t prefill_wgmma_form(prefill_kernel *k) {
  k->wgmma = prefill_wgmma_kernel<QT, PINGPONG, TMA>;
  return ignis_allow_dynamic_smem<prefill_wgmma_kernel<QT, PINGPONG, TMA>>(k->smem);
}

template <typename QT, int KIND, int DQK, int DVO, bool GENERAL>
static cudaError_t prefill_kernel_of(int wgmma, prefill_kernel *k) {
  typedef prefill_shape<DQK, DVO, (KIND == KV_E4M3 || KIND == KV_E5M2) ? 1 : 2> sh;
  if constexpr (prefill_wgmma_takes(KIND, DQK, DVO, GENERAL))
    if (wgmma != 0) {
      k->attention = nullptr;
      k->smem = WGMMA_SMEM_BYTES;
      k->threads = WGMMA_THREADS;
      return wgmma == 2   ? prefill_wgmma_form<QT, true, false>(k)
             : wgmma == 3 ? prefill_wgmma_form<QT, false, true>(k)
             : wgmma == 4 ? prefill_wgmma_form<QT, true, true>(k)
                          : prefill_wgmma_form<QT, false, false>(k);
    }
  k->wgmma = nullptr;
  k->attention = prefill_attention_kernel<QT, KIND, DQK, DVO, GENERAL>;
  k->smem = sh::SMEM_BYTES;
  k->threads = PREFILL_THREADS;
  return ignis_allow_dynamic_smem<prefill_attention_kernel<QT, KIND, DQK, DVO, GENERAL>>(k->smem);
}

template <typename QT, int KIND, int DQK, int DVO, bool GENERAL>
constexpr prefill_instance prefill_instance_of() {
  typedef prefill_shape<DQK, DVO, (KIND == KV_E4M3 || KIND == KV_E5M2) ? 1 : 2> sh;
  return {std::is_same<QT, __half>::value ? IGNIS_F16 : IGNIS_BF16,
          KIND,
          DQK,
          DVO,
          GENERAL,
          prefill_wgmma_takes(KIND, DQK, DVO, GENERAL),
          sh::ROWS,
          prefill_merge_kernel<QT, DVO, sh::ROWS>,
          prefill_kernel_of<QT, KIND, DQK, DVO, GENERAL>};
}

#define PREFILL_INSTANCE_ENTRY(QT, KIND, DQK, DVO, GENERAL)                                                  \
  prefill_instance_of<QT, KIND, DQK, DVO, GENERAL>(),

/* The definition of the table of head dims (DQK, DVO) (its translation unit). */
#define PREFILL_INSTANCE_TABLE(DQK, DVO)                                                                     \
  const prefill_instance prefill_instances_##DQK##_##DVO[PREFILL_INSTANCES_PER_HEAD_DIMS] = {                \
      PREFILL_INSTANCES(PREFILL_INSTANCE_ENTRY, DQK, DVO)}

#endif
