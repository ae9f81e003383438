/* The device layer of the `ignis` program: memory, the stream ops run on, timers and the copy
 * ceiling, for the host and (when built with CUDA) for CUDA devices. Every CUDA call is checked;
 * a failure becomes a bench_fail message naming the call and the CUDA error.
 *
 * Timing on a GPU uses events on one non-blocking stream per device. Direct timing records an
 * event after every launch, so each sample is one call's time on the device (launches are queued
 * ahead of the GPU, so no host gap falls between them). Graph timing captures many calls into
 * CUDA graphs, replays all of them back to back between two events and divides by the number of
 * calls: launch gaps shrink to what a real graph-replaying engine sees. On the host each call is
 * timed with the monotonic clock. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef IGNIS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "bench.h"

static char error_message[2048];
static ignis_status failed_status;

int bench_fail(const char *format, ...) {
  failed_status = IGNIS_OK;
  va_list args;
  va_start(args, format);
  vsnprintf(error_message, sizeof error_message, format, args);
  va_end(args);
  return -1;
}

const char *bench_error(void) {
  return error_message;
}

int bench_check_status(ignis_status status, const char *what) {
  if (status == IGNIS_OK)
    return 0;
  bench_fail("%s: %s: %s", what, ignis_status_string(status), ignis_last_error());
  failed_status = status;
  return -1;
}

ignis_status bench_failed_status(void) {
  return failed_status;
}

static double host_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void bench_sort_samples(double *values, int count) {
  qsort(values, (size_t)count, sizeof *values, compare_doubles);
}

static double median_of(double *values, int count) {
  bench_sort_samples(values, count);
  return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

int64_t bench_host_llc_bytes(void) {
#ifdef _SC_LEVEL3_CACHE_SIZE
  long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0)
    return l3;
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l2 > 0)
    return l2;
#endif
  return 0;
}

int bench_time_host(bench_call_fn fn, void *context, int warmup, int samples, double *out_us) {
  for (int i = 0; i < warmup; ++i)
    if (fn(context, i, NULL) != 0)
      return -1;
  for (int i = 0; i < samples; ++i) {
    double start = host_now_us();
    if (fn(context, warmup + i, NULL) != 0)
      return -1;
    out_us[i] = host_now_us() - start;
  }
  return 0;
}

/* ---- host copy ceiling: memcpy split over as many threads as the ops use ---------------------- */
typedef struct copy_job {
  char *dst;
  const char *src;
  size_t bytes;
} copy_job;

static void *copy_worker(void *arg) {
  copy_job *job = arg;
  memcpy(job->dst, job->src, job->bytes);
  return NULL;
}

static int host_threads(void) {
  const char *omp = getenv("OMP_NUM_THREADS");
  long threads = omp ? strtol(omp, NULL, 10) : 0;
  if (threads <= 0)
    threads = sysconf(_SC_NPROCESSORS_ONLN);
  if (threads <= 0)
    threads = 1;
  return threads > 256 ? 256 : (int)threads;
}

/* Copy `bytes` in `threads` equal chunks, the calling thread taking the last one. */
static int threaded_copy(char *dst, const char *src, size_t bytes, int threads, double *out_us) {
  pthread_t ids[256];
  copy_job jobs[256];
  size_t chunk = (bytes / (size_t)threads + 63) / 64 * 64;
  for (int t = 0; t < threads; ++t) {
    size_t begin = (size_t)t * chunk < bytes ? (size_t)t * chunk : bytes;
    size_t end = begin + chunk < bytes ? begin + chunk : bytes;
    jobs[t].dst = dst + begin;
    jobs[t].src = src + begin;
    jobs[t].bytes = end - begin;
  }
  double start = host_now_us();
  int started = 0, rc = 0;
  for (int t = 0; t < threads - 1; ++t) {
    if (pthread_create(&ids[t], NULL, copy_worker, &jobs[t]) != 0) {
      rc = bench_fail("pthread_create failed for the copy ceiling");
      break;
    }
    ++started;
  }
  if (rc == 0)
    copy_worker(&jobs[threads - 1]);
  for (int t = 0; t < started; ++t)
    pthread_join(ids[t], NULL);
  *out_us = host_now_us() - start;
  return rc;
}

