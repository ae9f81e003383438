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
 * positions instead (the token is copied unrotated).
 *
 * The fused RoPE + fp8 forms have their own section below (reference, layouts, the paged appends
 * read back from the cache, bad inputs, GPU bounds, CPU/CUDA bit equality). */
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

/* ---- RoPE + fp8 quantization ------------------------------------------------------------------
 * rope_quantize_fp8 (GQA 3-D k and MLA 2-D k) and its paged appends (GQA/MHA k/v cache, NHD and
 * HND; MLA ckv/kpe cache), against an fp64 reference: each rope pair rotated by the f32 cache row
 * of its position, every value times its scale, then the fp8 code. The kernel works in f32, so a
 * value within a few f32 ulps of a rounding boundary may round either way: each code must lie
 * between the codes of ref -/+ tol, tol = 2^-20 * (|x cos| + |y sin|) * scale (|x| * scale for
 * plain values), which is exact agreement everywhere else. On CUDA the same case is also run on
 * the CPU backend and every output byte must match (the conversion is one rule on both).
 * Layouts: contiguous; SGLang's q as [nnz, H, nope + rope] split into two views; padded token and
 * head strides (16-byte steps: the vector kernel); an odd element offset (the scalar kernel);
 * widths that are not multiples of 16 (scalar). Padding tokens (batch_indices -1) write nothing;
 * nothing outside the outputs and the appended cache slots changes. */
typedef enum quant_form { QF_PLAIN, QF_GQA, QF_MLA } quant_form;

static const char *const quant_form_names[3] = {"rope_quantize_fp8", "append_paged_kv_cache",
                                                "append_paged_mla_kv_cache"};

typedef struct quant_case {
  quant_form form;
  int mla; /* QF_PLAIN: k 2-D */
  ignis_dtype dtype, out_dtype, pos_dtype;
  int64_t nnz, hq, hk, rope, nope;
  int neox;
  float sq, skv;
  double amp;         /* inputs ~ amp * N(0, 1) */
  int fused_q;        /* q_nope and q_rope as views of [nnz, hq, nope + rope] */
  int padded;         /* token and head strides padded by 16-byte steps */
  int odd_offset;     /* tensors start one element off 16 bytes */
  int nope_null;      /* nope width 0 passed as NULL */
  int64_t cache_pad;  /* extra floats per cos/sin row */
  int64_t page_size;  /* paged forms */
  int hnd;            /* GQA cache layout */
  int padding_tokens; /* every third token is padding (batch_indices -1) */
} quant_case;

/* A part's place in its buffer: [nnz, heads, width] at offset with these strides. */
typedef struct part {
  int64_t offset, stride_token, stride_head, heads, width;
  int ndim;
} part;

static part place_part(int64_t *cursor, const quant_case *c, int64_t heads, int64_t width, int ndim,
                       int64_t pad_unit) {
  part p;
  p.heads = heads;
  p.width = width;
  p.ndim = ndim;
  p.stride_head = width + (c->padded ? pad_unit : 0);
  p.stride_token = (ndim == 3 ? heads * p.stride_head : width) + (c->padded ? 2 * pad_unit : 0);
  p.offset = *cursor + (c->odd_offset ? 1 : 0);
  *cursor = p.offset + c->nnz * p.stride_token + pad_unit;
  *cursor = (*cursor + 15) / 16 * 16;
  return p;
}

static int64_t part_at(const part *p, int64_t t, int64_t h, int64_t d) {
  return p->offset + t * p->stride_token + h * p->stride_head + d;
}

static ignis_tensor part_tensor(const h_buf *b, const part *p, int64_t nnz) {
  if (p->ndim == 2) {
    int64_t shape[2] = {nnz, p->width}, strides[2] = {p->stride_token, 1};
    return h_view(b, p->offset, 2, shape, strides);
  }
  int64_t shape[3] = {nnz, p->heads, p->width}, strides[3] = {p->stride_token, p->stride_head, 1};
  return h_view(b, p->offset, 3, shape, strides);
}

static double fp8_max_of(ignis_dtype d) {
  return d == IGNIS_FP8_E4M3 ? 448.0 : 57344.0;
}

/* The fp8 code of v (saturated), rounded to nearest even, decoded back. */
static double fp8_value(ignis_dtype d, double v) {
  const double m = fp8_max_of(d);
  v = v > m ? m : v < -m ? -m : v;
  return d == IGNIS_FP8_E4M3 ? ignis_fp8_e4m3_to_f32(ignis_f32_to_fp8_e4m3((float)v))
                             : ignis_fp8_e5m2_to_f32(ignis_f32_to_fp8_e5m2((float)v));
}

/* got must lie between the codes of ref - tol and ref + tol. */
static void quant_cmp_add(h_cmp *cmp, int64_t index, ignis_dtype d, double got, double ref, double tol) {
  const double lo = fp8_value(d, ref - tol), hi = fp8_value(d, ref + tol);
  const double mid = 0.5 * (lo + hi), half = 0.5 * (hi - lo);
  h_cmp_add(cmp, index, got, mid, half + 1e-300);
}

typedef struct quant_run {
  h_buf in_b, out_b, cache_a, cache_b, pos_b, cos_b, idx_b;
} quant_run;

static void quant_run_free(quant_run *r) {
  h_buf_free(&r->in_b);
  h_buf_free(&r->out_b);
  h_buf_free(&r->cache_a);
  h_buf_free(&r->cache_b);
  h_buf_free(&r->pos_b);
  h_buf_free(&r->cos_b);
  h_buf_free(&r->idx_b);
}

/* Run case c on `backend` with inputs from `seed`; checks against the reference when `check`.
 * The buffers are left in r (downloaded) for the caller, who frees them. */
