/* Tests of MoE routing (include/ignis/moe_routing.h) against an fp64 reference written here from
 * the header's rules: keys (the logit, or sigmoid(logit) + bias), groups scored by the sum of
 * their two largest keys, the topk_group best groups kept, the top_k keys among them (NaN lowest,
 * -0 below +0, the lower index first among equals, groups likewise), then each method's weights
 * times routed_scaling_factor.
 *
 * Each case makes one set of inputs and runs it on every backend: ids must equal the reference's
 * exactly, weights (computed in fp64 from the ids the call returned) within the dtype's tolerance,
 * and the CUDA backend's ids and weights must equal the CPU backend's bit for bit. The biased
 * methods round their keys in f32, so a token whose reference keys come within KEY_GAP of each
 * other at a decision (the k-th against the next expert, the kept groups against the next group,
 * or two chosen experts' order) is "close": its ids are checked for distinctness and range only
 * (the backends must still agree). Outputs are poisoned first and must be written in full, the
 * gaps of strided rows untouched, the inputs unchanged.
 *
 * Cases: every method; top_k 1, 2, 4, 6, 8 and the limit 32; E 8, 16, 20, 64, 72, 128, 256, 384,
 * 512; DeepSeek-V3's 8 groups / 4 on E256 and 1 / 1, groups that cover lanes by the butterfly path
 * and by the shared-memory path of the CUDA kernel, one expert per group; tokens 0, 1, 7, 64,
 * 4096; logits random, with many ties, all equal, and with NaN / +-Inf / +-0; bias f32, bf16 or
 * none; logits f32, bf16, f16; weights f32 and bf16; contiguous and strided (unaligned) rows;
 * routed_scaling_factor 1 and 2.5. Bad inputs: each the documented status, the message naming the
 * parameter, nothing written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define MAX_E 512
#define MAX_K 32
#define KEY_GAP 1e-5

typedef enum values { NORMAL, TIES, EQUAL, SPECIAL } values;
static const char *const value_names[] = {"normal", "ties", "equal", "special"};
static const char *const method_names[] = {"Default",          "Renormalize", "DeepSeekV3",    "Llama4",
                                           "RenormalizeNaive", "TopK",        "SigmoidRenorm", "MiniMax2",
                                           "Sigmoid",          "TopKSigmoid"};

typedef struct rcase {
  ignis_moe_routing_method method;
  int64_t tokens, experts, top_k, n_group, topk_group;
  ignis_dtype dtype, weights_dtype, bias_dtype;
  int bias; /* a bias is given */
  values values;
  int strided; /* logits rows E + 3 apart from element 1; output rows top_k + 2 apart */
  double scale;
} rcase;

/* ---- reference ------------------------------------------------------------------------------ */
static int biased(ignis_moe_routing_method m) {
  return m == IGNIS_MOE_ROUTING_DEEPSEEK_V3 || m == IGNIS_MOE_ROUTING_MINIMAX2;
}

/* sigmoid and exp as the header defines them: a NaN argument counts as -Inf. */
static double ref_sigmoid(double x) {
  return isnan(x) ? 0.0 : 1.0 / (1.0 + exp(-x));
}

static double ref_exp(double d) {
  return isnan(d) ? 0.0 : exp(d);
}

/* -1 when a ranks below b: NaN lowest, then by value, -0 below +0. */
static int rank_cmp(double a, double b) {
  if (isnan(a) || isnan(b))
    return isnan(a) && isnan(b) ? 0 : isnan(a) ? -1 : 1;
  if (a != b)
    return a < b ? -1 : 1;
  if (a == 0.0 && signbit(a) != signbit(b))
    return signbit(a) ? -1 : 1;
  return 0;
}

/* A candidate (expert or group) with the inputs its key comes from: an expert's logit and bias, a
 * group's two top experts' logits and biases. Equal inputs give equal keys on every backend. */
