/* The op registry: the families of bench/ops_*.c in the order `ignis info`, `ignis bench --list`
 * and the default suite walk them, lookup by name, the case of a shape, the bytes and shape text
 * of a case, and the tiny call (bench_probe_routine) that `ignis info` and tests/test_ops.c make
 * of every entry on every device.
 *
 * The tiny call is a smoke test, not a correctness test (the per-op tests compare with fp64
 * references): it poisons every output, makes one call on the entry's tiny case, and checks that
 * the call succeeded and left every output (and every tensor it updates in place) holding valid
 * values: finite floats, integers within the range the entry gives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const bench_family *const families[] = {
    &bench_family_norm,  &bench_family_activation, &bench_family_rope,    &bench_family_paged_kv,
    &bench_family_merge, &bench_family_decode,     &bench_family_prefill, &bench_family_sampling,
    &bench_family_gemm,
    &bench_family_quant,
    &bench_family_mla,
    &bench_family_moe_routing,
    &bench_family_rope_quant,
    &bench_family_moe,
    &bench_family_comm,
};

#define FAMILY_COUNT ((int)(sizeof families / sizeof families[0]))

int bench_routine_count(void) {
  int count = 0;
  for (int f = 0; f < FAMILY_COUNT; ++f)
    count += families[f]->routine_count;
  return count;
}

const bench_routine *bench_routine_at(int index) {
  for (int f = 0; f < FAMILY_COUNT; ++f) {
    if (index < families[f]->routine_count)
      return &families[f]->routines[index];
    index -= families[f]->routine_count;
  }
  return NULL;
}

const bench_routine *bench_find_routine(const char *name) {
  for (int i = 0; i < bench_routine_count(); ++i)
    if (strcmp(bench_routine_at(i)->name, name) == 0)
      return bench_routine_at(i);
  return NULL;
}

bench_tensor_spec bench_spec(const char *name, ignis_dtype dtype, bench_fill fill, int32_t ndim,
                             const int64_t *shape) {
  bench_tensor_spec s;
  memset(&s, 0, sizeof s);
  s.name = name;
  s.dtype = dtype;
  s.ndim = ndim;
  s.fill = fill;
  s.bytes_moved = (int64_t)ignis_dtype_size(dtype);
  for (int d = 0; d < ndim; ++d) {
    s.shape[d] = shape[d];
    s.bytes_moved *= shape[d];
  }
  return s;
}

bench_case bench_make_case(const bench_routine *routine, const bench_case *dims, ignis_device device,
                           ignis_dtype dtype) {
  bench_case c = *dims;
  c.routine = routine;
  c.device = device;
  c.dtype = dtype;
  if (routine->family->complete)
    routine->family->complete(&c);
  return c;
}

int64_t bench_case_bytes(const bench_case *c) {
  bench_tensor_spec specs[BENCH_MAX_TENSORS];
  int count = c->routine->describe(c, specs);
  int64_t bytes = 0;
  for (int i = 0; i < count; ++i)
    bytes += specs[i].bytes_moved;
  return bytes;
}

void bench_case_traffic(const bench_case *c, int64_t *read, int64_t *written, int *write_streams) {
  bench_tensor_spec specs[BENCH_MAX_TENSORS];
  int64_t writes[BENCH_MAX_TENSORS];
  int count = c->routine->describe(c, specs);
  *read = *written = 0;
  for (int i = 0; i < count; ++i) {
    const bench_tensor_spec *s = &specs[i];
    writes[i] = s->role == BENCH_OUT || (s->role == BENCH_INOUT && s->write_only) ? s->bytes_moved
                : s->role == BENCH_INOUT                                          ? s->bytes_moved / 2
                                                                                  : 0;
    *written += writes[i];
    *read += s->bytes_moved - writes[i];
  }
  *write_streams = 0;
  for (int i = 0; i < count; ++i)
    if (writes[i] > 0 && 4 * writes[i] >= *written)
      ++*write_streams;
}

void bench_case_shape(const bench_case *c, char *text, size_t size) {
  c->routine->family->shape(c, text, size);
}

void bench_format_count(int64_t value, char *text, size_t size) {
  if (value >= 1024 && value % 1024 == 0)
    snprintf(text, size, "%lldk", (long long)(value / 1024));
  else
    snprintf(text, size, "%lld", (long long)value);
}

int64_t bench_pages_per_request(const bench_case *c) {
  return (c->kv_len + c->page_size - 1) / c->page_size;
}

int64_t bench_last_page_len(const bench_case *c) {
  return c->kv_len - (bench_pages_per_request(c) - 1) * c->page_size;
}

int64_t bench_num_pages(const bench_case *c) {
  return c->batch * bench_pages_per_request(c);
}

int64_t bench_visible_pairs(const bench_case *c) {
  if (!c->causal)
    return c->tokens * c->kv_len;
  int64_t pairs = 0;
  for (int64_t i = 0; i < c->tokens; ++i) {
    int64_t visible = c->kv_len - c->tokens + i + 1;
    pairs += visible < 0 ? 0 : visible > c->kv_len ? c->kv_len : visible;
  }
  return pairs;
}

int bench_page_cache_specs(const bench_case *c, int lengths, bench_tensor_spec *s) {
  int64_t pages = bench_num_pages(c);
  s[0] = BENCH_SPEC("k_cache", c->dtype, BENCH_FILL_RANDOM, pages, c->page_size, c->k_heads, c->head_dim);
  s[1] = BENCH_SPEC("v_cache", c->dtype, BENCH_FILL_RANDOM, pages, c->page_size, c->k_heads, c->head_dim);
  s[0].bytes_moved = s[1].bytes_moved =
      c->batch * c->kv_len * c->k_heads * c->head_dim * (int64_t)ignis_dtype_size(c->dtype);
  s[2] = BENCH_SPEC("kv_indices", IGNIS_I32, BENCH_FILL_PAGE_INDICES, pages);
  if (!lengths)
    return 3;
  s[3] = BENCH_SPEC("kv_indptr", IGNIS_I32, BENCH_FILL_PAGE_INDPTR, c->batch + 1);
  s[4] = BENCH_SPEC("kv_last_page_len", IGNIS_I32, BENCH_FILL_LAST_PAGE_LEN, c->batch);
  return 5;
}

ignis_paged_kv_cache bench_page_cache(const ignis_tensor *t, int lengths) {
  ignis_paged_kv_cache cache = IGNIS_PAGED_KV_CACHE_INIT;
  cache.k_cache = t[0];
  cache.v_cache = t[1];
  cache.indices = t[2];
  if (lengths) {
    cache.indptr = t[3];
    cache.last_page_len = t[4];
  }
  return cache;
}

/* ---- the tiny call ---------------------------------------------------------------------------- */
static int is_float(ignis_dtype dtype) {
  return dtype == IGNIS_F32 || dtype == IGNIS_F16 || dtype == IGNIS_BF16 || dtype == IGNIS_FP8_E4M3 ||
         dtype == IGNIS_FP8_E5M2;
}

