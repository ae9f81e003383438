/* Tests of the attention-state merges (include/ignis/merge_state.h): merge_state,
 * merge_state_in_place and merge_states, on every backend, against an fp64 reference written here
 * from the header's formulas: s = log_base(sum base^s_i) and v = sum base^(s_i - s) v_i.
 *
 * Cases: dtypes f16/bf16/f32, both LSE bases, head_dim 1, 7, 64, 128, 130, rows (seq x heads) of
 * several sizes, and three layouts per tensor: contiguous, padded with a misaligned offset
 * (scalar path), and leading dimensions permuted in memory (s tensors: every dimension, so s's
 * last stride is not 1). Each row draws its LSEs from one of: ordinary, large (~500, where
 * base^s overflows f32 without the max subtraction), one state -inf (empty), every state -inf
 * (result v = 0, s = -inf). In place: with and without a mask (masked-out rows unchanged).
 * merge_states: 0, 1, 3 and 5 states. Outputs are poisoned first; everything outside the output
 * views must keep its bytes and inputs must not change. Bad inputs: status, parameter named,
 * nothing written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

static const ignis_dtype float_dtypes[3] = {IGNIS_F16, IGNIS_BF16, IGNIS_F32};

/* ---- layouts -------------------------------------------------------------------------------- */
typedef enum layout_kind { LAYOUT_CONTIGUOUS, LAYOUT_PADDED, LAYOUT_PERMUTED, LAYOUT_COUNT } layout_kind;

typedef struct view_spec {
  int ndim;
  int64_t offset;
  int64_t shape[4];
  int64_t strides[4];
  int64_t extent;
} view_spec;

/* Padded: every dimension but the last padded by 3, offset 1. Permuted: the leading dimensions
 * (all dimensions when !last_contiguous) laid out in reverse order, padded by 8, offset 8. */
static view_spec make_view(layout_kind kind, int ndim, const int64_t *shape, int last_contiguous) {
  view_spec v;
  memset(&v, 0, sizeof v);
  v.ndim = ndim;
  memcpy(v.shape, shape, sizeof(int64_t) * (size_t)ndim);
  int order[4]; /* order[0] is the innermost dimension in memory */
  for (int k = 0; k < ndim; ++k)
    order[k] = ndim - 1 - k;
  int64_t pad = 0;
  if (kind == LAYOUT_PADDED) {
    pad = 3;
    v.offset = 1;
  } else if (kind == LAYOUT_PERMUTED) {
    pad = 8;
    v.offset = 8;
    int lead = last_contiguous ? ndim - 1 : ndim, first = ndim - lead;
    for (int k = 0; k < lead; ++k)
      order[first + k] = k;
  }
  int64_t stride = 1;
  for (int k = 0; k < ndim; ++k) {
    int d = order[k];
    v.strides[d] = stride;
    stride = stride * shape[d] + pad;
  }
  v.extent = h_view_extent(v.offset, ndim, v.shape, v.strides) + 4;
  return v;
}

static int64_t at(const view_spec *v, const int64_t *idx) {
  int64_t off = v->offset;
  for (int d = 0; d < v->ndim; ++d)
    off += idx[d] * v->strides[d];
  return off;
}

typedef struct tbuf {
  view_spec spec;
  h_buf buf;
  ignis_tensor t;
} tbuf;

static tbuf tbuf_make(h_backend backend, ignis_dtype dtype, layout_kind kind, int ndim, const int64_t *shape,
                      int last_contiguous) {
  tbuf b;
  b.spec = make_view(kind, ndim, shape, last_contiguous);
  b.buf = h_buf_alloc(backend, dtype, b.spec.extent);
  b.t = h_view(&b.buf, b.spec.offset, ndim, b.spec.shape, b.spec.strides);
  return b;
}

static int64_t tbuf_changed_outside(tbuf *b) {
  unsigned char *mask = calloc((size_t)b->buf.count, 1);
  h_view_mark(&b->buf, &b->t, mask);
  int64_t changed = h_buf_changed(&b->buf, mask);
  free(mask);
  return changed;
}

