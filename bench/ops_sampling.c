/* Registry entries of the sampling ops (include/ignis/sampling.h): softmax, sampling with and
 * without top-k / top-p / min-p filters, the renorm and mask ops, chain speculative sampling and
 * top-k selection; and the fused top-k transforms of sparse attention (include/ignis/topk.h).
 *
 * Cases: `batch` rows of a vocabulary of `vocab` tokens in the case's dtype (the suite's: f32, as
 * engines sample from f32 probabilities). Logits are standard normal and probabilities their
 * unnormalized softmax weights (exp of a standard normal), the distributions bench/
 * sampling_compare.py uses. Filters: top-k 50, top-p 0.9, min-p 0.1, top-k first then top-p;
 * one fixed seed and offset (a call's cost does not depend on them).
 *
 * Top-k transforms (SGLang's DSA indexer): `batch` rows of `kv_len` standard normal scores, every
 * window the whole row, k = 2048 (half the row when the row is shorter than 4096); the page table
 * is page_size 1, each row's slots a distinct random KV slot, and the ragged offsets random.
 *
 * Bytes: the rows read once (a sampling kernel that passes over a row several times still counts
 * it once), every output written once, counters updated in place twice; a transform reads the
 * page-table entries or offsets it maps (k per row, or one per row). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#define TOP_K 50
#define TOP_P 0.9
#define MIN_P 0.1
#define DSA_TOP_K 2048

static ignis_sampling_options sampling_options(void) {
  ignis_sampling_options options = IGNIS_SAMPLING_OPTIONS_INIT;
  options.seed = 1234;
  return options;
}

/* The workspace of the multi-block path (include/ignis/sampling.h), zero-filled once, as an engine
 * would keep it: the sampling calls that can take it get it on CUDA (IGNIS_SAMPLING_SPLIT=0 in the
 * environment times them without it). */
typedef struct sampling_state {
  void *workspace;
  size_t workspace_bytes;
} sampling_state;

static int prepare_workspace(const bench_case *c, void *stream, void **state) {
  (void)stream;
  sampling_state *s = calloc(1, sizeof *s);
  if (!s)
    return bench_fail("out of host memory for a sampling state");
  size_t bytes = 0;
  if (c->device.type != IGNIS_DEVICE_CPU &&
      bench_check_status(ignis_sampling_workspace_size(c->batch, c->vocab, &bytes),
                         "ignis_sampling_workspace_size") != 0) {
    free(s);
    return -1;
  }
  if (bytes > 0) {
    void *zeros = calloc(1, bytes);
    if (!zeros || bench_device_alloc(c->device, bytes, &s->workspace) != 0 ||
        bench_device_upload(c->device, s->workspace, zeros, bytes) != 0) {
      free(zeros);
      if (s->workspace)
        bench_device_free(c->device, s->workspace);
      free(s);
      return zeros ? -1 : bench_fail("out of host memory for a workspace image");
    }
    free(zeros);
    s->workspace_bytes = bytes;
  }
  *state = s;
  return 0;
}

static void release_workspace(const bench_case *c, void *state) {
  sampling_state *s = state;
  if (s->workspace)
    bench_device_free(c->device, s->workspace);
  free(s);
}

static ignis_sampling_options workspace_options(void *state) {
  ignis_sampling_options options = sampling_options();
  const sampling_state *s = state;
  options.workspace = s->workspace;
  options.workspace_bytes = s->workspace_bytes;
  return options;
}

/* rows [B, V] and the samples [B] drawn from them. */
static int describe_sampling(const bench_case *c, bench_fill rows, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC(rows == BENCH_FILL_PROBS ? "probs" : "logits", c->dtype, rows, c->batch, c->vocab);
  s[1] = bench_valid(bench_output(BENCH_SPEC("samples", IGNIS_I32, BENCH_FILL_RANDOM, c->batch)), 0,
                     c->vocab - 1);
  return 2;
}

