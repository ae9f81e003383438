/* CUDA backend of MoE routing (include/ignis/moe_routing.h): one warp per token, everything in
 * registers, one launch, no host work past the launch (safe in CUDA-graph capture). Ids and
 * weights are the CPU backend's bit for bit (src/cpu/moe_routing.c adds its sums in this kernel's
 * warp order; the shared rules are in core/moe_routing_math.h).
 *
 *   load     lane l owns experts l*V .. l*V + V - 1 (V = the power of two with 32 V >= E, at most
 *            16): its logits are one contiguous piece of the row, read with 16-byte loads where the
 *            row allows it, so the warp reads the row once, coalesced. Each expert gets a rank
 *            (the order of its key) and a value (the logit, or sigmoid(logit) for the biased
 *            methods); padding past E gets rank 0, which nothing real ties.
 *   groups   (DEEPSEEK_V3 with n_group > 1) each group's two largest ranks: when a group covers a
 *            power-of-two run of whole lanes (DeepSeek-V3: 32 experts, 4 lanes of 8) by a
 *            butterfly of shuffles within the run, else through shared memory, one lane per group.
 *            Lane g then holds group g's rank; topk_group rounds of a warp max (redux.sync on the
 *            rank, then on the lowest index among the maxima) pick the groups kept, and the ranks
 *            outside them are cleared.
 *   top-k    top_k rounds of the same warp max over each lane's best rank: the winner's expert id
 *            and value go to lane j of round j; the owning lane clears that rank and rescans its V.
 *   weights  lane j < top_k turns its value into its term; the method's sum is a warp sum (of the
 *            k terms, or for DEFAULT of every expert's exp(v - top)); lane j writes id and weight.
 * Blocks of 4 warps (4 tokens); the 8 KB of shared memory serve only the general group path. */
#include "core/moe_routing_math.h"
#include "cuda/common/cuda_common.cuh"