/* Poison: all-ones bytes are NaN in every float dtype; 0x80 bytes are a large negative integer,
 * outside every valid range an entry gives. */
static int poison_outputs(const bench_sets *sets) {
  for (int i = 0; i < sets->count; ++i) {
    if (sets->specs[i].role != BENCH_OUT)
      continue;
    size_t bytes = (size_t)sets->tensor_bytes[i];
    unsigned char *host = malloc(bytes ? bytes : 1);
    if (!host)
      return bench_fail("out of host memory for the poison of %s", sets->specs[i].name);
    memset(host, is_float(sets->specs[i].dtype) ? 0xFF : 0x80, bytes);
    int rc = bench_device_upload(sets->c.device, sets->pools[i], host, bytes);
    free(host);
    if (rc != 0)
      return -1;
  }
  return 0;
}

static double element_of(const void *data, ignis_dtype dtype, int64_t i) {
  switch (dtype) {
  case IGNIS_F32:
    return ((const float *)data)[i];
  case IGNIS_F16:
    return ignis_f16_to_f32(((const uint16_t *)data)[i]);
  case IGNIS_BF16:
    return ignis_bf16_to_f32(((const uint16_t *)data)[i]);
  case IGNIS_FP8_E4M3:
    return ignis_fp8_e4m3_to_f32(((const uint8_t *)data)[i]);
  case IGNIS_FP8_E5M2:
    return ignis_fp8_e5m2_to_f32(((const uint8_t *)data)[i]);
  case IGNIS_I32:
    return ((const int32_t *)data)[i];
  case IGNIS_I64:
    return (double)((const int64_t *)data)[i];
  default:
    return ((const uint8_t *)data)[i];
  }
}