static void run_quant_case(h_backend backend, const quant_case *c, uint64_t seed, int check, quant_run *r) {
  h_rng rng = h_rng_make(seed);
  const int64_t nnz = c->nnz, hq = c->hq, rope = c->rope, nope = c->nope, half = rope / 2;
  const int k3 = c->form == QF_GQA || (c->form == QF_PLAIN && !c->mla);
  const int64_t hk = k3 ? c->hk : 1, head_dim = rope + nope;
  const int64_t es = (int64_t)ignis_dtype_size(c->dtype), pad_in = 16 / es, pad_out = 16;

  /* inputs */
  int64_t cursor = 0;
  part q_rope, q_nope, k_rope, k_nope, v;
  if (c->fused_q) {
    part q = place_part(&cursor, c, hq, nope + rope, 3, pad_in);
    q_nope = q;
    q_nope.width = nope;
    q_rope = q;
    q_rope.width = rope;
    q_rope.offset += nope;
  } else {
    q_rope = place_part(&cursor, c, hq, rope, 3, pad_in);
    q_nope = place_part(&cursor, c, hq, nope, 3, pad_in);
  }
  k_rope = place_part(&cursor, c, hk, rope, k3 ? 3 : 2, pad_in);
  k_nope = place_part(&cursor, c, hk, nope, k3 ? 3 : 2, pad_in);
  v = place_part(&cursor, c, hk, head_dim, 3, pad_in);
  r->in_b = h_buf_alloc(backend, c->dtype, cursor + 16);
  h_buf_poison(&r->in_b);
  for (int64_t i = 0; i < r->in_b.count; ++i)
    h_set(&r->in_b, i, c->amp * h_rng_normal(&rng));

  /* outputs (q always; k for the plain form) */
  cursor = 0;
  part q_rope_o = place_part(&cursor, c, hq, rope, 3, pad_out);
  part q_nope_o = place_part(&cursor, c, hq, nope, 3, pad_out);
  part k_rope_o = place_part(&cursor, c, hk, rope, k3 ? 3 : 2, pad_out);
  part k_nope_o = place_part(&cursor, c, hk, nope, k3 ? 3 : 2, pad_out);
  r->out_b = h_buf_alloc(backend, c->out_dtype, cursor + 16);
  h_buf_poison(&r->out_b);

  /* positions and the cos/sin cache */
  const int64_t max_position = 300, cache_row = rope + c->cache_pad;
  r->pos_b = h_buf_alloc(backend, c->pos_dtype, nnz > 0 ? nnz : 1);
  for (int64_t t = 0; t < nnz; ++t)
    h_set(&r->pos_b, t, t == 0 ? max_position - 1 : (double)h_rng_int(&rng, 0, max_position - 1));
  r->cos_b = h_buf_alloc(backend, IGNIS_F32, max_position * cache_row);
  h_buf_poison(&r->cos_b);
  for (int64_t p = 0; p < max_position; ++p)
    for (int64_t i = 0; i < half; ++i) {
      double f = pow(1e4, -2.0 * (double)i / (double)rope);
      h_set(&r->cos_b, p * cache_row + i, cos((double)p * f));
      h_set(&r->cos_b, p * cache_row + half + i, sin((double)p * f));
    }

  /* paged: requests of a few tokens each, pages shuffled; batch_indices, positions, indptr,
   * indices in one i32 buffer */
  const int paged = c->form != QF_PLAIN;
  const int64_t ps = c->page_size > 0 ? c->page_size : 1;
  const int64_t batch = 3, pages_per_req = (nnz + ps - 1) / ps + 1, num_pages = batch * pages_per_req + 2;
  int64_t bi_at = 0, pos_at = nnz, indptr_at = 2 * nnz, indices_at = 2 * nnz + batch + 1;
  r->idx_b = h_buf_alloc(backend, IGNIS_I32, indices_at + batch * pages_per_req + 1);
  int64_t *perm = malloc(sizeof(int64_t) * (size_t)num_pages);
  for (int64_t i = 0; i < num_pages; ++i)
    perm[i] = i;
  for (int64_t i = num_pages - 1; i > 0; --i) {
    int64_t j = h_rng_int(&rng, 0, i), tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
  }
  for (int64_t b = 0; b <= batch; ++b)
    h_set(&r->idx_b, indptr_at + b, (double)(b * pages_per_req));
  for (int64_t i = 0; i < batch * pages_per_req; ++i)
    h_set(&r->idx_b, indices_at + i, (double)perm[i]);
  int64_t next_pos[3] = {0, 0, 0};
  for (int64_t t = 0; t < nnz; ++t) {
    int64_t b = t % batch;
    int pad = c->padding_tokens && t % 3 == 2;
    h_set(&r->idx_b, bi_at + t, pad ? -1 : (double)b);
    h_set(&r->idx_b, pos_at + t, pad ? 0 : (double)(next_pos[b]++ + (b == 1 ? ps - 1 : 0)));
  }
  free(perm);

  /* caches: GQA k/v [pages, page, hk, D] (NHD) or [pages, hk, page, D]; MLA ckv [pages, page, nope]
   * and kpe [pages, page, rope] as views of one [pages, page, nope + rope] buffer */
  int64_t ka_stride[3] = {0, 0, 0}, kb_stride[3] = {0, 0, 0}, a_count = 1, b_count = 1, b_offset = 0;
  if (c->form == QF_GQA) {
    int64_t row = head_dim + (c->padded ? 16 : 0);
    if (c->hnd) { /* strides: page, token, head */
      ka_stride[0] = hk * ps * row, ka_stride[1] = row, ka_stride[2] = ps * row;
    } else {
      ka_stride[0] = ps * hk * row, ka_stride[1] = hk * row, ka_stride[2] = row;
    }
    memcpy(kb_stride, ka_stride, sizeof ka_stride);
    a_count = b_count = num_pages * ka_stride[0];
  } else if (c->form == QF_MLA) {
    int64_t row = nope + rope + (c->padded ? 16 : 0);
    ka_stride[0] = ps * row, ka_stride[1] = row, ka_stride[2] = 0;
    memcpy(kb_stride, ka_stride, sizeof ka_stride);
    a_count = num_pages * ka_stride[0];
    b_offset = nope;
  }
  r->cache_a = h_buf_alloc(backend, c->out_dtype, a_count);
  r->cache_b = h_buf_alloc(backend, c->out_dtype, c->form == QF_GQA ? b_count : 1);
  h_buf_poison(&r->cache_a);
  h_buf_poison(&r->cache_b);

  h_buf *uploads[] = {&r->in_b, &r->out_b, &r->pos_b, &r->cos_b, &r->idx_b, &r->cache_a, &r->cache_b};
  for (size_t i = 0; i < sizeof uploads / sizeof uploads[0]; ++i)
    h_buf_upload(uploads[i]);

  ignis_tensor tq_rope = part_tensor(&r->in_b, &q_rope, nnz), tk_rope = part_tensor(&r->in_b, &k_rope, nnz);
  ignis_tensor tq_nope = part_tensor(&r->in_b, &q_nope, nnz), tk_nope = part_tensor(&r->in_b, &k_nope, nnz);
  ignis_tensor tv = part_tensor(&r->in_b, &v, nnz);
  ignis_tensor tq_rope_o = part_tensor(&r->out_b, &q_rope_o, nnz),
               tq_nope_o = part_tensor(&r->out_b, &q_nope_o, nnz);
  ignis_tensor tk_rope_o = part_tensor(&r->out_b, &k_rope_o, nnz),
               tk_nope_o = part_tensor(&r->out_b, &k_nope_o, nnz);
  int64_t cos_shape[2] = {max_position, rope}, cos_strides[2] = {cache_row, 1};
  ignis_tensor tcos = h_view(&r->cos_b, 0, 2, cos_shape, cos_strides);
  int64_t n1 = nnz, b1 = batch + 1, np = batch * pages_per_req;
  ignis_tensor tpos = h_view(&r->pos_b, 0, 1, &n1, NULL);
  ignis_tensor tbi = h_view(&r->idx_b, bi_at, 1, &n1, NULL),
               tposition = h_view(&r->idx_b, pos_at, 1, &n1, NULL);
  ignis_tensor tindptr = h_view(&r->idx_b, indptr_at, 1, &b1, NULL);
  ignis_tensor tindices = h_view(&r->idx_b, indices_at, 1, &np, NULL);
  const int null_nope = c->nope_null && nope == 0;
  const ignis_tensor *qn = null_nope ? NULL : &tq_nope, *kn = null_nope ? NULL : &tk_nope;
  ignis_tensor *qno = null_nope ? NULL : &tq_nope_o, *kno = null_nope ? NULL : &tk_nope_o;
  ignis_status status;
  if (c->form == QF_PLAIN) {
    status = ignis_rope_quantize_fp8(&tq_rope, &tk_rope, qn, kn, &tcos, &tpos, c->neox, c->sq, c->skv,
                                     &tq_rope_o, &tk_rope_o, qno, kno, NULL);
  } else if (c->form == QF_GQA) {
    int64_t shape[4] = {num_pages, c->hnd ? hk : ps, c->hnd ? ps : hk, head_dim};
    int64_t strides[4] = {ka_stride[0], c->hnd ? ka_stride[2] : ka_stride[1],
                          c->hnd ? ka_stride[1] : ka_stride[2], 1};
    ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT;
    cache.layout = c->hnd ? IGNIS_KV_LAYOUT_HND : IGNIS_KV_LAYOUT_NHD;
    cache.k_cache = h_view(&r->cache_a, 0, 4, shape, strides);
    cache.v_cache = h_view(&r->cache_b, 0, 4, shape, strides);
    cache.indptr = tindptr;
    cache.indices = tindices;
    status = ignis_rope_quantize_fp8_append_paged_kv_cache(&tq_rope, &tk_rope, qn, kn, &tv, &tcos, &tpos,
                                                           &tbi, &tposition, &cache, c->neox, c->sq, c->skv,
                                                           &tq_rope_o, qno, NULL);
  } else {
    int64_t ckv_shape[3] = {num_pages, ps, nope}, kpe_shape[3] = {num_pages, ps, rope};
    int64_t strides[3] = {ka_stride[0], ka_stride[1], 1};
    ignis_tensor ckv = h_view(&r->cache_a, 0, 3, ckv_shape, strides);
    ignis_tensor kpe = h_view(&r->cache_a, b_offset, 3, kpe_shape, strides);
    status = ignis_rope_quantize_fp8_append_paged_mla_kv_cache(&tq_rope, &tk_rope, qn, kn, &tcos, &tpos, &tbi,
                                                               &tposition, &ckv, &kpe, &tindices, &tindptr,
                                                               c->neox, c->sq, c->skv, &tq_rope_o, qno, NULL);
  }
  CHECKF(status == IGNIS_OK, "returned %s: %s", ignis_status_string(status), ignis_last_error());
  for (size_t i = 0; i < sizeof uploads / sizeof uploads[0]; ++i)
    h_buf_download(uploads[i]);
  if (!check || status != IGNIS_OK)
    return;

  /* reference, and the marks of every element that may change */
  unsigned char *out_mask = calloc((size_t)r->out_b.count, 1);
  unsigned char *a_mask = calloc((size_t)r->cache_a.count, 1), *b_mask = calloc((size_t)r->cache_b.count, 1);
  h_cmp cmp;
  h_cmp_init(&cmp);
  const ignis_dtype od = c->out_dtype;
  for (int64_t t = 0; t < nnz; ++t) {
    int64_t b = (int64_t)h_get(&r->idx_b, bi_at + t), s = (int64_t)h_get(&r->idx_b, pos_at + t);
    if (paged && b < 0)
      continue;
    int64_t pos = (int64_t)h_get(&r->pos_b, t);
    int64_t page = 0, slot = 0;
    if (paged) {
      page = (int64_t)h_get(&r->idx_b, indices_at + (int64_t)h_get(&r->idx_b, indptr_at + b) + s / ps);
      slot = s % ps;
    }
    for (int which = 0; which < 2; ++which) { /* q, k */
      const int64_t heads = which ? hk : hq;
      const double scale = which ? c->skv : c->sq;
      const part *src_rope = which ? &k_rope : &q_rope, *src_nope = which ? &k_nope : &q_nope;
      for (int64_t h = 0; h < heads; ++h) {
        /* destination index of (rope part, d) and (nope part, d) in their buffers */
        h_buf *dst_buf = &r->out_b;
        int64_t rope_base, nope_base;
        unsigned char *mask = out_mask;
        if (which == 0) {
          rope_base = part_at(&q_rope_o, t, h, 0);
          nope_base = part_at(&q_nope_o, t, h, 0);
        } else if (c->form == QF_PLAIN) {
          rope_base = part_at(&k_rope_o, t, h, 0);
          nope_base = part_at(&k_nope_o, t, h, 0);
        } else if (c->form == QF_GQA) {
          dst_buf = &r->cache_a;
          mask = a_mask;
          rope_base = page * ka_stride[0] + slot * ka_stride[1] + h * ka_stride[2];
          nope_base = rope_base + rope;
        } else {
          dst_buf = &r->cache_a;
          mask = a_mask;
          nope_base = page * ka_stride[0] + slot * ka_stride[1];
          rope_base = nope_base + b_offset;
        }
        for (int64_t i = 0; i < half; ++i) {
          int64_t xi = c->neox ? i : 2 * i, yi = c->neox ? i + half : 2 * i + 1;
          double x = h_get(&r->in_b, part_at(src_rope, t, h, xi)),
                 y = h_get(&r->in_b, part_at(src_rope, t, h, yi));
          double cs = h_get(&r->cos_b, pos * cache_row + i),
                 sn = h_get(&r->cos_b, pos * cache_row + half + i);
          double tol_x = ldexp(1.0, -20) * (fabs(x * cs) + fabs(y * sn)) * scale;
          double tol_y = ldexp(1.0, -20) * (fabs(x * sn) + fabs(y * cs)) * scale;
          quant_cmp_add(&cmp, rope_base + xi, od, h_get(dst_buf, rope_base + xi), (x * cs - y * sn) * scale,
                        tol_x);
          quant_cmp_add(&cmp, rope_base + yi, od, h_get(dst_buf, rope_base + yi), (x * sn + y * cs) * scale,
                        tol_y);
          mask[rope_base + xi] = mask[rope_base + yi] = 1;
        }
        for (int64_t i = 0; i < nope; ++i) {
          double x = h_get(&r->in_b, part_at(src_nope, t, h, i));
          quant_cmp_add(&cmp, nope_base + i, od, h_get(dst_buf, nope_base + i), x * scale,
                        ldexp(1.0, -20) * fabs(x) * scale);
          mask[nope_base + i] = 1;
        }
        if (which == 1 && c->form == QF_GQA) {
          int64_t v_base = page * kb_stride[0] + slot * kb_stride[1] + h * kb_stride[2];
          for (int64_t i = 0; i < head_dim; ++i) {
            double x = h_get(&r->in_b, part_at(&v, t, h, i));
            quant_cmp_add(&cmp, v_base + i, od, h_get(&r->cache_b, v_base + i), x * scale,
                          ldexp(1.0, -20) * fabs(x) * scale);
            b_mask[v_base + i] = 1;
          }
        }
      }
    }
  }
  CHECK_CMP(&cmp, "fp8 codes match the fp64 reference");
  CHECKF(h_buf_changed(&r->out_b, out_mask) == 0, "%lld output elements changed outside the outputs",
         (long long)h_buf_changed(&r->out_b, out_mask));
  CHECKF(h_buf_changed(&r->cache_a, a_mask) == 0 && h_buf_changed(&r->cache_b, b_mask) == 0,
         "cache elements changed outside the appended slots");
  CHECK(h_buf_changed(&r->in_b, NULL) == 0 && h_buf_changed(&r->pos_b, NULL) == 0 &&
        h_buf_changed(&r->cos_b, NULL) == 0 && h_buf_changed(&r->idx_b, NULL) == 0);
  free(out_mask);
  free(a_mask);
  free(b_mask);
}