namespace {

constexpr int WARPS = 4;
constexpr unsigned FULL = 0xffffffffu;

/* One launch: the params and what the launcher derived from them for the chosen V. */
struct route_launch {
  ignis_moe_routing_params p;
  int vector_loads; /* every lane's logits start 16-byte aligned (V * sizeof(T) a multiple of 16) */
  int group_lanes;  /* lanes per group when groups are aligned power-of-two runs of whole lanes; 0 else */
};

/* The logits of experts first .. first + V - 1 (0 past E). */
template <typename T, int V>
__device__ __forceinline__ void load_logits(const T *row, int first, int experts, int vector_loads,
                                            float (&x)[V]) {
  if constexpr (V * sizeof(T) % 16 == 0) {
    if (vector_loads && first + V <= experts) {
      ignis_load_floats<IGNIS_CACHE_STREAM, T, V>(row + first, x);
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < V; ++i)
    x[i] = first + i < experts ? ignis_to_float(row[first + i]) : 0.0f;
}

template <typename B, int V>
__device__ __forceinline__ void load_bias_as(const B *bias, int first, int experts, float (&b)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i)
    b[i] = first + i < experts ? ignis_to_float(bias[first + i]) : 0.0f;
}

/* The bias of experts first .. first + V - 1 (0 without a bias, and past E). */
template <int V>
__device__ __forceinline__ void load_bias(const ignis_moe_routing_params &p, int first, float (&b)[V]) {
  if (!p.bias) {
#pragma unroll
    for (int i = 0; i < V; ++i)
      b[i] = 0.0f;
  } else if (p.bias_dtype == IGNIS_BF16) {
    load_bias_as<__nv_bfloat16, V>(static_cast<const __nv_bfloat16 *>(p.bias), first, p.num_experts, b);
  } else if (p.bias_dtype == IGNIS_F16) {
    load_bias_as<__half, V>(static_cast<const __half *>(p.bias), first, p.num_experts, b);
  } else {
    load_bias_as<float, V>(static_cast<const float *>(p.bias), first, p.num_experts, b);
  }
}

/* Insert r into the pair top >= second. */
__device__ __forceinline__ void keep_two(uint32_t r, uint32_t &top, uint32_t &second) {
  second = max(second, min(top, r));
  top = max(top, r);
}

/* The lane's largest rank (the lowest i among equals), its slot and its value. */
template <int V>
__device__ __forceinline__ void lane_best(const uint32_t (&rank)[V], const float (&value)[V], uint32_t &best,
                                          int &slot, float &best_value) {
  best = rank[0];
  slot = 0;
  best_value = value[0];
#pragma unroll
  for (int i = 1; i < V; ++i)
    if (rank[i] > best) {
      best = rank[i];
      slot = i;
      best_value = value[i];
    }
}

/* Lane g (< n_group) gets group g's rank, the other lanes 0. */
template <int V>
__device__ __forceinline__ uint32_t group_ranks(const route_launch &l, int lane, const uint32_t (&rank)[V],
                                                uint32_t *warp_ranks) {
  const ignis_moe_routing_params &p = l.p;
  const int per_group = p.num_experts / p.n_group, first = lane * V;
  uint32_t mine = IGNIS_ROUTING_RANK_NONE;
  if (l.group_lanes > 0) {
    uint32_t top = IGNIS_ROUTING_RANK_NONE, second = IGNIS_ROUTING_RANK_NONE;
#pragma unroll
    for (int i = 0; i < V; ++i)
      keep_two(rank[i], top, second);
    for (int offset = l.group_lanes >> 1; offset > 0; offset >>= 1) {
      const uint32_t other_top = __shfl_xor_sync(FULL, top, offset);
      const uint32_t other_second = __shfl_xor_sync(FULL, second, offset);
      second = max(max(second, other_second), min(top, other_top));
      top = max(top, other_top);
    }
    const uint32_t own = ignis_routing_group_rank(top, second, per_group == 1);
    const uint32_t of_lane_group = __shfl_sync(FULL, own, (lane * l.group_lanes) & 31);
    if (lane < p.n_group)
      mine = of_lane_group;
    return mine;
  }
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (first + i < p.num_experts)
      warp_ranks[first + i] = rank[i];
  __syncwarp();
  if (lane < p.n_group) {
    uint32_t top = IGNIS_ROUTING_RANK_NONE, second = IGNIS_ROUTING_RANK_NONE;
    for (int e = lane * per_group; e < (lane + 1) * per_group; ++e)
      keep_two(warp_ranks[e], top, second);
    mine = ignis_routing_group_rank(top, second, per_group == 1);
  }
  return mine;
}

/* Keep the topk_group best groups: clear the ranks of every expert outside them. */
template <int V>
__device__ __forceinline__ void keep_best_groups(const route_launch &l, int lane, uint32_t (&rank)[V],
                                                 uint32_t *warp_ranks) {
  const ignis_moe_routing_params &p = l.p;
  uint32_t candidate = group_ranks<V>(l, lane, rank, warp_ranks), kept = 0;
  for (int j = 0; j < p.topk_group; ++j) {
    const uint32_t best = __reduce_max_sync(FULL, candidate);
    const uint32_t g = __reduce_min_sync(FULL, candidate == best ? (uint32_t)lane : 32u);
    kept |= 1u << g;
    if ((uint32_t)lane == g)
      candidate = IGNIS_ROUTING_RANK_NONE;
  }
  const int per_group = p.num_experts / p.n_group, first = lane * V;
  int g = first / per_group, within = first - g * per_group;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    if (g >= 32 || !((kept >> g) & 1u))
      rank[i] = IGNIS_ROUTING_RANK_NONE;
    if (++within == per_group) {
      ++g;
      within = 0;
    }
  }
}

__device__ __forceinline__ void store_weight(void *weights, ignis_dtype dtype, int64_t at, float w) {
  switch (dtype) {
  case IGNIS_BF16:
    static_cast<__nv_bfloat16 *>(weights)[at] = __float2bfloat16_rn(w);
    break;
  case IGNIS_F16:
    static_cast<__half *>(weights)[at] = __float2half_rn(w);
    break;
  default:
    static_cast<float *>(weights)[at] = w;
    break;
  }
}

