/* Tests of the communicator, all-reduce and fused all-reduce (include/ignis/comm.h) against an fp64
 * host reference.
 *
 * Worlds. A world of W ranks runs as W threads or W forked processes; the exchange callback is an
 * all-gather over a struct in anonymous shared memory (a process-shared pthread barrier and a
 * buffer), so the same code serves both. Each rank runs a list of cases on one communicator (so the
 * calls repeat and the epochs advance): per case it fills its inputs (its own input, the residual
 * and gamma every rank shares), calls ONESHOT, TWOSHOT and AUTO into poisoned outputs, checks that
 * all three (and repeated calls) give the same bytes, publishes them to the world, and checks they
 * equal rank 0's; rank 0 also checks them against the fp64 reference of every rank's inputs. Some
 * cases start the odd ranks' tensors one element into their buffers, so that on CUDA those ranks
 * take the kernels' element path beside the even ranks' vector path, and must still agree bit for
 * bit. Ranks
 * record their checks in the world's shared reports, which the parent turns into test checks.
 *
 * Reference: a = sum over ranks of the rounded inputs; pattern 0 output = a; the fused patterns
 * s = a + residual_in, n = s / sqrt(mean(s^2) + eps) * (gamma + weight_bias), quant = fp8(n / scale)
 * saturated at 448. Tolerances: rtol of the dtype times (|ref| + 1) (values of order one); fp8
 * within 13% (a step of e4m3) plus its subnormal step. Where bits are known exactly they are
 * checked exactly: world 1 against ignis_fused_add_rmsnorm_quant, and f32 quant_out against the
 * conversion of its f32 norm_out.
 *
 * Also: a rank that never calls (the others time out), a call that differs across ranks (every rank
 * fails, and the next call works), creation errors, and bad input (status, message naming the
 * parameter, outputs untouched). With CUDA present, a world of forked processes on device 0 runs a
 * few cases; UNSUPPORTED (no CUDA communicator in this build) is a noted skip. The forked worlds
 * run first, before the parent touches CUDA. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define EXCHANGE_SLOT 1024
#define EPS 1e-6

/* ---- worlds -------------------------------------------------------------------------------- */
typedef struct rank_report {
  int64_t passed, failed;
  int skipped;
  char first[600];
} rank_report;

typedef struct world {
  int size;
  pthread_barrier_t barrier; /* process-shared */
  unsigned char exchange[IGNIS_COMM_MAX_WORLD * EXCHANGE_SLOT];
  rank_report reports[IGNIS_COMM_MAX_WORLD];
  size_t slot_bytes;
  unsigned char *slots; /* size * slot_bytes, in the same shared mapping */
} world;

struct rank_ctx;
typedef void (*rank_body)(struct rank_ctx *r);

typedef struct comm_case {
  int pattern;
  ignis_dtype dtype, gamma_dtype;
  int64_t rows, hidden;
  int inplace;       /* pattern 0: output is input; patterns 1, 4: norm_out is input */
  int residual_mode; /* 0 residual_out NULL, 1 its own tensor, 2 residual_in itself, 3 input itself */
  int plain;         /* pattern 0 through ignis_allreduce */
  int misalign;      /* odd ranks' tensors start one element into their buffers (no 16-byte
                        alignment: the CUDA kernels' element path beside even ranks' vector path) */
  double weight_bias;
  float scale;
  int repeats;
} comm_case;

typedef struct rank_ctx {
  world *w;
  int rank;
  h_backend backend;
  const comm_case *cases;
  int count;
  size_t capacity;
} rank_ctx;

static void report(rank_ctx *r, int ok, const char *format, ...) H_PRINTF_LIKE(3, 4);
static void report(rank_ctx *r, int ok, const char *format, ...) {
  rank_report *rep = &r->w->reports[r->rank];
  if (ok) {
    rep->passed++;
    return;
  }
  if (rep->failed++ == 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(rep->first, sizeof rep->first, format, args);
    va_end(args);
  }
}

static int world_exchange(const void *send, void *recv, size_t bytes, void *user) {
  rank_ctx *r = user;
  world *w = r->w;
  if (bytes > EXCHANGE_SLOT)
    return 1;
  memcpy(w->exchange + (size_t)r->rank * bytes, send, bytes);
  pthread_barrier_wait(&w->barrier);
  memcpy(recv, w->exchange, bytes * (size_t)w->size);
  pthread_barrier_wait(&w->barrier);
  return 0;
}

static world *world_make(int size, size_t slot_bytes) {
  const size_t head = (sizeof(world) + 255) / 256 * 256;
  void *mem =
      mmap(NULL, head + (size_t)size * slot_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    perror("mmap");
    exit(2);
  }
  world *w = mem;
  w->size = size;
  w->slot_bytes = slot_bytes;
  w->slots = (unsigned char *)mem + head;
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&w->barrier, &attr, (unsigned)size);
  pthread_barrierattr_destroy(&attr);
  return w;
}

static void world_free(world *w) {
  pthread_barrier_destroy(&w->barrier);
  munmap(w, (sizeof(world) + 255) / 256 * 256 + (size_t)w->size * w->slot_bytes);
}

typedef struct thread_arg {
  rank_ctx ctx;
  rank_body body;
} thread_arg;

static void *thread_main(void *p) {
  thread_arg *a = p;
  a->body(&a->ctx);
  return NULL;
}

/* Run body on every rank of w, as threads or forked processes; returns when all are done. */
static void world_run(world *w, int use_fork, rank_body body, rank_ctx base) {
  thread_arg args[IGNIS_COMM_MAX_WORLD];
  pthread_t threads[IGNIS_COMM_MAX_WORLD];
  pid_t pids[IGNIS_COMM_MAX_WORLD];
  for (int r = 0; r < w->size; ++r) {
    args[r].ctx = base;
    args[r].ctx.w = w;
    args[r].ctx.rank = r;
    args[r].body = body;
    if (use_fork) {
      pids[r] = fork();
      if (pids[r] == 0) {
        body(&args[r].ctx);
        _exit(0);
      }
    } else {
      pthread_create(&threads[r], NULL, thread_main, &args[r]);
    }
  }
  for (int r = 0; r < w->size; ++r) {
    if (use_fork) {
      int status = 0;
      waitpid(pids[r], &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        rank_ctx ctx = args[r].ctx;
        report(&ctx, 0, "rank %d's process ended abnormally (status %d)", r, status);
      }
    } else {
      pthread_join(threads[r], NULL);
    }
  }
}