static void quant_case_name(const quant_case *c, h_backend backend) {
  h_case(
      "%s on %s: %s->%s pos %s nnz=%lld hq=%lld hk=%lld rope=%lld nope=%lld %s sq=%g skv=%g amp=%g%s%s%s%s "
      "page=%lld%s%s",
      quant_form_names[c->form], h_backend_name(backend), ignis_dtype_name(c->dtype),
      ignis_dtype_name(c->out_dtype), ignis_dtype_name(c->pos_dtype), (long long)c->nnz, (long long)c->hq,
      (long long)c->hk, (long long)c->rope, (long long)c->nope, c->neox ? "neox" : "gptj", (double)c->sq,
      (double)c->skv, c->amp, c->mla ? " mla" : "", c->fused_q ? " fused-q" : "", c->padded ? " padded" : "",
      c->odd_offset ? " odd-offset" : "", (long long)c->page_size, c->hnd ? " HND" : "",
      c->padding_tokens ? " padding-tokens" : "");
}

static void quant_case_both(h_backend backend, const quant_case *c, uint64_t seed) {
  if (!h_selected(quant_form_names[c->form]))
    return;
  quant_case_name(c, backend);
  quant_run r;
  run_quant_case(backend, c, seed, 1, &r);
  if (backend == H_CUDA) { /* the CPU backend on the same inputs: every byte the same */
    quant_run cpu;
    run_quant_case(H_CPU, c, seed, 0, &cpu);
    int64_t diff = 0;
    h_buf *g[] = {&r.out_b, &r.cache_a, &r.cache_b}, *h[] = {&cpu.out_b, &cpu.cache_a, &cpu.cache_b};
    for (int i = 0; i < 3; ++i)
      diff += memcmp(g[i]->host, h[i]->host, (size_t)g[i]->count * g[i]->elem_size) != 0;
    CHECKF(diff == 0, "CUDA and CPU outputs differ in %lld buffers", (long long)diff);
    quant_run_free(&cpu);
  }
  quant_run_free(&r);
}

