/* Registry entries of attention: decode (single, and batch through a plan) and prefill (single,
 * single with a custom mask, and batch through a plan over ragged or paged keys or a block table).
 *
 * Cases: `batch` requests of `tokens` query tokens (decode: one) against kv_len keys each,
 * q_heads / k_heads heads of head_dim, q, K and V in the case's dtype, NHD layout, no LSE. Paged
 * keys live in pages of page_size taken in a random order (another order per set), as a serving
 * engine's cache does after a while. The plans, their workspaces and the host page tables are made
 * once per case (prepare, not timed); what is timed is the run alone, as an engine replays it.
 *
 * Decode is counted in bytes: K and V read once (the tokens held, not the padding of last pages),
 * q read and out written once, the page table at its size. Prefill is counted in FLOPs:
 * 4 * q_heads * head_dim per query-key pair the mask lets through (two products of head_dim
 * multiply-adds), summed over the requests: the pairs of the causal mask aligned to the end of the
 * keys, or every pair without a mask. */
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

/* What the calls of one case share: a plan (or none, for single calls), its device workspace, and
 * for batch decode the plan's own copies of kv_indptr / kv_last_page_len. */
typedef struct plan_state {
  ignis_decode_plan *decode;
  ignis_prefill_plan *prefill;
  void *workspace;
  size_t workspace_bytes;
  ignis_tensor kv_indptr;
  ignis_tensor kv_last_page_len;
} plan_state;

static void release_plan(const bench_case *c, void *state) {
  plan_state *s = state;
  if (s->decode)
    ignis_decode_plan_destroy(s->decode);
  if (s->prefill)
    ignis_prefill_plan_destroy(s->prefill);
  if (s->workspace)
    bench_device_free(c->device, s->workspace);
  free(s);
}

static int allocate_workspace(const bench_case *c, plan_state *s) {
  if (s->workspace_bytes == 0)
    return 0;
  return bench_device_alloc(c->device, s->workspace_bytes, &s->workspace);
}

/* A single call's workspace: the size query runs on every device, but the CPU backend takes none. */
static int allocate_single_workspace(const bench_case *c, size_t bytes, plan_state *s) {
  s->workspace_bytes = c->device.type == IGNIS_DEVICE_CPU ? 0 : bytes;
  return allocate_workspace(c, s);
}

/* Make a state with `make` (which fills it), or leave none. */
static int prepare_state(const bench_case *c, void *stream, void **state,
                         int (*make)(const bench_case *c, void *stream, plan_state *s)) {
  plan_state *s = calloc(1, sizeof *s);
  if (!s)
    return bench_fail("out of host memory for a plan state");
  if (make(c, stream, s) != 0) {
    release_plan(c, s);
    return -1;
  }
  *state = s;
  return 0;
}

/* Host array [count]: b * step at b (an indptr), or `step` everywhere (constant). */
typedef enum host_pattern { HOST_RAMP = 0, HOST_CONSTANT = 1 } host_pattern;

static int32_t *host_array(int64_t count, int64_t step, host_pattern pattern) {
  int32_t *values = malloc((size_t)count * sizeof *values);
  if (!values) {
    bench_fail("out of host memory for a %lld-entry index array", (long long)count);
    return NULL;
  }
  for (int64_t i = 0; i < count; ++i)
    values[i] = (int32_t)(pattern == HOST_RAMP ? i * step : step);
  return values;
}

static ignis_attention_options default_options(void) {
  ignis_attention_options options = IGNIS_ATTENTION_OPTIONS_INIT;
  return options;
}

/* ---- decode ---------------------------------------------------------------------------------- */
static int describe_single_decode(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("q", c->dtype, BENCH_FILL_RANDOM, c->q_heads, c->head_dim);
  s[1] = BENCH_SPEC("k", c->dtype, BENCH_FILL_RANDOM, c->kv_len, c->k_heads, c->head_dim);
  s[2] = BENCH_SPEC("v", c->dtype, BENCH_FILL_RANDOM, c->kv_len, c->k_heads, c->head_dim);
  s[3] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->q_heads, c->head_dim));
  return 4;
}