/* ---- the fp64 reference ------------------------------------------------------------------------ */
/* Merge n states (LSE s[i] in `base`, values v[i * d_len + k]). */
static void reference_merge(int n, const double *s, const double *v, int64_t d_len, ignis_lse_base base,
                            double *v_out, double *s_out) {
  double ln_base = base == IGNIS_LSE_BASE2 ? log(2.0) : 1.0;
  double max = -INFINITY;
  for (int i = 0; i < n; ++i)
    max = fmax(max, s[i]);
  for (int64_t k = 0; k < d_len; ++k)
    v_out[k] = 0.0;
  if (max == -INFINITY) {
    *s_out = -INFINITY;
    return;
  }
  double sum = 0.0;
  for (int i = 0; i < n; ++i)
    sum += exp((s[i] - max) * ln_base);
  *s_out = max + log(sum) / ln_base;
  for (int i = 0; i < n; ++i) {
    double w = exp((s[i] - *s_out) * ln_base);
    for (int64_t k = 0; k < d_len; ++k)
      v_out[k] += w * v[i * d_len + k];
  }
}

/* LSEs of one row's n states: ordinary, large, one empty, or all empty. */
static void draw_lses(h_rng *rng, int n, double *s) {
  int kind = (int)h_rng_int(rng, 0, 5);
  for (int i = 0; i < n; ++i)
    s[i] = kind == 1 ? 500.0 + h_rng_uniform(rng, -4, 4) : h_rng_uniform(rng, -6, 6);
  if (kind == 2 && n > 0)
    s[h_rng_int(rng, 0, n - 1)] = -INFINITY;
  if (kind == 3)
    for (int i = 0; i < n; ++i)
      s[i] = -INFINITY;
}

typedef enum merge_op { OP_PAIR, OP_IN_PLACE, OP_MANY } merge_op;
static const char *const op_names[] = {"merge_state", "merge_state_in_place", "merge_states"};

typedef struct merge_case {
  merge_op op;
  ignis_dtype dtype;
  ignis_lse_base base;
  int64_t seq, heads, head_dim, states;
  layout_kind layout_in, layout_out;
  int with_s_out, with_mask;
} merge_case;

