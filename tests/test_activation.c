/* Tests of the gated activations (include/ignis/activation.h): silu_and_mul, gelu_and_mul and
 * gelu_tanh_and_mul on every backend, against an fp64 reference written here from the header's
 * formulas: out[..., h] = act(input[..., h]) * input[..., H + h].
 *
 * Cases: H in {1, 7, 8, 4095, 4096, 4097}, 1-D [2H], 2-D [rows, 2H] and 3-D [2, rows, 2H] with rows
 * 1, 3, 17, and 2-D with 257 rows at H 4096 (over 2^20 outputs: the CUDA backend's large launch
 * shape), dtypes f16/bf16/f32, and layouts: contiguous; padded, misaligned row strides (input and
 * output padded differently); 3-D with permuted leading strides; vector-aligned padding. Gate
 * values are mostly N(0, 2.5^2) with some extremes (+-30, +-8, 0) to reach the tails of exp/erf/tanh.
 * Outputs are poisoned before each call; every element of the output view must be written, the
 * padding around it must keep its sentinel and the input must not change.
 *
 * Tolerance per element: rtol(dtype) * |ref| plus 0.01 * rtol * (|a| + 1) * |b|, the second term
 * covering the cancellation in 1 + erf(a/sqrt 2) and 1 + tanh(.) for negative a, where an f32
 * kernel's absolute error is a few f32 ulps of |a| * |b| while the result itself is tiny, plus the
 * dtype's smallest subnormal (an f16 result below 2^-14 is stored with absolute spacing 2^-24).
 *
 * Bad inputs: each returns the documented status, the message names the parameter, and no
 * buffer changes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

typedef enum act_op { ACT_SILU, ACT_GELU, ACT_GELU_TANH, ACT_COUNT } act_op;

static const char *const act_names[ACT_COUNT] = {"silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"};

static const ignis_dtype float_dtypes[3] = {IGNIS_F16, IGNIS_BF16, IGNIS_F32};

static double reference_act(act_op op, double a) {
  switch (op) {
  case ACT_SILU:
    return a / (1.0 + exp(-a));
  case ACT_GELU:
    return 0.5 * a * (1.0 + erf(a / sqrt(2.0)));
  default: {
    double k = sqrt(2.0 / 3.14159265358979323846);
    return 0.5 * a * (1.0 + tanh(k * (a + 0.044715 * a * a * a)));
  }
  }
}

static ignis_status call_op(act_op op, const ignis_tensor *input, ignis_tensor *out) {
  switch (op) {
  case ACT_SILU:
    return ignis_silu_and_mul(input, out, NULL);
  case ACT_GELU:
    return ignis_gelu_and_mul(input, out, NULL);
  default:
    return ignis_gelu_tanh_and_mul(input, out, NULL);
  }
}

/* ---- layouts ------------------------------------------------------------------------------ */
typedef enum layout_kind {
  LAYOUT_CONTIGUOUS,
  LAYOUT_PADDED,
  LAYOUT_PERMUTED,
  LAYOUT_ALIGNED_PAD
} layout_kind;

typedef struct view_spec {
  int ndim;
  int64_t offset;
  int64_t shape[3];
  int64_t strides[3];
  int64_t extent;
} view_spec;

/* width = elements per row; 1-D: [width]; 2-D: [inner, width]; 3-D: [outer, inner, width]. */
static view_spec make_view(layout_kind kind, int ndim, int64_t outer, int64_t inner, int64_t width,
                           int64_t pad) {
  view_spec v;
  memset(&v, 0, sizeof v);
  v.ndim = ndim;
  int64_t row = width;
  if (kind == LAYOUT_PADDED || kind == LAYOUT_PERMUTED) {
    row = width + pad;
    v.offset = 1;
  } else if (kind == LAYOUT_ALIGNED_PAD) {
    row = (width + 7) / 8 * 8 + 16;
    v.offset = 8;
  }
  if (ndim == 1) {
    v.shape[0] = width;
    v.strides[0] = 1;
  } else if (ndim == 2) {
    v.shape[0] = inner;
    v.shape[1] = width;
    v.strides[0] = row;
    v.strides[1] = 1;
  } else {
    v.shape[0] = outer;
    v.shape[1] = inner;
    v.shape[2] = width;
    v.strides[2] = 1;
    if (kind == LAYOUT_PERMUTED) {
      v.strides[0] = row;
      v.strides[1] = outer * row + 1;
    } else {
      v.strides[1] = row;
      v.strides[0] = kind == LAYOUT_CONTIGUOUS ? inner * row : inner * row + 3;
    }
  }
  v.extent = h_view_extent(v.offset, ndim, v.shape, v.strides) + 5;
  return v;
}

