/* Tests of rotary position embedding (include/ignis/rope.h) on every backend, against an fp64
 * reference written here from the header: pair i of a head (NeoX: (i, i + rotary_dim/2); GPT-J:
 * (2i, 2i + 1)) at position p is rotated by p * f_i, with f_i = theta^(-2i/rotary_dim) / scale, or
 * the Llama 3.1 blend of the two; dimensions past rotary_dim are copied (out of place) or left
 * alone (in place).
 *
 * Forms: apply_rope_pos_ids (i32 and i64 positions up to 8191), apply_rope (indptr + offsets,
 * batches with empty requests, an all-empty batch), apply_rope_with_cos_sin_cache (cache built
 * here in fp64 and stored as f32, 2-D and 3-D q/k, NeoX and GPT-J, a cache with a padded row
 * stride). Configurations: plain (theta 1e4, scale 1), linear scaling (theta 1e6, scale 2) and
 * Llama 3.1 (scale 8, theta 5e5, low 1, high 4, old 8192). head_dim 64/128/256/80 with full and
 * partial rotary dims (64 of 128, 32 of 80, 32 of 64, 128 of 256), GQA (q heads != k heads),
 * f16/bf16/f32, in place and out of place, and layouts: contiguous; q and k as views into one
 * fused qkv buffer (token stride > heads * head_dim, v part as sentinel); padded, misaligned head
 * strides; heads-major ([heads, tokens, dim] in memory). Outputs are poisoned before each call;
 * every element of q_out/k_out must be written (rotated or copied), nothing outside them may
 * change, and out-of-place inputs must not change.
 *
 * Tolerance per rotated element, with r = |(x, y)| the pair's magnitude:
 *     r * (rtol(dtype) + angle_tol) + smallest subnormal of the dtype.
 * The kernel computes f_i and the angle p * f_i in f32 (the header says arithmetic is f32): f_i
 * carries a few f32 ulps of relative error, plus ln(theta) * 2i/rotary_dim ulps from rounding the
 * exponent, and the product p * f_i is rounded again. So the angle is off by about
 *     angle_tol = 2^-24 * (p * f_i * (6 + ln(theta) * 2i/rotary_dim) + 8)
 * radians (~ p * 4e-7 for the fastest pairs: at p = 8192 about 3e-3 rad), which dominates the f32
 * tolerance for large positions. The cos/sin-cache form reads the angle's cos and sin exactly, so
 * its angle_tol is just 8 * 2^-24.
 *
 * Bad inputs: each returns the documented status, the message names the parameter, and no
 * buffer changes. Host-only checks (indptr monotonic, indptr[B] == nnz, position ranges) run on
 * the CPU backend; on CUDA the test checks the documented GPU behaviour for out-of-range cache
 * positions instead (the token is copied unrotated). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"

static const ignis_dtype float_dtypes[3] = {IGNIS_F16, IGNIS_BF16, IGNIS_F32};

/* ---- q/k layouts ---------------------------------------------------------------------------- */
typedef enum qk_layout { QK_CONTIG, QK_FUSED, QK_HEAD_PADDED, QK_HEADS_MAJOR, QK_LAYOUT_COUNT } qk_layout;

static const char *const layout_names[QK_LAYOUT_COUNT] = {"contiguous", "fused-qkv", "head-padded",
                                                          "heads-major"};

typedef struct tensor_spec {
  int64_t offset;
  int64_t strides[3];
} tensor_spec;

/* q [nnz, hq, d] and k [nnz, hk, d] placed in one buffer. */
typedef struct qk_spec {
  tensor_spec q, k;
  int64_t extent;
} qk_spec;

static int64_t spec_extent(const tensor_spec *s, int64_t nnz, int64_t heads, int64_t d) {
  int64_t shape[3] = {nnz, heads, d};
  return h_view_extent(s->offset, 3, shape, s->strides);
}

static void set_spec(tensor_spec *s, int64_t offset, int64_t s0, int64_t s1) {
  s->offset = offset;
  s->strides[0] = s0;
  s->strides[1] = s1;
  s->strides[2] = 1;
}

static qk_spec make_qk(qk_layout kind, int64_t nnz, int64_t hq, int64_t hk, int64_t d) {
  qk_spec s;
  memset(&s, 0, sizeof s);
  switch (kind) {
  case QK_CONTIG:
    set_spec(&s.q, 0, hq * d, d);
    set_spec(&s.k, nnz * hq * d, hk * d, d);
    break;
  case QK_FUSED: { /* [nnz, q | k | v | pad] */
    int64_t row = (hq + 2 * hk) * d + 8;
    set_spec(&s.q, 0, row, d);
    set_spec(&s.k, hq * d, row, d);
    break;
  }
  case QK_HEAD_PADDED:
    set_spec(&s.q, 1, hq * (d + 3) + 2, d + 3);
    set_spec(&s.k, spec_extent(&s.q, nnz, hq, d) + 1, hk * (d + 5) + 1, d + 5);
    break;
  default: /* heads-major: memory [heads, nnz, d] */
    set_spec(&s.q, 0, d, nnz * d);
    set_spec(&s.k, nnz * hq * d + 3, d + 2, nnz * (d + 2) + 1);
    break;
  }
  int64_t eq = spec_extent(&s.q, nnz, hq, d), ek = spec_extent(&s.k, nnz, hk, d);
  s.extent = (eq > ek ? eq : ek) + 7;
  if (kind == QK_FUSED)
    s.extent = nnz * ((hq + 2 * hk) * d + 8) + 7;
  return s;
}

static int64_t spec_at(const tensor_spec *s, int64_t t, int64_t h, int64_t i) {
  return s->offset + t * s->strides[0] + h * s->strides[1] + i;
}

/* 3-D view, or (two_d) the 2-D view [nnz, heads * d] of a layout whose head stride is d. */
static ignis_tensor spec_view(const h_buf *buf, const tensor_spec *s, int64_t nnz, int64_t heads, int64_t d,
                              int two_d) {
  if (two_d) {
    int64_t shape[2] = {nnz, heads * d}, strides[2] = {s->strides[0], 1};
    return h_view(buf, s->offset, 2, shape, strides);
  }
  int64_t shape[3] = {nnz, heads, d};
  return h_view(buf, s->offset, 3, shape, s->strides);
}

/* ---- cases -------------------------------------------------------------------------------- */
typedef enum pos_form { FORM_POS_IDS, FORM_INDPTR, FORM_CACHE } pos_form;

static const char *const form_names[3] = {"apply_rope_pos_ids", "apply_rope",
                                          "apply_rope_with_cos_sin_cache"};

typedef enum freq_config { CONFIG_PLAIN, CONFIG_LINEAR, CONFIG_LLAMA31 } freq_config;

typedef struct rope_case {
  pos_form form;
  ignis_dtype dtype;
  ignis_dtype index_dtype;
  int64_t nnz, hq, hk, head_dim, rotary_dim;
  int rotary_dim_zero; /* pass config.rotary_dim = 0 (means head_dim) */
  int interleave;
  freq_config config;
  qk_layout in_layout, out_layout;
  int in_place;
  int two_d;         /* cache form: q and k as 2-D [nnz, heads * head_size] */
  int64_t cache_pad; /* cache form: extra elements per cache row */
  int64_t max_position;
  int batch; /* indptr form */
  int64_t batch_sizes[8];
} rope_case;