static void run_case(h_backend backend, const merge_case *c, h_rng *rng) {
  h_case("%s on %s: dtype=%s base=%s seq=%lld heads=%lld head_dim=%lld states=%lld layout=%d/%d%s%s",
         op_names[c->op], h_backend_name(backend), ignis_dtype_name(c->dtype),
         c->base == IGNIS_LSE_BASE2 ? "2" : "e", (long long)c->seq, (long long)c->heads, (long long)c->head_dim,
         (long long)c->states, c->layout_in, c->layout_out, c->with_s_out ? "" : " no s_out",
         c->with_mask ? " mask" : "");
  const int64_t S = c->op == OP_MANY ? c->states : 2, D = c->head_dim;
  int64_t pair_v[3] = {c->seq, c->heads, D}, pair_s[2] = {c->seq, c->heads};
  int64_t many_v[4] = {c->seq, S, c->heads, D}, many_s[3] = {c->seq, S, c->heads};
  /* Inputs: in[0] (v_a / v), in[1] (v_b); sin likewise. Outputs: out, sout. */
  tbuf vin[2], sin_[2], vout, sout, mask;
  int n_in = c->op == OP_PAIR ? 2 : 1;
  if (c->op == OP_MANY) {
    vin[0] = tbuf_make(backend, c->dtype, c->layout_in, 4, many_v, 1);
    sin_[0] = tbuf_make(backend, IGNIS_F32, c->layout_in, 3, many_s, 0);
  } else {
    for (int i = 0; i < 2; ++i) {
      layout_kind k = i == 0 ? c->layout_in : (layout_kind)((c->layout_in + 1) % LAYOUT_COUNT);
      vin[i] = tbuf_make(backend, c->dtype, k, 3, pair_v, 1);
      sin_[i] = tbuf_make(backend, IGNIS_F32, k, 2, pair_s, 0);
    }
    if (c->op == OP_IN_PLACE)
      n_in = 2;
  }
  vout = tbuf_make(backend, c->dtype, c->layout_out, 3, pair_v, 1);
  sout = tbuf_make(backend, IGNIS_F32, c->layout_out, 2, pair_s, 0);
  int64_t mask_shape = c->seq;
  mask = tbuf_make(backend, IGNIS_U8, c->layout_out == LAYOUT_CONTIGUOUS ? LAYOUT_CONTIGUOUS : LAYOUT_PADDED, 1,
                   &mask_shape, 0);
  if (c->layout_out != LAYOUT_CONTIGUOUS) { /* a strided mask */
    h_buf_free(&mask.buf);
    mask.spec.strides[0] = 3;
    mask.spec.extent = h_view_extent(mask.spec.offset, 1, mask.spec.shape, mask.spec.strides) + 2;
    mask.buf = h_buf_alloc(backend, IGNIS_U8, mask.spec.extent);
    mask.t = h_view(&mask.buf, mask.spec.offset, 1, mask.spec.shape, mask.spec.strides);
  }
  for (int i = 0; i < n_in; ++i) {
    h_buf_poison(&vin[i].buf);
    h_buf_poison(&sin_[i].buf);
  }
  h_buf_poison(&vout.buf);
  h_buf_poison(&sout.buf);

  double *s_row = malloc(sizeof(double) * (size_t)(S + 1));
  double *v_rows = malloc(sizeof(double) * (size_t)((S + 1) * (D + 1)));
  double *ref_v = malloc(sizeof(double) * (size_t)(D + 1));
  int64_t rows = c->seq * c->heads;
  double *ref_all_v = malloc(sizeof(double) * (size_t)(rows * D + 1));
  double *ref_all_s = malloc(sizeof(double) * (size_t)(rows + 1));
  unsigned char *row_mask = malloc((size_t)(c->seq + 1));
  for (int64_t q = 0; q < c->seq; ++q) {
    row_mask[q] = c->with_mask ? (unsigned char)h_rng_int(rng, 0, 1) : 1;
    if (c->with_mask)
      h_set(&mask.buf, at(&mask.spec, &q), row_mask[q] ? (double)h_rng_int(rng, 1, 255) : 0.0);
  }
  for (int64_t q = 0; q < c->seq; ++q)
    for (int64_t h = 0; h < c->heads; ++h) {
      draw_lses(rng, (int)S, s_row);
      for (int64_t i = 0; i < S; ++i) {
        tbuf *vb = c->op == OP_MANY ? &vin[0] : &vin[i];
        tbuf *sb = c->op == OP_MANY ? &sin_[0] : &sin_[i];
        int64_t sidx_many[3] = {q, i, h}, sidx_pair[2] = {q, h};
        int64_t sat = at(&sb->spec, c->op == OP_MANY ? sidx_many : sidx_pair);
        h_set(&sb->buf, sat, s_row[i]);
        s_row[i] = h_get(&sb->buf, sat);
        for (int64_t k = 0; k < D; ++k) {
          int64_t vidx_many[4] = {q, i, h, k}, vidx_pair[3] = {q, h, k};
          int64_t vat = at(&vb->spec, c->op == OP_MANY ? vidx_many : vidx_pair);
          h_set(&vb->buf, vat, h_rng_normal(rng));
          v_rows[i * D + k] = h_get(&vb->buf, vat);
        }
      }
      double s_ref;
      int64_t r = q * c->heads + h;
      reference_merge((int)S, s_row, v_rows, D, c->base, ref_all_v + r * D, &s_ref);
      if (c->op == OP_IN_PLACE && !row_mask[q]) { /* unchanged */
        for (int64_t k = 0; k < D; ++k)
          ref_all_v[r * D + k] = v_rows[k];
        s_ref = s_row[0];
      }
      ref_all_s[r] = s_ref;
    }
  for (int i = 0; i < n_in; ++i) {
    h_buf_upload(&vin[i].buf);
    h_buf_upload(&sin_[i].buf);
  }
  h_buf_upload(&vout.buf);
  h_buf_upload(&sout.buf);
  h_buf_upload(&mask.buf);

  ignis_status status;
  if (c->op == OP_PAIR)
    status = ignis_merge_state(&vin[0].t, &sin_[0].t, &vin[1].t, &sin_[1].t, c->base, &vout.t,
                               c->with_s_out ? &sout.t : NULL, NULL);
  else if (c->op == OP_IN_PLACE)
    status = ignis_merge_state_in_place(&vin[0].t, &sin_[0].t, &vin[1].t, &sin_[1].t,
                                        c->with_mask ? &mask.t : NULL, c->base, NULL);
  else
    status = ignis_merge_states(&vin[0].t, &sin_[0].t, c->base, &vout.t, c->with_s_out ? &sout.t : NULL, NULL);
  CHECK_STATUS(status, IGNIS_OK);

  for (int i = 0; i < n_in; ++i) {
    h_buf_download(&vin[i].buf);
    h_buf_download(&sin_[i].buf);
  }
  h_buf_download(&vout.buf);
  h_buf_download(&sout.buf);
  h_buf_download(&mask.buf);
  tbuf *vres = c->op == OP_IN_PLACE ? &vin[0] : &vout;
  tbuf *sres = c->op == OP_IN_PLACE ? &sin_[0] : &sout;
  int check_s = c->op == OP_IN_PLACE || c->with_s_out;
  h_cmp cmp_v, cmp_s;
  h_cmp_init(&cmp_v);
  h_cmp_init(&cmp_s);
  h_tol v_tol = h_tol_for(c->dtype, 3.0);
  h_tol s_tol = {1e-5, 1e-5};
  for (int64_t q = 0; q < c->seq; ++q)
    for (int64_t h = 0; h < c->heads; ++h) {
      int64_t r = q * c->heads + h, sidx[2] = {q, h};
      for (int64_t k = 0; k < D; ++k) {
        int64_t vidx[3] = {q, h, k}, vat = at(&vres->spec, vidx);
        h_cmp_add_tol(&cmp_v, vat, h_get(&vres->buf, vat), ref_all_v[r * D + k], v_tol);
      }
      if (check_s) {
        int64_t sat = at(&sres->spec, sidx);
        h_cmp_add_tol(&cmp_s, sat, h_get(&sres->buf, sat), ref_all_s[r], s_tol);
      }
    }
  CHECK_CMP(&cmp_v, "merged v matches the fp64 reference");
  if (check_s)
    CHECK_CMP(&cmp_s, "merged s matches the fp64 reference");
  if (c->op == OP_IN_PLACE) {
    CHECK(tbuf_changed_outside(&vin[0]) == 0 && tbuf_changed_outside(&sin_[0]) == 0);
    CHECK(h_buf_changed(&vin[1].buf, NULL) == 0 && h_buf_changed(&sin_[1].buf, NULL) == 0);
  } else {
    for (int i = 0; i < n_in; ++i)
      CHECK(h_buf_changed(&vin[i].buf, NULL) == 0 && h_buf_changed(&sin_[i].buf, NULL) == 0);
    CHECKF(tbuf_changed_outside(&vout) == 0, "v_out written outside its view");
    if (c->with_s_out)
      CHECKF(tbuf_changed_outside(&sout) == 0, "s_out written outside its view");
    else
      CHECKF(h_buf_changed(&sout.buf, NULL) == 0, "s_out buffer written although s_out was NULL");
  }
  CHECK(h_buf_changed(&mask.buf, NULL) == 0);

  free(s_row);
  free(v_rows);
  free(ref_v);
  free(ref_all_v);
  free(ref_all_s);
  free(row_mask);
  for (int i = 0; i < (c->op == OP_MANY ? 1 : 2); ++i) {
    h_buf_free(&vin[i].buf);
    h_buf_free(&sin_[i].buf);
  }
  h_buf_free(&vout.buf);
  h_buf_free(&sout.buf);
  h_buf_free(&mask.buf);
}

