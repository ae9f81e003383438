/* Tests of prefill attention (include/ignis/prefill.h) and its planner (sched/prefill_plan.h).
 *
 * Every case builds one ragged batch (q [nnz_q, Hq, Dqk], k [nnz_kv, Hkv, Dqk], v [nnz_kv, Hkv,
 * Dvo], rounded to their dtypes) and an fp64 reference (ref_prefill: every visible key's logit,
 * softmax with the sink, written plainly, independent of the backend), then runs it as a ragged
 * plan, as a paged plan over the same data copied into shuffled pages (page sizes 1, 16, 64), and,
 * for one-request batches, as single prefill, comparing each against the reference; outputs are
 * poisoned before each call. Options: causal / custom masks (including empty rows), windows, soft
 * cap, RoPE, ALiBi, sinks, k/v scales, fp8 K/V, both LSE bases, GQA groups, head dims 64, 128, 256
 * and 192/128, zero-length queries and keys, split and unsplit schedules. Batches without a custom
 * mask also run over a block table (ignis_prefill_run_block_table), which test_block_table covers
 * further. The planner test checks
 * the schedule's invariants and bounds on random batches. Bad inputs must return the right status,
 * name the parameter and leave the outputs untouched. Every case runs on every backend and must
 * succeed there: the CUDA kernel covers every configuration the front end accepts.
 * Tolerances: the CPU backend computes in double, so out is held to the dtype's h_tol_for and lse to
 * 2e-5 relative. The CUDA kernel multiplies in 16 bits with f32 accumulation (softmax weights, and
 * with RoPE the rotated q and k, rounded to q's dtype), so it gets decode's GPU rule: out within
 * rtol * max|ref| (bf16 2e-2, f16 2e-3; doubled past 8192 keys), lse within rtol / 2 * (1 + |ref|). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "ignis/prefill.h"
#include "sched/prefill_plan.h"

/* ---- planner ---------------------------------------------------------------------------------- */
static void check_schedule(const ignis_prefill_planner *pl, const int32_t *qo, const int32_t *kv, int64_t B,
                           void *image) {
  ignis_prefill_schedule_header *hd = ignis_prefill_schedule_header_of(image);
  ignis_prefill_request *rq = ignis_prefill_schedule_requests_of(image);
  ignis_prefill_work *w = ignis_prefill_schedule_work_of(pl, image);
  ignis_prefill_merge *mg = ignis_prefill_schedule_merge_of(pl, image);
  CHECKF(hd->num_work <= pl->max_work, "num_work=%d max_work=%lld", hd->num_work, (long long)pl->max_work);
  CHECKF(hd->num_partials <= pl->max_partials, "num_partials=%d max=%lld", hd->num_partials,
         (long long)pl->max_partials);
  CHECKF(hd->num_merge <= pl->max_merge, "num_merge=%d max=%lld", hd->num_merge, (long long)pl->max_merge);
  CHECK(hd->batch_size == B);
  int64_t item = 0, merges = 0, slot = 0, mask = 0;
  int ok = 1;
  for (int64_t b = 0; b < B; ++b) {
    int64_t q_len = qo[b + 1] - qo[b], kv_len = kv[b + 1] - kv[b];
    ok &= rq[b].q_start == qo[b] && rq[b].q_len == q_len && rq[b].kv_start == kv[b] && rq[b].kv_len == kv_len &&
          rq[b].mask_offset == mask;
    mask += (q_len * kv_len + 7) / 8;
    for (int64_t r0 = 0; r0 < q_len * pl->group; r0 += pl->q_tile_rows) {
      int64_t first = item, lo = -1, hi = -1;
      while (item < hd->num_work && w[item].request == b && w[item].row_start == r0) {
        if (lo < 0)
          lo = w[item].kv_start;
        else
          ok &= w[item].kv_start == hi; /* contiguous chunks */
        hi = w[item].kv_end;
        ++item;
      }
      int64_t n = item - first;
      ok &= n >= 1 && lo >= 0 && hi <= kv_len && lo <= hi;
      if (n == 1) {
        ok &= w[first].partial == -1;
      } else {
        ok &= merges < hd->num_merge && mg[merges].request == b && mg[merges].row_start == r0 &&
              mg[merges].num_partials == n && mg[merges].first_partial == slot;
        for (int64_t i = 0; i < n; ++i)
          ok &= w[first + i].partial == slot + i && w[first + i].kv_start < w[first + i].kv_end;
        slot += n;
        ++merges;
      }
      /* causal: the range ends after the tile's last token */
      if (pl->causal && n >= 1) {
        int64_t r1 = r0 + pl->q_tile_rows < q_len * pl->group ? r0 + pl->q_tile_rows : q_len * pl->group;
        int64_t last_pos = kv_len - q_len + (r1 - 1) / pl->group;
        int64_t want = last_pos + 1 < kv_len ? last_pos + 1 : kv_len;
        ok &= hi == (want > 0 ? want : 0) || (hi == 0 && lo == 0);
      } else if (n >= 1 && pl->window_left < 0) {
        ok &= lo == 0 && hi == kv_len;
      }
    }
  }
  CHECKF(ok, "schedule invariants (B=%lld)", (long long)B);
  CHECK(item == hd->num_work && merges == hd->num_merge && slot == hd->num_partials);
}

static void test_planner(void) {
  h_rng rng = h_rng_make(7);
  void *image = NULL;
  for (int round = 0; round < 300; ++round) {
    int64_t max_batch = h_rng_int(&rng, 1, 40), Hkv = h_rng_int(&rng, 1, 8), group = h_rng_int(&rng, 1, 8);
    int64_t max_qo = h_rng_int(&rng, 1, 5000), max_kv = h_rng_int(&rng, 0, 20000);
    int32_t causal = (int32_t)h_rng_int(&rng, 0, 1), window = (int32_t)h_rng_int(&rng, -1, 3) * 300 - 1;
    int32_t disable = round % 5 == 1;
    int64_t fixed = round % 5 == 2 ? h_rng_int(&rng, 1, 2000) : 0;
    if (window < -1)
      window = -1;
    int64_t tile = round % 2 ? 128 : 64;
    ignis_prefill_planner pl;
    h_case("planner round %d", round);
    if (ignis_prefill_planner_init(&pl, max_batch, max_qo, max_kv, 1, Hkv, group, tile, causal, window, 132,
                                   disable, fixed) != 0)
      continue;
    image = realloc(image, ignis_prefill_schedule_bytes(&pl));
    int64_t B = h_rng_int(&rng, 0, max_batch);
    int32_t qo[41] = {0}, kv[41] = {0};
    int64_t q_left = max_qo;
    for (int64_t b = 0; b < B; ++b) {
      int64_t q = h_rng_int(&rng, 0, q_left < 600 ? q_left : 600);
      if (round % 7 == 0 && b == 0)
        q = q_left; /* one long request */
      q_left -= q;
      qo[b + 1] = qo[b] + (int32_t)q;
      kv[b + 1] = kv[b] + (int32_t)h_rng_int(&rng, 0, max_kv);
    }
    size_t used = ignis_prefill_plan_batch(&pl, qo, kv, NULL, B, image);
    CHECK(used <= ignis_prefill_schedule_bytes(&pl));
    check_schedule(&pl, qo, kv, B, image);
  }
  /* auto split: one long request on an idle GPU is split; a full batch is not */
  ignis_prefill_planner pl;
  h_case("planner auto split");
  CHECK(ignis_prefill_planner_init(&pl, 64, 64 * 512, 16384, 16, 1, 1, 128, 1, -1, 132, 0, 0) == 0);
  image = realloc(image, ignis_prefill_schedule_bytes(&pl));
  int32_t qo[65], kv[65], last[64];
  qo[0] = kv[0] = 0;
  qo[1] = 128;
  kv[1] = 1024;
  last[0] = 16;
  ignis_prefill_plan_batch(&pl, qo, kv, last, 1, image);
  CHECK(ignis_prefill_schedule_header_of(image)->num_merge == 1);
  CHECK(ignis_prefill_schedule_header_of(image)->num_work > 1);
  for (int b = 0; b < 64; ++b) {
    qo[b + 1] = qo[b] + 512;
    kv[b + 1] = kv[b] + 64;
    last[b] = 16;
  }
  ignis_prefill_plan_batch(&pl, qo, kv, last, 64, image);
  CHECK(ignis_prefill_schedule_header_of(image)->num_merge == 0);
  /* fixed split: request 0's items do not depend on the batch */
  h_case("planner fixed split");
  CHECK(ignis_prefill_planner_init(&pl, 8, 4096, 8192, 1, 2, 2, 128, 0, -1, 132, 0, 300) == 0);
  image = realloc(image, ignis_prefill_schedule_bytes(&pl));
  void *alone = malloc(ignis_prefill_schedule_bytes(&pl));
  int32_t qa[9] = {0, 300, 700, 1000}, ka[9] = {0, 5000, 5100, 8000};
  ignis_prefill_plan_batch(&pl, qa, ka, NULL, 1, alone);
  ignis_prefill_plan_batch(&pl, qa, ka, NULL, 3, image);
  int32_t n = ignis_prefill_schedule_header_of(alone)->num_work;
  CHECK(memcmp(ignis_prefill_schedule_work_of(&pl, alone), ignis_prefill_schedule_work_of(&pl, image),
               sizeof(ignis_prefill_work) * (size_t)n) == 0);
  free(alone);
  /* implicit schedule */
  h_case("implicit schedule");
  int64_t chunk = ignis_prefill_single_chunk_tokens(100, 20000, 4, 2, 128, 132);
  CHECK(chunk < 20000 && chunk >= IGNIS_PREFILL_MIN_CHUNK_TOKENS);
  int64_t tiles = ignis_prefill_implicit_tiles(100, 4, 128), chunks = ignis_prefill_implicit_chunks(20000, chunk);
  CHECK(tiles * chunks * 2 <= IGNIS_PREFILL_SINGLE_MAX_BLOCKS);
  CHECK(tiles * chunks <= ignis_prefill_single_max_partials(20000, 2));
  CHECK(ignis_prefill_single_chunk_tokens(4096, 20000, 4, 8, 128, 132) == 20000);
  free(image);
}