static int make_single_decode(const bench_case *c, void *stream, plan_state *s) {
  size_t bytes = 0;
  if (bench_check_status(ignis_single_decode_workspace_size(c->q_heads, c->head_dim, c->kv_len, &bytes),
                         "ignis_single_decode_workspace_size") != 0)
    return -1;
  return allocate_single_workspace(c, bytes, s);
}

static int prepare_single_decode(const bench_case *c, void *stream, void **state) {
  return prepare_state(c, stream, state, make_single_decode);
}

static ignis_status call_single_decode(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  const plan_state *s = state;
  ignis_attention_options options = default_options();
  return ignis_single_decode(&t[0], &t[1], &t[2], IGNIS_KV_LAYOUT_NHD, &options, NULL, &t[3], NULL,
                             s->workspace, s->workspace_bytes, stream);
}

static int describe_batch_decode(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("q", c->dtype, BENCH_FILL_RANDOM, c->batch, c->q_heads, c->head_dim);
  int n = 1 + bench_page_cache_specs(c, 0, &s[1]);
  s[n] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->batch, c->q_heads, c->head_dim));
  return n + 1;
}

/* The workspace the plan asks for must be one the library's own bound accepts for its KV length. */
static int check_workspace_bound(const ignis_decode_plan_config *config, size_t workspace_bytes) {
  int64_t fits = 0;
  if (bench_check_status(ignis_decode_max_kv_len_for_workspace(config, workspace_bytes, &fits),
                         "ignis_decode_max_kv_len_for_workspace") != 0)
    return -1;
  if (fits < config->max_kv_len)
    return bench_fail(
        "ignis_decode_max_kv_len_for_workspace: %lld keys for the %zu workspace bytes of a plan "
        "of max_kv_len %lld",
        (long long)fits, workspace_bytes, (long long)config->max_kv_len);
  return 0;
}

/* The decode plan configuration of a case: its shape, automatic splits. */
static ignis_decode_plan_config decode_config_of(const bench_case *c) {
  ignis_decode_plan_config config = IGNIS_DECODE_PLAN_CONFIG_INIT;
  config.device = c->device;
  config.num_qo_heads = c->q_heads;
  config.num_kv_heads = c->k_heads;
  config.head_dim = c->head_dim;
  config.page_size = c->page_size;
  config.q_dtype = c->dtype;
  config.kv_dtype = c->dtype;
  config.max_batch_size = c->batch;
  config.max_kv_len = c->kv_len;
  return config;
}

/* Plan, workspace, one update with the case's page table, and the plan's index views. */
static int make_batch_decode(const bench_case *c, void *stream, plan_state *s) {
  ignis_decode_plan_config config = decode_config_of(c);
  if (bench_check_status(ignis_decode_plan_create(&config, &s->decode), "ignis_decode_plan_create") != 0 ||
      bench_check_status(ignis_decode_workspace_size(s->decode, &s->workspace_bytes),
                         "ignis_decode_workspace_size") != 0 ||
      check_workspace_bound(&config, s->workspace_bytes) != 0 || allocate_workspace(c, s) != 0)
    return -1;
  int32_t *indptr = host_array(c->batch + 1, bench_pages_per_request(c), HOST_RAMP);
  int32_t *last = host_array(c->batch, bench_last_page_len(c), HOST_CONSTANT);
  int rc = indptr && last ? 0 : -1;
  if (rc == 0)
    rc = bench_check_status(
        ignis_decode_plan_update(s->decode, indptr, last, c->batch, s->workspace, s->workspace_bytes, stream),
        "ignis_decode_plan_update");
  free(indptr);
  free(last);
  if (rc == 0)
    rc = bench_check_status(ignis_decode_plan_index_views(s->decode, s->workspace, s->workspace_bytes,
                                                          &s->kv_indptr, &s->kv_last_page_len),
                            "ignis_decode_plan_index_views");
  const char *kernel = NULL;
  if (rc == 0)
    rc = bench_check_status(ignis_decode_plan_kernel(s->decode, &kernel), "ignis_decode_plan_kernel");
  return rc;
}

