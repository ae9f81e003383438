/* The prefill kernel instances of head dims (256, 256) (prefill_instances.cuh lists them), a
 * translation unit of their own so that the head dims compile in parallel; compiled when
 * IGNIS_HEAD_DIMS has 256. */
#include "cuda/attention/prefill_instances.cuh"

#ifdef IGNIS_WITH_HEAD_DIM_256
PREFILL_INSTANCE_TABLE(256, 256);
#endif