typedef struct entry {
  double key;
  int64_t index;
  double inputs[4];
} entry;

static int same_double(double a, double b) {
  return a == b || (isnan(a) && isnan(b));
}

static int same_inputs(const entry *a, const entry *b) {
  for (int i = 0; i < 4; ++i)
    if (!same_double(a->inputs[i], b->inputs[i]))
      return 0;
  return 1;
}

static int entry_order(const void *pa, const void *pb) {
  const entry *a = pa, *b = pb;
  const int c = rank_cmp(a->key, b->key);
  if (c)
    return -c;
  return a->index < b->index ? -1 : a->index > b->index;
}

/* 1 when two neighbours among the first n sorted entries come from different inputs but hold keys
 * within KEY_GAP of each other (equal included): rounded in f32, their order is not the
 * reference's to decide. */
static int close_call(const entry *sorted, int64_t count, int64_t n) {
  for (int64_t i = 0; i + 1 < n && i + 1 < count; ++i) {
    const double a = sorted[i].key, b = sorted[i + 1].key;
    const int near = same_double(a, b) || fabs(a - b) < KEY_GAP;
    if (near && !same_inputs(&sorted[i], &sorted[i + 1]))
      return 1;
  }
  return 0;
}

static int grouped(const rcase *c) {
  return c->method == IGNIS_MOE_ROUTING_DEEPSEEK_V3 && c->n_group > 1 && c->topk_group < c->n_group;
}

/* The reference's ids of one token; *close when a decision was a close call (biased methods). */
static void ref_ids(const rcase *c, const double *x, const double *bias, int64_t *ids, int *close) {
  const int64_t E = c->experts;
  entry all[MAX_E], kept[MAX_E];
  for (int64_t e = 0; e < E; ++e) {
    all[e].key = biased(c->method) ? ref_sigmoid(x[e]) + bias[e] : x[e];
    all[e].index = e;
    all[e].inputs[0] = x[e];
    all[e].inputs[1] = bias[e];
    all[e].inputs[2] = all[e].inputs[3] = 0.0;
  }
  *close = 0;
  int64_t count = 0;
  if (grouped(c)) {
    const int64_t per = E / c->n_group;
    entry groups[32], members[MAX_E];
    for (int64_t g = 0; g < c->n_group; ++g) {
      memcpy(members, all + g * per, sizeof(entry) * (size_t)per);
      qsort(members, (size_t)per, sizeof(entry), entry_order);
      groups[g].key = per == 1 ? members[0].key : members[0].key + members[1].key;
      groups[g].index = g;
      groups[g].inputs[0] = members[0].inputs[0];
      groups[g].inputs[1] = members[0].inputs[1];
      groups[g].inputs[2] = per == 1 ? 0.0 : members[1].inputs[0];
      groups[g].inputs[3] = per == 1 ? 0.0 : members[1].inputs[1];
    }
    qsort(groups, (size_t)c->n_group, sizeof(entry), entry_order);
    *close = close_call(groups, c->n_group, c->topk_group + 1);
    for (int64_t e = 0; e < E; ++e)
      for (int64_t j = 0; j < c->topk_group; ++j)
        if (groups[j].index == e / per)
          kept[count++] = all[e];
  } else {
    memcpy(kept, all, sizeof(entry) * (size_t)E);
    count = E;
  }
  qsort(kept, (size_t)count, sizeof(entry), entry_order);
  *close = biased(c->method) && (*close || close_call(kept, count, c->top_k + 1));
  for (int64_t j = 0; j < c->top_k; ++j)
    ids[j] = kept[j].index;
}