/* ---- inputs, outputs, reference ------------------------------------------------------------ */
static uint64_t case_seed(const comm_case *c) {
  return (uint64_t)c->pattern * 1000003u + (uint64_t)c->dtype * 7919u + (uint64_t)c->rows * 131u +
         (uint64_t)c->hidden * 17u + (uint64_t)c->residual_mode;
}

static double input_value(const comm_case *c, int rank, int64_t i) {
  h_rng rng = h_rng_make(case_seed(c) * 64 + (uint64_t)rank + 1);
  rng.state += (uint64_t)i * 0x9E3779B97F4A7C15ull;
  return h_round_to(c->dtype, h_rng_uniform(&rng, -1.0, 1.0));
}

static double residual_value(const comm_case *c, int64_t i) {
  return input_value(c, IGNIS_COMM_MAX_WORLD + 1, i);
}

static double gamma_value(const comm_case *c, int64_t h) {
  h_rng rng = h_rng_make(case_seed(c) + 77 + (uint64_t)h * 0x9E3779B97F4A7C15ull);
  return h_round_to(c->gamma_dtype, h_rng_uniform(&rng, 0.5, 1.5));
}

static int has_norm(int pattern) {
  return pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM || pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8;
}

static int has_quant(int pattern) {
  return pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP8 ||
         pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8;
}

/* The tensors of one rank's call. */
typedef struct rank_tensors {
  h_buf input, output, residual, residual_out, norm_out, quant_out, gamma, scale;
  int64_t shift; /* elements before each tensor's first (comm_case.misalign), scale's aside */
} rank_tensors;

static void tensors_make(const comm_case *c, h_backend b, int rank, rank_tensors *t) {
  memset(t, 0, sizeof *t);
  t->shift = c->misalign && rank % 2 ? 1 : 0;
  const int64_t n = c->rows * c->hidden + t->shift;
  t->input = h_buf_alloc(b, c->dtype, n);
  if (c->pattern == 0) {
    t->output = h_buf_alloc(b, c->dtype, n);
    return;
  }
  t->residual = h_buf_alloc(b, c->dtype, n);
  t->residual_out = h_buf_alloc(b, c->dtype, n);
  t->norm_out = h_buf_alloc(b, c->dtype, n);
  t->quant_out = h_buf_alloc(b, IGNIS_FP8_E4M3, n);
  t->gamma = h_buf_alloc(b, c->gamma_dtype, c->hidden + t->shift);
  t->scale = h_buf_alloc(b, IGNIS_F32, 1);
}

static void tensors_free(rank_tensors *t) {
  h_buf *all[] = {&t->input,    &t->output,    &t->residual, &t->residual_out,
                  &t->norm_out, &t->quant_out, &t->gamma,    &t->scale};
  for (int i = 0; i < 8; ++i)
    if (all[i]->host)
      h_buf_free(all[i]);
}

/* Inputs filled, outputs poisoned, all uploaded. */
static void tensors_fill(const comm_case *c, int rank, rank_tensors *t) {
  const int64_t n = c->rows * c->hidden, at = t->shift;
  h_buf_poison(&t->input);
  for (int64_t i = 0; i < n; ++i)
    h_set(&t->input, at + i, input_value(c, rank, i));
  h_buf_upload(&t->input);
  if (c->pattern == 0) {
    h_buf_poison(&t->output);
    h_buf_upload(&t->output);
    return;
  }
  h_buf_poison(&t->residual);
  h_buf_poison(&t->gamma);
  for (int64_t i = 0; i < n; ++i)
    h_set(&t->residual, at + i, residual_value(c, i));
  for (int64_t h = 0; h < c->hidden; ++h)
    h_set(&t->gamma, at + h, gamma_value(c, h));
  h_set(&t->scale, 0, c->scale);
  h_buf *outs[] = {&t->residual_out, &t->norm_out, &t->quant_out};
  for (int i = 0; i < 3; ++i)
    h_buf_poison(outs[i]);
  h_buf *all[] = {&t->residual, &t->gamma, &t->scale, &t->residual_out, &t->norm_out, &t->quant_out};
  for (int i = 0; i < 6; ++i)
    h_buf_upload(all[i]);
}

static ignis_tensor view2_at(const h_buf *b, int64_t shift, int64_t rows, int64_t hidden) {
  const int64_t shape[2] = {rows, hidden};
  return h_view(b, shift, 2, shape, NULL);
}

static ignis_tensor view2(const h_buf *b, int64_t rows, int64_t hidden) {
  return view2_at(b, 0, rows, hidden);
}

static ignis_status call_case(ignis_comm *comm, const comm_case *c, rank_tensors *t,
                              ignis_allreduce_algo algo) {
  const int64_t at = t->shift;
  ignis_tensor input = view2_at(&t->input, at, c->rows, c->hidden);
  if (c->pattern == 0) {
    ignis_tensor output = c->inplace ? input : view2_at(&t->output, at, c->rows, c->hidden);
    if (c->plain)
      return ignis_allreduce(comm, &input, &output, algo, NULL);
    ignis_allreduce_fusion_args a = IGNIS_ALLREDUCE_FUSION_ARGS_INIT;
    a.algo = algo;
    a.input = &input;
    a.output = &output;
    return ignis_allreduce_fusion(comm, &a, NULL);
  }
  ignis_tensor residual = view2_at(&t->residual, at, c->rows, c->hidden);
  ignis_tensor residual_out = c->residual_mode == 2   ? residual
                              : c->residual_mode == 3 ? input
                                                      : view2_at(&t->residual_out, at, c->rows, c->hidden);
  ignis_tensor norm_out = c->inplace ? input : view2_at(&t->norm_out, at, c->rows, c->hidden);
  ignis_tensor quant_out = view2_at(&t->quant_out, at, c->rows, c->hidden);
  const int64_t hidden = c->hidden, one = 1;
  ignis_tensor gamma = h_view(&t->gamma, at, 1, &hidden, NULL);
  ignis_tensor scale = h_view(&t->scale, 0, 1, &one, NULL);
  ignis_allreduce_fusion_args a = IGNIS_ALLREDUCE_FUSION_ARGS_INIT;
  a.pattern = (ignis_allreduce_fusion_pattern)c->pattern;
  a.algo = algo;
  a.input = &input;
  a.residual_in = &residual;
  a.residual_out = c->residual_mode ? &residual_out : NULL;
  a.norm_out = has_norm(c->pattern) ? &norm_out : NULL;
  a.quant_out = has_quant(c->pattern) ? &quant_out : NULL;
  a.rms_gamma = &gamma;
  a.scale_factor = has_quant(c->pattern) ? &scale : NULL;
  a.rms_eps = EPS;
  a.weight_bias = c->weight_bias;
  return ignis_allreduce_fusion(comm, &a, NULL);
}