static void fill_config(const rope_case *c, ignis_rope_config *config) {
  ignis_rope_config init = IGNIS_ROPE_CONFIG_INIT;
  *config = init;
  config->rotary_dim = c->rotary_dim_zero ? 0 : (int32_t)c->rotary_dim;
  config->interleave = c->interleave;
  if (c->config == CONFIG_LINEAR) {
    config->rope_theta = 1e6;
    config->rope_scale = 2.0;
  } else if (c->config == CONFIG_LLAMA31) {
    config->llama31 = 1;
    config->rope_scale = 8.0;
    config->rope_theta = 5e5;
    config->low_freq_factor = 1.0;
    config->high_freq_factor = 4.0;
    config->old_context_len = 8192.0;
  }
}

/* f_i in fp64 from the header's definition. */
static double reference_freq(const ignis_rope_config *config, int64_t rotary_dim, int64_t i) {
  double base = pow(config->rope_theta, -2.0 * (double)i / (double)rotary_dim);
  if (!config->llama31)
    return base / config->rope_scale;
  double smooth =
      (config->old_context_len * base / (2.0 * 3.14159265358979323846) - config->low_freq_factor) /
      (config->high_freq_factor - config->low_freq_factor);
  smooth = smooth < 0.0 ? 0.0 : smooth > 1.0 ? 1.0 : smooth;
  return (1.0 - smooth) * base / config->rope_scale + smooth * base;
}

static double cache_theta(void) {
  return 1e4;
}

static void run_case(h_backend backend, const rope_case *c, h_rng *rng) {
  h_case("%s on %s: dtype=%s index=%s nnz=%lld hq=%lld hk=%lld head_dim=%lld rotary=%lld%s %s config=%d "
         "layout %s -> %s%s%s",
         form_names[c->form], h_backend_name(backend), ignis_dtype_name(c->dtype),
         ignis_dtype_name(c->index_dtype), (long long)c->nnz, (long long)c->hq, (long long)c->hk,
         (long long)c->head_dim, (long long)c->rotary_dim, c->rotary_dim_zero ? "(as 0)" : "",
         c->interleave ? "gptj" : "neox", c->config, layout_names[c->in_layout],
         c->in_place ? "in place" : layout_names[c->out_layout], c->two_d ? " 2-D" : "",
         c->cache_pad ? " padded-cache" : "");
  const int64_t nnz = c->nnz, hq = c->hq, hk = c->hk, d = c->head_dim, rot = c->rotary_dim, half = rot / 2;
  qk_spec in_s = make_qk(c->in_layout, nnz, hq, hk, d);
  qk_spec out_s = c->in_place ? in_s : make_qk(c->out_layout, nnz, hq, hk, d);
  h_buf in_b = h_buf_alloc(backend, c->dtype, in_s.extent);
  h_buf out_b = h_buf_alloc(backend, c->dtype, c->in_place ? 1 : out_s.extent);
  h_buf_poison(&in_b);
  h_buf_poison(&out_b);
  for (int64_t t = 0; t < nnz; ++t) {
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < d; ++i)
        h_set(&in_b, spec_at(&in_s.q, t, h, i), h_rng_normal(rng));
    for (int64_t h = 0; h < hk; ++h)
      for (int64_t i = 0; i < d; ++i)
        h_set(&in_b, spec_at(&in_s.k, t, h, i), h_rng_normal(rng));
  }

  /* positions */
  int64_t *pos = malloc(sizeof(int64_t) * (size_t)(nnz > 0 ? nnz : 1));
  int64_t max_position = c->form == FORM_CACHE ? c->max_position : 8192;
  h_buf pos_b = h_buf_alloc(backend, c->index_dtype, nnz > 0 ? nnz : 1);
  h_buf indptr_b = h_buf_alloc(backend, c->index_dtype, c->batch + 1);
  h_buf offsets_b = h_buf_alloc(backend, c->index_dtype, c->batch > 0 ? c->batch : 1);
  if (c->form == FORM_INDPTR) {
    int64_t start = 0;
    h_set(&indptr_b, 0, 0);
    for (int b = 0; b < c->batch; ++b) {
      int64_t offset = h_rng_int(rng, 0, 8000);
      if (b == 0)
        offset = 8192 - c->batch_sizes[0] > 0 ? 8192 - c->batch_sizes[0] : 0; /* reach 8191 */
      h_set(&offsets_b, b, (double)offset);
      for (int64_t j = 0; j < c->batch_sizes[b]; ++j)
        pos[start + j] = offset + j;
      start += c->batch_sizes[b];
      h_set(&indptr_b, b + 1, (double)start);
    }
  } else {
    for (int64_t t = 0; t < nnz; ++t) {
      pos[t] = h_rng_int(rng, 0, max_position - 1);
      if (t == 0)
        pos[t] = max_position - 1;
      if (t == 1)
        pos[t] = 0;
      h_set(&pos_b, t, (double)pos[t]);
    }
  }

  /* cos/sin cache: row p holds cos(p f_i) for i < half, then sin(p f_i) */
  int64_t cache_row = rot + c->cache_pad;
  h_buf cache_b = h_buf_alloc(backend, IGNIS_F32, c->form == FORM_CACHE ? max_position * cache_row : 1);
  if (c->form == FORM_CACHE) {
    h_buf_poison(&cache_b);
    for (int64_t i = 0; i < half; ++i) {
      double f = pow(cache_theta(), -2.0 * (double)i / (double)rot);
      for (int64_t p = 0; p < max_position; ++p) {
        h_set(&cache_b, p * cache_row + i, cos((double)p * f));
        h_set(&cache_b, p * cache_row + half + i, sin((double)p * f));
      }
    }
  }
  h_buf_upload(&in_b);
  h_buf_upload(&out_b);
  h_buf_upload(&pos_b);
  h_buf_upload(&indptr_b);
  h_buf_upload(&offsets_b);
  h_buf_upload(&cache_b);

  ignis_rope_config config;
  fill_config(c, &config);
  h_buf *qo_buf = c->in_place ? &in_b : &out_b;
  ignis_tensor q = spec_view(&in_b, &in_s.q, nnz, hq, d, c->two_d);
  ignis_tensor k = spec_view(&in_b, &in_s.k, nnz, hk, d, c->two_d);
  ignis_tensor q_out = spec_view(qo_buf, &out_s.q, nnz, hq, d, c->two_d);
  ignis_tensor k_out = spec_view(qo_buf, &out_s.k, nnz, hk, d, c->two_d);
  int64_t batch = c->batch, batch1 = c->batch + 1;
  ignis_tensor pos_t = h_view(&pos_b, 0, 1, &nnz, NULL);
  ignis_tensor indptr_t = h_view(&indptr_b, 0, 1, &batch1, NULL);
  ignis_tensor offsets_t = h_view(&offsets_b, 0, 1, &batch, NULL);
  int64_t cache_shape[2] = {max_position, rot}, cache_strides[2] = {cache_row, 1};
  ignis_tensor cache_t = h_view(&cache_b, 0, 2, cache_shape, cache_strides);
  ignis_status status;
  if (c->form == FORM_POS_IDS)
    status = ignis_apply_rope_pos_ids(&q, &k, &pos_t, &config, &q_out, &k_out, NULL);
  else if (c->form == FORM_INDPTR)
    status = ignis_apply_rope(&q, &k, &indptr_t, &offsets_t, &config, &q_out, &k_out, NULL);
  else
    status = ignis_apply_rope_with_cos_sin_cache(&pos_t, &q, &k, d, &cache_t, !c->interleave, &q_out, &k_out,
                                                 NULL);
  /* Fused-qkv views interleave in memory without sharing elements: they must be accepted. */
  int ok;
    ok = CHECKF(status == IGNIS_OK, "returned %s: %s", ignis_status_string(status), ignis_last_error());
  h_buf_download(&in_b);
  h_buf_download(&out_b);
  h_buf_download(&pos_b);
  h_buf_download(&indptr_b);
  h_buf_download(&offsets_b);
  h_buf_download(&cache_b);
  if (!ok) {
    CHECKF(h_buf_changed(&in_b, NULL) == 0 && h_buf_changed(&out_b, NULL) == 0,
           "a rejected call changed its buffers");
    goto done;
  }

  {
    h_tol tol = h_tol_for(c->dtype, 1.0);
    double sub = h_dtype_min_subnormal(c->dtype);
    double *freq = malloc(sizeof(double) * (size_t)(half > 0 ? half : 1));
    for (int64_t i = 0; i < half; ++i)
      freq[i] = reference_freq(&config, rot, i);
    h_cmp cmp_rot, cmp_copy;
    h_cmp_init(&cmp_rot);
    h_cmp_init(&cmp_copy);
    int64_t tail_changed = 0;
    for (int64_t t = 0; t < nnz; ++t) {
      double p = (double)pos[t];
      for (int which = 0; which < 2; ++which) {
        const tensor_spec *is = which ? &in_s.k : &in_s.q, *os = which ? &out_s.k : &out_s.q;
        int64_t heads = which ? hk : hq;
        for (int64_t h = 0; h < heads; ++h) {
          for (int64_t i = 0; i < half; ++i) {
            int64_t xi = c->interleave ? 2 * i : i, yi = c->interleave ? 2 * i + 1 : i + half;
            double x = h_get_snapshot(&in_b, spec_at(is, t, h, xi));
            double y = h_get_snapshot(&in_b, spec_at(is, t, h, yi));
            double cs, sn, angle_tol;
            if (c->form == FORM_CACHE) {
              cs = h_get(&cache_b, pos[t] * cache_row + i);
              sn = h_get(&cache_b, pos[t] * cache_row + half + i);
              angle_tol = 8.0 * ldexp(1.0, -24);
            } else {
              double e = 2.0 * (double)i / (double)rot;
              cs = cos(p * freq[i]);
              sn = sin(p * freq[i]);
              angle_tol = ldexp(1.0, -24) * (p * freq[i] * (6.0 + log(config.rope_theta) * e) + 8.0);
            }
            double r = sqrt(x * x + y * y);
            double tolerance = r * (tol.rtol + angle_tol) + sub;
            int64_t ox = spec_at(os, t, h, xi), oy = spec_at(os, t, h, yi);
            h_cmp_add(&cmp_rot, ox, h_get(qo_buf, ox), x * cs - y * sn, tolerance);
            h_cmp_add(&cmp_rot, oy, h_get(qo_buf, oy), x * sn + y * cs, tolerance);
          }
          for (int64_t i = rot; i < d; ++i) {
            int64_t at = spec_at(os, t, h, i);
            if (c->in_place)
              tail_changed += !h_elem_unchanged(&in_b, at);
            else
              h_cmp_add(&cmp_copy, at, h_get(&out_b, at), h_get_snapshot(&in_b, spec_at(is, t, h, i)), 0.0);
          }
        }
      }
    }
    CHECK_CMP(&cmp_rot, "rotated dims match the fp64 reference");
    if (rot < d) {
      if (c->in_place)
        CHECKF(tail_changed == 0, "%lld dims past rotary_dim changed in place", (long long)tail_changed);
      else
        CHECK_CMP(&cmp_copy, "dims past rotary_dim are copied exactly");
    }
    free(freq);

    /* Nothing outside q_out and k_out changes; out-of-place inputs do not change. */
    unsigned char *mask = calloc((size_t)qo_buf->count, 1);
    ignis_tensor q3 = spec_view(qo_buf, &out_s.q, nnz, hq, d, 0),
                 k3 = spec_view(qo_buf, &out_s.k, nnz, hk, d, 0);
    h_view_mark(qo_buf, &q3, mask);
    h_view_mark(qo_buf, &k3, mask);
    CHECKF(h_buf_changed(qo_buf, mask) == 0, "%lld elements changed outside q_out/k_out",
           (long long)h_buf_changed(qo_buf, mask));
    free(mask);
    if (!c->in_place)
      CHECK(h_buf_changed(&in_b, NULL) == 0);
    CHECK(h_buf_changed(&pos_b, NULL) == 0 && h_buf_changed(&indptr_b, NULL) == 0 &&
          h_buf_changed(&offsets_b, NULL) == 0 && h_buf_changed(&cache_b, NULL) == 0);
  }