static int prepare_batch_decode(const bench_case *c, void *stream, void **state) {
  return prepare_state(c, stream, state, make_batch_decode);
}

static ignis_status call_batch_decode(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  const plan_state *s = state;
  ignis_paged_kv_cache cache = bench_page_cache(&t[1], 0);
  cache.indptr = s->kv_indptr;
  cache.last_page_len = s->kv_last_page_len;
  return ignis_decode_run(s->decode, &t[0], &cache, NULL, &t[4], NULL, s->workspace, s->workspace_bytes,
                          stream);
}

/* The batch's pages as a block table: kv_indices (request b's pages at b * pages_per_request, as
 * the batch decode's ramp of kv_indptr says) seen as [batch, pages_per_request], and seq_lens. */
static int describe_block_table_decode(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("q", c->dtype, BENCH_FILL_RANDOM, c->batch, c->q_heads, c->head_dim);
  int n = 1 + bench_page_cache_specs(c, 0, &s[1]);
  s[n] = BENCH_SPEC("seq_lens", IGNIS_I32, BENCH_FILL_SEQ_LENS, c->batch);
  s[n + 1] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->batch, c->q_heads, c->head_dim));
  return n + 2;
}

/* A plan and its workspace; no update (block-table runs take none). */
static int make_block_table_decode(const bench_case *c, void *stream, plan_state *s) {
  (void)stream;
  ignis_decode_plan_config config = decode_config_of(c);
  if (bench_check_status(ignis_decode_plan_create(&config, &s->decode), "ignis_decode_plan_create") != 0 ||
      bench_check_status(ignis_decode_workspace_size(s->decode, &s->workspace_bytes),
                         "ignis_decode_workspace_size") != 0)
    return -1;
  return allocate_workspace(c, s);
}

static int prepare_block_table_decode(const bench_case *c, void *stream, void **state) {
  return prepare_state(c, stream, state, make_block_table_decode);
}

/* The block-table cache of tensors k_cache, v_cache, kv_indices, seq_lens (from t on): kv_indices
 * seen as the [batch, pages_per_request] table, request b's pages at b * pages_per_request. */
static ignis_block_table_kv_cache block_table_cache_of(const bench_case *c, const ignis_tensor *t) {
  ignis_block_table_kv_cache cache = IGNIS_BLOCK_TABLE_KV_CACHE_INIT;
  cache.k_cache = t[0];
  cache.v_cache = t[1];
  const int64_t pages = bench_pages_per_request(c);
  cache.block_tables = t[2];
  cache.block_tables.ndim = 2;
  cache.block_tables.shape[0] = c->batch;
  cache.block_tables.shape[1] = pages;
  cache.block_tables.strides[0] = pages;
  cache.block_tables.strides[1] = 1;
  cache.seq_lens = t[3];
  return cache;
}

static ignis_status call_block_table_decode(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  const plan_state *s = state;
  ignis_block_table_kv_cache cache = block_table_cache_of(c, &t[1]);
  return ignis_decode_run_block_table(s->decode, &t[0], &cache, c->kv_len, NULL, &t[5], NULL, s->workspace,
                                      s->workspace_bytes, stream);
}

/* "B64 L4k 32/8h d128 p16", "L32k 32/8h d128". */
static void shape_decode(const bench_case *c, char *text, size_t size) {
  char batch[24] = "", kv_len[24], page[24] = "";
  if (c->routine->dims & BENCH_DIM_BATCH)
    snprintf(batch, sizeof batch, "B%lld ", (long long)c->batch);
  if (c->routine->dims & BENCH_DIM_PAGE_SIZE)
    snprintf(page, sizeof page, " p%lld", (long long)c->page_size);
  bench_format_count(c->kv_len, kv_len, sizeof kv_len);
  snprintf(text, size, "%sL%s %lld/%lldh d%lld%s", batch, kv_len, (long long)c->q_heads,
           (long long)c->k_heads, (long long)c->head_dim, page);
}