/* ---- data and reference ---------------------------------------------------------------------- */
typedef struct spec {
  int64_t B;
  int64_t q_len[8], kv_len[8];
  int64_t Hq, Hkv, Dqk, Dvo;
  ignis_dtype q_dtype, kv_dtype;
  ignis_mask_mode mask;
  ignis_attention_options opt;
  double k_scale, v_scale;
  int sinks;
  int empty_rows; /* custom mask: some rows see nothing */
  int split;      /* 0 auto, 1 disabled, 2 fixed */
} spec;

typedef struct batch {
  spec s;
  int32_t qo[9], kv[9];
  int64_t nq, nkv, mask_bytes;
  h_buf q, k, v, out, lse, mask, sinks;
  unsigned char *bits; /* the masks as booleans, request after request */
  double *ref_out, *ref_lse;
  double *qd, *kd, *vd; /* q, k, v as doubles while ref_prefill runs (h_get once per element) */
} batch;

static double logit_of(const spec *s, const batch *bt, int64_t b, int64_t i, int64_t h, int64_t j, int *visible) {
  const int64_t group = s->Hq / s->Hkv, q_len = s->q_len[b], kv_len = s->kv_len[b], q_pos = kv_len - q_len + i;
  *visible = 1;
  if (s->opt.window_left >= 0 && j < q_pos - s->opt.window_left)
    *visible = 0;
  if (s->mask == IGNIS_MASK_CAUSAL && j > q_pos)
    *visible = 0;
  if (s->mask == IGNIS_MASK_CUSTOM) {
    int64_t offset = 0;
    for (int64_t c = 0; c < b; ++c)
      offset += s->q_len[c] * s->kv_len[c];
    *visible &= bt->bits[offset + i * kv_len + j];
  }
  if (!*visible)
    return 0.0;
  double q[512], k[512];
  for (int64_t d = 0; d < s->Dqk; ++d) {
    q[d] = bt->qd[((bt->qo[b] + i) * s->Hq + h) * s->Dqk + d];
    k[d] = s->k_scale * bt->kd[((bt->kv[b] + j) * s->Hkv + h / group) * s->Dqk + d];
  }
  if (s->opt.pos_encoding_mode == IGNIS_POS_ENCODING_ROPE_LLAMA) {
    double *x[2] = {q, k}, pos[2] = {(double)q_pos, (double)j};
    for (int t = 0; t < 2; ++t)
      for (int64_t d = 0; d < s->Dqk / 2; ++d) {
        double f = pow(s->opt.rope_theta, -2.0 * (double)d / (double)s->Dqk) / s->opt.rope_scale;
        double a = x[t][d], c = x[t][d + s->Dqk / 2], an = pos[t] * f;
        x[t][d] = a * cos(an) - c * sin(an);
        x[t][d + s->Dqk / 2] = c * cos(an) + a * sin(an);
      }
  }
  double dot = 0.0;
  for (int64_t d = 0; d < s->Dqk; ++d)
    dot += q[d] * k[d];
  double x = (s->opt.sm_scale > 0 ? s->opt.sm_scale : 1.0 / sqrt((double)s->Dqk)) * dot;
  if (s->opt.pos_encoding_mode == IGNIS_POS_ENCODING_ALIBI) {
    int64_t n = 1;
    while (n * 2 <= s->Hq)
      n *= 2;
    double slope = h < n ? pow(2.0, -8.0 * (h + 1) / n) : pow(2.0, -4.0 * (2 * (h - n) + 1) / n);
    x += slope * (double)(j - q_pos);
  }
  if (s->opt.logits_soft_cap > 0)
    x = s->opt.logits_soft_cap * tanh(x / s->opt.logits_soft_cap);
  return x;
}

static double *decoded(const h_buf *buf) {
  double *values = malloc(sizeof(double) * (size_t)(buf->count + 1));
  for (int64_t i = 0; i < buf->count; ++i)
    values[i] = h_get(buf, i);
  return values;
}

static void ref_prefill(batch *bt) {
  const spec *s = &bt->s;
  double *x = malloc(sizeof(double) * 20000);
  bt->qd = decoded(&bt->q);
  bt->kd = decoded(&bt->k);
  bt->vd = decoded(&bt->v);
  for (int64_t b = 0; b < s->B; ++b)
    for (int64_t i = 0; i < s->q_len[b]; ++i)
      for (int64_t h = 0; h < s->Hq; ++h) {
        int64_t row = bt->qo[b] + i, kvh = h / (s->Hq / s->Hkv);
        double m = s->sinks ? h_get(&bt->sinks, h) : -INFINITY;
        unsigned char seen[20000];
        for (int64_t j = 0; j < s->kv_len[b]; ++j) {
          int vis;
          x[j] = logit_of(s, bt, b, i, h, j, &vis);
          seen[j] = (unsigned char)vis;
          if (vis && x[j] > m)
            m = x[j];
        }
        double z = s->sinks ? exp(h_get(&bt->sinks, h) - m) : 0.0, *out = bt->ref_out + (row * s->Hq + h) * s->Dvo;
        for (int64_t d = 0; d < s->Dvo; ++d)
          out[d] = 0.0;
        for (int64_t j = 0; j < s->kv_len[b]; ++j) {
          if (!seen[j])
            continue;
          double w = exp(x[j] - m);
          z += w;
          for (int64_t d = 0; d < s->Dvo; ++d)
            out[d] += w * s->v_scale * bt->vd[((bt->kv[b] + j) * s->Hkv + kvh) * s->Dvo + d];
        }
        int any = m > -INFINITY;
        for (int64_t d = 0; d < s->Dvo; ++d)
          out[d] = any && z > 0 ? out[d] / z : 0.0;
        double lse = any && z > 0 ? m + log(z) : -INFINITY;
        bt->ref_lse[row * s->Hq + h] = s->opt.lse_base == IGNIS_LSE_BASE2 ? lse / log(2.0) : lse;
      }
  free(x);
  free(bt->qd);
  free(bt->kd);
  free(bt->vd);
  bt->qd = bt->kd = bt->vd = NULL;
}

/* out's dtype: q's, or bf16 for an fp8 q (the plans' o_dtype). */
static ignis_dtype out_dtype_of(const spec *s) {
  return s->q_dtype == IGNIS_FP8_E4M3 ? IGNIS_BF16 : s->q_dtype;
}