/* The outputs a call wrote, downloaded: the buffers that hold them. */
static int written_buffers(const comm_case *c, rank_tensors *t, h_buf **out) {
  int k = 0;
  if (c->pattern == 0) {
    out[k++] = c->inplace ? &t->input : &t->output;
    return k;
  }
  if (c->residual_mode)
    out[k++] = c->residual_mode == 2 ? &t->residual : c->residual_mode == 3 ? &t->input : &t->residual_out;
  if (has_norm(c->pattern))
    out[k++] = c->inplace ? &t->input : &t->norm_out;
  if (has_quant(c->pattern))
    out[k++] = &t->quant_out;
  return k;
}

/* The written outputs' bytes, concatenated into blob; returns the length. */
static size_t collect(const comm_case *c, rank_tensors *t, unsigned char *blob) {
  h_buf *bufs[3];
  const int k = written_buffers(c, t, bufs);
  size_t at = 0;
  for (int i = 0; i < k; ++i) {
    h_buf_download(bufs[i]);
    const size_t skip = (size_t)t->shift * bufs[i]->elem_size,
                 bytes = (size_t)bufs[i]->count * bufs[i]->elem_size - skip;
    memcpy(blob + at, (const unsigned char *)bufs[i]->host + skip, bytes);
    at += bytes;
  }
  return at;
}

static double rtol_of(ignis_dtype d) {
  return d == IGNIS_BF16 ? 1e-2 : d == IGNIS_F16 ? 1e-3 : 1e-5;
}

static double load_as(const unsigned char *p, ignis_dtype d, int64_t i) {
  switch (d) {
  case IGNIS_F16:
    return ignis_f16_to_f32(((const uint16_t *)p)[i]);
  case IGNIS_BF16:
    return ignis_bf16_to_f32(((const uint16_t *)p)[i]);
  case IGNIS_FP8_E4M3:
    return ignis_fp8_e4m3_to_f32(p[i]);
  default:
    return ((const float *)p)[i];
  }
}

/* Rank 0's check of a blob against the fp64 reference over every rank's inputs. */
static void check_reference(rank_ctx *r, const comm_case *c, int world_size, const unsigned char *blob,
                            const char *name) {
  const int64_t n = c->rows * c->hidden, H = c->hidden;
  const size_t es = ignis_dtype_size(c->dtype);
  const double rtol = rtol_of(c->dtype);
  double *s = malloc(sizeof(double) * (size_t)H);
  double worst[3] = {0, 0, 0};
  int64_t bad[3] = {-1, -1, -1};
  const unsigned char *residual_at = blob;
  const unsigned char *norm_at = blob + (c->residual_mode ? n * (int64_t)es : 0);
  const unsigned char *quant_at = norm_at + (has_norm(c->pattern) ? n * (int64_t)es : 0);
  for (int64_t row = 0; row < c->rows; ++row) {
    double ms = 0;
    for (int64_t h = 0; h < H; ++h) {
      double a = 0;
      for (int k = 0; k < world_size; ++k)
        a += input_value(c, k, row * H + h);
      s[h] = c->pattern == 0 ? a : a + residual_value(c, row * H + h);
      ms += s[h] * s[h];
    }
    const double rstd = 1.0 / sqrt(ms / (double)H + EPS);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t i = row * H + h;
      if (c->pattern == 0 || c->residual_mode) {
        const double e = fabs(load_as(residual_at, c->dtype, i) - s[h]) / (rtol * (fabs(s[h]) + 1));
        if (!(e <= worst[0]))
          worst[0] = e, bad[0] = i;
      }
      if (c->pattern == 0)
        continue;
      const double nv = s[h] * rstd * (gamma_value(c, h) + c->weight_bias);
      if (has_norm(c->pattern)) {
        const double e = fabs(load_as(norm_at, c->dtype, i) - nv) / (rtol * (fabs(nv) + 1));
        if (!(e <= worst[1]))
          worst[1] = e, bad[1] = i;
      }
      if (has_quant(c->pattern)) {
        const double q = fmin(fmax(nv / c->scale, -448.0), 448.0);
        const double e =
            fabs(load_as(quant_at, IGNIS_FP8_E4M3, i) - q) / (0.13 * fabs(q) + 1.0 / 512 + 1e-4 / c->scale);
        if (!(e <= worst[2]))
          worst[2] = e, bad[2] = i;
      }
    }
  }
  static const char *what[3] = {"sum/residual_out", "norm_out", "quant_out"};
  for (int k = 0; k < 3; ++k)
    report(r, worst[k] <= 1.0, "%s: %s error/tolerance %.3g at element %lld", name, what[k], worst[k],
           (long long)bad[k]);
  /* f32: quant_out is exactly the fp8 of norm_out / scale (the f32 n itself) */
  if (c->dtype == IGNIS_F32 && c->pattern == IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8) {
    int64_t mismatch = 0;
    const float inv = 1.0f / c->scale;
    for (int64_t i = 0; i < n; ++i) {
      const float v = ((const float *)norm_at)[i] * inv;
      mismatch += quant_at[i] != ignis_f32_to_fp8_e4m3(v > 448.0f ? 448.0f : v < -448.0f ? -448.0f : v);
    }
    report(r, mismatch == 0, "%s: %lld quant_out bytes differ from fp8(norm_out / scale)", name,
           (long long)mismatch);
  }
  free(s);
}

static void case_name(const comm_case *c, int world_size, char *text, size_t size) {
  snprintf(text, size, "W%d pattern %d %s gamma %s %lldx%lld%s res%d%s%s wb%g scale %g", world_size,
           c->pattern, ignis_dtype_name(c->dtype), ignis_dtype_name(c->gamma_dtype), (long long)c->rows,
           (long long)c->hidden, c->inplace ? " inplace" : "", c->residual_mode, c->plain ? " plain" : "",
           c->misalign ? " misaligned odd ranks" : "", c->weight_bias, c->scale);
}