static void test_rope_quant(h_backend backend) {
  static const struct {
    int64_t hq, hk, rope, nope;
  } dims[] = {{4, 2, 64, 64}, {3, 1, 128, 0}, {2, 2, 32, 16}, {5, 2, 10, 6}, {4, 1, 64, 512}, {2, 3, 16, 48}};
  const ignis_dtype outs[2] = {IGNIS_FP8_E4M3, IGNIS_FP8_E5M2};
  int variant = 0;
  for (int form = 0; form < 3; ++form)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; ++di)
      for (int rep = 0; rep < 4; ++rep, ++variant) {
        quant_case c;
        memset(&c, 0, sizeof c);
        c.form = (quant_form)form;
        c.mla = form == QF_MLA || (form == QF_PLAIN && di % 2 == 1);
        c.dtype = rep % 2 ? IGNIS_BF16 : IGNIS_F16;
        c.out_dtype = outs[(rep / 2 + di) % 2];
        c.pos_dtype = variant % 3 ? IGNIS_I64 : IGNIS_I32;
        c.nnz = (int64_t[]){1, 7, 19, 40}[rep];
        c.hq = dims[di].hq;
        c.hk = dims[di].hk;
        c.rope = dims[di].rope;
        c.nope = dims[di].nope;
        c.neox = rep != 1;
        c.sq = rep == 2 ? 0.37f : 1.0f;
        c.skv = rep == 2 ? 2.5f : rep == 3 ? 0.5f : 1.0f;
        c.amp = rep == 3 ? 300.0 : rep == 2 ? 40.0 : 1.0; /* 300 saturates e4m3 */
        c.fused_q = rep == 1 && c.nope > 0;
        c.padded = rep == 2;
        c.odd_offset = variant % 5 == 4;
        c.nope_null = rep % 2 == 0;
        c.cache_pad = rep == 1 ? 6 : 0;
        c.page_size = (int64_t[]){1, 4, 16, 3}[rep];
        c.hnd = rep % 2 == 1;
        c.padding_tokens = rep >= 2;
        quant_case_both(backend, &c, 0x5100 + (uint64_t)variant);
      }
}