static void batch_make(batch *bt, const spec *s, h_backend backend, uint64_t seed) {
  memset(bt, 0, sizeof *bt);
  bt->s = *s;
  h_rng rng = h_rng_make(seed);
  for (int64_t b = 0; b < s->B; ++b) {
    bt->qo[b + 1] = bt->qo[b] + (int32_t)s->q_len[b];
    bt->kv[b + 1] = bt->kv[b] + (int32_t)s->kv_len[b];
    bt->mask_bytes += ignis_prefill_mask_bytes(s->q_len[b], s->kv_len[b]);
  }
  bt->nq = bt->qo[s->B];
  bt->nkv = bt->kv[s->B];
  bt->q = h_buf_alloc(backend, s->q_dtype, bt->nq * s->Hq * s->Dqk + 1);
  bt->k = h_buf_alloc(backend, s->kv_dtype, bt->nkv * s->Hkv * s->Dqk + 1);
  bt->v = h_buf_alloc(backend, s->kv_dtype, bt->nkv * s->Hkv * s->Dvo + 1);
  bt->out = h_buf_alloc(backend, out_dtype_of(s), bt->nq * s->Hq * s->Dvo + 1);
  bt->lse = h_buf_alloc(backend, IGNIS_F32, bt->nq * s->Hq + 1);
  bt->mask = h_buf_alloc(backend, IGNIS_U8, bt->mask_bytes + 1);
  bt->sinks = h_buf_alloc(backend, IGNIS_F32, s->Hq);
  double amp = s->kv_dtype == IGNIS_FP8_E5M2 || s->kv_dtype == IGNIS_FP8_E4M3 ? 2.0 : 1.0;
  for (int64_t i = 0; i < bt->q.count; ++i)
    h_set(&bt->q, i, h_rng_uniform(&rng, -1, 1));
  for (int64_t i = 0; i < bt->k.count; ++i)
    h_set(&bt->k, i, h_rng_uniform(&rng, -amp, amp));
  for (int64_t i = 0; i < bt->v.count; ++i)
    h_set(&bt->v, i, h_rng_uniform(&rng, -amp, amp));
  for (int64_t h = 0; h < s->Hq; ++h)
    h_set(&bt->sinks, h, h_rng_uniform(&rng, -1, 3));
  int64_t total_bits = 0;
  for (int64_t b = 0; b < s->B; ++b)
    total_bits += s->q_len[b] * s->kv_len[b];
  bt->bits = calloc((size_t)total_bits + 1, 1);
  int64_t at = 0, byte_base = 0;
  for (int64_t b = 0; b < s->B; ++b) {
    for (int64_t i = 0; i < s->q_len[b]; ++i)
      for (int64_t j = 0; j < s->kv_len[b]; ++j) {
        int bit = h_rng_uniform(&rng, 0, 1) < 0.6;
        if (s->empty_rows && i % 3 == 1)
          bit = 0;
        bt->bits[at + i * s->kv_len[b] + j] = (unsigned char)bit;
      }
    for (int64_t n = 0; n < s->q_len[b] * s->kv_len[b]; ++n)
      if (bt->bits[at + n]) {
        int64_t byte = byte_base + n / 8;
        h_set(&bt->mask, byte, h_get(&bt->mask, byte) + (double)(1 << (n % 8)));
      }
    at += s->q_len[b] * s->kv_len[b];
    byte_base += ignis_prefill_mask_bytes(s->q_len[b], s->kv_len[b]);
  }
  h_buf *inputs[] = {&bt->q, &bt->k, &bt->v, &bt->mask, &bt->sinks};
  for (int i = 0; i < 5; ++i)
    h_buf_upload(inputs[i]);
  bt->ref_out = malloc(sizeof(double) * (size_t)(bt->nq * s->Hq * s->Dvo + 1));
  bt->ref_lse = malloc(sizeof(double) * (size_t)(bt->nq * s->Hq + 1));
  ref_prefill(bt);
}

static void batch_free(batch *bt) {
  h_buf *bufs[] = {&bt->q, &bt->k, &bt->v, &bt->out, &bt->lse, &bt->mask, &bt->sinks};
  for (int i = 0; i < 7; ++i)
    h_buf_free(bufs[i]);
  free(bt->bits);
  free(bt->ref_out);
  free(bt->ref_lse);
}

static void poison_outputs(batch *bt) {
  h_buf_poison(&bt->out);
  h_buf_poison(&bt->lse);
  h_buf_upload(&bt->out);
  h_buf_upload(&bt->lse);
}

static void compare(batch *bt, const char *what) {
  const spec *s = &bt->s;
  h_buf_download(&bt->out);
  h_buf_download(&bt->lse);
  double scale = 0.0;
  for (int64_t i = 0; i < bt->nq * s->Hq * s->Dvo; ++i)
    scale = fabs(bt->ref_out[i]) > scale ? fabs(bt->ref_out[i]) : scale;
  h_tol tol = h_tol_for(out_dtype_of(s), scale + 1e-3);
  double lse_rtol = 2e-5;
  if (bt->out.backend == H_CUDA) {
    int64_t max_kv = 0;
    for (int64_t b = 0; b < s->B; ++b)
      max_kv = s->kv_len[b] > max_kv ? s->kv_len[b] : max_kv;
    double rtol = (out_dtype_of(s) == IGNIS_BF16 ? 2e-2 : 2e-3) * (max_kv > 8192 ? 2.0 : 1.0);
    tol.rtol = 0.0;
    tol.atol = rtol * (scale > 1e-3 ? scale : 1e-3);
    lse_rtol = 0.5 * rtol;
  }
  h_cmp out_cmp, lse_cmp;
  h_cmp_init(&out_cmp);
  h_cmp_init(&lse_cmp);
  for (int64_t i = 0; i < bt->nq * s->Hq * s->Dvo; ++i)
    h_cmp_add_tol(&out_cmp, i, h_get(&bt->out, i), bt->ref_out[i], tol);
  for (int64_t i = 0; i < bt->nq * s->Hq; ++i) {
    double ref = bt->ref_lse[i], got = h_get(&bt->lse, i);
    if (isinf(ref))
      h_cmp_add(&lse_cmp, i, got == ref ? 0.0 : 1.0, 0.0, 0.0);
    else
      h_cmp_add(&lse_cmp, i, got, ref, lse_rtol * (fabs(ref) + 1.0));
  }
  char label[128];
  snprintf(label, sizeof label, "%s out", what);
  h_cmp_check(&out_cmp, __FILE__, __LINE__, label);
  snprintf(label, sizeof label, "%s lse", what);
  h_cmp_check(&lse_cmp, __FILE__, __LINE__, label);
}

static ignis_attention_extras extras_of(batch *bt) {
  ignis_attention_extras e = IGNIS_ATTENTION_EXTRAS_INIT;
  e.k_scale = bt->s.k_scale;
  e.v_scale = bt->s.v_scale;
  return e;
}

static ignis_tensor t3(const h_buf *buf, int64_t a, int64_t b, int64_t c) {
  int64_t shape[3] = {a, b, c};
  return h_view(buf, 0, 3, shape, NULL);
}

static ignis_tensor t1(const h_buf *buf, int64_t a) {
  return h_view(buf, 0, 1, &a, NULL);
}

/* A run's views of the batch: q, out, lse, the custom mask, sinks, and extras with the sinks
 * attached when the spec has them. extras points into the struct: use it where it was made. */
typedef struct run_views {
  ignis_tensor q, out, lse, mask, sinks;
  ignis_attention_extras extras;
} run_views;

/* The views of bt, its outputs poisoned. */
static void run_views_make(batch *bt, run_views *v) {
  const spec *s = &bt->s;
  v->q = t3(&bt->q, bt->nq, s->Hq, s->Dqk);
  v->out = t3(&bt->out, bt->nq, s->Hq, s->Dvo);
  int64_t lse_shape[2] = {bt->nq, s->Hq};
  v->lse = h_view(&bt->lse, 0, 2, lse_shape, NULL);
  v->mask = t1(&bt->mask, bt->mask_bytes);
  v->sinks = t1(&bt->sinks, s->Hq);
  v->extras = extras_of(bt);
  v->extras.sinks = s->sinks ? &v->sinks : NULL;
  poison_outputs(bt);
}

/* 1: the call succeeded (its outputs are compared); else the failure is counted. */
static int ran(ignis_status status) {
  CHECKF(status == IGNIS_OK, "status %s: %s", ignis_status_string(status), ignis_last_error());
  return status == IGNIS_OK;
}

static ignis_prefill_plan_config config_of(const batch *bt, h_backend backend, ignis_prefill_kv_kind kind,
                                           int64_t page_size) {
  const spec *s = &bt->s;
  ignis_prefill_plan_config c = IGNIS_PREFILL_PLAN_CONFIG_INIT;
  c.device = h_backend_device(backend);
  c.kv_kind = kind;
  c.num_qo_heads = s->Hq;
  c.num_kv_heads = s->Hkv;
  c.head_dim_qk = s->Dqk;
  c.head_dim_vo = s->Dvo;
  c.page_size = page_size;
  c.q_dtype = s->q_dtype;
  c.kv_dtype = s->kv_dtype;
  if (s->q_dtype != out_dtype_of(s))
    c.o_dtype = out_dtype_of(s);
  c.mask_mode = s->mask;
  c.max_batch_size = 8;
  c.max_qo_tokens = bt->nq > 0 ? bt->nq : 1;
  c.max_kv_len = 20000;
  c.disable_split_kv = s->split == 1;
  c.fixed_split_size = s->split == 2 ? 3 : 0;
  c.options = s->opt;
  return c;
}

static void run_ragged(batch *bt, h_backend backend) {
  const spec *s = &bt->s;
  ignis_prefill_plan_config c = config_of(bt, backend, IGNIS_PREFILL_RAGGED, 0);
  ignis_prefill_plan *plan = NULL;
  if (!ran(ignis_prefill_plan_create(&c, &plan)))
    return;
  size_t bytes = 0;
  CHECK_STATUS(ignis_prefill_workspace_size(plan, &bytes), IGNIS_OK);
  h_buf ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes + 1);
  ignis_tensor k = t3(&bt->k, bt->nkv, s->Hkv, s->Dqk), v = t3(&bt->v, bt->nkv, s->Hkv, s->Dvo);
  run_views r;
  run_views_make(bt, &r);
  if (ran(ignis_prefill_plan_update(plan, bt->qo, bt->kv, NULL, s->B, ws.data, bytes, NULL)) &&
      ran(ignis_prefill_ragged_run(plan, &r.q, &k, &v, s->mask == IGNIS_MASK_CUSTOM ? &r.mask : NULL, &r.extras,
                                   &r.out, &r.lse, ws.data, bytes, NULL)))
    compare(bt, "ragged");
  h_buf_free(&ws);
  ignis_prefill_plan_destroy(plan);
}

