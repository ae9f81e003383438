/* CUDA backend of decode attention (include/ignis/decode.h): q_len query tokens per request
 * against its paged or contiguous KV cache, with the results of the CPU backend.
 *
 * Two kernels, launched back to back on the stream with ignis_launch (PDL between them):
 *   - decode_attention_kernel, grid work items x KV heads (flat, KV head fastest, so the blocks
 *     reading the heads of one page run side by side), 128 threads: block (w, kvh) runs work
 *     item w (keys [kv_start, kv_end) of one request) for every query row of KV head kvh, so each
 *     K/V row is read from memory once for the whole GQA group and all q_len tokens. A whole
 *     request writes out / lse directly; a chunk of a split request writes f32 partial rows and
 *     their base-2 LSEs.
 *   - split requests are merged inside the attention kernel on planned schedules of the transposed
 *     kernel (merge_in_kernel: the last block of each group of 8 partials, found by a counter the
 *     plan zeroes, merges the group; the last group merger merges the groups), else by
 *     decode_merge_kernel, grid (requests, query rows), 4 warps: combines the partial rows of each
 *     split request (and adds the per-head sink exactly once), the warps taking its partials in
 *     turn. Outside a CUDA-graph capture both grids fit the planned batch and an unsplit batch
 *     launches no merge; a captured run is sized for the plan's maxima.
 *
 * Tensor cores (mma.sync m16n8k16, f32 accumulators). The R = q_len * group query rows of a block
 * (row r: token r / group, head r % group of the group) are packed into the M dimension, 16 rows
 * per m-tile. Keys stream through a ring of STAGES shared-memory tiles of KT = 64 keys (K tile and
 * V tile, rows of head_dim elements with 16-byte chunks XOR-swizzled so ldmatrix is conflict
 * free), filled with 16-byte cp.async (zero-filled for masked keys). Page lookups run ahead of the
 * copies (loaded DECODE_LOOKAHEAD iterations before the copies need them): threads 0..KT-1 turn a key into the addresses of its K and V rows (and a
 * validity bit) and leave them in a small ring of their own, so no copy waits on a page-table read.
 * Shared memory is sized for 3 blocks per SM at head dim 128 (occupancy measured as the lever; the
 * transposed kernel below: 4, its 16-bit ring keeping K and V of a tile in separate slots). The 4 warps are
 * (m-tiles of a pass) x (key splits): a warp owns one m-tile and takes every ksplit-th 16-key
 * sub-tile of each tile; its S = Q K^T (Q fragments in registers for the whole run, K fragments by
 * ldmatrix), online softmax in base 2 on the S fragments, P converted to the 16-bit type in
 * registers and O += P V (V fragments by ldmatrix.trans); the softmax weights and rescales use
 * the bare ex2.approx (exp2_approx). The key splits are merged through shared
 * memory at the end. Groups with more m-tiles than warps run several passes over the keys.
 *
 * Transposed kernel (TRANSPOSED, taken when R <= DECODE_TRANSPOSED_ROWS = 8, e.g. group 4 or 8 at
 * q_len 1, group 4 at q_len 2; every option, dtype and head dim; larger R takes the kernel above).
 * An m16 tile of R <= 8 rows would be mostly padding, so the block computes the transpose: the R
 * rows are the N = 8 columns. S^T = K Q^T with K the A operand (16 keys x 16 dims by ldmatrix from
 * the K tile, not transposed) and Q^T the B operand (lane (g, t) holds row g, dims as frag_dim);
 * lane (g, t) then holds keys g, g+8 of rows 2t, 2t+1, and the online softmax of a row reduces
 * over the 8 lanes g. P^T, the B operand of O^T += V^T P^T, is the C fragment with each 8x8 half
 * transposed across the warp (movmatrix); V^T is the A operand by ldmatrix.trans from the V tile.
 * Per 16 keys: KSTEPS + HEAD_DIM / 16 mma instead of twice that, 16 Q registers and 32 O
 * accumulators at head dim 128 instead of 32 and 64 (122-125 registers against 163-168). Each warp takes
 * one 16-key sub-tile of every tile (the key-split merge of the kernel above, rows 0..7 used). The
 * ring, page lookups, score transforms and epilogue are the same code; the ring has the same
 * shape but for 128-byte rows (fp8 at head dim 128, 16-bit at 64): 3 stages instead of 4, and for
 * 256-byte rows (16-bit at head dim 128) 3 tile slots instead of 4 (decode_tile::SPLIT: K of the
 * next tile lands while this tile's scores are computed, its V once they are), so that 4 blocks
 * share an SM (B64 L4k: 0.93x -> 0.98x cuDNN). The planner's occupancy comes from the kernel
 * instance it will run (ignis_cuda_decode_blocks_per_sm takes the rows).
 *
 * Page kernel (decode_page_kernel, sm_90; for 16-bit K/V at head dim 128 with 8 KV heads in NHD
 * order, pages of a multiple of 16 tokens, and rows for the transposed kernel: the common shape of
 * Llama-style models; taken when the plan chose it, i.e. with automatic splits for batches it need
 * not split and that fill its waves, see op_decode.c and notes/PERF.md). A block is a work item for
 * all 8 KV heads, one per SM, 8 consumer warps (a head each) and a producer warp. Each stage is 16
 * tokens of one page for all 8 heads, which NHD keeps as one 32 KB run for K and one for V: two
 * bulk copies (cp.async.bulk, completing on an mbarrier) into a 2-slot ring. A microbenchmark of
 * bare copies on the H200 put the reason in numbers: 4 KB runs per head and page (what the kernel
 * above fetches, by cp.async or by bulk copies) stream at ~4.35 TB/s, 32 KB runs at ~4.5 TB/s, the
 * rate of contiguous K/V; tensor-map copies of the same boxes at ~4.1. In the ring a head's 16 rows
 * lie 2 KB apart (one bank group), so each consumer warp first copies its head's K and V rows into
 * a private swizzled 16-key tile (zeroing the rows of masked keys), releases the slot (an empty
 * mbarrier of 256 arrivals: every consumer lane releases its own reads of the slot), and runs the
 * transposed kernel's 16-key step on it (transposed_keys16: the same scores, options and softmax).
 * Each warp owns its head's rows outright, so its epilogue writes out or the partial row with no
 * key-split merge; a split item (a CUDA-graph replay of a later plan, or
 * IGNIS_DECODE_PAGE_KERNEL=always) merges inside the kernel, each consumer warp on its own head's
 * counters, so a request's 8 heads are merged by whichever warps finish last. Its planner counts
 * the block as 8 (item, head) blocks.
 *
 * fp8 K/V: tiles hold the fp8 bytes; fragments are read with the same ldmatrix (a b16 lane then
 * holds two fp8 values) and converted to f16 in registers (fp8x4_to_f16x2x2: both halves of a
 * word without a shift). Because a b16 lane of K then holds
 * dims 4t..4t+3 of a 16-dim chunk, the reduction index k of the QK^T mma is a permutation of the
 * dims (k = 2t, 2t+1 <-> dims 4t, 4t+1; k = 2t+8, 2t+9 <-> dims 4t+2, 4t+3), applied to Q alike;
 * for V the transposed b16 lane holds dims 2g, 2g+1 of two keys, split by a byte permute into an
 * even-dim and an odd-dim n-tile (transposed kernel: m-rows g and g+8 of a 16-dim m-tile of O^T
 * are dims 2g and 2g+1; the K fragment and the permutation of the QK dims are as above, K as the A
 * operand). q goes to f16 with a power-of-two scale per row (exact; brings
 * bf16 q into f16 range), undone on the scores. (Q K^T on the fp8 tensor cores, mma m16n8k32 with
 * q split in two e4m3 parts and the K bytes as the B fragment, measured slower on the H200:
 * 233 vs 208 us at batch 64, 4k keys.)
 *
 * Key range of an item: keys of [kv_start, kv_end) visible to some token of the request, i.e.
 * [max(kv_start, kv_len - q_len - window_left), min(kv_end, kv_len)); per-row masks (causal among
 * the q_len tokens, window) on the scores. Page indices are bounds-checked (entry within the
 * request's pages and kv_indices, page within the cache); a key on a bad page is masked. A row
 * with no visible key writes out = 0 and lse = -inf (the sink's value with sinks).
 *
 * Schedule without a work list (p->work == NULL, single decode): request 0 is cut into chunks of
 * implicit_chunk_tokens keys, item w being chunk w; the grid and the merge are sized on the host,
 * and the merge combines partial rows 0 .. items - 1.
 *
 * The tile layout, PTX wrappers, score transforms and the partial-row merge are shared with prefill
 * (attention_tile.cuh). */
#include <math.h>
#include <string.h>
#include <type_traits>

#include "cuda/attention/attention_tile.cuh"
#include "cuda/common/cuda_common.cuh"
#include "ignis/decode.h"

enum {
  DECODE_THREADS = 128,
  DECODE_WARPS = 4,
  DECODE_KT = 64, /* keys per tile */
  DECODE_LOOKAHEAD = 3, /* iterations between a page-table read and its use */
  DECODE_TRANSPOSED_ROWS = 8, /* blocks of at most this many query rows take the transposed kernel */
  MERGE_WARPS = 4, /* merge block */
  MERGE_BATCH = IGNIS_DECODE_MERGE_GROUP /* partials a merging warp loads before it uses any */
};

