/* Registry entries of MLA (include/ignis/mla.h): attention over the paged latent cache through a
 * plan, and the latent-cache append.
 *
 * Cases: `batch` requests of `tokens` query tokens (decode: 1, speculative: 2..4) against kv_len
 * keys each, q_heads query heads sharing the one latent KV (ckv 512 + kpe 64 values a token),
 * causal, sm_scale 1/sqrt(192) (DeepSeek-V3), pages of page_size in a random order. The plan, its
 * workspace and one update are made once per case (not timed); the run is timed, as an engine
 * replays it. Attention is counted in FLOPs, 2*Hq*(576+512) per visible query-key pair (causal:
 * the query tokens are the last of the keys), the measure of the compute-bound shapes (128
 * heads); the table's GB/s and %read count the cache read once (the tokens held: B*L*576*es)
 * plus q read and out written once and the page table, the measure of the memory-bound ones (16
 * heads). The append writes each token's 576 values once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#define CKV IGNIS_MLA_HEAD_DIM_CKV
#define KPE IGNIS_MLA_HEAD_DIM_KPE

typedef struct mla_state {
  ignis_mla_plan *plan;
  void *workspace;
  size_t workspace_bytes;
} mla_state;

static void release_mla(const bench_case *c, void *state) {
  mla_state *s = state;
  if (s->plan)
    ignis_mla_plan_destroy(s->plan);
  if (s->workspace)
    bench_device_free(c->device, s->workspace);
  free(s);
}

static int describe_mla(const bench_case *c, bench_tensor_spec *s) {
  const int64_t rows = c->batch * c->tokens, pages = bench_num_pages(c),
                es = (int64_t)ignis_dtype_size(c->dtype);
  s[0] = BENCH_SPEC("q_nope", c->dtype, BENCH_FILL_RANDOM, rows, c->q_heads, CKV);
  s[1] = BENCH_SPEC("q_pe", c->dtype, BENCH_FILL_RANDOM, rows, c->q_heads, KPE);
  s[2] = BENCH_SPEC("ckv_cache", c->dtype, BENCH_FILL_RANDOM, pages, c->page_size, CKV);
  s[3] = BENCH_SPEC("kpe_cache", c->dtype, BENCH_FILL_RANDOM, pages, c->page_size, KPE);
  s[2].bytes_moved = c->batch * c->kv_len * CKV * es;
  s[3].bytes_moved = c->batch * c->kv_len * KPE * es;
  s[4] = BENCH_SPEC("kv_indices", IGNIS_I32, BENCH_FILL_PAGE_INDICES, pages);
  s[5] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, rows, c->q_heads, CKV));
  return 6;
}

static int64_t mla_flops(const bench_case *c) {
  return 2 * c->q_heads * (CKV + KPE + CKV) * bench_visible_pairs(c) * c->batch;
}

static int32_t *ramp(int64_t count, int64_t step) {
  int32_t *values = malloc((size_t)count * sizeof *values);
  if (!values) {
    bench_fail("out of host memory for a %lld-entry index array", (long long)count);
    return NULL;
  }
  for (int64_t i = 0; i < count; ++i)
    values[i] = (int32_t)(i * step);
  return values;
}

static int prepare_mla(const bench_case *c, void *stream, void **state) {
  mla_state *s = calloc(1, sizeof *s);
  if (!s)
    return bench_fail("out of host memory for an MLA plan state");
  ignis_mla_plan_config config = IGNIS_MLA_PLAN_CONFIG_INIT;
  config.device = c->device;
  config.num_heads = c->q_heads;
  config.page_size = c->page_size;
  config.q_dtype = config.kv_dtype = c->dtype;
  config.causal = 1;
  config.sm_scale = 1.0 / sqrt(192.0);
  config.max_batch_size = c->batch;
  config.max_q_tokens = c->batch * c->tokens;
  config.max_kv_len = c->kv_len;
  int32_t *qo = ramp(c->batch + 1, c->tokens), *kv_indptr = ramp(c->batch + 1, bench_pages_per_request(c));
  int32_t *kv_len = ramp(c->batch, 0);
  int rc = qo && kv_indptr && kv_len ? 0 : -1;
  for (int64_t b = 0; rc == 0 && b < c->batch; ++b)
    kv_len[b] = (int32_t)c->kv_len;
  if (rc == 0)
    rc = bench_check_status(ignis_mla_plan_create(&config, &s->plan), "ignis_mla_plan_create");
  if (rc == 0)
    rc = bench_check_status(ignis_mla_workspace_size(s->plan, &s->workspace_bytes),
                            "ignis_mla_workspace_size");
  if (rc == 0 && s->workspace_bytes > 0)
    rc = bench_device_alloc(c->device, s->workspace_bytes, &s->workspace);
  if (rc == 0)
    rc = bench_check_status(ignis_mla_plan_update(s->plan, qo, kv_indptr, kv_len, c->batch, s->workspace,
                                                  s->workspace_bytes, stream),
                            "ignis_mla_plan_update");
  int64_t work = 0, merged = 0;
  if (rc == 0)
    rc = bench_check_status(ignis_mla_plan_info(s->plan, &work, &merged), "ignis_mla_plan_info");
  free(qo);
  free(kv_indptr);
  free(kv_len);
  if (rc != 0) {
    release_mla(c, s);
    return -1;
  }
  *state = s;
  return 0;
}

static ignis_status call_mla(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  const mla_state *s = state;
  return ignis_mla_run(s->plan, &t[0], &t[1], &t[2], &t[3], &t[4], 1.0, 1.0, &t[5], NULL, s->workspace,
                       s->workspace_bytes, stream);
}

/* append: every request appends all of its kv_len tokens */
static int describe_append_mla(const bench_case *c, bench_tensor_spec *s) {
  const int64_t nnz = c->batch * c->kv_len, pages = bench_num_pages(c);
  s[0] = BENCH_SPEC("append_ckv", c->dtype, BENCH_FILL_RANDOM, nnz, CKV);
  s[1] = BENCH_SPEC("append_kpe", c->dtype, BENCH_FILL_RANDOM, nnz, KPE);
  s[2] = BENCH_SPEC("batch_indices", IGNIS_I32, BENCH_FILL_APPEND_BATCH, nnz);
  s[3] = BENCH_SPEC("positions", IGNIS_I32, BENCH_FILL_APPEND_POSITION, nnz);
  s[4] = bench_inout(BENCH_SPEC("ckv_cache", c->dtype, BENCH_FILL_RANDOM, pages, c->page_size, CKV));
  s[5] = bench_inout(BENCH_SPEC("kpe_cache", c->dtype, BENCH_FILL_RANDOM, pages, c->page_size, KPE));
  s[4].write_only = s[5].write_only = 1;
  s[4].bytes_moved = s[0].bytes_moved;
  s[5].bytes_moved = s[1].bytes_moved;
  s[6] = BENCH_SPEC("kv_indices", IGNIS_I32, BENCH_FILL_PAGE_INDICES, pages);
  s[7] = BENCH_SPEC("kv_indptr", IGNIS_I32, BENCH_FILL_PAGE_INDPTR, c->batch + 1);
  s[8] = BENCH_SPEC("kv_last_page_len", IGNIS_I32, BENCH_FILL_LAST_PAGE_LEN, c->batch);
  return 9;
}

