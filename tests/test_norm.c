/* Tests of the norm ops (include/ignis/norm.h): rmsnorm, gemma_rmsnorm, fused_add_rmsnorm,
 * gemma_fused_add_rmsnorm and layernorm, on every backend, against an fp64 reference written
 * here from the header's formulas.
 *
 * Cases: hidden sizes 1, 7, 8, 33, 4095, 4096, 4097 (16384 on CUDA only), rows 1, 3, 17, dtypes
 * f16/bf16/f32, and per combination four layout variants: 2-D contiguous; 2-D with a padded,
 * misaligned row stride; 3-D with a non-trivial outer stride and an output whose leading strides
 * are permuted; and in place (out aliases input) or, for the fused forms, residual and input in
 * different strided layouts. Weights are f32 or the input's dtype, eps is 1e-6, 1e-5, 0 or 0.1.
 * Outputs are poisoned (NaN) before each call; every element inside the view must be written and
 * every element outside it (padding) must keep its sentinel; inputs must not change.
 *
 * Bad inputs: each returns the documented status, the message names the parameter, and no
 * buffer changes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

typedef enum norm_op { OP_RMS, OP_GEMMA, OP_FUSED, OP_GEMMA_FUSED, OP_LAYER, OP_COUNT } norm_op;

static const char *const op_names[OP_COUNT] = {"rmsnorm", "gemma_rmsnorm", "fused_add_rmsnorm",
                                               "gemma_fused_add_rmsnorm", "layernorm"};

static int op_is_fused(norm_op op) {
  return op == OP_FUSED || op == OP_GEMMA_FUSED;
}
static int op_is_gemma(norm_op op) {
  return op == OP_GEMMA || op == OP_GEMMA_FUSED;
}

static const ignis_dtype float_dtypes[3] = {IGNIS_F16, IGNIS_BF16, IGNIS_F32};

/* ---- layouts ------------------------------------------------------------------------------ */
typedef enum layout_kind {
  LAYOUT_CONTIGUOUS,  /* row-major, offset 0 */
  LAYOUT_PADDED,      /* rows padded by 3 elements, view starts 1 element in (misaligned) */
  LAYOUT_ALIGNED_PAD, /* rows padded to a multiple of 8 plus 8, offset 8 (vector-aligned) */
  LAYOUT_PERMUTED     /* 3-D: [outer, inner] stored inner-major, padded rows, outer gap */
} layout_kind;

typedef struct view_spec {
  int ndim;
  int64_t offset;
  int64_t shape[3];
  int64_t strides[3];
  int64_t extent; /* buffer elements needed, with a tail of sentinels */
} view_spec;

/* 2-D: [inner, hidden]; 3-D: [outer, inner, hidden]. */
static view_spec make_view(layout_kind kind, int ndim, int64_t outer, int64_t inner, int64_t hidden) {
  view_spec v;
  memset(&v, 0, sizeof v);
  v.ndim = ndim;
  int64_t row = hidden;
  switch (kind) {
  case LAYOUT_CONTIGUOUS:
    break;
  case LAYOUT_PADDED:
  case LAYOUT_PERMUTED:
    row = hidden + 3;
    v.offset = 1;
    break;
  case LAYOUT_ALIGNED_PAD:
    row = (hidden + 7) / 8 * 8 + 8;
    v.offset = 8;
    break;
  }
  if (ndim == 2) {
    v.shape[0] = inner;
    v.shape[1] = hidden;
    v.strides[0] = row;
    v.strides[1] = 1;
  } else {
    v.shape[0] = outer;
    v.shape[1] = inner;
    v.shape[2] = hidden;
    v.strides[2] = 1;
    if (kind == LAYOUT_PERMUTED) {
      v.strides[0] = row;
      v.strides[1] = outer * row + 2;
    } else {
      v.strides[1] = row;
      v.strides[0] = kind == LAYOUT_CONTIGUOUS ? inner * row : inner * row + 5;
    }
  }
  v.extent = h_view_extent(v.offset, ndim, v.shape, v.strides) + 4;
  return v;
}