/* Launch facts derived once on the host. */
struct decode_config {
  int32_t group;          /* query heads per KV head */
  int32_t rows;           /* q_len * group */
  int32_t mtiles;         /* ceil(rows / 16) */
  int32_t mt_warps;       /* m-tiles per pass (1, 2 or 4) */
  int32_t ksplit;         /* warps per m-tile: DECODE_WARPS / mt_warps */
  int32_t implicit_chunk; /* work == NULL: keys per chunk of request 0 */
  int32_t implicit_items; /* work == NULL: chunks of request 0 */
  int32_t transform;      /* ALiBi or soft cap: scores take the general path */
  float cap_in;           /* soft cap: x = cap_out * tanh(x_nat * cap_in) (base 2 out) */
  float cap_out;
  int32_t alibi_n;        /* ALiBi: the largest power of two <= num_qo_heads; 0: off */
  int32_t fused_merge;    /* split requests merge in the attention kernel (planned, transposed) */
};

/* Shape of the shared-memory ring for a head dim, K/V element size and kernel (TRANSPOSED: the
 * transposed kernel, whose ~125 registers allow 4 blocks per SM where the ring is small enough). */
template <int HEAD_DIM, int KV_BYTES, bool TRANSPOSED> struct decode_tile {
  static constexpr int ROW_BYTES = HEAD_DIM * KV_BYTES;
  static constexpr int CHUNKS = ROW_BYTES / 16;
  static constexpr int SWIZZLE = (CHUNKS >= 8 ? 8 : CHUNKS) - 1;
  /* 2 stages of 256-byte rows (64 KB) let 3 blocks share an SM, which measured faster than 3
   * stages with 2 blocks; short rows keep 4 stages (64 KB, 3 blocks: the register limit of the
   * kernel for more rows), 3 (48 KB, 4 blocks) in the transposed kernel */
  static constexpr int STAGES = ROW_BYTES <= 128 ? (TRANSPOSED ? 3 : 4) : 2;
  static constexpr int TILE_BYTES = DECODE_KT * ROW_BYTES; /* K or V of one stage */
  /* Split ring (transposed kernel, 256-byte rows up to head dim 128): the 2 stages keep 3 K/V tile
   * slots instead of 4 (48 KB, 4 blocks per SM). K and V of a tile are copied apart: K of tile
   * t + 1 into the slot V of tile t - 1 leaves (once every warp is past it), V of t + 1 into the
   * slot of K of t once every warp has its scores; K of tile t sits in slot 2t mod 3, V in 2t + 1
   * mod 3. Two tiles' worth of copies stay in flight per block, as with 2 whole stages. */
  static constexpr bool SPLIT = TRANSPOSED && ROW_BYTES == 256 && HEAD_DIM <= 128;
  static constexpr int ROWS_PER_THREAD = DECODE_KT * CHUNKS / DECODE_THREADS; /* copies of K per tile */
  static constexpr int SLOTS = STAGES + 1; /* row-address ring */
  static constexpr size_t RING_BYTES = (size_t)(SPLIT ? 3 : STAGES * 2) * TILE_BYTES;
  /* ring of K and V row addresses [SLOTS][KT][2], then key-validity bits [SLOTS][KT / 32] */
  static constexpr size_t SMEM_BYTES = RING_BYTES + (size_t)SLOTS * DECODE_KT * 16 + (size_t)SLOTS * DECODE_KT / 8;
  /* the split merge reuses it all: O [warps][16][O_STRIDE] f32 (rows padded by 8 floats, so the
   * 8 rows a warp stores at once fall in different banks), then m and l [warps][16] */
  static constexpr int O_STRIDE = HEAD_DIM + 8;
  static_assert((size_t)DECODE_WARPS * 16 * (O_STRIDE + 2) * 4 <= SMEM_BYTES, "merge space");
  static_assert(DECODE_THREADS % CHUNKS == 0, "copy mapping");
  static_assert(!TRANSPOSED || DECODE_KT / 16 == DECODE_WARPS, "transposed: one 16-key sub-tile per warp");
};

/* The 16-bit type the mma runs in: bf16 for bf16 K/V, f16 otherwise. */
template <int KIND> struct mma_type { typedef __half type; };
template <> struct mma_type<KV_BF16> { typedef __nv_bfloat16 type; };

/* ---- the keys of one work item ------------------------------------------------------------------ */
struct kv_range {
  int32_t start, end;  /* keys [start, end) visible to some token */
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

/* Item w of the schedule, or false when w is past the batch's items. */
__device__ __forceinline__ bool fetch_item(const ignis_decode_params &p, const decode_config &c, int w,
                                           ignis_decode_work *item) {
  if (p.work == nullptr) {
    if (w >= c.implicit_items)
      return false;
    const int64_t start = (int64_t)w * c.implicit_chunk;
    item->request = 0;
    item->kv_start = (int32_t)start;
    item->kv_end = (int32_t)min(start + c.implicit_chunk, (int64_t)INT32_MAX);
    item->partial = c.implicit_items > 1 ? w : -1;
    return true;
  }
  if (w >= *p.num_work)
    return false;
  *item = p.work[w];
  return true;
}

/* Key range of an item, or false when its request is outside the cache's batch. */
__device__ __forceinline__ bool item_range(const ignis_decode_params &p, const ignis_decode_work &item,
                                           kv_range *r) {
  int64_t kv_len;
  r->paged = p.contiguous_kv_len == 0 && p.cache.indptr != nullptr;
  if (r->paged) {
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

/* Transposed kernel: dim of accumulator o[j][e] (m-tile j of O^T) for lane g. 16-bit: m-rows g and
 * g + 8 are dims g, g + 8 of the 16-dim tile; fp8: dims 2g and 2g + 1 (the byte order of a V
 * fragment, see the header). */
template <bool FP8> __device__ __forceinline__ int transposed_dim(int j, int e, int g) {
  return FP8 ? 16 * j + 2 * g + (e >> 1) : 16 * j + g + 8 * (e >> 1);
}

/* Rotate pairs (x[kk][e], x[kk + KSTEPS/2][e]) by angle pos * freq[kk][e] (ROPE_LLAMA halves). */
template <int KSTEPS>
__device__ __forceinline__ void rotate_halves(float (&x)[KSTEPS][4], const float (&freq)[KSTEPS / 2][4], float pos) {
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
 * L2 (ld.global.cg): in the attention kernel other blocks of the running grid wrote the rows. */
template <int HEAD_DIM, int VEC>
__device__ __forceinline__ void merge_partial_rows(const ignis_decode_params &p, int64_t prow0, int64_t stride,
                                                   int k0, int k_step, int count, int lane, float (&acc)[VEC],
                                                   float &sum, float &mx) {
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
    for (int u = 0; u < MERGE_BATCH; ++u) {
      if (lse[u] == -CUDART_INF_F)
        continue;
      if (lse[u] > mx) { /* the same for the row's lanes */
        const float down = exp2f(mx - lse[u]);
        sum *= down;
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          acc[e] *= down;
        mx = lse[u];
      }
      const float w = exp2f(lse[u] - mx);
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        acc[e] = fmaf(w, x[u][e], acc[e]);
      sum += w;
    }
  }
}

/* Write N values (dims d0 ..) of a merged row, its weights summing to `sum` against the maximum mx
 * of their base-2 LSEs, scaled by scale / sum: into out / lse of query row out_row, head h, with the
 * head's sink joining here (final), or into partial row prow with its LSE. The LSE is written with
 * dim 0. */
template <typename QT, int HEAD_DIM, int N>
__device__ __forceinline__ void write_merged_row(const ignis_decode_params &p, float (&acc)[N], float sum, float mx,
                                                 float scale, int d0, bool final, int64_t out_row, int64_t h,
                                                 int64_t prow) {
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
    ignis_store_floats(static_cast<QT *>(p.out) + out_row * p.out_stride_batch + h * p.out_stride_head + d0, acc);
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
__device__ __forceinline__ void merge_block_rows(const ignis_decode_params &p, const decode_config &c, int64_t b,
                                                 int kvh, int64_t base, int64_t step, int count, bool final) {
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
    merge_partial_rows<HEAD_DIM, VEC>(p, prow0, step * p.q_len * p.num_qo_heads, 0, 1, count, lane, acc, sum, mx);
    write_merged_row<QT, HEAD_DIM, VEC>(p, acc, sum, mx, 1.0f, lane * VEC, final, b * p.q_len + tok, h, prow0);
  }
}

/* The merge of a split request inside the attention kernel (core/params.h: merge counters), run
 * by every block of a split item once its partial rows are written: the block counts itself in its
 * group's counter, and the last of the group merges it; with several groups the group mergers
 * count themselves on group 0's counter, and the last of them merges the groups. Every writer
 * fences before its block counts itself; a merger fences before it reads. A merger leaves its
 * counter zero (group 0's: the final merger) for the next run, e.g. a CUDA-graph replay.
 * ONE_WARP: the calling warp alone counts and merges KV head kvh (the page kernel: each consumer
 * warp its own head, so the merges of a request spread over the blocks and warps that finish last;
 * one block merging all 8 heads cost B1 L32k 52.8 against 49.7 us, B16 L16k 64/8 258.1 against
 * 256.4 us with the page kernel forced). */
template <typename QT, int HEAD_DIM, int ROWS_PER_WARP, bool ONE_WARP = false>
__device__ __forceinline__ void merge_in_kernel(const ignis_decode_params &p, const decode_config &c,
                                             const ignis_decode_work &item, int kvh) {
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
  const int32_t first = p.request_partials[b], n = p.request_partials[b + 1] - first;
  const int32_t g = (item.partial - first) / IGNIS_DECODE_MERGE_GROUP;
  const int32_t groups = (n + IGNIS_DECODE_MERGE_GROUP - 1) / IGNIS_DECODE_MERGE_GROUP;
  const int32_t members = min((int32_t)IGNIS_DECODE_MERGE_GROUP, n - g * IGNIS_DECODE_MERGE_GROUP);
  uint32_t *counters = reinterpret_cast<uint32_t *>(const_cast<ignis_decode_work *>(p.work) + *p.num_work);
  const int64_t group0 = first / IGNIS_DECODE_MERGE_GROUP + b;
  uint32_t *mine = counters + (group0 + g) * p.num_kv_heads + kvh, *level2 = counters + group0 * p.num_kv_heads + kvh;

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
  merge_block_rows<QT, HEAD_DIM, ROWS_PER_WARP, ONE_WARP>(p, c, b, kvh, first + g * IGNIS_DECODE_MERGE_GROUP, 1,
                                                         members, groups == 1);
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
  merge_block_rows<QT, HEAD_DIM, ROWS_PER_WARP, ONE_WARP>(p, c, b, kvh, first, IGNIS_DECODE_MERGE_GROUP, groups,
                                                         true);
}

/* ---- the query side of a warp ------------------------------------------------------------------- */
/* Q fragments and the facts of the score rows of one warp (m-tile mt of the block's rows; in the
 * transposed kernel the rows are the n index of Q^T). */
template <int HEAD_DIM, bool ROPE, bool TRANSPOSED> struct query_frags {
  static constexpr int KSTEPS = HEAD_DIM / 16, QROWS = TRANSPOSED ? 1 : 2;
  /* qa[kk] = {row g: e0 e1, row g+8: e0 e1, row g: e2 e3, row g+8: e2 e3}, the A fragment of Q K^T
   * (transposed: {row g: e0 e1, row g: e2 e3}, the B fragment of K Q^T) */
  uint32_t qa[KSTEPS][2 * QROWS];
  float row_scale[2];   /* of the score rows: base-2 (no transform) or natural factor of the raw scores */
  int32_t score_pos[2]; /* positions of the score rows' tokens */
  float slope[2];       /* ALiBi slopes of the score rows */
  float kfreq[ROPE ? KSTEPS / 2 : 1][4]; /* RoPE: frequencies of this lane's K dims */
};

/* Loads the Q fragments of KV head kvh's rows (m-tile mt; inactive: zero Q) for work item `item`
 * with key range r: RoPE applied, fp8 rows scaled into f16 range, the softmax scale folded into
 * row_scale. */
template <typename QT, int KIND, int HEAD_DIM, bool ROPE, bool TRANSPOSED>
__device__ __forceinline__ void load_query(const ignis_decode_params &p, const decode_config &c,
                                           const ignis_decode_work &item, const kv_range &r, int kvh, int mt,
                                           bool active, query_frags<HEAD_DIM, ROPE, TRANSPOSED> &q) {
  constexpr bool FP8 = KIND == KV_E4M3 || KIND == KV_E5M2;
  typedef typename mma_type<KIND>::type MT;
  constexpr int KSTEPS = HEAD_DIM / 16, QROWS = TRANSPOSED ? 1 : 2;
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
            ignis_unpack_word<QT>(__ldg(reinterpret_cast<const unsigned int *>(qp + frag_dim<FP8>(kk, e, t))), two);
          qf[h2][kk][e] = two[0];
          qf[h2][kk][e + 1] = two[1];
        }
    }
    /* (the same frequencies as kfreq below, computed again there rather than kept live from here:
     * reusing one table moved the RoPE instances' registers and stack, e.g. 232 -> 242) */
    float freq[KSTEPS / 2][4];
    if constexpr (ROPE) {
#pragma unroll
      for (int kk = 0; kk < KSTEPS / 2; ++kk)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          freq[kk][e] = p.rope_rcp_scale *
                        exp2f(-(float)(2 * frag_dim<FP8>(kk, e, t)) / HEAD_DIM * p.rope_log2_theta);
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
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            mx = fmaxf(mx, fabsf(qf[h2][kk][e]));
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
    for (int h2 = 0; h2 < 2; ++h2) /* transposed: score row 2t + h2 is the load row of lanes 4 (2t + h2) + t' */
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
            p.rope_rcp_scale * exp2f(-(float)(2 * frag_dim<FP8>(kk, e, t)) / HEAD_DIM * p.rope_log2_theta);
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
template <int HEAD_DIM, bool ROPE, bool TRANSPOSED>
__device__ __forceinline__ float general_score(const ignis_decode_params &p, const decode_config &c,
                                               const query_frags<HEAD_DIM, ROPE, TRANSPOSED> &q, float raw, int h2,
                                               int j, bool ok, bool row_masks) {
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

/* The transposed kernel's epilogue, one warp: sums l over the lanes of each row, then stores O
 * (rows 2t, 2t + 1 of the lanes g; dims as transposed_dim) as f32 rows of o_stride into wo and the
 * rows' m and l into wm, wl (store: false keeps only the sums, as an idle warp does). */
template <bool FP8, int OTILES>
__device__ __forceinline__ void store_transposed_rows(const float (&o)[OTILES][4], const float (&m)[2], float (&l)[2],
                                                      bool store, float *wo, int o_stride, float *wm, float *wl) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 4);
    l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 8);
    l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 16);
  }
  if (!store)
    return;