static void run_paged(batch *bt, h_backend backend, int64_t P, ignis_kv_layout layout, uint64_t seed) {
  const spec *s = &bt->s;
  int64_t pages = 0;
  int32_t indptr[9] = {0}, last[8];
  for (int64_t b = 0; b < s->B; ++b) {
    int64_t n = (s->kv_len[b] + P - 1) / P;
    indptr[b + 1] = indptr[b] + (int32_t)n;
    last[b] = n ? (int32_t)(s->kv_len[b] - (n - 1) * P) : 0;
    pages += n;
  }
  int64_t num_pages = pages + 3;
  int32_t *order = malloc(sizeof(int32_t) * (size_t)(num_pages + 1));
  h_rng rng = h_rng_make(seed);
  for (int64_t i = 0; i < num_pages; ++i)
    order[i] = (int32_t)i;
  for (int64_t i = num_pages - 1; i > 0; --i) {
    int64_t j = h_rng_int(&rng, 0, i);
    int32_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  int64_t D = s->Dqk, per_page = P * s->Hkv * D;
  h_buf kc = h_buf_alloc(backend, s->kv_dtype, num_pages * per_page), vc = h_buf_alloc(backend, s->kv_dtype, num_pages * per_page);
  h_buf ind = h_buf_alloc(backend, IGNIS_I32, pages + 1), ip = h_buf_alloc(backend, IGNIS_I32, s->B + 1);
  h_buf lp = h_buf_alloc(backend, IGNIS_I32, s->B + 1);
  for (int64_t b = 0; b < s->B; ++b) {
    for (int64_t j = 0; j < s->kv_len[b]; ++j) {
      int64_t page = order[indptr[b] + j / P], slot = j % P;
      for (int64_t h = 0; h < s->Hkv; ++h)
        for (int64_t d = 0; d < D; ++d) {
          int64_t at = layout == IGNIS_KV_LAYOUT_NHD ? page * per_page + (slot * s->Hkv + h) * D + d
                                                     : page * per_page + (h * P + slot) * D + d;
          h_set(&kc, at, h_get(&bt->k, ((bt->kv[b] + j) * s->Hkv + h) * D + d));
          h_set(&vc, at, h_get(&bt->v, ((bt->kv[b] + j) * s->Hkv + h) * D + d));
        }
    }
    h_set(&lp, b, last[b]);
  }
  for (int64_t i = 0; i < pages; ++i)
    h_set(&ind, i, order[i]);
  for (int64_t b = 0; b <= s->B; ++b)
    h_set(&ip, b, indptr[b]);
  h_buf *bufs[] = {&kc, &vc, &ind, &ip, &lp};
  for (int i = 0; i < 5; ++i)
    h_buf_upload(bufs[i]);
  ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT;
  cache.layout = layout;
  int64_t shape[4] = {num_pages, layout == IGNIS_KV_LAYOUT_NHD ? P : s->Hkv, layout == IGNIS_KV_LAYOUT_NHD ? s->Hkv : P, D};
  cache.k_cache = h_view(&kc, 0, 4, shape, NULL);
  cache.v_cache = h_view(&vc, 0, 4, shape, NULL);
  cache.indptr = t1(&ip, s->B + 1);
  cache.indices = t1(&ind, pages);
  cache.last_page_len = t1(&lp, s->B);
  ignis_prefill_plan_config c = config_of(bt, backend, IGNIS_PREFILL_PAGED, P);
  ignis_prefill_plan *plan = NULL;
  if (ran(ignis_prefill_plan_create(&c, &plan))) {
    size_t bytes = 0;
    CHECK_STATUS(ignis_prefill_workspace_size(plan, &bytes), IGNIS_OK);
    h_buf ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes + 1);
    run_views r;
    run_views_make(bt, &r);
    if (ran(ignis_prefill_plan_update(plan, bt->qo, indptr, last, s->B, ws.data, bytes, NULL)) &&
        ran(ignis_prefill_paged_run(plan, &r.q, &cache, s->mask == IGNIS_MASK_CUSTOM ? &r.mask : NULL, &r.extras,
                                    &r.out, &r.lse, ws.data, bytes, NULL)))
      compare(bt, "paged");
    h_buf_free(&ws);
    ignis_prefill_plan_destroy(plan);
  }
  for (int i = 0; i < 5; ++i)
    h_buf_free(bufs[i]);
  free(order);
}

/* A paged cache addressed by a block table (ignis_block_table_kv_cache) over the batch's keys in
 * shuffled pages: rows of max_pages + 2 entries at a row stride of max_pages + 5 (a slice of a wider
 * table), entries past a request's pages poisoned (never read). With `joined`, K and V are views of
 * one buffer whose token rows hold K then V (vLLM 0.33's cache, split along its last dimension). */
typedef struct block_table_cache {
  h_buf k, v, table, seq_lens, qo;
  int64_t num_pages, width, stride;
  int joined; /* v is k's buffer */
  ignis_block_table_kv_cache cache;
} block_table_cache;

static void block_table_make(block_table_cache *t, const batch *bt, h_backend backend, int64_t P,
                             ignis_kv_layout layout, int joined, uint64_t seed) {
  const spec *s = &bt->s;
  int64_t pages = 0, max_pages = 0;
  for (int64_t b = 0; b < s->B; ++b) {
    int64_t n = (s->kv_len[b] + P - 1) / P;
    pages += n;
    max_pages = n > max_pages ? n : max_pages;
  }
  t->num_pages = pages + 3;
  t->width = max_pages + 2;
  t->stride = max_pages + 5;
  int32_t *order = malloc(sizeof(int32_t) * (size_t)(t->num_pages + 1));
  h_rng rng = h_rng_make(seed);
  for (int64_t i = 0; i < t->num_pages; ++i)
    order[i] = (int32_t)i;
  for (int64_t i = t->num_pages - 1; i > 0; --i) {
    int64_t j = h_rng_int(&rng, 0, i);
    int32_t x = order[i];
    order[i] = order[j];
    order[j] = x;
  }
  const int64_t D = s->Dqk, row = joined ? 2 * D : D, per_page = P * s->Hkv * row, nhd = layout == IGNIS_KV_LAYOUT_NHD;
  t->k = h_buf_alloc(backend, s->kv_dtype, t->num_pages * per_page);
  t->v = joined ? t->k : h_buf_alloc(backend, s->kv_dtype, t->num_pages * per_page);
  t->table = h_buf_alloc(backend, IGNIS_I32, (s->B > 0 ? s->B : 1) * t->stride);
  t->seq_lens = h_buf_alloc(backend, IGNIS_I32, s->B + 1);
  t->qo = h_buf_alloc(backend, IGNIS_I32, s->B + 1);
  for (int64_t i = 0; i < t->table.count; ++i)
    h_set(&t->table, i, 1 << 30);
  int64_t next = 0;
  for (int64_t b = 0; b < s->B; ++b) {
    for (int64_t i = 0; i < (s->kv_len[b] + P - 1) / P; ++i)
      h_set(&t->table, b * t->stride + i, order[next + i]);
    for (int64_t j = 0; j < s->kv_len[b]; ++j) {
      int64_t page = order[next + j / P], slot = j % P;
      for (int64_t h = 0; h < s->Hkv; ++h)
        for (int64_t d = 0; d < D; ++d) {
          int64_t at = page * per_page + (nhd ? slot * s->Hkv + h : h * P + slot) * row + d;
          h_set(&t->k, at, h_get(&bt->k, ((bt->kv[b] + j) * s->Hkv + h) * D + d));
          h_set(&t->v, at + (joined ? D : 0), h_get(&bt->v, ((bt->kv[b] + j) * s->Hkv + h) * D + d));
        }
    }
    next += (s->kv_len[b] + P - 1) / P;
    h_set(&t->seq_lens, b, (double)s->kv_len[b]);
  }
  for (int64_t b = 0; b <= s->B; ++b)
    h_set(&t->qo, b, bt->qo[b]);
  h_buf *bufs[] = {&t->k, &t->v, &t->table, &t->seq_lens, &t->qo};
  for (int i = 0; i < 5; ++i)
    if (!(joined && i == 1))
      h_buf_upload(bufs[i]);
  free(order);
  ignis_block_table_kv_cache cache = IGNIS_BLOCK_TABLE_KV_CACHE_INIT;
  cache.layout = layout;
  int64_t shape[4] = {t->num_pages, nhd ? P : s->Hkv, nhd ? s->Hkv : P, D};
  int64_t strides[4] = {per_page, (nhd ? s->Hkv : P) * row, row, 1};
  cache.k_cache = h_view(&t->k, 0, 4, shape, strides);
  cache.v_cache = h_view(&t->v, joined ? D : 0, 4, shape, strides);
  t->joined = joined;
  int64_t table_shape[2] = {s->B, t->width}, table_strides[2] = {t->stride, 1};
  cache.block_tables = h_view(&t->table, 0, 2, table_shape, table_strides);
  cache.seq_lens = t1(&t->seq_lens, s->B);
  t->cache = cache;
}