/* The reference's weights for the ids a call chose. */
static void ref_weights(const rcase *c, const double *x, const int64_t *ids, double *w) {
  const int64_t E = c->experts, k = c->top_k;
  double v[MAX_E], term[MAX_K], sum = 0.0;
  for (int64_t e = 0; e < E; ++e)
    v[e] = biased(c->method) ? ref_sigmoid(x[e]) : x[e];
  const double top = v[ids[0]];
  for (int64_t j = 0; j < k; ++j) {
    switch (c->method) {
    case IGNIS_MOE_ROUTING_DEFAULT:
    case IGNIS_MOE_ROUTING_RENORMALIZE:
    case IGNIS_MOE_ROUTING_RENORMALIZE_NAIVE:
      term[j] = ref_exp(v[ids[j]] - top);
      break;
    case IGNIS_MOE_ROUTING_LLAMA4:
    case IGNIS_MOE_ROUTING_TOPK_SIGMOID:
    case IGNIS_MOE_ROUTING_SIGMOID:
    case IGNIS_MOE_ROUTING_SIGMOID_RENORM:
      term[j] = ref_sigmoid(v[ids[j]]);
      break;
    default: /* TOPK: the logit; DEEPSEEK_V3, MINIMAX2: the sigmoid */
      term[j] = v[ids[j]];
      break;
    }
    sum += term[j];
  }
  if (c->method == IGNIS_MOE_ROUTING_DEFAULT) {
    sum = 0.0;
    for (int64_t e = 0; e < E; ++e)
      sum += ref_exp(v[e] - top);
  }
  for (int64_t j = 0; j < k; ++j) {
    double weight = term[j];
    switch (c->method) {
    case IGNIS_MOE_ROUTING_DEFAULT:
    case IGNIS_MOE_ROUTING_RENORMALIZE:
    case IGNIS_MOE_ROUTING_RENORMALIZE_NAIVE:
      weight = term[j] / sum;
      break;
    case IGNIS_MOE_ROUTING_SIGMOID_RENORM:
      weight = term[j] / fmax(sum, 1e-20);
      break;
    case IGNIS_MOE_ROUTING_DEEPSEEK_V3:
    case IGNIS_MOE_ROUTING_MINIMAX2:
      weight = term[j] / (sum + 1e-20);
      break;
    default:
      break;
    }
    w[j] = weight * c->scale;
  }
}

/* ---- one case --------------------------------------------------------------------------------- */
static double make_logit(h_rng *rng, values kind, int64_t i) {
  switch (kind) {
  case TIES:
    return (double)h_rng_int(rng, -2, 2) * 0.5;
  case EQUAL:
    return 0.25;
  case SPECIAL: {
    static const double special[] = {NAN, -INFINITY, INFINITY, -0.0, 0.0, 3.0, -3.0, -200.0, 40.0};
    return i % 4 == 1 ? special[h_rng_int(rng, 0, 8)] : 2.0 * h_rng_normal(rng);
  }
  default:
    return 2.0 * h_rng_normal(rng);
  }
}

typedef struct backend_run {
  h_buf logits, bias, ids, weights;
} backend_run;