static int describe_from_probs(const bench_case *c, bench_tensor_spec *s) {
  return describe_sampling(c, BENCH_FILL_PROBS, s);
}

static int describe_from_logits(const bench_case *c, bench_tensor_spec *s) {
  return describe_sampling(c, BENCH_FILL_NORMAL, s);
}

/* rows [B, V] -> the same shape: softmax, renorm and mask ops. */
static int describe_row_map(const bench_case *c, bench_fill rows, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("input", c->dtype, rows, c->batch, c->vocab);
  s[1] = bench_output(BENCH_SPEC("out", c->dtype, BENCH_FILL_RANDOM, c->batch, c->vocab));
  return 2;
}

static int describe_probs_map(const bench_case *c, bench_tensor_spec *s) {
  return describe_row_map(c, BENCH_FILL_PROBS, s);
}

static int describe_logits_map(const bench_case *c, bench_tensor_spec *s) {
  return describe_row_map(c, BENCH_FILL_NORMAL, s);
}

/* Masked logits are -inf outside the top-k. */
static int describe_mask_logits(const bench_case *c, bench_tensor_spec *s) {
  int n = describe_row_map(c, BENCH_FILL_NORMAL, s);
  s[1].neg_inf_ok = 1;
  return n;
}

static ignis_status call_softmax(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_softmax(&t[0], NULL, 1.0, &t[1], stream);
}

static ignis_status call_sampling_from_probs(const bench_case *c, ignis_tensor *t, void *state,
                                             void *stream) {
  ignis_sampling_options options = workspace_options(state);
  return ignis_sampling_from_probs(&t[0], &t[1], &options, stream);
}

static ignis_status call_sampling_from_logits(const bench_case *c, ignis_tensor *t, void *state,
                                              void *stream) {
  ignis_sampling_options options = workspace_options(state);
  return ignis_sampling_from_logits(&t[0], &t[1], &options, stream);
}

static ignis_status call_top_p_sampling(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_sampling_options options = workspace_options(state);
  return ignis_top_p_sampling_from_probs(&t[0], NULL, TOP_P, &t[1], &options, stream);
}

static ignis_status call_top_k_sampling(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_sampling_options options = workspace_options(state);
  return ignis_top_k_sampling_from_probs(&t[0], NULL, TOP_K, &t[1], &options, stream);
}

static ignis_status call_min_p_sampling(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_sampling_options options = workspace_options(state);
  return ignis_min_p_sampling_from_probs(&t[0], NULL, MIN_P, &t[1], &options, stream);
}

static ignis_status call_top_k_top_p_sampling(const bench_case *c, ignis_tensor *t, void *state,
                                              void *stream) {
  ignis_sampling_options options = workspace_options(state);
  return ignis_top_k_top_p_sampling_from_probs(&t[0], NULL, TOP_K, NULL, TOP_P, IGNIS_FILTER_TOP_K_FIRST,
                                               &t[1], &options, stream);
}

static ignis_status call_top_k_top_p_from_logits(const bench_case *c, ignis_tensor *t, void *state,
                                                 void *stream) {
  ignis_sampling_options options = workspace_options(state);
  return ignis_top_k_top_p_sampling_from_logits(&t[0], NULL, TOP_K, NULL, TOP_P, IGNIS_FILTER_TOP_K_FIRST,
                                                &t[1], &options, stream);
}

static ignis_status call_top_p_renorm_probs(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_top_p_renorm_probs(&t[0], NULL, TOP_P, &t[1], stream);
}

static ignis_status call_top_k_renorm_probs(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_top_k_renorm_probs(&t[0], NULL, TOP_K, &t[1], stream);
}

static ignis_status call_top_k_mask_logits(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_top_k_mask_logits(&t[0], NULL, TOP_K, &t[1], stream);
}

/* `states` draft tokens per request: draft and target probabilities, the drafted ids, the output
 * row and the two counters the call increments. */