static int64_t view_at(const view_spec *v, int64_t o, int64_t i, int64_t h) {
  if (v->ndim == 1)
    return v->offset + h;
  if (v->ndim == 2)
    return v->offset + i * v->strides[0] + h;
  return v->offset + o * v->strides[0] + i * v->strides[1] + h;
}

/* ---- one correctness case ------------------------------------------------------------------ */
static void run_case(h_backend backend, act_op op, ignis_dtype dtype, int ndim, int64_t inner, int64_t hidden,
                     layout_kind in_layout, layout_kind out_layout, h_rng *rng) {
  int64_t outer = ndim == 3 ? 2 : 1;
  if (ndim == 1)
    inner = 1;
  h_case("%s on %s: dtype=%s %d-D rows=%lldx%lld H=%lld layouts in=%d out=%d", act_names[op],
         h_backend_name(backend), ignis_dtype_name(dtype), ndim, (long long)outer, (long long)inner,
         (long long)hidden, in_layout, out_layout);
  view_spec in_v = make_view(in_layout, ndim, outer, inner, 2 * hidden, 3);
  view_spec out_v = make_view(out_layout, ndim, outer, inner, hidden, 5);
  h_buf in_b = h_buf_alloc(backend, dtype, in_v.extent);
  h_buf out_b = h_buf_alloc(backend, dtype, out_v.extent);
  h_buf_poison(&in_b);
  h_buf_poison(&out_b);
  static const double extremes[] = {30.0, -30.0, 8.0, -8.0, 0.0, -5.0};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      for (int64_t h = 0; h < hidden; ++h) {
        double a = h < 6 && hidden > 8 ? extremes[h] : 2.5 * h_rng_normal(rng);
        h_set(&in_b, view_at(&in_v, o, i, h), a);
        h_set(&in_b, view_at(&in_v, o, i, hidden + h), h_rng_normal(rng));
      }
  h_buf_upload(&in_b);
  h_buf_upload(&out_b);
  ignis_tensor input = h_view(&in_b, in_v.offset, ndim, in_v.shape, in_v.strides);
  ignis_tensor out = h_view(&out_b, out_v.offset, ndim, out_v.shape, out_v.strides);
  CHECK_STATUS(call_op(op, &input, &out), IGNIS_OK);
  h_buf_download(&in_b);
  h_buf_download(&out_b);

  h_tol tol = h_tol_for(dtype, 1.0);
  h_cmp cmp;
  h_cmp_init(&cmp);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      for (int64_t h = 0; h < hidden; ++h) {
        double a = h_get(&in_b, view_at(&in_v, o, i, h));
        double b = h_get(&in_b, view_at(&in_v, o, i, hidden + h));
        double ref = reference_act(op, a) * b;
        int64_t at = view_at(&out_v, o, i, h);
        h_cmp_add(&cmp, at, h_get(&out_b, at), ref,
                  tol.rtol * fabs(ref) + 0.01 * tol.rtol * (fabs(a) + 1.0) * fabs(b) +
                      h_dtype_min_subnormal(dtype));
      }
  CHECK_CMP(&cmp, "output matches the fp64 reference");
  unsigned char *mask = calloc((size_t)out_b.count, 1);
  h_view_mark(&out_b, &out, mask);
  CHECKF(h_buf_changed(&out_b, mask) == 0, "%lld elements changed outside the output view",
         (long long)h_buf_changed(&out_b, mask));
  CHECK(h_buf_changed(&in_b, NULL) == 0);
  free(mask);
  h_buf_free(&in_b);
  h_buf_free(&out_b);
}

