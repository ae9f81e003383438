/* CPU backend of the communicator and the all-reduce ops (include/ignis/comm.h, core/comm_params.h):
 * the ranks are threads of one process or processes of one host, meeting in POSIX shared memory.
 *
 * Creation. Each rank creates a segment (shm_open under a name unique to the process, the call and
 * the rank, posix_fallocate, mmap), the ranks all-gather the names through the caller's exchange
 * (with the world size and capacity, so a rank that differs fails every rank), every rank maps every
 * peer's segment, and a second exchange round says every mapping succeeded; only then does each rank
 * unlink its name (the mappings live on), so a crashed world leaves nothing in /dev/shm.
 *
 * Segment of rank r:
 *     flags[s]   one cache line per source rank s: the last barrier epoch rank s announced to r
 *     call       r's description of its current call (pattern, dtypes, rows, hidden, algo, eps)
 *     data       r's input, capacity bytes
 *     results    TWOSHOT: the outputs of the rows r owns (residual, norm in the input dtype, fp8);
 *                3 x capacity covers the largest slice (one rank may own every row)
 * The flags are lock-free C11 atomics, which work across processes on a shared mapping.
 *
 * Barrier. Each rank counts its barriers (the epoch, never reset); at a barrier rank r stores its
 * epoch into flags[r] of every segment (release), then waits until flags[s] of its own segment
 * reaches the epoch for every s (acquire), yielding, then sleeping briefly, and giving up with
 * IGNIS_ERROR_TIMEOUT after timeout_s, naming the rank it waited for. A communicator that timed out
 * is broken (the ranks' epochs no longer agree): later calls fail at once.
 *
 * A call (two barriers, both algorithms):
 *   1. copy the input into the own data area, publish the call description; barrier;
 *   2. compare every rank's description: any difference fails every rank (all read the same
 *      descriptions), after the second barrier so the epochs stay in step;
 *   3. ONESHOT: reduce every element from every segment and write the outputs directly;
 *      TWOSHOT: rank r reduces its slice (whole rows for the fused patterns, so it can normalize
 *      them; elements for the plain all-reduce) and writes the slice's outputs into its results;
 *   4. barrier (ONESHOT: no rank overwrites its data while a peer reads it; TWOSHOT: every slice's
 *      results are ready), then TWOSHOT copies every slice's results from its owner. No third
 *      barrier: the next call writes an owner's results only after its first barrier, which every
 *      rank reaches only when it has finished copying.
 *
 * Arithmetic, the same bits on every rank and for both algorithms: the sum in f32 over the ranks in
 * order 0, 1, ..., W-1, starting from rank 0's value; the fused math as cpu/quant.c's
 * fused_add_rmsnorm_quant (norm_common.h's statistics and scaling, cpu_common.h's rounding), with
 * (gamma + weight_bias) as the weight and the fp8 output quantized from the f32 normed value.
 * TWOSHOT computes a row's fused outputs on one rank with that rank's residual_in, gamma and scale:
 * those must hold the same values on every rank, as the replicated residual stream of a
 * tensor-parallel model does. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/validate.h"
#include "cpu/cpu_backend.h"
#include "cpu/cpu_common.h"
#include "cpu/norm_common.h"

#define LINE 64
#define NAME_BYTES 64
#define CHUNK 4096 /* elements reduced at a time by the plain all-reduce */

typedef struct flag_line {
  _Alignas(LINE) _Atomic uint64_t epoch;
} flag_line;

/* What a rank is about to do; every rank must publish the same. */
typedef struct call_desc {
  int32_t pattern, algo, dtype, gamma_dtype;
  int64_t rows, hidden;
  float eps, weight_bias;
} call_desc;

typedef struct segment_header {
  flag_line flags[IGNIS_COMM_MAX_WORLD];
  call_desc call;
} segment_header;

#define DATA_OFFSET (((sizeof(segment_header) + LINE - 1) / LINE) * LINE)

