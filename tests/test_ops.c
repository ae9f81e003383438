/* Smoke test of every op in the registry of the `ignis` program (bench/registry.c): each entry's
 * tiny call, on every backend present (the CPU always, CUDA when a GPU is), in f32, f16 and bf16.
 * A dtype the entry takes must succeed and leave every output written with valid values (the
 * outputs are poisoned first; bench_probe_routine checks them); a dtype it does not take may be
 * refused, but a call that reports success must have written valid outputs too, and a refusal
 * must say why. The per-op tests check values against fp64 references; this one checks that no
 * public op is missing from the registry's walk and that each one runs everywhere it claims.
 *
 * The entries themselves are checked first: unique names, the C functions they call named, dims
 * and dtypes given, a shape in both default suites (so the suites cover every family), the bytes
 * or FLOPs of every suite shape counted, and host shapes small enough for CI's short suite.
 * IGNIS_TEST_ONLY=text runs the tiny calls of the routines whose name contains text. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "harness.h"

/* A host suite shape must fit the host's rotation cap: CI runs that suite on two cores. */
#define HOST_SET_BYTES_CAP ((int64_t)64 << 20)

static int functions_named(const char *functions) {
  if (!functions || !functions[0])
    return 0;
  for (const char *p = functions; *p;) {
    if (strncmp(p, "ignis_", 6) != 0)
      return 0;
    p += strcspn(p, " ");
    p += strspn(p, " ");
  }
  return 1;
}

static void check_suite(const bench_routine *r, const bench_shape *suite, ignis_device_type type,
                        const char *which) {
  int shapes = 0;
  for (const bench_shape *s = suite; s && s->group; ++s, ++shapes) {
    ignis_device device = {type, 0};
    bench_case c = bench_make_case(r, &s->c, device, s->c.dtype);
    char shape[96];
    bench_case_shape(&c, shape, sizeof shape);
    h_case("%s %s suite shape %s", r->name, which, shape);
    bench_tensor_spec specs[BENCH_MAX_TENSORS];
    CHECK(r->describe(&c, specs) <= BENCH_MAX_TENSORS);
    CHECKF(bench_case_bytes(&c) > 0, "bytes %lld", (long long)bench_case_bytes(&c));
    if (r->flops)
      CHECKF(r->flops(&c) > 0, "FLOPs %lld", (long long)r->flops(&c));
    if (type == IGNIS_DEVICE_CPU)
      CHECKF(bench_case_set_bytes(&c) <= HOST_SET_BYTES_CAP, "one set is %lld bytes",
             (long long)bench_case_set_bytes(&c));
  }
  h_case("%s %s suite", r->name, which);
  CHECKF(shapes > 0, "no shape in the %s suite", which);
}

static void check_entries(void) {
  CHECK(bench_routine_count() > 0);
  for (int i = 0; i < bench_routine_count(); ++i) {
    const bench_routine *r = bench_routine_at(i);
    h_case("entry %s", r->name);
    CHECK(r->family && r->describe && r->call && r->summary && r->bytes_rule);
    CHECKF(functions_named(r->functions), "functions \"%s\"", r->functions ? r->functions : "");
    CHECK(r->dims != 0 && r->dtypes != 0);
    CHECK((r->flops == NULL) == (r->flops_rule == NULL));
    CHECK((r->prepare == NULL) == (r->release == NULL));
    CHECK(bench_find_routine(r->name) == r); /* names are unique */
    check_suite(r, r->gpu_suite, IGNIS_DEVICE_CUDA, "gpu");
    check_suite(r, r->host_suite, IGNIS_DEVICE_CPU, "host");
  }
}

static void check_tiny_calls(h_backend backend) {
  const ignis_dtype dtypes[] = {IGNIS_F32, IGNIS_F16, IGNIS_BF16};
  for (int i = 0; i < bench_routine_count(); ++i) {
    const bench_routine *r = bench_routine_at(i);
    if (!h_selected(r->name))
      continue;
    for (int t = 0; t < 3; ++t) {
      h_case("%s on %s in %s", r->name, h_backend_name(backend), ignis_dtype_name(dtypes[t]));
      bench_probe probe;
      if (!CHECKF(bench_probe_routine(r, h_backend_device(backend), dtypes[t], &probe) == 0,
                  "the probe could not run: %s", bench_error()))
        continue;
      int taken = (r->dtypes & BENCH_DTYPE_BIT(dtypes[t])) != 0;
      if (taken)
        CHECKF(probe.status == IGNIS_OK, "%s: %s", ignis_status_string(probe.status), probe.detail);
      if (probe.status == IGNIS_OK)
        CHECKF(probe.written, "%s", probe.detail);
      else if (!taken)
        CHECKF(probe.detail[0] != '\0', "refused with %s and no message", ignis_status_string(probe.status));
    }
  }
}

int main(void) {
  h_init("test_ops");
  check_entries();
  for (int b = 0; b < h_backend_count(); ++b) {
    h_backend backend = h_backend_at(b);
    if (h_quick() && backend == H_CPU)
      continue;
    check_tiny_calls(backend);
  }
  return h_finish();
}