/* Buffer index of element h of row (o, i). */
static int64_t view_at(const view_spec *v, int64_t o, int64_t i, int64_t h) {
  if (v->ndim == 2)
    return v->offset + i * v->strides[0] + h;
  return v->offset + o * v->strides[0] + i * v->strides[1] + h;
}

/* ---- the fp64 reference ------------------------------------------------------------------- */
/* One row: x (already the f32-exact sum for the fused forms), weight w, bias b (layernorm). */
static void reference_row(norm_op op, const double *x, const double *w, const double *b, int64_t n,
                          double eps, double *out) {
  double mean = 0.0;
  if (op == OP_LAYER) {
    for (int64_t h = 0; h < n; ++h)
      mean += x[h];
    mean /= (double)n;
  }
  double sum_sq = 0.0;
  for (int64_t h = 0; h < n; ++h)
    sum_sq += (x[h] - mean) * (x[h] - mean);
  double rstd = 1.0 / sqrt(sum_sq / (double)n + eps);
  double offset = op_is_gemma(op) ? 1.0 : 0.0;
  for (int64_t h = 0; h < n; ++h) {
    out[h] = (x[h] - mean) * rstd * (w[h] + offset);
    if (op == OP_LAYER)
      out[h] += b[h];
  }
}

static ignis_status call_op(norm_op op, ignis_tensor *input, ignis_tensor *residual,
                            const ignis_tensor *weight, const ignis_tensor *bias, double eps,
                            ignis_tensor *out) {
  switch (op) {
  case OP_RMS:
    return ignis_rmsnorm(input, weight, eps, out, NULL);
  case OP_GEMMA:
    return ignis_gemma_rmsnorm(input, weight, eps, out, NULL);
  case OP_FUSED:
    return ignis_fused_add_rmsnorm(input, residual, weight, eps, NULL);
  case OP_GEMMA_FUSED:
    return ignis_gemma_fused_add_rmsnorm(input, residual, weight, eps, NULL);
  default:
    return ignis_layernorm(input, weight, bias, eps, out, NULL);
  }
}

/* ---- one correctness case ------------------------------------------------------------------ */
typedef struct norm_case {
  norm_op op;
  ignis_dtype dtype;
  ignis_dtype weight_dtype;
  int ndim;
  int64_t outer, inner, hidden;
  layout_kind input_layout;
  layout_kind other_layout; /* out (out of place) or residual (fused) */
  int in_place;             /* out aliases input (non-fused ops) */
  double eps;
} norm_case;

