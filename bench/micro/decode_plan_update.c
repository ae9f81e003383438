/* Microbenchmark of ignis_decode_plan_update's host time (the C part of decode plan() and
 * fast_decode_plan(), whose budget is 10 us at batch 256 with Python on top): median and 90th
 * percentile of N single calls, each timed with CLOCK_MONOTONIC, over the batches of
 * bench/decode_plan_time.py (32 / 8 heads, head dim 128, bf16, 2048 keys per request, page 16 and
 * page 1) and a mixed batch (lengths uniform in 1..4096, page 16). Standalone, not part of CI; it
 * uses the public API only:
 *     cc -O2 -std=c11 -Iinclude -o build/decode_plan_update bench/micro/decode_plan_update.c \
 *         -Lbuild -lignis -Wl,-rpath,$PWD/build
 *     build/decode_plan_update [cpu|cuda|cuda-stream] [calls=10000]
 * On CUDA (a build with the CUDA backend; add -DMICRO_CUDA -I<cuda>/include -L<cuda>/lib64
 * -lcudart) the updates go to the legacy default stream (cuda; PyTorch's default stream is that
 * one) or to a stream of their own (cuda-stream), without a workspace (the update does not need
 * one); the device is synchronized before each timed call, outside the timing (the GPU idle, as in
 * decode_plan_time.py), and "back-to-back" is the median of calls with no synchronization.
 * Prints one line per case: median us, p90 us, back-to-back median us. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ignis/ignis.h"

#ifdef MICRO_CUDA
#include <cuda_runtime.h>
#define IDLE() cudaDeviceSynchronize()
#else
#define IDLE() ((void)0)
#endif

typedef struct micro_case {
  const char *name;
  int64_t batch, page_size;
  int mixed; /* lengths uniform in 1..4096, else 2048 keys each */
} micro_case;

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* kv_indptr / kv_last_page_len of the case (deterministic). */
static void batch_arrays(const micro_case *c, int32_t *indptr, int32_t *last) {
  unsigned state = 12345u;
  indptr[0] = 0;
  for (int64_t b = 0; b < c->batch; ++b) {
    state = state * 1103515245u + 12345u;
    const int64_t keys = c->mixed ? 1 + (int64_t)((state >> 8) % 4096) : 2048;
    const int64_t pages = (keys + c->page_size - 1) / c->page_size;
    indptr[b + 1] = (int32_t)(indptr[b] + pages);
    last[b] = (int32_t)(keys - (pages - 1) * c->page_size);
  }
}

static int run_case(const micro_case *c, ignis_device device, void *stream, int calls) {
  ignis_decode_plan_config config = IGNIS_DECODE_PLAN_CONFIG_INIT;
  config.device = device;
  config.num_qo_heads = 32;
  config.num_kv_heads = 8;
  config.head_dim = 128;
  config.page_size = c->page_size;
  config.max_batch_size = 256;
  config.max_kv_len = 4096;
  ignis_decode_plan *plan = NULL;
  int32_t *indptr = malloc(sizeof(int32_t) * (size_t)(c->batch + 1));
  int32_t *last = malloc(sizeof(int32_t) * (size_t)c->batch);
  double *idle = malloc(sizeof(double) * (size_t)calls), *busy = malloc(sizeof(double) * (size_t)calls);
  if (!indptr || !last || !idle || !busy || ignis_decode_plan_create(&config, &plan) != IGNIS_OK) {
    fprintf(stderr, "%s: setup failed: %s\n", c->name, ignis_last_error());
    return 1;
  }
  batch_arrays(c, indptr, last);
  int failed = 0;
  for (int i = 0; i < 1000 && !failed; ++i)
    failed = ignis_decode_plan_update(plan, indptr, last, c->batch, NULL, 0, stream) != IGNIS_OK;
  for (int i = 0; i < calls && !failed; ++i) {
    IDLE();
    const double start = now_ns();
    failed = ignis_decode_plan_update(plan, indptr, last, c->batch, NULL, 0, stream) != IGNIS_OK;
    idle[i] = now_ns() - start;
  }
  IDLE();
  for (int i = 0; i < calls && !failed; ++i) {
    const double start = now_ns();
    failed = ignis_decode_plan_update(plan, indptr, last, c->batch, NULL, 0, stream) != IGNIS_OK;
    busy[i] = now_ns() - start;
  }
  IDLE();
  if (failed) {
    fprintf(stderr, "%s: ignis_decode_plan_update: %s\n", c->name, ignis_last_error());
  } else {
    qsort(idle, (size_t)calls, sizeof(double), by_value);
    qsort(busy, (size_t)calls, sizeof(double), by_value);
    printf("%-34s %8.3f %8.3f %8.3f\n", c->name, idle[calls / 2] / 1e3, idle[calls * 9 / 10] / 1e3,
           busy[calls / 2] / 1e3);
  }
  ignis_decode_plan_destroy(plan);
  free(indptr);
  free(last);
  free(idle);
  free(busy);
  return failed;
}

int main(int argc, char **argv) {
  ignis_device device = {IGNIS_DEVICE_CPU, 0};
  void *stream = NULL;
  const char *where = argc > 1 ? argv[1] : "cpu";
  if (strcmp(where, "cuda") == 0 || strcmp(where, "cuda-stream") == 0) {
    device.type = IGNIS_DEVICE_CUDA;
#ifdef MICRO_CUDA
    cudaStream_t own = NULL;
    if (strcmp(where, "cuda-stream") == 0 && cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking) != cudaSuccess) {
      fprintf(stderr, "cudaStreamCreateWithFlags failed\n");
      return 1;
    }
    stream = own;
#endif
  } else if (strcmp(where, "cpu") != 0) {
    fprintf(stderr, "usage: %s [cpu|cuda|cuda-stream] [calls=10000]\n", argv[0]);
    return 2;
  }
  const int calls = argc > 2 ? atoi(argv[2]) : 10000;
  if (calls < 10) {
    fprintf(stderr, "calls must be >= 10\n");
    return 2;
  }
  static const micro_case cases[] = {
      {"batch 1, 2048 keys, page 16", 1, 16, 0},     {"batch 64, 2048 keys, page 16", 64, 16, 0},
      {"batch 256, 2048 keys, page 16", 256, 16, 0}, {"batch 256, 2048 keys, page 1", 256, 1, 0},
      {"batch 256, 1..4096 keys, page 16", 256, 16, 1}};
  printf("ignis_decode_plan_update on %s, %d calls (us)\n%-34s %8s %8s %8s\n", where, calls, "case", "median", "p90",
         "b2b med");
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    failed |= run_case(&cases[i], device, stream, calls);
  return failed;
}