#define HOST_CEILING_BYTES ((size_t)256 << 20)
#define GPU_CEILING_BYTES ((size_t)1 << 30)
#define CEILING_WARMUP 3
#define CEILING_SAMPLES 10

static int host_ceiling(bench_ceiling *out) {
  ignis_device host = {IGNIS_DEVICE_CPU, 0};
  char *src = NULL, *dst = NULL;
  if (bench_device_alloc(host, HOST_CEILING_BYTES, (void **)&src) != 0 ||
      bench_device_alloc(host, HOST_CEILING_BYTES, (void **)&dst) != 0) {
    free(src);
    return -1;
  }
  int rc = bench_fill_random(host, src, (int64_t)HOST_CEILING_BYTES, IGNIS_F32, 1);
  if (rc == 0)
    rc = bench_fill_random(host, dst, (int64_t)HOST_CEILING_BYTES, IGNIS_F32, 2);
  int threads = host_threads();
  double samples[CEILING_SAMPLES], unused;
  for (int i = 0; rc == 0 && i < 2; ++i)
    rc = threaded_copy(dst, src, HOST_CEILING_BYTES, threads, &unused);
  for (int i = 0; rc == 0 && i < 5; ++i)
    rc = threaded_copy(dst, src, HOST_CEILING_BYTES, threads, &samples[i]);
  free(src);
  free(dst);
  if (rc != 0)
    return -1;
  double us = median_of(samples, 5);
  out->gbps = 2.0 * (double)HOST_CEILING_BYTES / (us * 1e-6) / 1e9;
  out->bytes = (int64_t)HOST_CEILING_BYTES;
  out->how = "256 MiB host memcpy split over the op threads, read+write bytes, median of 5";
  return 0;
}

#ifdef IGNIS_HAVE_CUDA
/* ---- CUDA --------------------------------------------------------------------------------- */
#define CUDA_TRY(call)                                                                                       \
  do {                                                                                                       \
    cudaError_t cuda_try_error_ = (call);                                                                    \
    if (cuda_try_error_ != cudaSuccess)                                                                      \
      return bench_fail("%s failed: %s (%s)", #call, cudaGetErrorString(cuda_try_error_),                    \
                        cudaGetErrorName(cuda_try_error_));                                                  \
  } while (0)

#define MAX_DEVICES 64
static cudaStream_t streams[MAX_DEVICES];

static int use_device(ignis_device device) {
  if (device.id < 0 || device.id >= MAX_DEVICES)
    return bench_fail("cuda:%d is not a device this program can use", device.id);
  CUDA_TRY(cudaSetDevice(device.id));
  if (!streams[device.id])
    CUDA_TRY(cudaStreamCreateWithFlags(&streams[device.id], cudaStreamNonBlocking));
  return 0;
}

int bench_device_alloc(ignis_device device, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (device.type == IGNIS_DEVICE_CPU) {
    if (posix_memalign(ptr, 4096, bytes ? bytes : 1) != 0)
      return bench_fail("out of host memory (%zu bytes)", bytes);
    return 0;
  }
  if (use_device(device) != 0)
    return -1;
  CUDA_TRY(cudaMalloc(ptr, bytes ? bytes : 1));
  return 0;
}

void bench_device_free(ignis_device device, void *ptr) {
  if (device.type == IGNIS_DEVICE_CPU) {
    free(ptr);
  } else if (use_device(device) == 0) {
    cudaFree(ptr);
  }
}

/* A copy between the host and the device on the device's stream, waited for: the host buffer is
 * pageable and the caller frees or reads it right after. */
static int copy_and_wait(ignis_device device, void *dst, const void *src, size_t bytes,
                         enum cudaMemcpyKind kind) {
  if (device.type == IGNIS_DEVICE_CPU) {
    memcpy(dst, src, bytes);
    return 0;
  }
  if (use_device(device) != 0)
    return -1;
  CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, kind, streams[device.id]));
  CUDA_TRY(cudaStreamSynchronize(streams[device.id]));
  return 0;
}

