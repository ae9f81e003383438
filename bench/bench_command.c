/* `ignis bench [ROUTINE] [flags]`: time one routine at one shape, or with no routine the default
 * suite on the default device (CUDA when a GPU is present, else the host): every shape the
 * registry's entries list for that device, group by group (bench.h), one progress line per case on
 * stderr. Prints an aligned table, or one JSON object per line with --json.
 *
 * Method (see bench.h for the input sets and the byte counts):
 *   - the copy ceiling of the device is measured once per run; every row quotes its fraction;
 *   - on a GPU, so are the read/write mix ceilings (bench/probe.cu: the best of several probe
 *     kernels reading and writing equal streams at 1:0, 1:1, 2:1 and 2:2); every byte-counted row
 *     also quotes its fraction of the mix nearest its own: the mix whose share of written bytes is
 *     nearest the row's (bench_case_traffic), 2:2 over 1:1 when two or more tensors take the writes;
 *   - inputs rotate over enough copies that their total exceeds twice the L2, so no call reads
 *     what an earlier call left in the cache (on the host: twice the last-level cache, at most
 *     64 MiB, so the short host suite stays short);
 *   - GPU calls that move 64 MiB or more are timed one launch at a time between events (mode
 *     direct); smaller ones are captured, 100 calls per CUDA graph, each call on the next input
 *     set, and the graphs replayed back to back (mode graph, time per call);
 *   - a routine's plan, workspace and page tables are made once before timing (prepare): only
 *     the calls are timed;
 *   - the time quoted is the median of the samples (min and p90 too with --json);
 *     GB/s = bytes per call / median time; FLOP-counted routines (prefill) quote GFLOP per call
 *     and TFLOP/s = FLOPs per call / median time instead, under their own column header. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define GRAPH_THRESHOLD_BYTES ((int64_t)64 << 20)
#define DEFAULT_GRAPH_CALLS 100
/* Host rotation stops here: a larger working set only costs page faults (CI runs the suite). */
#define HOST_WORKING_SET_CAP ((int64_t)64 << 20)
/* Sets of a few hundred bytes would need hundreds of thousands of calls per sample to cover 2x the
 * L2; past this count rotation stops growing (only shapes far below one decode token reach it). */
#define MAX_SETS 16384

typedef enum timing_mode { MODE_AUTO = 0, MODE_DIRECT = 1, MODE_GRAPH = 2 } timing_mode;

typedef struct options {
  const char *routine;
  ignis_device device;
  int device_given;
  ignis_dtype dtype;
  int dtype_given;
  bench_case dims;     /* the shape flags given */
  unsigned dims_given; /* BENCH_DIM_* of the shape flags given */
  int json;
  const char *json_file;
  int iters;
  timing_mode mode;
  int graph_calls;
  int list;
} options;

typedef struct result {
  bench_case c;
  const char *mode;
  int64_t bytes;
  int64_t flops; /* 0 for byte-counted routines */
  int64_t sets;
  int64_t working_set;
  int graphs;
  int calls_per_graph;
  int samples;
  double median_us, min_us, p90_us;
} result;

typedef enum table_unit { TABLE_NONE = 0, TABLE_BYTES = 1, TABLE_FLOPS = 2 } table_unit;

typedef struct output {
  int json;
  FILE *json_file;
  double ceiling_gbps;
  const bench_mix_ceiling *mixes; /* BENCH_MIX_COUNT of them, or NULL when not measured */
  int rows;
  table_unit header; /* the column header printed last */
} output;

static void usage(FILE *to) {
  fprintf(to, "usage: ignis bench [ROUTINE] [flags]\n"
              "  With no ROUTINE: the default suite on the default device (cuda when a GPU is present).\n"
              "  ROUTINE: one of `ignis bench --list` (which also gives the shape flags each takes).\n"
              "shape flags (a routine's default shape is the first of its suite on the device):\n"
              "  --tokens N          rows / tokens (prefill: query tokens per request)\n"
              "  --hidden N          hidden size (norms; for activations H of the output, input is 2H)\n"
              "  --q-heads N --k-heads N --head-dim N   attention and RoPE heads\n"
              "  --batch N           requests (RoPE: of the indptr/offsets form `rope`)\n"
              "  --kv-len N          keys per request (paged-KV ops: tokens per request)\n"
              "  --page-size N       tokens per page of a paged KV cache\n"
              "  --vocab N           vocabulary of the sampling ops\n"
              "  --states N          states merged per row (merge_states), draft tokens (chain_speculative)\n"
              "  --mask causal|none  prefill mask\n"
              "  --inner N           GEMM inner dimension K (M is --tokens, N is --hidden); MoE intermediate size\n"
              "  --experts N --top-k N   MoE experts and experts per token\n"
              "  --inplace           RoPE outputs overwrite q and k (default out of place)\n"
              "  --dtype bf16|f16|f32 (default: the shape's, bf16; sampling f32)\n"
              "other flags:\n"
              "  --device cpu|cuda|cuda:N   (default: cuda when ignis_cuda_device_count() > 0)\n"
              "  --iters N           timed samples (default 30 direct, 20 graph, 10 host)\n"
              "  --mode auto|direct|graph   GPU timing (auto: graph below 64 MiB moved per call)\n"
              "  --graph-calls N     calls captured per CUDA graph (default 100)\n"
              "  --json              one JSON object per line instead of the table\n"
              "  --json-file PATH    also write the JSON lines to PATH\n"
              "  --list              list the routines, the C functions each calls and what each counts\n");
}