done:
  free(pos);
  h_buf_free(&in_b);
  h_buf_free(&out_b);
  h_buf_free(&pos_b);
  h_buf_free(&indptr_b);
  h_buf_free(&offsets_b);
  h_buf_free(&cache_b);
}

/* ---- case lists ----------------------------------------------------------------------------- */
typedef struct dims {
  int64_t head_dim, rotary_dim;
} dims;

static const dims dims_list[] = {{64, 64},   {64, 32},   {128, 128}, {128, 64},
                                 {256, 256}, {256, 128}, {80, 80},   {80, 32}};
#define DIMS_COUNT ((int)(sizeof dims_list / sizeof dims_list[0]))

static const int64_t head_pairs[][2] = {{4, 1}, {3, 3}, {8, 2}, {2, 1}};
static const int64_t nnz_list[] = {1, 7, 33};

static void test_pos_ids(h_backend backend) {
  h_rng rng = h_rng_make(0x90 + (uint64_t)backend);
  int variant = 0;
  for (int di = 0; di < DIMS_COUNT; ++di)
    for (int dt = 0; dt < 3; ++dt)
      for (int interleave = 0; interleave < 2; ++interleave)
        for (int rep = 0; rep < 2; ++rep, ++variant) {
          rope_case c;
          memset(&c, 0, sizeof c);
          c.form = FORM_POS_IDS;
          c.dtype = float_dtypes[dt];
          c.index_dtype = variant % 2 ? IGNIS_I64 : IGNIS_I32;
          c.head_dim = dims_list[di].head_dim;
          c.rotary_dim = dims_list[di].rotary_dim;
          c.rotary_dim_zero = c.rotary_dim == c.head_dim && variant % 3 == 0;
          c.interleave = interleave;
          c.config = (freq_config)(variant % 3);
          c.hq = head_pairs[variant % 4][0];
          c.hk = head_pairs[variant % 4][1];
          c.nnz = nnz_list[(variant / 2) % 3];
          c.in_layout = (qk_layout)(variant % QK_LAYOUT_COUNT);
          c.out_layout = (qk_layout)((variant / 4 + 1) % QK_LAYOUT_COUNT);
          c.in_place = rep == 1;
          if (c.in_place && c.in_layout == QK_FUSED)
            c.in_layout = QK_HEAD_PADDED; /* the fused-qkv in-place case has its own test */
          run_case(backend, &c, &rng);
        }
}

