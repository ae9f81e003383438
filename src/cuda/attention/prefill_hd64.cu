/* The prefill kernel instances of head dims (64, 64) (prefill_instances.cuh lists them), a
 * translation unit of their own so that the head dims compile in parallel; compiled when
 * IGNIS_HEAD_DIMS has 64. */
#include "cuda/attention/prefill_instances.cuh"

#ifdef IGNIS_WITH_HEAD_DIM_64
PREFILL_INSTANCE_TABLE(64, 64);
#endif