static void run_case(const rcase *c, uint64_t seed) {
  const int64_t T = c->tokens, E = c->experts, k = c->top_k;
  const int64_t in_stride = c->strided ? E + 3 : E, in_offset = c->strided ? 1 : 0;
  const int64_t out_stride = c->strided ? k + 2 : k;
  const int64_t in_count = T * in_stride + in_offset + 1, out_count = T * out_stride + 1;
  char name[256];
  snprintf(name, sizeof name,
           "%s T=%lld E=%lld top_k=%lld groups=%lld/%lld logits=%s weights=%s bias=%s values=%s strided=%d "
           "scale=%g",
           method_names[c->method], (long long)T, (long long)E, (long long)k, (long long)c->n_group,
           (long long)c->topk_group, ignis_dtype_name(c->dtype), ignis_dtype_name(c->weights_dtype),
           c->bias ? ignis_dtype_name(c->bias_dtype) : "none", value_names[c->values], c->strided, c->scale);
  if (!h_selected(name))
    return;
  h_rng rng = h_rng_make(seed);
  double *x = malloc(sizeof(double) * (size_t)in_count), *b = malloc(sizeof(double) * (size_t)E);
  for (int64_t i = 0; i < in_count; ++i)
    x[i] = h_round_to(c->dtype, make_logit(&rng, c->values, i));
  for (int64_t e = 0; e < E; ++e)
    b[e] = c->bias ? h_round_to(c->bias_dtype, c->values == TIES ? 0.125 * (double)h_rng_int(&rng, 0, 2)
                                                                 : 0.1 * h_rng_normal(&rng))
                   : 0.0;

  ignis_moe_routing_config cfg = IGNIS_MOE_ROUTING_CONFIG_INIT;
  cfg.method = c->method;
  cfg.top_k = k;
  cfg.n_group = c->n_group;
  cfg.topk_group = c->topk_group;
  cfg.routed_scaling_factor = c->scale;
  const int backends = h_backend_count();
  backend_run runs[2];
  for (int bi = 0; bi < backends; ++bi) {
    const h_backend backend = h_backend_at(bi);
    h_case("%s on %s", name, h_backend_name(backend));
    backend_run *r = &runs[bi];
    r->logits = h_buf_alloc(backend, c->dtype, in_count);
    r->bias = h_buf_alloc(backend, c->bias_dtype, E > 0 ? E : 1);
    r->ids = h_buf_alloc(backend, IGNIS_I32, out_count);
    r->weights = h_buf_alloc(backend, c->weights_dtype, out_count);
    for (int64_t i = 0; i < in_count; ++i)
      h_set(&r->logits, i, x[i]);
    for (int64_t e = 0; e < E; ++e)
      h_set(&r->bias, e, b[e]);
    h_buf_poison(&r->ids);
    h_buf_poison(&r->weights);
    h_buf *bufs[] = {&r->logits, &r->bias, &r->ids, &r->weights};
    for (int i = 0; i < 4; ++i)
      h_buf_upload(bufs[i]);
    int64_t lshape[2] = {T, E}, lstrides[2] = {in_stride, 1}, oshape[2] = {T, k},
            ostrides[2] = {out_stride, 1};
    const ignis_tensor logits = h_view(&r->logits, in_offset, 2, lshape, lstrides);
    const ignis_tensor bias = h_view(&r->bias, 0, 1, &E, NULL);
    ignis_tensor ids = h_view(&r->ids, 0, 2, oshape, ostrides),
                 weights = h_view(&r->weights, 0, 2, oshape, ostrides);
    CHECK_STATUS(ignis_moe_route(&logits, c->bias ? &bias : NULL, &cfg, &ids, &weights, NULL), IGNIS_OK);
    h_buf_download(&r->ids);
    h_buf_download(&r->weights);
    CHECKF(h_buf_untouched(&r->logits) && h_buf_untouched(&r->bias), "an input changed");

    int64_t bad = 0, close = 0;
    h_cmp cmp;
    h_cmp_init(&cmp);
    const h_tol tol = h_tol_for(c->weights_dtype, fabs(c->scale));
    for (int64_t t = 0; t < T; ++t) {
      int64_t want[MAX_K], got[MAX_K];
      double w[MAX_K];
      int is_close;
      ref_ids(c, x + in_offset + t * in_stride, b, want, &is_close);
      close += is_close;
      int seen[MAX_E] = {0}, ok = 1;
      for (int64_t j = 0; j < k; ++j) {
        got[j] = (int64_t)h_get(&r->ids, t * out_stride + j);
        ok = ok && got[j] >= 0 && got[j] < E && !seen[got[j]];
        if (ok)
          seen[got[j]] = 1;
        ok = ok && (is_close || got[j] == want[j]);
      }
      if (!ok && bad++ < 4) {
        char text[512];
        int n = 0;
        for (int64_t j = 0; j < k && n < 400; ++j)
          n += snprintf(text + n, sizeof text - (size_t)n, " %lld/%lld", (long long)got[j],
                        (long long)want[j]);
        CHECKF(0, "token %lld ids (got/want):%s", (long long)t, text);
      }
      if (!ok)
        continue;
      ref_weights(c, x + in_offset + t * in_stride, got, w);
      for (int64_t j = 0; j < k; ++j)
        h_cmp_add_tol(&cmp, t * out_stride + j, h_get(&r->weights, t * out_stride + j), w[j], tol);
      for (int64_t g = k; g < out_stride; ++g)
        CHECKF(h_elem_unchanged(&r->ids, t * out_stride + g) &&
                   h_elem_unchanged(&r->weights, t * out_stride + g),
               "token %lld: the gap after its row was written", (long long)t);
    }
    CHECKF(bad == 0, "%lld tokens with wrong ids", (long long)bad);
    CHECK_CMP(&cmp, "topk_weights");
    CHECKF(c->values != NORMAL || close <= T / 50 + 1, "%lld of %lld tokens were close calls",
           (long long)close, (long long)T);
    if (bi > 0) {
      int same = memcmp(r->ids.host, runs[0].ids.host, (size_t)out_count * 4) == 0;
      int64_t differ = 0;
      for (int64_t i = 0; i < out_count; ++i) {
        const double a = h_get(&r->weights, i), z = h_get(&runs[0].weights, i);
        differ += !(a == z || (isnan(a) && isnan(z)));
      }
      CHECKF(same, "CUDA ids differ from the CPU backend's");
      CHECKF(differ == 0, "%lld CUDA weights differ from the CPU backend's", (long long)differ);
    }
  }
  for (int bi = 0; bi < backends; ++bi) {
    h_buf_free(&runs[bi].logits);
    h_buf_free(&runs[bi].bias);
    h_buf_free(&runs[bi].ids);
    h_buf_free(&runs[bi].weights);
  }
  free(x);
  free(b);
}

