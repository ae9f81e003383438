/* The `ignis` program's shared declarations: the op registry (every public op: what one call needs,
 * the bytes or FLOPs it counts, a call on tiny inputs and the shapes the default suite times), the
 * rotated input sets a case runs on, and the device layer (memory, streams, timers, the copy
 * ceiling) that hides whether the work runs on the host or on a GPU. Everything here uses the
 * public API only (ignis/ignis.h), so the registry links into the smoke test (tests/test_ops.c)
 * as well as into the program.
 *
 * A benchmark case is one routine at one shape, dtype and device. Its tensors are allocated as
 * `sets` independent copies (one pool per tensor, sets laid end to end) so that consecutive calls
 * touch different memory: on a GPU the pools together exceed twice the L2, so no call is served
 * from the cache its predecessors filled. Every byte of every pool is filled with random values
 * (never zeros). Bytes counted per call are the fewest a call must move: each input read once,
 * each output written once (a tensor updated in place counts twice). Attention prefill is counted
 * in FLOPs instead: 4 * query heads * head dim * the query-key pairs the mask lets through. */
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
/* The library status of the last failure when it came through bench_check_status; IGNIS_OK when
 * the last failure was the program's own (bench_fail). */
ignis_status bench_failed_status(void);

/* ---- cases ---------------------------------------------------------------------------------- */
/* The dimensions a routine's cases use: the shape flags `ignis bench ROUTINE` takes for it and
 * the fields of its JSON record. */
typedef enum bench_dim {
  BENCH_DIM_TOKENS = 1 << 0,    /* --tokens: rows; query tokens per request; merged rows */
  BENCH_DIM_HIDDEN = 1 << 1,    /* --hidden: norm width, activation output width */
  BENCH_DIM_Q_HEADS = 1 << 2,   /* --q-heads */
  BENCH_DIM_K_HEADS = 1 << 3,   /* --k-heads */
  BENCH_DIM_HEAD_DIM = 1 << 4,  /* --head-dim */
  BENCH_DIM_BATCH = 1 << 5,     /* --batch: requests (RoPE: of the indptr/offsets form) */
  BENCH_DIM_INPLACE = 1 << 6,   /* --inplace: RoPE outputs overwrite q and k */
  BENCH_DIM_KV_LEN = 1 << 7,    /* --kv-len: keys per request (paged-KV ops: tokens per request) */
  BENCH_DIM_PAGE_SIZE = 1 << 8, /* --page-size */
  BENCH_DIM_VOCAB = 1 << 9,     /* --vocab */
  BENCH_DIM_STATES = 1 << 10,   /* --states: states merged per row; draft tokens per request */
  BENCH_DIM_CAUSAL = 1 << 11,   /* --mask causal|none */
  BENCH_DIM_INNER = 1 << 12,    /* --inner: the inner (K) dimension of a GEMM (M: --tokens, N: --hidden) */
  BENCH_DIM_EXPERTS = 1 << 13,  /* --experts: MoE experts */
  BENCH_DIM_TOP_K = 1 << 14     /* --top-k: experts per token of an MoE */
} bench_dim;

struct bench_routine;

/* One routine at one shape, dtype and device; the dims the routine does not use stay 0. */
typedef struct bench_case {
  const struct bench_routine *routine;
  ignis_device device;
  ignis_dtype dtype;
  int64_t tokens;
  int64_t hidden;
  int64_t q_heads;
  int64_t k_heads;
  int64_t head_dim;
  int64_t batch;
  int inplace;
  int64_t kv_len;
  int64_t page_size;
  int64_t vocab;
  int64_t states;
  int causal;
  int64_t inner;
  int64_t experts;
  int64_t top_k;
} bench_case;

