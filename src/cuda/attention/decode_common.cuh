/* Pieces shared by the decode kernels (decode_attention.cuh, decode_transposed.cuh, decode_page.cuh) and
 * the merge kernel: the launch facts (decode_config), the keys of a work item and their pages, the
 * shape of the shared-memory ring of key tiles, the query side of a warp, and the merges of partial
 * rows.
 *
 * Ring: keys stream through STAGES shared-memory tiles of KT = 64 keys (K tile and V tile, rows of
 * head_dim elements with 16-byte chunks XOR-swizzled so ldmatrix is conflict free), filled with
 * 16-byte cp.async (zero-filled for masked keys); page lookups run DECODE_LOOKAHEAD iterations ahead
 * of the copies, so no copy waits on a page-table read. Its shape (decode_tile) is sized for 3
 * blocks per SM at head dim 128 in the m16 kernel and 4 in the transposed one.
 *
 * Key range of an item: keys of [kv_start, kv_end) visible to some token of the request, i.e.
 * [max(kv_start, kv_len - q_len - window_left), min(kv_end, kv_len)); per-row masks (causal among
 * the q_len tokens, window) on the scores. Page indices are bounds-checked (entry within the
 * request's pages and kv_indices, page within the cache); a key on a bad page is masked. A row
 * with no visible key writes out = 0 and lse = -inf (the sink's value with sinks). Without a work
 * list (p->work == NULL: single decode, block-table runs) every request is cut into implicit_splits
 * chunks of implicit_chunk_tokens keys (the last to the request's end), item w being chunk w % splits
 * of request w / splits.
 *
 * fp8 K/V: a b16 lane of a K fragment holds dims 4t..4t+3 of a 16-dim chunk, so the reduction index
 * k of the QK^T mma is a permutation of the dims (k = 2t, 2t+1 <-> dims 4t, 4t+1; k = 2t+8, 2t+9
 * <-> dims 4t+2, 4t+3), applied to Q alike (frag_dim); q goes to f16 with a power-of-two scale per
 * row (exact; brings bf16 q into f16 range), undone on the scores. The tile layout, PTX wrappers
 * and score transforms are attention_tile.cuh's, shared with prefill. */
#ifndef IGNIS_CUDA_DECODE_COMMON_CUH
#define IGNIS_CUDA_DECODE_COMMON_CUH

#include <math.h>

#include "cuda/attention/attention_tile.cuh"
#include "cuda/attention/decode_length_plan.cuh"
#include "cuda/common/cuda_common.cuh"
#include "ignis/decode.h"

enum {
  DECODE_THREADS = 128,
  DECODE_WARPS = 4,
  DECODE_KT = 64,             /* keys per tile */
  DECODE_LOOKAHEAD = 3,       /* iterations between a page-table read and its use */
  DECODE_TRANSPOSED_ROWS = 8, /* blocks of at most this many query rows take the transposed kernel */
  MERGE_WARPS = 4,            /* merge block */
  MERGE_BATCH = IGNIS_DECODE_MERGE_GROUP /* partials a merging warp loads before it uses any */
};

/* Launch facts derived once on the host. */
struct decode_config {
  int32_t group;          /* query heads per KV head */
  int32_t rows;           /* q_len * group */
  int32_t mtiles;         /* ceil(rows / 16) */
  int32_t mt_warps;       /* m-tiles per pass (1, 2 or 4) */
  int32_t ksplit;         /* warps per m-tile: DECODE_WARPS / mt_warps */
  int32_t implicit_chunk;  /* work == NULL: keys per chunk of a request */
  int32_t implicit_splits; /* work == NULL: chunks per request */
  int32_t implicit_items;  /* work == NULL: items of the batch (requests x splits) */
  int32_t transform;      /* ALiBi or soft cap: scores take the general path */
  float cap_in;           /* soft cap: x = cap_out * tanh(x_nat * cap_in) (base 2 out) */
  float cap_out;
  int32_t alibi_n;     /* ALiBi: the largest power of two <= num_qo_heads; 0: off */
  int32_t fused_merge; /* split requests merge in the transposed kernel (planned schedules) */
  int32_t block_plan; /* a length plan the attention kernel's blocks make themselves (core/params.h:
                         length_plan; decode_length_plan.cuh): no work list in memory */
};

/* Shape of the shared-memory ring for a head dim, K/V element size and kernel (TRANSPOSED: the
 * transposed kernel, whose registers allow 4 blocks per SM where the ring is small enough). */
