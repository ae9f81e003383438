/* The prefill kernel instances of head dims (512, 512) (prefill_instances.cuh lists them), a
 * translation unit of their own so that the head dims compile in parallel; compiled when
 * IGNIS_HEAD_DIMS has 512. Only the tile kernel takes them (16-row tiles, its warps splitting O's
 * dims: prefill_shape); the wgmma kernel is head dim 128 only. */
#include "cuda/attention/prefill_instances.cuh"

#ifdef IGNIS_WITH_HEAD_DIM_512
PREFILL_INSTANCE_TABLE(512, 512);
#endif