static void block_table_free(block_table_cache *t) {
  h_buf *bufs[] = {&t->k, &t->v, &t->table, &t->seq_lens, &t->qo};
  for (int i = 0; i < 5; ++i)
    if (!(t->joined && i == 1))
      h_buf_free(bufs[i]);
}

static int64_t longest_q(const spec *s) {
  int64_t longest = 0;
  for (int64_t b = 0; b < s->B; ++b)
    longest = s->q_len[b] > longest ? s->q_len[b] : longest;
  return longest;
}

/* ignis_prefill_run_block_table over the batch (mask NONE or CAUSAL), with max_q_len the longest
 * request plus extra_q (a larger grid whose extra tiles must do nothing). */
static void run_block_table(batch *bt, h_backend backend, int64_t P, ignis_kv_layout layout, int joined,
                            int64_t extra_q, uint64_t seed) {
  const spec *s = &bt->s;
  block_table_cache t;
  block_table_make(&t, bt, backend, P, layout, joined, seed);
  ignis_prefill_plan_config c = config_of(bt, backend, IGNIS_PREFILL_PAGED, P);
  c.max_qo_tokens += extra_q;
  ignis_prefill_plan *plan = NULL;
  if (ran(ignis_prefill_plan_create(&c, &plan))) {
    size_t bytes = 0;
    CHECK_STATUS(ignis_prefill_workspace_size(plan, &bytes), IGNIS_OK);
    h_buf ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes + 1);
    ignis_tensor qo = t1(&t.qo, s->B + 1);
    run_views r;
    run_views_make(bt, &r);
    if (ran(ignis_prefill_run_block_table(plan, &r.q, &t.cache, &qo, longest_q(s) + extra_q, &r.extras, &r.out,
                                          &r.lse, ws.data, bytes, NULL)))
      compare(bt, layout == IGNIS_KV_LAYOUT_NHD ? "block table NHD" : "block table HND");
    h_buf_free(&ws);
    ignis_prefill_plan_destroy(plan);
  }
  block_table_free(&t);
}

static void run_single(batch *bt, h_backend backend) {
  const spec *s = &bt->s;
  size_t bytes = 0;
  CHECK_STATUS(ignis_single_prefill_workspace_size(s->Hq, s->Hkv, s->Dqk, s->Dvo, s->q_len[0], s->kv_len[0], &bytes),
               IGNIS_OK);
  h_buf ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes + 1);
  ignis_tensor k = t3(&bt->k, bt->nkv, s->Hkv, s->Dqk), v = t3(&bt->v, bt->nkv, s->Hkv, s->Dvo);
  run_views r;
  run_views_make(bt, &r);
  if (ran(ignis_single_prefill(&r.q, &k, &v, IGNIS_KV_LAYOUT_NHD, s->mask,
                               s->mask == IGNIS_MASK_CUSTOM ? &r.mask : NULL, &s->opt, &r.extras, &r.out, &r.lse,
                               backend == H_CUDA ? ws.data : NULL, bytes, NULL)))
    compare(bt, "single");
  h_buf_free(&ws);
}

static spec base_spec(void) {
  spec s;
  memset(&s, 0, sizeof s);
  ignis_attention_options o = IGNIS_ATTENTION_OPTIONS_INIT;
  s.opt = o;
  s.B = 1;
  s.Hq = 4;
  s.Hkv = 2;
  s.Dqk = s.Dvo = 64;
  s.q_dtype = s.kv_dtype = IGNIS_BF16;
  s.k_scale = s.v_scale = 1.0;
  return s;
}

static void run_case(const spec *s, h_backend backend, const char *name, int64_t page_size, uint64_t seed) {
  batch bt;
  if (!h_selected(name))
    return;
  h_case("%s on %s: B=%lld Hq=%lld Hkv=%lld D=%lld/%lld mask=%d split=%d page=%lld", name, h_backend_name(backend),
         (long long)s->B, (long long)s->Hq, (long long)s->Hkv, (long long)s->Dqk, (long long)s->Dvo, (int)s->mask,
         s->split, (long long)page_size);
  batch_make(&bt, s, backend, seed);
  run_ragged(&bt, backend);
  if (s->Dqk == s->Dvo) {
    run_paged(&bt, backend, page_size, IGNIS_KV_LAYOUT_NHD, seed + 1);
    run_paged(&bt, backend, page_size, IGNIS_KV_LAYOUT_HND, seed + 2);
    if (s->mask != IGNIS_MASK_CUSTOM)
      run_block_table(&bt, backend, page_size, seed % 2 ? IGNIS_KV_LAYOUT_HND : IGNIS_KV_LAYOUT_NHD, 0, seed % 3,
                      seed + 3);
  }
  if (s->B == 1 && s->q_dtype == out_dtype_of(s)) /* single prefill takes 16-bit q only */
    run_single(&bt, backend);
  batch_free(&bt);
}

/* A head dim 128 batch: B requests of q_len / kv_len keys, Hq query heads over 2 KV heads. */
static spec head_dim_128_spec(int64_t B, int64_t Hq, const int64_t *q_len, const int64_t *kv_len,
                              ignis_mask_mode mask) {
  spec s = base_spec();
  s.B = B;
  s.Hq = Hq;
  s.Hkv = 2;
  s.Dqk = s.Dvo = 128;
  memcpy(s.q_len, q_len, (size_t)B * sizeof *q_len);
  memcpy(s.kv_len, kv_len, (size_t)B * sizeof *kv_len);
  s.mask = mask;
  return s;
}

