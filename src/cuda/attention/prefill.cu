/* CUDA backend of prefill attention (include/ignis/prefill.h): many query tokens per request against
 * contiguous (single prefill), ragged or paged keys, with the results of the CPU backend
 * (src/cpu/prefill.c). The front end (src/core/op_prefill.c) validates, plans and fills
 * ignis_prefill_params; this file picks a kernel instance and launches it.
 *
 * Block-table runs (ignis_prefill_run_block_table) take the same kernels over an implicit schedule:
 * the grid is the longest request's tiles x requests x KV heads, and a block reads its request's
 * query rows, keys and block-table row on the device (prefill_fetch_item), so nothing is planned.
 *
 * Two kernels, back to back on the stream with ignis_launch (PDL between them):
 *   - the attention kernel, a flat grid of work items x KV heads (KV head
 *     fastest, items last first: the longest causal tiles of a request start first, and the blocks
 *     reading one request's keys run side by side). Block (item, kvh) attends the item's tile of
 *     ROWS packed query rows (row r: token r / group, query head kvh * group + r % group, so each
 *     key is read once for the GQA group) against the item's keys, and writes out / lse, or an f32
 *     partial slot and its base-2 LSE when the tile is split.
 *     Which one is chosen once, by ignis_cuda_prefill_choose at plan creation (single prefill:
 *     per call), and the plan records it: prefill_wgmma_kernel (prefill_wgmma.cuh: 384 threads,
 *     a producer warpgroup (TMA for whole tiles of contiguous and ragged keys, cp.async for paged
 *     keys and partial tiles) and two wgmma consumer warpgroups, one block per SM) when the
 *     device runs sm_90a code (H100 / H200 and a build with 90a; IGNIS_PREFILL_WGMMA=0 turns it
 *     off) and the call is the hot case: K/V of q's 16-bit dtype, head dims (128, 128), causal or
 *     no mask, no custom mask, window, soft cap or position encoding (sinks, LSE, split items and
 *     every key source are its own); otherwise prefill_attention_kernel (prefill_kernel.cuh, 128
 *     threads).
 *   - prefill_merge_kernel: one thread per 8 output values of a (merge entry, KV head, tile row)
 *     combines the tile's partial slots by their LSEs and joins the sink.
 *
 * Instances: q f16 / bf16 x K/V (q's dtype, fp8 e4m3, fp8 e5m2) x head dims (64, 64), (128, 128),
 * (256, 256), (512, 512), (192, 128) x {fast, general}, listed in prefill_instances.cuh and
 * compiled a head dim per translation unit (prefill_hd<d>.cu). The fast instance takes causal or
 * no mask only; the general one adds custom masks, windows, soft cap, ALiBi and ROPE_LLAMA. A row with no visible key
 * writes out = 0 and lse = -inf, or lse = the sink with sinks.
 *
 * Requirements beyond validation (IGNIS_ERROR_UNSUPPORTED otherwise): q, out, K and V start
 * 16-byte aligned with strides that are multiples of 16 bytes, and work items x KV heads fit one
 * grid. The head dim pair (192, 128) is compiled with head dim 128 (IGNIS_HEAD_DIMS). */
#include "cuda/attention/prefill_instances.cuh"
#include "cuda/attention/q_convert.cuh"
#include "cuda/common/cuda_common.cuh"

static prefill_config make_config(const ignis_prefill_params &p) {
  prefill_config c;
  c.group = (int32_t)(p.num_qo_heads / p.num_kv_heads);
  c.causal = p.mask_mode == IGNIS_MASK_CAUSAL;
  c.custom_mask = p.mask_mode == IGNIS_MASK_CUSTOM;
  c.rope = p.pos_encoding == IGNIS_POS_ENCODING_ROPE_LLAMA;
  c.st = attention_score_transform_of(p.logits_soft_cap, p.pos_encoding, p.num_qo_heads);
  c.transform = p.logits_soft_cap > 0.0f || c.st.alibi_n > 0;
  /* transformed scores go through ALiBi / tanh in natural units, the rest straight to base 2 */
  c.score_scale = (float)(c.transform ? (double)p.sm_scale_log2 / 1.4426950408889634 * p.k_scale
                                      : (double)p.sm_scale_log2 * p.k_scale);
  c.implicit_tiles = c.implicit_chunks = 0;
  c.implicit_chunk = 0;
  if (p.implicit_chunk_tokens > 0) {
    c.implicit_tiles = (int32_t)ignis_prefill_implicit_tiles(p.contiguous_q_len, c.group, p.q_tile_rows);
    c.implicit_chunk = p.implicit_chunk_tokens;
    c.implicit_chunks = (int32_t)ignis_prefill_implicit_chunks(p.contiguous_kv_len, c.implicit_chunk);
  }
  c.block_table_capacity = 0;
  if (p.qo_indptr != nullptr) {
    c.implicit_tiles = (int32_t)ignis_prefill_implicit_tiles(p.block_table_max_q_len, c.group, p.q_tile_rows);
    c.block_table_capacity = (int32_t)(p.cache.pages_per_seq * p.cache.page_size);
  }
  c.merge_blocks = 1;
  return c;
}