static void test_indptr(h_backend backend) {
  static const int64_t batches[][6] = {{5, 3, 0, 5, 1, 0}, {1, 17}, {3, 1, 1, 1},
                                       {3, 0, 0, 9},       {1, 0},  {2, 0, 0}};
  h_rng rng = h_rng_make(0x1D + (uint64_t)backend);
  int variant = 0;
  for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; ++bi)
    for (int dt = 0; dt < 3; ++dt)
      for (int rep = 0; rep < 2; ++rep, ++variant) {
        rope_case c;
        memset(&c, 0, sizeof c);
        c.form = FORM_INDPTR;
        c.dtype = float_dtypes[dt];
        c.index_dtype = variant % 2 ? IGNIS_I32 : IGNIS_I64;
        c.batch = (int)batches[bi][0];
        for (int b = 0; b < c.batch; ++b) {
          c.batch_sizes[b] = batches[bi][b + 1];
          c.nnz += c.batch_sizes[b];
        }
        const dims *dm = &dims_list[variant % DIMS_COUNT];
        c.head_dim = dm->head_dim;
        c.rotary_dim = dm->rotary_dim;
        c.interleave = variant % 3 == 1;
        c.config = rep ? CONFIG_LLAMA31 : (freq_config)(variant % 2);
        c.hq = head_pairs[variant % 4][0];
        c.hk = head_pairs[variant % 4][1];
        c.in_layout = (qk_layout)(variant % QK_LAYOUT_COUNT);
        c.out_layout = QK_CONTIG;
        c.in_place = variant % 2 == 0 && c.in_layout != QK_FUSED;
        run_case(backend, &c, &rng);
      }
}

static void test_cache(h_backend backend) {
  static const dims cache_dims[] = {{64, 64}, {128, 128}, {128, 64}, {80, 32}, {256, 256}, {80, 80}};
  h_rng rng = h_rng_make(0xCA + (uint64_t)backend);
  int variant = 0;
  for (size_t di = 0; di < sizeof cache_dims / sizeof cache_dims[0]; ++di)
    for (int dt = 0; dt < 3; ++dt)
      for (int neox = 0; neox < 2; ++neox)
        for (int rep = 0; rep < 2; ++rep, ++variant) {
          rope_case c;
          memset(&c, 0, sizeof c);
          c.form = FORM_CACHE;
          c.dtype = float_dtypes[dt];
          c.index_dtype = variant % 2 ? IGNIS_I64 : IGNIS_I32;
          c.head_dim = cache_dims[di].head_dim;
          c.rotary_dim = cache_dims[di].rotary_dim;
          c.interleave = !neox;
          c.hq = head_pairs[variant % 4][0];
          c.hk = head_pairs[variant % 4][1];
          c.nnz = nnz_list[variant % 3];
          c.max_position = variant % 3 == 0 ? 8192 : 1000;
          c.cache_pad = variant % 4 == 1 ? 6 : 0;
          c.two_d = rep == 0;
          /* 2-D views need a head stride equal to head_size: contiguous or fused layouts */
          c.in_layout =
              c.two_d ? (variant % 4 < 2 ? QK_CONTIG : QK_FUSED) : (qk_layout)(variant % QK_LAYOUT_COUNT);
          c.out_layout = c.two_d ? QK_CONTIG : (qk_layout)((variant + 2) % QK_LAYOUT_COUNT);
          c.in_place = variant % 3 == 2 && c.in_layout != QK_FUSED;
          run_case(backend, &c, &rng);
        }
}

/* q and k as views into one fused qkv buffer, rotated in place (what vLLM and SGLang do). */
static void test_fused_qkv_in_place(h_backend backend) {
  h_rng rng = h_rng_make(0xF5 + (uint64_t)backend);
  for (int form = 0; form < 3; ++form)
    for (int dt = 0; dt < 3; ++dt) {
      rope_case c;
      memset(&c, 0, sizeof c);
      c.form = (pos_form)form;
      c.dtype = float_dtypes[dt];
      c.index_dtype = IGNIS_I64;
      c.nnz = 9;
      c.hq = 4;
      c.hk = 2;
      c.head_dim = 128;
      c.rotary_dim = dt == 2 ? 64 : 128;
      c.config = CONFIG_LLAMA31;
      c.in_layout = QK_FUSED;
      c.in_place = 1;
      c.max_position = 4096;
      c.two_d = form == FORM_CACHE && dt == 0;
      c.batch = 2;
      c.batch_sizes[0] = 4;
      c.batch_sizes[1] = 5;
      run_case(backend, &c, &rng);
    }
}

/* On the GPU an out-of-range cache position leaves its token unrotated (copied). */
static void test_cache_out_of_range_gpu(h_backend backend) {
  if (backend != H_CUDA)
    return;
  enum { NNZ = 4, HQ = 2, HK = 1, D = 64, MAXPOS = 16 };
  h_case("cos_sin_cache out-of-range positions on cuda");
  h_rng rng = h_rng_make(5);
  h_buf q_b = h_buf_alloc(backend, IGNIS_F32, NNZ * HQ * D),
        k_b = h_buf_alloc(backend, IGNIS_F32, NNZ * HK * D);
  h_buf qo_b = h_buf_alloc(backend, IGNIS_F32, NNZ * HQ * D),
        ko_b = h_buf_alloc(backend, IGNIS_F32, NNZ * HK * D);
  h_buf pos_b = h_buf_alloc(backend, IGNIS_I64, NNZ), cache_b = h_buf_alloc(backend, IGNIS_F32, MAXPOS * D);
  for (int64_t i = 0; i < q_b.count; ++i)
    h_set(&q_b, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < k_b.count; ++i)
    h_set(&k_b, i, h_rng_normal(&rng));
  for (int64_t p = 0; p < MAXPOS; ++p)
    for (int64_t i = 0; i < D / 2; ++i) {
      h_set(&cache_b, p * D + i, cos(0.3 * (double)(p + 1)));
      h_set(&cache_b, p * D + D / 2 + i, sin(0.3 * (double)(p + 1)));
    }
  static const int64_t positions[NNZ] = {3, MAXPOS, -1, 0};
  for (int t = 0; t < NNZ; ++t)
    h_set(&pos_b, t, (double)positions[t]);
  h_buf_poison(&qo_b);
  h_buf_poison(&ko_b);
  h_buf_upload(&q_b);
  h_buf_upload(&k_b);
  h_buf_upload(&qo_b);
  h_buf_upload(&ko_b);
  h_buf_upload(&pos_b);
  h_buf_upload(&cache_b);
  int64_t qs[3] = {NNZ, HQ, D}, ks[3] = {NNZ, HK, D}, nnz = NNZ, cs[2] = {MAXPOS, D};
  ignis_tensor q = h_view(&q_b, 0, 3, qs, NULL), k = h_view(&k_b, 0, 3, ks, NULL);
  ignis_tensor qo = h_view(&qo_b, 0, 3, qs, NULL), ko = h_view(&ko_b, 0, 3, ks, NULL);
  ignis_tensor pos = h_view(&pos_b, 0, 1, &nnz, NULL), cache = h_view(&cache_b, 0, 2, cs, NULL);
  CHECK_STATUS(ignis_apply_rope_with_cos_sin_cache(&pos, &q, &k, D, &cache, 1, &qo, &ko, NULL), IGNIS_OK);
  h_buf_download(&qo_b);
  h_buf_download(&ko_b);
  h_cmp cmp;
  h_cmp_init(&cmp);
  for (int t = 0; t < NNZ; ++t) {
    int in_range = positions[t] >= 0 && positions[t] < MAXPOS;
    for (int which = 0; which < 2; ++which) {
      h_buf *in = which ? &k_b : &q_b, *out = which ? &ko_b : &qo_b;
      int heads = which ? HK : HQ;
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < D / 2; ++i) {
          int64_t xi = ((int64_t)t * heads + h) * D + i, yi = xi + D / 2;
          double x = h_get(in, xi), y = h_get(in, yi), cv = 1.0, sv = 0.0;
          if (in_range) {
            cv = h_get(&cache_b, positions[t] * D + i);
            sv = h_get(&cache_b, positions[t] * D + D / 2 + i);
          }
          h_cmp_add(&cmp, xi, h_get(out, xi), x * cv - y * sv, in_range ? 1e-5 : 0.0);
          h_cmp_add(&cmp, yi, h_get(out, yi), x * sv + y * cv, in_range ? 1e-5 : 0.0);
        }
    }
  }
  CHECK_CMP(&cmp, "in-range tokens rotated, out-of-range tokens copied");
  h_buf_free(&q_b);
  h_buf_free(&k_b);
  h_buf_free(&qo_b);
  h_buf_free(&ko_b);
  h_buf_free(&pos_b);
  h_buf_free(&cache_b);
}