static void run_case(rank_ctx *r, ignis_comm *comm, const comm_case *c) {
  char name[200];
  case_name(c, r->w->size, name, sizeof name);
  rank_tensors t;
  tensors_make(c, r->backend, r->rank, &t);
  const size_t blob_bytes = (size_t)(c->rows * c->hidden) * 9 + 16;
  unsigned char *first = malloc(blob_bytes), *got = malloc(blob_bytes);
  size_t first_len = 0;
  const ignis_allreduce_algo algos[3] = {IGNIS_ALLREDUCE_ONESHOT, IGNIS_ALLREDUCE_TWOSHOT,
                                         IGNIS_ALLREDUCE_AUTO};
  for (int a = 0; a < 3; ++a) {
    for (int rep = 0; rep < (a < 2 ? c->repeats : 1); ++rep) {
      tensors_fill(c, r->rank, &t);
      const ignis_status st = call_case(comm, c, &t, algos[a]);
      report(r, st == IGNIS_OK, "%s algo %d: status %s: %s", name, (int)algos[a], ignis_status_string(st),
             ignis_last_error());
      const size_t len = collect(c, &t, a == 0 && rep == 0 ? first : got);
      if (a == 0 && rep == 0)
        first_len = len;
      else
        report(r, len == first_len && memcmp(first, got, len) == 0,
               "%s: algo %d call %d differs from the first ONESHOT call", name, (int)algos[a], rep);
    }
  }
  /* every rank the same bytes */
  memcpy(r->w->slots + (size_t)r->rank * r->w->slot_bytes, first, first_len);
  pthread_barrier_wait(&r->w->barrier);
  report(r, memcmp(r->w->slots, first, first_len) == 0, "%s: rank %d's outputs differ from rank 0's", name,
         r->rank);
  if (r->rank == 0)
    check_reference(r, c, r->w->size, first, name);
  pthread_barrier_wait(&r->w->barrier);
  free(first);
  free(got);
  tensors_free(&t);
}

static ignis_comm_config config_for(const rank_ctx *r, size_t capacity, double timeout_s) {
  ignis_comm_config cfg = IGNIS_COMM_CONFIG_INIT;
  cfg.world_size = r->w->size;
  cfg.rank = r->rank;
  cfg.device = h_backend_device(r->backend);
  cfg.capacity = capacity;
  cfg.timeout_s = timeout_s;
  return cfg;
}

static void body_cases(rank_ctx *r) {
  if (r->backend == H_CUDA && ignis_cuda_device_count() == 0) {
    r->w->reports[r->rank].skipped = 1;
    return;
  }
  const ignis_comm_config cfg = config_for(r, r->capacity, 30.0);
  ignis_comm *comm = NULL;
  const ignis_status st = ignis_comm_create(&cfg, world_exchange, r, &comm);
  if (st == IGNIS_ERROR_UNSUPPORTED && r->backend == H_CUDA) {
    r->w->reports[r->rank].skipped = 1;
    snprintf(r->w->reports[r->rank].first, sizeof r->w->reports[r->rank].first, "%s", ignis_last_error());
    return;
  }
  report(r, st == IGNIS_OK, "ignis_comm_create: %s: %s", ignis_status_string(st), ignis_last_error());
  if (st != IGNIS_OK)
    return;
  int32_t world_size = 0, rank = -1;
  size_t capacity = 0;
  report(r,
         ignis_comm_info(comm, &world_size, &rank, &capacity) == IGNIS_OK && world_size == r->w->size &&
             rank == r->rank && capacity == r->capacity,
         "ignis_comm_info");
  for (int i = 0; i < r->count; ++i)
    run_case(r, comm, &r->cases[i]);
  report(r, ignis_comm_check(comm) == IGNIS_OK, "ignis_comm_check");
  pthread_barrier_wait(&r->w->barrier); /* nobody destroys while a peer may still read */
  ignis_comm_destroy(comm);
}

/* ---- case lists ------------------------------------------------------------------------------ */
#define MAX_CASES 64

static int make_cases(int world_size, int quick, comm_case *out) {
  static const int patterns[4] = {0, 1, 2, 4};
  static const ignis_dtype dtypes[3] = {IGNIS_F16, IGNIS_BF16, IGNIS_F32};
  static const int64_t rows_big[] = {1, 300, 7, 64, 2, 17}, rows_small[] = {1, 33, 7, 5, 2, 17};
  static const int64_t hiddens_big[] = {4096, 2056, 100, 1, 4096, 8},
                       hiddens_small[] = {2056, 100, 8, 1, 4096, 3};
  int k = 0;
  for (int p = 0; p < 4; ++p) {
    for (int d = 0; d < 3; ++d) {
      if (quick && d != (p % 3))
        continue;
      const int i = p * 3 + d + world_size;
      comm_case c = {0};
      c.pattern = patterns[p];
      c.dtype = dtypes[d];
      c.gamma_dtype = i % 2 ? IGNIS_F32 : c.dtype;
      c.rows = world_size <= 2 ? rows_big[i % 6] : rows_small[i % 6];
      c.hidden = world_size <= 2 ? hiddens_big[(i / 2) % 6] : hiddens_small[(i / 2) % 6];
      if (c.rows * c.hidden > 300 * 4096)
        c.hidden = 4096;
      c.inplace = (c.pattern == 0 || has_norm(c.pattern)) && i % 2 == 0;
      c.residual_mode = c.pattern == 0 ? 0 : i % 4;
      if (c.residual_mode == 3) /* residual_out is input: norm_out cannot be too */
        c.inplace = 0;
      c.plain = c.pattern == 0 && (i / 2) % 2 == 0;
      c.weight_bias = i % 4 == 3 ? 1.0 : 0.0;
      c.scale = i % 5 == 0 ? 0.01f : 0.75f;
      c.repeats = i % 4 == 1 ? 4 : 1;
      c.misalign = i % 3 == 1;
      out[k++] = c;
    }
  }
  if (world_size == 2) { /* a row of whole 16-byte groups on rank 0's vector path, rank 1's element path */
    comm_case c = {0};
    c.pattern = IGNIS_AR_FUSION_RESIDUAL_RMSNORM;
    c.dtype = c.gamma_dtype = IGNIS_BF16;
    c.rows = 64;
    c.hidden = 4096;
    c.residual_mode = 1;
    c.misalign = 1;
    c.scale = 1.0f;
    c.repeats = 1;
    out[k++] = c;
  }
  return k;
}

static size_t cases_capacity(const comm_case *cases, int count) {
  size_t most = 1;
  for (int i = 0; i < count; ++i) {
    const size_t b = (size_t)(cases[i].rows * cases[i].hidden) * ignis_dtype_size(cases[i].dtype);
    most = b > most ? b : most;
  }
  return most;
}