/* ---- argument parsing ------------------------------------------------------------------------ */
static int parse_positive(const char *flag, const char *text, int64_t *value) {
  char *end = NULL;
  long long v = text ? strtoll(text, &end, 10) : 0;
  if (!text || *text == '\0' || *end != '\0' || v <= 0) {
    fprintf(stderr, "ignis bench: %s needs a positive integer, got '%s'\n", flag, text ? text : "");
    return -1;
  }
  *value = v;
  return 0;
}

static int parse_dtype(const char *text, ignis_dtype *dtype) {
  const ignis_dtype allowed[] = {IGNIS_BF16, IGNIS_F16, IGNIS_F32};
  for (int i = 0; text && i < 3; ++i)
    if (strcmp(text, ignis_dtype_name(allowed[i])) == 0) {
      *dtype = allowed[i];
      return 0;
    }
  fprintf(stderr, "ignis bench: --dtype must be bf16, f16 or f32, got '%s'\n", text ? text : "");
  return -1;
}

int bench_parse_device(const char *text, ignis_device *device) {
  if (!text)
    return -1;
  if (strcmp(text, "cpu") == 0) {
    device->type = IGNIS_DEVICE_CPU;
    device->id = 0;
    return 0;
  }
  if (strncmp(text, "cuda", 4) != 0)
    return -1;
  device->type = IGNIS_DEVICE_CUDA;
  device->id = 0;
  if (text[4] == '\0')
    return 0;
  char *end = NULL;
  long id = text[4] == ':' ? strtol(text + 5, &end, 10) : -1;
  if (id < 0 || !end || *end != '\0' || end == text + 5)
    return -1;
  device->id = (int32_t)id;
  return 0;
}

void bench_device_name(ignis_device device, char *text, size_t size) {
  if (device.type == IGNIS_DEVICE_CPU)
    snprintf(text, size, "cpu");
  else
    snprintf(text, size, "cuda:%d", device.id);
}

/* "--flag value" or "--flag=value": returns the value and advances *i, or NULL if argv[*i] is not
 * this flag. *missing is set when the flag is there without a value. */
static const char *flag_value(int argc, char **argv, int *i, const char *flag, int *missing) {
  size_t n = strlen(flag);
  if (strncmp(argv[*i], flag, n) != 0)
    return NULL;
  if (argv[*i][n] == '=')
    return argv[*i] + n + 1;
  if (argv[*i][n] != '\0')
    return NULL;
  if (*i + 1 >= argc) {
    *missing = 1;
    return NULL;
  }
  return argv[++*i];
}

typedef struct size_flag {
  const char *flag;
  const char *json; /* the field of the JSON record */
  bench_dim dim;
  size_t offset; /* of the int64_t field of bench_case */
} size_flag;

static const size_flag size_flags[] = {
    {"--tokens", "tokens", BENCH_DIM_TOKENS, offsetof(bench_case, tokens)},
    {"--hidden", "hidden", BENCH_DIM_HIDDEN, offsetof(bench_case, hidden)},
    {"--q-heads", "q_heads", BENCH_DIM_Q_HEADS, offsetof(bench_case, q_heads)},
    {"--k-heads", "k_heads", BENCH_DIM_K_HEADS, offsetof(bench_case, k_heads)},
    {"--head-dim", "head_dim", BENCH_DIM_HEAD_DIM, offsetof(bench_case, head_dim)},
    {"--batch", "batch", BENCH_DIM_BATCH, offsetof(bench_case, batch)},
    {"--kv-len", "kv_len", BENCH_DIM_KV_LEN, offsetof(bench_case, kv_len)},
    {"--page-size", "page_size", BENCH_DIM_PAGE_SIZE, offsetof(bench_case, page_size)},
    {"--vocab", "vocab", BENCH_DIM_VOCAB, offsetof(bench_case, vocab)},
    {"--states", "states", BENCH_DIM_STATES, offsetof(bench_case, states)},
    {"--inner", "inner", BENCH_DIM_INNER, offsetof(bench_case, inner)},
    {"--experts", "experts", BENCH_DIM_EXPERTS, offsetof(bench_case, experts)},
    {"--top-k", "top_k", BENCH_DIM_TOP_K, offsetof(bench_case, top_k)},
};
#define SIZE_FLAG_COUNT (sizeof size_flags / sizeof size_flags[0])

static int64_t *dim_field(bench_case *c, const size_flag *f) {
  return (int64_t *)((char *)c + f->offset);
}

static int64_t dim_value(const bench_case *c, const size_flag *f) {
  return *(const int64_t *)((const char *)c + f->offset);
}