/* ---- tensors of a case ---------------------------------------------------------------------- */
typedef enum bench_fill {
  BENCH_FILL_RANDOM = 0,           /* uniform in [-1, 1) in the tensor's float dtype */
  BENCH_FILL_POSITIONS = 1,        /* distinct positions base + t, a random base per set */
  BENCH_FILL_INDPTR = 2,           /* tokens split evenly among `batch` requests */
  BENCH_FILL_OFFSETS = 3,          /* random start position per request */
  BENCH_FILL_COS_SIN = 4,          /* the cos/sin cache of theta 1e4: [max_position, rotary_dim] f32 */
  BENCH_FILL_NORMAL = 5,           /* standard normal values: logits */
  BENCH_FILL_PROBS = 6,            /* exp of standard normal values: softmax weights, unnormalized */
  BENCH_FILL_PAGE_INDPTR = 7,      /* request b owns page entries b * pages .. (b + 1) * pages */
  BENCH_FILL_PAGE_INDICES = 8,     /* the pages in a random order, another order per set */
  BENCH_FILL_LAST_PAGE_LEN = 9,    /* tokens in each request's last page */
  BENCH_FILL_APPEND_BATCH = 10,    /* request of each appended token (kv_len tokens per request) */
  BENCH_FILL_APPEND_POSITION = 11, /* position of each appended token in its request */
  BENCH_FILL_SEQ_LENS = 12,        /* kv_len for every request */
  BENCH_FILL_TOKEN_IDS = 13,       /* random token ids in [0, vocab) */
  BENCH_FILL_MASK_BITS = 14,       /* one request's bit-packed custom mask: the causal pattern when
                                      the case is causal, else every key */
  BENCH_FILL_QO_INDPTR = 15,       /* b * tokens: `tokens` query rows per request (prefill) */
  BENCH_FILL_EXPERT_IDS = 16       /* per row, shape[1] distinct random ids in [0, experts): MoE routing */
} bench_fill;

/* What a call does with a tensor. A tiny call (bench_probe_routine) fills outputs with a poison
 * pattern first (NaN for floats, 0x80 bytes for integers) and checks outputs and tensors updated
 * in place afterwards: floats finite, integers within [valid_min, valid_max]. */
typedef enum bench_role { BENCH_IN = 0, BENCH_OUT = 1, BENCH_INOUT = 2 } bench_role;

#define BENCH_MAX_TENSORS 16
#define BENCH_MAX_POSITION 32768 /* positions drawn below this (or below tokens if larger) */

typedef struct bench_tensor_spec {
  const char *name;
  ignis_dtype dtype;
  int32_t ndim;
  int64_t shape[4];
  bench_fill fill;
  int shared;          /* one copy for every set: a model constant such as the cos/sin cache */
  int64_t bytes_moved; /* this tensor's share of the bytes a call must move */
  bench_role role;
  int64_t valid_min; /* integer outputs: the range every written value lies in */
  int64_t valid_max;
  int neg_inf_ok; /* float outputs: -inf is a legitimate value (masked logits) */
  int write_only; /* an in-out tensor the call only writes: all of bytes_moved is written (else an
                     in-out tensor's bytes_moved is half read, half written) */
} bench_tensor_spec;

/* A spec of the given shape (1 to 4 dims), bytes_moved its size, role input. */
bench_tensor_spec bench_spec(const char *name, ignis_dtype dtype, bench_fill fill, int32_t ndim,
                             const int64_t *shape);
#define BENCH_SPEC(name, dtype, fill, ...)                                                                   \
  bench_spec((name), (dtype), (fill), (int32_t)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),         \
             (int64_t[]){__VA_ARGS__})
/* The same spec as an output (poisoned and checked by tiny calls), or as a tensor read and written
 * (checked); integer ones valid in [lo, hi]. */
static inline bench_tensor_spec bench_output(bench_tensor_spec s) {
  s.role = BENCH_OUT;
  return s;
}
static inline bench_tensor_spec bench_inout(bench_tensor_spec s) {
  s.role = BENCH_INOUT;
  return s;
}
static inline bench_tensor_spec bench_valid(bench_tensor_spec s, int64_t lo, int64_t hi) {
  s.valid_min = lo;
  s.valid_max = hi;
  return s;
}