static bool general_options(const ignis_prefill_params &p) {
  return p.logits_soft_cap > 0.0f || p.pos_encoding != IGNIS_POS_ENCODING_NONE ||
         p.mask_mode == IGNIS_MASK_CUSTOM || p.window_left >= 0;
}

/* IGNIS_PREFILL_WGMMA, read once: the form of the wgmma kernel (prefill_wgmma.cuh). Unset (or any
 * other value): 3, whole key tiles of contiguous and ragged K/V by TMA (1.35-1.39x the cp.async form
 * on the H100, notes/PERF.md); 1 the cp.async form everywhere, 2 its ping-pong form, 4 TMA with
 * ping-pong; 0 the tile kernel instead (an opt-out for comparisons). Paged keys, and calls whose
 * K/V the driver cannot describe by a tensor map, take the form without TMA. */
static int wgmma_form() {
  static const int form = [] {
    const char *value = ignis_env(IGNIS_ENV_PREFILL_WGMMA);
    if (value == nullptr)
      return 3;
    for (int f = 0; f <= 4; ++f)
      if (value[0] == (char)('0' + f) && value[1] == '\0')
        return f;
    return 3;
  }();
  return form;
}

/* The TMA forms' maps of k and v ([rows][kv heads][128], boxes of 64 dims x WGMMA_KT keys); false
 * where the call's keys are paged or the driver cannot encode them (the form without TMA then runs). */
static bool encode_kv_maps(const ignis_prefill_params &p, prefill_kv_maps *maps) {
  if (p.kv_source == IGNIS_PREFILL_KV_PAGED)
    return false;
  const cuuint64_t dims[3] = {WGMMA_D, (cuuint64_t)p.num_kv_heads, (cuuint64_t)p.cache.page_size};
  const cuuint64_t k_strides[2] = {(cuuint64_t)p.cache.k_stride_head * 2,
                                   (cuuint64_t)p.cache.k_stride_token * 2};
  const cuuint64_t v_strides[2] = {(cuuint64_t)p.cache.v_stride_head * 2,
                                   (cuuint64_t)p.cache.v_stride_token * 2};
  const cuuint32_t box[3] = {64, 1, WGMMA_KT};
  return ignis_tensor_map_try_u16(&maps->k, 3, p.cache.k_cache, dims, k_strides, box) &&
         ignis_tensor_map_try_u16(&maps->v, 3, p.cache.v_cache, dims, v_strides, box);
}

/* Whether prefill_wgmma_kernel runs on CUDA device `device`: the build compiled sm_90a, the device
 * is compute capability 9.0 (H100 / H200), and IGNIS_PREFILL_WGMMA is not "0". */
static bool wgmma_runs(int device) {
  return wgmma_form() != 0 && strstr(IGNIS_CUDA_TARGETS, "sm_90a") != nullptr &&
         ignis_compute_capability(device) == 90;
}

/* The call shapes prefill_wgmma_kernel takes (the rest of the options are its own). */
static bool wgmma_shape(const ignis_prefill_params &p) {
  return (p.dtype == IGNIS_F16 || p.dtype == IGNIS_BF16) && p.cache.dtype == p.dtype &&
         p.head_dim_qk == WGMMA_D && p.head_dim_vo == WGMMA_D && !general_options(p);
}

/* The kernel of a call of this shape on `device`, chosen at plan creation (single prefill: per
 * call): the wgmma kernel (one block per SM) for its shapes where it runs, else the tile kernel
 * (two). */
extern "C" void ignis_cuda_prefill_choose(const ignis_prefill_params *shape, int32_t device,
                                          ignis_kernel_choice *choice) {
  const bool wgmma = wgmma_shape(*shape) && wgmma_runs(device);
  choice->kernel = wgmma ? IGNIS_KERNEL_PREFILL_WGMMA : IGNIS_KERNEL_PREFILL_TILE;
  choice->wave = (int64_t)ignis_cuda_device_sm_count(device) * (wgmma ? 1 : 2);
}

/* The instance of a call (q dtype, K/V kind, head dims, fast or general options), or NULL when this
 * build has none (IGNIS_HEAD_DIMS). */
static const prefill_instance *find_instance(const ignis_prefill_params &p) {
  const int64_t qk = p.head_dim_qk, vo = p.head_dim_vo;
  const prefill_instance *table = nullptr;
#ifdef IGNIS_WITH_HEAD_DIM_64
  if (qk == 64 && vo == 64)
    table = prefill_instances_64_64;
#endif
#ifdef IGNIS_WITH_HEAD_DIM_128
  if (qk == 128 && vo == 128)
    table = prefill_instances_128_128;
  if (qk == 192 && vo == 128)
    table = prefill_instances_192_128;
#endif
#ifdef IGNIS_WITH_HEAD_DIM_256
  if (qk == 256 && vo == 256)
    table = prefill_instances_256_256;
#endif
#ifdef IGNIS_WITH_HEAD_DIM_512
  if (qk == 512 && vo == 512)
    table = prefill_instances_512_512;
#endif
  if (table == nullptr)
    return nullptr;
  const int kv_kind = attention_kv_kind(p.dtype, p.cache.dtype);
  const bool general = general_options(p);
  for (int i = 0; i < PREFILL_INSTANCES_PER_HEAD_DIMS; ++i)
    if (table[i].dtype == p.dtype && table[i].kv_kind == kv_kind && table[i].general == general)
      return &table[i];
  return nullptr;
}