static size_t cases_slot(const comm_case *cases, int count) {
  size_t most = 16;
  for (int i = 0; i < count; ++i) {
    const size_t b = (size_t)(cases[i].rows * cases[i].hidden) * 9 + 16;
    most = b > most ? b : most;
  }
  return most;
}

/* A finished world's reports, kept until the harness can count them (after the forks). */
typedef struct world_result {
  char what[96];
  int size;
  rank_report reports[IGNIS_COMM_MAX_WORLD];
} world_result;

static void run_case_world(int size, int use_fork, h_backend backend, const comm_case *cases, int count,
                           world_result *out) {
  world *w = world_make(size, cases_slot(cases, count));
  rank_ctx base = {0};
  base.backend = backend;
  base.cases = cases;
  base.count = count;
  base.capacity = cases_capacity(cases, count);
  world_run(w, use_fork, body_cases, base);
  snprintf(out->what, sizeof out->what, "%s world of %d %s, %d cases", h_backend_name(backend), size,
           use_fork ? "processes" : "threads", count);
  out->size = size;
  memcpy(out->reports, w->reports, sizeof out->reports);
  world_free(w);
}

static void count_world(const world_result *res) {
  h_case("%s", res->what);
  int64_t passed = 0;
  for (int r = 0; r < res->size; ++r) {
    const rank_report *rep = &res->reports[r];
    if (rep->skipped) {
      printf("  note: %s, rank %d skipped: %s\n", res->what, r,
             rep->first[0] ? rep->first : "no CUDA device");
      continue;
    }
    passed += rep->passed;
    CHECKF(rep->failed == 0, "rank %d: %lld of %lld checks failed; first: %s", r, (long long)rep->failed,
           (long long)(rep->failed + rep->passed), rep->first);
  }
  printf("  %s: %lld rank checks passed\n", res->what, (long long)passed);
}