/* ---- bad inputs ----------------------------------------------------------------------------- */
enum { BN = 4, BHQ = 2, BHK = 1, BD = 64, BMAXPOS = 16 };

typedef struct bad_ctx {
  h_buf q_b, k_b, qo_b, ko_b, idx32_b, idx64_b, cache_b, big_b, ov_b;
  ignis_tensor q, k, q_out, k_out, pos_ids, indptr, offsets, positions, cache;
  ignis_rope_config config;
} bad_ctx;

static int all_untouched(bad_ctx *b) {
  return h_buf_untouched(&b->q_b) && h_buf_untouched(&b->k_b) && h_buf_untouched(&b->qo_b) &&
         h_buf_untouched(&b->ko_b) && h_buf_untouched(&b->idx32_b) && h_buf_untouched(&b->idx64_b) &&
         h_buf_untouched(&b->cache_b) && h_buf_untouched(&b->big_b) && h_buf_untouched(&b->ov_b);
}

#define BAD(call, status, needle)                                                                            \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    CHECKF(all_untouched(ctx), "a rejected call changed a buffer");                                          \
  } while (0)

/* An i32 index vector: `length` elements of idx32_b from element `at`. */
static ignis_tensor index_vector(bad_ctx *ctx, int64_t at, int64_t length) {
  return h_view(&ctx->idx32_b, at, 1, &length, NULL);
}

