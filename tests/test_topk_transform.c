/* Tests of the fused top-k transforms (include/ignis/topk.h) on every backend, against a reference
 * written here from the header's rules: each row's window clamped into the row, the k largest
 * scores found by sorting (NaN lowest, -0 below +0, ties by index in the tie_break's direction),
 * the selected local indices in ascending order, then the page-table or offset transform, -1
 * padding.
 *
 * Cases: both transforms, dtypes f32/bf16/f16, row lengths 1 to 70000, k 1 to 2048 (above and
 * below the window lengths), windows full, partial, shorter than k, empty and out of range (negative
 * or too-long starts and lengths, which the backends clamp); scores normal, with many ties, all
 * equal, and with NaN, +-Inf and +-0; tie_break NONE, SMALL, LARGE; page sizes 1, 4 and 64 with
 * row_to_batch (some rows outside the table), page_table_row_starts (some slots outside it) and
 * out_raw_indices; input, page-table and output rows strided. Outputs are poisoned first: every
 * element of the [rows, k] views must be written, the gaps between their rows must keep their
 * bytes, and no input may change.
 *
 * Bad inputs: each returns the documented status, the message names the parameter, and no buffer
 * changes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

typedef enum transform { PAGE_TABLE, RAGGED } transform;
typedef enum scores { NORMAL, TIES, EQUAL, SPECIAL } scores;
static const char *const score_names[] = {"normal", "ties", "equal", "special"};
static const char *const tie_names[] = {"none", "small", "large"};

typedef struct tcase {
  transform kind;
  ignis_dtype dtype;
  int64_t rows, max_len, k, page_size;
  ignis_topk_tie_break tie_break;
  scores values;
  int starts;    /* row_starts given */
  int batches;   /* PAGE_TABLE: row_to_batch given */
  int pt_starts; /* PAGE_TABLE: page_table_row_starts given */
  int raw;       /* PAGE_TABLE: out_raw_indices given */
  int full_rows; /* every window the whole row */
} tcase;

/* ---- reference ------------------------------------------------------------------------------ */
typedef struct entry {
  double value;
  int64_t index;
} entry;

static int prefer_large_ties;

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

/* Largest rank first; among equal ranks the preferred index first. */
static int entry_order(const void *pa, const void *pb) {
  const entry *a = pa, *b = pb;
  const int c = rank_cmp(a->value, b->value);
  if (c)
    return -c;
  if (a->index == b->index)
    return 0;
  return (a->index < b->index) != prefer_large_ties ? -1 : 1;
}

