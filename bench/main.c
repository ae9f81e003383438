/* The `ignis` program: `ignis info` (version, build, devices, ops available) and `ignis bench`
 * (timings of every op against the measured copy ceiling). Each command lives in its own file;
 * this one only dispatches. Exit status: 0 success, 1 a failure (named on stderr), 2 bad usage. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *to) {
  fprintf(to, "usage: ignis <command> [options]\n"
              "commands:\n"
              "  info [--no-probe]   version, build, CUDA targets, devices, ops available\n"
              "  bench [ROUTINE]     time one routine, or the default suite (ignis bench --help)\n"
              "  version             print the library version\n"
              "  help                this text\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char *command = argv[1];
  if (strcmp(command, "info") == 0)
    return bench_command_info(argc - 1, argv + 1);
  if (strcmp(command, "bench") == 0)
    return bench_command_bench(argc - 1, argv + 1);
  if (strcmp(command, "version") == 0 || strcmp(command, "--version") == 0) {
    printf("%s\n", ignis_version_string());
    return 0;
  }
  if (strcmp(command, "help") == 0 || strcmp(command, "--help") == 0 || strcmp(command, "-h") == 0) {
    usage(stdout);
    return 0;
  }
  fprintf(stderr, "ignis: unknown command '%s'\n", command);
  usage(stderr);
  return 2;
}