static void test_cases(h_backend backend) {
  static const int64_t pages[] = {1, 16, 64};
  uint64_t seed = 100;
  for (int mode = 0; mode < 3; ++mode)
    for (int split = 0; split < 3; ++split) {
      spec s = base_spec();
      s.B = 4;
      int64_t ql[] = {5, 0, 37, 130}, kl[] = {9, 20, 37, 700};
      memcpy(s.q_len, ql, sizeof ql);
      memcpy(s.kv_len, kl, sizeof kl);
      s.mask = (ignis_mask_mode)mode;
      s.split = split;
      run_case(&s, backend, "mixed batch", pages[(mode + split) % 3], seed++);
    }
  /* head dim 128, 16-bit K/V, no mask or causal: the Hopper kernel where it runs (first rows of request 1
   * see nothing under the causal mask; f16, sinks and every split policy) */
  for (int mode = 0; mode < 2; ++mode)
    for (int split = 0; split < 3; ++split) {
      const int64_t ql[] = {5, 70, 37, 300}, kl[] = {9, 33, 37, 1000};
      spec s = head_dim_128_spec(4, 8, ql, kl, mode ? IGNIS_MASK_CAUSAL : IGNIS_MASK_NONE);
      s.split = split;
      if (split == 1)
        s.q_dtype = s.kv_dtype = IGNIS_F16;
      s.sinks = split == 2 && mode == 1;
      run_case(&s, backend, "head dim 128", pages[(mode + split) % 3], seed++);
    }
  /* head dim 128 at page sizes 8 and 32 (16 and 64 are above) */
  for (int variant = 0; variant < 2; ++variant) {
    const int64_t ql[] = {100, 40}, kl[] = {700, 300};
    spec s = head_dim_128_spec(2, 4, ql, kl, variant ? IGNIS_MASK_CAUSAL : IGNIS_MASK_NONE);
    run_case(&s, backend, "head dim 128 pages", variant ? 32 : 8, seed++);
  }
  /* one long request: split on an idle GPU; few heads keep the CPU time modest */
  spec s = base_spec();
  s.Hq = 2;
  s.Hkv = 1;
  s.q_len[0] = 300;
  s.kv_len[0] = 4000;
  s.mask = IGNIS_MASK_CAUSAL;
  run_case(&s, backend, "long causal", 16, seed++);
  s.Hq = 4;
  s.Dqk = s.Dvo = 128;
  run_case(&s, backend, "long causal, head dim 128", 16, seed++);
  s.Hq = 2;
  s.q_len[0] = 4096;
  s.kv_len[0] = 4096;
  s.Dqk = s.Dvo = 64;
  s.opt.window_left = 100;
  run_case(&s, backend, "qo 4k window", 64, seed++);
  s.q_len[0] = 3;
  s.kv_len[0] = 16384;
  s.opt.window_left = -1;
  run_case(&s, backend, "kv 16k", 64, seed++);
  /* options */
  for (int variant = 0; variant < 9; ++variant) {
    spec o = base_spec();
    o.B = 2;
    o.q_len[0] = 17;
    o.kv_len[0] = 40;
    o.q_len[1] = 1;
    o.kv_len[1] = 0;
    o.mask = IGNIS_MASK_CAUSAL;
    o.Hq = 6;
    o.Hkv = variant % 2 ? 3 : 1;
    switch (variant) {
    case 0: o.opt.pos_encoding_mode = IGNIS_POS_ENCODING_ROPE_LLAMA; o.opt.rope_scale = 2.0; o.opt.rope_theta = 5e4; break;
    case 1: o.opt.pos_encoding_mode = IGNIS_POS_ENCODING_ALIBI; break;
    case 2: o.opt.logits_soft_cap = 3.0; o.opt.sm_scale = 0.5; break;
    case 3: o.sinks = 1; o.opt.lse_base = IGNIS_LSE_NATURAL; break;
    case 4: o.kv_dtype = IGNIS_FP8_E4M3; o.k_scale = 0.5; o.v_scale = 2.0; break;
    case 5: o.q_dtype = IGNIS_F16; o.kv_dtype = IGNIS_FP8_E5M2; o.k_scale = 1.5; break;
    case 6: o.q_dtype = o.kv_dtype = IGNIS_F16; o.Dqk = o.Dvo = 128; o.opt.window_left = 5; break;
    case 7: o.Dqk = 192; o.Dvo = 128; o.mask = IGNIS_MASK_NONE; break;
    default: o.Dqk = o.Dvo = 256; o.mask = IGNIS_MASK_CUSTOM; o.empty_rows = 1; o.sinks = variant == 8; break;
    }
    run_case(&o, backend, "options", pages[variant % 3], seed++);
  }
  /* head dim 512 (the CUDA tile kernel's 16-row tiles, its warps splitting O's dims): every option,
   * K/V 16-bit and fp8, GQA groups 1, 3 and 8, odd lengths, tiles of a request's rows that cross
   * token boundaries, requests that see nothing, and every split policy */
  for (int variant = 0; variant < 12; ++variant) {
    spec o = base_spec();
    o.B = 3;
    int64_t ql[] = {7, 1, 45}, kl[] = {7, 0, 333};
    memcpy(o.q_len, ql, sizeof ql);
    memcpy(o.kv_len, kl, sizeof kl);
    o.Dqk = o.Dvo = 512;
    o.Hkv = 1 + variant % 2;
    o.Hq = o.Hkv * (variant % 3 == 0 ? 1 : variant % 3 == 1 ? 3 : 8);
    o.mask = (ignis_mask_mode)(variant % 3 == 2 ? IGNIS_MASK_NONE : IGNIS_MASK_CAUSAL);
    o.split = variant % 3;
    if (variant % 4 == 1)
      o.q_dtype = o.kv_dtype = IGNIS_F16;
    switch (variant) {
    case 0: o.opt.pos_encoding_mode = IGNIS_POS_ENCODING_ROPE_LLAMA; o.opt.rope_scale = 2.0; o.opt.rope_theta = 5e4; break;
    case 1: o.opt.pos_encoding_mode = IGNIS_POS_ENCODING_ALIBI; o.sinks = 1; break;
    case 2: o.opt.logits_soft_cap = 3.0; o.opt.sm_scale = 0.05; break;
    case 3: o.sinks = 1; o.opt.lse_base = IGNIS_LSE_NATURAL; break;
    case 4: o.kv_dtype = IGNIS_FP8_E4M3; o.k_scale = 0.5; o.v_scale = 2.0; break;
    case 5: o.q_dtype = IGNIS_F16; o.kv_dtype = IGNIS_FP8_E5M2; o.k_scale = 1.5; o.opt.window_left = 9; break;
    case 6: o.opt.window_left = 5; break;
    case 7: o.mask = IGNIS_MASK_CUSTOM; o.empty_rows = 1; break;
    case 8: o.kv_dtype = IGNIS_FP8_E4M3; o.opt.pos_encoding_mode = IGNIS_POS_ENCODING_ROPE_LLAMA; break;
    case 9: o.q_dtype = IGNIS_F16; o.kv_dtype = IGNIS_FP8_E4M3; o.mask = IGNIS_MASK_CUSTOM; o.sinks = 1; break;
    case 10: o.q_dtype = IGNIS_FP8_E4M3; o.kv_dtype = IGNIS_FP8_E4M3; break; /* fp8 q, bf16 out */
    default: o.kv_len[2] = 1500; o.q_len[2] = 3; break; /* a long request (splits where the plan splits) */
    }
    run_case(&o, backend, "head dim 512", pages[variant % 3], seed++);
  }
  /* custom mask with empty rows and no sink: out 0, lse -inf */
  spec e = base_spec();
  e.q_len[0] = 10;
  e.kv_len[0] = 13;
  e.mask = IGNIS_MASK_CUSTOM;
  e.empty_rows = 1;
  run_case(&e, backend, "empty rows", 1, seed++);
  /* queries longer than keys under a causal mask: the first rows see nothing */
  e.mask = IGNIS_MASK_CAUSAL;
  e.empty_rows = 0;
  e.q_len[0] = 20;
  e.kv_len[0] = 6;
  run_case(&e, backend, "q longer than kv", 16, seed++);
  /* An fp8 e4m3 q on fp8 K/V with a bf16 out (FlashInfer's fp8 prefill as vLLM plans it on an fp8
   * KV cache): the kernels run on q converted to bf16, exactly, so the reference is that of the
   * rounded q. Both fp8 K/V kinds, causal and not, a long request that splits. */
  for (int k = 0; k < 2; ++k) {
    spec s = base_spec();
    s.B = 3;
    s.Hq = 8;
    s.Hkv = 2;
    s.Dqk = s.Dvo = 128;
    int64_t ql[] = {5, 64, 17}, kl[] = {9, 1500, 17};
    memcpy(s.q_len, ql, sizeof ql);
    memcpy(s.kv_len, kl, sizeof kl);
    s.q_dtype = IGNIS_FP8_E4M3;
    s.kv_dtype = k == 0 ? IGNIS_FP8_E4M3 : IGNIS_FP8_E5M2;
    s.mask = k == 0 ? IGNIS_MASK_CAUSAL : IGNIS_MASK_NONE;
    s.split = k;
    run_case(&s, backend, "fp8 q", 16, seed++);
  }
}

