/* CUDA backend of decode attention (include/ignis/decode.h): q_len query tokens per request
 * against its paged or contiguous KV cache, with the results of the CPU backend. This file chooses
 * the kernel of a call and launches it; the kernels are in their own headers.
 *
 * An attention kernel, grid work items x KV heads (flat, KV head fastest, so the blocks reading the
 * heads of one page run side by side): block (w, kvh) runs work item w (keys [kv_start, kv_end) of
 * one request) for every query row of KV head kvh, so each K/V row is read from memory once for the
 * whole GQA group and all q_len tokens. A whole request writes out / lse directly; a chunk of a
 * split request writes f32 partial rows and their base-2 LSEs. Which kernel is chosen once, by
 * ignis_cuda_decode_choose at plan creation (single decode: per call), and the plan records it:
 *   - decode_attention_kernel (decode_attention.cuh): the transposed kernel for blocks of at most
 *     DECODE_TRANSPOSED_ROWS query rows, the m16 kernel for more and at head dim 512 (where its
 *     warps split the head dim; the transposed kernel has no instance there);
 *   - decode_page_kernel (decode_page.cuh) for the shapes it takes, on a batch the plan gave the
 *     page planner's schedule; a run whose cache layout it cannot read (only the run knows the
 *     strides) runs the transposed kernel over the same schedule.
 * Split requests merge inside the transposed and page kernels on planned schedules
 * (merge_in_kernel), else in decode_merge_kernel launched after the attention kernel (PDL between
 * them, ignis_launch). Outside a CUDA-graph capture both grids fit the planned batch and an unsplit
 * batch launches no merge; a captured run is sized for the plan's maxima. Without a work list
 * (single decode, block-table runs: core/params.h) the grid is the batch's requests x
 * implicit_splits items, captured or not. A block-table batch planned from its lengths is
 * planned by each block of the attention kernel for itself (decode_length_plan.cuh); the attention
 * grid is then the bound on its items (a wave), extra blocks exiting once planned, and the merge
 * kernel's (m16) the batch.
 *
 * The instances come from one list (decode_instances.cuh), compiled a head dim per translation unit
 * (decode_hd<d>.cu). */
#include <string.h>

#include "cuda/attention/decode_instances.cuh"
#include "cuda/attention/q_convert.cuh"
#include "cuda/common/cuda_common.cuh"
#include "ignis/decode.h"

/* Whether a block of `rows` query rows takes the transposed kernel: rows <= DECODE_TRANSPOSED_ROWS,
 * or <= IGNIS_DECODE_TRANSPOSED_ROWS from the environment (0..8, read once; for measurements). */
static bool transposed_rows(int64_t rows) {
  static const int limit = [] {
    const char *value = ignis_env(IGNIS_ENV_DECODE_TRANSPOSED_ROWS);
    const int v = value ? atoi(value) : DECODE_TRANSPOSED_ROWS;
    return v >= 0 && v <= DECODE_TRANSPOSED_ROWS ? v : (int)DECODE_TRANSPOSED_ROWS;
  }();
  return rows <= limit;
}

static decode_config make_config(const ignis_decode_params &p, decode_family family) {
  decode_config c;
  c.group = (int32_t)(p.num_qo_heads / p.num_kv_heads);
  c.rows = c.group * p.q_len;
  c.mtiles = (c.rows + 15) / 16;
  c.mt_warps = c.mtiles >= 3 ? 4 : c.mtiles;
  c.ksplit = DECODE_WARPS / c.mt_warps;
  c.implicit_chunk = (int32_t)(p.implicit_chunk_tokens > 0 ? p.implicit_chunk_tokens : INT32_MAX);
  c.implicit_splits = (int32_t)(p.implicit_splits > 0 ? p.implicit_splits : 1);
  c.implicit_items = (int32_t)(p.work == nullptr ? p.max_work : 0);
  const attention_score_transform st =
      attention_score_transform_of(p.logits_soft_cap, p.pos_encoding, p.num_qo_heads);
  c.cap_in = st.cap_in;
  c.cap_out = st.cap_out;
  c.alibi_n = st.alibi_n;
  c.transform = p.logits_soft_cap > 0.0f || c.alibi_n > 0;
  c.fused_merge = (p.work != nullptr || p.merge_counters != nullptr) && family != DECODE_MMA;
  c.block_plan = p.length_plan.wave_items > 0;
  return c;
}