/* On CUDA: positions outside the cos/sin cache quantize unrotated; a token whose page slot is out
 * of range writes its q outputs and nothing into the cache. */
static void test_rope_quant_gpu_bounds(h_backend backend) {
  if (backend != H_CUDA)
    return;
  enum { NNZ = 3, HQ = 2, R = 32, N = 16, MAXPOS = 8 };
  h_case("rope_quantize_fp8 out-of-range indices on cuda");
  h_rng rng = h_rng_make(77);
  h_buf in_b = h_buf_alloc(backend, IGNIS_BF16, NNZ * (HQ + 1) * (R + N));
  h_buf out_b = h_buf_alloc(backend, IGNIS_FP8_E4M3, NNZ * HQ * (R + N));
  h_buf cache_b = h_buf_alloc(backend, IGNIS_FP8_E4M3, 2 * 4 * (R + N));
  h_buf pos_b = h_buf_alloc(backend, IGNIS_I32, NNZ), cos_b = h_buf_alloc(backend, IGNIS_F32, MAXPOS * R);
  h_buf idx_b = h_buf_alloc(backend, IGNIS_I32, 16);
  for (int64_t i = 0; i < in_b.count; ++i)
    h_set(&in_b, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < cos_b.count; ++i)
    h_set(&cos_b, i, 0.6);
  static const int32_t pos[NNZ] = {MAXPOS, -3, 2};
  for (int t = 0; t < NNZ; ++t)
    h_set(&pos_b, t, pos[t]);
  /* batch_indices {0, 5, 0}, positions {0, 0, 9}, indptr {0, 1}, indices {1} */
  static const int32_t idx[8] = {0, 5, 0, 0, 0, 9, 0, 1};
  for (int i = 0; i < 8; ++i)
    h_set(&idx_b, i, idx[i]);
  h_set(&idx_b, 8, 1);
  h_buf_poison(&out_b);
  h_buf_poison(&cache_b);
  h_buf *all[] = {&in_b, &out_b, &cache_b, &pos_b, &cos_b, &idx_b};
  for (int i = 0; i < 6; ++i)
    h_buf_upload(all[i]);
  int64_t qr_s[3] = {NNZ, HQ, R}, qn_s[3] = {NNZ, HQ, N}, kr_s[2] = {NNZ, R}, kn_s[2] = {NNZ, N};
  int64_t n = NNZ, two = 2, one = 1;
  ignis_tensor qr = h_view(&in_b, 0, 3, qr_s, NULL), qn = h_view(&in_b, NNZ * HQ * R, 3, qn_s, NULL);
  ignis_tensor kr = h_view(&in_b, NNZ * HQ * (R + N), 2, kr_s, NULL);
  ignis_tensor kn = h_view(&in_b, NNZ * HQ * (R + N) + NNZ * R, 2, kn_s, NULL);
  ignis_tensor qro = h_view(&out_b, 0, 3, qr_s, NULL), qno = h_view(&out_b, NNZ * HQ * R, 3, qn_s, NULL);
  int64_t cs[2] = {MAXPOS, R}, ckv_s[3] = {2, 4, N}, kpe_s[3] = {2, 4, R}, st[3] = {4 * (R + N), R + N, 1};
  ignis_tensor cos_t = h_view(&cos_b, 0, 2, cs, NULL), pos_t = h_view(&pos_b, 0, 1, &n, NULL);
  ignis_tensor ckv = h_view(&cache_b, 0, 3, ckv_s, st), kpe = h_view(&cache_b, N, 3, kpe_s, st);
  ignis_tensor bi = h_view(&idx_b, 0, 1, &n, NULL), ps = h_view(&idx_b, 3, 1, &n, NULL);
  ignis_tensor indptr = h_view(&idx_b, 6, 1, &two, NULL), indices = h_view(&idx_b, 8, 1, &one, NULL);
  CHECK_STATUS(ignis_rope_quantize_fp8_append_paged_mla_kv_cache(&qr, &kr, &qn, &kn, &cos_t, &pos_t, &bi, &ps,
                                                                 &ckv, &kpe, &indices, &indptr, 1, 1.0f, 1.0f,
                                                                 &qro, &qno, NULL),
               IGNIS_OK);
  for (int i = 0; i < 6; ++i)
    h_buf_download(all[i]);
  /* token 0: position out of range, page 1 slot 0: q unrotated, its k row in the cache unrotated;
   * token 1: request 5 of 1: q written (position -3: unrotated), cache untouched for it;
   * token 2: position 9 past its one page: q rotated, cache untouched for it */
  h_cmp cmp;
  h_cmp_init(&cmp);
  for (int t = 0; t < NNZ; ++t)
    for (int h = 0; h < HQ; ++h)
      for (int i = 0; i < R / 2; ++i) {
        double x = h_get(&in_b, (t * HQ + h) * R + i), y = h_get(&in_b, (t * HQ + h) * R + R / 2 + i);
        double cs_v = t == 2 ? 0.6 : 1.0, sn_v = t == 2 ? 0.6 : 0.0;
        int64_t at = (t * HQ + h) * R + i;
        quant_cmp_add(&cmp, at, IGNIS_FP8_E4M3, h_get(&out_b, at), x * cs_v - y * sn_v, 1e-5);
        quant_cmp_add(&cmp, at + R / 2, IGNIS_FP8_E4M3, h_get(&out_b, at + R / 2), x * sn_v + y * cs_v, 1e-5);
      }
  for (int i = 0; i < R; ++i) {
    int64_t at = 4 * (R + N) + N + i; /* page 1, slot 0, kpe column i */
    quant_cmp_add(&cmp, at, IGNIS_FP8_E4M3, h_get(&cache_b, at), h_get(&in_b, NNZ * HQ * (R + N) + i), 1e-5);
  }
  CHECK_CMP(&cmp, "q rows and the one valid cache row");
  int64_t changed = 0;
  for (int64_t i = 0; i < cache_b.count; ++i)
    changed += !h_elem_unchanged(&cache_b, i) && !(i >= 4 * (R + N) && i < 5 * (R + N));
  CHECKF(changed == 0, "%lld cache elements written outside token 0's slot", (long long)changed);
  for (int i = 0; i < 6; ++i)
    h_buf_free(all[i]);
}