template <int HEAD_DIM, int KV_BYTES, bool TRANSPOSED> struct decode_tile {
  static constexpr int ROW_BYTES = HEAD_DIM * KV_BYTES;
  static constexpr int CHUNKS = ROW_BYTES / 16;
  static constexpr int SWIZZLE = (CHUNKS >= 8 ? 8 : CHUNKS) - 1;
  /* Head dim split (m16 kernel, head dim 512): the 4 warps share one m-tile and each takes a quarter
   * of the dims, of Q K^T (partial scores summed through shared memory, XS below) and of P V; the
   * whole Q and O of a 512-dim row would not fit a warp's registers. Keys per tile KT: 32 at head
   * dim 512 (a 64-key tile of 1024-byte rows would leave no room for a second stage). */
  static constexpr int DSPLIT = HEAD_DIM >= 512 ? DECODE_WARPS : 1;
  static constexpr int KT = HEAD_DIM >= 512 ? 32 : DECODE_KT;
  /* 2 stages of 256-byte rows (64 KB) let 3 blocks share an SM (faster than 3 stages with 2
   * blocks, notes/PERF.md); short rows keep 4 stages (64 KB, 3 blocks: the register limit of the
   * kernel for more rows), 3 (48 KB, 4 blocks) in the transposed kernel */
  static constexpr int STAGES = ROW_BYTES <= 128 ? (TRANSPOSED ? 3 : 4) : 2;
  static constexpr int TILE_BYTES = KT * ROW_BYTES; /* K or V of one stage */
  /* Split ring (transposed kernel, 256-byte rows up to head dim 128): the 2 stages keep 3 K/V tile
   * slots instead of 4 (48 KB, 4 blocks per SM). K and V of a tile are copied apart: K of tile
   * t + 1 into the slot V of tile t - 1 leaves (once every warp is past it), V of t + 1 into the
   * slot of K of t once every warp has its scores; K of tile t sits in slot 2t mod 3, V in 2t + 1
   * mod 3. Two tiles' worth of copies stay in flight per block, as with 2 whole stages. */
  static constexpr bool SPLIT = TRANSPOSED && ROW_BYTES == 256 && HEAD_DIM <= 128;
  static constexpr int ROWS_PER_THREAD = KT * CHUNKS / DECODE_THREADS; /* copies of K per tile */
  static constexpr int SLOTS = STAGES + 1;                             /* row-address ring */
  static constexpr size_t RING_BYTES = (size_t)(SPLIT ? 3 : STAGES * 2) * TILE_BYTES;
  /* ring of K and V row addresses [SLOTS][KT][2], then key-validity bits [SLOTS][KT / 32], then
   * (DSPLIT) the partial scores of a 16-key sub-tile, [2 sub-tiles][warps][32 lanes][8] f32 */
  static constexpr size_t RING_TABLES_END = RING_BYTES + (size_t)SLOTS * KT * 16 + (size_t)SLOTS * KT / 8;
  static constexpr size_t XS_OFFSET = (RING_TABLES_END + 127) / 128 * 128;
  static constexpr size_t SMEM_BYTES = DSPLIT > 1 ? XS_OFFSET + (size_t)2 * DECODE_WARPS * 32 * 8 * 4
                                                  : RING_TABLES_END;
  /* the split merge reuses it all: O [warps][16][O_STRIDE] f32 (rows padded by 8 floats, so the
   * 8 rows a warp stores at once fall in different banks; DSPLIT: one slot, each warp its dims),
   * then m and l [warps][16] */
  static constexpr int O_STRIDE = HEAD_DIM + 8;
  static_assert((size_t)DECODE_WARPS / DSPLIT * 16 * O_STRIDE * 4 + DECODE_WARPS * 16 * 8 <= SMEM_BYTES,
                "merge space");
  static_assert(DECODE_THREADS % CHUNKS == 0 && KT % 32 == 0, "copy mapping, validity words");
  static_assert(RING_BYTES >= 2 * sizeof(int32_t) * IGNIS_DECODE_LENGTH_PLAN_MAX_BATCH,
                "the ring holds a length plan's lengths and pages (decode_length_item)");
  static_assert(!TRANSPOSED || (KT / 16 == DECODE_WARPS && DSPLIT == 1),
                "transposed: one 16-key sub-tile per warp");
};

/* The 16-bit type the mma runs in: bf16 for bf16 K/V, f16 otherwise. */
template <int KIND> struct mma_type { typedef __half type; };
template <> struct mma_type<KV_BF16> { typedef __nv_bfloat16 type; };

/* ---- the keys of one work item ------------------------------------------------------------------ */
struct kv_range {
  int32_t start, end; /* keys [start, end) visible to some token */
  int32_t kv_len;
  int32_t page_size;   /* contiguous keys: 2^30, so every key is on "page" 0 */
  int64_t first_entry; /* kv_indices position of the request's first page */
  int64_t entry_end;   /* one past its last page, capped by the length of kv_indices */
  bool paged;
};

/* Page of key j (start <= j < end), or -1 when its page entry or number is out of range. */
__device__ __forceinline__ int32_t page_of_key(const ignis_decode_params &p, const kv_range &r, int32_t j) {
  if (!r.paged)
    return 0;
  const int64_t entry = r.first_entry + (uint32_t)j / (uint32_t)r.page_size;
  if (entry >= r.entry_end)
    return -1;
  const int32_t page = p.cache.indices[entry];
  return page >= 0 && page < p.cache.num_pages ? page : -1;
}