static int describe_chain_speculative(const bench_case *c, bench_tensor_spec *s) {
  int64_t n = c->states;
  s[0] = BENCH_SPEC("draft_probs", c->dtype, BENCH_FILL_PROBS, c->batch, n, c->vocab);
  s[1] = BENCH_SPEC("draft_token_ids", IGNIS_I32, BENCH_FILL_TOKEN_IDS, c->batch, n);
  s[2] = BENCH_SPEC("target_probs", c->dtype, BENCH_FILL_PROBS, c->batch, n + 1, c->vocab);
  s[3] =
      bench_valid(bench_output(BENCH_SPEC("output_token_ids", IGNIS_I32, BENCH_FILL_RANDOM, c->batch, n + 1)),
                  -1, c->vocab - 1);
  s[4] = bench_valid(bench_inout(BENCH_SPEC("accepted", IGNIS_I32, BENCH_FILL_TOKEN_IDS, c->batch)), 0,
                     INT32_MAX);
  s[5] = bench_valid(bench_inout(BENCH_SPEC("emitted", IGNIS_I32, BENCH_FILL_TOKEN_IDS, c->batch)), 0,
                     INT32_MAX);
  s[4].bytes_moved *= 2;
  s[5].bytes_moved *= 2;
  return 6;
}

static ignis_status call_chain_speculative(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_sampling_options options = sampling_options();
  return ignis_chain_speculative_sampling(&t[0], &t[1], &t[2], &t[3], &t[4], &t[5], &options, stream);
}

static int describe_top_k(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("input", c->dtype, BENCH_FILL_NORMAL, c->batch, c->vocab);
  s[1] = bench_output(BENCH_SPEC("values", c->dtype, BENCH_FILL_RANDOM, c->batch, TOP_K));
  s[2] = bench_valid(bench_output(BENCH_SPEC("indices", IGNIS_I32, BENCH_FILL_RANDOM, c->batch, TOP_K)), 0,
                     c->vocab - 1);
  return 3;
}

static ignis_status call_top_k(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_top_k(&t[0], TOP_K, 1, &t[1], &t[2], stream);
}

/* k of a transform case: DSA's 2048, or half a shorter row (so a tiny case still selects). */
static int64_t transform_k(const bench_case *c) {
  return c->kv_len < 2 * DSA_TOP_K ? (c->kv_len + 1) / 2 : DSA_TOP_K;
}

/* scores [B, L], lengths [B], then the page table (as [B * L]: the slots of row b are entries
 * b * L .. (b + 1) * L - 1, a permutation of every slot) or the offsets [B], and out [B, k]. */
static int describe_transform(const bench_case *c, int paged, bench_tensor_spec *s) {
  const int64_t k = transform_k(c);
  s[0] = BENCH_SPEC("input", c->dtype, BENCH_FILL_NORMAL, c->batch, c->kv_len);
  s[1] = BENCH_SPEC("lengths", IGNIS_I32, BENCH_FILL_SEQ_LENS, c->batch);
  if (paged) {
    s[2] = BENCH_SPEC("src_page_table", IGNIS_I32, BENCH_FILL_PAGE_INDICES, c->batch * c->kv_len);
    s[2].bytes_moved = c->batch * k * 4;
  } else {
    s[2] = BENCH_SPEC("offsets", IGNIS_I32, BENCH_FILL_OFFSETS, c->batch);
  }
  const int64_t top = paged ? c->batch * c->kv_len - 1 : BENCH_MAX_POSITION + c->kv_len;
  s[3] = bench_valid(bench_output(BENCH_SPEC("out", IGNIS_I32, BENCH_FILL_RANDOM, c->batch, k)), 0, top);
  return 4;
}

static int describe_page_table_transform(const bench_case *c, bench_tensor_spec *s) {
  return describe_transform(c, 1, s);
}

static int describe_ragged_transform(const bench_case *c, bench_tensor_spec *s) {
  return describe_transform(c, 0, s);
}

