/* `ignis bench [ROUTINE] [flags]`: time one routine at one shape, or with no routine the default
 * suite on the default device (CUDA when a GPU is present, else the host). Prints an aligned
 * table, or one JSON object per line with --json.
 *
 * Method (see bench.h for the input sets and the byte counts):
 *   - the copy ceiling of the device is measured once per run; every row quotes its fraction;
 *   - inputs rotate over enough copies that their total exceeds twice the L2, so no call reads
 *     what an earlier call left in the cache (on the host: twice the last-level cache, at most
 *     64 MiB, so the short host suite stays short);
 *   - GPU calls that move 64 MiB or more are timed one launch at a time between events (mode
 *     direct); smaller ones are captured, 100 calls per CUDA graph, each call on the next input
 *     set, and the graphs replayed back to back (mode graph, time per call);
 *   - the time quoted is the median of the samples (min and p90 too with --json);
 *     GB/s = bytes per call / median time. */
#include <math.h>
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
  int64_t tokens, hidden, q_heads, k_heads, head_dim, batch; /* 0: the default */
  int inplace;
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
  int64_t sets;
  int64_t working_set;
  int graphs;
  int calls_per_graph;
  int samples;
  double median_us, min_us, p90_us;
} result;

typedef struct output {
  int json;
  FILE *json_file;
  double ceiling_gbps;
  int rows;
} output;