static void run_case(h_backend backend, const norm_case *c, h_rng *rng) {
  h_case("%s on %s: dtype=%s weight=%s %d-D outer=%lld inner=%lld hidden=%lld layout=%d/%d%s eps=%g",
         op_names[c->op], h_backend_name(backend), ignis_dtype_name(c->dtype),
         ignis_dtype_name(c->weight_dtype), c->ndim, (long long)c->outer, (long long)c->inner,
         (long long)c->hidden, c->input_layout, c->other_layout, c->in_place ? " in-place" : "", c->eps);
  int fused = op_is_fused(c->op);
  int64_t outer = c->ndim == 3 ? c->outer : 1, inner = c->inner, n = c->hidden;
  int64_t rows = outer * inner;
  view_spec in_v = make_view(c->input_layout, c->ndim, outer, inner, n);
  view_spec other_v = make_view(c->other_layout, c->ndim, outer, inner, n);
  int has_other = fused || !c->in_place;

  h_buf in_b = h_buf_alloc(backend, c->dtype, in_v.extent);
  h_buf other_b = h_buf_alloc(backend, c->dtype, has_other ? other_v.extent : 1);
  h_buf w_b = h_buf_alloc(backend, c->weight_dtype, n);
  h_buf bias_b = h_buf_alloc(backend, c->weight_dtype, n);
  h_buf_poison(&in_b);
  h_buf_poison(&other_b);

  double *x = malloc(sizeof(double) * (size_t)(rows * n));
  double *res = malloc(sizeof(double) * (size_t)(rows * n));
  double *w = malloc(sizeof(double) * (size_t)n);
  double *bias = malloc(sizeof(double) * (size_t)n);
  double *ref = malloc(sizeof(double) * (size_t)n);
  double *sum = malloc(sizeof(double) * (size_t)n);
  double *row_scale = malloc(sizeof(double) * (size_t)(rows > 0 ? rows : 1));

  for (int64_t h = 0; h < n; ++h) {
    double wv = op_is_gemma(c->op) ? 0.3 * h_rng_normal(rng) : 1.0 + 0.3 * h_rng_normal(rng);
    h_set(&w_b, h, wv);
    w[h] = h_get(&w_b, h);
    h_set(&bias_b, h, 0.5 * h_rng_normal(rng));
    bias[h] = h_get(&bias_b, h);
  }
  double mean_shift = c->op == OP_LAYER ? 3.0 : 0.0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t r = o * inner + i;
      row_scale[r] = exp(h_rng_uniform(rng, log(0.05), log(20.0)));
      for (int64_t h = 0; h < n; ++h) {
        int64_t at = view_at(&in_v, o, i, h);
        h_set(&in_b, at, row_scale[r] * (mean_shift + h_rng_normal(rng)));
        x[r * n + h] = h_get(&in_b, at);
        if (fused) {
          int64_t rat = view_at(&other_v, o, i, h);
          h_set(&other_b, rat, row_scale[r] * h_rng_normal(rng));
          res[r * n + h] = h_get(&other_b, rat);
        }
      }
    }
  h_buf_upload(&in_b);
  h_buf_upload(&other_b);
  h_buf_upload(&w_b);
  h_buf_upload(&bias_b);

  ignis_tensor input = h_view(&in_b, in_v.offset, c->ndim, in_v.shape, in_v.strides);
  ignis_tensor other = h_view(&other_b, other_v.offset, c->ndim, other_v.shape, other_v.strides);
  ignis_tensor aliased = input; /* same view, separate descriptor */
  ignis_tensor weight = h_view(&w_b, 0, 1, &n, NULL);
  ignis_tensor bias_t = h_view(&bias_b, 0, 1, &n, NULL);
  ignis_tensor *out = fused ? NULL : c->in_place ? &aliased : &other;
  CHECK_STATUS(
      call_op(c->op, &input, fused ? &other : NULL, &weight, c->op == OP_LAYER ? &bias_t : NULL, c->eps, out),
      IGNIS_OK);

  h_buf_download(&in_b);
  h_buf_download(&other_b);
  h_buf_download(&w_b);
  h_buf_download(&bias_b);
  /* The normalized values land in: input (fused, in place) or the out buffer. */
  int out_in_input = fused || c->in_place;
  h_buf *out_b = out_in_input ? &in_b : &other_b;
  const view_spec *out_v = out_in_input ? &in_v : &other_v;
  h_cmp cmp_out, cmp_res;
  h_cmp_init(&cmp_out);
  h_cmp_init(&cmp_res);
  h_tol out_tol = h_tol_for(c->dtype, 1.0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t r = o * inner + i;
      for (int64_t h = 0; h < n; ++h)
        sum[h] = fused ? x[r * n + h] + res[r * n + h] : x[r * n + h];
      reference_row(c->op, sum, w, bias, n, c->eps, ref);
      h_tol res_tol = h_tol_for(c->dtype, row_scale[r]);
      for (int64_t h = 0; h < n; ++h) {
        int64_t at = view_at(out_v, o, i, h);
        h_cmp_add_tol(&cmp_out, at, h_get(out_b, at), ref[h], out_tol);
        if (fused) {
          int64_t rat = view_at(&other_v, o, i, h);
          h_cmp_add_tol(&cmp_res, rat, h_get(&other_b, rat), sum[h], res_tol);
        }
      }
    }
  CHECK_CMP(&cmp_out, "normalized output matches the fp64 reference");
  if (fused)
    CHECK_CMP(&cmp_res, "residual holds input + residual");

  /* Outside the views nothing changes: padding keeps its poison, inputs keep their values. */
  unsigned char *in_mask = calloc((size_t)in_b.count, 1);
  unsigned char *other_mask = calloc((size_t)other_b.count, 1);
  ignis_tensor out_view_in = h_view(&in_b, in_v.offset, c->ndim, in_v.shape, in_v.strides);
  ignis_tensor other_view = h_view(&other_b, other_v.offset, c->ndim, other_v.shape, other_v.strides);
  if (out_in_input)
    h_view_mark(&in_b, &out_view_in, in_mask);
  if (has_other)
    h_view_mark(&other_b, &other_view, other_mask);
  CHECKF(h_buf_changed(&in_b, in_mask) == 0, "%lld input-buffer elements changed outside the output view",
         (long long)h_buf_changed(&in_b, in_mask));
  CHECKF(h_buf_changed(&other_b, other_mask) == 0, "%lld elements changed outside the out/residual view",
         (long long)h_buf_changed(&other_b, other_mask));
  CHECK(h_buf_changed(&w_b, NULL) == 0 && h_buf_changed(&bias_b, NULL) == 0);

  free(in_mask);
  free(other_mask);
  free(x);
  free(res);
  free(w);
  free(bias);
  free(ref);
  free(sum);
  free(row_scale);
  h_buf_free(&in_b);
  h_buf_free(&other_b);
  h_buf_free(&w_b);
  h_buf_free(&bias_b);
}

