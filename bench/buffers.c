/* Rotated input sets: every tensor of a case gets one pool holding `sets` copies end to end
 * (256-byte aligned), shared tensors one copy. Pools are filled once, before timing.
 *
 * Random fills (uniform, normal, softmax weights) are generated on the host as one block of at
 * most 16 MiB in the tensor's dtype, uploaded to the head of the pool and then doubled in place
 * with device-to-device copies until the pool is full: gigabytes are filled in milliseconds, and
 * no byte is left zero. Index tensors (positions, indptr, offsets, page tables, token ids), the
 * cos/sin cache and custom masks are computed exactly on the host for every set and uploaded. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define POOL_ALIGN 256
#define RANDOM_BLOCK_BYTES ((int64_t)16 << 20)

static int64_t align_up(int64_t x, int64_t a) {
  return (x + a - 1) / a * a;
}

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float random_unit(uint64_t *state) {
  return (float)((double)(splitmix64(state) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

static int64_t random_below(uint64_t *state, int64_t bound) {
  return bound <= 1 ? 0 : (int64_t)(splitmix64(state) % (uint64_t)bound);
}

/* Standard normal (Box-Muller). */
static float random_normal(uint64_t *state) {
  double u = ((double)(splitmix64(state) >> 11) + 0.5) / 9007199254740992.0;
  double v = (double)(splitmix64(state) >> 11) / 9007199254740992.0;
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static float random_value(bench_fill fill, uint64_t *state) {
  switch (fill) {
  case BENCH_FILL_NORMAL:
    return random_normal(state);
  case BENCH_FILL_PROBS:
    return expf(random_normal(state));
  default:
    return random_unit(state);
  }
}

/* Random fills are only asked for in the float dtypes (f32, f16, bf16, fp8) and u8 (fp8 scale
 * bytes, which get the value's e4m3 bits). */
static void store_float(void *dst, int64_t i, ignis_dtype dtype, float value) {
  if (dtype == IGNIS_F32)
    ((float *)dst)[i] = value;
  else if (dtype == IGNIS_FP8_E4M3 || dtype == IGNIS_U8)
    ((uint8_t *)dst)[i] = ignis_f32_to_fp8_e4m3(value);
  else if (dtype == IGNIS_FP8_E5M2)
    ((uint8_t *)dst)[i] = ignis_f32_to_fp8_e5m2(value);
  else if (dtype == IGNIS_F16)
    ((uint16_t *)dst)[i] = ignis_f32_to_f16(value);
  else
    ((uint16_t *)dst)[i] = ignis_f32_to_bf16(value);
}

static void store_index(void *dst, int64_t i, ignis_dtype dtype, int64_t value) {
  if (dtype == IGNIS_I64)
    ((int64_t *)dst)[i] = value;
  else
    ((int32_t *)dst)[i] = (int32_t)value;
}

static int is_tiled(bench_fill fill) {
  return fill == BENCH_FILL_RANDOM || fill == BENCH_FILL_NORMAL || fill == BENCH_FILL_PROBS;
}

static int fill_tiled(ignis_device device, void *pool, int64_t bytes, ignis_dtype dtype, bench_fill fill,
                      uint64_t seed) {
  int64_t element = (int64_t)ignis_dtype_size(dtype);
  int64_t block = bytes < RANDOM_BLOCK_BYTES ? bytes : RANDOM_BLOCK_BYTES;
  block -= block % element;
  if (block <= 0)
    return 0;
  void *host = malloc((size_t)block);
  if (!host)
    return bench_fail("out of host memory for a %lld-byte random block", (long long)block);
  uint64_t state = seed;
  for (int64_t i = 0; i < block / element; ++i)
    store_float(host, i, dtype, random_value(fill, &state));
  int rc = bench_device_upload(device, pool, host, (size_t)block);
  free(host);
  int64_t filled = block;
  while (rc == 0 && filled < bytes) {
    int64_t n = bytes - filled < filled ? bytes - filled : filled;
    rc = bench_device_copy(device, (char *)pool + filled, pool, (size_t)n);
    filled += n;
  }
  return rc;
}

int bench_fill_random(ignis_device device, void *pool, int64_t bytes, ignis_dtype dtype, uint64_t seed) {
  return fill_tiled(device, pool, bytes, dtype, BENCH_FILL_RANDOM, seed);
}

/* The mask of one request: token i sees key j in the causal pattern aligned to the end of the keys
 * (j <= kv_len - tokens + i), or every key when the case is not causal. */
static void fill_mask_bits(const bench_case *c, unsigned char *mask) {
  for (int64_t i = 0; i < c->tokens; ++i)
    for (int64_t j = 0; j < c->kv_len; ++j)
      if (!c->causal || j <= c->kv_len - c->tokens + i) {
        int64_t bit = i * c->kv_len + j;
        mask[bit / 8] |= (unsigned char)(1u << (bit % 8));
      }
}

/* The pages 0 .. count-1 in a random order (Fisher-Yates); page tables are i32. */
static void fill_permutation(int32_t *pages, int64_t count, uint64_t *state) {
  for (int64_t i = 0; i < count; ++i)
    pages[i] = (int32_t)i;
  for (int64_t i = count - 1; i > 0; --i) {
    int64_t j = random_below(state, i + 1);
    int32_t swap = pages[i];
    pages[i] = pages[j];
    pages[j] = swap;
  }
}

/* MoE routing [rows, k]: per row k distinct experts drawn uniformly from [0, experts) (the first
 * k of a partial Fisher-Yates shuffle), as a top-k over random logits picks them. */
static int fill_expert_ids(void *dst, const bench_tensor_spec *spec, int64_t experts, uint64_t *state) {
  int32_t *pool = malloc((size_t)(experts > 0 ? experts : 1) * sizeof *pool);
  if (!pool)
    return bench_fail("out of host memory for %lld expert ids", (long long)experts);
  for (int64_t e = 0; e < experts; ++e)
    pool[e] = (int32_t)e;
  const int64_t k = spec->shape[1] < experts ? spec->shape[1] : experts;
  for (int64_t r = 0; r < spec->shape[0]; ++r)
    for (int64_t j = 0; j < spec->shape[1]; ++j) {
      if (j < k) {
        int64_t pick = j + random_below(state, experts - j);
        int32_t swap = pool[j];
        pool[j] = pool[pick];
        pool[pick] = swap;
      }
      store_index(dst, r * spec->shape[1] + j, spec->dtype, j < k ? pool[j] : 0);
    }
  free(pool);
  return 0;
}

/* Index tensors, the cos/sin cache and masks: computed per set on the host, uploaded in one copy. */
static int fill_exact(const bench_case *c, const bench_tensor_spec *spec, void *pool, int64_t copies,
                      int64_t stride, uint64_t seed) {
  int64_t pool_bytes = copies * stride;
  char *host = calloc(1, (size_t)pool_bytes);
  if (!host)
    return bench_fail("out of host memory for %s (%lld bytes)", spec->name, (long long)pool_bytes);
  uint64_t state = seed;
  int64_t limit = c->tokens > BENCH_MAX_POSITION ? c->tokens : BENCH_MAX_POSITION;
  for (int64_t set = 0; set < copies; ++set) {
    void *dst = host + set * stride;
    switch (spec->fill) {
    case BENCH_FILL_POSITIONS: {
      int64_t base = random_below(&state, limit - c->tokens + 1);
      for (int64_t t = 0; t < spec->shape[0]; ++t)
        store_index(dst, t, spec->dtype, base + t);
      break;
    }
    case BENCH_FILL_INDPTR:
      for (int64_t b = 0; b < spec->shape[0]; ++b)
        store_index(dst, b, spec->dtype, b * c->tokens / c->batch);
      break;
    case BENCH_FILL_OFFSETS:
      for (int64_t b = 0; b < spec->shape[0]; ++b)
        store_index(dst, b, spec->dtype, random_below(&state, BENCH_MAX_POSITION));
      break;
    case BENCH_FILL_COS_SIN: {
      int64_t rows = spec->shape[0], rotary_dim = spec->shape[1], half = rotary_dim / 2;
      float *cache = dst;
      for (int64_t i = 0; i < half; ++i) {
        double frequency = pow(1e4, -2.0 * (double)i / (double)rotary_dim);
        for (int64_t p = 0; p < rows; ++p) {
          cache[p * rotary_dim + i] = (float)cos((double)p * frequency);
          cache[p * rotary_dim + half + i] = (float)sin((double)p * frequency);
        }
      }
      break;
    }
    case BENCH_FILL_PAGE_INDPTR:
      for (int64_t b = 0; b < spec->shape[0]; ++b)
        store_index(dst, b, spec->dtype, b * bench_pages_per_request(c));
      break;
    case BENCH_FILL_PAGE_INDICES:
      fill_permutation(dst, spec->shape[0], &state);
      break;
    case BENCH_FILL_LAST_PAGE_LEN:
      for (int64_t b = 0; b < spec->shape[0]; ++b)
        store_index(dst, b, spec->dtype, bench_last_page_len(c));
      break;
    case BENCH_FILL_APPEND_BATCH:
      for (int64_t t = 0; t < spec->shape[0]; ++t)
        store_index(dst, t, spec->dtype, t / c->kv_len);
      break;
    case BENCH_FILL_APPEND_POSITION:
      for (int64_t t = 0; t < spec->shape[0]; ++t)
        store_index(dst, t, spec->dtype, t % c->kv_len);
      break;
    case BENCH_FILL_SEQ_LENS:
      for (int64_t b = 0; b < spec->shape[0]; ++b)
        store_index(dst, b, spec->dtype, c->kv_len);
      break;
    case BENCH_FILL_TOKEN_IDS: {
      int64_t count = 1;
      for (int d = 0; d < spec->ndim; ++d)
        count *= spec->shape[d];
      for (int64_t i = 0; i < count; ++i)
        store_index(dst, i, spec->dtype, random_below(&state, c->vocab));
      break;
    }
    case BENCH_FILL_MASK_BITS:
      fill_mask_bits(c, dst);
      break;
    case BENCH_FILL_QO_INDPTR:
      for (int64_t b = 0; b < spec->shape[0]; ++b)
        store_index(dst, b, spec->dtype, b * c->tokens);
      break;
    case BENCH_FILL_EXPERT_IDS:
      if (fill_expert_ids(dst, spec, c->experts, &state) != 0) {
        free(host);
        return -1;
      }
      break;
    case BENCH_FILL_RANDOM:
    case BENCH_FILL_NORMAL:
    case BENCH_FILL_PROBS:
      break;
    }
  }
  int rc = bench_device_upload(c->device, pool, host, (size_t)pool_bytes);
  free(host);
  return rc;
}

static void describe(const bench_case *c, bench_sets *s) {
  s->count = c->routine->describe(c, s->specs);
  s->set_bytes = 0;
  for (int i = 0; i < s->count; ++i) {
    const bench_tensor_spec *spec = &s->specs[i];
    int64_t numel = 1;
    for (int d = 0; d < spec->ndim; ++d)
      numel *= spec->shape[d];
    s->tensor_bytes[i] = numel * (int64_t)ignis_dtype_size(spec->dtype);
    s->set_stride[i] = spec->shared ? 0 : align_up(s->tensor_bytes[i], POOL_ALIGN);
    s->set_bytes += s->set_stride[i];
  }
}

int64_t bench_case_set_bytes(const bench_case *c) {
  bench_sets s;
  memset(&s, 0, sizeof s);
  describe(c, &s);
  return s.set_bytes;
}

int bench_sets_create(const bench_case *c, int64_t sets, bench_sets *out) {
  memset(out, 0, sizeof *out);
  out->c = *c;
  out->sets = sets < 1 ? 1 : sets;
  describe(c, out);
  uint64_t seed = 0x1234567ull;
  for (const char *p = c->routine->name; *p; ++p)
    seed = seed * 131 + (unsigned char)*p;
  for (int i = 0; i < out->count; ++i) {
    const bench_tensor_spec *spec = &out->specs[i];
    int64_t copies = spec->shared ? 1 : out->sets;
    int64_t stride = spec->shared ? align_up(out->tensor_bytes[i], POOL_ALIGN) : out->set_stride[i];
    int64_t pool_bytes = copies * stride;
    if (bench_device_alloc(c->device, (size_t)pool_bytes, &out->pools[i]) != 0) {
      bench_sets_destroy(out);
      return -1;
    }
    out->total_bytes += pool_bytes;
    int rc = is_tiled(spec->fill)
                 ? fill_tiled(c->device, out->pools[i], pool_bytes, spec->dtype, spec->fill,
                              seed + 7919ull * (uint64_t)i)
                 : fill_exact(c, spec, out->pools[i], copies, stride, seed + 7919ull * (uint64_t)i);
    if (rc != 0) {
      bench_sets_destroy(out);
      return -1;
    }
  }
  return bench_device_sync(c->device);
}

void bench_sets_destroy(bench_sets *s) {
  for (int i = 0; i < s->count; ++i)
    if (s->pools[i])
      bench_device_free(s->c.device, s->pools[i]);
  memset(s->pools, 0, sizeof s->pools);
}

void bench_sets_tensors(const bench_sets *s, int64_t index, ignis_tensor *tensors) {
  int64_t set = index % s->sets;
  for (int i = 0; i < s->count; ++i) {
    const bench_tensor_spec *spec = &s->specs[i];
    char *data = (char *)s->pools[i] + set * s->set_stride[i];
    ignis_tensor_init(&tensors[i], data, spec->dtype, spec->ndim, spec->shape, s->c.device);
  }
}