typedef struct cpu_comm {
  int32_t world, rank;
  size_t capacity, data_bytes, segment_bytes;
  double timeout_s;
  uint64_t epoch;
  int broken;
  char name[NAME_BYTES];
  unsigned char *segments[IGNIS_COMM_MAX_WORLD]; /* every rank's mapping, the own one included */
} cpu_comm;

/* What each rank announces in the first exchange round. */
typedef struct hello {
  char name[NAME_BYTES];
  uint64_t world, capacity, segment_bytes;
  int32_t rank, ok;
} hello;

static size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

static segment_header *header_of(const cpu_comm *c, int32_t rank) {
  return (segment_header *)c->segments[rank];
}

static unsigned char *data_of(const cpu_comm *c, int32_t rank) {
  return c->segments[rank] + DATA_OFFSET;
}

static unsigned char *results_of(const cpu_comm *c, int32_t rank) {
  return c->segments[rank] + DATA_OFFSET + c->data_bytes;
}

static void unmap_all(cpu_comm *c) {
  for (int32_t r = 0; r < c->world; ++r)
    if (c->segments[r])
      munmap(c->segments[r], c->segment_bytes);
}

static ignis_status create_segment(cpu_comm *c) {
  static atomic_uint_fast64_t counter;
  snprintf(c->name, sizeof c->name, "/ignis-comm-%ld-%llu-%d", (long)getpid(),
           (unsigned long long)atomic_fetch_add(&counter, 1), c->rank);
  const int fd = shm_open(c->name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_comm_create: shm_open(%s) failed: %s", c->name,
                           strerror(errno));
  /* posix_fallocate, not ftruncate: a segment larger than /dev/shm can hold fails here, cleanly,
   * instead of raising SIGBUS at the first touch of a page tmpfs cannot back */
  const int reserve = posix_fallocate(fd, 0, (off_t)c->segment_bytes);
  void *mapped =
      reserve ? MAP_FAILED : mmap(NULL, c->segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int saved = reserve ? reserve : errno;
  close(fd);
  if (mapped == MAP_FAILED) {
    shm_unlink(c->name);
    return ignis_set_error(IGNIS_ERROR_INTERNAL,
                           "ignis_comm_create: %s of a %zu-byte segment (4 x config.capacity=%zu) failed: %s",
                           reserve ? "posix_fallocate" : "mmap", c->segment_bytes, c->capacity,
                           strerror(saved));
  }
  c->segments[c->rank] = mapped;
  if (!atomic_is_lock_free(&header_of(c, c->rank)->flags[0].epoch)) {
    munmap(mapped, c->segment_bytes);
    c->segments[c->rank] = NULL;
    shm_unlink(c->name);
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis_comm_create: 64-bit atomics are not lock-free here, so they cannot work "
                           "across processes");
  }
  return IGNIS_OK;
}

static ignis_status map_peer(cpu_comm *c, int32_t rank, const char *name) {
  const int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_comm_create: shm_open(%s) of rank %d failed: %s",
                           name, rank, strerror(errno));
  void *mapped = mmap(NULL, c->segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int saved = errno;
  close(fd);
  if (mapped == MAP_FAILED)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_comm_create: mmap of rank %d's segment failed: %s",
                           rank, strerror(saved));
  c->segments[rank] = mapped;
  return IGNIS_OK;
}

static ignis_status exchange(const ignis_comm_create_params *p, const void *send, void *recv, size_t bytes) {
  if (p->exchange(send, recv, bytes, p->user) != 0)
    return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT, "ignis_comm_create: exchange returned an error");
  return IGNIS_OK;
}