template <typename T, int V> __global__ void __launch_bounds__(WARPS * 32) route_tokens(route_launch l) {
  __shared__ uint32_t warp_ranks[WARPS][IGNIS_MOE_ROUTING_MAX_EXPERTS];
  const ignis_moe_routing_params &p = l.p;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = (int64_t)blockIdx.x * WARPS + warp;
  ignis_pdl_wait();
  if (t >= p.num_tokens)
    return;
  const int E = p.num_experts, first = lane * V;
  const ignis_routing_rule rule = ignis_routing_rule_of(p.method);

  float value[V];
  uint32_t rank[V];
  load_logits<T, V>(static_cast<const T *>(p.logits) + t * p.logits_row_stride, first, E, l.vector_loads,
                    value);
  if (rule.biased) {
    float bias[V];
    load_bias<V>(p, first, bias);
    ignis_pdl_launch_dependents();
#pragma unroll
    for (int i = 0; i < V; ++i) {
      value[i] = ignis_routing_sigmoid(value[i]);
      rank[i] = first + i < E ? ignis_routing_rank(value[i] + bias[i]) : IGNIS_ROUTING_RANK_NONE;
    }
  } else {
    ignis_pdl_launch_dependents();
#pragma unroll
    for (int i = 0; i < V; ++i)
      rank[i] = first + i < E ? ignis_routing_rank(value[i]) : IGNIS_ROUTING_RANK_NONE;
  }
  if (p.n_group > 1)
    keep_best_groups<V>(l, lane, rank, warp_ranks[warp]);

  uint32_t best;
  int slot;
  float best_value;
  lane_best<V>(rank, value, best, slot, best_value);
  int my_id = 0;
  float my_value = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    const uint32_t top = __reduce_max_sync(FULL, best);
    const uint32_t id = __reduce_min_sync(FULL, best == top ? (uint32_t)(first + slot) : 0xffffffffu);
    const int owner = (int)id / V;
    const float v = __shfl_sync(FULL, best_value, owner);
    if (lane == j) {
      my_id = (int)id;
      my_value = v;
    }
    if (lane == owner) {
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (i == slot)
          rank[i] = IGNIS_ROUTING_RANK_NONE;
      lane_best<V>(rank, value, best, slot, best_value);
    }
  }

  const float top_value = __shfl_sync(FULL, my_value, 0);
  const bool mine = lane < p.top_k;
  const float term = mine ? ignis_routing_term(rule.term, my_value, top_value) : 0.0f;
  float sum = 0.0f;
  if (rule.sum == IGNIS_ROUTING_SUM_TOP_K) {
    sum = ignis_warp_sum(term);
  } else if (rule.sum == IGNIS_ROUTING_SUM_ALL) {
    float part = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (first + i < E)
        part += ignis_routing_exp_term(value[i], top_value);
    sum = ignis_warp_sum(part);
  }
  if (mine) {
    p.topk_ids[t * p.ids_row_stride + lane] = my_id;
    store_weight(p.topk_weights, p.weights_dtype, t * p.weights_row_stride + lane,
                 ignis_routing_weight(rule.norm, term, sum, p.routed_scaling_factor));
  }
}

template <typename T, int V> cudaError_t launch(const route_launch &l, int64_t blocks, cudaStream_t stream) {
  return ignis_launch(route_tokens<T, V>, dim3((unsigned)blocks), dim3(WARPS * 32), 0, stream, l);
}

template <typename T>
cudaError_t launch_width(const route_launch &l, int width, int64_t blocks, cudaStream_t s) {
  switch (width) {
  case 1:
    return launch<T, 1>(l, blocks, s);
  case 2:
    return launch<T, 2>(l, blocks, s);
  case 4:
    return launch<T, 4>(l, blocks, s);
  case 8:
    return launch<T, 8>(l, blocks, s);
  default:
    return launch<T, 16>(l, blocks, s);
  }
}

} // namespace

extern "C" ignis_status ignis_cuda_moe_route(const ignis_moe_routing_params *params, int32_t device,
                                             void *stream) {
  static const char *const fn = "ignis_cuda_moe_route";
  IGNIS_CUDA_ON_DEVICE(device);
  const int64_t blocks = (params->num_tokens + WARPS - 1) / WARPS;
  if (blocks > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s: %lld tokens exceed the grid limit", fn,
                           (long long)params->num_tokens);
  const int width = ignis_routing_lane_width(params->num_experts);
  route_launch l;
  l.p = *params;
  const size_t elem = ignis_dtype_size(params->logits_dtype);
  l.vector_loads = width * elem % 16 == 0 && (uintptr_t)params->logits % 16 == 0 &&
                   (params->num_tokens == 1 || params->logits_row_stride * (int64_t)elem % 16 == 0);
  l.group_lanes = 0;
  if (params->n_group > 1) {
    const int per_group = params->num_experts / params->n_group;
    const int lanes = per_group / width;
    if (per_group % width == 0 && (lanes & (lanes - 1)) == 0)
      l.group_lanes = lanes;
  }
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t err;
  switch (params->logits_dtype) {
  case IGNIS_BF16:
    err = launch_width<__nv_bfloat16>(l, width, blocks, s);
    break;
  case IGNIS_F16:
    err = launch_width<__half>(l, width, blocks, s);
    break;
  default:
    err = launch_width<float>(l, width, blocks, s);
    break;
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "%s: kernel launch failed: %s", fn, cudaGetErrorString(err));
  }
  return ignis_check_launch(fn);
}