/* ---- a rank that never calls; a call that differs; creation that differs -------------------- */
static void body_timeout(rank_ctx *r) {
  const ignis_comm_config cfg = config_for(r, 4096, 0.5);
  ignis_comm *comm = NULL;
  const ignis_status st = ignis_comm_create(&cfg, world_exchange, r, &comm);
  report(r, st == IGNIS_OK, "create: %s", ignis_last_error());
  if (r->rank != r->w->size - 1 && comm) {
    h_buf b = h_buf_alloc(H_CPU, IGNIS_F32, 64);
    ignis_tensor t = view2(&b, 1, 64);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ignis_status got = ignis_allreduce(comm, &t, &t, IGNIS_ALLREDUCE_ONESHOT, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double took = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    char needle[32];
    snprintf(needle, sizeof needle, "rank %d", r->w->size - 1);
    report(r, got == IGNIS_ERROR_TIMEOUT && strstr(ignis_last_error(), needle) != NULL,
           "a missing peer: status %s, message '%s'", ignis_status_string(got), ignis_last_error());
    report(r, took >= 0.45 && took < 5.0, "the timeout took %.3f s for timeout_s 0.5", took);
    got = ignis_allreduce(comm, &t, &t, IGNIS_ALLREDUCE_TWOSHOT, NULL);
    report(r, got == IGNIS_ERROR_TIMEOUT, "a call after a timeout: %s", ignis_status_string(got));
    h_buf_free(&b);
  }
  pthread_barrier_wait(&r->w->barrier);
  ignis_comm_destroy(comm);
}

static void body_mismatch(rank_ctx *r) {
  const ignis_comm_config cfg = config_for(r, 1 << 16, 10.0);
  ignis_comm *comm = NULL;
  ignis_comm_create(&cfg, world_exchange, r, &comm);
  report(r, comm != NULL, "create: %s", ignis_last_error());
  if (!comm)
    return;
  h_buf b = h_buf_alloc(H_CPU, IGNIS_BF16, 400);
  for (int round = 0; round < 3; ++round) {
    const int64_t rows = round < 2 && r->rank == 1 ? 3 : 4;
    for (int64_t i = 0; i < 400; ++i)
      h_set(&b, i, (double)(r->rank + 1));
    ignis_tensor t = view2(&b, rows, 100);
    const ignis_status got =
        ignis_allreduce(comm, &t, &t, round == 1 ? IGNIS_ALLREDUCE_TWOSHOT : IGNIS_ALLREDUCE_ONESHOT, NULL);
    if (round < 2) {
      report(r, got == IGNIS_ERROR_INVALID_ARGUMENT && strstr(ignis_last_error(), "same call") != NULL,
             "round %d, shapes differ across ranks: status %s, '%s'", round, ignis_status_string(got),
             ignis_last_error());
    } else {
      double expect = 0;
      for (int k = 0; k < r->w->size; ++k)
        expect += k + 1;
      report(r, got == IGNIS_OK && h_get(&b, 0) == expect && h_get(&b, 399) == expect,
             "the call after a mismatch: %s, %g (want %g)", ignis_status_string(got), h_get(&b, 0), expect);
    }
  }
  h_buf_free(&b);
  pthread_barrier_wait(&r->w->barrier);
  ignis_comm_destroy(comm);
}

/* Many calls back to back on one communicator, algorithms alternating and inputs changing every
 * call (small integers: exact sums), so a rank that runs ahead into its next call while a peer
 * still reads the last one would show up as a wrong sum. */
static void body_stress(rank_ctx *r) {
  enum { CALLS = 300, N = 1031 };
  const ignis_comm_config cfg = config_for(r, N * 4, 10.0);
  ignis_comm *comm = NULL;
  ignis_comm_create(&cfg, world_exchange, r, &comm);
  report(r, comm != NULL, "create: %s", ignis_last_error());
  if (!comm)
    return;
  h_buf in = h_buf_alloc(H_CPU, IGNIS_F32, N), out = h_buf_alloc(H_CPU, IGNIS_F32, N);
  ignis_tensor vin = view2(&in, 1, N), vout = view2(&out, 1, N);
  int64_t wrong = 0, failed = 0;
  for (int call = 0; call < CALLS; ++call) {
    for (int64_t i = 0; i < N; ++i)
      h_set(&in, i, (double)(r->rank + call % 7 + i % 3));
    const ignis_allreduce_algo algo = call % 3 == 0 ? IGNIS_ALLREDUCE_ONESHOT : IGNIS_ALLREDUCE_TWOSHOT;
    failed += ignis_allreduce(comm, &vin, &vout, algo, NULL) != IGNIS_OK;
    const int W = r->w->size;
    for (int64_t i = 0; i < N; ++i)
      wrong += h_get(&out, i) != (double)(W * (W - 1) / 2 + W * (call % 7 + i % 3));
  }
  report(r, failed == 0 && wrong == 0, "%d calls: %lld failed, %lld wrong sums", CALLS, (long long)failed,
         (long long)wrong);
  h_buf_free(&in);
  h_buf_free(&out);
  pthread_barrier_wait(&r->w->barrier);
  ignis_comm_destroy(comm);
}

static void body_create_mismatch(rank_ctx *r) {
  const ignis_comm_config cfg = config_for(r, r->rank == 1 ? 8192 : 4096, 10.0);
  ignis_comm *comm = NULL;
  const ignis_status got = ignis_comm_create(&cfg, world_exchange, r, &comm);
  report(r, got == IGNIS_ERROR_INVALID_ARGUMENT && comm == NULL && strstr(ignis_last_error(), "capacity"),
         "capacities differ: %s, '%s'", ignis_status_string(got), ignis_last_error());
}

static void run_special(int size, int use_fork, rank_body body, const char *what) {
  world *w = world_make(size, 16);
  rank_ctx base = {0};
  base.backend = H_CPU;
  world_run(w, use_fork, body, base);
  world_result res;
  snprintf(res.what, sizeof res.what, "%s (world of %d)", what, size);
  res.size = size;
  memcpy(res.reports, w->reports, sizeof res.reports);
  world_free(w);
  count_world(&res);
}

/* ---- world of one: exact agreement with ignis_fused_add_rmsnorm_quant -------------------------- */
static void test_world1_matches_fused_quant(void) {
  ignis_comm_config cfg = IGNIS_COMM_CONFIG_INIT;
  cfg.capacity = 1 << 20;
  ignis_comm *comm = NULL;
  CHECK_STATUS(ignis_comm_create(&cfg, NULL, NULL, &comm), IGNIS_OK);
  const ignis_dtype dtypes[3] = {IGNIS_F16, IGNIS_BF16, IGNIS_F32};
  for (int d = 0; d < 3; ++d) {
    for (int gf = 0; gf < 2; ++gf) {
      comm_case c = {.pattern = 2,
                     .dtype = dtypes[d],
                     .gamma_dtype = gf ? IGNIS_F32 : dtypes[d],
                     .rows = 9,
                     .hidden = 2056,
                     .residual_mode = 1,
                     .scale = 0.05f,
                     .repeats = 1};
      h_case("world 1 pattern 2 %s gamma %s == ignis_fused_add_rmsnorm_quant", ignis_dtype_name(c.dtype),
             ignis_dtype_name(c.gamma_dtype));
      rank_tensors t;
      tensors_make(&c, H_CPU, 0, &t);
      tensors_fill(&c, 0, &t);
      CHECK_STATUS(call_case(comm, &c, &t, IGNIS_ALLREDUCE_AUTO), IGNIS_OK);
      h_buf res = h_buf_alloc(H_CPU, c.dtype, c.rows * c.hidden),
            q = h_buf_alloc(H_CPU, IGNIS_FP8_E4M3, c.rows * c.hidden);
      memcpy(res.host, t.residual.host, (size_t)(c.rows * c.hidden) * ignis_dtype_size(c.dtype));
      ignis_tensor in = view2(&t.input, c.rows, c.hidden), rv = view2(&res, c.rows, c.hidden),
                   qv = view2(&q, c.rows, c.hidden);
      const int64_t hidden = c.hidden, one = 1;
      ignis_tensor g = h_view(&t.gamma, 0, 1, &hidden, NULL), s = h_view(&t.scale, 0, 1, &one, NULL);
      CHECK_STATUS(ignis_fused_add_rmsnorm_quant(&in, &rv, &g, &s, EPS, &qv, NULL), IGNIS_OK);
      const size_t n = (size_t)(c.rows * c.hidden);
      CHECK(memcmp(res.host, t.residual_out.host, n * ignis_dtype_size(c.dtype)) == 0);
      CHECK(memcmp(q.host, t.quant_out.host, n) == 0);
      h_buf_free(&res);
      h_buf_free(&q);
      tensors_free(&t);
    }
  }
  ignis_comm_destroy(comm);
}

/* ---- bad input ------------------------------------------------------------------------------- */
static void test_create_errors(void) {
  h_case("ignis_comm_create errors");
  ignis_comm *comm = (ignis_comm *)&comm;
  ignis_comm_config cfg = IGNIS_COMM_CONFIG_INIT;
  cfg.capacity = 1024;
  ignis_comm_config bad = cfg;
  bad.world_size = 0;
  CHECK_ERROR(ignis_comm_create(&bad, NULL, NULL, &comm), IGNIS_ERROR_INVALID_ARGUMENT, "config.world_size");
  CHECK(comm == NULL);
  bad = cfg;
  bad.world_size = IGNIS_COMM_MAX_WORLD + 1;
  CHECK_ERROR(ignis_comm_create(&bad, NULL, NULL, &comm), IGNIS_ERROR_INVALID_ARGUMENT, "config.world_size");
  bad = cfg;
  bad.rank = 1;
  CHECK_ERROR(ignis_comm_create(&bad, NULL, NULL, &comm), IGNIS_ERROR_INVALID_ARGUMENT, "config.rank");
  bad = cfg;
  bad.capacity = 0;
  CHECK_ERROR(ignis_comm_create(&bad, NULL, NULL, &comm), IGNIS_ERROR_INVALID_ARGUMENT, "config.capacity");
  bad = cfg;
  bad.capacity = (size_t)1 << 50; /* more than any /dev/shm: a clean error, not SIGBUS later */
  CHECK_ERROR(ignis_comm_create(&bad, NULL, NULL, &comm), IGNIS_ERROR_INTERNAL, "config.capacity");
  bad = cfg;
  bad.timeout_s = 0;
  CHECK_ERROR(ignis_comm_create(&bad, NULL, NULL, &comm), IGNIS_ERROR_INVALID_ARGUMENT, "config.timeout_s");
  bad = cfg;
  bad.world_size = 2;
  CHECK_ERROR(ignis_comm_create(&bad, NULL, NULL, &comm), IGNIS_ERROR_INVALID_ARGUMENT, "exchange");
  bad = cfg;
  bad.nccl_comm = &bad;
  CHECK_ERROR(ignis_comm_create(&bad, NULL, NULL, &comm), IGNIS_ERROR_UNSUPPORTED, "config.nccl_comm");
  bad = cfg;
  bad.struct_size = 4;
  CHECK_ERROR(ignis_comm_create(&bad, NULL, NULL, &comm), IGNIS_ERROR_INVALID_ARGUMENT, "config.struct_size");
  CHECK_ERROR(ignis_comm_create(NULL, NULL, NULL, &comm), IGNIS_ERROR_INVALID_ARGUMENT, "config");
  CHECK_ERROR(ignis_comm_create(&cfg, NULL, NULL, NULL), IGNIS_ERROR_INVALID_ARGUMENT, "comm");
  CHECK_STATUS(ignis_comm_destroy(NULL), IGNIS_OK);
  CHECK_ERROR(ignis_comm_check(NULL), IGNIS_ERROR_INVALID_ARGUMENT, "comm");
  CHECK(ignis_allreduce_choose(NULL, 16) == IGNIS_ALLREDUCE_AUTO);
}

static void test_choose(void) {
  h_case("ignis_allreduce_choose");
  ignis_comm_config cfg = IGNIS_COMM_CONFIG_INIT;
  cfg.capacity = 1024;
  ignis_comm *comm = NULL;
  CHECK_STATUS(ignis_comm_create(&cfg, NULL, NULL, &comm), IGNIS_OK);
  CHECK(ignis_allreduce_choose(comm, 16) == IGNIS_ALLREDUCE_ONESHOT);
  CHECK(ignis_allreduce_choose(comm, (size_t)1 << 30) ==
        IGNIS_ALLREDUCE_ONESHOT); /* no peers: nothing to split */
  ignis_comm_destroy(comm);
}

static void choose_body(rank_ctx *r) {
  const ignis_comm_config cfg = config_for(r, 1 << 20, 10.0);
  ignis_comm *comm = NULL;
  ignis_comm_create(&cfg, world_exchange, r, &comm);
  report(r,
         comm && ignis_allreduce_choose(comm, 1024) == IGNIS_ALLREDUCE_ONESHOT &&
             ignis_allreduce_choose(comm, 64 * 1024 - 1) == IGNIS_ALLREDUCE_ONESHOT &&
             ignis_allreduce_choose(comm, 64 * 1024) == IGNIS_ALLREDUCE_TWOSHOT,
         "CPU thresholds: ONESHOT below 64 KiB, TWOSHOT from it");
  pthread_barrier_wait(&r->w->barrier);
  ignis_comm_destroy(comm);
}

/* One bad call: the status, the message, and every output untouched. */
static void expect_refused(ignis_comm *comm, const ignis_allreduce_fusion_args *a, h_buf **outs, int count,
                           ignis_status status, const char *needle) {
  for (int i = 0; i < count; ++i) {
    h_buf_poison(outs[i]);
    h_buf_upload(outs[i]);
  }
  CHECK_ERROR(ignis_allreduce_fusion(comm, a, NULL), status, needle);
  for (int i = 0; i < count; ++i)
    CHECKF(h_buf_untouched(outs[i]), "output %d was written by a refused call", i);
}

static void test_bad_input(void) {
  ignis_comm_config cfg = IGNIS_COMM_CONFIG_INIT;
  cfg.capacity = 8 * 256 * 2;
  ignis_comm *comm = NULL;
  CHECK_STATUS(ignis_comm_create(&cfg, NULL, NULL, &comm), IGNIS_OK);
  comm_case c = {.pattern = 4,
                 .dtype = IGNIS_BF16,
                 .gamma_dtype = IGNIS_BF16,
                 .rows = 8,
                 .hidden = 256,
                 .residual_mode = 1,
                 .scale = 1.0f,
                 .repeats = 1};
  rank_tensors t;
  tensors_make(&c, H_CPU, 0, &t);
  tensors_fill(&c, 0, &t);
  h_buf f32 = h_buf_alloc(H_CPU, IGNIS_F32, 8 * 256), big = h_buf_alloc(H_CPU, IGNIS_BF16, 16 * 256);
  ignis_tensor input = view2(&t.input, 8, 256), residual = view2(&t.residual, 8, 256),
               residual_out = view2(&t.residual_out, 8, 256), norm_out = view2(&t.norm_out, 8, 256),
               quant_out = view2(&t.quant_out, 8, 256);
  const int64_t hidden = 256, one = 1, two = 2, strides[2] = {512, 1}, shape[2] = {8, 256};
  ignis_tensor gamma = h_view(&t.gamma, 0, 1, &hidden, NULL), scale = h_view(&t.scale, 0, 1, &one, NULL);
  ignis_allreduce_fusion_args good = IGNIS_ALLREDUCE_FUSION_ARGS_INIT;
  good.pattern = IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP8;
  good.input = &input;
  good.residual_in = &residual;
  good.residual_out = &residual_out;
  good.norm_out = &norm_out;
  good.quant_out = &quant_out;
  good.rms_gamma = &gamma;
  good.scale_factor = &scale;
  h_buf *outs[3] = {&t.residual_out, &t.norm_out, &t.quant_out};
  ignis_allreduce_fusion_args a;
  ignis_tensor x;

  h_case("bad input: the pattern's tensors");
  a = good, a.norm_out = NULL;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "norm_out");
  a = good, a.rms_gamma = NULL;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "rms_gamma");
  a = good, a.residual_in = NULL;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "residual_in");
  a = good, a.scale_factor = NULL;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "scale_factor");
  a = good, a.output = &norm_out;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "output");
  a = good, a.pattern = IGNIS_AR_FUSION_RESIDUAL_RMSNORM;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "quant_out");
  a = good, a.pattern = IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP8;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "norm_out");
  a = good, a.pattern = IGNIS_AR_FUSION_ALLREDUCE;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "output");
  a = good, a.pattern = IGNIS_AR_FUSION_RESIDUAL_RMSNORM_FP4;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_UNSUPPORTED, "FP4");
  a = good, a.pattern = IGNIS_AR_FUSION_RESIDUAL_RMSNORM_OUT_FP4;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_UNSUPPORTED, "FP4");
  a = good, a.pattern = (ignis_allreduce_fusion_pattern)9;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "pattern");

  h_case("bad input: dtypes, shapes, layouts");
  x = view2(&f32, 8, 256);
  a = good, a.norm_out = &x;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "norm_out.dtype");
  a = good, a.quant_out = &norm_out;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "quant_out.dtype");
  ignis_tensor gamma_short = h_view(&t.gamma, 0, 1, &two, NULL);
  a = good, a.rms_gamma = &gamma_short;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "rms_gamma");
  ignis_tensor gamma_f16 = gamma;
  gamma_f16.dtype = IGNIS_F16;
  a = good, a.rms_gamma = &gamma_f16;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "rms_gamma.dtype");
  ignis_tensor scale_f16 = h_view(&t.gamma, 0, 1, &one, NULL);
  a = good, a.scale_factor = &scale_f16;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "scale_factor.dtype");
  ignis_tensor scale_two = h_view(&f32, 0, 1, &two, NULL);
  a = good, a.scale_factor = &scale_two;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "scale_factor");
  ignis_tensor res_short = view2(&t.residual, 4, 256);
  a = good, a.residual_in = &res_short;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "residual_in.shape");
  ignis_tensor strided = h_view(&big, 0, 2, shape, strides);
  a = good, a.input = &strided;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "input");
  ignis_tensor input_i32 = input;
  input_i32.dtype = IGNIS_I32;
  a = good, a.input = &input_i32;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "input.dtype");
  a = good, a.rms_eps = -1;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "rms_eps");
  a = good, a.weight_bias = NAN;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "weight_bias");
  a = good, a.algo = (ignis_allreduce_algo)7;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "algo");
  a = good, a.algo = IGNIS_ALLREDUCE_NCCL;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_UNSUPPORTED, "NCCL");
  a = good, a.struct_size = 8;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "args.struct_size");
  expect_refused(comm, NULL, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "args");
  expect_refused(NULL, &good, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "comm");

  h_case("bad input: overlaps");
  a = good, a.norm_out = &residual_out;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "norm_out");
  a = good, a.residual_out = &input, a.norm_out = &input; /* each may be input, not both */
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "norm_out");
  ignis_tensor shifted = h_view(&t.residual, 1, 2, shape, NULL);
  shifted.shape[0] = 7;
  ignis_tensor res7 = view2(&t.residual_out, 7, 256), in7 = view2(&t.input, 7, 256),
               n7 = view2(&t.norm_out, 7, 256), q7 = view2(&t.quant_out, 7, 256);
  a = good, a.input = &in7, a.residual_in = &res7, a.residual_out = &shifted, a.norm_out = &n7,
  a.quant_out = &q7;
  ignis_tensor res7_in = view2(&t.residual, 7, 256);
  a.residual_in = &res7_in;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "residual_out");
  ignis_tensor input_shifted = h_view(&t.input, 1, 2, shape, NULL); /* input, one element on */
  input_shifted.shape[0] = 7;
  a.residual_in = &res7, a.residual_out = &input_shifted;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "residual_out");

  h_case("bad input: capacity and device");
  ignis_tensor big_in = view2(&big, 16, 256);
  ignis_tensor big_out = view2(&big, 16, 256);
  CHECK_ERROR(ignis_allreduce(comm, &big_in, &big_out, IGNIS_ALLREDUCE_AUTO, NULL),
              IGNIS_ERROR_INSUFFICIENT_WORKSPACE, "capacity");
  ignis_tensor on_gpu = input;
  on_gpu.device.type = IGNIS_DEVICE_CUDA;
  a = good, a.input = &on_gpu;
  expect_refused(comm, &a, outs, 3, IGNIS_ERROR_INVALID_ARGUMENT, "input is on cuda:0");

  h_case("good call after the refusals");
  a = good;
  CHECK_STATUS(ignis_allreduce_fusion(comm, &a, NULL), IGNIS_OK);
  ignis_tensor empty = view2(&t.input, 0, 256);
  CHECK_STATUS(ignis_allreduce(comm, &empty, &empty, IGNIS_ALLREDUCE_AUTO, NULL), IGNIS_OK);
  h_buf_free(&f32);
  h_buf_free(&big);
  tensors_free(&t);
  ignis_comm_destroy(comm);
}