int bench_device_upload(ignis_device device, void *dst, const void *src, size_t bytes) {
  return copy_and_wait(device, dst, src, bytes, cudaMemcpyHostToDevice);
}

int bench_device_download(ignis_device device, void *dst, const void *src, size_t bytes) {
  return copy_and_wait(device, dst, src, bytes, cudaMemcpyDeviceToHost);
}

int bench_device_copy(ignis_device device, void *dst, const void *src, size_t bytes) {
  if (device.type == IGNIS_DEVICE_CPU) {
    memcpy(dst, src, bytes);
    return 0;
  }
  if (use_device(device) != 0)
    return -1;
  CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, streams[device.id]));
  return 0;
}

int bench_device_stream(ignis_device device, void **stream) {
  *stream = NULL;
  if (device.type == IGNIS_DEVICE_CPU)
    return 0;
  if (use_device(device) != 0)
    return -1;
  *stream = streams[device.id];
  return 0;
}

int bench_device_sync(ignis_device device) {
  if (device.type == IGNIS_DEVICE_CPU)
    return 0;
  if (use_device(device) != 0)
    return -1;
  CUDA_TRY(cudaStreamSynchronize(streams[device.id]));
  CUDA_TRY(cudaGetLastError());
  return 0;
}

void bench_cuda_versions(int *runtime, int *driver) {
  *runtime = 0;
  *driver = 0;
  if (cudaRuntimeGetVersion(runtime) != cudaSuccess)
    *runtime = 0;
  if (cudaDriverGetVersion(driver) != cudaSuccess)
    *driver = 0;
}

static void destroy_events(cudaEvent_t *events, int count) {
  for (int i = 0; i < count; ++i)
    if (events[i])
      cudaEventDestroy(events[i]);
  free(events);
}

static int create_events(int count, cudaEvent_t **out) {
  *out = calloc((size_t)count, sizeof **out);
  if (!*out)
    return bench_fail("out of host memory for %d events", count);
  for (int i = 0; i < count; ++i) {
    cudaError_t error = cudaEventCreate(&(*out)[i]);
    if (error != cudaSuccess) {
      destroy_events(*out, count);
      *out = NULL;
      return bench_fail("cudaEventCreate failed: %s", cudaGetErrorString(error));
    }
  }
  return 0;
}

/* out_us[i] = time between events i and i+1, divided by calls_per_sample. */
static int read_events(cudaEvent_t *events, int samples, double calls_per_sample, double *out_us) {
  CUDA_TRY(cudaEventSynchronize(events[samples]));
  for (int i = 0; i < samples; ++i) {
    float ms = 0;
    CUDA_TRY(cudaEventElapsedTime(&ms, events[i], events[i + 1]));
    out_us[i] = (double)ms * 1e3 / calls_per_sample;
  }
  return 0;
}

int bench_time_direct(ignis_device device, bench_call_fn fn, void *context, int warmup, int samples,
                      double *out_us) {
  void *stream_ptr;
  if (bench_device_stream(device, &stream_ptr) != 0)
    return -1;
  cudaStream_t stream = stream_ptr;
  for (int i = 0; i < warmup; ++i)
    if (fn(context, i, stream) != 0)
      return -1;
  cudaEvent_t *events;
  if (create_events(samples + 1, &events) != 0)
    return -1;
  int rc = 0;
  cudaError_t error = cudaEventRecord(events[0], stream);
  for (int i = 0; rc == 0 && error == cudaSuccess && i < samples; ++i) {
    rc = fn(context, warmup + i, stream);
    if (rc == 0)
      error = cudaEventRecord(events[i + 1], stream);
  }
  if (rc == 0 && error != cudaSuccess)
    rc = bench_fail("cudaEventRecord failed: %s", cudaGetErrorString(error));
  if (rc == 0)
    rc = read_events(events, samples, 1.0, out_us);
  cudaStreamSynchronize(stream);
  destroy_events(events, samples + 1);
  return rc == 0 ? bench_device_sync(device) : rc;
}

/* Capture calls first .. first+count-1 into one instantiated graph. A call that fails inside the
 * capture keeps its own message; a call that broke the capture is named by EndCapture's error. */
