/* The `ignis` program's shared declarations: the routine table (what each op needs and how many
 * bytes a call must move), the rotated input sets a case runs on, and the device layer (memory,
 * streams, timers, the copy ceiling) that hides whether the work runs on the host or on a GPU.
 *
 * A benchmark case is one routine at one shape, dtype and device. Its tensors are allocated as
 * `sets` independent copies (one pool per tensor, sets laid end to end) so that consecutive calls
 * touch different memory: on a GPU the pools together exceed twice the L2, so no call is served
 * from the cache its predecessors filled. Every byte of every pool is filled with random values
 * (never zeros). Bytes counted per call are the fewest a call must move: each input read once,
 * each output written once (a tensor updated in place counts twice). */
#ifndef IGNIS_BENCH_H
#define IGNIS_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "ignis/ignis.h"

/* ---- errors --------------------------------------------------------------------------------- */
/* Set the message of the last failure of the program (not of the library) and return -1. */
int bench_fail(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* The message set by the last bench_fail. */
const char *bench_error(void);
/* Turn a library status into a bench failure naming the call: returns 0 for IGNIS_OK. */
int bench_check_status(ignis_status status, const char *what);

/* ---- cases and routines --------------------------------------------------------------------- */
typedef enum bench_family {
  BENCH_FAMILY_NORM = 0,       /* --tokens --hidden */
  BENCH_FAMILY_ACTIVATION = 1, /* --tokens --hidden (H of the output; the input is 2H wide) */
  BENCH_FAMILY_ROPE = 2        /* --tokens --q-heads --k-heads --head-dim [--batch] [--inplace] */
} bench_family;

struct bench_routine;

typedef struct bench_case {
  const struct bench_routine *routine;
  ignis_device device;
  ignis_dtype dtype;
  int64_t tokens;
  int64_t hidden;
  int64_t q_heads;
  int64_t k_heads;
  int64_t head_dim;
  int64_t batch; /* requests of the indptr/offsets RoPE form */
  int inplace;   /* RoPE: outputs alias the inputs */
} bench_case;

typedef enum bench_fill {
  BENCH_FILL_RANDOM = 0,    /* uniform in [-1, 1) in the tensor's float dtype */
  BENCH_FILL_POSITIONS = 1, /* distinct positions base + t, a random base per set */
  BENCH_FILL_INDPTR = 2,    /* tokens split evenly among `batch` requests */
  BENCH_FILL_OFFSETS = 3,   /* random start position per request */
  BENCH_FILL_COS_SIN = 4    /* the cos/sin cache of theta 1e4: [max_position, rotary_dim] f32 */
} bench_fill;

#define BENCH_MAX_TENSORS 8
#define BENCH_MAX_POSITION 32768 /* positions drawn below this (or below tokens if larger) */

typedef struct bench_tensor_spec {
  const char *name;
  ignis_dtype dtype;
  int32_t ndim;
  int64_t shape[3];
  bench_fill fill;
  int shared;          /* one copy for every set: a model constant such as the cos/sin cache */
  int64_t bytes_moved; /* this tensor's share of the bytes a call must move */
} bench_tensor_spec;

typedef struct bench_routine {
  const char *name;
  bench_family family;
  const char *summary;
  const char *bytes_rule; /* how bytes_moved is counted, for the legend and `--list` */
  /* Fill specs (at most BENCH_MAX_TENSORS) for the case; returns how many. */
  int (*describe)(const bench_case *c, bench_tensor_spec *specs);
  /* One call on the tensors of one set, in the order describe() listed them. */
  ignis_status (*call)(const bench_case *c, ignis_tensor *tensors, void *stream);
} bench_routine;

extern const bench_routine bench_routines[];
extern const int bench_routine_count;
const bench_routine *bench_find_routine(const char *name);

/* Bytes a call of this case must move (sum of bytes_moved). */
int64_t bench_case_bytes(const bench_case *c);
/* "16384x8192", "16384x8192 (in 16384x16384)", "16384 tok 32q/8k d128 in-place", ... */
void bench_case_shape(const bench_case *c, char *text, size_t size);

/* ---- rotated input sets --------------------------------------------------------------------- */
typedef struct bench_sets {
  bench_case c;
  int count;
  bench_tensor_spec specs[BENCH_MAX_TENSORS];
  void *pools[BENCH_MAX_TENSORS];
  int64_t tensor_bytes[BENCH_MAX_TENSORS]; /* one copy */
  int64_t set_stride[BENCH_MAX_TENSORS];   /* bytes between copies; 0 for shared tensors */
  int64_t sets;
  int64_t set_bytes;   /* bytes of one set (shared tensors excluded) */
  int64_t total_bytes; /* everything allocated */
} bench_sets;

/* Allocate `sets` copies of the case's tensors on its device and fill them. Returns 0 or -1. */
int bench_sets_create(const bench_case *c, int64_t sets, bench_sets *out);
void bench_sets_destroy(bench_sets *s);
/* Descriptors of set `index` (taken modulo the number of sets), in describe() order. */
void bench_sets_tensors(const bench_sets *s, int64_t index, ignis_tensor *tensors);
/* Fill `bytes` at `data` on the device with uniform random values in [-1, 1) of a float dtype, by
 * tiling one random host block of at most 16 MiB. */
int bench_fill_random(ignis_device device, void *data, int64_t bytes, ignis_dtype dtype, uint64_t seed);
/* Bytes of one set, without allocating: what bench_sets_create would give set_bytes. */
int64_t bench_case_set_bytes(const bench_case *c);

/* ---- device layer --------------------------------------------------------------------------- */
int bench_device_alloc(ignis_device device, size_t bytes, void **ptr);
void bench_device_free(ignis_device device, void *ptr);
/* dst on the device, src on the host. */
int bench_device_upload(ignis_device device, void *dst, const void *src, size_t bytes);
/* Both on the device. */
int bench_device_copy(ignis_device device, void *dst, const void *src, size_t bytes);
/* The stream ops run on (NULL on the host), created on first use. */
int bench_device_stream(ignis_device device, void **stream);
/* Wait for the device's stream and report any pending CUDA error. */
int bench_device_sync(ignis_device device);
/* CUDA runtime and driver versions (major*1000 + minor*10); 0 and 0 without CUDA. */
void bench_cuda_versions(int *runtime, int *driver);
/* Sort timing samples ascending. */
void bench_sort_samples(double *values, int count);
/* Last-level cache of the host in bytes, 0 if unknown. */
int64_t bench_host_llc_bytes(void);

/* One call number `index` of a measurement; returns 0 or -1 (bench_fail). */
typedef int (*bench_call_fn)(void *context, int64_t index, void *stream);

/* Host clock around each of `samples` calls after `warmup` calls: out_us[i] per call. */
int bench_time_host(bench_call_fn fn, void *context, int warmup, int samples, double *out_us);
/* Device events around each of `samples` single launches after `warmup`. */
int bench_time_direct(ignis_device device, bench_call_fn fn, void *context, int warmup, int samples,
                      double *out_us);
/* `graphs` CUDA graphs of `calls_per_graph` calls each (call g*calls_per_graph + i), all replayed
 * back to back for each sample; out_us[i] is the sample's time divided by the calls it holds. */
int bench_time_graph(ignis_device device, bench_call_fn fn, void *context, int graphs, int calls_per_graph,
                     int samples, double *out_us);

typedef struct bench_ceiling {
  double gbps;   /* median copy bandwidth, bytes read + written */
  int64_t bytes; /* size of the copied buffer */
  const char *how;
} bench_ceiling;
/* Copy ceiling of the device: GPU 1 GiB device-to-device cudaMemcpyAsync, host a threaded memcpy
 * of 256 MiB; median of several after warm-up. */
int bench_measure_ceiling(ignis_device device, bench_ceiling *out);

/* ---- commands ------------------------------------------------------------------------------- */
int bench_command_info(int argc, char **argv);
int bench_command_bench(int argc, char **argv);

/* "cpu", "cuda", "cuda:1" -> device; returns 0 or -1. */
int bench_parse_device(const char *text, ignis_device *device);
/* "cpu" or "cuda:N". */
void bench_device_name(ignis_device device, char *text, size_t size);

#endif