#pragma unroll
  for (int j = 0; j < OTILES; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      wo[(2 * t + (e & 1)) * o_stride + transposed_dim<FP8>(j, e, g)] = o[j][e];
  if (g == 0) {
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      wm[2 * t + h2] = m[h2];
      wl[2 * t + h2] = l[h2];
    }
  }
}

/* ---- 16 keys of the transposed kernel ----------------------------------------------------------- */
/* One warp's S^T = K Q^T, online softmax and O^T += V^T P^T over keys key0 .. key0 + 15 of a K and
 * a V tile (rows of ROW_BYTES, 16-byte chunks XOR-swizzled by SWIZZLE); key_abs0: the position of
 * key key0; key_bits: bit i set when key key0 + i is on a good page. after_scores() runs once the
 * K fragments are read (the split ring issues its next V copy there). */
template <int KIND, int HEAD_DIM, bool ROPE, int ROW_BYTES, int SWIZZLE, typename AfterScores>
__device__ __forceinline__ void transposed_keys16(const ignis_decode_params &p, const decode_config &c,
                                                  const query_frags<HEAD_DIM, ROPE, true> &q, uint32_t k_tile,
                                                  uint32_t v_tile, int key0, int key_abs0, uint32_t key_bits,
                                                  bool row_masks, float (&o)[HEAD_DIM / 16][4], float (&m)[2],
                                                  float (&l)[2], AfterScores after_scores) {
  constexpr bool FP8 = KIND == KV_E4M3 || KIND == KV_E5M2;
  constexpr bool BF16 = KIND == KV_BF16;
  typedef typename mma_type<KIND>::type MT;
  constexpr int KSTEPS = HEAD_DIM / 16, OTILES = HEAD_DIM / 16;
  const int lane = threadIdx.x & 31, g = lane >> 2;
  const int mi = lane >> 3, mrow = lane & 7;
  /* S^T = K Q^T: A = K (the sub-tile's 16 keys x the 16 dims of a k-step), B = Q^T; element e
   * of s: key key0 + g + 8 (e >> 1), score row 2t + (e & 1). Even and odd k-steps accumulate
   * apart (two chains of dependent mma instead of one). */
  float s2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  /* A fragments of k-steps kk, kk + 1 (fp8: one ldmatrix) or kk (16-bit): {key g: e0 e1,
   * key g+8: e0 e1, key g: e2 e3, key g+8: e2 e3}, e the dims of frag_dim */
  auto load_k = [&](int kk, uint32_t (&ka)[2][4]) {
    if constexpr (!FP8) {
      ldmatrix_x4(k_tile + swizzled<ROW_BYTES, SWIZZLE>(key0 + mrow + (mi & 1) * 8, 2 * kk + (mi >> 1)), ka[0]);
    } else {
      /* x[2i], x[2i + 1]: keys g, g + 8 (dims 4t..4t+3 of 16-dim chunk kk + i) */
      uint32_t x[4];
      ldmatrix_x4(k_tile + swizzled<ROW_BYTES, SWIZZLE>(key0 + mrow + (mi & 1) * 8, kk + (mi >> 1)), x);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        fp8x4_to_f16x2x2<KIND>(x[2 * i], ka[i][0], ka[i][2]);
        fp8x4_to_f16x2x2<KIND>(x[2 * i + 1], ka[i][1], ka[i][3]);
      }
    }
  };
  constexpr int KSTEP_LOAD = FP8 ? 2 : 1; /* k-steps one load_k covers */
  if constexpr (!ROPE) {
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk += KSTEP_LOAD) {
      uint32_t ka[2][4];
      load_k(kk, ka);
#pragma unroll
      for (int i = 0; i < KSTEP_LOAD; ++i)
        mma16816<BF16>(s2[(kk + i) & 1], ka[i], q.qa[kk + i][0], q.qa[kk + i][1]);
    }
  } else {
    /* all k-steps first: RoPE pairs dims d and d + HEAD_DIM / 2 (k-steps kk and kk + KSTEPS / 2) */
    uint32_t kall[KSTEPS][4];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; kk += KSTEP_LOAD) {
      uint32_t ka[2][4];
      load_k(kk, ka);
#pragma unroll
      for (int i = 0; i < KSTEP_LOAD; ++i)
#pragma unroll
        for (int q4 = 0; q4 < 4; ++q4)
          kall[kk + i][q4] = ka[i][q4];
    }
#pragma unroll
    for (int n = 0; n < 2; ++n) { /* key g + 8n: registers n (e0 e1) and n + 2 (e2 e3) */
      float kf[KSTEPS][4];
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        ignis_unpack_word<MT>(kall[kk][n], &kf[kk][0]);
        ignis_unpack_word<MT>(kall[kk][n + 2], &kf[kk][2]);
      }
      rotate_halves<KSTEPS>(kf, q.kfreq, (float)(key_abs0 + n * 8 + g));