static void test_correctness(h_backend backend) {
  static const int64_t hiddens[] = {1, 7, 8, 33, 4095, 4096, 4097};
  static const int64_t rows_list[] = {1, 3, 17};
  static const double eps_list[] = {1e-6, 1e-5, 0.0, 0.1};
  h_rng rng = h_rng_make(0x6e6f726d + (uint64_t)backend);
  int variant_seed = 0;
  for (int op = 0; op < OP_COUNT; ++op)
    for (int d = 0; d < 3; ++d)
      for (size_t hi = 0; hi < sizeof hiddens / sizeof hiddens[0]; ++hi)
        for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ++ri)
          for (int variant = 0; variant < 4; ++variant, ++variant_seed) {
            norm_case c;
            memset(&c, 0, sizeof c);
            c.op = (norm_op)op;
            c.dtype = float_dtypes[d];
            c.weight_dtype = (variant + d + (int)hi) % 2 ? IGNIS_F32 : c.dtype;
            c.hidden = hiddens[hi];
            c.inner = rows_list[ri];
            c.outer = 2;
            c.eps = eps_list[(variant_seed + (int)hi) % 4];
            if (c.op == OP_LAYER && c.eps == 0.0)
              c.eps = 1e-5; /* layernorm of one element with eps = 0 is 0/0 */
            switch (variant) {
            case 0:
              c.ndim = 2;
              c.input_layout = LAYOUT_CONTIGUOUS;
              c.other_layout = LAYOUT_CONTIGUOUS;
              break;
            case 1:
              c.ndim = 2;
              c.input_layout = LAYOUT_PADDED;
              c.other_layout = (hi % 2) ? LAYOUT_ALIGNED_PAD : LAYOUT_CONTIGUOUS;
              break;
            case 2:
              c.ndim = 3;
              c.input_layout = LAYOUT_PADDED;
              c.other_layout = LAYOUT_PERMUTED;
              break;
            default:
              c.ndim = (ri % 2) ? 3 : 2;
              c.input_layout = c.ndim == 3 ? LAYOUT_PERMUTED : LAYOUT_ALIGNED_PAD;
              c.other_layout = LAYOUT_PADDED;
              c.in_place = !op_is_fused(c.op);
              break;
            }
            run_case(backend, &c, &rng);
          }
  if (backend == H_CUDA) {
    /* A large hidden size, only where it is cheap. */
    for (int op = 0; op < OP_COUNT; ++op)
      for (int variant = 0; variant < 2; ++variant) {
        norm_case c;
        memset(&c, 0, sizeof c);
        c.op = (norm_op)op;
        c.dtype = variant ? IGNIS_F32 : IGNIS_BF16;
        c.weight_dtype = IGNIS_F32;
        c.ndim = 2;
        c.inner = 3;
        c.hidden = 16384;
        c.eps = 1e-6;
        c.input_layout = variant ? LAYOUT_PADDED : LAYOUT_CONTIGUOUS;
        c.other_layout = variant ? LAYOUT_ALIGNED_PAD : LAYOUT_CONTIGUOUS;
        run_case(backend, &c, &rng);
      }
  }
}

