/* The prefill kernel instances of head dims (128, 128) and (192, 128) (prefill_instances.cuh lists
 * them), a translation unit of their own so that the head dims compile in parallel; compiled when
 * IGNIS_HEAD_DIMS has 128. */
#include "cuda/attention/prefill_instances.cuh"

#ifdef IGNIS_WITH_HEAD_DIM_128
PREFILL_INSTANCE_TABLE(128, 128);
PREFILL_INSTANCE_TABLE(192, 128);
#endif