static void usage(FILE *to) {
  fprintf(to, "usage: ignis bench [ROUTINE] [flags]\n"
              "  With no ROUTINE: the default suite on the default device (cuda when a GPU is present).\n"
              "  ROUTINE: one of `ignis bench --list`.\n"
              "shape flags:\n"
              "  --tokens N          rows / tokens\n"
              "  --hidden N          hidden size (norms; for activations H of the output, input is 2H)\n"
              "  --q-heads N --k-heads N --head-dim N   RoPE heads (default 32/8/128)\n"
              "  --batch N           requests of the indptr/offsets form `rope`\n"
              "  --inplace           RoPE outputs overwrite q and k\n"
              "  --dtype bf16|f16|f32 (default bf16)\n"
              "other flags:\n"
              "  --device cpu|cuda|cuda:N   (default: cuda when ignis_cuda_device_count() > 0)\n"
              "  --iters N           timed samples (default 30 direct, 20 graph, 10 host)\n"
              "  --mode auto|direct|graph   GPU timing (auto: graph below 64 MiB moved per call)\n"
              "  --graph-calls N     calls captured per CUDA graph (default 100)\n"
              "  --json              one JSON object per line instead of the table\n"
              "  --json-file PATH    also write the JSON lines to PATH\n"
              "  --list              list the routines and how their bytes are counted\n"
              "defaults without shape flags: 16384x8192 (GPU) or 512x4096 (host); RoPE 16384 (GPU) or 512\n"
              "(host) tokens x 32/8 heads x 128.\n");
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

static int parse_options(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->dtype = IGNIS_BF16;
  o->graph_calls = DEFAULT_GRAPH_CALLS;
  struct {
    const char *flag;
    int64_t *value;
  } sizes[] = {{"--tokens", &o->tokens},   {"--hidden", &o->hidden},     {"--q-heads", &o->q_heads},
               {"--k-heads", &o->k_heads}, {"--head-dim", &o->head_dim}, {"--batch", &o->batch}};
  for (int i = 1; i < argc; ++i) {
    const char *arg = argv[i], *value;
    int missing = 0, matched = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0] && !matched; ++s) {
      if ((value = flag_value(argc, argv, &i, sizes[s].flag, &missing)) != NULL) {
        if (parse_positive(sizes[s].flag, value, sizes[s].value) != 0)
          return -1;
        matched = 1;
      }
    }
    if (matched)
      continue;
    if ((value = flag_value(argc, argv, &i, "--dtype", &missing)) != NULL) {
      if (parse_dtype(value, &o->dtype) != 0)
        return -1;
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
      o->inplace = 1;
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

/* Shape flags must fit the routine's family; the suite takes none. */
static int check_shape_flags(const options *o, const bench_routine *routine) {
  const char *rope_flag = o->q_heads    ? "--q-heads"
                          : o->k_heads  ? "--k-heads"
                          : o->head_dim ? "--head-dim"
                          : o->batch    ? "--batch"
                          : o->inplace  ? "--inplace"
                                        : NULL;
  if (!routine) {
    if (o->tokens || o->hidden || rope_flag) {
      fprintf(stderr, "ignis bench: shape flags need a ROUTINE (the default suite has its own shapes)\n");
      return -1;
    }
    return 0;
  }
  if (routine->family == BENCH_FAMILY_ROPE && o->hidden) {
    fprintf(stderr, "ignis bench: --hidden does not apply to %s (use --q-heads/--k-heads/--head-dim)\n",
            routine->name);
    return -1;
  }
  if (routine->family != BENCH_FAMILY_ROPE && rope_flag) {
    fprintf(stderr, "ignis bench: %s does not apply to %s\n", rope_flag, routine->name);
    return -1;
  }
  return 0;
}

static int64_t default_batch(int64_t tokens) {
  return tokens <= 256 ? tokens : (tokens + 4095) / 4096;
}

static bench_case make_case(const bench_routine *routine, ignis_device device, ignis_dtype dtype,
                            int64_t tokens, int64_t hidden, int inplace) {
  bench_case c;
  memset(&c, 0, sizeof c);
  c.routine = routine;
  c.device = device;
  c.dtype = dtype;
  c.tokens = tokens;
  c.hidden = hidden;
  c.q_heads = 32;
  c.k_heads = 8;
  c.head_dim = 128;
  c.batch = default_batch(tokens);
  c.inplace = inplace;
  return c;
}

/* ---- the default suites --------------------------------------------------------------------- */
typedef struct suite_entry {
  const char *routine;
  int64_t tokens;
  int64_t hidden; /* ignored by RoPE */
  int inplace;
} suite_entry;

static const suite_entry gpu_suite[] = {
    {"rmsnorm", 16384, 8192, 0},
    {"gemma_rmsnorm", 16384, 8192, 0},
    {"fused_add_rmsnorm", 16384, 8192, 0},
    {"gemma_fused_add_rmsnorm", 16384, 8192, 0},
    {"layernorm", 16384, 8192, 0},
    {"silu_and_mul", 16384, 8192, 0},
    {"gelu_and_mul", 16384, 8192, 0},
    {"gelu_tanh_and_mul", 16384, 8192, 0},
    {"rmsnorm", 4096, 4096, 0},
    {"fused_add_rmsnorm", 4096, 4096, 0},
    {"silu_and_mul", 4096, 4096, 0},
    {"rope_pos_ids", 16384, 0, 0},
    {"rope_pos_ids", 16384, 0, 1},
    {"rope", 16384, 0, 1},
    {"rope_llama31", 16384, 0, 1},
    {"rope_cos_sin_cache", 16384, 0, 1},
    {"rmsnorm", 128, 4096, 0},
    {"rmsnorm", 16, 4096, 0},
    {"rmsnorm", 1, 4096, 0},
    {"fused_add_rmsnorm", 128, 4096, 0},
    {"fused_add_rmsnorm", 16, 4096, 0},
    {"fused_add_rmsnorm", 1, 4096, 0},
    {"silu_and_mul", 128, 4096, 0},
    {"silu_and_mul", 16, 4096, 0},
    {"silu_and_mul", 1, 4096, 0},
    {"rope_pos_ids", 128, 0, 1},
    {"rope_pos_ids", 16, 0, 1},
    {"rope_pos_ids", 1, 0, 1},
    {"rope_cos_sin_cache", 128, 0, 1},
    {"rope_cos_sin_cache", 16, 0, 1},
    {"rope_cos_sin_cache", 1, 0, 1},
};

/* The host suite stays short (CI runs it): 512 rows stand in for the large shapes. */
static const suite_entry host_suite[] = {
    {"rmsnorm", 512, 4096, 0},
    {"gemma_rmsnorm", 512, 4096, 0},
    {"fused_add_rmsnorm", 512, 4096, 0},
    {"gemma_fused_add_rmsnorm", 512, 4096, 0},
    {"layernorm", 512, 4096, 0},
    {"silu_and_mul", 512, 4096, 0},
    {"gelu_and_mul", 512, 4096, 0},
    {"gelu_tanh_and_mul", 512, 4096, 0},
    {"rope_pos_ids", 512, 0, 0},
    {"rope_pos_ids", 512, 0, 1},
    {"rope", 512, 0, 1},
    {"rope_llama31", 512, 0, 1},
    {"rope_cos_sin_cache", 512, 0, 1},
    {"rmsnorm", 16, 4096, 0},
    {"rmsnorm", 1, 4096, 0},
    {"fused_add_rmsnorm", 16, 4096, 0},
    {"fused_add_rmsnorm", 1, 4096, 0},
    {"silu_and_mul", 16, 4096, 0},
    {"silu_and_mul", 1, 4096, 0},
    {"rope_pos_ids", 16, 0, 1},
    {"rope_pos_ids", 1, 0, 1},
    {"rope_cos_sin_cache", 1, 0, 1},
};

/* ---- running one case ----------------------------------------------------------------------- */
static int call_set(void *context, int64_t index, void *stream) {
  const bench_sets *sets = context;
  ignis_tensor tensors[BENCH_MAX_TENSORS];
  bench_sets_tensors(sets, index, tensors);
  return bench_check_status(sets->c.routine->call(&sets->c, tensors, stream), sets->c.routine->name);
}

static int default_samples(const char *mode) {
  return strcmp(mode, "direct") == 0 ? 30 : strcmp(mode, "graph") == 0 ? 20 : 10;
}

static int run_case(const bench_case *c, const options *o, const ignis_device_info *info, result *r) {
  memset(r, 0, sizeof *r);
  r->c = *c;
  r->bytes = bench_case_bytes(c);
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
  int rc;
  if (strcmp(r->mode, "host") == 0)
    rc = bench_time_host(call_set, &sets, 2, r->samples, us);
  else if (strcmp(r->mode, "graph") == 0)
    rc = bench_time_graph(c->device, call_set, &sets, r->graphs, r->calls_per_graph, r->samples, us);
  else
    rc = bench_time_direct(c->device, call_set, &sets, 3, r->samples, us);
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

typedef struct result_record {
  const result *r;
  double ceiling_gbps;
} result_record;

static void write_result_json(FILE *to, const void *data) {
  const result_record *rec = data;
  const result *r = rec->r;
  const bench_case *c = &r->c;
  char device[32], shape[96];
  bench_device_name(c->device, device, sizeof device);
  bench_case_shape(c, shape, sizeof shape);
  double gbps = (double)r->bytes / (r->median_us * 1e-6) / 1e9;
  fprintf(to, "{\"record\":\"bench\",\"routine\":\"%s\",\"device\":\"%s\",\"dtype\":\"%s\",\"shape\":",
          c->routine->name, device, ignis_dtype_name(c->dtype));
  json_string(to, shape);
  fprintf(to, ",\"tokens\":%lld", (long long)c->tokens);
  if (c->routine->family == BENCH_FAMILY_ROPE)
    fprintf(to, ",\"q_heads\":%lld,\"k_heads\":%lld,\"head_dim\":%lld,\"batch\":%lld,\"inplace\":%s",
            (long long)c->q_heads, (long long)c->k_heads, (long long)c->head_dim, (long long)c->batch,
            c->inplace ? "true" : "false");
  else
    fprintf(to, ",\"hidden\":%lld", (long long)c->hidden);
  fprintf(to,
          ",\"mode\":\"%s\",\"sets\":%lld,\"working_set_bytes\":%lld,\"graphs\":%d,\"calls_per_graph\":%d,"
          "\"samples\":%d,\"bytes\":%lld,\"median_us\":%.3f,\"min_us\":%.3f,\"p90_us\":%.3f,"
          "\"gbps\":%.1f",
          r->mode, (long long)r->sets, (long long)r->working_set, r->graphs, r->calls_per_graph, r->samples,
          (long long)r->bytes, r->median_us, r->min_us, r->p90_us, gbps);
  if (rec->ceiling_gbps > 0)
    fprintf(to, ",\"ceiling_gbps\":%.1f,\"fraction_of_ceiling\":%.4f", rec->ceiling_gbps,
            gbps / rec->ceiling_gbps);
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

#define TABLE_FORMAT "%-24s %-34s %-5s %-6s %6s %10s %11s %11s %9s %6s\n"

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
  printf(
      "# time per call = median of the samples; direct: events around each launch; graph: calls\n"
      "# captured in CUDA graphs replayed back to back, time / calls; host: monotonic clock per call.\n"
      "# inputs rotate over `sets` copies larger together than 2x the L2 (host: 2x the LLC, <= 64 MiB).\n");
  printf(TABLE_FORMAT, "routine", "shape", "dtype", "mode", "sets", "MB/call", "median_us", "p90_us", "GB/s",
         "%ceil");
}

static void print_row(output *out, const result *r) {
  result_record record = {r, out->ceiling_gbps};
  emit_json(out, write_result_json, &record);
  ++out->rows;
  if (out->json)
    return;
  char shape[96], sets[24], mb[24], median[24], p90[24], gbps_text[24], fraction[24] = "";
  bench_case_shape(&r->c, shape, sizeof shape);
  double gbps = (double)r->bytes / (r->median_us * 1e-6) / 1e9;
  snprintf(sets, sizeof sets, "%lld", (long long)r->sets);
  snprintf(mb, sizeof mb, "%.3f", (double)r->bytes / 1e6);
  snprintf(median, sizeof median, "%.2f", r->median_us);
  snprintf(p90, sizeof p90, "%.2f", r->p90_us);
  snprintf(gbps_text, sizeof gbps_text, "%.1f", gbps);
  if (out->ceiling_gbps > 0)
    snprintf(fraction, sizeof fraction, "%.1f%%", 100.0 * gbps / out->ceiling_gbps);
  printf(TABLE_FORMAT, r->c.routine->name, shape, ignis_dtype_name(r->c.dtype), r->mode, sets, mb, median,
         p90, gbps_text, fraction);
  fflush(stdout);
}

static void print_error(output *out, const bench_case *c, const char *message) {
  char shape[96];
  bench_case_shape(c, shape, sizeof shape);
  fprintf(stderr, "ignis bench: %s %s %s failed: %s\n", c->routine->name, shape, ignis_dtype_name(c->dtype),
          message);
  error_record record = {c, message};
  emit_json(out, write_error_json, &record);
  if (!out->json)
    printf(TABLE_FORMAT, c->routine->name, shape, ignis_dtype_name(c->dtype), "FAILED", "", "", "", "", "",
           "");
}

static void print_legend(const output *out, const bench_case *cases, int count) {
  if (out->json)
    return;
  printf("# bytes per call (each input read once, each output written once; es = element size):\n");
  for (int i = 0; i < bench_routine_count; ++i) {
    int used = 0;
    for (int j = 0; j < count && !used; ++j)
      used = cases[j].routine == &bench_routines[i];
    if (used)
      printf("#   %-24s %s\n", bench_routines[i].name, bench_routines[i].bytes_rule);
  }
}

static void list_routines(void) {
  printf("%-24s %-11s %s\n", "routine", "flags", "what / bytes counted per call");
  const char *families[] = {"norm", "activation", "rope"};
  for (int i = 0; i < bench_routine_count; ++i) {
    const bench_routine *r = &bench_routines[i];
    printf("%-24s %-11s %s\n%-36s bytes: %s\n", r->name, families[r->family], r->summary, "", r->bytes_rule);
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
  int count = 0;
  bench_case *cases;
  if (routine) {
    cases = calloc(1, sizeof *cases);
    if (!cases)
      return 1;
    int64_t tokens = o.tokens ? o.tokens : gpu ? 16384 : 512;
    int64_t hidden = o.hidden ? o.hidden : gpu ? 8192 : 4096;
    cases[0] = make_case(routine, o.device, o.dtype, tokens, hidden, o.inplace);
    if (o.q_heads)
      cases[0].q_heads = o.q_heads;
    if (o.k_heads)
      cases[0].k_heads = o.k_heads;
    if (o.head_dim)
      cases[0].head_dim = o.head_dim;
    if (o.batch)
      cases[0].batch = o.batch > tokens ? tokens : o.batch;
    count = 1;
  } else {
    const suite_entry *suite = gpu ? gpu_suite : host_suite;
    int n =
        gpu ? (int)(sizeof gpu_suite / sizeof gpu_suite[0]) : (int)(sizeof host_suite / sizeof host_suite[0]);
    cases = calloc((size_t)n, sizeof *cases);
    if (!cases)
      return 1;
    for (int i = 0; i < n; ++i)
      cases[count++] = make_case(bench_find_routine(suite[i].routine), o.device, o.dtype, suite[i].tokens,
                                 suite[i].hidden, suite[i].inplace);
  }

  output out = {o.json, NULL, 0.0, 0};
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