static ignis_status call_page_table_transform(const bench_case *c, ignis_tensor *t, void *state,
                                              void *stream) {
  ignis_tensor table = t[2];
  table.ndim = 2;
  table.shape[0] = c->batch;
  table.shape[1] = c->kv_len;
  table.strides[0] = c->kv_len;
  table.strides[1] = 1;
  return ignis_top_k_page_table_transform(&t[0], &table, &t[1], transform_k(c), NULL, NULL, NULL, 1,
                                          IGNIS_TOPK_TIE_BREAK_NONE, &t[3], NULL, stream);
}

static ignis_status call_ragged_transform(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_top_k_ragged_transform(&t[0], &t[2], &t[1], transform_k(c), NULL, IGNIS_TOPK_TIE_BREAK_NONE,
                                      &t[3], stream);
}

/* "B128 V128256", "B32 n4 V128256"; the transforms "B64 L64k k2048". */
static void shape_sampling(const bench_case *c, char *text, size_t size) {
  if (c->routine->dims & BENCH_DIM_KV_LEN) {
    char len[24];
    bench_format_count(c->kv_len, len, sizeof len);
    snprintf(text, size, "B%lld L%s k%lld", (long long)c->batch, len, (long long)transform_k(c));
    return;
  }
  char drafts[24] = "";
  if (c->routine->dims & BENCH_DIM_STATES)
    snprintf(drafts, sizeof drafts, " n%lld", (long long)c->states);
  snprintf(text, size, "B%lld%s V%lld", (long long)c->batch, drafts, (long long)c->vocab);
}

/* ---- the entries ------------------------------------------------------------------------------ */
#define SAMPLING_DIMS (BENCH_DIM_BATCH | BENCH_DIM_VOCAB)
#define SAMPLING_SHAPE(group, b, n)                                                                          \
  BENCH_SHAPE(group, .dtype = IGNIS_F32, .batch = (b), .vocab = 128256, .states = (n))
#define GPU_SAMPLING BENCH_SUITE(SAMPLING_SHAPE(4, 128, 0))
#define HOST_SAMPLING BENCH_SUITE(SAMPLING_SHAPE(4, 4, 0))
#define SAMPLE_BYTES "probs (B*V*es) + samples (B*4)"
#define LOGITS_SAMPLE_BYTES "logits (B*V*es) + samples (B*4)"
#define MAP_BYTES "input + out (B*V*es each)"

/* What every entry of the family shares. */
#define SAMPLING_ENTRY                                                                                       \
  .family = &bench_family_sampling, .dtypes = BENCH_DTYPES_FLOAT,                                            \
  .tiny = BENCH_DIMS(.batch = 3, .vocab = 300, .states = 2)

/* The transforms' entries: rows of kv_len scores (DSA decode: 64 rows of a 64K context, and 8 rows
 * of a 128K one). */
#define TRANSFORM_SHAPE(group, b, l) BENCH_SHAPE(group, .dtype = IGNIS_F32, .batch = (b), .kv_len = (l))
#define TRANSFORM_ENTRY                                                                                      \
  .family = &bench_family_sampling, .dtypes = BENCH_DTYPES_FLOAT,                                            \
  .dims = BENCH_DIM_BATCH | BENCH_DIM_KV_LEN, .tiny = BENCH_DIMS(.batch = 3, .kv_len = 300),                 \
  .gpu_suite = BENCH_SUITE(TRANSFORM_SHAPE(4, 64, 65536), TRANSFORM_SHAPE(4, 8, 131072)),                    \
  .host_suite = BENCH_SUITE(TRANSFORM_SHAPE(4, 4, 32768))