/* Zero rows: success, nothing written. */
static void test_empty(h_backend backend) {
  h_case("empty input on %s", h_backend_name(backend));
  h_buf in_b = h_buf_alloc(backend, IGNIS_BF16, 16), out_b = h_buf_alloc(backend, IGNIS_BF16, 16);
  h_buf w_b = h_buf_alloc(backend, IGNIS_BF16, 16);
  h_buf_poison(&out_b);
  h_buf_upload(&in_b);
  h_buf_upload(&out_b);
  h_buf_upload(&w_b);
  int64_t shape[2] = {0, 16}, hidden = 16;
  ignis_tensor input = h_view(&in_b, 0, 2, shape, NULL), out = h_view(&out_b, 0, 2, shape, NULL);
  ignis_tensor weight = h_view(&w_b, 0, 1, &hidden, NULL);
  CHECK_STATUS(ignis_rmsnorm(&input, &weight, 1e-6, &out, NULL), IGNIS_OK);
  CHECK_STATUS(ignis_fused_add_rmsnorm(&input, &out, &weight, 1e-6, NULL), IGNIS_OK);
  CHECK(h_buf_untouched(&out_b));
  h_buf_free(&in_b);
  h_buf_free(&out_b);
  h_buf_free(&w_b);
}

/* ---- bad inputs ----------------------------------------------------------------------------- */
typedef struct bad_ctx {
  h_buf in_b, out_b, res_b, w_b, wf_b, b_b;
  ignis_tensor input, out, residual, weight, weight_f32, bias;
} bad_ctx;

static int all_untouched(bad_ctx *b) {
  return h_buf_untouched(&b->in_b) && h_buf_untouched(&b->out_b) && h_buf_untouched(&b->res_b) &&
         h_buf_untouched(&b->w_b) && h_buf_untouched(&b->wf_b) && h_buf_untouched(&b->b_b);
}

#define BAD(call, status, needle)                                                                            \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    CHECKF(all_untouched(&ctx), "a rejected call changed a buffer");                                         \
  } while (0)