/* Bad inputs of the three forms: each returns the status, names the parameter, writes nothing. */
typedef struct qbad {
  h_buf in_b, out_b, cache_b, cos_b, idx_b, v_b;
  ignis_tensor q_rope, k_rope, q_nope, k_nope, k_rope3, k_nope3, v, cos, pos, q_rope_out, q_nope_out,
      k_rope_out, k_nope_out, k_rope_out3, k_nope_out3, ckv, kpe, bi, positions, indptr, indices;
  ignis_paged_kv_cache cache;
} qbad;

static int qbad_untouched(qbad *b) {
  h_buf *all[] = {&b->in_b, &b->out_b, &b->cache_b, &b->cos_b, &b->idx_b, &b->v_b};
  int ok = 1;
  for (int i = 0; i < 6; ++i)
    ok &= h_buf_untouched(all[i]);
  return ok;
}

#define QBAD(call, status, needle)                                                                           \
  do {                                                                                                       \
    CHECK_ERROR(call, status, needle);                                                                       \
    CHECKF(qbad_untouched(b), "a rejected call changed a buffer");                                           \
  } while (0)
#define QPLAIN(qr, kr, qn, kn, cs, ps, neox, sq, skv, qro, kro, qno, kno)                                    \
  ignis_rope_quantize_fp8(qr, kr, qn, kn, cs, ps, neox, sq, skv, qro, kro, qno, kno, NULL)
#define QGQA(kr, kn, v, bi, ps, cache)                                                                       \
  ignis_rope_quantize_fp8_append_paged_kv_cache(&b->q_rope, kr, &b->q_nope, kn, v, &b->cos, &b->pos, bi, ps, \
                                                cache, 1, 1.0f, 1.0f, &b->q_rope_out, &b->q_nope_out, NULL)
#define QMLA(kr, ckv, kpe, indices, indptr, bi, ps)                                                          \
  ignis_rope_quantize_fp8_append_paged_mla_kv_cache(&b->q_rope, kr, &b->q_nope, &b->k_nope, &b->cos,         \
                                                    &b->pos, bi, ps, ckv, kpe, indices, indptr, 1, 1.0f,     \
                                                    1.0f, &b->q_rope_out, &b->q_nope_out, NULL)

enum { QN = 2, QH = 2, QR = 16, QNOPE = 16, QMAXPOS = 8, QPAGES = 2, QPAGE = 4 };

static void qbad_plain(qbad *b) {
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT, UNS = IGNIS_ERROR_UNSUPPORTED;
  ignis_tensor t, u;
  t = b->q_rope;
  t.dtype = IGNIS_F32;
  QBAD(QPLAIN(&t, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       UNS, "q_rope.dtype");
  t.dtype = IGNIS_I32;
  QBAD(QPLAIN(&t, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "q_rope.dtype");
  QBAD(QPLAIN(NULL, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "q_rope is NULL");
  t = b->q_rope;
  t.shape[2] = QR - 1;
  u = b->q_rope_out;
  u.shape[2] = QR - 1;
  QBAD(QPLAIN(&t, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &u, &b->k_rope_out,
              &b->q_nope_out, &b->k_nope_out),
       INV, "rope_dim");
  t = b->k_rope;
  t.shape[1] = QR / 2;
  QBAD(QPLAIN(&b->q_rope, &t, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "k_rope.shape[1]");
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, NULL, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "k_nope is NULL");
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, NULL, &b->k_nope_out),
       INV, "q_nope_out is NULL");
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, NULL),
       INV, "k_nope_out is NULL");
  t = b->k_nope;
  t.dtype = IGNIS_F16;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &t, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "k_nope.dtype");
  t = b->k_nope3;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &t, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "k_nope.ndim");
  t = b->q_rope_out;
  t.dtype = IGNIS_U8;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &t,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "q_rope_out.dtype");
  t = b->k_rope_out;
  t.dtype = IGNIS_FP8_E5M2;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &t, &b->q_nope_out, &b->k_nope_out),
       INV, "k_rope_out.dtype");
  t = b->q_nope_out;
  t.shape[1] = 1;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &t, &b->k_nope_out),
       INV, "q_nope_out.shape[1]");
  t = b->q_rope;
  t.strides[2] = 2;
  t.shape[2] = QR / 2;
  u = b->q_rope_out;
  u.shape[2] = QR / 2;
  {
    ignis_tensor kr = b->k_rope, kro = b->k_rope_out, c = b->cos;
    kr.shape[1] = kro.shape[1] = c.shape[1] = QR / 2;
    QBAD(QPLAIN(&t, &kr, &b->q_nope, &b->k_nope, &c, &b->pos, 1, 1.0f, 1.0f, &u, &kro, &b->q_nope_out,
                &b->k_nope_out),
         UNS, "q_rope.strides[-1]");
  }
  t = b->cos;
  t.dtype = IGNIS_F16;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &t, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "cos_sin_cache.dtype");
  t = b->cos;
  t.shape[1] = QR / 2;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &t, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "cos_sin_cache.shape[1]");
  t = b->pos;
  t.shape[0] = 1;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &t, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "pos_ids.shape[0]");
  t = b->pos;
  t.dtype = IGNIS_F32;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &t, 1, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "pos_ids.dtype");
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 2, 1.0f, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "is_neox");
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, NAN, 1.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "quant_scale_q");
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 0.0f, &b->q_rope_out,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "quant_scale_kv");
  t = b->k_rope_out;
  t.data = b->q_rope_out.data;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &b->q_rope_out,
              &t, &b->q_nope_out, &b->k_nope_out),
       INV, "k_rope_out overlaps q_rope_out");
  t = b->q_rope_out;
  t.data = b->q_nope.data;
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f, &t,
              &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "q_rope_out overlaps q_nope");
}