static const bench_routine sampling_routines[] = {
    {SAMPLING_ENTRY, .name = "softmax", .summary = "probs = softmax(logits), temperature 1",
     .functions = "ignis_softmax", .dims = SAMPLING_DIMS, .bytes_rule = MAP_BYTES, .gpu_suite = GPU_SAMPLING,
     .host_suite = HOST_SAMPLING, .describe = describe_logits_map, .call = call_softmax},
    {SAMPLING_ENTRY, .name = "sampling_from_probs", .summary = "sample a token per row, no filter",
     .functions = "ignis_sampling_from_probs ignis_sampling_workspace_size", .dims = SAMPLING_DIMS,
     .bytes_rule = SAMPLE_BYTES, .gpu_suite = BENCH_SUITE(SAMPLING_SHAPE(4, 128, 0), SAMPLING_SHAPE(4, 1, 0)),
     .host_suite = HOST_SAMPLING, .describe = describe_from_probs, .prepare = prepare_workspace,
     .release = release_workspace, .call = call_sampling_from_probs},
    {SAMPLING_ENTRY, .name = "sampling_from_logits", .summary = "sample from softmax(logits), no filter",
     .functions = "ignis_sampling_from_logits ignis_sampling_workspace_size", .dims = SAMPLING_DIMS,
     .bytes_rule = LOGITS_SAMPLE_BYTES, .gpu_suite = GPU_SAMPLING, .host_suite = HOST_SAMPLING,
     .describe = describe_from_logits, .prepare = prepare_workspace, .release = release_workspace,
     .call = call_sampling_from_logits},
    {SAMPLING_ENTRY, .name = "top_p_sampling", .summary = "top-p 0.9 sampling from probabilities",
     .functions = "ignis_top_p_sampling_from_probs ignis_sampling_workspace_size", .dims = SAMPLING_DIMS,
     .bytes_rule = SAMPLE_BYTES, .gpu_suite = BENCH_SUITE(SAMPLING_SHAPE(4, 128, 0), SAMPLING_SHAPE(4, 1, 0)),
     .host_suite = HOST_SAMPLING, .describe = describe_from_probs, .prepare = prepare_workspace,
     .release = release_workspace, .call = call_top_p_sampling},
    {SAMPLING_ENTRY, .name = "top_k_sampling", .summary = "top-k 50 sampling from probabilities",
     .functions = "ignis_top_k_sampling_from_probs ignis_sampling_workspace_size", .dims = SAMPLING_DIMS,
     .bytes_rule = SAMPLE_BYTES, .gpu_suite = BENCH_SUITE(SAMPLING_SHAPE(4, 128, 0), SAMPLING_SHAPE(4, 1, 0)),
     .host_suite = HOST_SAMPLING, .describe = describe_from_probs, .prepare = prepare_workspace,
     .release = release_workspace, .call = call_top_k_sampling},
    {SAMPLING_ENTRY, .name = "min_p_sampling", .summary = "min-p 0.1 sampling from probabilities",
     .functions = "ignis_min_p_sampling_from_probs ignis_sampling_workspace_size", .dims = SAMPLING_DIMS,
     .bytes_rule = SAMPLE_BYTES, .gpu_suite = GPU_SAMPLING, .host_suite = HOST_SAMPLING,
     .describe = describe_from_probs, .prepare = prepare_workspace, .release = release_workspace,
     .call = call_min_p_sampling},
    {SAMPLING_ENTRY, .name = "top_k_top_p_sampling",
     .summary = "top-k 50 then top-p 0.9 sampling from probabilities",
     .functions = "ignis_top_k_top_p_sampling_from_probs ignis_sampling_workspace_size",
     .dims = SAMPLING_DIMS, .bytes_rule = SAMPLE_BYTES,
     .gpu_suite = BENCH_SUITE(SAMPLING_SHAPE(4, 128, 0), SAMPLING_SHAPE(4, 1, 0)),
     .host_suite = HOST_SAMPLING, .describe = describe_from_probs, .prepare = prepare_workspace,
     .release = release_workspace, .call = call_top_k_top_p_sampling},
    {SAMPLING_ENTRY, .name = "top_k_top_p_from_logits",
     .summary = "top-k 50 then top-p 0.9 sampling from logits",
     .functions = "ignis_top_k_top_p_sampling_from_logits ignis_sampling_workspace_size",
     .dims = SAMPLING_DIMS, .bytes_rule = LOGITS_SAMPLE_BYTES, .gpu_suite = GPU_SAMPLING,
     .host_suite = HOST_SAMPLING, .describe = describe_from_logits, .prepare = prepare_workspace,
     .release = release_workspace, .call = call_top_k_top_p_from_logits},
    {SAMPLING_ENTRY, .name = "top_p_renorm_probs",
     .summary = "probabilities renormalized over the top-p 0.9 set", .functions = "ignis_top_p_renorm_probs",
     .dims = SAMPLING_DIMS, .bytes_rule = MAP_BYTES, .gpu_suite = GPU_SAMPLING, .host_suite = HOST_SAMPLING,
     .describe = describe_probs_map, .call = call_top_p_renorm_probs},
    {SAMPLING_ENTRY, .name = "top_k_renorm_probs",
     .summary = "probabilities renormalized over the top-k 50 set", .functions = "ignis_top_k_renorm_probs",
     .dims = SAMPLING_DIMS, .bytes_rule = MAP_BYTES, .gpu_suite = GPU_SAMPLING, .host_suite = HOST_SAMPLING,
     .describe = describe_probs_map, .call = call_top_k_renorm_probs},
    {SAMPLING_ENTRY, .name = "top_k_mask_logits", .summary = "logits outside the top-k 50 set to -inf",
     .functions = "ignis_top_k_mask_logits", .dims = SAMPLING_DIMS, .bytes_rule = MAP_BYTES,
     .gpu_suite = GPU_SAMPLING, .host_suite = HOST_SAMPLING, .describe = describe_mask_logits,
     .call = call_top_k_mask_logits},
    {SAMPLING_ENTRY, .name = "chain_speculative",
     .summary = "chain speculative sampling of `states` draft tokens per request",
     .functions = "ignis_chain_speculative_sampling", .dims = SAMPLING_DIMS | BENCH_DIM_STATES,
     .bytes_rule = "draft_probs (B*n*V*es) + target_probs (B*(n+1)*V*es) + draft ids (B*n*4) + output ids "
                   "(B*(n+1)*4) + counters read and written (4*B*4)",
     .gpu_suite = BENCH_SUITE(SAMPLING_SHAPE(4, 32, 4)), .host_suite = BENCH_SUITE(SAMPLING_SHAPE(4, 2, 4)),
     .describe = describe_chain_speculative, .call = call_chain_speculative},
    {SAMPLING_ENTRY, .name = "top_k",
     .summary = "the 50 largest entries of each row, sorted (values and indices)", .functions = "ignis_top_k",
     .dims = SAMPLING_DIMS, .bytes_rule = "input (B*V*es) + values (B*k*es) + indices (B*k*4)",
     .gpu_suite = GPU_SAMPLING, .host_suite = HOST_SAMPLING, .describe = describe_top_k, .call = call_top_k},
    {TRANSFORM_ENTRY, .name = "top_k_page_table_transform",
     .summary = "top-2048 of each row's scores mapped through a page table (DSA indexer)",
     .functions = "ignis_top_k_page_table_transform",
     .bytes_rule = "input (B*L*es) + lengths (B*4) + page-table entries mapped (B*k*4) + out (B*k*4)",
     .describe = describe_page_table_transform, .call = call_page_table_transform},
    {TRANSFORM_ENTRY, .name = "top_k_ragged_transform",
     .summary = "top-2048 of each row's scores plus a per-row offset (DSA indexer)",
     .functions = "ignis_top_k_ragged_transform",
     .bytes_rule = "input (B*L*es) + lengths and offsets (2*B*4) + out (B*k*4)",
     .describe = describe_ragged_transform, .call = call_ragged_transform},
};

const bench_family bench_family_sampling = {"sampling", shape_sampling, NULL, BENCH_TABLE(sampling_routines)};