static void bad_rope_tensors(bad_ctx *ctx) {
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
  ignis_tensor t, u;
  ignis_rope_config cfg;
#define POS_IDS(q_, k_, p_, c_, qo_, ko_) ignis_apply_rope_pos_ids(q_, k_, p_, c_, qo_, ko_, NULL)

  CHECK_ERROR(POS_IDS(NULL, &ctx->k, &ctx->pos_ids, &ctx->config, &ctx->q_out, &ctx->k_out), INV,
              "ignis_apply_rope_pos_ids");
  BAD(POS_IDS(NULL, &ctx->k, &ctx->pos_ids, &ctx->config, &ctx->q_out, &ctx->k_out), INV, "q is NULL");
  BAD(POS_IDS(&ctx->q, NULL, &ctx->pos_ids, &ctx->config, &ctx->q_out, &ctx->k_out), INV, "k is NULL");
  BAD(POS_IDS(&ctx->q, &ctx->k, NULL, &ctx->config, &ctx->q_out, &ctx->k_out), INV, "pos_ids is NULL");
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &ctx->config, NULL, &ctx->k_out), INV, "q_out is NULL");
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &ctx->config, &ctx->q_out, NULL), INV, "k_out is NULL");

  /* config */
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, NULL, &ctx->q_out, &ctx->k_out), INV, "config is NULL");
  cfg = ctx->config;
  cfg.size = 8;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "config->size");
  cfg = ctx->config;
  cfg.rotary_dim = 63;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "rotary_dim");
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q, &ctx->k), INV, "rotary_dim"); /* in place */
  cfg.rotary_dim = BD + 2;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "rotary_dim");
  cfg.rotary_dim = -2;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "rotary_dim");
  cfg = ctx->config;
  cfg.interleave = 2;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "interleave");
  cfg = ctx->config;
  cfg.rope_scale = 0.0;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "rope_scale");
  cfg = ctx->config;
  cfg.rope_theta = -1.0;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "rope_theta");
  cfg.rope_theta = NAN;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "rope_theta");
  cfg = ctx->config;
  cfg.llama31 = 1;
  cfg.high_freq_factor = cfg.low_freq_factor;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "high_freq_factor");
  cfg = ctx->config;
  cfg.llama31 = 1;
  cfg.old_context_len = 0.0;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &cfg, &ctx->q_out, &ctx->k_out), INV, "old_context_len");

  /* q/k shapes, dtypes, strides */
  t = ctx->k;
  t.shape[2] = BD / 2;
  u = ctx->k_out;
  u.shape[2] = BD / 2;
  BAD(POS_IDS(&ctx->q, &t, &ctx->pos_ids, &ctx->config, &ctx->q_out, &u), INV, "head_dim");
  t = ctx->k;
  t.shape[0] = BN - 1;
  BAD(POS_IDS(&ctx->q, &t, &ctx->pos_ids, &ctx->config, &ctx->q_out, &ctx->k_out), INV, "k.shape[0]");
  t = ctx->q;
  t.ndim = 2;
  t.shape[1] = BHQ * BD;
  t.strides[0] = BHQ * BD;
  t.strides[1] = 1;
  BAD(POS_IDS(&t, &ctx->k, &ctx->pos_ids, &ctx->config, &ctx->q_out, &ctx->k_out), INV, "q.ndim");
  t = ctx->k;
  t.dtype = IGNIS_F16;
  BAD(POS_IDS(&ctx->q, &t, &ctx->pos_ids, &ctx->config, &ctx->q_out, &ctx->k_out), INV, "k.dtype");
  t = ctx->q_out;
  t.dtype = IGNIS_F16;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &ctx->config, &t, &ctx->k_out), INV, "q_out.dtype");
  t = ctx->q;
  t.dtype = IGNIS_I32;
  t.shape[2] = BD / 2;
  BAD(POS_IDS(&t, &ctx->k, &ctx->pos_ids, &ctx->config, &ctx->q_out, &ctx->k_out), INV, "q.dtype");
  t = ctx->q_out;
  t.shape[1] = 1;
  BAD(POS_IDS(&ctx->q, &ctx->k, &ctx->pos_ids, &ctx->config, &t, &ctx->k_out), INV, "q_out.shape[1]");
  t = ctx->q;
  t.shape[2] = BD / 2;
  t.strides[2] = 2;
  u = ctx->q_out;
  u.shape[2] = BD / 2;
  BAD(POS_IDS(&t, &ctx->k, &ctx->pos_ids, &ctx->config, &u, &ctx->k_out), UNS, "q.strides[-1]");
  t = ctx->k_out;
  t.shape[2] = BD / 2;
  t.strides[2] = 2;
  u = ctx->k;
  u.shape[2] = BD / 2;
  {
    ignis_tensor qh = ctx->q, qoh = ctx->q_out;
    qh.shape[2] = BD / 2;
    qoh.shape[2] = BD / 2;
    BAD(POS_IDS(&qh, &u, &ctx->pos_ids, &ctx->config, &qoh, &t), UNS, "k_out.strides[-1]");
  }
  {
    int64_t shape[3] = {1, 1, 520};
    ignis_tensor bq = h_view(&ctx->big_b, 0, 3, shape, NULL), bk = h_view(&ctx->big_b, 520, 3, shape, NULL);
    ignis_tensor bqo = h_view(&ctx->big_b, 1040, 3, shape, NULL),
                 bko = h_view(&ctx->big_b, 1560, 3, shape, NULL);
    ignis_tensor one = index_vector(ctx, 0, 1);
    BAD(POS_IDS(&bq, &bk, &one, &ctx->config, &bqo, &bko), UNS, "head_dim");
  }

  /* overlaps, with every view inside ov_b: q [0, 512), k [512, 768), q_out [1024, 1536),
   * k_out [1536, 1792) are valid; each bad call moves one output onto another tensor */
  {
    int64_t qs[3] = {BN, BHQ, BD}, ks[3] = {BN, BHK, BD};
    ignis_tensor q = h_view(&ctx->ov_b, 0, 3, qs, NULL), k = h_view(&ctx->ov_b, 512, 3, ks, NULL);
    ignis_tensor qo = h_view(&ctx->ov_b, 1024, 3, qs, NULL), ko = h_view(&ctx->ov_b, 1536, 3, ks, NULL);
    ignis_tensor qo_on_k = h_view(&ctx->ov_b, 512, 3, qs, NULL);
    BAD(POS_IDS(&q, &k, &ctx->pos_ids, &ctx->config, &qo_on_k, &ko), INV, "q_out overlaps k");
    ignis_tensor ko_on_q = h_view(&ctx->ov_b, 256, 3, ks, NULL);
    BAD(POS_IDS(&q, &k, &ctx->pos_ids, &ctx->config, &qo, &ko_on_q), INV, "k_out overlaps q");
    ignis_tensor qo_shifted = h_view(&ctx->ov_b, 64, 3, qs, NULL);
    BAD(POS_IDS(&q, &k, &ctx->pos_ids, &ctx->config, &qo_shifted, &ko), INV, "q_out overlaps q");
    ignis_tensor ko_on_qo = h_view(&ctx->ov_b, 1024, 3, ks, NULL);
    BAD(POS_IDS(&q, &k, &ctx->pos_ids, &ctx->config, &qo, &ko_on_qo), INV, "q_out overlaps k_out");
    ignis_tensor k_strided = k;
    k_strided.strides[0] = 2 * BD; /* same data, different token stride: not the same view */
    k_strided.shape[0] = 2;
    ignis_tensor ko_alias = k;
    ko_alias.shape[0] = 2;
    ignis_tensor q2 = q, qo2 = qo;
    q2.shape[0] = 2;
    qo2.shape[0] = 2;
    ignis_tensor pos2 = index_vector(ctx, 0, 2);
    BAD(POS_IDS(&q2, &k_strided, &pos2, &ctx->config, &qo2, &ko_alias), INV, "k_out overlaps k");
  }

  /* pos_ids */
  t = ctx->pos_ids;
  t.shape[0] = BN - 1;
  BAD(POS_IDS(&ctx->q, &ctx->k, &t, &ctx->config, &ctx->q_out, &ctx->k_out), INV, "pos_ids.shape[0]");
  t = ctx->pos_ids;
  t.dtype = IGNIS_F32;
  BAD(POS_IDS(&ctx->q, &ctx->k, &t, &ctx->config, &ctx->q_out, &ctx->k_out), INV, "pos_ids.dtype");
  t = ctx->pos_ids;
  t.strides[0] = 2;
  BAD(POS_IDS(&ctx->q, &ctx->k, &t, &ctx->config, &ctx->q_out, &ctx->k_out), UNS, "pos_ids.strides[0]");
#undef POS_IDS
}

static void bad_rope_positions_host(bad_ctx *ctx) {
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT;
  /* idx32_b layout (i32): [0..3] = {0, 5, 9, 2} valid pos_ids; [4..7] = {1, -1, 3, 2};
   * [8..11] = {0, 1, 1 << 24, 0}; [12..14] = indptr {0, 3, 1}; [15..17] = {0, 1, 3};
   * [18..20] = {1, 2, 4}; [21..22] = offsets {0, 7}; [23..24] = offsets {-1, 0};
   * [25..27] = {0, 1, 4}; [28..31] = positions {0, 16, 1, 2} */
  ignis_tensor neg = index_vector(ctx, 4, BN), big = index_vector(ctx, 8, BN);
  BAD(ignis_apply_rope_pos_ids(&ctx->q, &ctx->k, &neg, &ctx->config, &ctx->q_out, &ctx->k_out, NULL), INV,
      "pos_ids[1]");
  BAD(ignis_apply_rope_pos_ids(&ctx->q, &ctx->k, &big, &ctx->config, &ctx->q_out, &ctx->k_out, NULL), INV,
      "pos_ids[2]");
  ignis_tensor non_monotonic = index_vector(ctx, 12, 3), short_end = index_vector(ctx, 15, 3);
  ignis_tensor bad_start = index_vector(ctx, 18, 3), offsets = index_vector(ctx, 21, 2);
  ignis_tensor neg_offsets = index_vector(ctx, 23, 2), good = index_vector(ctx, 25, 3);
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &non_monotonic, &offsets, &ctx->config, &ctx->q_out, &ctx->k_out,
                       NULL),
      INV, "indptr is not monotonic");
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &short_end, &offsets, &ctx->config, &ctx->q_out, &ctx->k_out, NULL),
      INV, "indptr[2]");
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &bad_start, &offsets, &ctx->config, &ctx->q_out, &ctx->k_out, NULL),
      INV, "indptr[0]");
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &good, &neg_offsets, &ctx->config, &ctx->q_out, &ctx->k_out, NULL),
      INV, "offsets[0]");
  CHECK_STATUS(
      ignis_apply_rope(&ctx->q, &ctx->k, &good, &offsets, &ctx->config, &ctx->q_out, &ctx->k_out, NULL),
      IGNIS_OK);
  h_buf_download(&ctx->qo_b); /* the valid call wrote the outputs: take them as the new snapshot */
  h_buf_download(&ctx->ko_b);
  h_buf_upload(&ctx->qo_b);
  h_buf_upload(&ctx->ko_b);
  ignis_tensor positions = index_vector(ctx, 28, BN);
  BAD(ignis_apply_rope_with_cos_sin_cache(&positions, &ctx->q, &ctx->k, BD, &ctx->cache, 1, &ctx->q_out,
                                          &ctx->k_out, NULL),
      INV, "positions[1]");
  BAD(ignis_apply_rope_with_cos_sin_cache(&neg, &ctx->q, &ctx->k, BD, &ctx->cache, 1, &ctx->q_out,
                                          &ctx->k_out, NULL),
      INV, "positions[1]");
}