/* Whether the page kernel can run on `device`: compiled for sm_90 (its body is empty otherwise)
 * and a device of compute capability >= 9.0. (IGNIS_DECODE_PAGE_KERNEL is the plan's, op_decode.c.) */
static bool page_kernel_available(int32_t device) {
  static const bool compiled = strstr(IGNIS_CUDA_TARGETS, "sm_90") != nullptr;
  return compiled && ignis_compute_capability(device) >= 90;
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
  return p.kernel == IGNIS_KERNEL_DECODE_PAGE && k.k_stride_head == p.head_dim && k.v_stride_head == p.head_dim &&
         k.k_stride_token == PAGE_HEADS * p.head_dim && k.v_stride_token == PAGE_HEADS * p.head_dim;
}

/* The instance of a q dtype, K/V kind, head dim and RoPE, or NULL when this build has none
 * (IGNIS_HEAD_DIMS). */
static const decode_instance *find_instance(ignis_dtype dtype, int kv_kind, int64_t head_dim, bool rope) {
  const decode_instance *table = nullptr;
  switch (head_dim) {
#ifdef IGNIS_WITH_HEAD_DIM_64
  case 64:
    table = decode_instances_hd64;
    break;
#endif
#ifdef IGNIS_WITH_HEAD_DIM_128
  case 128:
    table = decode_instances_hd128;
    break;
#endif
#ifdef IGNIS_WITH_HEAD_DIM_256
  case 256:
    table = decode_instances_hd256;
    break;
#endif
#ifdef IGNIS_WITH_HEAD_DIM_512
  case 512:
    table = decode_instances_hd512;
    break;
#endif
  default:
    return nullptr;
  }
  for (int i = 0; i < DECODE_INSTANCES_PER_HEAD_DIM; ++i)
    if (table[i].dtype == dtype && table[i].kv_kind == kv_kind && table[i].rope == rope)
      return &table[i];
  return nullptr;
}

static ignis_status launch(const ignis_decode_params &p, cudaStream_t stream) {
  const decode_instance *instance =
      find_instance(p.dtype, attention_kv_kind(p.dtype, p.cache.dtype), p.head_dim,
                    p.pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA);
  if (instance == nullptr)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "decode: head_dim %lld is not compiled in this build (IGNIS_HEAD_DIMS)",
                           (long long)p.head_dim);
  const decode_family family =
      decode_page_takes(instance->kv_kind, instance->head_dim) && page_kernel_runs(p) ? DECODE_PAGE
      : p.kernel == IGNIS_KERNEL_DECODE_M16 || !decode_transposed_takes(p.head_dim)   ? DECODE_MMA
                                                                                      : DECODE_TRANSPOSED;
  const decode_config c = make_config(p, family);
  decode_kernel k;
  IGNIS_CUDA_CHECK(instance->kernel(family, &k, nullptr));
  /* outside a graph capture the grids fit this batch (and an unsplit batch has no merge); a
   * captured launch keeps the maxima so that its replays serve every later plan */
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    capture = cudaStreamCaptureStatusActive;
  }
  if (c.block_plan && /* a block-table batch planned from its lengths, by the attention blocks */
      (p.cache.batch_size > IGNIS_DECODE_LENGTH_PLAN_MAX_BATCH || p.request_partials == nullptr ||
       p.merge_counters == nullptr))
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "decode: a length plan of %lld requests has no schedule room",
                           (long long)p.cache.batch_size);
  const bool exact = p.work != nullptr && p.launch_work > 0 && capture == cudaStreamCaptureStatusNone;
  const int64_t items = p.work == nullptr ? c.implicit_items : exact ? p.launch_work : p.max_work;
  if (items * p.num_kv_heads > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "decode: %lld work items x %lld KV heads exceed one grid",
                           (long long)items, (long long)p.num_kv_heads);
  if (items > 0 && p.num_kv_heads > 0) {
    IGNIS_CUDA_CHECK(ignis_launch(k.attention, dim3((unsigned)(items * (p.num_kv_heads / k.heads_per_block))),
                                  dim3((unsigned)k.threads), k.smem, stream, p, c));
    const ignis_status status = ignis_check_launch("decode attention");
    if (status != IGNIS_OK)
      return status;
  }
  const int64_t merges = c.fused_merge     ? 0
                         : c.block_plan      ? p.cache.batch_size
                         : p.work == nullptr ? (c.implicit_splits > 1 ? p.cache.batch_size : 0)
                         : exact           ? (p.launch_merge ? p.launch_batch : 0)
                                           : p.max_batch;
  const int64_t rows = (int64_t)p.q_len * p.num_qo_heads;
  if (merges > 0) {
    if (rows > 65535)
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                             "decode: %lld query rows per request exceed one merge grid", (long long)rows);
    IGNIS_CUDA_CHECK(ignis_launch(k.merge, dim3((unsigned)merges, (unsigned)rows), dim3(MERGE_WARPS * 32), 0,
                                  stream, p, c));
    return ignis_check_launch("decode merge");
  }
  return IGNIS_OK;
}