static int capture_graph(cudaStream_t stream, bench_call_fn fn, void *context, int64_t first, int count,
                         cudaGraphExec_t *exec) {
  CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  int rc = 0;
  for (int i = 0; rc == 0 && i < count; ++i)
    rc = fn(context, first + i, stream);
  cudaGraph_t graph = NULL;
  cudaError_t end = cudaStreamEndCapture(stream, &graph);
  if (rc == 0 && end != cudaSuccess)
    rc = bench_fail("capturing the calls into a CUDA graph failed: %s (a call did something a "
                    "capture forbids)",
                    cudaGetErrorString(end));
  if (rc == 0) {
    cudaError_t error = cudaGraphInstantiate(exec, graph, 0);
    if (error != cudaSuccess)
      rc = bench_fail("cudaGraphInstantiate failed: %s", cudaGetErrorString(error));
  }
  if (graph)
    cudaGraphDestroy(graph);
  cudaGetLastError();
  return rc;
}

static int launch_graphs(cudaGraphExec_t *execs, int graphs, cudaStream_t stream) {
  for (int g = 0; g < graphs; ++g)
    CUDA_TRY(cudaGraphLaunch(execs[g], stream));
  return 0;
}

int bench_time_graph(ignis_device device, bench_call_fn fn, void *context, int graphs, int calls_per_graph,
                     int samples, double *out_us) {
  void *stream_ptr;
  if (bench_device_stream(device, &stream_ptr) != 0)
    return -1;
  cudaStream_t stream = stream_ptr;
  /* Direct calls first, so that module loading and first launches stay out of the capture. */
  for (int i = 0; i < 2; ++i)
    if (fn(context, i, stream) != 0)
      return -1;
  if (bench_device_sync(device) != 0)
    return -1;
  cudaGraphExec_t *execs = calloc((size_t)graphs, sizeof *execs);
  if (!execs)
    return bench_fail("out of host memory for %d graphs", graphs);
  int rc = 0;
  for (int g = 0; rc == 0 && g < graphs; ++g)
    rc = capture_graph(stream, fn, context, (int64_t)g * calls_per_graph, calls_per_graph, &execs[g]);
  for (int g = 0; rc == 0 && g < graphs; ++g) {
    cudaError_t error = cudaGraphUpload(execs[g], stream);
    if (error != cudaSuccess)
      rc = bench_fail("cudaGraphUpload failed: %s", cudaGetErrorString(error));
  }
  if (rc == 0)
    rc = launch_graphs(execs, graphs, stream); /* one warm-up replay of everything */
  cudaEvent_t *events = NULL;
  if (rc == 0)
    rc = create_events(samples + 1, &events);
  if (rc == 0) {
    cudaError_t error = cudaEventRecord(events[0], stream);
    for (int i = 0; rc == 0 && error == cudaSuccess && i < samples; ++i) {
      rc = launch_graphs(execs, graphs, stream);
      if (rc == 0)
        error = cudaEventRecord(events[i + 1], stream);
    }
    if (rc == 0 && error != cudaSuccess)
      rc = bench_fail("cudaEventRecord failed: %s", cudaGetErrorString(error));
    if (rc == 0)
      rc = read_events(events, samples, (double)graphs * calls_per_graph, out_us);
    destroy_events(events, samples + 1);
  }
  cudaStreamSynchronize(stream);
  for (int g = 0; g < graphs; ++g)
    if (execs[g])
      cudaGraphExecDestroy(execs[g]);
  free(execs);
  return rc == 0 ? bench_device_sync(device) : rc;
}