static rcase make(ignis_moe_routing_method method, int64_t tokens, int64_t experts, int64_t top_k) {
  rcase c;
  memset(&c, 0, sizeof c);
  c.method = method;
  c.tokens = tokens;
  c.experts = experts;
  c.top_k = top_k;
  c.dtype = IGNIS_F32;
  c.weights_dtype = IGNIS_F32;
  c.bias_dtype = IGNIS_F32;
  c.values = NORMAL;
  c.scale = 1.0;
  return c;
}

/* Every method over the expert counts and top_k values, each shape in turn taking the dtypes,
 * value kinds, strides and scales. */
static void test_methods(uint64_t *seed) {
  static const int64_t experts[] = {8, 16, 20, 64, 72, 128, 256, 384, 512};
  static const int64_t top_ks[] = {1, 2, 4, 6, 8};
  static const ignis_dtype dtypes[] = {IGNIS_F32, IGNIS_BF16, IGNIS_F16};
  int turn = 0;
  for (int m = 0; m <= IGNIS_MOE_ROUTING_TOPK_SIGMOID; ++m)
    for (size_t ei = 0; ei < sizeof experts / sizeof experts[0]; ++ei)
      for (size_t ki = 0; ki < sizeof top_ks / sizeof top_ks[0]; ++ki, ++turn) {
        const int64_t k = m == IGNIS_MOE_ROUTING_LLAMA4 ? 1 : top_ks[ki];
        if (k > experts[ei] || (m == IGNIS_MOE_ROUTING_LLAMA4 && ki > 0))
          continue;
        rcase c = make((ignis_moe_routing_method)m, (turn % 3 == 0) ? 64 : 7, experts[ei], k);
        c.dtype = dtypes[turn % 3];
        c.values = (values)(turn % 4);
        c.strided = turn % 2;
        c.scale = turn % 5 == 0 ? 2.5 : 1.0;
        c.weights_dtype = turn % 7 == 3 ? IGNIS_BF16 : IGNIS_F32;
        c.bias = biased(c.method) && turn % 3 != 2;
        c.bias_dtype = turn % 2 ? IGNIS_BF16 : IGNIS_F32;
        run_case(&c, (*seed)++);
      }
}

