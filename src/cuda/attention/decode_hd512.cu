/* The decode kernel instances of head dim 512 (decode_instances.cuh lists them), a translation unit
 * of their own so that the head dims compile in parallel; compiled when IGNIS_HEAD_DIMS has 512.
 * Only the m16 kernel takes this head dim (its 4 warps split it: decode_tile). */
#include "cuda/attention/decode_instances.cuh"

#ifdef IGNIS_WITH_HEAD_DIM_512
DECODE_INSTANCE_TABLE(512);
#endif