static void bad_rope_indptr_and_cache(bad_ctx *ctx) {
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT;
  ignis_tensor t, u;
  /* apply_rope: descriptor errors (checked on every backend) */
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, NULL, &ctx->offsets, &ctx->config, &ctx->q_out, &ctx->k_out, NULL),
      INV, "indptr is NULL");
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &ctx->indptr, NULL, &ctx->config, &ctx->q_out, &ctx->k_out, NULL),
      INV, "offsets is NULL");
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &ctx->indptr, &ctx->offsets, NULL, &ctx->q_out, &ctx->k_out, NULL),
      INV, "config is NULL");
  t = ctx->offsets;
  t.dtype = IGNIS_I64;
  t.data = ctx->idx64_b.data; /* an aligned i64 vector, so only the dtype disagrees */
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &ctx->indptr, &t, &ctx->config, &ctx->q_out, &ctx->k_out, NULL), INV,
      "offsets.dtype");
  t = ctx->offsets;
  t.shape[0] = 1;
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &ctx->indptr, &t, &ctx->config, &ctx->q_out, &ctx->k_out, NULL), INV,
      "offsets.shape[0]");
  t = ctx->indptr;
  t.shape[0] = 0;
  u = ctx->offsets;
  u.shape[0] = 0;
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &t, &u, &ctx->config, &ctx->q_out, &ctx->k_out, NULL), INV,
      "indptr.shape[0]");
  t = ctx->indptr;
  t.dtype = IGNIS_F32;
  BAD(ignis_apply_rope(&ctx->q, &ctx->k, &t, &ctx->offsets, &ctx->config, &ctx->q_out, &ctx->k_out, NULL),
      INV, "indptr.dtype");
  t = ctx->k;
  t.shape[2] = BD / 2;
  u = ctx->k_out;
  u.shape[2] = BD / 2;
  BAD(ignis_apply_rope(&ctx->q, &t, &ctx->indptr, &ctx->offsets, &ctx->config, &ctx->q_out, &u, NULL), INV,
      "head_dim");

  /* cos/sin cache */
#define CACHE(p_, q_, k_, hs_, c_, neox_, qo_, ko_)                                                          \
  ignis_apply_rope_with_cos_sin_cache(p_, q_, k_, hs_, c_, neox_, qo_, ko_, NULL)
  BAD(CACHE(&ctx->positions, &ctx->q, &ctx->k, 0, &ctx->cache, 1, &ctx->q_out, &ctx->k_out), INV,
      "head_size");
  BAD(CACHE(&ctx->positions, &ctx->q, &ctx->k, BD, &ctx->cache, 2, &ctx->q_out, &ctx->k_out), INV, "is_neox");
  BAD(CACHE(NULL, &ctx->q, &ctx->k, BD, &ctx->cache, 1, &ctx->q_out, &ctx->k_out), INV, "positions is NULL");
  BAD(CACHE(&ctx->positions, &ctx->q, &ctx->k, BD, NULL, 1, &ctx->q_out, &ctx->k_out), INV,
      "cos_sin_cache is NULL");
  t = ctx->cache;
  t.dtype = IGNIS_F16;
  BAD(CACHE(&ctx->positions, &ctx->q, &ctx->k, BD, &t, 1, &ctx->q_out, &ctx->k_out), INV,
      "cos_sin_cache.dtype");
  t = ctx->cache;
  t.shape[1] = 63;
  BAD(CACHE(&ctx->positions, &ctx->q, &ctx->k, BD, &t, 1, &ctx->q_out, &ctx->k_out), INV,
      "cos_sin_cache.shape[1]");
  t = ctx->cache;
  t.shape[0] = BMAXPOS / 2;
  t.shape[1] = BD + 2;
  t.strides[0] = BD + 2;
  BAD(CACHE(&ctx->positions, &ctx->q, &ctx->k, BD, &t, 1, &ctx->q_out, &ctx->k_out), INV,
      "cos_sin_cache.shape[1]");
  t = ctx->cache;
  t.ndim = 1;
  t.shape[0] = BMAXPOS * BD;
  t.strides[0] = 1;
  BAD(CACHE(&ctx->positions, &ctx->q, &ctx->k, BD, &t, 1, &ctx->q_out, &ctx->k_out), INV,
      "cos_sin_cache.ndim");
  t = ctx->positions;
  t.shape[0] = BN + 1;
  BAD(CACHE(&t, &ctx->q, &ctx->k, BD, &ctx->cache, 1, &ctx->q_out, &ctx->k_out), INV, "positions.shape[0]");
  t = ctx->positions;
  t.dtype = IGNIS_F32;
  t.shape[0] = BN;
  BAD(CACHE(&t, &ctx->q, &ctx->k, BD, &ctx->cache, 1, &ctx->q_out, &ctx->k_out), INV, "positions.dtype");
  BAD(CACHE(&ctx->positions, &ctx->q, &ctx->k, 48, &ctx->cache, 1, &ctx->q_out, &ctx->k_out), INV,
      "q.shape[2]");
  {
    int64_t shape[2] = {BN, BHQ * BD}, kshape[2] = {BN, BHK * BD};
    ignis_tensor q2 = h_view(&ctx->q_b, 0, 2, shape, NULL), k2 = h_view(&ctx->k_b, 0, 2, kshape, NULL);
    ignis_tensor qo2 = h_view(&ctx->qo_b, 0, 2, shape, NULL), ko2 = h_view(&ctx->ko_b, 0, 2, kshape, NULL);
    BAD(CACHE(&ctx->positions, &q2, &k2, 48, &ctx->cache, 1, &qo2, &ko2), INV, "q.shape[1]");
    ignis_tensor qo_on_k = qo2;
    qo_on_k.data = ctx->k.data;
    qo_on_k.shape[1] = BHK * BD;
    BAD(CACHE(&ctx->positions, &q2, &k2, BD, &ctx->cache, 1, &qo_on_k, &ko2), INV, "q_out.shape[1]");
  }
#undef CACHE
}