static ignis_status call_append_mla(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_append_paged_mla_kv_cache(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &t[6], &t[7], &t[8],
                                         stream);
}

/* "B64 T1 L4k 16h p64" */
static void shape_mla(const bench_case *c, char *text, size_t size) {
  char kv_len[24];
  bench_format_count(c->kv_len, kv_len, sizeof kv_len);
  if (c->routine->dims & BENCH_DIM_Q_HEADS)
    snprintf(text, size, "B%lld T%lld L%s %lldh p%lld", (long long)c->batch, (long long)c->tokens, kv_len,
             (long long)c->q_heads, (long long)c->page_size);
  else
    snprintf(text, size, "B%lld L%s p%lld", (long long)c->batch, kv_len, (long long)c->page_size);
}

#define MLA_SHAPE(group, b, t, l, h, p)                                                                      \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .batch = (b), .tokens = (t), .kv_len = (l), .q_heads = (h),        \
              .page_size = (p), .causal = 1)
#define MLA_DIMS                                                                                             \
  (BENCH_DIM_BATCH | BENCH_DIM_TOKENS | BENCH_DIM_KV_LEN | BENCH_DIM_Q_HEADS | BENCH_DIM_PAGE_SIZE)
#define TINY_MLA BENCH_DIMS(.batch = 2, .tokens = 2, .kv_len = 20, .q_heads = 4, .page_size = 16, .causal = 1)

static const bench_routine mla_routines[] = {
    {.name = "mla",
     .family = &bench_family_mla,
     .dtypes = BENCH_DTYPES_HALF,
     .tiny = TINY_MLA,
     .summary =
         "MLA attention over the paged latent cache (BatchMLAPagedAttentionWrapper): plan once, update "
         "once, time the run",
     .functions = "ignis_mla_plan_create ignis_mla_workspace_size ignis_mla_plan_update ignis_mla_plan_info "
                  "ignis_mla_run ignis_mla_plan_destroy",
     .dims = MLA_DIMS,
     .bytes_rule = "ckv + kpe (B*L*576*es, the tokens held) + q (B*T*Hq*576*es) + out (B*T*Hq*512*es) + "
                   "kv_indices (pages*4)",
     .flops_rule = "2*Hq*(576+512) per visible query-key pair, per request: T*(L-T) + T*(T+1)/2 (causal)",
     .flops = mla_flops,
     .gpu_suite = BENCH_SUITE(MLA_SHAPE(4, 64, 1, 4096, 16, 64), MLA_SHAPE(4, 128, 1, 8192, 16, 64),
                              MLA_SHAPE(4, 64, 1, 4096, 128, 64), MLA_SHAPE(4, 64, 2, 4096, 128, 64),
                              MLA_SHAPE(4, 1, 1, 32768, 128, 64), MLA_SHAPE(4, 1, 2048, 10240, 128, 64)),
     .host_suite = BENCH_SUITE(MLA_SHAPE(4, 2, 1, 512, 16, 64)),
     .describe = describe_mla,
     .prepare = prepare_mla,
     .release = release_mla,
     .call = call_mla},
    {.name = "append_paged_mla_kv_cache",
     .family = &bench_family_mla,
     .dtypes = BENCH_DTYPES_HALF,
     .tiny = TINY_MLA,
     .summary = "write ckv / kpe rows at their pages and slots",
     .functions = "ignis_append_paged_mla_kv_cache",
     .dims = BENCH_DIM_BATCH | BENCH_DIM_KV_LEN | BENCH_DIM_PAGE_SIZE,
     .bytes_rule =
         "rows read and written (2*B*L*576*es) + batch_indices, positions (B*L*4 each) + page table",
     .gpu_suite = BENCH_SUITE(MLA_SHAPE(4, 64, 1, 1024, 16, 64)),
     .host_suite = BENCH_SUITE(MLA_SHAPE(4, 2, 1, 256, 16, 64)),
     .describe = describe_append_mla,
     .call = call_append_mla},
};

const bench_family bench_family_mla = {"mla", shape_mla, NULL, BENCH_TABLE(mla_routines)};