static ignis_status launch(const ignis_prefill_params &p, cudaStream_t stream) {
  const prefill_instance *instance = find_instance(p);
  if (instance == nullptr)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "prefill: head dims (%lld, %lld) are not compiled in this build (IGNIS_HEAD_DIMS)",
                           (long long)p.head_dim_qk, (long long)p.head_dim_vo);
  if (p.q_tile_rows != instance->rows)
    return ignis_set_error(IGNIS_ERROR_INTERNAL,
                           "prefill: the plan's tiles have %d rows but the kernel takes %d",
                           (int)p.q_tile_rows, (int)instance->rows);
  prefill_config c = make_config(p);
  const int64_t blocks = p.max_work * p.num_kv_heads;
  if (blocks > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "prefill: %lld work items x %lld KV heads exceed one grid", (long long)p.max_work,
                           (long long)p.num_kv_heads);
  if (blocks > 0) {
    const bool hot = p.kernel == IGNIS_KERNEL_PREFILL_WGMMA;
    if (hot && !instance->wgmma)
      return ignis_set_error(IGNIS_ERROR_INTERNAL, "prefill: the plan chose the wgmma kernel for a call it "
                                                   "does not take");
    prefill_kernel k;
    prefill_kv_maps maps = {};
    int form = hot ? wgmma_form() : 0;
    if (form >= 3 && !encode_kv_maps(p, &maps))
      form -= 2; /* the same form without TMA */
    IGNIS_CUDA_CHECK(instance->kernel(form, &k));
    if (k.wgmma != nullptr)
      IGNIS_CUDA_CHECK(
          ignis_launch(k.wgmma, dim3((unsigned)blocks), dim3(k.threads), k.smem, stream, p, c, maps));
    else
      IGNIS_CUDA_CHECK(
          ignis_launch(k.attention, dim3((unsigned)blocks), dim3(k.threads), k.smem, stream, p, c));
    const ignis_status status = ignis_check_launch("prefill attention");
    if (status != IGNIS_OK)
      return status;
  }
  if (p.max_merge > 0) {
    const int64_t threads = p.num_kv_heads * instance->rows * (instance->head_dim_vo / 8);
    c.merge_blocks = (threads + PREFILL_MERGE_THREADS - 1) / PREFILL_MERGE_THREADS;
    if (p.max_merge * c.merge_blocks > INT32_MAX)
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                             "prefill: %lld merge entries x %lld KV heads exceed one grid",
                             (long long)p.max_merge, (long long)p.num_kv_heads);
    IGNIS_CUDA_CHECK(ignis_launch(instance->merge, dim3((unsigned)(p.max_merge * c.merge_blocks)),
                                  dim3(PREFILL_MERGE_THREADS), 0, stream, p, c));
    return ignis_check_launch("prefill merge");
  }
  return IGNIS_OK;
}

extern "C" ignis_status ignis_cuda_prefill(const ignis_prefill_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  /* an fp8 q (a planned batch): the kernels run on its converted copy, made once every operand
   * passed its checks */
  const bool convert = params->q_dtype != params->dtype;
  ignis_prefill_params converted;
  if (convert) {
    converted = *params;
    converted.q = params->q_scratch;
    converted.q_stride_head = params->head_dim_qk;
    converted.q_stride_token = params->num_qo_heads * params->head_dim_qk;
    converted.q_dtype = params->dtype;
  }
  const ignis_prefill_params &p = convert ? converted : *params;
  if (!attention_operands_aligned(p.q, p.q_stride_token, p.q_stride_head, p.out, p.out_stride_token,
                                  p.out_stride_head, p.cache, p.kv_source == IGNIS_PREFILL_KV_PAGED))
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "prefill: q, out, k and v (or the cache) must be 16-byte aligned, with strides of "
                           "multiples of 16 bytes");
  if (convert) {
    /* a block-table run has no schedule on the device: its max_q_rows are q's rows, all converted */
    const q_convert_source source = {static_cast<const uint8_t *>(params->q), params->q_stride_token,
                                     params->q_stride_head, params->num_qo_heads, params->head_dim_qk,
                                     params->max_q_rows, params->batch_size, 0, params->requests};
    const ignis_status status = q_convert_to(params->dtype, source, params->q_scratch, s);
    if (status != IGNIS_OK)
      return status;
  }
  /* q of f16 or bf16, else unsupported */
  return attention_by_dtype(p.dtype, "prefill", [&](auto) { return launch(p, s); });
}