static void test_bad_inputs(h_backend backend) {
  h_case("rope bad inputs on %s", h_backend_name(backend));
  bad_ctx ctx_storage, *ctx = &ctx_storage;
  h_rng rng = h_rng_make(31);
  ctx->q_b = h_buf_alloc(backend, IGNIS_BF16, BN * BHQ * BD);
  ctx->k_b = h_buf_alloc(backend, IGNIS_BF16, BN * BHK * BD);
  ctx->qo_b = h_buf_alloc(backend, IGNIS_BF16, BN * BHQ * BD);
  ctx->ko_b = h_buf_alloc(backend, IGNIS_BF16, BN * BHK * BD);
  ctx->idx32_b = h_buf_alloc(backend, IGNIS_I32, 32);
  ctx->idx64_b = h_buf_alloc(backend, IGNIS_I64, 8);
  ctx->cache_b = h_buf_alloc(backend, IGNIS_F32, BMAXPOS * BD);
  ctx->big_b = h_buf_alloc(backend, IGNIS_BF16, 4 * 520);
  ctx->ov_b = h_buf_alloc(backend, IGNIS_BF16, 2048);
  for (int64_t i = 0; i < ctx->ov_b.count; ++i)
    h_set(&ctx->ov_b, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < ctx->q_b.count; ++i)
    h_set(&ctx->q_b, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < ctx->k_b.count; ++i)
    h_set(&ctx->k_b, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < ctx->cache_b.count; ++i)
    h_set(&ctx->cache_b, i, 0.5);
  static const int32_t idx32[32] = {0, 5, 9, 2, 1, -1, 3, 2,  0, 1, 1 << 24, 0, 0, 3,  1, 0,
                                    1, 3, 1, 2, 4, 0,  7, -1, 0, 0, 1,       4, 0, 16, 1, 2};
  for (int i = 0; i < 32; ++i)
    h_set(&ctx->idx32_b, i, idx32[i]);
  static const int64_t idx64[8] = {0, 1, 2, 3, 0, 0, 0, 0};
  for (int i = 0; i < 8; ++i)
    h_set(&ctx->idx64_b, i, (double)idx64[i]);
  h_buf_poison(&ctx->qo_b);
  h_buf_poison(&ctx->ko_b);
  h_buf *all[] = {&ctx->q_b,     &ctx->k_b,     &ctx->qo_b,  &ctx->ko_b, &ctx->idx32_b,
                  &ctx->idx64_b, &ctx->cache_b, &ctx->big_b, &ctx->ov_b};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    h_buf_upload(all[i]);
  int64_t qs[3] = {BN, BHQ, BD}, ks[3] = {BN, BHK, BD}, n = BN, two = 2, three = 3, cs[2] = {BMAXPOS, BD};
  ctx->q = h_view(&ctx->q_b, 0, 3, qs, NULL);
  ctx->k = h_view(&ctx->k_b, 0, 3, ks, NULL);
  ctx->q_out = h_view(&ctx->qo_b, 0, 3, qs, NULL);
  ctx->k_out = h_view(&ctx->ko_b, 0, 3, ks, NULL);
  ctx->pos_ids = h_view(&ctx->idx32_b, 0, 1, &n, NULL);
  ctx->indptr = h_view(&ctx->idx32_b, 25, 1, &three, NULL); /* {0, 1, 4} */
  ctx->offsets = h_view(&ctx->idx32_b, 21, 1, &two, NULL);  /* {0, 7} */
  ctx->positions = h_view(&ctx->idx64_b, 0, 1, &n, NULL);   /* {0, 1, 2, 3} */
  ctx->cache = h_view(&ctx->cache_b, 0, 2, cs, NULL);
  ignis_rope_config init = IGNIS_ROPE_CONFIG_INIT;
  ctx->config = init;

  bad_rope_tensors(ctx);
  bad_rope_indptr_and_cache(ctx);
  if (backend == H_CPU)
    bad_rope_positions_host(ctx);

  /* the valid baseline calls succeed (so the failures above come from the one change each) */
  h_buf_poison(&ctx->qo_b);
  h_buf_upload(&ctx->qo_b);
  CHECK_STATUS(
      ignis_apply_rope_pos_ids(&ctx->q, &ctx->k, &ctx->pos_ids, &ctx->config, &ctx->q_out, &ctx->k_out, NULL),
      IGNIS_OK);
  CHECK_STATUS(ignis_apply_rope(&ctx->q, &ctx->k, &ctx->indptr, &ctx->offsets, &ctx->config, &ctx->q_out,
                                &ctx->k_out, NULL),
               IGNIS_OK);
  CHECK_STATUS(ignis_apply_rope_with_cos_sin_cache(&ctx->positions, &ctx->q, &ctx->k, BD, &ctx->cache, 0,
                                                   &ctx->q_out, &ctx->k_out, NULL),
               IGNIS_OK);
  h_buf_download(&ctx->qo_b);
  CHECK(h_buf_changed(&ctx->qo_b, NULL) == ctx->qo_b.count);
  for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
    h_buf_free(all[i]);
}

/* nnz = 0: success, nothing written. */
static void test_empty(h_backend backend) {
  h_case("empty rope on %s", h_backend_name(backend));
  h_buf q_b = h_buf_alloc(backend, IGNIS_F16, 64), o_b = h_buf_alloc(backend, IGNIS_F16, 64);
  h_buf idx_b = h_buf_alloc(backend, IGNIS_I32, 4), cache_b = h_buf_alloc(backend, IGNIS_F32, 64);
  h_buf_poison(&o_b);
  h_buf_upload(&q_b);
  h_buf_upload(&o_b);
  h_buf_upload(&idx_b);
  h_buf_upload(&cache_b);
  int64_t shape[3] = {0, 2, 16}, zero = 0, one = 1, cs[2] = {4, 16};
  ignis_tensor q = h_view(&q_b, 0, 3, shape, NULL), k = h_view(&q_b, 32, 3, shape, NULL);
  ignis_tensor qo = h_view(&o_b, 0, 3, shape, NULL), ko = h_view(&o_b, 32, 3, shape, NULL);
  ignis_tensor pos = h_view(&idx_b, 0, 1, &zero, NULL), indptr = h_view(&idx_b, 0, 1, &one, NULL);
  ignis_tensor offsets = h_view(&idx_b, 1, 1, &zero, NULL), cache = h_view(&cache_b, 0, 2, cs, NULL);
  ignis_rope_config config = IGNIS_ROPE_CONFIG_INIT;
  CHECK_STATUS(ignis_apply_rope_pos_ids(&q, &k, &pos, &config, &qo, &ko, NULL), IGNIS_OK);
  CHECK_STATUS(ignis_apply_rope(&q, &k, &indptr, &offsets, &config, &qo, &ko, NULL), IGNIS_OK);
  CHECK_STATUS(ignis_apply_rope_with_cos_sin_cache(&pos, &q, &k, 16, &cache, 1, &qo, &ko, NULL), IGNIS_OK);
  CHECK(h_buf_untouched(&o_b));
  h_buf_free(&q_b);
  h_buf_free(&o_b);
  h_buf_free(&idx_b);
  h_buf_free(&cache_b);
}

int main(void) {
  h_init("test_rope");
  for (int b = 0; b < h_backend_count(); ++b) {
    h_backend backend = h_backend_at(b);
    test_pos_ids(backend);
    test_indptr(backend);
    test_cache(backend);
    test_fused_qkv_in_place(backend);
    test_cache_out_of_range_gpu(backend);
    test_empty(backend);
    test_bad_inputs(backend);
  }
  return h_finish();
}