static void qbad_paged(qbad *b, h_backend backend) {
  const ignis_status INV = IGNIS_ERROR_INVALID_ARGUMENT;
  ignis_tensor t;
  ignis_paged_kv_cache cache = b->cache;
  /* GQA/MHA */
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, &b->v, &b->bi, &b->positions, NULL), INV, "cache is NULL");
  QBAD(QGQA(&b->k_rope, &b->k_nope3, &b->v, &b->bi, &b->positions, &cache), INV, "k_rope.ndim");
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, NULL, &b->bi, &b->positions, &cache), INV, "v is NULL");
  t = b->v;
  t.shape[2] = QR;
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, &t, &b->bi, &b->positions, &cache), INV, "v.shape[2]");
  cache.size = 0;
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, &b->v, &b->bi, &b->positions, &cache), INV, "cache.size");
  cache = b->cache;
  cache.k_cache.dtype = cache.v_cache.dtype = IGNIS_FP8_E5M2;
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, &b->v, &b->bi, &b->positions, &cache), INV, "cache.k_cache.dtype");
  cache = b->cache;
  cache.k_cache.shape[3] = cache.v_cache.shape[3] = QR;
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, &b->v, &b->bi, &b->positions, &cache), INV, "cache.k_cache holds");
  t = b->bi;
  t.shape[0] = 1;
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, &b->v, &t, &b->positions, &b->cache), INV, "batch_indices.shape[0]");
  /* MLA */
  QBAD(QMLA(&b->k_rope3, &b->ckv, &b->kpe, &b->indices, &b->indptr, &b->bi, &b->positions), INV,
       "k_rope.ndim");
  t = b->kpe;
  t.shape[2] = QR / 2;
  QBAD(QMLA(&b->k_rope, &b->ckv, &t, &b->indices, &b->indptr, &b->bi, &b->positions), INV,
       "kpe_cache.shape[2]");
  t = b->ckv;
  t.shape[0] = 1;
  QBAD(QMLA(&b->k_rope, &t, &b->kpe, &b->indices, &b->indptr, &b->bi, &b->positions), INV,
       "ckv_cache.shape[0]");
  t = b->ckv;
  t.data = b->kpe.data;
  QBAD(QMLA(&b->k_rope, &t, &b->kpe, &b->indices, &b->indptr, &b->bi, &b->positions), INV,
       "kpe_cache overlaps ckv_cache");
  t = b->indptr;
  t.dtype = IGNIS_I64;
  QBAD(QMLA(&b->k_rope, &b->ckv, &b->kpe, &b->indices, &t, &b->bi, &b->positions), INV, "kv_indptr.dtype");
  if (backend != H_CPU)
    return;
  /* host contents: idx_b = bi {0, 0} | positions {0, 5} | indptr {0, 2} | indices {1, 0} |
   * bad bi {2, 0} | bad positions {0, 8} | bad indices {1, 7} | bad indptr {0, 3} | pos {0, 8} */
  int64_t n = QN, two = 2;
  ignis_tensor bad_bi = h_view(&b->idx_b, 8, 1, &n, NULL), bad_pos = h_view(&b->idx_b, 10, 1, &n, NULL);
  ignis_tensor bad_indices = h_view(&b->idx_b, 12, 1, &two, NULL),
               bad_indptr = h_view(&b->idx_b, 14, 1, &two, NULL);
  ignis_tensor bad_pos_ids = h_view(&b->idx_b, 16, 1, &n, NULL);
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, &b->v, &bad_bi, &b->positions, &b->cache), INV, "batch_indices[0]");
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, &b->v, &b->bi, &bad_pos, &b->cache), INV, "positions[1]");
  cache = b->cache;
  cache.indices = bad_indices;
  QBAD(QGQA(&b->k_rope3, &b->k_nope3, &b->v, &b->bi, &b->positions, &cache), INV, "cache.indices[1]");
  QBAD(QMLA(&b->k_rope, &b->ckv, &b->kpe, &b->indices, &bad_indptr, &b->bi, &b->positions), INV,
       "kv_indptr[1]");
  QBAD(QMLA(&b->k_rope, &b->ckv, &b->kpe, &bad_indices, &b->indptr, &b->bi, &b->positions), INV,
       "kv_indices[1]");
  QBAD(ignis_rope_quantize_fp8_append_paged_mla_kv_cache(
           &b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &bad_pos_ids, &b->bi, &b->positions,
           &b->ckv, &b->kpe, &b->indices, &b->indptr, 1, 1.0f, 1.0f, &b->q_rope_out, &b->q_nope_out, NULL),
       INV, "pos_ids[1]");
  QBAD(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &bad_pos_ids, 1, 1.0f, 1.0f,
              &b->q_rope_out, &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
       INV, "pos_ids[1]");
}