#pragma unroll
      for (int kk = 0; kk < KSTEPS; ++kk) {
        kall[kk][n] = ignis_pack_word<MT>(&kf[kk][0]);
        kall[kk][n + 2] = ignis_pack_word<MT>(&kf[kk][2]);
      }
    }
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
      mma16816<BF16>(s2[kk & 1], kall[kk], q.qa[kk][0], q.qa[kk][1]);
  }
  float s[4];
#pragma unroll
  for (int e = 0; e < 4; ++e)
    s[e] = s2[0][e] + s2[1][e];
  after_scores();

  /* scores (base 2) and masks; the key of element e is bit g + 8 (e >> 1) of bits */
  const uint32_t bits = key_bits >> g;
  if (!c.transform && !row_masks) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      s[e] = (bits >> (8 * (e >> 1))) & 1u ? s[e] * q.row_scale[e & 1] : -CUDART_INF_F;
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      s[e] = general_score(p, c, q, s[e], e & 1, key_abs0 + g + 8 * (e >> 1), (bits >> (8 * (e >> 1))) & 1u, row_masks);
  }
  /* online softmax by score row, a column of S^T: its 16 keys are elements h2 and h2 + 2 of
   * the 8 lanes g (same t) */
  float pr[4], rescales[2];
#pragma unroll
  for (int h2 = 0; h2 < 2; ++h2) {
    float mx = fmaxf(s[h2], s[h2 + 2]);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    const float m_use = online_max<true>(m[h2], mx, &rescales[h2]);
    pr[h2] = exp2_approx(s[h2] - m_use);
    pr[h2 + 2] = exp2_approx(s[h2 + 2] - m_use);
    l[h2] = fmaf(l[h2], rescales[h2], pr[h2] + pr[h2 + 2]);
  }
  /* P^T as the B fragment of V^T P^T (keys 2t, 2t+1 | 2t+8, 2t+9 of row g): each 8-key half of
   * the C fragment (key g | g+8 of rows 2t, 2t+1) transposed across the warp */
  const uint32_t pb0 = movmatrix_trans(ignis_pack_word<MT>(&pr[0]));
  const uint32_t pb1 = movmatrix_trans(ignis_pack_word<MT>(&pr[2]));
  rescale_rows<true>(o, rescales);

  /* O^T += V^T P^T: A = V^T (16 dims x the 16 keys) by ldmatrix.trans; o[j][e] is score row
   * 2t + (e & 1) of dim transposed_dim(j, e) */
  if constexpr (!FP8) {
#pragma unroll
    for (int j = 0; j < OTILES; ++j) {
      uint32_t va[4]; /* dims g | g+8 of keys 2t, 2t+1 | 2t+8, 2t+9 */
      ldmatrix_x4_trans(v_tile + swizzled<ROW_BYTES, SWIZZLE>(key0 + mrow + (mi >> 1) * 8, 2 * j + (mi & 1)), va);
      mma16816<BF16>(o[j], va, pb0, pb1);
    }
  } else {
#pragma unroll
    for (int cc = 0; cc < ROW_BYTES / 16; cc += 2) {
      uint32_t x[4]; /* x[2 half], x[2 half + 1]: keys 0-7, 8-15 of 16-dim chunk cc + half */
      ldmatrix_x4_trans(v_tile + swizzled<ROW_BYTES, SWIZZLE>(key0 + mrow + (mi & 1) * 8, cc + (mi >> 1)), x);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        /* bytes {key 2t: dims 2g, 2g+1; key 2t+1: dims 2g, 2g+1} -> {dim 2g: keys 2t, 2t+1;
         * dim 2g+1: keys 2t, 2t+1}: m-row g is dim 2g, m-row g+8 dim 2g+1 */
        const uint32_t first = __byte_perm(x[2 * half], 0, 0x3120);
        const uint32_t second = __byte_perm(x[2 * half + 1], 0, 0x3120);
        uint32_t va[4];
        fp8x4_to_f16x2x2<KIND>(first, va[0], va[1]);
        fp8x4_to_f16x2x2<KIND>(second, va[2], va[3]);
        mma16816<false>(o[cc + half], va, pb0, pb1);
      }
    }
  }
}