static void test_correctness(h_backend backend) {
  static const int64_t head_dims[] = {1, 7, 64, 128, 130};
  static const int64_t shapes[][2] = {{1, 1}, {7, 3}, {33, 4}};
  static const int64_t state_counts[] = {0, 1, 3, 5};
  h_rng rng = h_rng_make(0x6d657267 + (uint64_t)backend);
  int variant = 0;
  for (int op = 0; op < 3; ++op)
    for (int d = 0; d < 3; ++d)
      for (size_t hd = 0; hd < sizeof head_dims / sizeof head_dims[0]; ++hd)
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; ++sh, ++variant) {
          merge_case c;
          memset(&c, 0, sizeof c);
          c.op = (merge_op)op;
          c.dtype = float_dtypes[d];
          c.base = variant % 2 ? IGNIS_LSE_NATURAL : IGNIS_LSE_BASE2;
          c.seq = shapes[sh][0];
          c.heads = shapes[sh][1];
          c.head_dim = head_dims[hd];
          c.states = state_counts[variant % 4];
          c.layout_in = (layout_kind)(variant % LAYOUT_COUNT);
          c.layout_out = (layout_kind)((variant / 3) % LAYOUT_COUNT);
          c.with_s_out = variant % 5 != 0;
          c.with_mask = op == OP_IN_PLACE && variant % 2 == 0;
          run_case(backend, &c, &rng);
        }
}