/* The flag of a dim, for messages and --list. */
static const char *flag_of(bench_dim dim) {
  for (size_t i = 0; i < SIZE_FLAG_COUNT; ++i)
    if (size_flags[i].dim == dim)
      return size_flags[i].flag;
  return dim == BENCH_DIM_INPLACE ? "--inplace" : "--mask";
}

/* "--tokens --hidden": the shape flags of a routine. */
static void flags_text(unsigned dims, char *text, size_t size) {
  text[0] = '\0';
  for (unsigned bit = 1; bit <= BENCH_DIM_TOP_K; bit <<= 1)
    if (dims & bit) {
      size_t used = strlen(text);
      snprintf(text + used, size - used, "%s%s", used ? " " : "", flag_of((bench_dim)bit));
    }
}

static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->dtype = IGNIS_BF16;
  o->graph_calls = DEFAULT_GRAPH_CALLS;
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i], *value;
    int missing = 0, matched = 0;
    for (size_t s = 0; s < SIZE_FLAG_COUNT && !matched; ++s) {
      if ((value = flag_value(argc, argv, &i, size_flags[s].flag, &missing)) != NULL) {
        if (parse_positive(size_flags[s].flag, value, dim_field(&o->dims, &size_flags[s])) != 0)
          return -1;
        o->dims_given |= size_flags[s].dim;
        matched = 1;
      }
    }
    if (matched)
      continue;
    if ((value = flag_value(argc, argv, &i, "--dtype", &missing)) != NULL) {
      if (parse_dtype(value, &o->dtype) != 0)
        return -1;
      o->dtype_given = 1;
    } else if ((value = flag_value(argc, argv, &i, "--mask", &missing)) != NULL) {
      if (strcmp(value, "causal") != 0 && strcmp(value, "none") != 0) {
        fprintf(stderr, "ignis bench: --mask must be causal or none, got '%s'\n", value);
        return -1;
      }
      o->dims.causal = strcmp(value, "causal") == 0;
      o->dims_given |= BENCH_DIM_CAUSAL;
    } else if ((value = flag_value(argc, argv, &i, "--device", &missing)) != NULL) {
      if (bench_parse_device(value, &o->device) != 0) {
        fprintf(stderr, "ignis bench: --device must be cpu, cuda or cuda:N, got '%s'\n", value);
        return -1;
      }
      o->device_given = 1;
    } else if ((value = flag_value(argc, argv, &i, "--iters", &missing)) != NULL) {
      int64_t iters;
      if (parse_positive("--iters", value, &iters) != 0)
        return -1;
      o->iters = iters > 100000 ? 100000 : (int)iters;
    } else if ((value = flag_value(argc, argv, &i, "--graph-calls", &missing)) != NULL) {
      int64_t calls;
      if (parse_positive("--graph-calls", value, &calls) != 0)
        return -1;
      o->graph_calls = calls > 10000 ? 10000 : (int)calls;
    } else if ((value = flag_value(argc, argv, &i, "--mode", &missing)) != NULL) {
      if (strcmp(value, "auto") == 0)
        o->mode = MODE_AUTO;
      else if (strcmp(value, "direct") == 0)
        o->mode = MODE_DIRECT;
      else if (strcmp(value, "graph") == 0)
        o->mode = MODE_GRAPH;
      else {
        fprintf(stderr, "ignis bench: --mode must be auto, direct or graph, got '%s'\n", value);
        return -1;
      }
    } else if ((value = flag_value(argc, argv, &i, "--json-file", &missing)) != NULL) {
      o->json_file = value;
    } else if (missing) {
      fprintf(stderr, "ignis bench: %s needs a value\n", arg);
      return -1;
    } else if (strcmp(arg, "--inplace") == 0) {
      o->dims.inplace = 1;
      o->dims_given |= BENCH_DIM_INPLACE;
    } else if (strcmp(arg, "--json") == 0) {
      o->json = 1;
    } else if (strcmp(arg, "--list") == 0) {
      o->list = 1;
    } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (arg[0] != '-' && !o->routine) {
      o->routine = arg;
    } else {
      fprintf(stderr, "ignis bench: unknown argument '%s' (see ignis bench --help)\n", arg);
      return -1;
    }
  }
  return 0;
}

/* Shape flags must be ones the routine takes; the suite takes none. */
static int check_shape_flags(const options *o, const bench_routine *routine) {
  if (!routine) {
    if (o->dims_given) {
      fprintf(stderr, "ignis bench: shape flags need a ROUTINE (the default suite has its own shapes)\n");
      return -1;
    }
    return 0;
  }
  unsigned foreign = o->dims_given & ~routine->dims;
  if (foreign) {
    char takes[256];
    flags_text(routine->dims, takes, sizeof takes);
    fprintf(stderr, "ignis bench: %s does not apply to %s (it takes %s)\n",
            flag_of((bench_dim)(foreign & -foreign)), routine->name, takes);
    return -1;
  }
  return 0;
}

static const bench_shape *suite_of(const bench_routine *routine, int gpu) {
  return gpu ? routine->gpu_suite : routine->host_suite;
}