/* *ok = 1 when every element of tensor `index` of set 0 is valid, else 0 with the first bad one
 * named in detail. Returns 0, or -1 when it could not be read back. */
static int check_output(const bench_sets *sets, int index, char *detail, size_t size, int *ok) {
  const bench_tensor_spec *spec = &sets->specs[index];
  int64_t bytes = sets->tensor_bytes[index];
  void *host = malloc(bytes ? (size_t)bytes : 1);
  if (!host)
    return bench_fail("out of host memory to read %s back", spec->name);
  if (bench_device_download(sets->c.device, host, sets->pools[index], (size_t)bytes) != 0) {
    free(host);
    return -1;
  }
  *ok = 1;
  int64_t count = bytes / (int64_t)ignis_dtype_size(spec->dtype);
  for (int64_t i = 0; i < count && *ok; ++i) {
    double value = element_of(host, spec->dtype, i);
    if (is_float(spec->dtype)) {
      *ok = isfinite(value) || (spec->neg_inf_ok && value < 0 && isinf(value));
      if (!*ok)
        snprintf(detail, size, "%s[%lld] = %g%s", spec->name, (long long)i, value,
                 isnan(value) ? " (not written)" : "");
    } else if (spec->dtype == IGNIS_I32 || spec->dtype == IGNIS_I64) {
      *ok = value >= (double)spec->valid_min && value <= (double)spec->valid_max;
      if (!*ok)
        snprintf(detail, size, "%s[%lld] = %.0f, outside [%lld, %lld]", spec->name, (long long)i, value,
                 (long long)spec->valid_min, (long long)spec->valid_max);
    }
  }
  free(host);
  return 0;
}

int bench_probe_routine(const bench_routine *routine, ignis_device device, ignis_dtype dtype,
                        bench_probe *out) {
  memset(out, 0, sizeof *out);
  out->status = IGNIS_ERROR_INTERNAL;
  bench_case c = bench_make_case(routine, &routine->tiny, device, dtype);
  bench_sets sets;
  if (bench_sets_create(&c, 1, &sets) != 0)
    return -1;
  void *stream = NULL, *state = NULL;
  int rc = bench_device_stream(device, &stream);
  if (rc == 0)
    rc = poison_outputs(&sets);
  int prepared = rc == 0 && (!routine->prepare || routine->prepare(&c, stream, &state) == 0);
  if (rc == 0 && !prepared) {
    /* A preparation the library refused is the probe's answer; one the program failed is not. */
    out->status = bench_failed_status();
    snprintf(out->detail, sizeof out->detail, "%s", bench_error());
    if (out->status == IGNIS_OK)
      rc = -1;
  }
  if (prepared) {
    ignis_tensor tensors[BENCH_MAX_TENSORS];
    bench_sets_tensors(&sets, 0, tensors);
    out->status = routine->call(&c, tensors, state, stream);
    if (out->status != IGNIS_OK) {
      snprintf(out->detail, sizeof out->detail, "%s", ignis_last_error());
    } else if (bench_device_sync(device) != 0) {
      out->status = IGNIS_ERROR_CUDA;
      snprintf(out->detail, sizeof out->detail, "%s", bench_error());
    } else {
      out->written = 1;
      for (int i = 0; i < sets.count && rc == 0 && out->written; ++i)
        if (sets.specs[i].role != BENCH_IN)
          rc = check_output(&sets, i, out->detail, sizeof out->detail, &out->written);
    }
    if (routine->release)
      routine->release(&c, state);
  }
  bench_sets_destroy(&sets);
  return rc;
}