/* Single calls are one request of one query token; decode is one query token per request. */
static void complete_attention(bench_case *c) {
  if (!(c->routine->dims & BENCH_DIM_BATCH))
    c->batch = 1;
  if (!(c->routine->dims & BENCH_DIM_TOKENS))
    c->tokens = 1;
}

/* ---- prefill --------------------------------------------------------------------------------- */
static int64_t prefill_flops(const bench_case *c) {
  return 4 * c->q_heads * c->head_dim * bench_visible_pairs(c) * c->batch;
}

static ignis_mask_mode mask_of(const bench_case *c) {
  return c->causal ? IGNIS_MASK_CAUSAL : IGNIS_MASK_NONE;
}

/* q and out of `batch` requests; k and v when the keys are ragged (contiguous per request). */
static int describe_prefill_q(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("q", c->dtype, BENCH_FILL_RANDOM, c->batch * c->tokens, c->q_heads, c->head_dim);
  s[1] = bench_output(
      BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->batch * c->tokens, c->q_heads, c->head_dim));
  return 2;
}

static int describe_ragged_prefill(const bench_case *c, bench_tensor_spec *s) {
  int n = describe_prefill_q(c, s);
  s[n++] = BENCH_SPEC("k", c->dtype, BENCH_FILL_RANDOM, c->batch * c->kv_len, c->k_heads, c->head_dim);
  s[n++] = BENCH_SPEC("v", c->dtype, BENCH_FILL_RANDOM, c->batch * c->kv_len, c->k_heads, c->head_dim);
  return n;
}

static int describe_masked_prefill(const bench_case *c, bench_tensor_spec *s) {
  int n = describe_ragged_prefill(c, s);
  s[n++] = BENCH_SPEC("custom_mask", IGNIS_U8, BENCH_FILL_MASK_BITS,
                      ignis_prefill_mask_bytes(c->tokens, c->kv_len));
  return n;
}

static int describe_paged_prefill(const bench_case *c, bench_tensor_spec *s) {
  int n = describe_prefill_q(c, s);
  return n + bench_page_cache_specs(c, 1, &s[n]);
}

static int make_single_prefill(const bench_case *c, void *stream, plan_state *s) {
  size_t bytes = 0;
  if (bench_check_status(ignis_single_prefill_workspace_size(c->q_heads, c->k_heads, c->head_dim, c->head_dim,
                                                             c->tokens, c->kv_len, &bytes),
                         "ignis_single_prefill_workspace_size") != 0)
    return -1;
  return allocate_single_workspace(c, bytes, s);
}

static int prepare_single_prefill(const bench_case *c, void *stream, void **state) {
  return prepare_state(c, stream, state, make_single_prefill);
}

static ignis_status call_single_prefill(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  const plan_state *s = state;
  ignis_attention_options options = default_options();
  return ignis_single_prefill(&t[0], &t[2], &t[3], IGNIS_KV_LAYOUT_NHD, mask_of(c), NULL, &options, NULL,
                              &t[1], NULL, s->workspace, s->workspace_bytes, stream);
}

static ignis_status call_masked_prefill(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  const plan_state *s = state;
  ignis_attention_options options = default_options();
  return ignis_single_prefill(&t[0], &t[2], &t[3], IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_CUSTOM, &t[4], &options,
                              NULL, &t[1], NULL, s->workspace, s->workspace_bytes, stream);
}

/* Plan, workspace and one update: query rows b * tokens, keys b * kv_len (ragged) or the case's
 * page table (paged). */
