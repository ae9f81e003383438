/* Registry entries of the paged-KV bookkeeping ops (include/ignis/paged_kv.h) and of the
 * attention-state merges (include/ignis/merge_state.h).
 *
 * Paged-KV cases: `batch` requests of kv_len tokens each, in pages of page_size taken in a random
 * order (another order per set), k_heads x head_dim per token, NHD layout. The append writes every
 * token of every request (an empty cache filled, as a prefill does), so the cache a call writes is
 * the cache it was given and rotation keeps it out of the L2. Bytes: the appended K and V are read
 * and written once into the cache; index tensors count at their size.
 *
 * Merge cases: `tokens` rows of q_heads x head_dim states (merge_states: `states` per row), v in
 * the case's dtype and s (the LSE, base 2) in f32; every input read once, every output written
 * once, an in-place state counted twice. */
#include <stdio.h>

#include "bench.h"

/* ---- paged KV ------------------------------------------------------------------------------- */
static int describe_append(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("append_key", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->k_heads, c->head_dim);
  s[1] = BENCH_SPEC("append_value", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->k_heads, c->head_dim);
  s[2] = BENCH_SPEC("batch_indices", IGNIS_I32, BENCH_FILL_APPEND_BATCH, c->tokens);
  s[3] = BENCH_SPEC("positions", IGNIS_I32, BENCH_FILL_APPEND_POSITION, c->tokens);
  int n = 4 + bench_page_cache_specs(c, 1, &s[4]);
  s[4] = bench_inout(s[4]); /* written once, each token held */
  s[5] = bench_inout(s[5]);
  s[4].write_only = s[5].write_only = 1;
  return n;
}

static ignis_status call_append(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  ignis_paged_kv_cache cache = bench_page_cache(&t[4], 1);
  return ignis_append_paged_kv_cache(&t[0], &t[1], &t[2], &t[3], &cache, stream);
}

static int describe_batch_indices_positions(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("append_indptr", IGNIS_I32, BENCH_FILL_INDPTR, c->batch + 1);
  s[1] = BENCH_SPEC("seq_lens", IGNIS_I32, BENCH_FILL_SEQ_LENS, c->batch);
  s[2] = bench_valid(bench_output(BENCH_SPEC("batch_indices", IGNIS_I32, BENCH_FILL_RANDOM, c->tokens)), 0,
                     c->batch - 1);
  s[3] = bench_valid(bench_output(BENCH_SPEC("positions", IGNIS_I32, BENCH_FILL_RANDOM, c->tokens)), 0,
                     c->kv_len - 1);
  return 4;
}

static ignis_status call_batch_indices_positions(const bench_case *c, ignis_tensor *t, void *state,
                                                 void *stream) {
  return ignis_get_batch_indices_positions(&t[0], &t[1], &t[2], &t[3], stream);
}

static int describe_seq_lens(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("kv_indptr", IGNIS_I32, BENCH_FILL_PAGE_INDPTR, c->batch + 1);
  s[1] = BENCH_SPEC("kv_last_page_len", IGNIS_I32, BENCH_FILL_LAST_PAGE_LEN, c->batch);
  s[2] =
      bench_valid(bench_output(BENCH_SPEC("seq_lens", IGNIS_I32, BENCH_FILL_RANDOM, c->batch)), 0, c->kv_len);
  return 3;
}

static ignis_status call_seq_lens(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_get_seq_lens(&t[0], &t[1], c->page_size, &t[2], stream);
}

/* "B4 L4k 8h d128 p16": the dims the routine uses. */
static void shape_paged_kv(const bench_case *c, char *text, size_t size) {
  char kv_len[24], heads[32] = "", page[24] = "";
  bench_format_count(c->kv_len, kv_len, sizeof kv_len);
  if (c->routine->dims & BENCH_DIM_K_HEADS)
    snprintf(heads, sizeof heads, " %lldh d%lld", (long long)c->k_heads, (long long)c->head_dim);
  if (c->routine->dims & BENCH_DIM_PAGE_SIZE)
    snprintf(page, sizeof page, " p%lld", (long long)c->page_size);
  snprintf(text, size, "B%lld L%s%s%s", (long long)c->batch, kv_len, heads, page);
}

/* Every request appends all of its kv_len tokens. */
static void complete_paged_kv(bench_case *c) {
  c->tokens = c->batch * c->kv_len;
}