static int int64_ascending(const void *pa, const void *pb) {
  const int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
  return a < b ? -1 : a > b;
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* The selected local indices of a window of n scores (ascending); returns how many. */
static int64_t ref_select(const double *x, int64_t n, int64_t k, int prefer_large, entry *scratch,
                          int64_t *picked) {
  if (n <= k) {
    for (int64_t j = 0; j < n; ++j)
      picked[j] = j;
    return n;
  }
  for (int64_t j = 0; j < n; ++j) {
    scratch[j].value = x[j];
    scratch[j].index = j;
  }
  prefer_large_ties = prefer_large;
  qsort(scratch, (size_t)n, sizeof(entry), entry_order);
  for (int64_t j = 0; j < k; ++j)
    picked[j] = scratch[j].index;
  qsort(picked, (size_t)k, sizeof(int64_t), int64_ascending);
  return k;
}

/* ---- one case ----------------------------------------------------------------------------------- */
static double make_score(h_rng *rng, scores values, int64_t i) {
  switch (values) {
  case TIES:
    return i % 2 ? (double)h_rng_int(rng, -3, 3) : h_rng_normal(rng);
  case EQUAL:
    return 1.5;
  case SPECIAL: {
    static const double special[] = {NAN, -INFINITY, INFINITY, -0.0, 0.0, 2.0, -2.0};
    return i % 3 ? special[h_rng_int(rng, 0, 6)] : h_rng_normal(rng);
  }
  default:
    return h_rng_normal(rng);
  }
}

/* A window of row r: full, partial, shorter than k, empty, or out of range (clamped). */
static void make_window(h_rng *rng, const tcase *tc, int64_t r, int32_t *start, int32_t *len) {
  const int64_t n = tc->max_len;
  int64_t s = 0, l = n;
  if (!tc->full_rows) {
    switch (r % 6) {
    case 1:
      s = h_rng_int(rng, 0, n);
      l = h_rng_int(rng, 0, n - s);
      break;
    case 2:
      s = h_rng_int(rng, 0, n);
      l = h_rng_int(rng, 0, tc->k < n - s ? tc->k : n - s);
      break;
    case 3:
      s = h_rng_int(rng, -5, -1);
      l = n + h_rng_int(rng, 1, 9);
      break;
    case 4:
      s = n + h_rng_int(rng, 0, 3);
      l = h_rng_int(rng, -2, 4);
      break;
    case 5:
      s = h_rng_int(rng, 0, n / 4);
      l = n - s - h_rng_int(rng, 0, n / 8);
      break;
    default:
      break;
    }
  }
  *start = (int32_t)(tc->starts ? s : 0);
  *len = (int32_t)l;
}

static void run_case(h_backend backend, const tcase *tc, uint64_t seed) {
  const int64_t rows = tc->rows, n = tc->max_len, k = tc->k, ps = tc->page_size;
  const int paged = tc->kind == PAGE_TABLE;
  h_case("%s on %s: rows=%lld max_len=%lld k=%lld dtype=%s scores=%s tie_break=%s page_size=%lld "
         "starts=%d row_to_batch=%d pt_starts=%d raw=%d",
         paged ? "top_k_page_table_transform" : "top_k_ragged_transform", h_backend_name(backend),
         (long long)rows, (long long)n, (long long)k, ignis_dtype_name(tc->dtype), score_names[tc->values],
         tie_names[tc->tie_break], (long long)ps, tc->starts, tc->batches, tc->pt_starts, tc->raw);
  h_rng rng = h_rng_make(seed);
  const int64_t in_stride = n + 3, out_stride = k + 2;
  const int64_t batch = tc->batches ? 3 : rows, width = (n + ps - 1) / ps + 2, pt_stride = width + 1;
  h_buf in = h_buf_alloc(backend, tc->dtype, rows * in_stride + 1);
  h_buf lengths = h_buf_alloc(backend, IGNIS_I32, rows), starts = h_buf_alloc(backend, IGNIS_I32, rows);
  h_buf aux = h_buf_alloc(backend, IGNIS_I32, rows), pt_starts = h_buf_alloc(backend, IGNIS_I32, rows);
  h_buf table = h_buf_alloc(backend, IGNIS_I32, batch * pt_stride);
  h_buf out = h_buf_alloc(backend, IGNIS_I32, rows * out_stride),
        raw = h_buf_alloc(backend, IGNIS_I32, rows * out_stride);
  for (int64_t i = 0; i < rows * in_stride + 1; ++i)
    h_set(&in, i, make_score(&rng, tc->values, i));
  for (int64_t r = 0; r < rows; ++r) {
    int32_t s, l;
    make_window(&rng, tc, r, &s, &l);
    h_set(&starts, r, s);
    h_set(&lengths, r, l);
    if (paged) /* row_to_batch: mostly valid, some rows outside [0, batch) */
      h_set(&aux, r, r % 7 == 6 ? (r % 2 ? -1 : (double)batch) : (double)h_rng_int(&rng, 0, batch - 1));
    else
      h_set(&aux, r, (double)h_rng_int(&rng, -1000, 100000));
    h_set(&pt_starts, r, r % 5 == 4 ? (double)h_rng_int(&rng, -2, width) : (double)h_rng_int(&rng, 0, 2));
  }
  for (int64_t i = 0; i < batch * pt_stride; ++i)
    h_set(&table, i, (double)h_rng_int(&rng, 0, 1000000));
  h_buf_poison(&out);
  h_buf_poison(&raw);
  h_buf *bufs[] = {&in, &lengths, &starts, &aux, &pt_starts, &table, &out, &raw};
  for (int b = 0; b < 8; ++b)
    h_buf_upload(bufs[b]);

  int64_t ishape[2] = {rows, n}, istrides[2] = {in_stride, 1}, oshape[2] = {rows, k},
          ostrides[2] = {out_stride, 1};
  int64_t tshape[2] = {batch, width}, tstrides[2] = {pt_stride, 1};
  const ignis_tensor input = h_view(&in, 1, 2, ishape, istrides);
  const ignis_tensor t_len = h_view(&lengths, 0, 1, &rows, NULL),
                     t_start = h_view(&starts, 0, 1, &rows, NULL);
  const ignis_tensor t_aux = h_view(&aux, 0, 1, &rows, NULL), t_pts = h_view(&pt_starts, 0, 1, &rows, NULL);
  const ignis_tensor t_table = h_view(&table, 0, 2, tshape, tstrides);
  ignis_tensor t_out = h_view(&out, 0, 2, oshape, ostrides), t_raw = h_view(&raw, 0, 2, oshape, ostrides);
  const ignis_tensor *row_starts = tc->starts ? &t_start : NULL;
  if (paged)
    CHECK_STATUS(ignis_top_k_page_table_transform(&input, &t_table, &t_len, k, tc->batches ? &t_aux : NULL,
                                                  row_starts, tc->pt_starts ? &t_pts : NULL, ps,
                                                  tc->tie_break, &t_out, tc->raw ? &t_raw : NULL, NULL),
                 IGNIS_OK);
  else
    CHECK_STATUS(
        ignis_top_k_ragged_transform(&input, &t_aux, &t_len, k, row_starts, tc->tie_break, &t_out, NULL),
        IGNIS_OK);
  h_buf_download(&out);
  h_buf_download(&raw);
  for (int b = 0; b < 6; ++b)
    CHECKF(h_buf_untouched(bufs[b]), "input buffer %d changed", b);

  double *x = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
  entry *scratch = malloc(sizeof(entry) * (size_t)(n > 0 ? n : 1));
  int64_t *picked = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  int64_t bad = 0;
  for (int64_t r = 0; r < rows && bad < 4; ++r) {
    const int64_t start = tc->starts ? clamp64((int64_t)h_get(&starts, r), 0, n) : 0;
    const int64_t len = clamp64((int64_t)h_get(&lengths, r), 0, n - start);
    for (int64_t j = 0; j < len; ++j)
      x[j] = h_get(&in, 1 + r * in_stride + start + j);
    const int64_t picks = ref_select(x, len, k, tc->tie_break == IGNIS_TOPK_TIE_BREAK_LARGE, scratch, picked);
    const int64_t b = tc->batches ? (int64_t)h_get(&aux, r) : r;
    const int64_t pt_start = tc->pt_starts           ? (int64_t)h_get(&pt_starts, r)
                             : ps == 1 && tc->starts ? (int64_t)h_get(&starts, r)
                                                     : 0;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = i < picks ? picked[i] : -1;
      int64_t want = -1;
      if (j >= 0 && !paged) {
        want = j + (int64_t)h_get(&aux, r);
      } else if (j >= 0 && b >= 0 && b < batch) {
        const int64_t slot = pt_start + j / ps;
        if (slot >= 0 && slot < width)
          want = (int64_t)h_get(&table, b * pt_stride + slot) * ps + j % ps;
      }
      const int64_t got = (int64_t)h_get(&out, r * out_stride + i);
      const int64_t got_raw = (int64_t)h_get(&raw, r * out_stride + i);
      const int raw_ok = !(paged && tc->raw) || got_raw == j;
      if (got != want || !raw_ok) {
        CHECKF(0, "row %lld (window %lld+%lld) slot %lld: out %lld raw %lld, expected %lld raw %lld",
               (long long)r, (long long)start, (long long)len, (long long)i, (long long)got,
               (long long)got_raw, (long long)want, (long long)j);
        if (++bad >= 4)
          break;
      }
    }
    for (int64_t g = k; g < out_stride; ++g)
      CHECKF(h_elem_unchanged(&out, r * out_stride + g) && h_elem_unchanged(&raw, r * out_stride + g),
             "row %lld: the gap after the row was written", (long long)r);
  }
  if (!(paged && tc->raw))
    CHECKF(h_buf_changed(&raw, NULL) == 0, "out_raw_indices was not asked for but was written");
  CHECKF(bad == 0, "outputs differ from the reference");
  free(x);
  free(scratch);
  free(picked);
  for (int b = 0; b < 8; ++b)
    h_buf_free(bufs[b]);
}