/* DeepSeek-V3's group stage: the model's shape, groups over whole lanes (butterfly) and not
 * (shared memory), one expert per group, every group kept, the limit of 32 groups. */
static void test_groups(uint64_t *seed) {
  static const struct {
    int64_t experts, n_group, topk_group, top_k;
  } shapes[] = {{256, 8, 4, 8},  {256, 1, 1, 8}, {256, 8, 8, 8}, {64, 8, 4, 6},
                {384, 8, 4, 8},  {120, 5, 2, 8}, {16, 16, 4, 4}, {96, 3, 1, 2},
                {512, 32, 8, 8}, {256, 0, 0, 4}, {72, 6, 1, 4},  {256, 8, 1, 32}};
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
    for (int v = NORMAL; v <= SPECIAL; ++v) {
      rcase c = make(IGNIS_MOE_ROUTING_DEEPSEEK_V3, v == NORMAL ? 64 : 7, shapes[s].experts, shapes[s].top_k);
      c.n_group = shapes[s].n_group;
      c.topk_group = shapes[s].topk_group;
      c.values = (values)v;
      c.bias = v != EQUAL;
      c.bias_dtype = s % 2 ? IGNIS_BF16 : IGNIS_F32;
      c.dtype = s % 3 == 1 ? IGNIS_BF16 : IGNIS_F32;
      c.scale = 2.5;
      run_case(&c, (*seed)++);
    }
}

/* The benchmark shapes at 4096 tokens (DeepSeek-V3, Qwen3), the top_k limit, and no tokens. */
static void test_large_and_empty(uint64_t *seed) {
  rcase c = make(IGNIS_MOE_ROUTING_DEEPSEEK_V3, 4096, 256, 8);
  c.n_group = 8;
  c.topk_group = 4;
  c.bias = 1;
  c.scale = 2.5;
  run_case(&c, (*seed)++);
  if (!h_quick()) { /* the sanitizer runs keep one large case */
    c.dtype = IGNIS_BF16;
    c.bias_dtype = IGNIS_BF16;
    c.strided = 1;
    run_case(&c, (*seed)++);
    c = make(IGNIS_MOE_ROUTING_RENORMALIZE_NAIVE, 4096, 128, 8);
    c.dtype = IGNIS_BF16;
    run_case(&c, (*seed)++);
    c.method = IGNIS_MOE_ROUTING_DEFAULT;
    c.dtype = IGNIS_F32;
    c.strided = 1;
    run_case(&c, (*seed)++);
  }
  for (int m = 0; m <= IGNIS_MOE_ROUTING_TOPK_SIGMOID; ++m) {
    if (m == IGNIS_MOE_ROUTING_LLAMA4)
      continue;
    c = make((ignis_moe_routing_method)m, 9, 512, 32);
    c.values = (values)(m % 4);
    c.bias = biased(c.method);
    run_case(&c, (*seed)++);
  }
  c = make(IGNIS_MOE_ROUTING_DEEPSEEK_V3, 0, 256, 8);
  c.n_group = 8;
  c.topk_group = 4;
  run_case(&c, (*seed)++);
  c = make(IGNIS_MOE_ROUTING_RENORMALIZE, 1, 8, 8);
  run_case(&c, (*seed)++);
}