static int make_batch_prefill(const bench_case *c, ignis_prefill_kv_kind kind, void *stream, plan_state *s) {
  ignis_prefill_plan_config config = IGNIS_PREFILL_PLAN_CONFIG_INIT;
  config.device = c->device;
  config.kv_kind = kind;
  config.num_qo_heads = c->q_heads;
  config.num_kv_heads = c->k_heads;
  config.head_dim_qk = c->head_dim;
  config.page_size = kind == IGNIS_PREFILL_PAGED ? c->page_size : 0;
  config.q_dtype = c->dtype;
  config.kv_dtype = c->dtype;
  config.mask_mode = mask_of(c);
  config.max_batch_size = c->batch;
  config.max_qo_tokens = c->batch * c->tokens;
  config.max_kv_len = c->kv_len;
  if (bench_check_status(ignis_prefill_plan_create(&config, &s->prefill), "ignis_prefill_plan_create") != 0 ||
      bench_check_status(ignis_prefill_workspace_size(s->prefill, &s->workspace_bytes),
                         "ignis_prefill_workspace_size") != 0 ||
      allocate_workspace(c, s) != 0)
    return -1;
  int paged = kind == IGNIS_PREFILL_PAGED;
  int32_t *qo_indptr = host_array(c->batch + 1, c->tokens, HOST_RAMP);
  int32_t *kv_indptr = host_array(c->batch + 1, paged ? bench_pages_per_request(c) : c->kv_len, HOST_RAMP);
  int32_t *last = paged ? host_array(c->batch, bench_last_page_len(c), HOST_CONSTANT) : NULL;
  int rc = qo_indptr && kv_indptr && (last || !paged) ? 0 : -1;
  if (rc == 0)
    rc = bench_check_status(ignis_prefill_plan_update(s->prefill, qo_indptr, kv_indptr, last, c->batch,
                                                      s->workspace, s->workspace_bytes, stream),
                            "ignis_prefill_plan_update");
  free(qo_indptr);
  free(kv_indptr);
  free(last);
  const char *kernel = NULL;
  if (rc == 0)
    rc = bench_check_status(ignis_prefill_plan_kernel(s->prefill, &kernel), "ignis_prefill_plan_kernel");
  return rc;
}

static int make_ragged_prefill(const bench_case *c, void *stream, plan_state *s) {
  return make_batch_prefill(c, IGNIS_PREFILL_RAGGED, stream, s);
}

static int make_paged_prefill(const bench_case *c, void *stream, plan_state *s) {
  return make_batch_prefill(c, IGNIS_PREFILL_PAGED, stream, s);
}

static int prepare_ragged_prefill(const bench_case *c, void *stream, void **state) {
  return prepare_state(c, stream, state, make_ragged_prefill);
}

static int prepare_paged_prefill(const bench_case *c, void *stream, void **state) {
  return prepare_state(c, stream, state, make_paged_prefill);
}

static ignis_status call_ragged_prefill(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  const plan_state *s = state;
  return ignis_prefill_ragged_run(s->prefill, &t[0], &t[2], &t[3], NULL, NULL, &t[1], NULL, s->workspace,
                                  s->workspace_bytes, stream);
}

static ignis_status call_paged_prefill(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  const plan_state *s = state;
  ignis_paged_kv_cache cache = bench_page_cache(&t[2], 1);
  return ignis_prefill_paged_run(s->prefill, &t[0], &cache, NULL, NULL, &t[1], NULL, s->workspace,
                                 s->workspace_bytes, stream);
}

/* The paged batch as a block table (request b's pages at b * pages_per_request of kv_indices, seen as
 * [batch, pages_per_request]), seq_lens and cum_seq_lens_q: the TRT-LLM context form. */
static int describe_block_table_prefill(const bench_case *c, bench_tensor_spec *s) {
  int n = describe_prefill_q(c, s);
  n += bench_page_cache_specs(c, 0, &s[n]);
  s[n++] = BENCH_SPEC("seq_lens", IGNIS_I32, BENCH_FILL_SEQ_LENS, c->batch);
  s[n++] = BENCH_SPEC("qo_indptr", IGNIS_I32, BENCH_FILL_QO_INDPTR, c->batch + 1);
  return n;
}