static void test_cases(h_backend backend) {
  static const ignis_dtype dtypes[] = {IGNIS_F32, IGNIS_BF16, IGNIS_F16};
  static const struct {
    int64_t rows, max_len, k;
  } shapes[] = {{3, 1, 1},      {6, 9, 4},       {12, 300, 1},    {12, 300, 64},
                {7, 300, 2048}, {12, 4099, 256}, {6, 20000, 2048}};
  uint64_t seed = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s)
    for (int d = 0; d < 3; ++d)
      for (int kind = PAGE_TABLE; kind <= RAGGED; ++kind)
        for (int values = NORMAL; values <= SPECIAL; ++values) {
          tcase tc = {0};
          tc.kind = (transform)kind;
          tc.dtype = dtypes[d];
          tc.rows = shapes[s].rows;
          tc.max_len = shapes[s].max_len;
          tc.k = shapes[s].k;
          tc.values = (scores)values;
          tc.tie_break = (ignis_topk_tie_break)((s + (size_t)values) % 3);
          tc.page_size = 1;
          tc.starts = values != EQUAL;
          tc.full_rows = values == NORMAL && d == 0;
          if (kind == PAGE_TABLE) {
            static const int64_t page_sizes[] = {1, 4, 64};
            tc.page_size = page_sizes[(s + (size_t)d) % 3];
            tc.batches = values % 2;
            tc.pt_starts = tc.page_size > 1 || values == TIES;
            tc.starts = tc.starts && (tc.page_size == 1 || tc.pt_starts);
            tc.raw = values != NORMAL;
          }
          run_case(backend, &tc, seed++);
        }
  /* every tie-break on rows of ties, long rows, and the largest k on the GPU's path for big rows */
  for (int tie = 0; tie < 3; ++tie)
    for (int kind = PAGE_TABLE; kind <= RAGGED; ++kind) {
      tcase tc = {kind == PAGE_TABLE ? PAGE_TABLE : RAGGED,
                  IGNIS_BF16,
                  5,
                  70000,
                  2048,
                  1,
                  (ignis_topk_tie_break)tie,
                  TIES,
                  1,
                  kind == PAGE_TABLE,
                  0,
                  kind == PAGE_TABLE,
                  0};
      run_case(backend, &tc, seed++);
      tc.values = EQUAL;
      tc.max_len = 30000;
      run_case(backend, &tc, seed++);
    }
}