/* One routine: the first shape of its suite on the device, with the flags given replacing its
 * dims (in place only with --inplace, as it always was). */
static bench_case single_case(const options *o, const bench_routine *routine, int gpu) {
  bench_case dims = suite_of(routine, gpu)[0].c;
  for (size_t s = 0; s < SIZE_FLAG_COUNT; ++s)
    if (o->dims_given & size_flags[s].dim)
      *dim_field(&dims, &size_flags[s]) = dim_value(&o->dims, &size_flags[s]);
  dims.inplace = o->dims.inplace;
  if (o->dims_given & BENCH_DIM_CAUSAL)
    dims.causal = o->dims.causal;
  return bench_make_case(routine, &dims, o->device, o->dtype_given ? o->dtype : dims.dtype);
}

/* The suite: group 1 of every routine in registry order, then group 2, ... Returns the case count
 * (cases may be NULL to count). */
static int suite_cases(const options *o, int gpu, bench_case *cases) {
  int last_group = 0;
  for (int r = 0; r < bench_routine_count(); ++r)
    for (const bench_shape *s = suite_of(bench_routine_at(r), gpu); s->group; ++s)
      last_group = s->group > last_group ? s->group : last_group;
  int count = 0;
  for (int group = 1; group <= last_group; ++group)
    for (int r = 0; r < bench_routine_count(); ++r) {
      const bench_routine *routine = bench_routine_at(r);
      for (const bench_shape *s = suite_of(routine, gpu); s->group; ++s)
        if (s->group == group) {
          if (cases)
            cases[count] = bench_make_case(routine, &s->c, o->device, o->dtype_given ? o->dtype : s->c.dtype);
          ++count;
        }
    }
  return count;
}

/* ---- running one case ----------------------------------------------------------------------- */
/* What every timed call of a case gets: its input sets and the state its routine prepared. */
typedef struct call_context {
  const bench_sets *sets;
  void *state;
} call_context;

static int call_set(void *context, int64_t index, void *stream) {
  const call_context *call = context;
  const bench_case *c = &call->sets->c;
  ignis_tensor tensors[BENCH_MAX_TENSORS];
  bench_sets_tensors(call->sets, index, tensors);
  return bench_check_status(c->routine->call(c, tensors, call->state, stream), c->routine->name);
}

/* Time the calls of a case on its sets, its routine's state prepared around them. */
static int time_calls(const bench_case *c, const bench_sets *sets, const result *r, double *us) {
  void *stream = NULL;
  call_context call = {sets, NULL};
  if (bench_device_stream(c->device, &stream) != 0 ||
      (c->routine->prepare && c->routine->prepare(c, stream, &call.state) != 0))
    return -1;
  int rc;
  if (strcmp(r->mode, "host") == 0)
    rc = bench_time_host(call_set, &call, 2, r->samples, us);
  else if (strcmp(r->mode, "graph") == 0)
    rc = bench_time_graph(c->device, call_set, &call, r->graphs, r->calls_per_graph, r->samples, us);
  else
    rc = bench_time_direct(c->device, call_set, &call, 3, r->samples, us);
  if (c->routine->prepare)
    c->routine->release(c, call.state);
  return rc;
}

static int default_samples(const char *mode) {
  return strcmp(mode, "direct") == 0 ? 30 : strcmp(mode, "graph") == 0 ? 20 : 10;
}

static int run_case(const bench_case *c, const options *o, const ignis_device_info *info, result *r) {
  memset(r, 0, sizeof *r);
  r->c = *c;
  r->bytes = bench_case_bytes(c);
  r->flops = c->routine->flops ? c->routine->flops(c) : 0;
  int64_t set_bytes = bench_case_set_bytes(c);
  int64_t target = 2 * info->l2_cache_bytes;
  if (c->device.type == IGNIS_DEVICE_CPU) {
    int64_t llc = bench_host_llc_bytes();
    target = llc > 0 && 2 * llc < HOST_WORKING_SET_CAP ? 2 * llc : HOST_WORKING_SET_CAP;
  }
  r->sets = target / (set_bytes > 0 ? set_bytes : 1) + 1;
  if (r->sets < 2)
    r->sets = 2;
  if (r->sets > MAX_SETS)
    r->sets = MAX_SETS;
  if (c->device.type == IGNIS_DEVICE_CPU)
    r->mode = "host";
  else if (o->mode == MODE_GRAPH || (o->mode == MODE_AUTO && r->bytes < GRAPH_THRESHOLD_BYTES))
    r->mode = "graph";
  else
    r->mode = "direct";
  if (strcmp(r->mode, "graph") == 0) {
    r->calls_per_graph = o->graph_calls;
    r->graphs = (int)((r->sets + o->graph_calls - 1) / o->graph_calls);
  }
  r->samples = o->iters ? o->iters : default_samples(r->mode);
  if (c->device.type == IGNIS_DEVICE_CUDA && r->sets * set_bytes > info->global_memory_bytes / 2)
    return bench_fail("%lld sets of %lld bytes would take over half of the device's memory",
                      (long long)r->sets, (long long)set_bytes);

  bench_sets sets;
  if (bench_sets_create(c, r->sets, &sets) != 0)
    return -1;
  r->working_set = sets.total_bytes;
  double *us = calloc((size_t)r->samples, sizeof *us);
  if (!us) {
    bench_sets_destroy(&sets);
    return bench_fail("out of host memory for %d samples", r->samples);
  }
  int rc = time_calls(c, &sets, r, us);
  bench_sets_destroy(&sets);
  if (rc == 0) {
    bench_sort_samples(us, r->samples);
    int n = r->samples;
    r->min_us = us[0];
    r->median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
    r->p90_us = us[(int)ceil(0.9 * n) - 1];
  }
  free(us);
  return rc;
}