/* ---- the registry --------------------------------------------------------------------------- */
/* A shape of the default suite. The suite runs group 1 of every routine (in registry order), then
 * group 2, and so on; group 0 ends a list. The case gives the dims and the dtype (`--dtype`
 * replaces it); routine and device are filled in by the suite. */
typedef struct bench_shape {
  int group;
  bench_case c;
} bench_shape;

/* A suite list: the shapes given, then the end marker. A shape of a group: designated
 * initializers of bench_case (the dims and the dtype). The dims of a tiny case likewise. */
#define BENCH_SUITE(...) ((const bench_shape[]){__VA_ARGS__, {0}})
/* clang-format off */
#define BENCH_SHAPE(group, ...) {(group), {__VA_ARGS__}}
#define BENCH_DIMS(...) {__VA_ARGS__}
/* clang-format on */

typedef struct bench_family {
  const char *name;
  /* "16384x8192", "16384tok 32/8h d128 inplace", "B64 L4k 32/8h d128 p16", ... */
  void (*shape)(const bench_case *c, char *text, size_t size);
  /* NULL, or fill in the dims that follow from others (RoPE's request count when 0). */
  void (*complete)(bench_case *c);
  const struct bench_routine *routines;
  int routine_count;
} bench_family;

/* The routines and routine_count of a family, from its table of entries. */
#define BENCH_TABLE(table) table, (int)(sizeof table / sizeof table[0])

#define BENCH_DTYPE_BIT(dtype) (1u << (dtype))
#define BENCH_DTYPES_FLOAT                                                                                   \
  (BENCH_DTYPE_BIT(IGNIS_F32) | BENCH_DTYPE_BIT(IGNIS_F16) | BENCH_DTYPE_BIT(IGNIS_BF16))
#define BENCH_DTYPES_HALF (BENCH_DTYPE_BIT(IGNIS_F16) | BENCH_DTYPE_BIT(IGNIS_BF16))

/* One registry entry: one public op (or one form of it). */
typedef struct bench_routine {
  const char *name;
  const bench_family *family;
  const char *summary;
  /* Every public C function a call exercises, space-separated: tools/check-ops fails when an
   * IGNIS_API op function is in no entry's list. */
  const char *functions;
  unsigned dims;   /* BENCH_DIM_* */
  unsigned dtypes; /* the dtypes the op's header takes: tiny calls in each must succeed */
  const char *bytes_rule;
  /* NULL: the routine is counted in bytes. Else it is counted in FLOPs (flops() per call; the
   * table quotes TFLOP/s) and this says how. */
  const char *flops_rule;
  int64_t (*flops)(const bench_case *c);
  bench_case tiny;              /* the dims of the smoke call of `ignis info` and tests/test_ops.c */
  const bench_shape *gpu_suite; /* the first shape is also `ignis bench ROUTINE`'s default */
  const bench_shape *host_suite;
  /* Fill specs (at most BENCH_MAX_TENSORS) for the case; returns how many. */
  int (*describe)(const bench_case *c, bench_tensor_spec *specs);
  /* NULL, or make what the calls share and must not time: a plan, its workspace. Returns 0, or
   * -1 with bench_fail (a library refusal through bench_check_status) having undone its part;
   * release undoes a successful prepare. */
  int (*prepare)(const bench_case *c, void *stream, void **state);
  void (*release)(const bench_case *c, void *state);
  /* One call on the tensors of one set, in the order describe() listed them. */
  ignis_status (*call)(const bench_case *c, ignis_tensor *tensors, void *state, void *stream);
} bench_routine;

/* The families (bench/ops_*.c, one table of entries each), listed in registry order by
 * bench/registry.c, and the routines of all of them. */
extern const bench_family bench_family_norm, bench_family_activation, bench_family_rope,
    bench_family_paged_kv, bench_family_merge, bench_family_decode, bench_family_prefill,
    bench_family_sampling, bench_family_gemm, bench_family_quant, bench_family_mla, bench_family_rope_quant,
    bench_family_moe;