/* Rows of zero length and zero rows. */
static void test_empty(h_backend backend) {
  tcase tc = {RAGGED, IGNIS_F32, 4, 0, 8, 1, IGNIS_TOPK_TIE_BREAK_NONE, NORMAL, 0, 0, 0, 0, 1};
  run_case(backend, &tc, 99);
  tc.kind = PAGE_TABLE;
  run_case(backend, &tc, 100);
  tc.rows = 0;
  tc.max_len = 16;
  run_case(backend, &tc, 101);
}

/* ---- bad inputs ------------------------------------------------------------------------------ */
static void test_bad_inputs(h_backend backend) {
  enum { R = 3, L = 16, K = 4, B = 2 };
  h_case("top-k transform bad inputs on %s", h_backend_name(backend));
  h_buf in = h_buf_alloc(backend, IGNIS_F32, R * L), in_h = h_buf_alloc(backend, IGNIS_I32, R * L);
  h_buf vec = h_buf_alloc(backend, IGNIS_I32, R), vec64 = h_buf_alloc(backend, IGNIS_I64, R);
  h_buf table = h_buf_alloc(backend, IGNIS_I32, R * L), out = h_buf_alloc(backend, IGNIS_I32, R * K);
  h_buf raw = h_buf_alloc(backend, IGNIS_I32, R * K);
  for (int i = 0; i < R * L; ++i)
    h_set(&in, i, (double)i);
  h_buf_poison(&out);
  h_buf_poison(&raw);
  h_buf *bufs[] = {&in, &in_h, &vec, &vec64, &table, &out, &raw};
  for (int b = 0; b < 7; ++b)
    h_buf_upload(bufs[b]);
  int64_t shape[2] = {R, L}, rows = R, oshape[2] = {R, K}, short_rows = R - 1, tshape[2] = {B, L};
  int64_t col_strides[2] = {1, R};
  const ignis_tensor input = h_view(&in, 0, 2, shape, NULL), v = h_view(&vec, 0, 1, &rows, NULL);
  const ignis_tensor t = h_view(&table, 0, 2, shape, NULL), t2 = h_view(&table, 0, 2, tshape, NULL);
  ignis_tensor o = h_view(&out, 0, 2, oshape, NULL), rw = h_view(&raw, 0, 2, oshape, NULL);
  ignis_tensor x;
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
  const ignis_topk_tie_break NONE = IGNIS_TOPK_TIE_BREAK_NONE;
#define BAD(call, status, needle)                                                                            \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    for (int b_ = 0; b_ < 7; ++b_)                                                                           \
      CHECKF(h_buf_untouched(bufs[b_]), "a rejected call changed buffer %d", b_);                            \
  } while (0)