int main(void) {
  /* The forked worlds first: the parent must not touch CUDA before it forks. */
  static comm_case fork_cases[MAX_CASES];
  const int fork_count = make_cases(3, 1, fork_cases);
  static world_result fork_cpu;
  run_case_world(3, 1, H_CPU, fork_cases, fork_count, &fork_cpu);
#ifdef IGNIS_HAVE_CUDA
  static comm_case cuda_cases[MAX_CASES];
  const int cuda_count = make_cases(2, 1, cuda_cases);
  static world_result fork_cuda;
  run_case_world(2, 1, H_CUDA, cuda_cases, cuda_count, &fork_cuda);
#endif
  world *fork_special = world_make(2, 16);
  rank_ctx base = {0};
  world_run(fork_special, 1, body_mismatch, base);
  world_result fork_mismatch = {.size = 2};
  snprintf(fork_mismatch.what, sizeof fork_mismatch.what, "shapes differ across 2 processes");
  memcpy(fork_mismatch.reports, fork_special->reports, sizeof fork_mismatch.reports);
  world_free(fork_special);
  fork_special = world_make(3, 16);
  world_run(fork_special, 1, body_stress, base);
  world_result fork_stress = {.size = 3};
  snprintf(fork_stress.what, sizeof fork_stress.what, "300 calls back to back, 3 processes");
  memcpy(fork_stress.reports, fork_special->reports, sizeof fork_stress.reports);
  world_free(fork_special);

  h_init("test_comm");
  count_world(&fork_cpu);
#ifdef IGNIS_HAVE_CUDA
  count_world(&fork_cuda);
#endif
  count_world(&fork_mismatch);
  count_world(&fork_stress);

  test_create_errors();
  test_choose();
  test_bad_input();
  test_world1_matches_fused_quant();

  static const int sizes[5] = {1, 2, 3, 4, 8};
  for (int i = 0; i < 5; ++i) {
    static comm_case cases[MAX_CASES];
    const int count = make_cases(sizes[i], h_quick() || sizes[i] == 8, cases);
    world_result res;
    run_case_world(sizes[i], 0, H_CPU, cases, count, &res);
    count_world(&res);
  }
  run_special(4, 0, body_stress, "300 calls back to back");
  run_special(2, 0, choose_body, "CPU AUTO thresholds");
  run_special(3, 0, body_timeout, "a rank that never calls");
  run_special(2, 0, body_mismatch, "shapes differ across threads");
  run_special(4, 0, body_mismatch, "shapes differ across threads");
  run_special(2, 0, body_create_mismatch, "capacities differ at creation");
  return h_finish();
}