/* ---- bad inputs --------------------------------------------------------------------------------- */
typedef struct bad_ctx {
  h_buf bufs[8];
  int count;
} bad_ctx;

static int all_untouched(bad_ctx *b) {
  int ok = 1;
  for (int i = 0; i < b->count; ++i)
    ok &= h_buf_untouched(&b->bufs[i]);
  return ok;
}

#define BAD(call, status, needle)                                                                            \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    CHECKF(all_untouched(&ctx), "a rejected call changed a buffer");                                         \
  } while (0)

static void test_bad_inputs(h_backend backend) {
  enum { Q = 3, H = 2, D = 16, S = 3 };
  h_case("merge_state bad inputs on %s", h_backend_name(backend));
  bad_ctx ctx;
  ctx.count = 8;
  int64_t vs[3] = {Q, H, D}, ss[2] = {Q, H}, vm[4] = {Q, S, H, D}, sm[3] = {Q, S, H}, ms = Q;
  ctx.bufs[0] = h_buf_alloc(backend, IGNIS_BF16, Q * H * D);     /* v_a */
  ctx.bufs[1] = h_buf_alloc(backend, IGNIS_F32, Q * H);          /* s_a */
  ctx.bufs[2] = h_buf_alloc(backend, IGNIS_BF16, Q * H * D);     /* v_b */
  ctx.bufs[3] = h_buf_alloc(backend, IGNIS_F32, Q * H);          /* s_b */
  ctx.bufs[4] = h_buf_alloc(backend, IGNIS_BF16, Q * S * H * D); /* v (many) */
  ctx.bufs[5] = h_buf_alloc(backend, IGNIS_F32, Q * S * H);      /* s (many) */
  ctx.bufs[6] = h_buf_alloc(backend, IGNIS_BF16, Q * H * D + Q * H * 2); /* v_out, then s_out as f32 */
  ctx.bufs[7] = h_buf_alloc(backend, IGNIS_U8, Q);
  h_rng rng = h_rng_make(7);
  for (int b = 0; b < 6; ++b)
    for (int64_t i = 0; i < ctx.bufs[b].count; ++i)
      h_set(&ctx.bufs[b], i, h_rng_normal(&rng));
  h_buf_poison(&ctx.bufs[6]);
  for (int b = 0; b < 8; ++b)
    h_buf_upload(&ctx.bufs[b]);
  ignis_tensor v_a = h_view(&ctx.bufs[0], 0, 3, vs, NULL), s_a = h_view(&ctx.bufs[1], 0, 2, ss, NULL);
  ignis_tensor v_b = h_view(&ctx.bufs[2], 0, 3, vs, NULL), s_b = h_view(&ctx.bufs[3], 0, 2, ss, NULL);
  ignis_tensor v = h_view(&ctx.bufs[4], 0, 4, vm, NULL), s = h_view(&ctx.bufs[5], 0, 3, sm, NULL);
  ignis_tensor v_out = h_view(&ctx.bufs[6], 0, 3, vs, NULL);
  ignis_tensor s_out = h_view(&ctx.bufs[6], Q * H * D, 2, ss, NULL);
  s_out.dtype = IGNIS_F32;
  s_out.data = (char *)ctx.bufs[6].data + Q * H * D * 2;
  ignis_tensor mask = h_view(&ctx.bufs[7], 0, 1, &ms, NULL);
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
  const ignis_lse_base B2 = IGNIS_LSE_BASE2;
  ignis_tensor t;

  /* dtype mismatches */
  t = v_b;
  t.dtype = IGNIS_F16;
  BAD(ignis_merge_state(&v_a, &s_a, &t, &s_b, B2, &v_out, &s_out, NULL), INV, "v_b.dtype");
  t = v_out;
  t.dtype = IGNIS_F16;
  BAD(ignis_merge_state(&v_a, &s_a, &v_b, &s_b, B2, &t, &s_out, NULL), INV, "v_out.dtype");
  t = s_a;
  t.dtype = IGNIS_F16;
  BAD(ignis_merge_state(&v_a, &t, &v_b, &s_b, B2, &v_out, &s_out, NULL), INV, "s_a.dtype");
  t = v_a;
  t.dtype = IGNIS_I32;
  t.shape[2] = D / 2;
  BAD(ignis_merge_state_in_place(&t, &s_a, &v_b, &s_b, NULL, B2, NULL), INV, "v.dtype");
  t = mask;
  t.dtype = IGNIS_I32;
  t.shape[0] = 0;
  BAD(ignis_merge_state_in_place(&v_a, &s_a, &v_b, &s_b, &t, B2, NULL), INV, "mask.dtype");
  t = s;
  t.dtype = IGNIS_BF16;
  BAD(ignis_merge_states(&v, &t, B2, &v_out, &s_out, NULL), INV, "s.dtype");

  /* shape mismatches */
  t = v_b;
  t.shape[1] = H - 1;
  BAD(ignis_merge_state(&v_a, &s_a, &t, &s_b, B2, &v_out, &s_out, NULL), INV, "v_b.shape[1]");
  t = v_b;
  t.shape[2] = D - 1;
  BAD(ignis_merge_state_in_place(&v_a, &s_a, &t, &s_b, NULL, B2, NULL), INV, "v_other.shape[2]");
  t = s_b;
  t.shape[0] = Q - 1;
  BAD(ignis_merge_state(&v_a, &s_a, &v_b, &t, B2, &v_out, &s_out, NULL), INV, "s_b.shape[0]");
  t = s_out;
  t.shape[1] = H + 1;
  BAD(ignis_merge_state(&v_a, &s_a, &v_b, &s_b, B2, &v_out, &t, NULL), INV, "s_out.shape[1]");
  t = mask;
  t.shape[0] = Q - 1;
  BAD(ignis_merge_state_in_place(&v_a, &s_a, &v_b, &s_b, &t, B2, NULL), INV, "mask.shape[0]");
  t = v_out;
  t.shape[1] = H - 1;
  BAD(ignis_merge_states(&v, &s, B2, &t, &s_out, NULL), INV, "v_out.shape[1]");
  t = s;
  t.shape[1] = S - 1;
  BAD(ignis_merge_states(&v, &t, B2, &v_out, &s_out, NULL), INV, "s.shape[1]");
  BAD(ignis_merge_states(&v_a, &s_a, B2, &v_out, &s_out, NULL), INV, "v.ndim");

  /* strides, base, NULL, overlap */
  t = v_a;
  t.shape[2] = D / 2;
  t.strides[2] = 2;
  {
    ignis_tensor vb = v_b, vo = v_out;
    vb.shape[2] = vo.shape[2] = D / 2;
    BAD(ignis_merge_state(&t, &s_a, &vb, &s_b, B2, &vo, &s_out, NULL), UNS, "v_a.strides[-1]");
  }
  BAD(ignis_merge_state(&v_a, &s_a, &v_b, &s_b, (ignis_lse_base)7, &v_out, &s_out, NULL), INV, "base");
  BAD(ignis_merge_state(&v_a, NULL, &v_b, &s_b, B2, &v_out, &s_out, NULL), INV, "s_a is NULL");
  BAD(ignis_merge_states(&v, &s, B2, NULL, &s_out, NULL), INV, "v_out is NULL");
  t = v_a;
  BAD(ignis_merge_state(&v_a, &s_a, &v_b, &s_b, B2, &t, &s_out, NULL), INV, "v_out overlaps v_a");
  t = v_b;
  t.data = s_a.data; /* v_other's bytes overlap s */
  t.dtype = IGNIS_BF16;
  t.shape[0] = 1;
  t.shape[2] = 2;
  {
    ignis_tensor vv = v_a, sv = s_a;
    vv.shape[0] = 1;
    vv.shape[2] = 2;
    sv.shape[0] = 1;
    ignis_tensor so = s_b;
    so.shape[0] = 1;
    BAD(ignis_merge_state_in_place(&vv, &sv, &t, &so, NULL, B2, NULL), INV, "s overlaps v_other");
  }
  t = s_out;
  t.data = v_out.data;
  BAD(ignis_merge_states(&v, &s, B2, &v_out, &t, NULL), INV, "s_out overlaps v_out");

  for (int b = 0; b < 8; ++b)
    h_buf_free(&ctx.bufs[b]);
}

int main(void) {
  h_init("test_merge_state");
  for (int b = 0; b < h_backend_count(); ++b) {
    h_backend backend = h_backend_at(b);
    test_correctness(backend);
    test_bad_inputs(backend);
  }
  return h_finish();
}