/* ---- output --------------------------------------------------------------------------------- */
static void json_string(FILE *to, const char *text) {
  fputc('"', to);
  for (const unsigned char *p = (const unsigned char *)text; *p; ++p) {
    if (*p == '"' || *p == '\\')
      fprintf(to, "\\%c", *p);
    else if (*p < 0x20)
      fprintf(to, "\\u%04x", *p);
    else
      fputc(*p, to);
  }
  fputc('"', to);
}

static void emit_json(output *out, void (*write)(FILE *, const void *), const void *data) {
  if (out->json) {
    write(stdout, data);
    fflush(stdout);
  }
  if (out->json_file) {
    write(out->json_file, data);
    fflush(out->json_file);
  }
}

typedef struct ceiling_record {
  ignis_device device;
  const ignis_device_info *info;
  const bench_ceiling *ceiling;
} ceiling_record;

static void write_ceiling_json(FILE *to, const void *data) {
  const ceiling_record *r = data;
  char device[32];
  bench_device_name(r->device, device, sizeof device);
  fprintf(to, "{\"record\":\"ceiling\",\"ignis_version\":");
  json_string(to, ignis_version_string());
  fprintf(to, ",\"device\":\"%s\",\"device_name\":", device);
  json_string(to, r->info->name);
  fprintf(to, ",\"l2_cache_bytes\":%lld,\"copy_gbps\":%.1f,\"copy_bytes\":%lld,\"how\":",
          (long long)r->info->l2_cache_bytes, r->ceiling->gbps, (long long)r->ceiling->bytes);
  json_string(to, r->ceiling->how);
  fprintf(to, "}\n");
}

/* The mix ceiling a byte-counted case is held against (see the header comment); NULL without mixes. */
static const bench_mix_ceiling *mix_of(const bench_case *c, const bench_mix_ceiling *mixes) {
  if (!mixes || c->routine->flops)
    return NULL;
  int64_t read, written;
  int write_streams;
  bench_case_traffic(c, &read, &written, &write_streams);
  if (read + written <= 0)
    return NULL;
  const double share = (double)written / (double)(read + written);
  const bench_mix_ceiling *best = NULL;
  double best_gap = 2.0;
  for (int m = 0; m < BENCH_MIX_COUNT; ++m) {
    const double mix_share = (double)mixes[m].writes / (double)(mixes[m].reads + mixes[m].writes);
    const double gap = fabs(mix_share - share);
    /* equal shares (1:1 and 2:2): the one whose written streams match the row's */
    const int streams_match = mixes[m].writes == (write_streams >= 2 ? 2 : 1);
    if (gap < best_gap - 1e-9 || (fabs(gap - best_gap) <= 1e-9 && streams_match)) {
      best = &mixes[m];
      best_gap = gap;
    }
  }
  return best;
}

typedef struct mix_record {
  ignis_device device;
  const bench_mix_ceiling *mix;
} mix_record;

static void write_mix_json(FILE *to, const void *data) {
  const mix_record *r = data;
  char device[32];
  bench_device_name(r->device, device, sizeof device);
  fprintf(to,
          "{\"record\":\"mix_ceiling\",\"device\":\"%s\",\"reads\":%d,\"writes\":%d,\"gbps\":%.1f,"
          "\"variants\":%d,\"best\":",
          device, r->mix->reads, r->mix->writes, r->mix->gbps, r->mix->variants);
  json_string(to, r->mix->best);
  fprintf(to, "}\n");
}

typedef struct result_record {
  const result *r;
  double ceiling_gbps;
  const bench_mix_ceiling *mix;
} result_record;