static int gpu_ceiling(ignis_device device, bench_ceiling *out) {
  void *src = NULL, *dst = NULL;
  if (bench_device_alloc(device, GPU_CEILING_BYTES, &src) != 0)
    return -1;
  if (bench_device_alloc(device, GPU_CEILING_BYTES, &dst) != 0) {
    bench_device_free(device, src);
    return -1;
  }
  cudaStream_t stream = streams[device.id];
  cudaEvent_t *events = NULL;
  double samples[CEILING_SAMPLES];
  int rc = bench_fill_random(device, src, (int64_t)GPU_CEILING_BYTES, IGNIS_F32, 1);
  if (rc == 0)
    rc = bench_fill_random(device, dst, (int64_t)GPU_CEILING_BYTES, IGNIS_F32, 2);
  for (int i = 0; rc == 0 && i < CEILING_WARMUP; ++i)
    rc = bench_device_copy(device, dst, src, GPU_CEILING_BYTES);
  if (rc == 0)
    rc = create_events(CEILING_SAMPLES + 1, &events);
  if (rc == 0) {
    cudaError_t error = cudaEventRecord(events[0], stream);
    for (int i = 0; rc == 0 && error == cudaSuccess && i < CEILING_SAMPLES; ++i) {
      rc = bench_device_copy(device, dst, src, GPU_CEILING_BYTES);
      if (rc == 0)
        error = cudaEventRecord(events[i + 1], stream);
    }
    if (rc == 0 && error != cudaSuccess)
      rc = bench_fail("cudaEventRecord failed: %s", cudaGetErrorString(error));
    if (rc == 0)
      rc = read_events(events, CEILING_SAMPLES, 1.0, samples);
    destroy_events(events, CEILING_SAMPLES + 1);
  }
  if (rc == 0)
    rc = bench_device_sync(device);
  bench_device_free(device, src);
  bench_device_free(device, dst);
  if (rc != 0)
    return -1;
  double us = median_of(samples, CEILING_SAMPLES);
  out->gbps = 2.0 * (double)GPU_CEILING_BYTES / (us * 1e-6) / 1e9;
  out->bytes = (int64_t)GPU_CEILING_BYTES;
  out->how = "1 GiB device-to-device cudaMemcpyAsync, read+write bytes, median of 10";
  return 0;
}

int bench_measure_ceiling(ignis_device device, bench_ceiling *out) {
  if (device.type == IGNIS_DEVICE_CPU)
    return host_ceiling(out);
  if (use_device(device) != 0)
    return -1;
  return gpu_ceiling(device, out);
}

#else
/* ---- built without CUDA: host only -------------------------------------------------------- */
static int no_cuda(void) {
  return bench_fail("this `ignis` was built without CUDA");
}

int bench_measure_mix_ceilings(ignis_device device, bench_mix_ceiling *out) {
  return bench_fail("the read/write mix probe needs CUDA (this `ignis` was built without it)");
}

int bench_device_alloc(ignis_device device, size_t bytes, void **ptr) {
  *ptr = NULL;
  if (device.type != IGNIS_DEVICE_CPU)
    return no_cuda();
  if (posix_memalign(ptr, 4096, bytes ? bytes : 1) != 0)
    return bench_fail("out of host memory (%zu bytes)", bytes);
  return 0;
}

void bench_device_free(ignis_device device, void *ptr) {
  free(ptr);
}

int bench_device_upload(ignis_device device, void *dst, const void *src, size_t bytes) {
  if (device.type != IGNIS_DEVICE_CPU)
    return no_cuda();
  memcpy(dst, src, bytes);
  return 0;
}

int bench_device_download(ignis_device device, void *dst, const void *src, size_t bytes) {
  return bench_device_upload(device, dst, src, bytes);
}

int bench_device_copy(ignis_device device, void *dst, const void *src, size_t bytes) {
  return bench_device_upload(device, dst, src, bytes);
}

int bench_device_stream(ignis_device device, void **stream) {
  *stream = NULL;
  return device.type == IGNIS_DEVICE_CPU ? 0 : no_cuda();
}

int bench_device_sync(ignis_device device) {
  return device.type == IGNIS_DEVICE_CPU ? 0 : no_cuda();
}

void bench_cuda_versions(int *runtime, int *driver) {
  *runtime = 0;
  *driver = 0;
}

int bench_time_direct(ignis_device device, bench_call_fn fn, void *context, int warmup, int samples,
                      double *out_us) {
  return no_cuda();
}

int bench_time_graph(ignis_device device, bench_call_fn fn, void *context, int graphs, int calls_per_graph,
                     int samples, double *out_us) {
  return no_cuda();
}

int bench_measure_ceiling(ignis_device device, bench_ceiling *out) {
  return device.type == IGNIS_DEVICE_CPU ? host_ceiling(out) : no_cuda();
}
#endif