/* Round one's answers agree with this rank's; else the message names the first rank that differs. */
static ignis_status check_hellos(const cpu_comm *c, const hello *all) {
  for (int32_t r = 0; r < c->world; ++r) {
    const hello *h = &all[r];
    if (!h->ok)
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "ignis_comm_create: rank %d could not create its segment", r);
    if (h->rank != r || h->world != (uint64_t)c->world || h->capacity != c->capacity)
      return ignis_set_error(
          IGNIS_ERROR_INVALID_ARGUMENT,
          "ignis_comm_create: the rank in slot %d says rank %d of %llu, capacity %llu, but "
          "this is rank %d of %d, capacity %zu: every rank must give the same world_size "
          "and capacity and its own rank",
          r, h->rank, (unsigned long long)h->world, (unsigned long long)h->capacity, c->rank, c->world,
          c->capacity);
  }
  return IGNIS_OK;
}

static ignis_status connect_peers(cpu_comm *c, const ignis_comm_create_params *p) {
  hello mine = {0};
  memcpy(mine.name, c->name, sizeof mine.name);
  mine.world = (uint64_t)c->world;
  mine.capacity = c->capacity;
  mine.segment_bytes = c->segment_bytes;
  mine.rank = c->rank;
  mine.ok = c->segments[c->rank] != NULL;
  hello all[IGNIS_COMM_MAX_WORLD];
  IGNIS_TRY(exchange(p, &mine, all, sizeof mine));
  ignis_status status = check_hellos(c, all);
  for (int32_t r = 0; r < c->world && status == IGNIS_OK; ++r)
    if (r != c->rank)
      status = map_peer(c, r, all[r].name);
  /* round two: every rank learns whether every rank mapped every segment */
  const int32_t mapped = status == IGNIS_OK;
  int32_t mapped_all[IGNIS_COMM_MAX_WORLD];
  const char *saved = status != IGNIS_OK ? ignis_last_error() : NULL;
  char message[512] = "";
  if (saved)
    snprintf(message, sizeof message, "%s", saved);
  IGNIS_TRY(exchange(p, &mapped, mapped_all, sizeof mapped));
  if (status != IGNIS_OK)
    return ignis_set_error(status, "%s", message);
  for (int32_t r = 0; r < c->world; ++r)
    if (!mapped_all[r])
      return ignis_set_error(IGNIS_ERROR_INVALID_ARGUMENT,
                             "ignis_comm_create: rank %d could not map every segment", r);
  return IGNIS_OK;
}

ignis_status ignis_cpu_comm_create(const ignis_comm_create_params *p, void **state) {
  cpu_comm *c = calloc(1, sizeof *c);
  if (!c)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_comm_create: out of host memory");
  c->world = p->world_size;
  c->rank = p->rank;
  c->capacity = p->capacity;
  c->timeout_s = p->timeout_s;
  c->data_bytes = round_up(p->capacity, LINE);
  c->segment_bytes = DATA_OFFSET + c->data_bytes + 3 * c->data_bytes;
  ignis_status status = create_segment(c);
  if (c->world > 1) {
    if (status != IGNIS_OK) { /* still meet the peers, so they fail instead of waiting */
      char message[512];
      snprintf(message, sizeof message, "%s", ignis_last_error());
      connect_peers(c, p);
      status = ignis_set_error(status, "%s", message);
    } else {
      status = connect_peers(c, p);
    }
  }
  if (c->segments[c->rank])
    shm_unlink(c->name);
  if (status != IGNIS_OK) {
    unmap_all(c);
    free(c);
    return status;
  }
  *state = c;
  return IGNIS_OK;
}

void ignis_cpu_comm_destroy(void *state) {
  cpu_comm *c = state;
  if (!c)
    return;
  unmap_all(c);
  free(c);
}

ignis_status ignis_cpu_comm_check(void *state) {
  return IGNIS_OK;
}