extern const bench_family bench_family_moe_routing;
extern const bench_family bench_family_comm;
int bench_routine_count(void);
const bench_routine *bench_routine_at(int index);
const bench_routine *bench_find_routine(const char *name);

/* The case of a routine's shape: dims and dtype from the shape, then complete(). */
bench_case bench_make_case(const bench_routine *routine, const bench_case *dims, ignis_device device,
                           ignis_dtype dtype);
/* Bytes a call of this case must move (sum of bytes_moved). */
int64_t bench_case_bytes(const bench_case *c);
/* The same bytes split into read and written (inputs read, outputs written, in-out tensors half
 * each unless write_only), and how many tensors take at least a quarter of the written bytes. */
void bench_case_traffic(const bench_case *c, int64_t *read, int64_t *written, int *write_streams);
/* "16384x8192", "16384x8192 (in 16384x16384)", "16384tok 32/8h d128 inplace", ... */
void bench_case_shape(const bench_case *c, char *text, size_t size);
/* "4096" or "4k" (multiples of 1024): the compact numbers of shape texts. */
void bench_format_count(int64_t value, char *text, size_t size);

/* Pages of one request of a paged case (kv_len tokens in pages of page_size), the tokens in its
 * last page, and the pages of the whole cache. */
int64_t bench_pages_per_request(const bench_case *c);
int64_t bench_last_page_len(const bench_case *c);
int64_t bench_num_pages(const bench_case *c);
/* Query-key pairs one request's rows see: tokens x kv_len, or causal with the queries as the last
 * `tokens` of the kv_len keys. */
int64_t bench_visible_pairs(const bench_case *c);

/* The specs of a paged KV cache at s: k_cache and v_cache ([pages, page_size, k_heads, head_dim],
 * NHD; bytes_moved the tokens held, not the padding of last pages), kv_indices, and with `lengths`
 * kv_indptr and kv_last_page_len. Returns how many (3 or 5). */
int bench_page_cache_specs(const bench_case *c, int lengths, bench_tensor_spec *s);
/* The cache over tensors laid out as bench_page_cache_specs made them (without `lengths`, indptr
 * and last_page_len are left for the caller). */
ignis_paged_kv_cache bench_page_cache(const ignis_tensor *t, int lengths);

typedef struct bench_probe {
  ignis_status status; /* the call's status */
  int written;         /* 1 when the call succeeded and every output holds valid values */
  char detail[512];    /* the library's message, or which output holds what */
} bench_probe;
/* Call `routine` once on its tiny case in `dtype` on `device` (outputs poisoned first) and check
 * its outputs. Returns 0, or -1 when the probe itself could not run (bench_error says why). */
int bench_probe_routine(const bench_routine *routine, ignis_device device, ignis_dtype dtype,
                        bench_probe *out);

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
/* dst on the host, src on the device; waits for the device's stream first. */
int bench_device_download(ignis_device device, void *dst, const void *src, size_t bytes);
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

/* Read/write mix ceilings of a CUDA device (bench/probe.cu): a probe kernel reading `reads` and
 * writing `writes` equal streams, in several variants (access width, loads in flight, cache
 * policies); gbps is the best variant's (bytes read + written), `best` names it. The mixes, in
 * this order: 1:0, 1:1, 2:1, 2:2. */
#define BENCH_MIX_COUNT 4
typedef struct bench_mix_ceiling {
  int reads, writes;
  double gbps;
  int variants;
  char best[48];
} bench_mix_ceiling;
/* Returns 0, or -1 with bench_fail (always on the host, and in builds without CUDA). */
int bench_measure_mix_ceilings(ignis_device device, bench_mix_ceiling *out);

/* ---- commands ------------------------------------------------------------------------------- */
int bench_command_info(int argc, char **argv);
int bench_command_bench(int argc, char **argv);

/* "cpu", "cuda", "cuda:1" -> device; returns 0 or -1. */
int bench_parse_device(const char *text, ignis_device *device);
/* "cpu" or "cuda:N". */
void bench_device_name(ignis_device device, char *text, size_t size);

#endif
