/* `ignis info`: what this library is and what it can run here. Prints the version (and whether
 * the header this program was built with matches the library), the build line, the compiled CUDA
 * targets, the devices seen (the host, and every CUDA device with its name, compute capability,
 * SMs, L2 and memory), and which ops run on which device in which dtype. The op table is not
 * guessed: every entry of the registry makes its tiny call (bench_probe_routine: outputs poisoned,
 * then checked) in each dtype on each device, and the table shows the dtypes whose call succeeded
 * and wrote valid outputs. A dtype the entry does not take shows as '.' when its call was refused;
 * the failures of the dtypes it does take are listed below the table. `--no-probe` skips the
 * calls. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_PROBE_DEVICES 9

static void cpu_model(char *text, size_t size) {
  snprintf(text, size, "unknown model");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      char *value = colon + 1 + (colon[1] == ' ');
      value[strcspn(value, "\n")] = '\0';
      snprintf(text, size, "%s", value);
      break;
    }
  }
  fclose(f);
}

/* The part of the build line between brackets: "sm_90a,sm_80", or "" when none. */
static void compiled_targets(char *text, size_t size) {
  const char *build = ignis_build_info();
  const char *open = strstr(build, "cuda [");
  const char *close = open ? strchr(open, ']') : NULL;
  text[0] = '\0';
  if (open && close) {
    open += 6;
    snprintf(text, size, "%.*s", (int)(close - open), open);
  }
}

static void print_devices(int cuda_count) {
  ignis_device host = {IGNIS_DEVICE_CPU, 0};
  ignis_device_info info = IGNIS_DEVICE_INFO_INIT;
  char model[256];
  cpu_model(model, sizeof model);
  const char *omp = getenv("OMP_NUM_THREADS");
  printf("devices:\n");
  if (ignis_get_device_info(host, &info) == IGNIS_OK)
    printf("  cpu     %s: %d logical cores, %.1f GiB memory, last-level cache %.1f MiB, OMP_NUM_THREADS=%s\n",
           model, info.multiprocessor_count, (double)info.global_memory_bytes / (1 << 30),
           (double)bench_host_llc_bytes() / (1 << 20), omp ? omp : "unset");
  for (int d = 0; d < cuda_count; ++d) {
    ignis_device device = {IGNIS_DEVICE_CUDA, d};
    ignis_device_info gpu = IGNIS_DEVICE_INFO_INIT;
    ignis_status status = ignis_get_device_info(device, &gpu);
    if (status != IGNIS_OK) {
      printf("  cuda:%d  %s: %s\n", d, ignis_status_string(status), ignis_last_error());
      continue;
    }
    printf("  cuda:%d  %s: CC %d.%d, %d SMs, L2 %.1f MiB, shared memory per block %lld KiB, %.1f GiB\n", d,
           gpu.name, gpu.compute_capability / 10, gpu.compute_capability % 10, gpu.multiprocessor_count,
           (double)gpu.l2_cache_bytes / (1 << 20), (long long)(gpu.shared_memory_per_block_optin >> 10),
           (double)gpu.global_memory_bytes / (1 << 30));
  }
  if (cuda_count == 0)
    printf("  (no CUDA device seen)\n");
}

static void print_ops(int cuda_count) {
  ignis_device devices[MAX_PROBE_DEVICES] = {{IGNIS_DEVICE_CPU, 0}};
  int device_count = 1;
  for (int d = 0; d < cuda_count && device_count < MAX_PROBE_DEVICES; ++d) {
    devices[device_count].type = IGNIS_DEVICE_CUDA;
    devices[device_count++].id = d;
  }
  const ignis_dtype dtypes[] = {IGNIS_F32, IGNIS_F16, IGNIS_BF16};
  printf(
      "ops (dtypes whose tiny call succeeded and wrote valid outputs; '.': a dtype the op does not take):\n"
      "  %-24s %-11s",
      "routine", "family");
  for (int d = 0; d < device_count; ++d) {
    char name[32];
    bench_device_name(devices[d], name, sizeof name);
    printf(" %-14s", name);
  }
  printf("\n");
  char notes[64][600];
  int note_count = 0, notes_dropped = 0;
  for (int r = 0; r < bench_routine_count(); ++r) {
    const bench_routine *routine = bench_routine_at(r);
    printf("  %-24s %-11s", routine->name, routine->family->name);
    for (int d = 0; d < device_count; ++d) {
      char cell[64] = "";
      for (int t = 0; t < 3; ++t) {
        bench_probe probe;
        if (bench_probe_routine(routine, devices[d], dtypes[t], &probe) != 0)
          snprintf(probe.detail, sizeof probe.detail, "the probe could not run: %s", bench_error());
        int taken = (routine->dtypes & BENCH_DTYPE_BIT(dtypes[t])) != 0;
        size_t used = strlen(cell);
        snprintf(cell + used, sizeof cell - used, "%s%s", used ? " " : "",
                 probe.written ? ignis_dtype_name(dtypes[t])
                 : taken       ? "-"
                               : ".");
        if (probe.written || !taken)
          continue;
        char name[32];
        bench_device_name(devices[d], name, sizeof name);
        if (note_count < 64)
          snprintf(notes[note_count++], sizeof notes[0], "%s on %s %s: %s: %s", routine->name, name,
                   ignis_dtype_name(dtypes[t]), ignis_status_string(probe.status), probe.detail);
        else
          ++notes_dropped;
      }
      printf(" %-14s", cell);
    }
    printf("\n");
  }
  for (int i = 0; i < note_count; ++i)
    printf("  note: %s\n", notes[i]);
  if (notes_dropped)
    printf("  note: %d more probe failures not shown\n", notes_dropped);
}

/* The library's table of environment variables, with what this process has set. */
static void print_environment(void) {
  printf("environment variables the library reads:\n");
  for (int i = 0; i < ignis_env_var_count(); ++i) {
    const ignis_env_var *v = ignis_env_var_at(i);
    const char *value = getenv(v->name);
    printf("  %-30s %-12s %s (values: %s; unset: %s)\n", v->name, value ? value : "(unset)", v->meaning, v->values,
           v->unset);
  }
}

int bench_command_info(int argc, char **argv) {
  int run_probe = 1;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--no-probe") == 0) {
      run_probe = 0;
    } else {
      fprintf(stderr, "usage: ignis info [--no-probe]\n");
      return 2;
    }
  }
  int library = ignis_version();
  printf("ignis %s (library %d, header %d%s)\n", ignis_version_string(), library, IGNIS_VERSION_NUMBER,
         library == IGNIS_VERSION_NUMBER ? "" : ": MISMATCH");
  printf("build: %s\n", ignis_build_info());
  char targets[256];
  compiled_targets(targets, sizeof targets);
  printf("CUDA targets compiled: %s\n", targets[0] ? targets : "none (CUDA backend not built)");
  int runtime, driver;
  bench_cuda_versions(&runtime, &driver);
  if (runtime) {
    printf("CUDA runtime of this program %d.%d; ", runtime / 1000, runtime % 1000 / 10);
    if (driver)
      printf("driver supports CUDA %d.%d\n", driver / 1000, driver % 1000 / 10);
    else
      printf("no CUDA driver found\n");
  }
  int cuda_count = ignis_cuda_device_count();
  print_devices(cuda_count);
  print_environment();
  if (run_probe)
    print_ops(cuda_count);
  return 0;
}