/* ---- barrier --------------------------------------------------------------------------------- */
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static ignis_status barrier(cpu_comm *c) {
  const uint64_t epoch = ++c->epoch;
  for (int32_t r = 0; r < c->world; ++r)
    atomic_store_explicit(&header_of(c, r)->flags[c->rank].epoch, epoch, memory_order_release);
  segment_header *own = header_of(c, c->rank);
  const double start = now_s();
  for (int32_t s = 0; s < c->world; ++s) {
    for (uint64_t spins = 0; atomic_load_explicit(&own->flags[s].epoch, memory_order_acquire) < epoch;
         ++spins) {
      if (spins < 256) {
        sched_yield();
        continue;
      }
      const double waited = now_s() - start;
      if (waited > c->timeout_s) {
        c->broken = 1;
        return ignis_set_error(
            IGNIS_ERROR_TIMEOUT,
            "ignis cpu allreduce: rank %d waited %.3g s (timeout_s) for rank %d, which did "
            "not arrive",
            c->rank, waited, s);
      }
      const struct timespec pause = {0, waited < 0.01 ? 0 : 50000};
      if (pause.tv_nsec)
        nanosleep(&pause, NULL);
      else
        sched_yield();
    }
  }
  return IGNIS_OK;
}

/* ---- the call -------------------------------------------------------------------------------- */
static call_desc describe(const ignis_allreduce_params *p) {
  call_desc d;
  memset(&d, 0, sizeof d);
  d.pattern = (int32_t)p->pattern;
  d.algo = (int32_t)p->algo;
  d.dtype = (int32_t)p->dtype;
  d.gamma_dtype = (int32_t)p->gamma_dtype;
  d.rows = p->rows;
  d.hidden = p->hidden;
  d.eps = p->eps;
  d.weight_bias = p->weight_bias;
  return d;
}

static void describe_text(const call_desc *d, char *text, size_t size) {
  snprintf(text, size, "pattern %d, %s (gamma %s), %lld x %lld, algo %d, eps %g, weight_bias %g", d->pattern,
           ignis_dtype_name((ignis_dtype)d->dtype), ignis_dtype_name((ignis_dtype)d->gamma_dtype),
           (long long)d->rows, (long long)d->hidden, d->algo, d->eps, d->weight_bias);
}

/* Every rank published the same call as rank 0; all ranks read the same descriptions, so all agree. */
static ignis_status check_calls(const cpu_comm *c) {
  const call_desc *first = &header_of(c, 0)->call;
  for (int32_t r = 1; r < c->world; ++r) {
    const call_desc *d = &header_of(c, r)->call;
    if (memcmp(d, first, sizeof *d) != 0) {
      char mine[160], theirs[160];
      describe_text(d, mine, sizeof mine);
      describe_text(first, theirs, sizeof theirs);
      return ignis_set_error(
          IGNIS_ERROR_INVALID_ARGUMENT,
          "ignis cpu allreduce: rank %d called with %s but rank 0 with %s: every rank must "
          "make the same call",
          r, mine, theirs);
    }
  }
  return IGNIS_OK;
}

typedef struct scratch {
  float *sum, *term, *gamma;
} scratch;

/* sum[0..n) = the f32 sum over ranks, in rank order, of elements [begin, begin + n) of the data. */
static void reduce_span(const cpu_comm *c, ignis_dtype dtype, int64_t begin, int64_t n, scratch *s) {
  ignis_cpu_load_row(ignis_cpu_at(data_of(c, 0), dtype, begin), dtype, n, s->sum);
  for (int32_t r = 1; r < c->world; ++r) {
    ignis_cpu_load_row(ignis_cpu_at(data_of(c, r), dtype, begin), dtype, n, s->term);
    for (int64_t i = 0; i < n; ++i)
      s->sum[i] += s->term[i];
  }
}

/* Where one row's (or span's) outputs go: the caller's tensors (ONESHOT) or a results area. */
typedef struct row_outputs {
  void *output, *residual_out, *norm_out;
  uint8_t *quant_out;
} row_outputs;