/* ---- bad inputs ------------------------------------------------------------------------------ */
static void test_bad_inputs(h_backend backend) {
  enum { T = 3, E = 16, K = 4 };
  h_case("moe routing bad inputs on %s", h_backend_name(backend));
  h_buf logits = h_buf_alloc(backend, IGNIS_F32, T * E), big = h_buf_alloc(backend, IGNIS_F32, 1024);
  h_buf ints = h_buf_alloc(backend, IGNIS_I32, T * E), bias = h_buf_alloc(backend, IGNIS_F32, E);
  h_buf ids = h_buf_alloc(backend, IGNIS_I32, T * K + 8),
        weights = h_buf_alloc(backend, IGNIS_F32, T * K + 8);
  for (int i = 0; i < T * E; ++i)
    h_set(&logits, i, (double)(i % 7));
  h_buf_poison(&ids);
  h_buf_poison(&weights);
  h_buf *bufs[] = {&logits, &big, &ints, &bias, &ids, &weights};
  for (int i = 0; i < 6; ++i)
    h_buf_upload(bufs[i]);
  int64_t lshape[2] = {T, E}, oshape[2] = {T, K}, e = E;
  const ignis_tensor lg = h_view(&logits, 0, 2, lshape, NULL), bs = h_view(&bias, 0, 1, &e, NULL);
  ignis_tensor id = h_view(&ids, 0, 2, oshape, NULL), w = h_view(&weights, 0, 2, oshape, NULL), x;
  ignis_moe_routing_config cfg = IGNIS_MOE_ROUTING_CONFIG_INIT, bad;
  cfg.top_k = K;
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
#define BAD(call, status, needle)                                                                            \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    for (int b_ = 0; b_ < 6; ++b_)                                                                           \
      CHECKF(h_buf_untouched(bufs[b_]), "a rejected call changed buffer %d", b_);                            \
  } while (0)