static void test_correctness(h_backend backend) {
  static const int64_t hiddens[] = {1, 7, 8, 4095, 4096, 4097};
  static const int64_t rows_list[] = {1, 3, 17};
  h_rng rng = h_rng_make(0xAC7 + (uint64_t)backend);
  for (int op = 0; op < ACT_COUNT; ++op)
    for (int d = 0; d < 3; ++d)
      for (size_t hi = 0; hi < sizeof hiddens / sizeof hiddens[0]; ++hi) {
        int64_t hidden = hiddens[hi];
        /* 1-D, contiguous and misaligned */
        run_case(backend, (act_op)op, float_dtypes[d], 1, 1, hidden, LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS,
                 &rng);
        run_case(backend, (act_op)op, float_dtypes[d], 1, 1, hidden, LAYOUT_PADDED, LAYOUT_ALIGNED_PAD, &rng);
        for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ++ri) {
          int64_t rows = rows_list[ri];
          run_case(backend, (act_op)op, float_dtypes[d], 2, rows, hidden, LAYOUT_CONTIGUOUS,
                   LAYOUT_CONTIGUOUS, &rng);
          run_case(backend, (act_op)op, float_dtypes[d], 2, rows, hidden, LAYOUT_PADDED,
                   ri % 2 ? LAYOUT_ALIGNED_PAD : LAYOUT_PADDED, &rng);
          run_case(backend, (act_op)op, float_dtypes[d], 3, rows, hidden, LAYOUT_ALIGNED_PAD, LAYOUT_PERMUTED,
                   &rng);
          run_case(backend, (act_op)op, float_dtypes[d], 3, rows, hidden, LAYOUT_PERMUTED, LAYOUT_CONTIGUOUS,
                   &rng);
        }
      }
  /* Launches of 2^20 outputs or more take the CUDA backend's large launch shape. */
  for (int op = 0; op < ACT_COUNT; ++op)
    for (int d = 0; d < 3; ++d) {
      run_case(backend, (act_op)op, float_dtypes[d], 2, 257, 4096, LAYOUT_CONTIGUOUS, LAYOUT_CONTIGUOUS,
               &rng);
    }
}

/* Zero rows or H = 0: success, nothing written. */
static void test_empty(h_backend backend) {
  h_case("empty inputs on %s", h_backend_name(backend));
  h_buf in_b = h_buf_alloc(backend, IGNIS_F16, 64), out_b = h_buf_alloc(backend, IGNIS_F16, 64);
  h_buf_poison(&out_b);
  h_buf_upload(&in_b);
  h_buf_upload(&out_b);
  int64_t in_shape[2] = {0, 16}, out_shape[2] = {0, 8};
  ignis_tensor input = h_view(&in_b, 0, 2, in_shape, NULL), out = h_view(&out_b, 0, 2, out_shape, NULL);
  CHECK_STATUS(ignis_silu_and_mul(&input, &out, NULL), IGNIS_OK);
  int64_t in_shape2[2] = {4, 0}, out_shape2[2] = {4, 0};
  input = h_view(&in_b, 0, 2, in_shape2, NULL);
  out = h_view(&out_b, 0, 2, out_shape2, NULL);
  CHECK_STATUS(ignis_gelu_and_mul(&input, &out, NULL), IGNIS_OK);
  CHECK(h_buf_untouched(&out_b));
  h_buf_free(&in_b);
  h_buf_free(&out_b);
}

