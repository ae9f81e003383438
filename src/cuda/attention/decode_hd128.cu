/* The decode kernel instances of head dim 128 (decode_instances.cuh lists them), a translation unit
 * of their own so that the head dims compile in parallel; compiled when IGNIS_HEAD_DIMS has 128. */
#include "cuda/attention/decode_instances.cuh"

#ifdef IGNIS_WITH_HEAD_DIM_128
DECODE_INSTANCE_TABLE(128);
#endif