/* Resident blocks per SM of a family's kernel for K/V of kv_dtype at head_dim, from its RoPE-less
 * instance with q of the K/V's 16-bit type (bf16 for fp8 K/V); `none` when the build has none. */
static int blocks_per_sm(int64_t head_dim, ignis_dtype kv_dtype, decode_family family, int none) {
  const bool fp8 = kv_dtype == IGNIS_FP8_E4M3 || kv_dtype == IGNIS_FP8_E5M2;
  const decode_instance *instance = fp8 ? find_instance(IGNIS_BF16, KV_E4M3, head_dim, false)
                                    : kv_dtype == IGNIS_F16
                                        ? find_instance(IGNIS_F16, KV_F16, head_dim, false)
                                        : find_instance(IGNIS_BF16, KV_BF16, head_dim, false);
  decode_kernel k;
  int blocks = none;
  if (instance != nullptr)
    (void)instance->kernel(family, &k, &blocks);
  return blocks;
}

extern "C" void ignis_cuda_decode_choose(int32_t device, int64_t head_dim, ignis_dtype kv_dtype, int64_t rows,
                                         int64_t num_kv_heads, int64_t page_size, ignis_kernel_choice *general,
                                         ignis_kernel_choice *page) {
  const int64_t sms = ignis_cuda_device_sm_count(device);
  const bool transposed = transposed_rows(rows) && decode_transposed_takes(head_dim);
  general->kernel = transposed ? IGNIS_KERNEL_DECODE_TRANSPOSED : IGNIS_KERNEL_DECODE_M16;
  general->wave = sms * blocks_per_sm(head_dim, kv_dtype, transposed ? DECODE_TRANSPOSED : DECODE_MMA, 1);
  page->kernel = IGNIS_KERNEL_DECODE_PAGE;
  /* in (work item, KV head) units: a page kernel block runs PAGE_HEADS heads */
  page->wave = page_kernel_shape(head_dim, kv_dtype, rows, num_kv_heads, page_size) &&
                       page_kernel_available(device)
                   ? sms * blocks_per_sm(128, IGNIS_BF16, DECODE_PAGE, 0) * PAGE_HEADS
                   : 0;
}

extern "C" ignis_status ignis_cuda_decode(const ignis_decode_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  /* an fp8 q (a planned batch): the kernels run on its converted copy, made once every operand
   * passed its checks */
  const bool convert = params->q_dtype != params->dtype;
  ignis_decode_params converted;
  if (convert) {
    converted = *params;
    converted.q = params->q_scratch;
    converted.q_stride_head = params->head_dim;
    converted.q_stride_batch = params->num_qo_heads * params->head_dim;
    converted.q_dtype = params->dtype;
  }
  const ignis_decode_params &p = convert ? converted : *params;
  if (!attention_operands_aligned(p.q, p.q_stride_batch, p.q_stride_head, p.out, p.out_stride_batch,
                                  p.out_stride_head, p.cache, decode_cache_paged(p)))
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "decode: q, out, k_cache and v_cache must be 16-byte aligned, with strides of "
                           "multiples of 16 bytes");
  if (convert) {
    /* (a length-planned batch's count is written after this: its max_batch is the batch) */
    const q_convert_source source = {static_cast<const uint8_t *>(params->q), params->q_stride_batch,
                                     params->q_stride_head, params->num_qo_heads, params->head_dim,
                                     params->max_batch * params->q_len,
                                     params->length_plan.wave_items > 0 ? nullptr : params->batch_size,
                                     params->q_len, nullptr};
    const ignis_status status = q_convert_to(params->dtype, source, params->q_scratch, s);
    if (status != IGNIS_OK)
      return status;
  }
  /* q of f16 or bf16, else unsupported */
  return attention_by_dtype(p.dtype, "decode", [&](auto) { return launch(p, s); });
}