/* ---- attention ----------------------------------------------------------------------------------- */
template <typename QT, int KIND, int HEAD_DIM, bool ROPE, bool TRANSPOSED>
__global__ void __launch_bounds__(DECODE_THREADS)
    decode_attention_kernel(const ignis_decode_params p, const decode_config c) {
  constexpr bool FP8 = KIND == KV_E4M3 || KIND == KV_E5M2;
  constexpr bool BF16 = KIND == KV_BF16;
  constexpr int KV_BYTES = FP8 ? 1 : 2;
  typedef decode_tile<HEAD_DIM, KV_BYTES, TRANSPOSED> tile;
  typedef typename mma_type<KIND>::type MT;
  constexpr int KSTEPS = HEAD_DIM / 16; /* k-steps of Q K^T (S^T = K Q^T) */
  /* O accumulator tiles: n-tiles of 8 dims of P V, or m-tiles of 16 dims of V^T P^T */
  constexpr int OTILES = TRANSPOSED ? HEAD_DIM / 16 : HEAD_DIM / 8;
  extern __shared__ __align__(128) unsigned char decode_smem[];
  const uint32_t smem_base = (uint32_t)__cvta_generic_to_shared(decode_smem);
  const char **rows_at = reinterpret_cast<const char **>(decode_smem + tile::RING_BYTES); /* [slot][key][K, V] */
  uint32_t *valid_bits = reinterpret_cast<uint32_t *>(decode_smem + tile::RING_BYTES + tile::SLOTS * DECODE_KT * 16);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int kvh = (int)(blockIdx.x % (unsigned)p.num_kv_heads);
  const int64_t work_index = blockIdx.x / (unsigned)p.num_kv_heads;
  const int mt_slot = warp % c.mt_warps, ks = warp / c.mt_warps;

  /* the item comes from the schedule before the wait on the previous kernel: the plan's copy of
   * it lands before any kernel this launch can overlap. (Its key range too, where the index
   * arrays are the plan's copies, cost 40 registers: not done.) */
  ignis_decode_work item;
  kv_range r;
  const bool fetched = fetch_item(p, c, (int)work_index, &item);
  ignis_pdl_wait();
  if (!fetched || !item_range(p, item, &r))
    return;
  const int num_tiles = (r.end - r.start + DECODE_KT - 1) / DECODE_KT;
  const bool row_masks = p.q_len > 1 || p.window_left >= 0;
  const char *k_base = static_cast<const char *>(p.cache.k_cache) + kvh * p.cache.k_stride_head * KV_BYTES;
  const char *v_base = static_cast<const char *>(p.cache.v_cache) + kvh * p.cache.v_stride_head * KV_BYTES;

  /* Page of key `start + tile * KT + tid` (threads 0..KT-1), -1 when masked. */
  auto lookup_page = [&](int tl) -> int32_t {
    const int64_t j = (int64_t)r.start + (int64_t)tl * DECODE_KT + tid;
    return j < r.end ? page_of_key(p, r, (int32_t)j) : -1;
  };
  /* Addresses of that key's K and V rows (NULL when masked) and the tile's validity bits. */
  auto store_rows = [&](int tl, int32_t page) {
    const int64_t j = (int64_t)r.start + (int64_t)tl * DECODE_KT + tid;
    const char *kp = nullptr, *vp = nullptr;
    if (page >= 0) {
      const int64_t slot = (uint32_t)j % (uint32_t)r.page_size;
      kp = k_base + (page * p.cache.k_stride_page + slot * p.cache.k_stride_token) * KV_BYTES;
      vp = v_base + (page * p.cache.v_stride_page + slot * p.cache.v_stride_token) * KV_BYTES;
    }
    const int at = tl % tile::SLOTS;
    rows_at[(at * DECODE_KT + tid) * 2] = kp;
    rows_at[(at * DECODE_KT + tid) * 2 + 1] = vp;
    const uint32_t bits = __ballot_sync(0xffffffffu, page >= 0);
    if ((tid & 31) == 0)
      valid_bits[at * (DECODE_KT / 32) + tid / 32] = bits;
  };
  /* Copies of tile tl into its stage: thread tid copies chunk tid % CHUNKS of rows
   * tid / CHUNKS + i * (THREADS / CHUNKS). When the row step is a multiple of the swizzle period
   * the swizzle is the same for all of a thread's rows. */
  const int copy_chunk = tid % tile::CHUNKS, copy_row0 = tid / tile::CHUNKS;
  constexpr int ROW_STEP = DECODE_THREADS / tile::CHUNKS;
  constexpr bool ONE_SWIZZLE = ROW_STEP % (tile::SWIZZLE + 1) == 0;
  /* shared-memory K and V tiles of tile tl */
  auto k_tile_of = [&](int tl) -> uint32_t {
    return smem_base + (tile::SPLIT ? (2 * tl) % 3 : (tl % tile::STAGES) * 2) * tile::TILE_BYTES;
  };
  auto v_tile_of = [&](int tl) -> uint32_t {
    return smem_base + (tile::SPLIT ? (2 * tl + 1) % 3 : (tl % tile::STAGES) * 2 + 1) * tile::TILE_BYTES;
  };
  /* copy_k, copy_v: which of the two (both outside the split ring) */
  auto issue_tile = [&](int tl, bool copy_k, bool copy_v) {
    const uint32_t k_tile = k_tile_of(tl), v_tile = v_tile_of(tl);
    const char *const *at = rows_at + (size_t)(tl % tile::SLOTS) * DECODE_KT * 2;
#pragma unroll
    for (int i = 0; i < tile::ROWS_PER_THREAD; ++i) {
      const int row = copy_row0 + i * ROW_STEP;
      const uint32_t dst = ONE_SWIZZLE ? swizzled<tile::ROW_BYTES, tile::SWIZZLE>(copy_row0, copy_chunk) +
                                             i * ROW_STEP * tile::ROW_BYTES
                                       : swizzled<tile::ROW_BYTES, tile::SWIZZLE>(row, copy_chunk);
      const char *kp = at[row * 2], *vp = at[row * 2 + 1];
      const bool ok = kp != nullptr;
      if (copy_k)
        copy_async16(k_tile + dst, ok ? kp + copy_chunk * 16 : k_base, ok);
      if (copy_v)
        copy_async16(v_tile + dst, ok ? vp + copy_chunk * 16 : v_base, ok);
    }
  };

  for (int pass_base = 0; pass_base < c.mtiles; pass_base += c.mt_warps) {
    const int mt = pass_base + mt_slot;
    const bool active = mt < c.mtiles;

    query_frags<HEAD_DIM, ROPE, TRANSPOSED> q;
    load_query<QT, KIND, HEAD_DIM, ROPE, TRANSPOSED>(p, c, item, r, kvh, mt, active, q);
    const auto &qa = q.qa;
    const auto &row_scale = q.row_scale;
    const auto &kfreq = q.kfreq;

    float o[OTILES][4];
#pragma unroll
    for (int j = 0; j < OTILES; ++j)
      o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.0f, 0.0f};

    /* prologue: row addresses of tiles 0..STAGES-1, copies of tiles 0..STAGES-2, page of tile STAGES */
    if (tid < DECODE_KT)
      for (int tl = 0; tl < tile::STAGES; ++tl)
        store_rows(tl, tl < num_tiles ? lookup_page(tl) : -1);
    __syncthreads();
    if constexpr (tile::SPLIT) { /* K and V of tile 0, apart */
      if (num_tiles > 0)
        issue_tile(0, true, false);
      copy_async_commit();
      if (num_tiles > 0)
        issue_tile(0, false, true);
      copy_async_commit();
    } else {
#pragma unroll
      for (int tl = 0; tl < tile::STAGES - 1; ++tl) {
        if (tl < num_tiles)
          issue_tile(tl, true, true);
        copy_async_commit();
      }
    }
    /* pages of tiles STAGES .. STAGES + LOOKAHEAD - 1, loaded LOOKAHEAD iterations before use so
     * that a page-table read never holds up an iteration, even when loads queue behind the stream */
    int32_t pending[DECODE_LOOKAHEAD];
#pragma unroll
    for (int i = 0; i < DECODE_LOOKAHEAD; ++i)
      pending[i] = tid < DECODE_KT && tile::STAGES + i < num_tiles ? lookup_page(tile::STAGES + i) : -1;

    for (int tl = 0; tl < num_tiles; ++tl) {
      /* split ring: K of tile tl is in (V may not be) and every warp is done with tile tl - 1 */
      copy_async_wait<tile::SPLIT ? 1 : tile::STAGES - 2>();
      __syncthreads();
      if (tl + tile::STAGES - 1 < num_tiles)
        issue_tile(tl + tile::STAGES - 1, true, !tile::SPLIT);
      copy_async_commit();
      if (tid < DECODE_KT && tl + tile::STAGES < num_tiles) {
        store_rows(tl + tile::STAGES, pending[0]);
#pragma unroll
        for (int i = 0; i + 1 < DECODE_LOOKAHEAD; ++i)
          pending[i] = pending[i + 1];
        pending[DECODE_LOOKAHEAD - 1] =
            tl + tile::STAGES + DECODE_LOOKAHEAD < num_tiles ? lookup_page(tl + tile::STAGES + DECODE_LOOKAHEAD) : -1;
      }
      if (!active)
        continue;

      const uint32_t k_tile = k_tile_of(tl), v_tile = v_tile_of(tl);
      const uint32_t *tile_valid = valid_bits + (tl % tile::SLOTS) * (DECODE_KT / 32);
      const int tile_key0 = r.start + tl * DECODE_KT;
      /* transposed: one m-tile, so each warp takes exactly one sub-tile (the split ring's barrier
       * inside relies on it) */
      for (int sub = ks; sub < DECODE_KT / 16; sub += TRANSPOSED ? DECODE_WARPS : c.ksplit) {
        const int key0 = sub * 16;
        const int mi = lane >> 3, mrow = lane & 7;
        if constexpr (TRANSPOSED) {
          transposed_keys16<KIND, HEAD_DIM, ROPE, tile::ROW_BYTES, tile::SWIZZLE>(
              p, c, q, k_tile, v_tile, key0, tile_key0 + key0, (tile_valid[key0 >> 5] >> (key0 & 31)) & 0xffffu,
              row_masks, o, m, l, [&] {
                if constexpr (tile::SPLIT) {
                  /* every warp has read K of tile tl (each takes one sub-tile: rows <= 8 is one m-tile
                   * and 4 key splits): its slot takes V of tile tl + 1, once V of tile tl is in */
                  copy_async_wait<1>();
                  __syncthreads();
                  if (tl + 1 < num_tiles)
                    issue_tile(tl + 1, false, true);
                  copy_async_commit();
                }
              });
        } else {
          float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
          /* K fragments of k-steps kk, kk + 1 (fp8: one ldmatrix) or kk (16-bit): kb[i][n] = {b0b1, b2b3}
           * of n-tile n (keys key0 + 8n .. +7) */
          auto load_k = [&](int kk, uint32_t (&kb)[2][2][2]) {
            uint32_t x[4];
            if constexpr (!FP8) {
              ldmatrix_x4(k_tile + swizzled<tile::ROW_BYTES, tile::SWIZZLE>(key0 + mrow + (mi >> 1) * 8, 2 * kk + (mi & 1)), x);
              kb[0][0][0] = x[0];
              kb[0][0][1] = x[1];
              kb[0][1][0] = x[2];
              kb[0][1][1] = x[3];
            } else {
              ldmatrix_x4(k_tile + swizzled<tile::ROW_BYTES, tile::SWIZZLE>(key0 + mrow + (mi & 1) * 8, kk + (mi >> 1)), x);
#pragma unroll
              for (int q2 = 0; q2 < 4; ++q2) {
                fp8x4_to_f16x2x2<KIND>(x[q2], kb[q2 >> 1][q2 & 1][0], kb[q2 >> 1][q2 & 1][1]);
              }
            }
          };
          constexpr int KSTEP_LOAD = FP8 ? 2 : 1; /* k-steps one load_k covers */
          if constexpr (!ROPE) {
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk += KSTEP_LOAD) {
              uint32_t kb[2][2][2];
              load_k(kk, kb);
#pragma unroll
              for (int i = 0; i < KSTEP_LOAD; ++i) {
                mma16816<BF16>(s[0], qa[kk + i], kb[i][0][0], kb[i][0][1]);
                mma16816<BF16>(s[1], qa[kk + i], kb[i][1][0], kb[i][1][1]);
              }
            }
          } else {
            /* all k-steps first: RoPE pairs dims d and d + HEAD_DIM / 2 (k-steps kk and kk + KSTEPS / 2) */
            uint32_t kall[KSTEPS][2][2];
#pragma unroll
            for (int kk = 0; kk < KSTEPS; kk += KSTEP_LOAD) {
              uint32_t kb[2][2][2];
              load_k(kk, kb);
#pragma unroll
              for (int i = 0; i < KSTEP_LOAD; ++i)
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                  kall[kk + i][n][0] = kb[i][n][0];
                  kall[kk + i][n][1] = kb[i][n][1];
                }
            }
#pragma unroll
            for (int n = 0; n < 2; ++n) {
              float kf[KSTEPS][4];
#pragma unroll
              for (int kk = 0; kk < KSTEPS; ++kk) {
                ignis_unpack_word<MT>(kall[kk][n][0], &kf[kk][0]);
                ignis_unpack_word<MT>(kall[kk][n][1], &kf[kk][2]);
              }
              rotate_halves<KSTEPS>(kf, kfreq, (float)(tile_key0 + key0 + n * 8 + g));
#pragma unroll
              for (int kk = 0; kk < KSTEPS; ++kk) {
                kall[kk][n][0] = ignis_pack_word<MT>(&kf[kk][0]);
                kall[kk][n][1] = ignis_pack_word<MT>(&kf[kk][2]);
              }
            }
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
              mma16816<BF16>(s[0], qa[kk], kall[kk][0][0], kall[kk][0][1]);
              mma16816<BF16>(s[1], qa[kk], kall[kk][1][0], kall[kk][1][1]);
            }
          }

          /* scores (base 2) and masks; element (n, e): row g + 8 * (e >> 1), key key0 + 8n + 2t + (e & 1) */
          const uint32_t bits = tile_valid[key0 >> 5] >> ((key0 & 31) + 2 * t);
          if (!c.transform && !row_masks) {
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                s[n][e] = (bits >> (n * 8 + (e & 1))) & 1u ? s[n][e] * row_scale[e >> 1] : -CUDART_INF_F;
          } else {
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const bool ok = (bits >> (n * 8 + (e & 1))) & 1u;
                s[n][e] = general_score(p, c, q, s[n][e], e >> 1, tile_key0 + key0 + n * 8 + 2 * t + (e & 1), ok, row_masks);
              }
          }
          uint32_t pa[4];
          float rescales[2];
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2) {
            float mx = fmaxf(fmaxf(s[0][2 * h2], s[0][2 * h2 + 1]), fmaxf(s[1][2 * h2], s[1][2 * h2 + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_use = online_max<true>(m[h2], mx, &rescales[h2]);
            float pr[2][2];
#pragma unroll
            for (int n = 0; n < 2; ++n)
#pragma unroll
              for (int e = 0; e < 2; ++e)
                pr[n][e] = exp2_approx(s[n][2 * h2 + e] - m_use);
            l[h2] = fmaf(l[h2], rescales[h2], (pr[0][0] + pr[0][1]) + (pr[1][0] + pr[1][1]));
            pa[h2] = ignis_pack_word<MT>(pr[0]);
            pa[2 + h2] = ignis_pack_word<MT>(pr[1]);
          }
          rescale_rows<false>(o, rescales);

          /* O += P V */
          if constexpr (!FP8) {
#pragma unroll
            for (int j = 0; j < OTILES; j += 2) {
              uint32_t x[4];
              ldmatrix_x4_trans(v_tile + swizzled<tile::ROW_BYTES, tile::SWIZZLE>(key0 + mrow + (mi & 1) * 8, j + (mi >> 1)), x);
              mma16816<BF16>(o[j], pa, x[0], x[1]);
              mma16816<BF16>(o[j + 1], pa, x[2], x[3]);
            }
          } else {
#pragma unroll
            for (int cc = 0; cc < tile::CHUNKS; cc += 2) {
              uint32_t x[4];
              ldmatrix_x4_trans(v_tile + swizzled<tile::ROW_BYTES, tile::SWIZZLE>(key0 + mrow + (mi & 1) * 8, cc + (mi >> 1)), x);
#pragma unroll
              for (int half = 0; half < 2; ++half) {
                /* bytes {key 2t: dims 2g, 2g+1; key 2t+1: dims 2g, 2g+1} -> even dims, odd dims */
                const uint32_t lo = __byte_perm(x[2 * half], 0, 0x3120), hi = __byte_perm(x[2 * half + 1], 0, 0x3120);
                const int tile_even = 2 * (cc + half);
                uint32_t lo01, lo23, hi01, hi23;
                fp8x4_to_f16x2x2<KIND>(lo, lo01, lo23);
                fp8x4_to_f16x2x2<KIND>(hi, hi01, hi23);
                mma16816<false>(o[tile_even], pa, lo01, hi01);
                mma16816<false>(o[tile_even + 1], pa, lo23, hi23);
              }
            }
          }
        }
      }
    }
    copy_async_wait<0>();
    __syncthreads(); /* every warp is done with the ring: reuse it for the split merge */

    /* each warp leaves its O (f32, by dim), m and l (summed over the lanes of a row) in shared memory */
    float *merge_o = reinterpret_cast<float *>(decode_smem);
    float *merge_m = merge_o + DECODE_WARPS * 16 * tile::O_STRIDE, *merge_l = merge_m + DECODE_WARPS * 16;
    float *wo = merge_o + (size_t)warp * 16 * tile::O_STRIDE;
    if constexpr (TRANSPOSED) { /* rows 2t, 2t + 1 of the lanes g */
      store_transposed_rows<FP8>(o, m, l, active, wo, tile::O_STRIDE, merge_m + warp * 16, merge_l + warp * 16);
    } else { /* rows g, g + 8 of the quads */
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 1);
        l[h2] += __shfl_xor_sync(0xffffffffu, l[h2], 2);
      }
      if (active) {
#pragma unroll
        for (int j = 0; j < OTILES; ++j)
#pragma unroll
          for (int h2 = 0; h2 < 2; ++h2) {
            float *at = wo + (g + h2 * 8) * tile::O_STRIDE;
            if constexpr (FP8) { /* dims 4t + (j & 1) and that + 2 of 16-dim chunk j / 2 */
              at[16 * (j >> 1) + 4 * t + (j & 1)] = o[j][2 * h2];
              at[16 * (j >> 1) + 4 * t + (j & 1) + 2] = o[j][2 * h2 + 1];
            } else {
              *reinterpret_cast<float2 *>(at + 8 * j + 2 * t) = make_float2(o[j][2 * h2], o[j][2 * h2 + 1]);
            }
          }
        if (t == 0) {
          merge_m[warp * 16 + g] = m[0];
          merge_m[warp * 16 + g + 8] = m[1];
          merge_l[warp * 16 + g] = l[0];
          merge_l[warp * 16 + g + 8] = l[1];
        }
      }
    }
    __syncthreads();
    ignis_pdl_launch_dependents();

    /* combine the key splits and write: one thread per (m-tile slot, row, 8 dims) */
    constexpr int PIECES = HEAD_DIM / 8;
    for (int idx = tid; idx < c.mt_warps * 16 * PIECES; idx += DECODE_THREADS) {
      const int slot = idx / (16 * PIECES), row16 = (idx / PIECES) % 16, d0 = (idx % PIECES) * 8;
      const int row = (pass_base + slot) * 16 + row16;
      if (pass_base + slot >= c.mtiles || row >= c.rows)
        continue;
      float mx = -CUDART_INF_F;
      for (int s2 = 0; s2 < c.ksplit; ++s2)
        mx = fmaxf(mx, merge_m[(s2 * c.mt_warps + slot) * 16 + row16]);
      float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, sum = 0.0f;
      if (mx != -CUDART_INF_F) {
        for (int s2 = 0; s2 < c.ksplit; ++s2) {
          const int w = s2 * c.mt_warps + slot;
          const float wt = exp2f(merge_m[w * 16 + row16] - mx);
          sum = fmaf(merge_l[w * 16 + row16], wt, sum);
          const float4 *src = reinterpret_cast<const float4 *>(merge_o + ((size_t)w * 16 + row16) * tile::O_STRIDE + d0);
          const float4 lo = src[0], hi = src[1];
          const float x[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
          for (int e = 0; e < 8; ++e)
            acc[e] = fmaf(x[e], wt, acc[e]);
        }
      }
      const int tok = row / c.group;
      const int64_t h = (int64_t)kvh * c.group + row % c.group;
      /* a whole request writes out (the sink joins here), a chunk its partial row */
      write_merged_row<QT, HEAD_DIM, 8>(p, acc, sum, mx, p.v_scale, d0, item.partial < 0,
                                        (int64_t)item.request * p.q_len + tok, h,
                                        ((int64_t)item.partial * p.q_len + tok) * p.num_qo_heads + h);
    }
    __syncthreads();
  }
  /* the other kernel keeps the merge kernel: the merge code inlined there costs it registers
   * (168 -> 192 at head dim 128, 3 -> 2 blocks per SM) */
  if constexpr (TRANSPOSED)
    if (c.fused_merge && item.partial >= 0)
      merge_in_kernel<QT, HEAD_DIM, 1>(p, c, item, kvh);
}