#define ROUTE(l_, b_, c_, i_, w_) ignis_moe_route(l_, b_, c_, i_, w_, NULL)
  /* config */
  BAD(ROUTE(&lg, NULL, NULL, &id, &w), INV, "config is NULL");
  bad = cfg;
  bad.size = 8;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.size");
  bad = cfg;
  bad.method = (ignis_moe_routing_method)10;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.method=10");
  bad.method = (ignis_moe_routing_method)-1;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.method=-1");
  bad = cfg;
  bad.top_k = 0;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.top_k=0");
  bad.top_k = E + 1;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.top_k=17");
  bad = cfg;
  bad.method = IGNIS_MOE_ROUTING_LLAMA4;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.top_k=4");
  bad = cfg;
  bad.n_group = 4;
  bad.topk_group = 2;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.n_group=4");
  bad.method = IGNIS_MOE_ROUTING_DEEPSEEK_V3;
  bad.n_group = 3;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.n_group=3 does not divide");
  bad.n_group = 4;
  bad.topk_group = 5;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.topk_group=5");
  bad.topk_group = 0;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.topk_group=0");
  bad.n_group = 8;
  bad.topk_group = 1;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "groups kept hold 2 experts");
  bad.n_group = 1;
  bad.topk_group = 2;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.topk_group=2");
  bad.n_group = -1;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.n_group=-1");
  bad = cfg;
  bad.routed_scaling_factor = INFINITY;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.routed_scaling_factor");
  bad.routed_scaling_factor = 1e300;
  BAD(ROUTE(&lg, NULL, &bad, &id, &w), INV, "config.routed_scaling_factor");
  /* limits */
  x = h_view(&big, 0, 2, (int64_t[]){1, 1024}, NULL);
  BAD(ROUTE(&x, NULL, &cfg, &id, &w), UNS, "logits.shape[1]=1024");
  bad = cfg;
  bad.top_k = 33;
  x = h_view(&big, 0, 2, (int64_t[]){1, 64}, NULL);
  ignis_tensor wide_ids = h_view(&ids, 0, 2, (int64_t[]){1, 33}, NULL),
               wide_w = h_view(&weights, 0, 2, (int64_t[]){1, 33}, NULL);
  BAD(ROUTE(&x, NULL, &bad, &wide_ids, &wide_w), UNS, "config.top_k=33");
  bad = cfg;
  bad.method = IGNIS_MOE_ROUTING_DEEPSEEK_V3;
  bad.n_group = 64;
  bad.topk_group = 8;
  x = h_view(&big, 0, 2, (int64_t[]){1, 128}, NULL);
  ignis_tensor row_ids = h_view(&ids, 0, 2, (int64_t[]){1, K}, NULL),
               row_w = h_view(&weights, 0, 2, (int64_t[]){1, K}, NULL);
  BAD(ROUTE(&x, NULL, &bad, &row_ids, &row_w), UNS, "config.n_group=64");
  /* logits */
  BAD(ROUTE(NULL, NULL, &cfg, &id, &w), INV, "logits is NULL");
  x = h_view(&ints, 0, 2, lshape, NULL);
  BAD(ROUTE(&x, NULL, &cfg, &id, &w), INV, "logits.dtype");
  x = h_view(&logits, 0, 1, &e, NULL);
  BAD(ROUTE(&x, NULL, &cfg, &id, &w), INV, "logits.ndim");
  x = h_view(&logits, 0, 2, lshape, (int64_t[]){1, T});
  BAD(ROUTE(&x, NULL, &cfg, &id, &w), UNS, "logits.strides");
  /* bias */
  BAD(ROUTE(&lg, &bs, &cfg, &id, &w), INV, "bias is given");
  bad = cfg;
  bad.method = IGNIS_MOE_ROUTING_MINIMAX2;
  x = h_view(&bias, 0, 1, (int64_t[]){E - 1}, NULL);
  BAD(ROUTE(&lg, &x, &bad, &id, &w), INV, "bias.shape[0]");
  x = h_view(&ints, 0, 1, &e, NULL);
  BAD(ROUTE(&lg, &x, &bad, &id, &w), INV, "bias.dtype");
  x = h_view(&big, 0, 1, &e, (int64_t[]){2});
  BAD(ROUTE(&lg, &x, &bad, &id, &w), UNS, "bias.strides[0]");
  /* outputs */
  BAD(ROUTE(&lg, NULL, &cfg, NULL, &w), INV, "topk_ids is NULL");
  BAD(ROUTE(&lg, NULL, &cfg, &id, NULL), INV, "topk_weights is NULL");
  x = h_view(&ids, 0, 2, (int64_t[]){T, K + 1}, NULL);
  BAD(ROUTE(&lg, NULL, &cfg, &x, &w), INV, "topk_ids.shape[1]");
  x = h_view(&ids, 0, 2, (int64_t[]){T - 1, K}, NULL);
  BAD(ROUTE(&lg, NULL, &cfg, &x, &w), INV, "topk_ids.shape[0]");
  x = h_view(&weights, 0, 2, oshape, NULL);
  BAD(ROUTE(&lg, NULL, &cfg, &x, &w), INV, "topk_ids.dtype");
  x = h_view(&ids, 0, 2, oshape, NULL);
  BAD(ROUTE(&lg, NULL, &cfg, &id, &x), INV, "topk_weights.dtype");
  x = h_view(&weights, 0, 2, oshape, (int64_t[]){1, T});
  BAD(ROUTE(&lg, NULL, &cfg, &id, &x), UNS, "topk_weights.strides");
  x = h_view(&weights, 0, 2, (int64_t[]){T, K}, NULL);
  ignis_tensor alias = x;
  alias.dtype = IGNIS_I32;
  BAD(ROUTE(&lg, NULL, &cfg, &alias, &x), INV, "topk_ids");
  x = h_view(&logits, 0, 2, oshape, NULL);
  BAD(ROUTE(&lg, NULL, &cfg, &id, &x), INV, "logits");
#undef BAD
#undef ROUTE
  for (int i = 0; i < 6; ++i)
    h_buf_free(bufs[i]);
}

int main(void) {
  h_init("test_moe_routing");
  for (int b = 0; b < h_backend_count(); ++b)
    test_bad_inputs(h_backend_at(b));
  uint64_t seed = 1;
  test_methods(&seed);
  test_groups(&seed);
  test_large_and_empty(&seed);
  return h_finish();
}