/* ---- merges ------------------------------------------------------------------------------------ */
static int describe_merge_state(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("v_a", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->q_heads, c->head_dim);
  s[1] = BENCH_SPEC("s_a", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens, c->q_heads);
  s[2] = BENCH_SPEC("v_b", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->q_heads, c->head_dim);
  s[3] = BENCH_SPEC("s_b", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens, c->q_heads);
  s[4] = bench_output(BENCH_SPEC("v_out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->q_heads, c->head_dim));
  s[5] = bench_output(BENCH_SPEC("s_out", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens, c->q_heads));
  return 6;
}

static ignis_status call_merge_state(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_merge_state(&t[0], &t[1], &t[2], &t[3], IGNIS_LSE_BASE2, &t[4], &t[5], stream);
}

static int describe_merge_state_in_place(const bench_case *c, bench_tensor_spec *s) {
  s[0] = bench_inout(BENCH_SPEC("v", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->q_heads, c->head_dim));
  s[1] = bench_inout(BENCH_SPEC("s", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens, c->q_heads));
  s[2] = BENCH_SPEC("v_other", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->q_heads, c->head_dim);
  s[3] = BENCH_SPEC("s_other", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens, c->q_heads);
  s[0].bytes_moved *= 2;
  s[1].bytes_moved *= 2;
  return 4;
}

static ignis_status call_merge_state_in_place(const bench_case *c, ignis_tensor *t, void *state,
                                              void *stream) {
  return ignis_merge_state_in_place(&t[0], &t[1], &t[2], &t[3], NULL, IGNIS_LSE_BASE2, stream);
}

static int describe_merge_states(const bench_case *c, bench_tensor_spec *s) {
  s[0] = BENCH_SPEC("v", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->states, c->q_heads, c->head_dim);
  s[1] = BENCH_SPEC("s", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens, c->states, c->q_heads);
  s[2] = bench_output(BENCH_SPEC("v_out", c->dtype, BENCH_FILL_RANDOM, c->tokens, c->q_heads, c->head_dim));
  s[3] = bench_output(BENCH_SPEC("s_out", IGNIS_F32, BENCH_FILL_RANDOM, c->tokens, c->q_heads));
  return 4;
}

static ignis_status call_merge_states(const bench_case *c, ignis_tensor *t, void *state, void *stream) {
  return ignis_merge_states(&t[0], &t[1], IGNIS_LSE_BASE2, &t[2], &t[3], stream);
}

/* "4096tok 32h d128", "1024tok 8st 32h d128". */
static void shape_merge(const bench_case *c, char *text, size_t size) {
  char states[24] = "";
  if (c->routine->dims & BENCH_DIM_STATES)
    snprintf(states, sizeof states, " %lldst", (long long)c->states);
  snprintf(text, size, "%lldtok%s %lldh d%lld", (long long)c->tokens, states, (long long)c->q_heads,
           (long long)c->head_dim);
}

/* ---- the entries ------------------------------------------------------------------------------ */
#define PAGED_SHAPE(group, b, l)                                                                             \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .batch = (b), .kv_len = (l), .k_heads = 8, .head_dim = 128,        \
              .page_size = 16)
#define MERGE_DIMS (BENCH_DIM_TOKENS | BENCH_DIM_Q_HEADS | BENCH_DIM_HEAD_DIM)
#define MERGE_SHAPE(group, t, st)                                                                            \
  BENCH_SHAPE(group, .dtype = IGNIS_BF16, .tokens = (t), .q_heads = 32, .head_dim = 128, .states = (st))
#define MERGE_BYTES "v_a, v_b, v_out (T*H*D*es each) + s_a, s_b, s_out (T*H*4 each)"

/* What every entry of a family shares. */
#define PAGED_KV_ENTRY                                                                                       \
  .family = &bench_family_paged_kv, .dtypes = BENCH_DTYPES_FLOAT,                                            \
  .tiny = BENCH_DIMS(.batch = 2, .kv_len = 20, .k_heads = 2, .head_dim = 64, .page_size = 16)
#define MERGE_ENTRY                                                                                          \
  .family = &bench_family_merge, .dtypes = BENCH_DTYPES_FLOAT,                                               \
  .tiny = BENCH_DIMS(.tokens = 3, .q_heads = 2, .head_dim = 64, .states = 3)

static const bench_routine paged_kv_routines[] = {
    {PAGED_KV_ENTRY, .name = "append_paged_kv_cache",
     .summary = "write appended K/V tokens into their pages (NHD)",
     .functions = "ignis_append_paged_kv_cache",
     .dims =
         BENCH_DIM_BATCH | BENCH_DIM_KV_LEN | BENCH_DIM_K_HEADS | BENCH_DIM_HEAD_DIM | BENCH_DIM_PAGE_SIZE,
     .bytes_rule = "append_key/value read and written into the cache (4*T*Hk*D*es, T = B*L) + batch_indices, "
                   "positions (T*4 each) + page table (at its size)",
     .gpu_suite = BENCH_SUITE(PAGED_SHAPE(4, 4, 4096), PAGED_SHAPE(4, 64, 16)),
     .host_suite = BENCH_SUITE(PAGED_SHAPE(4, 2, 1024)), .describe = describe_append, .call = call_append},
    {PAGED_KV_ENTRY, .name = "batch_indices_positions",
     .summary = "request and position of every appended token (i32; the dtype does not apply)",
     .functions = "ignis_get_batch_indices_positions", .dims = BENCH_DIM_BATCH | BENCH_DIM_KV_LEN,
     .bytes_rule = "append_indptr ((B+1)*4) + seq_lens (B*4) + batch_indices, positions (T*4 each)",
     .gpu_suite = BENCH_SUITE(PAGED_SHAPE(4, 64, 256)), .host_suite = BENCH_SUITE(PAGED_SHAPE(4, 16, 256)),
     .describe = describe_batch_indices_positions, .call = call_batch_indices_positions},
    {PAGED_KV_ENTRY, .name = "get_seq_lens",
     .summary = "request lengths from the page table (i32; the dtype does not apply)",
     .functions = "ignis_get_seq_lens", .dims = BENCH_DIM_BATCH | BENCH_DIM_KV_LEN | BENCH_DIM_PAGE_SIZE,
     .bytes_rule = "kv_indptr ((B+1)*4) + kv_last_page_len, seq_lens (B*4 each)",
     .gpu_suite = BENCH_SUITE(PAGED_SHAPE(4, 256, 4096)), .host_suite = BENCH_SUITE(PAGED_SHAPE(4, 64, 1024)),
     .describe = describe_seq_lens, .call = call_seq_lens},
};

static const bench_routine merge_routines[] = {
    {MERGE_ENTRY, .name = "merge_state", .summary = "merge two attention states (LSE base 2)",
     .functions = "ignis_merge_state", .dims = MERGE_DIMS, .bytes_rule = MERGE_BYTES,
     .gpu_suite = BENCH_SUITE(MERGE_SHAPE(4, 4096, 0), MERGE_SHAPE(4, 128, 0)),
     .host_suite = BENCH_SUITE(MERGE_SHAPE(4, 512, 0)), .describe = describe_merge_state,
     .call = call_merge_state},
    {MERGE_ENTRY, .name = "merge_state_in_place", .summary = "merge a state into (v, s) in place, every row",
     .functions = "ignis_merge_state_in_place", .dims = MERGE_DIMS,
     .bytes_rule = "v, s read and written (2*T*H*(D*es+4)) + v_other, s_other (T*H*(D*es+4))",
     .gpu_suite = BENCH_SUITE(MERGE_SHAPE(4, 4096, 0)), .host_suite = BENCH_SUITE(MERGE_SHAPE(4, 512, 0)),
     .describe = describe_merge_state_in_place, .call = call_merge_state_in_place},
    {MERGE_ENTRY, .name = "merge_states", .summary = "merge `states` attention states per row",
     .functions = "ignis_merge_states", .dims = MERGE_DIMS | BENCH_DIM_STATES,
     .bytes_rule = "v (T*S*H*D*es) + s (T*S*H*4) + v_out (T*H*D*es) + s_out (T*H*4)",
     .gpu_suite = BENCH_SUITE(MERGE_SHAPE(4, 1024, 8)), .host_suite = BENCH_SUITE(MERGE_SHAPE(4, 128, 4)),
     .describe = describe_merge_states, .call = call_merge_states},
};

const bench_family bench_family_paged_kv = {"paged_kv", shape_paged_kv, complete_paged_kv,
                                            BENCH_TABLE(paged_kv_routines)};
const bench_family bench_family_merge = {"merge", shape_merge, NULL, BENCH_TABLE(merge_routines)};