/* ---- page kernel ----------------------------------------------------------------------------------- */
/* Shape of decode_page_kernel (see the header): 8 consumer warps (a KV head each) and a producer
 * warp; a ring of PAGE_STAGES slots, each the K and the V of 16 tokens x 8 heads as they lie in the
 * cache (two 32 KB bulk copies); a private 16-key K and V tile per consumer warp, swizzled as the
 * transposed kernel's tiles. One block per SM. */
enum {
  PAGE_HEADS = 8,
  PAGE_TOKENS = 16,
  PAGE_STAGES = 2,
  PAGE_THREADS = (PAGE_HEADS + 1) * 32,
  PAGE_ROW_BYTES = 256, /* head dim 128, 16-bit */
  PAGE_KV_BYTES = PAGE_TOKENS * PAGE_HEADS * PAGE_ROW_BYTES,
  PAGE_TILE_BYTES = PAGE_TOKENS * PAGE_ROW_BYTES,
  PAGE_O_STRIDE = 128 + 8, /* f32 O rows of the epilogue, in a warp's private tiles */
  PAGE_PRIVATE_OFFSET = PAGE_STAGES * 2 * PAGE_KV_BYTES,
  PAGE_BAR_OFFSET = PAGE_PRIVATE_OFFSET + PAGE_HEADS * 2 * PAGE_TILE_BYTES,
  PAGE_SMEM_BYTES = PAGE_BAR_OFFSET + 2 * PAGE_STAGES * 8 + PAGE_STAGES * 4
};
static_assert(DECODE_TRANSPOSED_ROWS * PAGE_O_STRIDE * 4 + 2 * DECODE_TRANSPOSED_ROWS * 4 <= 2 * PAGE_TILE_BYTES,
              "page kernel epilogue space");