static void test_bad_inputs(h_backend backend) {
  enum { R = 3, H = 64 };
  bad_ctx ctx;
  h_rng rng = h_rng_make(99);
  ctx.in_b = h_buf_alloc(backend, IGNIS_BF16, 4 * R * H);
  ctx.out_b = h_buf_alloc(backend, IGNIS_BF16, 4 * R * H);
  ctx.res_b = h_buf_alloc(backend, IGNIS_BF16, R * H);
  ctx.w_b = h_buf_alloc(backend, IGNIS_BF16, 2 * H + 2);
  ctx.wf_b = h_buf_alloc(backend, IGNIS_F32, H + 1);
  ctx.b_b = h_buf_alloc(backend, IGNIS_F32, H + 1);
  for (int64_t i = 0; i < ctx.in_b.count; ++i)
    h_set(&ctx.in_b, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < ctx.res_b.count; ++i)
    h_set(&ctx.res_b, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < ctx.w_b.count; ++i)
    h_set(&ctx.w_b, i, 1.0);
  for (int64_t i = 0; i < ctx.wf_b.count; ++i) {
    h_set(&ctx.wf_b, i, 1.0);
    h_set(&ctx.b_b, i, 0.5);
  }
  h_buf_poison(&ctx.out_b);
  h_buf_upload(&ctx.in_b);
  h_buf_upload(&ctx.out_b);
  h_buf_upload(&ctx.res_b);
  h_buf_upload(&ctx.w_b);
  h_buf_upload(&ctx.wf_b);
  h_buf_upload(&ctx.b_b);
  int64_t shape[2] = {R, H}, hidden = H;
  ctx.input = h_view(&ctx.in_b, 0, 2, shape, NULL);
  ctx.out = h_view(&ctx.out_b, 0, 2, shape, NULL);
  ctx.residual = h_view(&ctx.res_b, 0, 2, shape, NULL);
  ctx.weight = h_view(&ctx.w_b, 0, 1, &hidden, NULL);
  ctx.weight_f32 = h_view(&ctx.wf_b, 0, 1, &hidden, NULL);
  ctx.bias = h_view(&ctx.b_b, 0, 1, &hidden, NULL);
  ignis_tensor t;
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
  h_case("norm bad inputs on %s", h_backend_name(backend));

  /* weight length mismatch */
  t = ctx.weight;
  t.shape[0] = H - 1;
  BAD(ignis_rmsnorm(&ctx.input, &t, 1e-6, &ctx.out, NULL), INV, "weight.shape[0]");
  BAD(ignis_gemma_rmsnorm(&ctx.input, &t, 1e-6, &ctx.out, NULL), INV, "weight.shape[0]");
  BAD(ignis_fused_add_rmsnorm(&ctx.input, &ctx.residual, &t, 1e-6, NULL), INV, "weight.shape[0]");
  BAD(ignis_gemma_fused_add_rmsnorm(&ctx.input, &ctx.residual, &t, 1e-6, NULL), INV, "weight.shape[0]");
  BAD(ignis_layernorm(&ctx.input, &t, &ctx.bias, 1e-6, &ctx.out, NULL), INV, "gamma.shape[0]");
  t = ctx.bias;
  t.shape[0] = H + 1;
  BAD(ignis_layernorm(&ctx.input, &ctx.weight_f32, &t, 1e-6, &ctx.out, NULL), INV, "beta.shape[0]");
  /* weight not 1-D, weight with a non-unit stride */
  t = ctx.weight;
  t.ndim = 2;
  t.shape[0] = 1;
  t.shape[1] = H;
  t.strides[0] = H;
  t.strides[1] = 1;
  BAD(ignis_rmsnorm(&ctx.input, &t, 1e-6, &ctx.out, NULL), INV, "weight.ndim");
  t = ctx.weight;
  t.strides[0] = 2;
  BAD(ignis_rmsnorm(&ctx.input, &t, 1e-6, &ctx.out, NULL), UNS, "weight.strides[0]");

  /* dtype mismatches */
  t = ctx.out;
  t.dtype = IGNIS_F16;
  BAD(ignis_rmsnorm(&ctx.input, &ctx.weight, 1e-6, &t, NULL), INV, "out.dtype");
  t = ctx.weight;
  t.dtype = IGNIS_F16;
  BAD(ignis_rmsnorm(&ctx.input, &t, 1e-6, &ctx.out, NULL), INV, "weight.dtype");
  t.dtype = IGNIS_I32;
  BAD(ignis_gemma_rmsnorm(&ctx.input, &t, 1e-6, &ctx.out, NULL), INV, "weight.dtype");
  t = ctx.residual;
  t.dtype = IGNIS_F16;
  BAD(ignis_fused_add_rmsnorm(&ctx.input, &t, &ctx.weight, 1e-6, NULL), INV, "residual.dtype");
  t = ctx.input;
  t.dtype = IGNIS_I32;
  t.shape[1] = H / 2; /* same bytes, so only the dtype is wrong */
  BAD(ignis_rmsnorm(&t, &ctx.weight, 1e-6, &ctx.out, NULL), INV, "input.dtype");
  t = ctx.input;
  t.dtype = IGNIS_FP8_E4M3;
  BAD(ignis_fused_add_rmsnorm(&t, &ctx.residual, &ctx.weight, 1e-6, NULL), INV, "input.dtype");
  BAD(ignis_layernorm(&ctx.input, &ctx.weight, &ctx.bias, 1e-6, &ctx.out, NULL), INV, "beta.dtype");

  /* out shape mismatch */
  t = ctx.out;
  t.shape[1] = H - 1;
  BAD(ignis_rmsnorm(&ctx.input, &ctx.weight, 1e-6, &t, NULL), INV, "out.shape[1]");
  t = ctx.out;
  t.shape[0] = R - 1;
  BAD(ignis_layernorm(&ctx.input, &ctx.weight_f32, &ctx.bias, 1e-6, &t, NULL), INV, "out.shape[0]");
  t = ctx.out;
  t.ndim = 3;
  t.shape[0] = 1;
  t.shape[1] = R;
  t.shape[2] = H;
  t.strides[0] = R * H;
  t.strides[1] = H;
  t.strides[2] = 1;
  BAD(ignis_rmsnorm(&ctx.input, &ctx.weight, 1e-6, &t, NULL), INV, "out.ndim");
  t = ctx.residual;
  t.shape[0] = R - 1;
  BAD(ignis_fused_add_rmsnorm(&ctx.input, &t, &ctx.weight, 1e-6, NULL), INV, "residual.shape[0]");

  /* last-dim stride != 1: unsupported */
  t = ctx.input;
  t.shape[1] = H / 2;
  t.strides[1] = 2;
  {
    ignis_tensor o = ctx.out, w = ctx.weight;
    o.shape[1] = H / 2;
    w.shape[0] = H / 2;
    BAD(ignis_rmsnorm(&t, &w, 1e-6, &o, NULL), UNS, "input.strides[-1]");
    ignis_tensor o2 = o;
    o2.strides[1] = 2;
    ignis_tensor in_half = ctx.input;
    in_half.shape[1] = H / 2;
    BAD(ignis_rmsnorm(&in_half, &w, 1e-6, &o2, NULL), UNS, "out.strides[-1]");
    ignis_tensor r = ctx.residual;
    r.shape[1] = H / 2;
    r.strides[1] = 2;
    BAD(ignis_fused_add_rmsnorm(&in_half, &r, &w, 1e-6, NULL), UNS, "residual.strides[-1]");
  }

  /* ndim 1 and 4 */
  t = ctx.input;
  t.ndim = 1;
  t.shape[0] = H;
  t.strides[0] = 1;
  BAD(ignis_rmsnorm(&t, &ctx.weight, 1e-6, &ctx.out, NULL), INV, "input.ndim");
  BAD(ignis_fused_add_rmsnorm(&t, &ctx.residual, &ctx.weight, 1e-6, NULL), INV, "input.ndim");
  t = ctx.input;
  t.ndim = 4;
  t.shape[0] = 1;
  t.shape[1] = 1;
  t.shape[2] = R;
  t.shape[3] = H;
  t.strides[0] = R * H;
  t.strides[1] = R * H;
  t.strides[2] = H;
  t.strides[3] = 1;
  BAD(ignis_rmsnorm(&t, &ctx.weight, 1e-6, &ctx.out, NULL), INV, "input.ndim");
  BAD(ignis_layernorm(&t, &ctx.weight_f32, &ctx.bias, 1e-6, &ctx.out, NULL), INV, "input.ndim");

  /* NULL tensors */
  BAD(ignis_rmsnorm(NULL, &ctx.weight, 1e-6, &ctx.out, NULL), INV, "input is NULL");
  BAD(ignis_rmsnorm(&ctx.input, NULL, 1e-6, &ctx.out, NULL), INV, "weight is NULL");
  BAD(ignis_rmsnorm(&ctx.input, &ctx.weight, 1e-6, NULL, NULL), INV, "out is NULL");
  BAD(ignis_fused_add_rmsnorm(&ctx.input, NULL, &ctx.weight, 1e-6, NULL), INV, "residual is NULL");
  BAD(ignis_gemma_fused_add_rmsnorm(NULL, &ctx.residual, &ctx.weight, 1e-6, NULL), INV, "input is NULL");
  BAD(ignis_layernorm(&ctx.input, &ctx.weight_f32, NULL, 1e-6, &ctx.out, NULL), INV, "beta is NULL");
  BAD(ignis_layernorm(&ctx.input, NULL, &ctx.bias, 1e-6, &ctx.out, NULL), INV, "gamma is NULL");
  t = ctx.input;
  t.data = NULL;
  BAD(ignis_rmsnorm(&t, &ctx.weight, 1e-6, &ctx.out, NULL), INV, "input.data");
  t = ctx.input;
  t.data = (char *)t.data + 1; /* not aligned to 2-byte elements */
  BAD(ignis_rmsnorm(&t, &ctx.weight, 1e-6, &ctx.out, NULL), INV, "input.data");

  /* eps */
  BAD(ignis_rmsnorm(&ctx.input, &ctx.weight, -1e-6, &ctx.out, NULL), INV, "eps");
  BAD(ignis_rmsnorm(&ctx.input, &ctx.weight, NAN, &ctx.out, NULL), INV, "eps");
  BAD(ignis_gemma_rmsnorm(&ctx.input, &ctx.weight, INFINITY, &ctx.out, NULL), INV, "eps");
  BAD(ignis_fused_add_rmsnorm(&ctx.input, &ctx.residual, &ctx.weight, NAN, NULL), INV, "eps");
  BAD(ignis_layernorm(&ctx.input, &ctx.weight_f32, &ctx.bias, -1.0, &ctx.out, NULL), INV, "eps");

  /* out overlapping input without being the same view */
  t = ctx.input;
  t.data = (char *)t.data + 2 * ctx.in_b.elem_size;
  BAD(ignis_rmsnorm(&ctx.input, &ctx.weight, 1e-6, &t, NULL), INV, "out overlaps input");
  t = ctx.input;
  t.strides[0] = H + 2; /* same start, different row stride */
  BAD(ignis_gemma_rmsnorm(&ctx.input, &ctx.weight, 1e-6, &t, NULL), INV, "out overlaps input");
  t = ctx.input;
  t.data = (char *)t.data + H * ctx.in_b.elem_size; /* shifted by one row */
  BAD(ignis_layernorm(&ctx.input, &ctx.weight_f32, &ctx.bias, 1e-6, &t, NULL), INV, "out overlaps input");

  /* residual overlapping input, including the very same view */
  t = ctx.input;
  t.data = (char *)t.data + H * ctx.in_b.elem_size;
  BAD(ignis_fused_add_rmsnorm(&ctx.input, &t, &ctx.weight, 1e-6, NULL), INV, "residual overlaps input");
  t = ctx.input;
  BAD(ignis_gemma_fused_add_rmsnorm(&ctx.input, &t, &ctx.weight, 1e-6, NULL), INV, "residual overlaps input");

  h_buf_free(&ctx.in_b);
  h_buf_free(&ctx.out_b);
  h_buf_free(&ctx.res_b);
  h_buf_free(&ctx.w_b);
  h_buf_free(&ctx.wf_b);
  h_buf_free(&ctx.b_b);
}

int main(void) {
  h_init("test_norm");
  for (int b = 0; b < h_backend_count(); ++b) {
    h_backend backend = h_backend_at(b);
    test_correctness(backend);
    test_empty(backend);
    test_bad_inputs(backend);
  }
  return h_finish();
}