static void write_result_json(FILE *to, const void *data) {
  const result_record *rec = data;
  const result *r = rec->r;
  const bench_case *c = &r->c;
  char device[32], shape[96];
  bench_device_name(c->device, device, sizeof device);
  bench_case_shape(c, shape, sizeof shape);
  double gbps = (double)r->bytes / (r->median_us * 1e-6) / 1e9;
  fprintf(to,
          "{\"record\":\"bench\",\"routine\":\"%s\",\"family\":\"%s\",\"device\":\"%s\",\"dtype\":\"%s\","
          "\"shape\":",
          c->routine->name, c->routine->family->name, device, ignis_dtype_name(c->dtype));
  json_string(to, shape);
  for (size_t s = 0; s < SIZE_FLAG_COUNT; ++s)
    if (c->routine->dims & size_flags[s].dim)
      fprintf(to, ",\"%s\":%lld", size_flags[s].json, (long long)dim_value(c, &size_flags[s]));
  if (c->routine->dims & BENCH_DIM_INPLACE)
    fprintf(to, ",\"inplace\":%s", c->inplace ? "true" : "false");
  if (c->routine->dims & BENCH_DIM_CAUSAL)
    fprintf(to, ",\"causal\":%s", c->causal ? "true" : "false");
  fprintf(to,
          ",\"mode\":\"%s\",\"sets\":%lld,\"working_set_bytes\":%lld,\"graphs\":%d,\"calls_per_graph\":%d,"
          "\"samples\":%d,\"bytes\":%lld,\"median_us\":%.3f,\"min_us\":%.3f,\"p90_us\":%.3f,"
          "\"gbps\":%.1f",
          r->mode, (long long)r->sets, (long long)r->working_set, r->graphs, r->calls_per_graph, r->samples,
          (long long)r->bytes, r->median_us, r->min_us, r->p90_us, gbps);
  if (r->flops)
    fprintf(to, ",\"flops\":%lld,\"tflops\":%.6g", (long long)r->flops,
            (double)r->flops / (r->median_us * 1e-6) / 1e12);
  if (rec->ceiling_gbps > 0)
    fprintf(to, ",\"ceiling_gbps\":%.1f,\"fraction_of_ceiling\":%.4f", rec->ceiling_gbps,
            gbps / rec->ceiling_gbps);
  if (rec->mix && rec->mix->gbps > 0)
    fprintf(to, ",\"mix\":\"%d:%d\",\"mix_gbps\":%.1f,\"fraction_of_mix\":%.4f", rec->mix->reads,
            rec->mix->writes, rec->mix->gbps, gbps / rec->mix->gbps);
  fprintf(to, "}\n");
}

typedef struct error_record {
  const bench_case *c;
  const char *message;
} error_record;

static void write_error_json(FILE *to, const void *data) {
  const error_record *e = data;
  char device[32], shape[96];
  bench_device_name(e->c->device, device, sizeof device);
  bench_case_shape(e->c, shape, sizeof shape);
  fprintf(to, "{\"record\":\"error\",\"routine\":\"%s\",\"device\":\"%s\",\"dtype\":\"%s\",\"shape\":",
          e->c->routine->name, device, ignis_dtype_name(e->c->dtype));
  json_string(to, shape);
  fprintf(to, ",\"message\":");
  json_string(to, e->message);
  fprintf(to, "}\n");
}

#define TABLE_FORMAT "%-24s %-34s %-5s %-6s %6s %10s %11s %11s %9s %6s %4s %6s\n"
/* FLOP-counted rows: GFLOP/call and TFLOP/s in the columns of MB/call and GB/s, then the GB/s of
 * their bytes rule and its fraction of the read-only (1:0) ceiling (MoE: of the weight-read floor). */
#define FLOP_TABLE_FORMAT "%-24s %-34s %-5s %-6s %6s %10s %11s %11s %9s %9s %6s\n"

static void print_header(const output *out, ignis_device device, const ignis_device_info *info,
                         const bench_ceiling *ceiling, int ceiling_ok) {
  if (out->json)
    return;
  char name[32];
  bench_device_name(device, name, sizeof name);
  if (device.type == IGNIS_DEVICE_CUDA)
    printf("# ignis %s bench on %s: %s (CC %d.%d, %d SMs, L2 %.1f MiB, %.1f GiB)\n", ignis_version_string(),
           name, info->name, info->compute_capability / 10, info->compute_capability % 10,
           info->multiprocessor_count, (double)info->l2_cache_bytes / (1 << 20),
           (double)info->global_memory_bytes / (1 << 30));
  else
    printf("# ignis %s bench on %s: %d logical cores, last-level cache %.1f MiB\n", ignis_version_string(),
           name, info->multiprocessor_count, (double)bench_host_llc_bytes() / (1 << 20));
  if (ceiling_ok)
    printf("# copy ceiling: %.1f GB/s (%s)\n", ceiling->gbps, ceiling->how);
  else
    printf("# copy ceiling: not measured (%%ceil left blank)\n");
  if (out->mixes) {
    printf("# read:write mix ceilings (probe kernels reading and writing equal 256 MiB streams, best of %d "
           "variants, median of 9; %%mix: a row's fraction of the mix nearest its own):\n",
           out->mixes[0].variants);
    for (int m = 0; m < BENCH_MIX_COUNT; ++m)
      printf("#   %d:%d  %.1f GB/s  (%.3fx copy; best %s)\n", out->mixes[m].reads, out->mixes[m].writes,
             out->mixes[m].gbps, ceiling_ok ? out->mixes[m].gbps / ceiling->gbps : 0.0, out->mixes[m].best);
  } else if (device.type == IGNIS_DEVICE_CUDA) {
    printf("# read:write mix ceilings: not measured (%%mix left blank)\n");
  }
  printf(
      "# time per call = median of the samples; direct: events around each launch; graph: calls\n"
      "# captured in CUDA graphs replayed back to back, time / calls; host: monotonic clock per call.\n"
      "# inputs rotate over `sets` copies larger together than 2x the L2 (host: 2x the LLC, <= 64 MiB).\n");
}