/* The fused outputs of row `row` from its reduced values in s->sum. */
static void fuse_row(const ignis_allreduce_params *p, int64_t row, scratch *s, const row_outputs *o) {
  const int64_t n = p->hidden;
  float *v = s->sum;
  ignis_cpu_load_row(ignis_cpu_at(p->residual_in, p->dtype, row * n), p->dtype, n, s->term);
  for (int64_t h = 0; h < n; ++h)
    v[h] += s->term[h];
  if (o->residual_out)
    ignis_cpu_store_row(o->residual_out, p->dtype, n, v);
  float mean, rstd;
  ignis_cpu_norm_stats(IGNIS_NORM_RMS, v, n, p->eps, &mean, &rstd);
  ignis_cpu_norm_apply(v, s->gamma, NULL, n, mean, rstd, p->weight_bias);
  if (o->norm_out)
    ignis_cpu_store_row(o->norm_out, p->dtype, n, v);
  if (o->quant_out) {
    const float inv = 1.0f / *p->scale_factor;
    const float fp8_max = 448.0f;
    for (int64_t h = 0; h < n; ++h)
      o->quant_out[h] = ignis_cpu_to_fp8(IGNIS_FP8_E4M3, v[h] * inv, fp8_max);
  }
}

static int has_norm(ignis_allreduce_fusion_pattern pattern) {
  return pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM || pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8;
}

static int has_quant(ignis_allreduce_fusion_pattern pattern) {
  return pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP8 ||
         pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8;
}

/* The units a call splits among the ranks (rows, or elements for the plain all-reduce) and the
 * elements of one unit. */
static void units_of(const ignis_allreduce_params *p, int64_t *units, int64_t *unit_elems) {
  const int plain = p->pattern == IGNIS_AR_FUSION_ALLREDUCE;
  *units = plain ? p->rows * p->hidden : p->rows;
  *unit_elems = plain ? 1 : p->hidden;
}

static int64_t slice_begin(int64_t units, int32_t world, int32_t rank) {
  return units * rank / world;
}

/* The outputs of units [begin, end): the plain sum, or the fused rows, into o (addresses of unit
 * `begin`). */
static void compute_units(const cpu_comm *c, const ignis_allreduce_params *p, int64_t begin, int64_t end,
                          scratch *s, row_outputs o) {
  const size_t es = ignis_dtype_size(p->dtype);
  if (p->pattern == IGNIS_AR_FUSION_ALLREDUCE) {
    for (int64_t at = begin; at < end; at += CHUNK) {
      const int64_t n = end - at < CHUNK ? end - at : CHUNK;
      reduce_span(c, p->dtype, at, n, s);
      ignis_cpu_store_row((char *)o.output + (at - begin) * (int64_t)es, p->dtype, n, s->sum);
    }
    return;
  }
  const int64_t n = p->hidden;
  for (int64_t row = begin; row < end; ++row) {
    reduce_span(c, p->dtype, row * n, n, s);
    row_outputs at = o;
    const int64_t skip = (row - begin) * n;
    at.residual_out = o.residual_out ? (char *)o.residual_out + skip * (int64_t)es : NULL;
    at.norm_out = o.norm_out ? (char *)o.norm_out + skip * (int64_t)es : NULL;
    at.quant_out = o.quant_out ? o.quant_out + skip : NULL;
    fuse_row(p, row, s, &at);
  }
}

/* The results area of `owner` for a slice of `elems` elements: sum or residual, norm, fp8. */
static row_outputs results_layout(const cpu_comm *c, const ignis_allreduce_params *p, int32_t owner,
                                  int64_t elems) {
  const int64_t es = (int64_t)ignis_dtype_size(p->dtype);
  unsigned char *base = results_of(c, owner);
  row_outputs o = {0};
  if (p->pattern == IGNIS_AR_FUSION_ALLREDUCE) {
    o.output = base;
    return o;
  }
  o.residual_out = base;
  o.norm_out = has_norm(p->pattern) ? base + elems * es : NULL;
  o.quant_out = has_quant(p->pattern) ? base + 2 * elems * es : NULL;
  return o;
}

static void copy_if(void *dst, const void *src, size_t bytes) {
  if (dst && src)
    memcpy(dst, src, bytes);
}