template <typename QT, int KIND, bool ROPE>
__global__ void __launch_bounds__(PAGE_THREADS, 1)
    decode_page_kernel(const ignis_decode_params p, const decode_config c) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int HEAD_DIM = 128;
  extern __shared__ __align__(128) unsigned char decode_smem[];
  const uint32_t smem = (uint32_t)__cvta_generic_to_shared(decode_smem);
  const uint32_t full0 = smem + PAGE_BAR_OFFSET, empty0 = full0 + PAGE_STAGES * 8;
  uint32_t *valid = reinterpret_cast<uint32_t *>(decode_smem + PAGE_BAR_OFFSET + 2 * PAGE_STAGES * 8);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  ignis_decode_work item;
  kv_range r;
  const bool fetched = fetch_item(p, c, (int)blockIdx.x, &item);
  if (tid == 0) {
    for (int s = 0; s < PAGE_STAGES; ++s) {
      mbar_init(full0 + 8 * s, 1);
      mbar_init(empty0 + 8 * s, PAGE_HEADS * 32); /* every consumer lane releases its own reads */
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  ignis_pdl_wait();
  if (!fetched || !item_range(p, item, &r))
    return; /* the whole block */
  /* stages: 16 keys from key0 = s0 + 16 s, inside one page (page size a multiple of 16) */
  const int32_t s0 = r.start & ~(PAGE_TOKENS - 1);
  const int stages = r.end > r.start ? (r.end - s0 + PAGE_TOKENS - 1) / PAGE_TOKENS : 0;

  if (warp == PAGE_HEADS) { /* producer */
    const char *k_cache = static_cast<const char *>(p.cache.k_cache);
    const char *v_cache = static_cast<const char *>(p.cache.v_cache);
    /* pages of stages (s & ~31) + lane and 32 later, read a window ahead */
    auto page_of_stage = [&](int st) { return st < stages ? page_of_key(p, r, s0 + st * PAGE_TOKENS) : -1; };
    int32_t lane_page = page_of_stage(lane), next_page = page_of_stage(32 + lane);
    for (int s = 0; s < stages; ++s) {
      if (s > 0 && (s & 31) == 0) {
        lane_page = next_page;
        next_page = page_of_stage(s + 32 + lane);
      }
      const int32_t page = __shfl_sync(0xffffffffu, lane_page, s & 31);
      const int slot = s % PAGE_STAGES;
      if (s >= PAGE_STAGES)
        mbar_wait(empty0 + 8 * slot, (s / PAGE_STAGES - 1) & 1);
      if (lane == 0) {
        const int32_t key0 = s0 + s * PAGE_TOKENS;
        const int lo = max(r.start - key0, 0), hi = min(r.end - key0, (int32_t)PAGE_TOKENS);
        valid[slot] = page >= 0 && hi > lo ? ((1u << hi) - 1u) & ~((1u << lo) - 1u) : 0u;
        const uint32_t full = full0 + 8 * slot, dst = smem + slot * 2 * PAGE_KV_BYTES;
        if (page >= 0) {
          const int64_t token = (uint32_t)key0 % (uint32_t)r.page_size;
          mbar_arrive_expect_tx(full, 2 * PAGE_KV_BYTES);
          bulk_copy_to_shared(dst, k_cache + (page * p.cache.k_stride_page + token * p.cache.k_stride_token) * 2,
                              PAGE_KV_BYTES, full);
          bulk_copy_to_shared(dst + PAGE_KV_BYTES,
                              v_cache + (page * p.cache.v_stride_page + token * p.cache.v_stride_token) * 2,
                              PAGE_KV_BYTES, full);
        } else {
          mbar_arrive(full); /* nothing to copy: the consumers zero the rows */
        }
      }
      __syncwarp();
    }
    ignis_pdl_launch_dependents();
  } else { /* consumer: KV head `warp` */
    const int kvh = warp;
    query_frags<HEAD_DIM, ROPE, true> q;
    load_query<QT, KIND, HEAD_DIM, ROPE, true>(p, c, item, r, kvh, 0, true, q);
    const bool row_masks = p.q_len > 1 || p.window_left >= 0;
    float o[HEAD_DIM / 16][4];
#pragma unroll
    for (int j = 0; j < HEAD_DIM / 16; ++j)
      o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-CUDART_INF_F, -CUDART_INF_F}, l[2] = {0.0f, 0.0f};
    const uint32_t k_tile = smem + PAGE_PRIVATE_OFFSET + warp * 2 * PAGE_TILE_BYTES, v_tile = k_tile + PAGE_TILE_BYTES;
    for (int s = 0; s < stages; ++s) {
      const int slot = s % PAGE_STAGES;
      mbar_wait(full0 + 8 * slot, (s / PAGE_STAGES) & 1);
      const uint32_t bits = valid[slot];
      /* this head's 16 K and V rows into the private tiles (rows of masked keys as zeros): lane
       * copies chunk lane % 16 of rows 2i + lane / 16 */
      const uint32_t src = smem + slot * 2 * PAGE_KV_BYTES + kvh * PAGE_ROW_BYTES;
#pragma unroll
      for (int i = 0; i < PAGE_TOKENS / 2; ++i) {
        const int row = 2 * i + (lane >> 4), chunk = lane & 15;
        const uint32_t at = src + row * (PAGE_HEADS * PAGE_ROW_BYTES) + chunk * 16;
        const uint32_t to = swizzled<PAGE_ROW_BYTES, 7>(row, chunk);
        uint4 kx = make_uint4(0, 0, 0, 0), vx = make_uint4(0, 0, 0, 0);
        if ((bits >> row) & 1u) {
          kx = load_shared16(at);
          vx = load_shared16(at + PAGE_KV_BYTES);
        }
        store_shared16(k_tile + to, kx);
        store_shared16(v_tile + to, vx);
      }
      __syncwarp();
      mbar_arrive(empty0 + 8 * slot);
      transposed_keys16<KIND, HEAD_DIM, ROPE, PAGE_ROW_BYTES, 7>(p, c, q, k_tile, v_tile, 0, s0 + s * PAGE_TOKENS,
                                                                  bits, row_masks, o, m, l, [] {});
      __syncwarp();
    }
    ignis_pdl_launch_dependents();

    /* epilogue: O (rows 2t, 2t + 1 of the lanes g) through the private tiles, a lane per 8 dims of a
     * row; a whole request writes out (the sink joins there), a chunk its partial row */
    float *wo = reinterpret_cast<float *>(decode_smem + PAGE_PRIVATE_OFFSET + warp * 2 * PAGE_TILE_BYTES);
    float *wm = wo + DECODE_TRANSPOSED_ROWS * PAGE_O_STRIDE, *wl = wm + DECODE_TRANSPOSED_ROWS;
    store_transposed_rows<false>(o, m, l, true, wo, PAGE_O_STRIDE, wm, wl);
    __syncwarp();
    for (int idx = lane; idx < c.rows * (HEAD_DIM / 8); idx += 32) {
      const int row = idx / (HEAD_DIM / 8), d0 = (idx % (HEAD_DIM / 8)) * 8;
      float acc[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc[e] = wo[row * PAGE_O_STRIDE + d0 + e];
      const int tok = row / c.group;
      const int64_t h = (int64_t)kvh * c.group + row % c.group;
      write_merged_row<QT, HEAD_DIM, 8>(p, acc, wl[row], wm[row], p.v_scale, d0, item.partial < 0,
                                        (int64_t)item.request * p.q_len + tok, h,
                                        ((int64_t)item.partial * p.q_len + tok) * p.num_qo_heads + h);
    }
  }
  /* a split item: each consumer warp counts on its own head's counters and, if last, merges it */
  if (item.partial >= 0 && warp < PAGE_HEADS)
    merge_in_kernel<QT, HEAD_DIM, 2, true>(p, c, item, warp);
#endif
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
  if (p.work == nullptr) {
    if (blockIdx.x > 0 || c.implicit_items <= 1)
      return;
    first = 0;
    last = c.implicit_items;
  } else {
    /* the schedule was copied before the attention kernel ran: readable before the wait */
    if ((int)blockIdx.x >= *p.batch_size)
      return;
    first = p.request_partials[blockIdx.x];
    last = p.request_partials[blockIdx.x + 1];
  }
  if (last <= first)
    return;
  ignis_pdl_wait();
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
  write_merged_row<QT, HEAD_DIM, VEC>(p, acc, sum, top, 1.0f, lane * VEC, true, (int64_t)blockIdx.x * q_len + tok, h,
                                      0);
}

/* ---- host side ------------------------------------------------------------------------------------ */
/* Whether a block of `rows` query rows takes the transposed kernel: rows <= DECODE_TRANSPOSED_ROWS,
 * or <= IGNIS_DECODE_TRANSPOSED_ROWS from the environment (0..8, read once; for measurements). */
static bool transposed_rows(int64_t rows) {
  static const int limit = [] {
    const char *value = getenv("IGNIS_DECODE_TRANSPOSED_ROWS");
    const int v = value ? atoi(value) : DECODE_TRANSPOSED_ROWS;
    return v >= 0 && v <= DECODE_TRANSPOSED_ROWS ? v : (int)DECODE_TRANSPOSED_ROWS;
  }();
  return rows <= limit;
}

static decode_config make_config(const ignis_decode_params &p) {
  decode_config c;
  c.group = (int32_t)(p.num_qo_heads / p.num_kv_heads);
  c.rows = c.group * p.q_len;
  c.mtiles = (c.rows + 15) / 16;
  c.mt_warps = c.mtiles >= 3 ? 4 : c.mtiles;
  c.ksplit = DECODE_WARPS / c.mt_warps;
  const int64_t len = p.contiguous_kv_len;
  int64_t chunk = p.implicit_chunk_tokens;
  if (chunk <= 0 || chunk >= len)
    chunk = len > 0 ? len : INT32_MAX; /* one item: the whole sequence */
  c.implicit_chunk = (int32_t)chunk;
  c.implicit_items = (int32_t)(len > 0 ? (len + chunk - 1) / chunk : 1);
  const attention_score_transform st = attention_score_transform_of(p.logits_soft_cap, p.pos_encoding, p.num_qo_heads);
  c.cap_in = st.cap_in;
  c.cap_out = st.cap_out;
  c.alibi_n = st.alibi_n;
  c.transform = p.logits_soft_cap > 0.0f || c.alibi_n > 0;
  c.fused_merge = p.work != nullptr && transposed_rows(c.rows);
  return c;
}

/* Whether the page kernel can run on the current device: compiled for sm_90 (its body is empty
 * below) and a device of compute capability >= 9.0. (IGNIS_DECODE_PAGE_KERNEL is the plan's,
 * op_decode.c.) */
static bool page_kernel_available() {
  static const bool compiled = strstr(IGNIS_CUDA_TARGETS, "sm_90") != nullptr;
  int device = 0;
  return compiled && cudaGetDevice(&device) == cudaSuccess && ignis_compute_capability(device) >= 90;
}

/* The call shapes the page kernel takes, as far as a plan knows them: 16-bit K/V at head dim 128,
 * rows for the transposed kernel, 8 KV heads, pages of a multiple of 16 tokens. */
static bool page_kernel_shape(int64_t head_dim, ignis_dtype kv_dtype, int64_t rows, int64_t num_kv_heads,
                              int64_t page_size) {
  return head_dim == 128 && (kv_dtype == IGNIS_F16 || kv_dtype == IGNIS_BF16) && transposed_rows(rows) &&
         num_kv_heads == PAGE_HEADS && page_size > 0 && page_size % PAGE_TOKENS == 0;
}

/* And at run time: the plan chose it for this batch (op_decode.c: a shape above, the kernel
 * available, an unsplit batch filling its waves), and the cache's 16 tokens x 8 heads of K (and of
 * V) are one contiguous run (head stride head_dim, token stride 8 x head_dim elements: NHD with 8
 * heads), which only the run knows. */
static bool page_kernel_runs(const ignis_decode_params &p) {
  const ignis_paged_kv_params &k = p.cache;
  return p.page_kernel && k.k_stride_head == p.head_dim && k.v_stride_head == p.head_dim &&
         k.k_stride_token == PAGE_HEADS * p.head_dim && k.v_stride_token == PAGE_HEADS * p.head_dim;
}

template <typename QT, int KIND, int HEAD_DIM, bool ROPE>
static ignis_status launch(const ignis_decode_params &p, cudaStream_t stream) {
  constexpr int KV_BYTES = (KIND == KV_E4M3 || KIND == KV_E5M2) ? 1 : 2;
  const decode_config c = make_config(p);
  size_t smem;
  void (*kernel)(const ignis_decode_params, const decode_config);
  int64_t heads_per_block = 1, threads = DECODE_THREADS;
  bool page = false;
  if constexpr (HEAD_DIM == 128 && (KIND == KV_F16 || KIND == KV_BF16)) {
    page = page_kernel_runs(p);
    if (page) {
      smem = PAGE_SMEM_BYTES;
      kernel = decode_page_kernel<QT, KIND, ROPE>;
      heads_per_block = PAGE_HEADS;
      threads = PAGE_THREADS;
      IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<decode_page_kernel<QT, KIND, ROPE>>(smem)));
    }
  }
  if (!page) {
    if (transposed_rows(c.rows)) {
      smem = decode_tile<HEAD_DIM, KV_BYTES, true>::SMEM_BYTES;
      kernel = decode_attention_kernel<QT, KIND, HEAD_DIM, ROPE, true>;
      IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<decode_attention_kernel<QT, KIND, HEAD_DIM, ROPE, true>>(smem)));
    } else {
      smem = decode_tile<HEAD_DIM, KV_BYTES, false>::SMEM_BYTES;
      kernel = decode_attention_kernel<QT, KIND, HEAD_DIM, ROPE, false>;
      IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<decode_attention_kernel<QT, KIND, HEAD_DIM, ROPE, false>>(smem)));
    }
  }
  /* outside a graph capture the grids fit this batch (and an unsplit batch has no merge); a
   * captured launch keeps the maxima so that its replays serve every later plan */
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    capture = cudaStreamCaptureStatusActive;
  }
  const bool exact = p.work != nullptr && p.launch_work > 0 && capture == cudaStreamCaptureStatusNone;
  const int64_t items = p.work == nullptr ? c.implicit_items : exact ? p.launch_work : p.max_work;
  if (items * p.num_kv_heads > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "decode: %lld work items x %lld KV heads exceed one grid",
                           (long long)items, (long long)p.num_kv_heads);
  if (items > 0 && p.num_kv_heads > 0) {
    IGNIS_CUDA_CHECK(ignis_launch(kernel, dim3((unsigned)(items * (p.num_kv_heads / heads_per_block))),
                                  dim3((unsigned)threads), smem, stream, p, c));
    const ignis_status status = ignis_check_launch("decode attention");
    if (status != IGNIS_OK)
      return status;
  }
  const int64_t merges = p.work == nullptr ? (c.implicit_items > 1 ? 1 : 0)
                         : c.fused_merge  ? 0
                         : exact          ? (p.launch_merge ? p.launch_batch : 0)
                                          : p.max_batch;
  const int64_t rows = (int64_t)p.q_len * p.num_qo_heads;
  if (merges > 0) {
    if (rows > 65535)
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "decode: %lld query rows per request exceed one merge grid",
                             (long long)rows);
    IGNIS_CUDA_CHECK(ignis_launch(decode_merge_kernel<QT, HEAD_DIM>, dim3((unsigned)merges, (unsigned)rows),
                                  dim3(MERGE_WARPS * 32), 0, stream, p, c));
    return ignis_check_launch("decode merge");
  }
  return IGNIS_OK;
}