/* ---- bad inputs ----------------------------------------------------------------------------- */
static void test_bad_inputs(h_backend backend) {
  enum { R = 3, H = 32 };
  h_case("activation bad inputs on %s", h_backend_name(backend));
  h_rng rng = h_rng_make(7);
  h_buf in_b = h_buf_alloc(backend, IGNIS_BF16, 2 * R * 2 * H);
  h_buf out_b = h_buf_alloc(backend, IGNIS_BF16, 2 * R * H);
  for (int64_t i = 0; i < in_b.count; ++i)
    h_set(&in_b, i, h_rng_normal(&rng));
  h_buf_poison(&out_b);
  h_buf_upload(&in_b);
  h_buf_upload(&out_b);
  int64_t in_shape[2] = {R, 2 * H}, out_shape[2] = {R, H};
  const ignis_tensor input = h_view(&in_b, 0, 2, in_shape, NULL);
  const ignis_tensor out = h_view(&out_b, 0, 2, out_shape, NULL);
  ignis_tensor i2, o2;
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
#define BAD(call, status, needle)                                                                            \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    CHECKF(h_buf_untouched(&in_b) && h_buf_untouched(&out_b), "a rejected call changed a buffer");           \
  } while (0)

  /* odd last dimension */
  i2 = input;
  i2.shape[1] = 2 * H - 1;
  o2 = out;
  BAD(ignis_silu_and_mul(&i2, &o2, NULL), INV, "input.shape[-1]");
  /* out shape mismatch */
  o2 = out;
  o2.shape[1] = H + 1;
  BAD(ignis_gelu_and_mul(&input, &o2, NULL), INV, "out.shape[-1]");
  o2 = out;
  o2.shape[0] = R - 1;
  BAD(ignis_gelu_tanh_and_mul(&input, &o2, NULL), INV, "out.shape[0]");
  o2 = out;
  o2.ndim = 3;
  o2.shape[0] = 1;
  o2.shape[1] = R;
  o2.shape[2] = H;
  o2.strides[0] = R * H;
  o2.strides[1] = H;
  o2.strides[2] = 1;
  BAD(ignis_silu_and_mul(&input, &o2, NULL), INV, "out.ndim");
  /* overlapping out */
  o2 = out;
  o2.data = (char *)input.data + 2 * in_b.elem_size;
  BAD(ignis_silu_and_mul(&input, &o2, NULL), INV, "out overlaps input");
  o2.data = input.data;
  BAD(ignis_gelu_and_mul(&input, &o2, NULL), INV, "out overlaps input");
  /* dtype mismatch and non-float dtypes */
  o2 = out;
  o2.dtype = IGNIS_F16;
  BAD(ignis_silu_and_mul(&input, &o2, NULL), INV, "out.dtype");
  i2 = input;
  i2.dtype = IGNIS_I32;
  i2.shape[1] = H;
  o2 = out;
  BAD(ignis_silu_and_mul(&i2, &o2, NULL), INV, "input.dtype");
  /* unsupported strides */
  i2 = input;
  i2.shape[1] = H;
  i2.strides[1] = 2;
  o2 = out;
  o2.shape[1] = H / 2;
  BAD(ignis_silu_and_mul(&i2, &o2, NULL), UNS, "input.strides[-1]");
  i2 = input;
  o2 = out;
  o2.shape[1] = H;
  o2.strides[1] = 2;
  o2.strides[0] = 2 * H;
  o2.shape[0] = 1;
  i2.shape[0] = 1;
  BAD(ignis_gelu_tanh_and_mul(&i2, &o2, NULL), UNS, "out.strides[-1]");
  /* ndim 0 and 4, NULL */
  o2 = out;
  i2 = input;
  i2.ndim = 0;
  BAD(ignis_silu_and_mul(&i2, &o2, NULL), INV, "input.ndim");
  i2 = input;
  i2.ndim = 4;
  i2.shape[0] = 1;
  i2.shape[1] = 1;
  i2.shape[2] = R;
  i2.shape[3] = 2 * H;
  i2.strides[0] = R * 2 * H;
  i2.strides[1] = R * 2 * H;
  i2.strides[2] = 2 * H;
  i2.strides[3] = 1;
  BAD(ignis_silu_and_mul(&i2, &o2, NULL), INV, "input.ndim");
  BAD(ignis_silu_and_mul(NULL, &o2, NULL), INV, "input is NULL");
  BAD(ignis_gelu_and_mul(&input, NULL, NULL), INV, "out is NULL");
  o2 = out;
  o2.data = (char *)o2.data + 1;
  BAD(ignis_silu_and_mul(&input, &o2, NULL), INV, "out.data");
#undef BAD
  h_buf_free(&in_b);
  h_buf_free(&out_b);
}

int main(void) {
  h_init("test_activation");
  for (int b = 0; b < h_backend_count(); ++b) {
    h_backend backend = h_backend_at(b);
    test_correctness(backend);
    test_empty(backend);
    test_bad_inputs(backend);
  }
  return h_finish();
}