/* ---- bad inputs --------------------------------------------------------------------------------- */
static void test_bad_inputs(h_backend backend) {
  spec s = base_spec();
  s.q_len[0] = 4;
  s.kv_len[0] = 6;
  batch bt;
  h_case("bad inputs on %s", h_backend_name(backend));
  batch_make(&bt, &s, backend, 5);
  ignis_tensor q = t3(&bt.q, 4, 4, 64), k = t3(&bt.k, 6, 2, 64), v = t3(&bt.v, 6, 2, 64), out = t3(&bt.out, 4, 4, 64);
  int64_t lse_shape[2] = {4, 4};
  ignis_tensor lse = h_view(&bt.lse, 0, 2, lse_shape, NULL), mask = t1(&bt.mask, bt.mask_bytes);
  h_buf_poison(&bt.out);
  h_buf_poison(&bt.lse);
  h_buf_upload(&bt.out);
  h_buf_upload(&bt.lse);
  ignis_tensor bad_out = t3(&bt.out, 4, 4, 32), bad_k = t3(&bt.k, 6, 3, 64), small_mask = t1(&bt.mask, 1);
  ignis_attention_options bad_opt = IGNIS_ATTENTION_OPTIONS_INIT;
  bad_opt.window_left = -2;
  ignis_attention_extras bad_extras = IGNIS_ATTENTION_EXTRAS_INIT;
  bad_extras.k_scale = 0.0;
  CHECK_ERROR(ignis_single_prefill(&q, &k, &v, IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_NONE, NULL, NULL, NULL, &bad_out, &lse,
                                   NULL, 0, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "out");
  CHECK_ERROR(ignis_single_prefill(&q, &bad_k, &v, IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_NONE, NULL, NULL, NULL, &out, &lse,
                                   NULL, 0, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "v");
  CHECK_ERROR(ignis_single_prefill(&q, &k, &v, IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_CUSTOM, NULL, NULL, NULL, &out, &lse,
                                   NULL, 0, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "custom_mask");
  CHECK_ERROR(ignis_single_prefill(&q, &k, &v, IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_CUSTOM, &small_mask, NULL, NULL, &out,
                                   &lse, NULL, 0, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "custom_mask.shape[0]");
  CHECK_ERROR(ignis_single_prefill(&q, &k, &v, IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_NONE, &mask, NULL, NULL, &out, &lse,
                                   NULL, 0, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "custom_mask");
  CHECK_ERROR(ignis_single_prefill(&q, &k, &v, IGNIS_KV_LAYOUT_NHD, (ignis_mask_mode)7, NULL, NULL, NULL, &out, &lse,
                                   NULL, 0, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "mask_mode");
  CHECK_ERROR(ignis_single_prefill(&q, &k, &v, IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_NONE, NULL, &bad_opt, NULL, &out, &lse,
                                   NULL, 0, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "options.window_left");
  CHECK_ERROR(ignis_single_prefill(&q, &k, &v, IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_NONE, NULL, NULL, &bad_extras, &out,
                                   &lse, NULL, 0, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "extras.k_scale");
  CHECK_ERROR(ignis_single_prefill(&q, &k, &v, IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_NONE, NULL, NULL, NULL, &q, &lse, NULL,
                                   0, NULL),
              IGNIS_ERROR_INVALID_ARGUMENT, "out");
  ignis_tensor q96 = t3(&bt.q, 4, 4, 32), k96 = t3(&bt.k, 6, 2, 32), v96 = t3(&bt.v, 6, 2, 32);
  ignis_tensor out96 = t3(&bt.out, 4, 4, 32);
  CHECK_ERROR(ignis_single_prefill(&q96, &k96, &v96, IGNIS_KV_LAYOUT_NHD, IGNIS_MASK_NONE, NULL, NULL, NULL, &out96,
                                   NULL, NULL, 0, NULL),
              IGNIS_ERROR_UNSUPPORTED, "head_dim");
  /* plans */
  ignis_prefill_plan_config c = config_of(&bt, backend, IGNIS_PREFILL_RAGGED, 0);
  ignis_prefill_plan *plan = NULL;
  ignis_prefill_plan_config bad = c;
  bad.num_qo_heads = 5;
  CHECK_ERROR(ignis_prefill_plan_create(&bad, &plan), IGNIS_ERROR_INVALID_ARGUMENT, "config.num_qo_heads");
  /* a caller built against the first released layout (no o_dtype): what lies past its size is
   * never read (here an o_dtype the plan would refuse) */
  bad = c;
  bad.size = offsetof(ignis_prefill_plan_config, o_dtype);
  bad.o_dtype = IGNIS_FP8_E4M3;
  if (CHECK_STATUS(ignis_prefill_plan_create(&bad, &plan), IGNIS_OK))
    CHECK_STATUS(ignis_prefill_plan_destroy(plan), IGNIS_OK);
  plan = NULL;
  bad = c;
  bad.max_qo_tokens = 0;
  CHECK_ERROR(ignis_prefill_plan_create(&bad, &plan), IGNIS_ERROR_INVALID_ARGUMENT, "config.max_qo_tokens");
  bad = c;
  bad.kv_kind = IGNIS_PREFILL_PAGED;
  bad.page_size = 16;
  bad.head_dim_qk = 192;
  bad.head_dim_vo = 128;
  CHECK_ERROR(ignis_prefill_plan_create(&bad, &plan), IGNIS_ERROR_UNSUPPORTED, "head_dim_vo");
  ignis_status made = ignis_prefill_plan_create(&c, &plan);
  CHECK(made == IGNIS_OK);
  if (made == IGNIS_OK) {
    size_t bytes = 0;
    ignis_prefill_workspace_size(plan, &bytes);
    h_buf ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes + 1);
    CHECK_ERROR(ignis_prefill_ragged_run(plan, &q, &k, &v, NULL, NULL, &out, &lse, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "ignis_prefill_plan_update");
    int32_t qo_bad[2] = {0, 5}, kv_bad[2] = {3, 2}, kv_long[2] = {0, 30000};
    CHECK_ERROR(ignis_prefill_plan_update(plan, bt.qo, kv_bad, NULL, 1, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "kv_indptr_host");
    CHECK_ERROR(ignis_prefill_plan_update(plan, qo_bad, bt.kv, NULL, 1, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "max_qo_tokens");
    CHECK_ERROR(ignis_prefill_plan_update(plan, bt.qo, kv_long, NULL, 1, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "max_kv_len");
    CHECK_ERROR(ignis_prefill_plan_update(plan, bt.qo, bt.kv, bt.kv, 1, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "kv_last_page_len_host");
    CHECK_STATUS(ignis_prefill_plan_update(plan, bt.qo, bt.kv, NULL, 1, ws.data, bytes, NULL), IGNIS_OK);
    ignis_tensor q_short = t3(&bt.q, 3, 4, 64), k_short = t3(&bt.k, 5, 2, 64), v_short = t3(&bt.v, 5, 2, 64);
    CHECK_ERROR(ignis_prefill_ragged_run(plan, &q_short, &k, &v, NULL, NULL, &out, &lse, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "q.shape[0]");
    CHECK_ERROR(ignis_prefill_ragged_run(plan, &q, &k_short, &v_short, NULL, NULL, &out, &lse, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "k.shape[0]");
    CHECK_ERROR(ignis_prefill_ragged_run(plan, &q, &k, &v, &mask, NULL, &out, &lse, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "custom_mask");
    CHECK_ERROR(ignis_prefill_paged_run(plan, &q, NULL, NULL, NULL, &out, &lse, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "ragged");
    h_buf_free(&ws);
    ignis_prefill_plan_destroy(plan);
  }
  CHECK(h_buf_untouched(&bt.out));
  CHECK(h_buf_untouched(&bt.lse));
  batch_free(&bt);
}

/* ---- block-table runs ------------------------------------------------------------------------ */
/* ignis_prefill_run_block_table beyond the cases above (which run it on every NONE / CAUSAL batch):
 * query lengths 1..8 against keys ending mid-page, GQA 4 at head dim 128 on both kernels' shapes, a
 * grid far larger than the batch, one plan serving two batches (new table, lengths and rows between
 * the calls, as between CUDA-graph replays), an empty batch, and bad inputs. */
static void test_block_table(h_backend backend) {
  uint64_t seed = 900;
  for (int mode = 0; mode < 2; ++mode) {
    spec s = base_spec();
    s.B = 8;
    s.Hq = 8;
    s.Hkv = 2;
    s.Dqk = s.Dvo = 128;
    s.mask = mode ? IGNIS_MASK_CAUSAL : IGNIS_MASK_NONE;
    for (int64_t b = 0; b < s.B; ++b) {
      s.q_len[b] = b + 1;
      s.kv_len[b] = 16 * b + 1 + (b * 7) % 15 + s.q_len[b];
    }
    s.sinks = mode;
    if (!h_selected("block table"))
      continue;
    h_case("block table q lengths 1..8 on %s, mask %d", h_backend_name(backend), mode);
    batch bt;
    batch_make(&bt, &s, backend, seed++);
    run_block_table(&bt, backend, 16, IGNIS_KV_LAYOUT_HND, 1, 0, seed++); /* vLLM's joined K / V rows */
    run_block_table(&bt, backend, 16, IGNIS_KV_LAYOUT_NHD, 0, 300, seed++);
    batch_free(&bt);
  }
  if (!h_selected("block table"))
    return;
  /* one plan, two batches of the same grid (batch size and max_q_len), in place */
  h_case("block table reuse on %s", h_backend_name(backend));
  spec a = base_spec();
  a.B = 3;
  a.Hq = 8;
  a.Hkv = 2;
  a.Dqk = a.Dvo = 128;
  a.mask = IGNIS_MASK_CAUSAL;
  int64_t ql[] = {40, 3, 17}, kl[] = {100, 3, 60};
  memcpy(a.q_len, ql, sizeof ql);
  memcpy(a.kv_len, kl, sizeof kl);
  spec b2 = a;
  int64_t ql2[] = {1, 40, 33}, kl2[] = {250, 41, 33};
  memcpy(b2.q_len, ql2, sizeof ql2);
  memcpy(b2.kv_len, kl2, sizeof kl2);
  batch first, second;
  batch_make(&first, &a, backend, seed++);
  batch_make(&second, &b2, backend, seed++);
  block_table_cache t1c, t2c;
  block_table_make(&t1c, &first, backend, 16, IGNIS_KV_LAYOUT_HND, 0, seed++);
  block_table_make(&t2c, &second, backend, 16, IGNIS_KV_LAYOUT_HND, 1, seed++);
  ignis_prefill_plan_config c = config_of(&first, backend, IGNIS_PREFILL_PAGED, 16);
  c.max_qo_tokens = 80;
  ignis_prefill_plan *plan = NULL;
  if (ran(ignis_prefill_plan_create(&c, &plan))) {
    size_t bytes = 0;
    CHECK_STATUS(ignis_prefill_workspace_size(plan, &bytes), IGNIS_OK);
    h_buf ws = h_buf_alloc(backend, IGNIS_U8, (int64_t)bytes + 1);
    batch *runs[2] = {&first, &second};
    block_table_cache *tables[2] = {&t1c, &t2c};
    for (int r = 0; r < 2; ++r) {
      batch *bt = runs[r];
      ignis_tensor q = t3(&bt->q, bt->nq, 8, 128), out = t3(&bt->out, bt->nq, 8, 128);
      int64_t lse_shape[2] = {bt->nq, 8};
      ignis_tensor lse = h_view(&bt->lse, 0, 2, lse_shape, NULL), qo = t1(&tables[r]->qo, 4);
      poison_outputs(bt);
      if (ran(ignis_prefill_run_block_table(plan, &q, &tables[r]->cache, &qo, 40, NULL, &out, &lse, ws.data, bytes,
                                            NULL)))
        compare(bt, r ? "block table reuse, second" : "block table reuse, first");
    }
    /* on a device the index arrays are not checked: a request whose rows leave q writes nothing, the
     * others are computed as usual */
    if (backend != H_CPU) {
      h_case("block table request past q on %s", h_backend_name(backend));
      ignis_tensor q = t3(&first.q, first.nq, 8, 128), out = t3(&first.out, first.nq, 8, 128);
      ignis_tensor qo = t1(&t1c.qo, 4);
      h_set(&t1c.qo, 3, (double)(first.nq + 5));
      h_buf_upload(&t1c.qo);
      poison_outputs(&first);
      if (ran(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 40, NULL, &out, NULL, ws.data, bytes,
                                            NULL))) {
        h_buf_download(&first.out);
        const int64_t written = (int64_t)first.qo[2] * 8 * 128;
        double scale = 1e-3;
        for (int64_t i = 0; i < written; ++i)
          scale = fabs(first.ref_out[i]) > scale ? fabs(first.ref_out[i]) : scale;
        h_tol tol = {0.0, 2e-2 * scale};
        h_cmp cmp;
        h_cmp_init(&cmp);
        for (int64_t i = 0; i < written; ++i)
          h_cmp_add_tol(&cmp, i, h_get(&first.out, i), first.ref_out[i], tol);
        h_cmp_check(&cmp, __FILE__, __LINE__, "block table requests before the one past q");
        int untouched = 1;
        for (int64_t i = written; i < first.nq * 8 * 128; ++i)
          untouched &= h_is_poison(&first.out, i);
        CHECKF(untouched, "the request past q wrote out");
      }
      h_set(&t1c.qo, 3, (double)first.nq);
      h_buf_upload(&t1c.qo);
    }
    /* an empty batch writes nothing */
    h_case("block table empty batch on %s", h_backend_name(backend));
    ignis_tensor q = t3(&first.q, first.nq, 8, 128), out = t3(&first.out, first.nq, 8, 128);
    ignis_block_table_kv_cache empty = t1c.cache;
    int64_t no_rows[2] = {0, t1c.width}, strides[2] = {t1c.stride, 1};
    empty.block_tables = h_view(&t1c.table, 0, 2, no_rows, strides);
    empty.seq_lens = t1(&t1c.seq_lens, 0);
    ignis_tensor qo1 = t1(&t1c.qo, 1);
    poison_outputs(&first);
    CHECK_STATUS(ignis_prefill_run_block_table(plan, &q, &empty, &qo1, 40, NULL, &out, NULL, ws.data, bytes, NULL),
                 IGNIS_OK);
    CHECK(h_buf_untouched(&first.out));
    /* bad inputs: each names its parameter and writes nothing */
    h_case("block table bad inputs on %s", h_backend_name(backend));
    ignis_tensor qo = t1(&t1c.qo, 4), qo_short = t1(&t1c.qo, 3);
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo_short, 40, NULL, &out, NULL, ws.data, bytes,
                                              NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "qo_indptr");
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 81, NULL, &out, NULL, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "max_q_len");
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, NULL, 40, NULL, &out, NULL, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "qo_indptr");
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, NULL, &qo, 40, NULL, &out, NULL, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "cache");
    ignis_tensor out_short = t3(&first.out, first.nq - 1, 8, 128);
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 40, NULL, &out_short, NULL, ws.data, bytes,
                                              NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "out");
    ignis_block_table_kv_cache bad_cache = t1c.cache;
    bad_cache.layout = IGNIS_KV_LAYOUT_NHD; /* the HND shape read as NHD: 2 heads as the page size */
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &bad_cache, &qo, 40, NULL, &out, NULL, ws.data, bytes, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "page_size");
    if (backend == H_CPU) { /* host index arrays are checked too */
      CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 39, NULL, &out, NULL, NULL, 0, NULL),
                  IGNIS_ERROR_INVALID_ARGUMENT, "max_q_len");
      h_set(&t1c.qo, 1, 50);
      CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 40, NULL, &out, NULL, NULL, 0, NULL),
                  IGNIS_ERROR_INVALID_ARGUMENT, "qo_indptr");
      h_set(&t1c.qo, 1, 40);
      h_set(&t1c.seq_lens, 1, 1000);
      CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 40, NULL, &out, NULL, NULL, 0, NULL),
                  IGNIS_ERROR_INVALID_ARGUMENT, "cache.seq_lens");
      h_set(&t1c.seq_lens, 1, 3);
      h_set(&t1c.table, 0, (double)t1c.num_pages);
      CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 40, NULL, &out, NULL, NULL, 0, NULL),
                  IGNIS_ERROR_INVALID_ARGUMENT, "cache.block_tables");
    }
    CHECK(h_buf_untouched(&first.out));
    h_buf_free(&ws);
    ignis_prefill_plan_destroy(plan);
  }
  /* plans a block table cannot run on */
  ignis_tensor q = t3(&first.q, first.nq, 8, 128), out = t3(&first.out, first.nq, 8, 128), qo = t1(&t1c.qo, 4);
  c.mask_mode = IGNIS_MASK_CUSTOM;
  if (ran(ignis_prefill_plan_create(&c, &plan))) {
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 40, NULL, &out, NULL, NULL, 0, NULL),
                IGNIS_ERROR_UNSUPPORTED, "IGNIS_MASK_CUSTOM");
    ignis_prefill_plan_destroy(plan);
  }
  c.mask_mode = IGNIS_MASK_CAUSAL;
  c.kv_kind = IGNIS_PREFILL_RAGGED;
  if (ran(ignis_prefill_plan_create(&c, &plan))) {
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 40, NULL, &out, NULL, NULL, 0, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "ragged");
    ignis_prefill_plan_destroy(plan);
  }
  c.kv_kind = IGNIS_PREFILL_PAGED;
  c.max_batch_size = 2;
  if (ran(ignis_prefill_plan_create(&c, &plan))) {
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 40, NULL, &out, NULL, NULL, 0, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "max_batch_size");
    ignis_prefill_plan_destroy(plan);
  }
  c.max_batch_size = 8;
  c.max_qo_tokens = 10;
  if (ran(ignis_prefill_plan_create(&c, &plan))) {
    CHECK_ERROR(ignis_prefill_run_block_table(plan, &q, &t1c.cache, &qo, 10, NULL, &out, NULL, NULL, 0, NULL),
                IGNIS_ERROR_INVALID_ARGUMENT, "max_qo_tokens");
    ignis_prefill_plan_destroy(plan);
  }
  CHECK(h_buf_untouched(&first.out));
  block_table_free(&t1c);
  block_table_free(&t2c);
  batch_free(&first);
  batch_free(&second);
}