/* Item w of the schedule (not a length plan's: decode_length_item), or false when w is past the
 * batch's items. */
__device__ __forceinline__ bool fetch_item(const ignis_decode_params &p, const decode_config &c, int w,
                                           ignis_decode_work *item) {
  if (p.work == nullptr) {
    if (w >= c.implicit_items)
      return false;
    *item = ignis_decode_implicit_item(w, c.implicit_chunk, c.implicit_splits);
    return true;
  }
  if (w >= *p.num_work)
    return false;
  *item = p.work[w];
  return true;
}

/* Whether the keys are a paged cache (either form of core/params.h), not single decode's contiguous
 * sequence. */
__host__ __device__ __forceinline__ bool decode_cache_paged(const ignis_decode_params &p) {
  return p.contiguous_kv_len == 0 && (p.cache.indptr != nullptr || p.cache.seq_lens != nullptr);
}

/* Key range of an item, or false when its request is outside the cache's batch. */
__device__ __forceinline__ bool item_range(const ignis_decode_params &p, const ignis_decode_work &item,
                                           kv_range *r) {
  int64_t kv_len;
  r->paged = decode_cache_paged(p);
  if (r->paged && p.cache.seq_lens != nullptr) { /* block-table form (core/params.h) */
    if (item.request < 0 || item.request >= p.cache.batch_size)
      return false;
    kv_len = ignis_block_table_request_len(p.cache.seq_lens[item.request], p.cache.pages_per_seq, p.cache.page_size);
    r->page_size = (int32_t)p.cache.page_size;
    r->first_entry = item.request * p.cache.block_table_stride;
    r->entry_end = r->first_entry + p.cache.pages_per_seq;
  } else if (r->paged) {
    if (item.request < 0 || item.request >= p.cache.batch_size)
      return false;
    const int64_t begin = p.cache.indptr[item.request], end = p.cache.indptr[item.request + 1];
    kv_len = end > begin ? (end - begin - 1) * p.cache.page_size + p.cache.last_page_len[item.request] : 0;
    r->page_size = (int32_t)p.cache.page_size;
    r->first_entry = begin;
    r->entry_end = min(end, p.cache.num_page_entries);
    if (begin < 0)
      kv_len = 0;
  } else {
    if (item.request != 0)
      return false;
    kv_len = p.contiguous_kv_len;
    r->page_size = 1 << 30;
    r->first_entry = r->entry_end = 0;
  }
  kv_len = max(kv_len, (int64_t)0);
  int64_t start = max((int64_t)item.kv_start, (int64_t)0);
  if (p.window_left >= 0)
    start = max(start, kv_len - p.q_len - p.window_left);
  const int64_t end = max(min((int64_t)item.kv_end, kv_len), (int64_t)0);
  r->start = (int32_t)min(start, end);
  r->end = (int32_t)end;
  r->kv_len = (int32_t)kv_len;
  return true;
}

/* Dim of element e (0..3: the k indices 2t, 2t+1, 2t+8, 2t+9) of k-step kk for lane t. */
template <bool FP8> __device__ __forceinline__ int frag_dim(int kk, int e, int t) {
  return FP8 ? 16 * kk + 4 * t + e : 16 * kk + 2 * t + (e & 1) + (e >> 1) * 8;
}

/* Rotate pairs (x[kk][e], x[kk + KSTEPS/2][e]) by angle pos * freq[kk][e] (ROPE_LLAMA halves). */
template <int KSTEPS>
__device__ __forceinline__ void rotate_halves(float (&x)[KSTEPS][4], const float (&freq)[KSTEPS / 2][4],
                                              float pos) {
#pragma unroll
  for (int kk = 0; kk < KSTEPS / 2; ++kk)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float s, co;
      sincosf(pos * freq[kk][e], &s, &co);
      const float a = x[kk][e], b = x[kk + KSTEPS / 2][e];
      x[kk][e] = a * co - b * s;
      x[kk + KSTEPS / 2][e] = b * co + a * s;
    }
}

/* O *= the rescale of its row, skipped when no row of the warp moved (the running max settles early:
 * most sub-tiles leave O as it is). Element e of an O tile belongs to score row e >> 1 of the lane's
 * two (rows g, g + 8), or e & 1 in the transposed kernel (rows 2t, 2t + 1). */