/* A paged plan without a split and its workspace; no update (block-table runs take none). */
static int make_block_table_prefill(const bench_case *c, void *stream, plan_state *s) {
  (void)stream;
  ignis_prefill_plan_config config = IGNIS_PREFILL_PLAN_CONFIG_INIT;
  config.device = c->device;
  config.kv_kind = IGNIS_PREFILL_PAGED;
  config.num_qo_heads = c->q_heads;
  config.num_kv_heads = c->k_heads;
  config.head_dim_qk = c->head_dim;
  config.page_size = c->page_size;
  config.q_dtype = c->dtype;
  config.kv_dtype = c->dtype;
  config.mask_mode = mask_of(c);
  config.max_batch_size = c->batch;
  config.max_qo_tokens = c->batch * c->tokens;
  config.disable_split_kv = 1;
  if (bench_check_status(ignis_prefill_plan_create(&config, &s->prefill), "ignis_prefill_plan_create") != 0 ||
      bench_check_status(ignis_prefill_workspace_size(s->prefill, &s->workspace_bytes),
                         "ignis_prefill_workspace_size") != 0)
    return -1;
  return allocate_workspace(c, s);
}

static int prepare_block_table_prefill(const bench_case *c, void *stream, void **state) {
  return prepare_state(c, stream, state, make_block_table_prefill);
}

static ignis_status call_block_table_prefill(const bench_case *c, ignis_tensor *t, void *state,
                                             void *stream) {
  const plan_state *s = state;
  ignis_block_table_kv_cache cache = block_table_cache_of(c, &t[2]);
  return ignis_prefill_run_block_table(s->prefill, &t[0], &cache, &t[6], c->tokens, NULL, &t[1], NULL,
                                       s->workspace, s->workspace_bytes, stream);
}

/* "B4 q4k L4k 32/8h d128 causal p16" (q: query tokens, L: keys per request); the custom-mask
 * routine says "mask causal" / "mask full". */
static void shape_prefill(const bench_case *c, char *text, size_t size) {
  char batch[24] = "", tokens[24], kv_len[24], page[24] = "";
  if (c->routine->dims & BENCH_DIM_BATCH)
    snprintf(batch, sizeof batch, "B%lld ", (long long)c->batch);
  if (c->routine->dims & BENCH_DIM_PAGE_SIZE)
    snprintf(page, sizeof page, " p%lld", (long long)c->page_size);
  bench_format_count(c->tokens, tokens, sizeof tokens);
  bench_format_count(c->kv_len, kv_len, sizeof kv_len);
  snprintf(text, size, "%sq%s L%s %lld/%lldh d%lld %s%s%s", batch, tokens, kv_len, (long long)c->q_heads,
           (long long)c->k_heads, (long long)c->head_dim,
           c->routine->describe == describe_masked_prefill ? "mask " : "", c->causal ? "causal" : "full",
           page);
}

/* ---- the entries ------------------------------------------------------------------------------ */
#define DECODE_DIMS (BENCH_DIM_KV_LEN | BENCH_DIM_Q_HEADS | BENCH_DIM_K_HEADS | BENCH_DIM_HEAD_DIM)
#define PREFILL_DIMS (BENCH_DIM_TOKENS | DECODE_DIMS | BENCH_DIM_CAUSAL)
#define DECODE_SHAPE(group, b, l)                                                                            \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .batch = (b), .kv_len = (l), .q_heads = 32, .k_heads = 8,          \
              .head_dim = 128, .page_size = 16)
#define PREFILL_SHAPE(group, b, t, l)                                                                        \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .batch = (b), .tokens = (t), .kv_len = (l), .q_heads = 32,         \
              .k_heads = 8, .head_dim = 128, .page_size = 16, .causal = 1)
#define DECODE_BYTES "K + V (B*L*Hk*D*es each, the tokens held) + q + out (B*Hq*D*es each)"
#define PREFILL_BYTES "q + out (B*T*Hq*D*es each) + K + V (B*L*Hk*D*es each)"

/* What every entry of a family shares. */
#define TINY_ATTENTION                                                                                       \
  BENCH_DIMS(.batch = 2, .tokens = 5, .kv_len = 20, .q_heads = 4, .k_heads = 2, .head_dim = 128,             \
             .page_size = 16, .causal = 1)