/* The kernel a plan records (ignis_prefill_plan_kernel): the CPU backend's one kernel; on CUDA the
 * wgmma kernel for 16-bit causal or unmasked head dim 128 on sm_90 (unless IGNIS_PREFILL_WGMMA
 * turns it off), the tile kernel for head dim 64 or a soft cap. */
static void expect_prefill_kernel(h_backend backend, int64_t head_dim, float soft_cap, const char *want) {
  ignis_prefill_plan_config c = IGNIS_PREFILL_PLAN_CONFIG_INIT;
  c.device = h_backend_device(backend);
  c.num_qo_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim_qk = head_dim;
  c.mask_mode = IGNIS_MASK_CAUSAL;
  c.max_batch_size = 2;
  c.max_qo_tokens = 64;
  c.max_kv_len = 64;
  c.options.logits_soft_cap = soft_cap;
  ignis_prefill_plan *plan = NULL;
  if (!CHECK_STATUS(ignis_prefill_plan_create(&c, &plan), IGNIS_OK))
    return;
  const char *name = NULL;
  CHECK_STATUS(ignis_prefill_plan_kernel(plan, &name), IGNIS_OK);
  CHECKF(name != NULL && strcmp(name, want) == 0, "%s, head dim %lld, soft cap %g: kernel %s, want %s",
         h_backend_name(backend), (long long)head_dim, (double)soft_cap, name ? name : "NULL", want);
  CHECK_ERROR(ignis_prefill_plan_kernel(NULL, &name), IGNIS_ERROR_INVALID_ARGUMENT, "plan");
  CHECK_STATUS(ignis_prefill_plan_destroy(plan), IGNIS_OK);
}

static void test_kernel_choice(h_backend backend) {
  h_case("kernel choice (%s)", h_backend_name(backend));
  if (backend == H_CPU) {
    expect_prefill_kernel(backend, 128, 0.0f, "cpu");
    return;
  }
  expect_prefill_kernel(backend, 64, 0.0f, "prefill_tile");
  expect_prefill_kernel(backend, 128, 30.0f, "prefill_tile");
  ignis_device_info info = IGNIS_DEVICE_INFO_INIT;
  CHECK_STATUS(ignis_get_device_info(h_backend_device(backend), &info), IGNIS_OK);
  const char *wgmma = getenv("IGNIS_PREFILL_WGMMA");
  const int built = strstr(ignis_build_info(), "sm_90a") != NULL;
  if (info.compute_capability == 90 && built && (wgmma == NULL || strcmp(wgmma, "0") != 0))
    expect_prefill_kernel(backend, 128, 0.0f, "prefill_wgmma");
}

int main(void) {
  h_init("test_prefill");
  test_planner();
  for (int i = 0; i < h_backend_count(); ++i) {
    h_backend backend = h_backend_at(i);
    if (h_quick() && backend == H_CPU && h_backend_count() > 1)
      continue; /* the sanitizer looks at the GPU cases */
    test_bad_inputs(backend);
    test_cases(backend);
    test_block_table(backend);
    test_kernel_choice(backend);
  }
  return h_finish();
}