template <bool TRANSPOSED, int OTILES>
static __device__ __forceinline__ void rescale_rows(float (&o)[OTILES][4], const float (&rescales)[2]) {
  if (__any_sync(0xffffffffu, rescales[0] != 1.0f || rescales[1] != 1.0f)) {
#pragma unroll
    for (int j = 0; j < OTILES; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[j][e] *= rescales[TRANSPOSED ? (e & 1) : (e >> 1)];
  }
}

/* ---- merging partial rows ---------------------------------------------------------------------- */
/* A lane's part of one query row merged over the partial rows prow0 + k * stride, k = k0, k0 + k_step,
 * .. < count: its VEC values (dims lane * VEC .., lane within the row's HEAD_DIM / VEC lanes)
 * weighted by exp2(lse - mx), their weight sum, and the running maximum mx of the base-2 LSEs (the
 * same in every lane of the row). MERGE_BATCH partials are loaded before any is used. Loads go to
 * L2 (ld.global.cg): inside an attention kernel other blocks of the running grid wrote the rows. */
template <int HEAD_DIM, int VEC>
__device__ __forceinline__ void merge_partial_rows(const ignis_decode_params &p, int64_t prow0,
                                                   int64_t stride, int k0, int k_step, int count, int lane,
                                                   float (&acc)[VEC], float &sum, float &mx) {
  for (int base = k0; base < count; base += MERGE_BATCH * k_step) {
    float lse[MERGE_BATCH], x[MERGE_BATCH][VEC];
#pragma unroll
    for (int u = 0; u < MERGE_BATCH; ++u) {
      const int k = base + u * k_step;
      lse[u] = -CUDART_INF_F;
      if (k < count) {
        const int64_t prow = prow0 + k * stride;
        lse[u] = __ldcg(p.partial_lse + prow);
        ignis_load_floats<IGNIS_CACHE_L2>(p.partial_out + prow * HEAD_DIM + lane * VEC, x[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < MERGE_BATCH; ++u)
      if (lse[u] != -CUDART_INF_F)
        lse_merge_fold(lse[u], x[u], mx, sum, acc); /* mx: the same for the row's lanes */
  }
}

/* Write N values (dims d0 ..) of a merged row, its weights summing to `sum` against the maximum mx
 * of their base-2 LSEs, scaled by scale / sum: into out / lse of query row out_row, head h, with the
 * head's sink joining here (final), or into partial row prow with its LSE. The LSE is written with
 * dim 0. */
template <typename QT, int HEAD_DIM, int N>
__device__ __forceinline__ void write_merged_row(const ignis_decode_params &p, float (&acc)[N], float sum,
                                                 float mx, float scale, int d0, bool final, int64_t out_row,
                                                 int64_t h, int64_t prow) {
  if (final && p.sinks != nullptr) {
    const float sink2 = p.sinks[h] * IGNIS_LOG2E_F;
    const float top = fmaxf(mx, sink2);
    const float w_keys = mx == -CUDART_INF_F ? 0.0f : exp2f(mx - top);
    sum = fmaf(sum, w_keys, sink2 == -CUDART_INF_F ? 0.0f : exp2f(sink2 - top));
#pragma unroll
    for (int e = 0; e < N; ++e)
      acc[e] *= w_keys;
    mx = top;
  }
  const bool any = sum > 0.0f || isnan(sum);
  const float inv = any ? scale / sum : 0.0f;
#pragma unroll
  for (int e = 0; e < N; ++e)
    acc[e] = any ? acc[e] * inv : 0.0f;
  const float lse2 = any ? mx + log2f(sum) : -CUDART_INF_F;
  if (final) {
    ignis_store_floats(static_cast<QT *>(p.out) + out_row * p.out_stride_batch + h * p.out_stride_head + d0,
                       acc);
    if (p.lse != nullptr && d0 == 0)
      p.lse[out_row * p.lse_stride_batch + h * p.lse_stride_head] = lse2 * p.lse_scale;
  } else {
    ignis_store_floats(p.partial_out + prow * HEAD_DIM + d0, acc);
    if (d0 == 0)
      p.partial_lse[prow] = lse2;
  }
}

/* Merge, by a whole block (ONE_WARP: by the calling warp alone), of partials base + k * step
 * (k < count) of request b for the rows of KV head kvh, ROWS_PER_WARP rows per warp at a time
 * (32 / ROWS_PER_WARP lanes per row: more rows in flight), into out / lse (final) or into partial
 * row `base`. */
template <typename QT, int HEAD_DIM, int ROWS_PER_WARP, bool ONE_WARP = false>
__device__ __forceinline__ void merge_block_rows(const ignis_decode_params &p, const decode_config &c,
                                                 int64_t b, int kvh, int64_t base, int64_t step, int count,
                                                 bool final) {
  constexpr int LANES = 32 / ROWS_PER_WARP, VEC = HEAD_DIM / LANES;
  const int lane = (threadIdx.x & 31) % LANES;
  const int slot = (ONE_WARP ? 0 : threadIdx.x >> 5) * ROWS_PER_WARP + (threadIdx.x & 31) / LANES;
  const int slots = (ONE_WARP ? 1 : blockDim.x >> 5) * ROWS_PER_WARP;
  for (int row = slot; row < c.rows; row += slots) {
    const int tok = row / c.group;
    const int64_t h = (int64_t)kvh * c.group + row % c.group;
    const int64_t prow0 = (base * p.q_len + tok) * p.num_qo_heads + h;
    float acc[VEC], sum = 0.0f, mx = -CUDART_INF_F;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      acc[e] = 0.0f;
    merge_partial_rows<HEAD_DIM, VEC>(p, prow0, step * p.q_len * p.num_qo_heads, 0, 1, count, lane, acc, sum,
                                      mx);
    write_merged_row<QT, HEAD_DIM, VEC>(p, acc, sum, mx, 1.0f, lane * VEC, final, b * p.q_len + tok, h,
                                        prow0);
  }
}

/* The merge of a split request inside an attention kernel (core/params.h: merge counters), run
 * by every block of a split item once its partial rows are written: the block counts itself in its
 * group's counter, and the last of the group merges it; with several groups the group mergers
 * count themselves on group 0's counter, and the last of them merges the groups. Every writer
 * fences before its block counts itself; a merger fences before it reads. A merger leaves its
 * counter zero (group 0's: the final merger) for the next run, e.g. a CUDA-graph replay.
 * ONE_WARP: the calling warp alone counts and merges KV head kvh (the page kernel: each consumer
 * warp its own head, so the merges of a request spread over the blocks and warps that finish last,
 * which measured faster than one block merging all 8 heads: notes/PERF.md). */
template <typename QT, int HEAD_DIM, int ROWS_PER_WARP, bool ONE_WARP = false>
__device__ __forceinline__ void merge_in_kernel(const ignis_decode_params &p, const decode_config &c,
                                                const ignis_decode_work &item, int kvh,
                                                const int32_t *planned_rows = nullptr) {
  __shared__ uint32_t merger;
  const bool leader = ONE_WARP ? (threadIdx.x & 31) == 0 : threadIdx.x == 0;
  /* the leader's verdict to every merging thread (after a sync that orders their fenced writes) */
  auto sync = [] {
    if constexpr (ONE_WARP)
      __syncwarp();
    else
      __syncthreads();
  };
  auto tell = [&](uint32_t verdict) -> uint32_t {
    if constexpr (ONE_WARP)
      return __shfl_sync(0xffffffffu, verdict, 0);
    if (leader)
      merger = verdict;
    __syncthreads();
    return merger;
  };
  const int64_t b = item.request;
  /* the rows of a batch the blocks planned (planned_rows: the request's first partial row and
   * partial rows, decode_length_item), of a planned schedule, or of the implicit one; the counters
   * of a planned schedule, or merge_counters (implicit schedules and length plans: core/params.h) */
  const int32_t first = c.block_plan ? planned_rows[0] : p.work ? p.request_partials[b] : (int32_t)b * c.implicit_splits;
  const int32_t n = c.block_plan ? planned_rows[1] : p.work ? p.request_partials[b + 1] - first : c.implicit_splits;
  const int32_t g = (item.partial - first) / IGNIS_DECODE_MERGE_GROUP;
  const int32_t groups = (n + IGNIS_DECODE_MERGE_GROUP - 1) / IGNIS_DECODE_MERGE_GROUP;
  const int32_t members = min((int32_t)IGNIS_DECODE_MERGE_GROUP, n - g * IGNIS_DECODE_MERGE_GROUP);
  uint32_t *counters = p.work ? reinterpret_cast<uint32_t *>(const_cast<ignis_decode_work *>(p.work) + *p.num_work)
                              : p.merge_counters;
  const int64_t group0 = first / IGNIS_DECODE_MERGE_GROUP + b;
  uint32_t *mine = counters + (group0 + g) * p.num_kv_heads + kvh,
           *level2 = counters + group0 * p.num_kv_heads + kvh;

  __threadfence();
  sync();
  uint32_t last = 0;
  if (leader) {
    const uint32_t before = atomicAdd(mine, 1u);
    last = before % IGNIS_DECODE_MERGE_LEVEL == (uint32_t)members - 1;
    if (last && (g > 0 || groups == 1)) /* group 0 of several: second-level arrivals may be counting */
      *mine = 0;
  }
  if (!tell(last))
    return;
  __threadfence();
  merge_block_rows<QT, HEAD_DIM, ROWS_PER_WARP, ONE_WARP>(p, c, b, kvh, first + g * IGNIS_DECODE_MERGE_GROUP,
                                                          1, members, groups == 1);
  if (groups == 1)
    return;
  __threadfence();
  sync();
  last = 0;
  if (leader) {
    const uint32_t before = atomicAdd(level2, (uint32_t)IGNIS_DECODE_MERGE_LEVEL);
    last = before / IGNIS_DECODE_MERGE_LEVEL == (uint32_t)groups - 1;
    if (last)
      *level2 = 0;
  }
  if (!tell(last))
    return;
  __threadfence();
  merge_block_rows<QT, HEAD_DIM, ROWS_PER_WARP, ONE_WARP>(p, c, b, kvh, first, IGNIS_DECODE_MERGE_GROUP,
                                                          groups, true);
}

/* ---- the query side of a warp ------------------------------------------------------------------- */
/* Q fragments and the facts of the score rows of one warp (m-tile mt of the block's rows; in the
 * transposed kernel the rows are the n index of Q^T). With DSPLIT > 1 (decode_tile) the warp holds
 * KSTEPS = HEAD_DIM / 16 / DSPLIT of the k-steps, those of dim part `dpart` (qk_step). */
template <int HEAD_DIM, bool ROPE, bool TRANSPOSED, int DSPLIT = 1> struct query_frags {
  static constexpr int KSTEPS = HEAD_DIM / 16 / DSPLIT, QROWS = TRANSPOSED ? 1 : 2;
  /* qa[kk] = {row g: e0 e1, row g+8: e0 e1, row g: e2 e3, row g+8: e2 e3}, the A fragment of Q K^T
   * (transposed: {row g: e0 e1, row g: e2 e3}, the B fragment of K Q^T) */
  uint32_t qa[KSTEPS][2 * QROWS];
  float row_scale[2];   /* of the score rows: base-2 (no transform) or natural factor of the raw scores */
  int32_t score_pos[2]; /* positions of the score rows' tokens */
  float slope[2];       /* ALiBi slopes of the score rows */
  float kfreq[ROPE ? KSTEPS / 2 : 1][4]; /* RoPE: frequencies of this lane's K dims */
};

/* Global k-step of a warp's local k-step kk (KSTEPS local steps of HEAD_DIM / 16, dim part dpart of
 * DSPLIT): the two halves of the local steps take matching steps of the two halves of the head dim,
 * so ROPE_LLAMA's pairs (dims d, d + HEAD_DIM / 2) stay in one warp, at local steps kk, kk + KSTEPS / 2;
 * an even step and the next are consecutive (fp8 K loads two at once). The identity for DSPLIT 1. */
template <int HEAD_DIM, int DSPLIT> __device__ __forceinline__ int qk_step(int kk, int dpart) {
  constexpr int HALF = HEAD_DIM / 16 / DSPLIT / 2;
  return kk % HALF + dpart * HALF + (kk / HALF) * (HEAD_DIM / 32);
}

/* Loads the Q fragments of KV head kvh's rows (m-tile mt; inactive: zero Q) for work item `item`
 * with key range r: RoPE applied, fp8 rows scaled into f16 range, the softmax scale folded into
 * row_scale. */
template <typename QT, int KIND, int HEAD_DIM, bool ROPE, bool TRANSPOSED, int DSPLIT = 1>
__device__ __forceinline__ void load_query(const ignis_decode_params &p, const decode_config &c,
                                           const ignis_decode_work &item, const kv_range &r, int kvh, int mt,
                                           bool active, query_frags<HEAD_DIM, ROPE, TRANSPOSED, DSPLIT> &q,
                                           int dpart = 0) {
  constexpr bool FP8 = KIND == KV_E4M3 || KIND == KV_E5M2;
  typedef typename mma_type<KIND>::type MT;
  constexpr int KSTEPS = HEAD_DIM / 16 / DSPLIT, QROWS = TRANSPOSED ? 1 : 2;
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  /* Token, head and position of query row `row` of the block; false past the block's rows (which
   * take token 0, the head of row 0 of the group, and zero Q). */
  auto row_facts = [&](int row, int64_t *head_of, int64_t *qrow_of, int32_t *qpos_of) -> bool {
    const bool ok = active && row < c.rows;
    const int tok = ok ? row / c.group : 0;
    *head_of = (int64_t)kvh * c.group + (ok ? row % c.group : 0);
    *qrow_of = (int64_t)item.request * p.q_len + tok;
    *qpos_of = r.kv_len - p.q_len + tok;
    return ok;
  };
  /* Load rows: the rows whose Q fragments this lane holds, g and g + 8 of the warp's m-tile
   * (transposed: row g, the n index of the Q^T fragment). Score rows: the rows of this lane's
   * scores and O values, the same two (transposed: rows 2t and 2t + 1, the columns of S^T). */
  int64_t head[QROWS], qrow[QROWS];
  int32_t qpos[QROWS];
  bool row_ok[QROWS];
#pragma unroll
  for (int h2 = 0; h2 < QROWS; ++h2)
    row_ok[h2] = row_facts(mt * 16 + g + h2 * 8, &head[h2], &qrow[h2], &qpos[h2]);
  int64_t score_head[2];
  int32_t(&score_pos)[2] = q.score_pos;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    if constexpr (TRANSPOSED) {
      int64_t unused_qrow;
      row_facts(2 * t + h2, &score_head[h2], &unused_qrow, &score_pos[h2]);
    } else {
      score_head[h2] = head[h2];
      score_pos[h2] = qpos[h2];
    }
  }

  uint32_t(&qa)[KSTEPS][2 * QROWS] = q.qa;
  float(&row_scale)[2] = q.row_scale;
  {
    float qf[QROWS][KSTEPS][4];
#pragma unroll
    for (int h2 = 0; h2 < QROWS; ++h2) {
      const QT *qp = static_cast<const QT *>(p.q) + qrow[h2] * p.q_stride_batch + head[h2] * p.q_stride_head;
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
          float two[2] = {0.0f, 0.0f};
          if (row_ok[h2])
            ignis_unpack_word<QT>(__ldg(reinterpret_cast<const unsigned int *>(
                                      qp + frag_dim<FP8>(qk_step<HEAD_DIM, DSPLIT>(kk, dpart), e, t))),
                                  two);
          qf[h2][kk][e] = two[0];
          qf[h2][kk][e + 1] = two[1];
        }
    }
    /* (the same frequencies as kfreq below, computed again there rather than kept live from here:
     * one table for both cost the RoPE instances registers and stack, notes/PERF.md) */
    float freq[KSTEPS / 2][4];
    if constexpr (ROPE) {
#pragma unroll
      for (int kk = 0; kk < KSTEPS / 2; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          freq[kk][e] = p.rope_rcp_scale *
                        exp2f(-(float)(2 * frag_dim<FP8>(qk_step<HEAD_DIM, DSPLIT>(kk, dpart), e, t)) /
                              HEAD_DIM * p.rope_log2_theta);
#pragma unroll
      for (int h2 = 0; h2 < QROWS; ++h2)
        rotate_halves<KSTEPS>(qf[h2], freq, (float)qpos[h2]);
    }
    const float nat = c.transform ? 1.0f : 1.4426950408889634f;
    float load_scale[QROWS];
#pragma unroll
    for (int h2 = 0; h2 < QROWS; ++h2) {
      float pow2 = 1.0f;
      if constexpr (FP8) { /* bring the row into [2^14, 2^15) for f16 */
        float mx = 0.0f;
        if constexpr (DSPLIT == 1) {
#pragma unroll
          for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              mx = fmaxf(mx, fabsf(qf[h2][kk][e]));
        } else if (row_ok[h2]) {
          /* the warps of a row must agree: the maximum of the whole row as loaded (RoPE turns a pair
           * by at most a factor sqrt 2, still inside f16's range) */
          const QT *qp =
              static_cast<const QT *>(p.q) + qrow[h2] * p.q_stride_batch + head[h2] * p.q_stride_head;
#pragma unroll 1
          for (int kk = 0; kk < HEAD_DIM / 16; ++kk)
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
              float two[2];
              ignis_unpack_word<QT>(
                  __ldg(reinterpret_cast<const unsigned int *>(qp + frag_dim<FP8>(kk, e, t))), two);
              mx = fmaxf(mx, fmaxf(fabsf(two[0]), fabsf(two[1])));
            }
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        if (mx > 0.0f && isfinite(mx)) {
          const int ex = (int)((__float_as_uint(mx) >> 23) & 0xff) - 127;
          pow2 = exp2f((float)min(max(14 - ex, -126), 126));
        }
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            qf[h2][kk][e] *= pow2;
      }
      load_scale[h2] = p.sm_scale_log2 / 1.4426950408889634f * p.k_scale / pow2 * nat;
    }
#pragma unroll
    for (int h2 = 0; h2 < 2;
         ++h2) /* transposed: score row 2t + h2 is the load row of lanes 4 (2t + h2) + t' */
      row_scale[h2] = !TRANSPOSED ? load_scale[h2 % QROWS]
                      : FP8       ? __shfl_sync(0xffffffffu, load_scale[0], 8 * t + 4 * h2)
                                  : load_scale[0];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
      for (int i = 0; i < 2 * QROWS; ++i)
        qa[kk][i] = ignis_pack_word<MT>(&qf[i % QROWS][kk][2 * (i / QROWS)]);
  }
  float(&kfreq)[ROPE ? KSTEPS / 2 : 1][4] = q.kfreq;
  if constexpr (ROPE) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS / 2; ++kk)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        kfreq[kk][e] =
            p.rope_rcp_scale * exp2f(-(float)(2 * frag_dim<FP8>(qk_step<HEAD_DIM, DSPLIT>(kk, dpart), e, t)) /
                                     HEAD_DIM * p.rope_log2_theta);
  }
  float(&slope)[2] = q.slope;
  slope[0] = slope[1] = 0.0f;
  if (c.alibi_n > 0) {
    slope[0] = alibi_slope(c.alibi_n, score_head[0]);
    slope[1] = alibi_slope(c.alibi_n, score_head[1]);
  }
}

/* Score of a lane's element for score row h2 and key j (ok: the key's page is good) on the general
 * path: scaled, ALiBi, soft cap (base 2 out), masks of the row. */
template <int HEAD_DIM, bool ROPE, bool TRANSPOSED, int DSPLIT>
__device__ __forceinline__ float general_score(const ignis_decode_params &p, const decode_config &c,
                                               const query_frags<HEAD_DIM, ROPE, TRANSPOSED, DSPLIT> &q,
                                               float raw, int h2, int j, bool ok, bool row_masks) {
  const int32_t pos = q.score_pos[h2];
  float x = raw * q.row_scale[h2];
  if (c.transform) {
    if (c.alibi_n > 0)
      x += q.slope[h2] * (float)(j - pos);
    x = c.cap_out > 0.0f ? c.cap_out * tanhf(x * c.cap_in) : x * 1.4426950408889634f;
  }
  if (row_masks)
    ok = ok && j <= pos && (p.window_left < 0 || j >= pos - p.window_left);
  return ok ? x : -CUDART_INF_F;
}

/* ---- merge kernel (implicit schedule, and the kernel for more than 8 rows) ------------------------ */
/* Block (b, row) merges one (token, head) row of request b: its MERGE_WARPS warps take the partial
 * rows in turn (warp w: partials w, w + MERGE_WARPS, ...; merge_partial_rows), and warp 0 combines
 * the warps' sums and writes the row. The launch is the same for every batch, so a request's result
 * does not depend on the rest of the batch. A block of an unsplit request returns before waiting on
 * the attention grid. */
template <typename QT, int HEAD_DIM>
__global__ void __launch_bounds__(MERGE_WARPS * 32)
    decode_merge_kernel(const ignis_decode_params p, const decode_config c) {
  constexpr int VEC = HEAD_DIM / 32;
  __shared__ float warp_acc[MERGE_WARPS][HEAD_DIM];
  __shared__ float warp_sum[MERGE_WARPS], warp_max[MERGE_WARPS];
  int64_t first, last;
  if (c.block_plan) { /* block 0 of the attention grid wrote request_partials (decode_length_item) */
    if ((int64_t)blockIdx.x >= p.cache.batch_size)
      return;
    ignis_pdl_wait();
    first = p.request_partials[blockIdx.x];
    last = p.request_partials[blockIdx.x + 1];
  } else if (p.work == nullptr) {
    if (c.implicit_splits <= 1 || (int64_t)blockIdx.x >= p.cache.batch_size)
      return;
    first = (int64_t)blockIdx.x * c.implicit_splits;
    last = first + c.implicit_splits;
  } else {
    /* the schedule was copied before the attention kernel ran: readable before the wait */
    if ((int)blockIdx.x >= *p.batch_size)
      return;
    first = p.request_partials[blockIdx.x];
    last = p.request_partials[blockIdx.x + 1];
  }
  if (last <= first)
    return;
  ignis_pdl_wait(); /* (returns at once when repeated) */
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t heads = p.num_qo_heads, q_len = p.q_len, th = blockIdx.y;
  const int64_t tok = th / heads, h = th % heads;
  float acc[VEC], sum = 0.0f, mx = -CUDART_INF_F;
#pragma unroll
  for (int e = 0; e < VEC; ++e)
    acc[e] = 0.0f;
  merge_partial_rows<HEAD_DIM, VEC>(p, (first * q_len + tok) * heads + h, q_len * heads, warp, MERGE_WARPS,
                                    (int)(last - first), lane, acc, sum, mx);
  if (lane == 0) {
    warp_max[warp] = mx;
    warp_sum[warp] = sum;
  }
  __syncthreads();
  float top = -CUDART_INF_F;
  for (int w = 0; w < MERGE_WARPS; ++w)
    top = fmaxf(top, warp_max[w]);
  const float mine = mx == -CUDART_INF_F ? 0.0f : exp2f(mx - top);
#pragma unroll
  for (int e = 0; e < VEC; ++e)
    warp_acc[warp][lane * VEC + e] = acc[e] * mine;
  __syncthreads();
  ignis_pdl_launch_dependents();
  if (warp > 0)
    return;
  sum = 0.0f;
  for (int w = 0; w < MERGE_WARPS; ++w)
    sum += warp_max[w] == -CUDART_INF_F ? 0.0f : warp_sum[w] * exp2f(warp_max[w] - top);
#pragma unroll
  for (int e = 0; e < VEC; ++e) {
    acc[e] = 0.0f;
    for (int w = 0; w < MERGE_WARPS; ++w)
      acc[e] += warp_acc[w][lane * VEC + e];
  }
  write_merged_row<QT, HEAD_DIM, VEC>(p, acc, sum, top, 1.0f, lane * VEC, true,
                                      (int64_t)blockIdx.x * q_len + tok, h, 0);
}

#endif