template <typename QT, int KIND, bool ROPE> static ignis_status launch_head_dim(const ignis_decode_params &p, cudaStream_t s) {
  switch (p.head_dim) {
#ifdef IGNIS_WITH_HEAD_DIM_64
  case 64:
    return launch<QT, KIND, 64, ROPE>(p, s);
#endif
#ifdef IGNIS_WITH_HEAD_DIM_128
  case 128:
    return launch<QT, KIND, 128, ROPE>(p, s);
#endif
#ifdef IGNIS_WITH_HEAD_DIM_256
  case 256:
    return launch<QT, KIND, 256, ROPE>(p, s);
#endif
  default:
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "decode: head_dim %lld is not compiled in this build (IGNIS_HEAD_DIMS)",
                           (long long)p.head_dim);
  }
}

template <typename QT, int KIND> static ignis_status launch_rope(const ignis_decode_params &p, cudaStream_t s) {
  return p.pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA ? launch_head_dim<QT, KIND, true>(p, s)
                                                         : launch_head_dim<QT, KIND, false>(p, s);
}

template <typename QT> static ignis_status launch_kv(const ignis_decode_params &p, cudaStream_t s) {
  switch (p.cache.dtype) {
  case IGNIS_FP8_E4M3:
    return launch_rope<QT, KV_E4M3>(p, s);
  case IGNIS_FP8_E5M2:
    return launch_rope<QT, KV_E5M2>(p, s);
  default: /* the dtype of q */
    return launch_rope<QT, std::is_same<QT, __half>::value ? KV_F16 : KV_BF16>(p, s);
  }
}

/* Resident blocks per SM of one kernel instance on the current device (shared memory and
 * registers), from the runtime once per device: single decode and plan creation ask every time. */
template <typename QT, int KIND, int HEAD_DIM, bool TRANSPOSED> static int resident_blocks() {
  typedef decode_tile<HEAD_DIM, (KIND == KV_E4M3 || KIND == KV_E5M2) ? 1 : 2, TRANSPOSED> tile;
  return ignis_resident_blocks<decode_attention_kernel<QT, KIND, HEAD_DIM, false, TRANSPOSED>>(DECODE_THREADS,
                                                                                            tile::SMEM_BYTES);
}

template <int KIND, bool TRANSPOSED> static int resident_blocks_for(int64_t head_dim) {
  typedef typename std::conditional<KIND == KV_F16, __half, __nv_bfloat16>::type QT;
  switch (head_dim) {
#ifdef IGNIS_WITH_HEAD_DIM_64
  case 64:
    return resident_blocks<QT, KIND, 64, TRANSPOSED>();
#endif
#ifdef IGNIS_WITH_HEAD_DIM_256
  case 256:
    return resident_blocks<QT, KIND, 256, TRANSPOSED>();
#endif
#ifdef IGNIS_WITH_HEAD_DIM_128
  case 128:
    return resident_blocks<QT, KIND, 128, TRANSPOSED>();
#endif
  default:
    return 1;
  }
}

template <bool TRANSPOSED> static int resident_blocks_of(int64_t head_dim, ignis_dtype kv_dtype) {
  switch (kv_dtype) {
  case IGNIS_FP8_E4M3:
  case IGNIS_FP8_E5M2:
    return resident_blocks_for<KV_E4M3, TRANSPOSED>(head_dim);
  case IGNIS_F16:
    return resident_blocks_for<KV_F16, TRANSPOSED>(head_dim);
  default:
    return resident_blocks_for<KV_BF16, TRANSPOSED>(head_dim);
  }
}

extern "C" int ignis_cuda_decode_blocks_per_sm(int64_t head_dim, ignis_dtype kv_dtype, int64_t rows) {
  return transposed_rows(rows) ? resident_blocks_of<true>(head_dim, kv_dtype)
                               : resident_blocks_of<false>(head_dim, kv_dtype);
}

/* In units of (work item, KV head) blocks: the page kernel's blocks count PAGE_HEADS each. */
extern "C" int ignis_cuda_decode_page_blocks_per_sm(int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                                                    int64_t num_kv_heads, int64_t page_size) {
  if (!page_kernel_shape(head_dim, kv_dtype, rows, num_kv_heads, page_size) || !page_kernel_available())
    return 0;
  return ignis_resident_blocks<decode_page_kernel<__nv_bfloat16, KV_BF16, false>>(PAGE_THREADS, PAGE_SMEM_BYTES) *
         PAGE_HEADS;
}

extern "C" ignis_status ignis_cuda_decode(const ignis_decode_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  const ignis_decode_params &p = *params;
  if (!attention_operands_aligned(p.q, p.q_stride_batch, p.q_stride_head, p.out, p.out_stride_batch,
                                  p.out_stride_head, p.cache, p.contiguous_kv_len == 0 && p.cache.indptr != nullptr))
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "decode: q, out, k_cache and v_cache must be 16-byte aligned, with strides of "
                           "multiples of 16 bytes");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return attention_by_dtype(p.dtype, "decode", [&](auto qt) { return launch_kv<decltype(qt)>(p, s); });
}
