/* ignis: the kernel library of an LLM serving step. Include this one header for the whole C API.
 * Each included header documents its functions where they are declared. */
#ifndef IGNIS_IGNIS_H
#define IGNIS_IGNIS_H

#include "ignis/core.h"
#include "ignis/activation.h"
#include "ignis/comm.h"
#include "ignis/decode.h"
#include "ignis/gemm.h"
#include "ignis/merge_state.h"
#include "ignis/mla.h"
#include "ignis/moe_routing.h"
#include "ignis/moe.h"
#include "ignis/norm.h"
#include "ignis/paged_kv.h"
#include "ignis/prefill.h"
#include "ignis/quant.h"
#include "ignis/rope.h"
#include "ignis/sampling.h"
#include "ignis/topk.h"

#endif