#define PT(in_, table_, len_, k_, r2b_, starts_, pts_, ps_, tie_, out_, raw_)                                \
  ignis_top_k_page_table_transform(in_, table_, len_, k_, r2b_, starts_, pts_, ps_, tie_, out_, raw_, NULL)
#define RG(in_, off_, len_, k_, starts_, tie_, out_)                                                         \
  ignis_top_k_ragged_transform(in_, off_, len_, k_, starts_, tie_, out_, NULL)
  /* input */
  BAD(RG(NULL, &v, &v, K, NULL, NONE, &o), INV, "input is NULL");
  x = h_view(&in_h, 0, 2, shape, NULL);
  BAD(RG(&x, &v, &v, K, NULL, NONE, &o), INV, "input.dtype");
  x = h_view(&in, 0, 1, &rows, NULL);
  BAD(RG(&x, &v, &v, K, NULL, NONE, &o), INV, "input.ndim");
  x = h_view(&in, 0, 2, shape, col_strides);
  BAD(RG(&x, &v, &v, K, NULL, NONE, &o), UNS, "input.strides");
  x = input;
  x.shape[1] = (int64_t)1 << 31;
  x.strides[0] = x.shape[1];
  BAD(RG(&x, &v, &v, K, NULL, NONE, &o), UNS, "input.shape[1]");
  /* scalars */
  BAD(RG(&input, &v, &v, 0, NULL, NONE, &o), INV, "k=0");
  BAD(RG(&input, &v, &v, -2, NULL, NONE, &o), INV, "k=-2");
  BAD(RG(&input, &v, &v, K, NULL, (ignis_topk_tie_break)3, &o), INV, "tie_break=3");
  BAD(PT(&input, &t, &v, K, NULL, NULL, NULL, 3, NONE, &o, &rw), INV, "page_size=3");
  BAD(PT(&input, &t, &v, K, NULL, NULL, NULL, 0, NONE, &o, NULL), INV, "page_size=0");
  BAD(PT(&input, &t, &v, K, NULL, NULL, NULL, (int64_t)1 << 31, NONE, &o, NULL), INV, "page_size=");
  BAD(PT(&input, &t, &v, K, NULL, &v, NULL, 4, NONE, &o, NULL), INV, "page_table_row_starts is NULL");
  /* per-row vectors */
  BAD(RG(&input, &v, NULL, K, NULL, NONE, &o), INV, "lengths is NULL");
  x = h_view(&vec64, 0, 1, &rows, NULL);
  BAD(RG(&input, &v, &x, K, NULL, NONE, &o), INV, "lengths.dtype");
  x = h_view(&vec, 0, 1, &short_rows, NULL);
  BAD(RG(&input, &v, &x, K, NULL, NONE, &o), INV, "lengths.shape[0]");
  BAD(RG(&input, NULL, &v, K, NULL, NONE, &o), INV, "offsets is NULL");
  BAD(RG(&input, &x, &v, K, NULL, NONE, &o), INV, "offsets.shape[0]");
  BAD(RG(&input, &v, &v, K, &x, NONE, &o), INV, "row_starts.shape[0]");
  x = h_view(&vec64, 0, 1, &rows, NULL);
  BAD(RG(&input, &v, &v, K, &x, NONE, &o), INV, "row_starts.dtype");
  x = h_view(&table, 0, 1, &rows, (int64_t[]){2});
  BAD(RG(&input, &v, &v, K, &x, NONE, &o), UNS, "row_starts.strides[0]");
  BAD(PT(&input, &t, &v, K, &x, NULL, NULL, 1, NONE, &o, NULL), UNS, "row_to_batch.strides[0]");
  x = h_view(&vec64, 0, 1, &rows, NULL);
  BAD(PT(&input, &t, &v, K, &x, NULL, NULL, 1, NONE, &o, NULL), INV, "row_to_batch.dtype");
  BAD(PT(&input, &t, &v, K, NULL, NULL, &x, 1, NONE, &o, NULL), INV, "page_table_row_starts.dtype");
  /* page table */
  BAD(PT(&input, NULL, &v, K, NULL, NULL, NULL, 1, NONE, &o, NULL), INV, "src_page_table is NULL");
  x = h_view(&in, 0, 2, shape, NULL);
  BAD(PT(&input, &x, &v, K, NULL, NULL, NULL, 1, NONE, &o, NULL), INV, "src_page_table.dtype");
  BAD(PT(&input, &t2, &v, K, NULL, NULL, NULL, 1, NONE, &o, NULL), INV, "src_page_table.shape[0]");
  x = h_view(&table, 0, 2, (int64_t[]){B, R}, (int64_t[]){1, B});
  BAD(PT(&input, &x, &v, K, &v, NULL, NULL, 1, NONE, &o, NULL), UNS, "src_page_table.strides");
  x = h_view(&table, 0, 1, &rows, NULL);
  BAD(PT(&input, &x, &v, K, NULL, NULL, NULL, 1, NONE, &o, NULL), INV, "src_page_table.ndim");
  /* outputs */
  BAD(RG(&input, &v, &v, K, NULL, NONE, NULL), INV, "out is NULL");
  x = h_view(&out, 0, 2, (int64_t[]){R, K - 1}, NULL);
  BAD(RG(&input, &v, &v, K, NULL, NONE, &x), INV, "out.shape[1]");
  x = h_view(&out, 0, 2, (int64_t[]){R - 1, K}, NULL);
  BAD(RG(&input, &v, &v, K, NULL, NONE, &x), INV, "out.shape[0]");
  x = h_view(&in, 0, 2, oshape, NULL);
  BAD(RG(&input, &v, &v, K, NULL, NONE, &x), INV, "out.dtype");
  x = h_view(&out, 0, 2, oshape, (int64_t[]){1, R});
  BAD(RG(&input, &v, &v, K, NULL, NONE, &x), UNS, "out.strides");
  x = h_view(&raw, 0, 2, (int64_t[]){R, K + 1}, NULL);
  BAD(PT(&input, &t, &v, K, NULL, NULL, NULL, 1, NONE, &o, &x), INV, "out_raw_indices.shape[1]");
  BAD(PT(&input, &t, &v, K, NULL, NULL, NULL, 1, NONE, &o, &o), INV, "out_raw_indices");
  x = h_view(&table, 0, 2, oshape, NULL);
  BAD(PT(&input, &t, &v, K, NULL, NULL, NULL, 1, NONE, &x, NULL), INV, "src_page_table");
  x = h_view(&table, 0, 2, oshape, NULL);
  BAD(PT(&input, &t, &v, K, NULL, NULL, NULL, 1, NONE, &o, &x), INV, "src_page_table");
  ignis_tensor l2 = h_view(&out, 0, 1, &rows, NULL);
  BAD(RG(&input, &v, &l2, K, NULL, NONE, &o), INV, "lengths");
#undef BAD
#undef PT
#undef RG
  for (int b = 0; b < 7; ++b)
    h_buf_free(bufs[b]);
}

int main(void) {
  h_init("test_topk_transform");
  const int backends = h_backend_count();
  for (int b = 0; b < backends; ++b) {
    const h_backend backend = h_backend_at(b);
    test_bad_inputs(backend);
    test_empty(backend);
    test_cases(backend);
  }
  return h_finish();
}