/* The column header of the rows that follow, when it is not the one printed last. */
static void print_columns(output *out, table_unit unit) {
  if (out->json || out->header == unit)
    return;
  if (unit == TABLE_BYTES)
    printf(TABLE_FORMAT, "routine", "shape", "dtype", "mode", "sets", "MB/call", "median_us", "p90_us",
           "GB/s", "%ceil", "mix", "%mix");
  else
    printf("# FLOP-counted routines: TFLOP/s = FLOPs per call / median time (no ceiling quoted); GB/s = "
           "bytes per call / median time, %%read its fraction of the 1:0 read ceiling\n" FLOP_TABLE_FORMAT,
           "routine", "shape", "dtype", "mode", "sets", "GFLOP/call", "median_us", "p90_us", "TFLOP/s", "GB/s",
           "%read");
  out->header = unit;
}

static table_unit unit_of(const bench_routine *routine) {
  return routine->flops ? TABLE_FLOPS : TABLE_BYTES;
}

static void print_row(output *out, const result *r) {
  result_record record = {r, out->ceiling_gbps, mix_of(&r->c, out->mixes)};
  emit_json(out, write_result_json, &record);
  ++out->rows;
  if (out->json)
    return;
  print_columns(out, unit_of(r->c.routine));
  char shape[96], sets[24], work[24], median[24], p90[24], rate[24], fraction[24] = "", mix[16] = "",
                                                                     mix_fraction[24] = "";
  bench_case_shape(&r->c, shape, sizeof shape);
  snprintf(sets, sizeof sets, "%lld", (long long)r->sets);
  snprintf(median, sizeof median, "%.2f", r->median_us);
  snprintf(p90, sizeof p90, "%.2f", r->p90_us);
  if (r->flops) {
    snprintf(work, sizeof work, "%.3f", (double)r->flops / 1e9);
    snprintf(rate, sizeof rate, "%.4g", (double)r->flops / (r->median_us * 1e-6) / 1e12);
    const double gbps = (double)r->bytes / (r->median_us * 1e-6) / 1e9;
    char bandwidth[24];
    snprintf(bandwidth, sizeof bandwidth, "%.1f", gbps);
    if (out->mixes && out->mixes[0].gbps > 0)
      snprintf(fraction, sizeof fraction, "%.1f%%", 100.0 * gbps / out->mixes[0].gbps);
    printf(FLOP_TABLE_FORMAT, r->c.routine->name, shape, ignis_dtype_name(r->c.dtype), r->mode, sets, work,
           median, p90, rate, bandwidth, fraction);
  } else {
    double gbps = (double)r->bytes / (r->median_us * 1e-6) / 1e9;
    snprintf(work, sizeof work, "%.3f", (double)r->bytes / 1e6);
    snprintf(rate, sizeof rate, "%.1f", gbps);
    if (out->ceiling_gbps > 0)
      snprintf(fraction, sizeof fraction, "%.1f%%", 100.0 * gbps / out->ceiling_gbps);
    if (record.mix && record.mix->gbps > 0) {
      snprintf(mix, sizeof mix, "%d:%d", record.mix->reads, record.mix->writes);
      snprintf(mix_fraction, sizeof mix_fraction, "%.1f%%", 100.0 * gbps / record.mix->gbps);
    }
    printf(TABLE_FORMAT, r->c.routine->name, shape, ignis_dtype_name(r->c.dtype), r->mode, sets, work, median,
           p90, rate, fraction, mix, mix_fraction);
  }
  fflush(stdout);
}

static void print_error(output *out, const bench_case *c, const char *message) {
  char shape[96];
  bench_case_shape(c, shape, sizeof shape);
  fprintf(stderr, "ignis bench: %s %s %s failed: %s\n", c->routine->name, shape, ignis_dtype_name(c->dtype),
          message);
  error_record record = {c, message};
  emit_json(out, write_error_json, &record);
  if (out->json)
    return;
  print_columns(out, unit_of(c->routine));
  printf(TABLE_FORMAT, c->routine->name, shape, ignis_dtype_name(c->dtype), "FAILED", "", "", "", "", "", "",
         "", "");
}

/* The counting rule of every routine the cases used, of one unit. */
static void print_rules(const bench_case *cases, int count, table_unit unit, const char *title) {
  int printed = 0;
  for (int i = 0; i < bench_routine_count(); ++i) {
    const bench_routine *routine = bench_routine_at(i);
    int used = 0;
    for (int j = 0; j < count && !used; ++j)
      used = cases[j].routine == routine;
    if (!used || unit_of(routine) != unit)
      continue;
    if (!printed++)
      printf("%s", title);
    printf("#   %-24s %s\n", routine->name, unit == TABLE_FLOPS ? routine->flops_rule : routine->bytes_rule);
  }
}