#define DECODE_ENTRY                                                                                         \
  .family = &bench_family_decode, .dtypes = BENCH_DTYPES_HALF, .tiny = TINY_ATTENTION, .release = release_plan
#define PREFILL_ENTRY                                                                                        \
  .family = &bench_family_prefill, .dtypes = BENCH_DTYPES_HALF, .tiny = TINY_ATTENTION,                      \
  .release = release_plan, .flops = prefill_flops,                                                           \
  .flops_rule = "4*Hq*D per visible query-key pair, per request: T*L without a mask, T*(L-T) + "             \
                "T*(T+1)/2 causal"

static const bench_routine decode_routines[] = {
    {DECODE_ENTRY, .name = "single_decode", .summary = "one query token against contiguous K/V (NHD)",
     .functions = "ignis_single_decode_workspace_size ignis_single_decode", .dims = DECODE_DIMS,
     .bytes_rule = DECODE_BYTES,
     .gpu_suite = BENCH_SUITE(DECODE_SHAPE(4, 1, 32768), DECODE_SHAPE(4, 1, 4096)),
     .host_suite = BENCH_SUITE(DECODE_SHAPE(4, 1, 4096)), .describe = describe_single_decode,
     .prepare = prepare_single_decode, .call = call_single_decode},
    {DECODE_ENTRY, .name = "batch_decode",
     .summary = "paged batch decode: plan once, update once, time the run (index views for the page table)",
     .functions =
         "ignis_decode_plan_create ignis_decode_workspace_size ignis_decode_max_kv_len_for_workspace "
         "ignis_decode_plan_update ignis_decode_plan_index_views ignis_decode_plan_kernel ignis_decode_run "
         "ignis_decode_plan_destroy",
     .dims = DECODE_DIMS | BENCH_DIM_BATCH | BENCH_DIM_PAGE_SIZE,
     .bytes_rule = DECODE_BYTES " + kv_indices (pages*4)",
     .gpu_suite = BENCH_SUITE(DECODE_SHAPE(4, 64, 4096), DECODE_SHAPE(4, 256, 2048),
                              DECODE_SHAPE(4, 128, 8192), DECODE_SHAPE(4, 1, 32768),
                              BENCH_SHAPE(4, .dtype = IGNIS_BF16, .batch = 16, .kv_len = 4096, .q_heads = 32,
                                          .k_heads = 8, .head_dim = 512, .page_size = 16)),
     .host_suite = BENCH_SUITE(DECODE_SHAPE(4, 4, 1024)), .describe = describe_batch_decode,
     .prepare = prepare_batch_decode, .call = call_batch_decode},
    {DECODE_ENTRY, .name = "block_table_decode",
     .summary = "batch decode over a block table and seq_lens (TRT-LLM / XQA form): plan once, no update",
     .functions = "ignis_decode_run_block_table", .dims = DECODE_DIMS | BENCH_DIM_BATCH | BENCH_DIM_PAGE_SIZE,
     .bytes_rule = DECODE_BYTES " + block table (pages*4)",
     .gpu_suite = BENCH_SUITE(DECODE_SHAPE(4, 64, 4096), DECODE_SHAPE(4, 256, 2048),
                              DECODE_SHAPE(4, 128, 8192), DECODE_SHAPE(4, 1, 32768)),
     .host_suite = BENCH_SUITE(DECODE_SHAPE(4, 4, 1024)), .describe = describe_block_table_decode,
     .prepare = prepare_block_table_decode, .call = call_block_table_decode},
};

