/* The decode kernel instances of head dim 64 (decode_instances.cuh lists them), a translation unit
 * of their own so that the head dims compile in parallel; compiled when IGNIS_HEAD_DIMS has 64. */
#include "cuda/attention/decode_instances.cuh"

#ifdef IGNIS_WITH_HEAD_DIM_64
DECODE_INSTANCE_TABLE(64);
#endif