static void test_rope_quant_bad_inputs(h_backend backend) {
  h_case("rope_quantize_fp8 bad inputs on %s", h_backend_name(backend));
  qbad storage, *b = &storage;
  memset(b, 0, sizeof *b);
  h_rng rng = h_rng_make(41);
  const int64_t qr = QN * QH * QR, qn = QN * QH * QNOPE, kr = QN * QH * QR, kn = QN * QH * QNOPE;
  b->in_b = h_buf_alloc(backend, IGNIS_BF16, qr + qn + kr + kn);
  b->v_b = h_buf_alloc(backend, IGNIS_BF16, QN * QH * (QR + QNOPE));
  b->out_b = h_buf_alloc(backend, IGNIS_FP8_E4M3, qr + qn + kr + kn);
  b->cache_b = h_buf_alloc(backend, IGNIS_FP8_E4M3, 2 * QPAGES * QPAGE * QH * (QR + QNOPE));
  b->cos_b = h_buf_alloc(backend, IGNIS_F32, QMAXPOS * QR);
  b->idx_b = h_buf_alloc(backend, IGNIS_I32, 18);
  for (int64_t i = 0; i < b->in_b.count; ++i)
    h_set(&b->in_b, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < b->v_b.count; ++i)
    h_set(&b->v_b, i, h_rng_normal(&rng));
  for (int64_t i = 0; i < b->cos_b.count; ++i)
    h_set(&b->cos_b, i, 0.5);
  static const int32_t idx[18] = {0, 0, 0, 5, 0, 2, 1, 0, 2, 0, 0, 8, 1, 7, 0, 3, 0, 8};
  for (int i = 0; i < 18; ++i)
    h_set(&b->idx_b, i, idx[i]);
  h_buf_poison(&b->out_b);
  h_buf_poison(&b->cache_b);
  h_buf *all[] = {&b->in_b, &b->out_b, &b->cache_b, &b->cos_b, &b->idx_b, &b->v_b};
  for (int i = 0; i < 6; ++i)
    h_buf_upload(all[i]);
  int64_t qrs[3] = {QN, QH, QR}, qns[3] = {QN, QH, QNOPE}, krs[2] = {QN, QR}, kns[2] = {QN, QNOPE};
  int64_t vs[3] = {QN, QH, QR + QNOPE}, cs[2] = {QMAXPOS, QR}, n = QN, two = 2;
  b->q_rope = h_view(&b->in_b, 0, 3, qrs, NULL);
  b->q_nope = h_view(&b->in_b, qr, 3, qns, NULL);
  b->k_rope = h_view(&b->in_b, qr + qn, 2, krs, NULL);
  b->k_nope = h_view(&b->in_b, qr + qn + QN * QR, 2, kns, NULL);
  b->k_rope3 = h_view(&b->in_b, qr + qn, 3, qrs, NULL);
  b->k_nope3 = h_view(&b->in_b, qr + qn + kr, 3, qns, NULL);
  b->v = h_view(&b->v_b, 0, 3, vs, NULL);
  b->q_rope_out = h_view(&b->out_b, 0, 3, qrs, NULL);
  b->q_nope_out = h_view(&b->out_b, qr, 3, qns, NULL);
  b->k_rope_out = h_view(&b->out_b, qr + qn, 2, krs, NULL);
  b->k_nope_out = h_view(&b->out_b, qr + qn + QN * QR, 2, kns, NULL);
  b->cos = h_view(&b->cos_b, 0, 2, cs, NULL);
  b->pos = h_view(&b->idx_b, 0, 1, &n, NULL); /* {0, 0} */
  b->bi = h_view(&b->idx_b, 0, 1, &n, NULL);
  b->positions = h_view(&b->idx_b, 2, 1, &n, NULL);
  b->indptr = h_view(&b->idx_b, 4, 1, &two, NULL);
  b->indices = h_view(&b->idx_b, 6, 1, &two, NULL);
  int64_t kvs[4] = {QPAGES, QPAGE, QH, QR + QNOPE}, half_cache = QPAGES * QPAGE * QH * (QR + QNOPE);
  ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT;
  cache.k_cache = h_view(&b->cache_b, 0, 4, kvs, NULL);
  cache.v_cache = h_view(&b->cache_b, half_cache, 4, kvs, NULL);
  cache.indptr = b->indptr;
  cache.indices = b->indices;
  b->cache = cache;
  int64_t ckvs[3] = {QPAGES, QPAGE, QNOPE}, kpes[3] = {QPAGES, QPAGE, QR},
          mst[3] = {QPAGE * (QR + QNOPE), QR + QNOPE, 1};
  b->ckv = h_view(&b->cache_b, 0, 3, ckvs, mst);
  b->kpe = h_view(&b->cache_b, QNOPE, 3, kpes, mst);

  qbad_plain(b);
  qbad_paged(b, backend);

  /* the valid baselines succeed (each failure above comes from its one change) */
  CHECK_STATUS(QPLAIN(&b->q_rope, &b->k_rope, &b->q_nope, &b->k_nope, &b->cos, &b->pos, 1, 1.0f, 1.0f,
                      &b->q_rope_out, &b->k_rope_out, &b->q_nope_out, &b->k_nope_out),
               IGNIS_OK);
  CHECK_STATUS(QGQA(&b->k_rope3, &b->k_nope3, &b->v, &b->bi, &b->positions, &b->cache), IGNIS_OK);
  CHECK_STATUS(QMLA(&b->k_rope, &b->ckv, &b->kpe, &b->indices, &b->indptr, &b->bi, &b->positions), IGNIS_OK);
  for (int i = 0; i < 6; ++i)
    h_buf_free(all[i]);
}

/* nnz = 0 and zero-width nope parts: success, nothing written. */
static void test_rope_quant_empty(h_backend backend) {
  h_case("empty rope_quantize_fp8 on %s", h_backend_name(backend));
  h_buf in_b = h_buf_alloc(backend, IGNIS_F16, 64), out_b = h_buf_alloc(backend, IGNIS_FP8_E4M3, 64);
  h_buf idx_b = h_buf_alloc(backend, IGNIS_I32, 4), cos_b = h_buf_alloc(backend, IGNIS_F32, 64);
  h_buf_poison(&out_b);
  h_buf_upload(&in_b);
  h_buf_upload(&out_b);
  h_buf_upload(&idx_b);
  h_buf_upload(&cos_b);
  int64_t qs[3] = {0, 2, 16}, ks[2] = {0, 16}, zero = 0, cs[2] = {4, 16};
  ignis_tensor q = h_view(&in_b, 0, 3, qs, NULL), k = h_view(&in_b, 32, 2, ks, NULL);
  ignis_tensor qo = h_view(&out_b, 0, 3, qs, NULL), ko = h_view(&out_b, 32, 2, ks, NULL);
  ignis_tensor pos = h_view(&idx_b, 0, 1, &zero, NULL), cos_t = h_view(&cos_b, 0, 2, cs, NULL);
  CHECK_STATUS(
      ignis_rope_quantize_fp8(&q, &k, NULL, NULL, &cos_t, &pos, 0, 1.0f, 1.0f, &qo, &ko, NULL, NULL, NULL),
      IGNIS_OK);
  CHECK(h_buf_untouched(&out_b));
  h_buf_free(&in_b);
  h_buf_free(&out_b);
  h_buf_free(&idx_b);
  h_buf_free(&cos_b);
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
    test_rope_quant(backend);
    test_rope_quant_gpu_bounds(backend);
    test_rope_quant_bad_inputs(backend);
    test_rope_quant_empty(backend);
  }
  return h_finish();
}