static void print_legend(const output *out, const bench_case *cases, int count) {
  if (out->json)
    return;
  print_rules(cases, count, TABLE_BYTES,
              "# bytes per call (each input read once, each output written once; es = element size):\n");
  print_rules(cases, count, TABLE_FLOPS, "# FLOPs per call:\n");
}

static void list_routines(void) {
  printf("%-24s %-11s %s\n", "routine", "family", "what / C functions called / counted per call");
  for (int i = 0; i < bench_routine_count(); ++i) {
    const bench_routine *r = bench_routine_at(i);
    char flags[256];
    flags_text(r->dims, flags, sizeof flags);
    printf("%-24s %-11s %s\n", r->name, r->family->name, r->summary);
    printf("%-36s calls: %s\n%-36s flags: %s\n", "", r->functions, "", flags);
    if (r->flops_rule)
      printf("%-36s FLOPs: %s\n", "", r->flops_rule);
    printf("%-36s bytes: %s\n", "", r->bytes_rule);
  }
}

/* ---- the command ---------------------------------------------------------------------------- */
int bench_command_bench(int argc, char **argv) {
  options o;
  if (parse_options(argc, argv, &o) != 0)
    return 2;
  if (o.list) {
    list_routines();
    return 0;
  }
  const bench_routine *routine = NULL;
  if (o.routine && !(routine = bench_find_routine(o.routine))) {
    fprintf(stderr, "ignis bench: unknown routine '%s' (see ignis bench --list)\n", o.routine);
    return 2;
  }
  if (check_shape_flags(&o, routine) != 0)
    return 2;
  if (!o.device_given) {
    o.device.type = ignis_cuda_device_count() > 0 ? IGNIS_DEVICE_CUDA : IGNIS_DEVICE_CPU;
    o.device.id = 0;
  }
  if (o.device.type == IGNIS_DEVICE_CUDA && o.device.id >= ignis_cuda_device_count()) {
    fprintf(stderr, "ignis bench: cuda:%d asked for but %d CUDA devices are usable (%s)\n", o.device.id,
            ignis_cuda_device_count(), ignis_build_info());
    return 1;
  }
  ignis_device_info info = IGNIS_DEVICE_INFO_INIT;
  if (bench_check_status(ignis_get_device_info(o.device, &info), "ignis_get_device_info") != 0) {
    fprintf(stderr, "ignis bench: %s\n", bench_error());
    return 1;
  }
  int gpu = o.device.type == IGNIS_DEVICE_CUDA;

  /* The cases: one routine at one shape, or the suite. */
  int count = routine ? 1 : suite_cases(&o, gpu, NULL);
  bench_case *cases = calloc((size_t)count, sizeof *cases);
  if (!cases)
    return 1;
  if (routine)
    cases[0] = single_case(&o, routine, gpu);
  else
    suite_cases(&o, gpu, cases);

  output out = {o.json, NULL, 0.0, NULL, 0, TABLE_NONE};
  if (o.json_file && !(out.json_file = fopen(o.json_file, "w"))) {
    fprintf(stderr, "ignis bench: cannot write %s\n", o.json_file);
    free(cases);
    return 1;
  }
  int failures = 0;
  bench_ceiling ceiling = {0, 0, ""};
  int ceiling_ok = bench_measure_ceiling(o.device, &ceiling) == 0;
  if (ceiling_ok) {
    out.ceiling_gbps = ceiling.gbps;
    ceiling_record record = {o.device, &info, &ceiling};
    emit_json(&out, write_ceiling_json, &record);
  } else {
    fprintf(stderr, "ignis bench: copy ceiling: %s\n", bench_error());
    ++failures;
  }
  bench_mix_ceiling mixes[BENCH_MIX_COUNT];
  if (gpu) {
    if (bench_measure_mix_ceilings(o.device, mixes) == 0) {
      out.mixes = mixes;
      for (int m = 0; m < BENCH_MIX_COUNT; ++m) {
        mix_record record = {o.device, &mixes[m]};
        emit_json(&out, write_mix_json, &record);
      }
    } else {
      fprintf(stderr, "ignis bench: read/write mix ceilings: %s\n", bench_error());
      ++failures;
    }
  }
  print_header(&out, o.device, &info, &ceiling, ceiling_ok);

  for (int i = 0; i < count; ++i) {
    char shape[96];
    bench_case_shape(&cases[i], shape, sizeof shape);
    if (count > 1)
      fprintf(stderr, "[%d/%d] %s %s %s\n", i + 1, count, cases[i].routine->name, shape,
              ignis_dtype_name(cases[i].dtype));
    result r;
    if (run_case(&cases[i], &o, &info, &r) == 0) {
      print_row(&out, &r);
    } else {
      print_error(&out, &cases[i], bench_error());
      ++failures;
    }
  }
  print_legend(&out, cases, count);
  if (out.json_file)
    fclose(out.json_file);
  free(cases);
  if (failures)
    fprintf(stderr, "ignis bench: %d failure%s\n", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