/* TWOSHOT's last step: every owner's results into this rank's outputs. */
static void gather_results(const cpu_comm *c, const ignis_allreduce_params *p) {
  int64_t units, unit_elems;
  units_of(p, &units, &unit_elems);
  const int64_t es = (int64_t)ignis_dtype_size(p->dtype);
  for (int32_t owner = 0; owner < c->world; ++owner) {
    const int64_t begin = slice_begin(units, c->world, owner), end = slice_begin(units, c->world, owner + 1);
    const int64_t first = begin * unit_elems, elems = (end - begin) * unit_elems;
    if (elems == 0)
      continue;
    const row_outputs r = results_layout(c, p, owner, elems);
    copy_if(p->output ? (char *)p->output + first * es : NULL, r.output, (size_t)(elems * es));
    copy_if(p->residual_out ? (char *)p->residual_out + first * es : NULL, r.residual_out,
            (size_t)(elems * es));
    copy_if(p->norm_out ? (char *)p->norm_out + first * es : NULL, r.norm_out, (size_t)(elems * es));
    copy_if(p->quant_out ? (uint8_t *)p->quant_out + first : NULL, r.quant_out, (size_t)elems);
  }
}

static void run_algorithm(const cpu_comm *c, const ignis_allreduce_params *p, scratch *s) {
  int64_t units, unit_elems;
  units_of(p, &units, &unit_elems);
  if (p->algo == IGNIS_ALLREDUCE_ONESHOT) {
    const row_outputs o = {p->output, p->residual_out, p->norm_out, p->quant_out};
    compute_units(c, p, 0, units, s, o);
    return;
  }
  const int64_t begin = slice_begin(units, c->world, c->rank),
                end = slice_begin(units, c->world, c->rank + 1);
  compute_units(c, p, begin, end, s, results_layout(c, p, c->rank, (end - begin) * unit_elems));
}

ignis_status ignis_cpu_allreduce(const ignis_allreduce_params *p, void *stream) {
  cpu_comm *c = p->state;
  if (c->broken)
    return ignis_set_error(
        IGNIS_ERROR_TIMEOUT,
        "ignis cpu allreduce: an earlier call of this communicator timed out, so its ranks "
        "are out of step: destroy it and create another");
  if (p->algo != IGNIS_ALLREDUCE_ONESHOT && p->algo != IGNIS_ALLREDUCE_TWOSHOT)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "ignis cpu allreduce: algo=%d is not ONESHOT or TWOSHOT",
                           (int)p->algo);
  const int64_t width = p->pattern == IGNIS_AR_FUSION_ALLREDUCE ? CHUNK : p->hidden;
  scratch s;
  s.sum = malloc((size_t)width * 3 * sizeof(float));
  if (!s.sum)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis cpu allreduce: out of host memory for a row buffer");
  s.term = s.sum + width;
  s.gamma = s.term + width;
  if (p->gamma)
    ignis_cpu_load_row(p->gamma, p->gamma_dtype, p->hidden, s.gamma);

  memcpy(data_of(c, c->rank), p->input, (size_t)(p->rows * p->hidden) * ignis_dtype_size(p->dtype));
  header_of(c, c->rank)->call = describe(p);
  ignis_status status = barrier(c);
  if (status == IGNIS_OK) {
    /* a mismatch still takes the second barrier, so every rank's epoch stays in step; its message
     * is kept now, as a fast peer may publish its next call once past that barrier */
    const ignis_status agreed = check_calls(c);
    char mismatch[512] = "";
    if (agreed == IGNIS_OK)
      run_algorithm(c, p, &s);
    else
      snprintf(mismatch, sizeof mismatch, "%s", ignis_last_error());
    status = barrier(c);
    if (status == IGNIS_OK && agreed != IGNIS_OK)
      status = ignis_set_error(agreed, "%s", mismatch);
    else if (status == IGNIS_OK && p->algo == IGNIS_ALLREDUCE_TWOSHOT)
      gather_results(c, p);
  }
  free(s.sum);
  return status;
}