static const bench_routine prefill_routines[] = {
    {PREFILL_ENTRY, .name = "single_prefill", .summary = "one request, contiguous K/V (NHD)",
     .functions = "ignis_single_prefill_workspace_size ignis_single_prefill", .dims = PREFILL_DIMS,
     .bytes_rule = PREFILL_BYTES,
     .gpu_suite = BENCH_SUITE(PREFILL_SHAPE(4, 1, 4096, 4096), PREFILL_SHAPE(4, 1, 16384, 16384)),
     .host_suite = BENCH_SUITE(PREFILL_SHAPE(4, 1, 128, 128)), .describe = describe_ragged_prefill,
     .prepare = prepare_single_prefill, .call = call_single_prefill},
    {PREFILL_ENTRY, .name = "single_prefill_mask",
     .summary = "single prefill with a bit-packed custom mask holding the causal (or full) pattern",
     .functions = "ignis_prefill_mask_bytes ignis_single_prefill_workspace_size ignis_single_prefill",
     .dims = PREFILL_DIMS, .bytes_rule = PREFILL_BYTES " + custom_mask (T*L/8)",
     .gpu_suite = BENCH_SUITE(PREFILL_SHAPE(4, 1, 4096, 4096)),
     .host_suite = BENCH_SUITE(PREFILL_SHAPE(4, 1, 128, 128)), .describe = describe_masked_prefill,
     .prepare = prepare_single_prefill, .call = call_masked_prefill},
    {PREFILL_ENTRY, .name = "batch_prefill_ragged",
     .summary = "batch prefill over ragged K/V: plan once, update once, time the run",
     .functions = "ignis_prefill_plan_create ignis_prefill_workspace_size ignis_prefill_plan_update "
                  "ignis_prefill_plan_kernel ignis_prefill_ragged_run ignis_prefill_plan_destroy",
     .dims = PREFILL_DIMS | BENCH_DIM_BATCH, .bytes_rule = PREFILL_BYTES,
     .gpu_suite = BENCH_SUITE(PREFILL_SHAPE(4, 4, 4096, 4096), PREFILL_SHAPE(4, 1, 512, 16384)),
     .host_suite = BENCH_SUITE(PREFILL_SHAPE(4, 2, 128, 128)), .describe = describe_ragged_prefill,
     .prepare = prepare_ragged_prefill, .call = call_ragged_prefill},
    {PREFILL_ENTRY, .name = "batch_prefill_paged",
     .summary = "batch prefill over a paged cache: plan once, update once, time the run",
     .functions = "ignis_prefill_plan_create ignis_prefill_workspace_size ignis_prefill_plan_update "
                  "ignis_prefill_paged_run ignis_prefill_plan_destroy",
     .dims = PREFILL_DIMS | BENCH_DIM_BATCH | BENCH_DIM_PAGE_SIZE,
     .bytes_rule = PREFILL_BYTES " + page table (at its size)",
     .gpu_suite = BENCH_SUITE(PREFILL_SHAPE(4, 4, 4096, 4096)),
     .host_suite = BENCH_SUITE(PREFILL_SHAPE(4, 2, 128, 128)), .describe = describe_paged_prefill,
     .prepare = prepare_paged_prefill, .call = call_paged_prefill},
    {PREFILL_ENTRY, .name = "block_table_prefill",
     .summary = "batch prefill over a block table, seq_lens and cum_seq_lens_q (TRT-LLM context form): plan "
                "once, no update",
     .functions = "ignis_prefill_run_block_table",
     .dims = PREFILL_DIMS | BENCH_DIM_BATCH | BENCH_DIM_PAGE_SIZE,
     .bytes_rule = PREFILL_BYTES " + block table (pages*4)",
     .gpu_suite = BENCH_SUITE(PREFILL_SHAPE(4, 4, 4096, 4096), PREFILL_SHAPE(4, 8, 2048, 4096)),
     .host_suite = BENCH_SUITE(PREFILL_SHAPE(4, 2, 128, 128)), .describe = describe_block_table_prefill,
     .prepare = prepare_block_table_prefill, .call = call_block_table_prefill},
};

const bench_family bench_family_decode = {"decode", shape_decode, complete_attention,
                                          BENCH_TABLE(decode_routines)};
const bench_family bench_family_prefill = {"prefill", shape_prefill, complete_attention,
                                           BENCH_TABLE(prefill_routines)};
