/* CUDA backend of the GEMM ops (include/ignis/gemm.h): the small-M 16-bit products ignis' own
 * kernel is asked for or alone can do on it (gemm_skinny.h says which), then, unless
 * IGNIS_GEMM_SM90=0, the block-scaled fp8 products of up to 32 rows and the 16-bit ones of up to 16
 * on the Hopper small-M kernel (gemm_small_m_sm90.h); the other block-scaled fp8 products of up to
 * 16 rows on the small-M grouped kernel run as one group (grouped_skinny.h), with
 * IGNIS_GEMM_SM90=all those of at least 128 rows on ignis' Hopper kernel where they take them
 * (grouped_gemm_sm90.h), everything else through cuBLASLt, which
 * ignis loads itself (dlopen at the first GEMM call that needs it, functions resolved with dlsym)
 * so that nothing else in the library depends on it. cublasLt.h supplies the types and enums only;
 * no symbol of it is linked.
 *
 * Mapping. ignis' row-major out[M, N] = a[M, K] b[K, N] is cuBLASLt's column-major
 * D (N x M) = op(A') (N x K) * B' (K x M) with A' = b and B' = a: B' is a's memory read as a
 * column-major K x M matrix (ld = a's row stride, op N); A' is b's memory, op T in the NT form (a
 * weight [N, K] is a column-major K x N matrix) and op N for a row-major [K, N] b. D's ld is out's
 * row stride, the batch goes into the layouts' batch count and strides, bias into the BIAS
 * epilogue (a vector along D's rows, N). fp8 is TN only: b must be in the NT form. Per-tensor scales
 * are cuBLASLt's A/B scale pointers (device f32, read at run time). The block-scaled form takes the
 * BLK128x128 x VEC128 pair (A' = the weight: 128x128 blocks; B' = the activations: 1x128), or
 * VEC128 x VEC128 for per-row weight scales; the scales are first repacked by gemm_scales.cu into the
 * workspace in the layouts cuBLASLt reads (UE8M0 decoded there):
 *     activations: scale[m + kb * M]         (outer dimension contiguous, ld M, M % 4 == 0)
 *     weight:      scale[kb + nb * ld_kb]    (K blocks contiguous, ld_kb = ceil(K/128) rounded up to 4)
 *     per-row weight: scale[n + kb * N]      (as the activations)
 *
 * State, per process: the library's functions; per device, one cuBLASLt handle; per (device,
 * stream), one workspace (cuBLASLt's WORKSPACE_BYTES, then SCALE_BYTES of repacked scales, then
 * SKINNY_COUNTER_BYTES of the small-M kernels' split-K counters, zeroed once; their f32 partial
 * sums use the scales' room, which a call only fills for its own cuBLASLt launch, stream ordered
 * after any earlier kernel; the 16-bit small-M kernel, the dense block-scaled small-M grouped
 * kernel and the Hopper small-M kernel share both), allocated at the first call on that stream and kept, so
 * later calls never allocate (CUDA-graph capture safe once warm; a first call inside a capture is refused
 * with that reason). A cache of CACHE_SIZE entries keeps, per call shape (sizes, strides, dtypes, layout,
 * bias, alignments), the descriptors and the algorithm the heuristic chose; the pointers are set on the
 * cached descriptor per call. One mutex guards the state and each cached call (the host side of a call is a
 * few µs). */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "core/env.h"
#include "core/error.h"
#include "core/validate.h"
#include "cuda/cuda_backend.h"
#include "cuda/gemm/gemm_scales.h"
#include "cuda/gemm/gemm_skinny.h"
#include "cuda/gemm/gemm_small_m_sm90.h"
#include "cuda/gemm/grouped_gemm_sm90.h"
#include "cuda/gemm/grouped_skinny.h"

enum {
  WORKSPACE_BYTES = 32 << 20,
  SCALE_BYTES = 16 << 20,
  SKINNY_COUNTER_BYTES = 64 << 10,
  MAX_DEVICES = 64,
  MAX_STREAMS = 256,
  CACHE_SIZE = 512
};

/* ---- the library ---------------------------------------------------------------------------- */
#define CUBLASLT_FUNCTIONS(X)                                                                                \
  X(cublasLtCreate, cublasStatus_t, (cublasLtHandle_t *))                                                    \
  X(cublasLtGetVersion, size_t, (void))                                                                      \
  X(cublasLtMatmulDescCreate, cublasStatus_t, (cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t)) \
  X(cublasLtMatmulDescDestroy, cublasStatus_t, (cublasLtMatmulDesc_t))                                       \
  X(cublasLtMatmulDescSetAttribute, cublasStatus_t,                                                          \
    (cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t))                            \
  X(cublasLtMatrixLayoutCreate, cublasStatus_t,                                                              \
    (cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t))                                   \
  X(cublasLtMatrixLayoutDestroy, cublasStatus_t, (cublasLtMatrixLayout_t))                                   \
  X(cublasLtMatrixLayoutSetAttribute, cublasStatus_t,                                                        \
    (cublasLtMatrixLayout_t, cublasLtMatrixLayoutAttribute_t, const void *, size_t))                         \
  X(cublasLtMatmulPreferenceCreate, cublasStatus_t, (cublasLtMatmulPreference_t *))                          \
  X(cublasLtMatmulPreferenceDestroy, cublasStatus_t, (cublasLtMatmulPreference_t))                           \
  X(cublasLtMatmulPreferenceSetAttribute, cublasStatus_t,                                                    \
    (cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t))                \
  X(cublasLtMatmulAlgoGetHeuristic, cublasStatus_t,                                                          \
    (cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,                 \
     cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatmulPreference_t, int,                        \
     cublasLtMatmulHeuristicResult_t *, int *))                                                              \
  X(cublasLtMatmul, cublasStatus_t,                                                                          \
    (cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *, cublasLtMatrixLayout_t,             \
     const void *, cublasLtMatrixLayout_t, const void *, const void *, cublasLtMatrixLayout_t, void *,       \
     cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t))

static struct {
#define LT_FIELD(name, ret, args) ret(*name) args;
  CUBLASLT_FUNCTIONS(LT_FIELD)
#undef LT_FIELD
} lt;

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static int load_state;        /* 0 not tried, 1 loaded, -1 failed */
static char load_error[1024]; /* why loading failed */
static char loaded_from[512];

/* The PyTorch wheels' copy: site-packages/nvidia/cu13/lib or nvidia/cublas/lib, found from a library
 * this process already loaded from those wheels (the CUDA runtime, NVRTC or cuBLAS): its directory,
 * then the sibling wheels' lib directories. */
static void *open_from_python_wheels(void) {
  static const char *const anchors[][2] = {{"libcudart.so.13", "cudaGetDevice"},
                                           {"libnvrtc.so.13", "nvrtcVersion"},
                                           {"libcublas.so.13", "cublasCreate_v2"}};
  static const char *const relative[] = {"", "../../cublas/lib/", "../../cu13/lib/"};
  for (size_t i = 0; i < sizeof anchors / sizeof anchors[0]; ++i) {
    void *h = dlopen(anchors[i][0], RTLD_NOW | RTLD_NOLOAD);
    if (!h)
      continue;
    void *sym = dlsym(h, anchors[i][1]);
    Dl_info info;
    char dir[400];
    char *slash = NULL;
    if (sym && dladdr(sym, &info) && info.dli_fname) {
      snprintf(dir, sizeof dir, "%s", info.dli_fname);
      slash = strrchr(dir, '/');
    }
    dlclose(h);
    if (!slash)
      continue;
    slash[1] = '\0';
    for (size_t r = 0; r < sizeof relative / sizeof relative[0]; ++r) {
      char path[512];
      snprintf(path, sizeof path, "%s%slibcublasLt.so.13", dir, relative[r]);
      void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (lib) {
        snprintf(loaded_from, sizeof loaded_from, "%s", path);
        return lib;
      }
    }
  }
  return NULL;
}

/* Caller holds state_lock. */
static ignis_status load_library(void) {
  if (load_state == 1)
    return IGNIS_OK;
  if (load_state == -1)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s", load_error);
  const char *override = ignis_env(IGNIS_ENV_CUBLASLT);
  void *lib = NULL;
  if (override && override[0]) {
    lib = dlopen(override, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      snprintf(load_error, sizeof load_error,
               "ignis GEMM: cuBLASLt could not be loaded from IGNIS_CUBLASLT=%s (%s)", override, dlerror());
      load_state = -1;
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s", load_error);
    }
    snprintf(loaded_from, sizeof loaded_from, "%s", override);
  } else {
    static const char *const names[] = {"libcublasLt.so.13", "libcublasLt.so"};
    for (size_t i = 0; i < 2 && !lib; ++i)
      if ((lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL)) != NULL)
        snprintf(loaded_from, sizeof loaded_from, "%s", names[i]);
    if (!lib)
      lib = open_from_python_wheels();
    if (!lib) {
      snprintf(
          load_error, sizeof load_error,
          "ignis GEMM: the CUDA GEMM ops need cuBLASLt, and neither libcublasLt.so.13 nor libcublasLt.so "
          "could be loaded (set IGNIS_CUBLASLT to the library's path)");
      load_state = -1;
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s", load_error);
    }
  }
#define LT_RESOLVE(name, ret, args)                                                                          \
  *(void **)(&lt.name) = dlsym(lib, #name);                                                                  \
  if (!lt.name) {                                                                                            \
    snprintf(load_error, sizeof load_error, "ignis GEMM: %s (cuBLASLt) lacks %s", loaded_from, #name);       \
    load_state = -1;                                                                                         \
    dlclose(lib);                                                                                            \
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s", load_error);                                       \
  }
  CUBLASLT_FUNCTIONS(LT_RESOLVE)
#undef LT_RESOLVE
  size_t used = strlen(loaded_from);
  snprintf(loaded_from + used, sizeof loaded_from - used, ", version %zu", lt.cublasLtGetVersion());
  load_state = 1;
  return IGNIS_OK;
}

/* ---- handles and workspaces ------------------------------------------------------------------- */
static cublasLtHandle_t handles[MAX_DEVICES];

typedef struct {
  int32_t device;
  void *stream;
  void *memory; /* WORKSPACE_BYTES + SCALE_BYTES + SKINNY_COUNTER_BYTES */
} workspace_entry;

static workspace_entry workspaces[MAX_STREAMS];
static int workspace_count;

static ignis_status lt_error(const char *what, cublasStatus_t s) {
  return ignis_set_error(IGNIS_ERROR_CUDA, "ignis GEMM: %s failed (cuBLASLt status %d)", what, (int)s);
}

/* Caller holds state_lock; device is current. */
static ignis_status handle_for(int32_t device, cublasLtHandle_t *out) {
  if (device < 0 || device >= MAX_DEVICES)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis GEMM: device %d is beyond the %d this build serves", device, MAX_DEVICES);
  if (!handles[device]) {
    cublasStatus_t s = lt.cublasLtCreate(&handles[device]);
    if (s != CUBLAS_STATUS_SUCCESS) {
      handles[device] = NULL;
      return lt_error("cublasLtCreate", s);
    }
  }
  *out = handles[device];
  return IGNIS_OK;
}

/* Caller holds state_lock; device is current. */
static ignis_status workspace_for(int32_t device, void *stream, void **out) {
  for (int i = 0; i < workspace_count; ++i)
    if (workspaces[i].device == device && workspaces[i].stream == stream) {
      *out = workspaces[i].memory;
      return IGNIS_OK;
    }
  if (workspace_count == MAX_STREAMS)
    return ignis_set_error(
        IGNIS_ERROR_UNSUPPORTED,
        "ignis GEMM: more than %d (device, stream) pairs have made GEMM calls; each keeps a "
        "workspace and there is no room for another",
        MAX_STREAMS);
  enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing((cudaStream_t)stream, &capture) == cudaSuccess &&
      capture != cudaStreamCaptureStatusNone)
    return ignis_set_error(
        IGNIS_ERROR_UNSUPPORTED,
        "ignis GEMM: the first GEMM call on a stream allocates its workspace, which a CUDA "
        "graph capture forbids: make one call on this stream before capturing");
  void *memory = NULL;
  const size_t bytes = (size_t)WORKSPACE_BYTES + SCALE_BYTES + SKINNY_COUNTER_BYTES;
  cudaError_t err = cudaMalloc(&memory, bytes);
  if (err == cudaSuccess) {
    /* on the stream that owns the workspace: before its first kernel */
    err = cudaMemsetAsync((char *)memory + WORKSPACE_BYTES + SCALE_BYTES, 0, SKINNY_COUNTER_BYTES,
                          (cudaStream_t)stream);
    if (err != cudaSuccess)
      cudaFree(memory);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis GEMM: making the %zu MiB workspace failed: %s",
                           bytes >> 20, cudaGetErrorString(err));
  }
  workspaces[workspace_count++] = (workspace_entry){device, stream, memory};
  *out = memory;
  return IGNIS_OK;
}

/* ---- descriptors and the per-shape cache ------------------------------------------------------ */
typedef struct {
  int32_t device;
  int32_t kind, a_dtype, b_dtype, out_dtype, bias_dtype, has_bias, b_nt, b_scale_per_row;
  int64_t batch, m, n, k, lda, ldb, ldd, a_bs, b_bs, d_bs;
  int32_t align_a, align_b, align_d, align_bias;
} shape_key;

typedef struct {
  int used;
  shape_key key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t a_layout, b_layout, d_layout; /* cuBLASLt's A' (ignis b), B' (ignis a), C = D */
  cublasLtMatmulAlgo_t algo;
} cache_entry;

static cache_entry cache[CACHE_SIZE];
static int cache_next; /* the entry the next miss replaces once the cache is full */

static cudaDataType_t cuda_type(ignis_dtype d) {
  switch (d) {
  case IGNIS_F16:
    return CUDA_R_16F;
  case IGNIS_BF16:
    return CUDA_R_16BF;
  case IGNIS_FP8_E4M3:
    return CUDA_R_8F_E4M3;
  case IGNIS_FP8_E5M2:
    return CUDA_R_8F_E5M2;
  default:
    return CUDA_R_32F;
  }
}

/* The largest power of two (up to 256) dividing the address: the alignment cuBLASLt may assume. */
static int32_t alignment_of(const void *ptr) {
  uintptr_t v = (uintptr_t)ptr;
  int32_t a = 1;
  while (a < 256 && v % (uintptr_t)(a * 2) == 0)
    a *= 2;
  return a;
}

static shape_key key_of(const ignis_gemm_params *p, int32_t device) {
  shape_key key;
  memset(&key, 0, sizeof key); /* padding too: keys are compared with memcmp */
  key.device = device;
  key.kind = p->kind;
  key.b_scale_per_row = p->kind == IGNIS_GEMM_FP8_BLOCK && p->b_scale_block_n == 1;
  key.a_dtype = p->a_dtype;
  key.b_dtype = p->b_dtype;
  key.out_dtype = p->out_dtype;
  key.has_bias = p->bias != NULL;
  key.bias_dtype = p->bias ? p->bias_dtype : 0;
  key.b_nt = p->b_stride_k == 1;
  key.batch = p->batch;
  key.m = p->m;
  key.n = p->n;
  key.k = p->k;
  key.lda = p->a_row_stride;
  key.ldb = key.b_nt ? p->b_stride_n : p->b_stride_k;
  key.ldd = p->out_row_stride;
  key.a_bs = p->a_batch_stride;
  key.b_bs = p->b_batch_stride;
  key.d_bs = p->out_batch_stride;
  key.align_a = alignment_of(p->a);
  key.align_b = alignment_of(p->b);
  key.align_d = alignment_of(p->out);
  key.align_bias = p->bias ? alignment_of(p->bias) : 0;
  return key;
}

static void destroy_entry(cache_entry *e) {
  if (e->desc)
    lt.cublasLtMatmulDescDestroy(e->desc);
  if (e->a_layout)
    lt.cublasLtMatrixLayoutDestroy(e->a_layout);
  if (e->b_layout)
    lt.cublasLtMatrixLayoutDestroy(e->b_layout);
  if (e->d_layout)
    lt.cublasLtMatrixLayoutDestroy(e->d_layout);
  memset(e, 0, sizeof *e);
}

#define LT_TRY(call, what)                                                                                   \
  do {                                                                                                       \
    cublasStatus_t lt_status_ = (call);                                                                      \
    if (lt_status_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      return lt_error(what, lt_status_);                                                                     \
  } while (0)

static ignis_status make_layout(cublasLtMatrixLayout_t *layout, ignis_dtype dtype, int64_t rows, int64_t cols,
                                int64_t ld, int64_t batch, int64_t batch_stride) {
  LT_TRY(lt.cublasLtMatrixLayoutCreate(layout, cuda_type(dtype), (uint64_t)rows, (uint64_t)cols, ld),
         "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    int32_t count = (int32_t)batch;
    LT_TRY(lt.cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                               sizeof count),
           "setting the batch count");
    LT_TRY(lt.cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                               &batch_stride, sizeof batch_stride),
           "setting the batch stride");
  }
  return IGNIS_OK;
}

static ignis_status set_attr(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                             const void *value, size_t size, const char *what) {
  LT_TRY(lt.cublasLtMatmulDescSetAttribute(desc, attr, value, size), what);
  return IGNIS_OK;
}

/* The pointers a call sets on its descriptor (cuBLASLt's A' scale is ignis b's). */
typedef struct {
  const void *scale_a, *scale_b, *bias;
} call_pointers;

/* Set the call's pointers on e's descriptor: before the heuristic (which reads their alignment)
 * and before every call. */
static ignis_status set_pointers(cublasLtMatmulDesc_t desc, const call_pointers *ptr) {
  ignis_status s;
  if (ptr->scale_a && ((s = set_attr(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ptr->scale_a,
                                     sizeof ptr->scale_a, "setting b's scale")) != IGNIS_OK ||
                       (s = set_attr(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &ptr->scale_b,
                                     sizeof ptr->scale_b, "setting a's scale")) != IGNIS_OK))
    return s;
  if (ptr->bias && (s = set_attr(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr->bias, sizeof ptr->bias,
                                 "setting the bias")) != IGNIS_OK)
    return s;
  return IGNIS_OK;
}

/* Fill e (descriptors and the heuristic's algorithm) for key k; e is destroyed by the caller on
 * failure. */
static ignis_status build_entry(cache_entry *e, const shape_key *k, const call_pointers *ptr,
                                cublasLtHandle_t handle) {
  e->key = *k;
  LT_TRY(lt.cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  cublasOperation_t op_a = k->b_nt ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  ignis_status s;
  if ((s = set_attr(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a, "setting TRANSA")) !=
          IGNIS_OK ||
      (s = set_attr(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b, "setting TRANSB")) != IGNIS_OK)
    return s;
  if (k->has_bias) {
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bias_type = cuda_type((ignis_dtype)k->bias_dtype);
    if ((s = set_attr(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue,
                      "setting the bias epilogue")) != IGNIS_OK ||
        (s = set_attr(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type,
                      "setting the bias dtype")) != IGNIS_OK)
      return s;
  }
  if (k->kind == IGNIS_GEMM_FP8_BLOCK) {
    int32_t mode_a = k->b_scale_per_row ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                        : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
            mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    if ((s = set_attr(e->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof mode_a,
                      "setting the weight's scale mode")) != IGNIS_OK ||
        (s = set_attr(e->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof mode_b,
                      "setting the activations' scale mode")) != IGNIS_OK)
      return s;
  }
  if ((s = set_pointers(e->desc, ptr)) != IGNIS_OK)
    return s;
  int64_t a_rows = k->b_nt ? k->k : k->n, a_cols = k->b_nt ? k->n : k->k;
  if ((s = make_layout(&e->a_layout, (ignis_dtype)k->b_dtype, a_rows, a_cols, k->ldb, k->batch, k->b_bs)) !=
          IGNIS_OK ||
      (s = make_layout(&e->b_layout, (ignis_dtype)k->a_dtype, k->k, k->m, k->lda, k->batch, k->a_bs)) !=
          IGNIS_OK ||
      (s = make_layout(&e->d_layout, (ignis_dtype)k->out_dtype, k->n, k->m, k->ldd, k->batch, k->d_bs)) !=
          IGNIS_OK)
    return s;

  cublasLtMatmulPreference_t pref;
  LT_TRY(lt.cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  uint64_t ws = WORKSPACE_BYTES;
  uint32_t align_a = (uint32_t)k->align_b, align_b = (uint32_t)k->align_a, align_d = (uint32_t)k->align_d;
  cublasStatus_t st =
      lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                 sizeof align_a);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                 sizeof align_b);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                 sizeof align_d);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                 sizeof align_d);
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt.cublasLtMatmulAlgoGetHeuristic(handle, e->desc, e->a_layout, e->b_layout, e->d_layout,
                                           e->d_layout, pref, 1, &result, &found);
  lt.cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis GEMM: cuBLASLt (%s) has no algorithm for this call (M=%" PRId64
                           " N=%" PRId64 " K=%" PRId64 " batch %" PRId64
                           ", a %s, b %s%s, out %s%s; status %d)",
                           loaded_from, k->m, k->n, k->k, k->batch, ignis_dtype_name((ignis_dtype)k->a_dtype),
                           ignis_dtype_name((ignis_dtype)k->b_dtype), k->b_nt ? " NT" : " row-major",
                           ignis_dtype_name((ignis_dtype)k->out_dtype), k->has_bias ? ", bias" : "", (int)st);
  e->algo = result.algo;
  e->used = 1;
  return IGNIS_OK;
}

/* Caller holds state_lock. */
static ignis_status entry_for(const shape_key *key, const call_pointers *ptr, cublasLtHandle_t handle,
                              cache_entry **out) {
  for (int i = 0; i < CACHE_SIZE; ++i)
    if (cache[i].used && memcmp(&cache[i].key, key, sizeof *key) == 0) {
      *out = &cache[i];
      return IGNIS_OK;
    }
  cache_entry *e = &cache[cache_next];
  cache_next = (cache_next + 1) % CACHE_SIZE;
  destroy_entry(e);
  ignis_status s = build_entry(e, key, ptr, handle);
  if (s != IGNIS_OK) {
    destroy_entry(e);
    return s;
  }
  *out = e;
  return IGNIS_OK;
}

/* ---- the call ----------------------------------------------------------------------------------- */
static ignis_status check_aligned16(const char *name, const void *ptr, int64_t ld, size_t elem) {
  if ((uintptr_t)ptr % 16 != 0)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis GEMM (cuBLASLt fp8): %s.data=%p is not 16-byte aligned", name, ptr);
  if ((ld * (int64_t)elem) % 16 != 0)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis GEMM (cuBLASLt fp8): %s's leading stride %" PRId64
                           " elements is not a multiple of 16 bytes",
                           name, ld);
  return IGNIS_OK;
}

/* The shape rules of cuBLASLt the front end does not know (fp8 alignment, block-scale sizes). */
static ignis_status check_cuda_rules(const ignis_gemm_params *p) {
  if (p->k == 0)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis GEMM: K == 0 is not run on CUDA (cuBLASLt refuses it)");
  if (p->kind == IGNIS_GEMM_PLAIN)
    return IGNIS_OK;
  if (p->b_stride_k != 1)
    return ignis_set_error(
        IGNIS_ERROR_UNSUPPORTED,
        "ignis GEMM (cuBLASLt fp8): b must be in the NT form on CUDA (b.strides[-2] == 1, a weight [N, K] "
        "transposed): cuBLASLt's fp8 GEMM is TN only");
  IGNIS_TRY(check_aligned16("a", p->a, p->a_row_stride, 1));
  IGNIS_TRY(check_aligned16("b", p->b, p->b_stride_n, 1));
  IGNIS_TRY(check_aligned16("out", p->out, p->out_row_stride, ignis_dtype_size(p->out_dtype)));
  if (p->batch > 1 && (p->a_batch_stride % 16 != 0 || p->b_batch_stride % 16 != 0))
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis GEMM (cuBLASLt fp8): batch strides must be multiples of 16 elements");
  if (p->kind == IGNIS_GEMM_FP8_BLOCK) {
    if (p->m % 4 != 0)
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                             "ignis_mm_fp8_blockscale: M=%" PRId64
                             " but cuBLASLt's block-scaled GEMM needs a multiple "
                             "of 4 (pad a and a_scale)",
                             p->m);
    if (p->n % 16 != 0 || p->k % IGNIS_GEMM_SCALE_BLOCK != 0)
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                             "ignis_mm_fp8_blockscale: N=%" PRId64 " and K=%" PRId64
                             " but cuBLASLt's block-scaled GEMM needs N a multiple of 16 and K of 128",
                             p->n, p->k);
  }
  return IGNIS_OK;
}

static int64_t weight_scale_ld(int64_t k) {
  int64_t kb = (k + IGNIS_GEMM_SCALE_BLOCK - 1) / IGNIS_GEMM_SCALE_BLOCK;
  return (kb + 3) / 4 * 4;
}

/* The scale pointers of a call: the caller's per-tensor scales, or the block scales repacked into
 * the workspace (the repacking kernel is launched here, on `stream`). */
static ignis_status scale_pointers(const ignis_gemm_params *p, void *workspace, void *stream,
                                   call_pointers *ptr) {
  if (p->kind == IGNIS_GEMM_FP8_TENSOR) {
    ptr->scale_a = p->b_scale;
    ptr->scale_b = p->a_scale;
  } else if (p->kind == IGNIS_GEMM_FP8_BLOCK) {
    int64_t kb = (p->k + IGNIS_GEMM_SCALE_BLOCK - 1) / IGNIS_GEMM_SCALE_BLOCK;
    int64_t nb = (p->n + IGNIS_GEMM_SCALE_BLOCK - 1) / IGNIS_GEMM_SCALE_BLOCK;
    int64_t a_floats = p->m * kb, b_floats = p->b_scale_block_n == 1 ? p->n * kb : nb * weight_scale_ld(p->k);
    if ((a_floats + b_floats + 64) * (int64_t)sizeof(float) > SCALE_BYTES)
      return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                             "ignis_mm_fp8_blockscale: M=%" PRId64 " K=%" PRId64
                             " needs more repacked scales than the %d MiB the workspace holds",
                             p->m, p->k, SCALE_BYTES >> 20);
    float *a_packed = (float *)((char *)workspace + WORKSPACE_BYTES);
    float *b_packed = a_packed + (a_floats + 63) / 64 * 64; /* 256-byte aligned */
    IGNIS_TRY(ignis_cuda_gemm_pack_scales(p, a_packed, b_packed, weight_scale_ld(p->k), stream));
    ptr->scale_a = b_packed;
    ptr->scale_b = a_packed;
  }
  return IGNIS_OK;
}

static ignis_status run_locked(const ignis_gemm_params *p, int32_t device, void *stream) {
  if (p->kind == IGNIS_GEMM_PLAIN && p->out_dtype != IGNIS_F32 && p->out_dtype != p->a_dtype)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis_mm: a %s x %s product with a %s out has no cuBLASLt algorithm (ignis' "
                           "small-M kernel takes it up to M 64); ask for out in %s or f32 (the Python "
                           "wrappers round an f32 temporary)",
                           ignis_dtype_name(p->a_dtype), ignis_dtype_name(p->b_dtype),
                           ignis_dtype_name(p->out_dtype), ignis_dtype_name(p->a_dtype));
  if (p->kind == IGNIS_GEMM_PLAIN && p->bias && p->bias_dtype == IGNIS_F32 && p->out_dtype != IGNIS_F32)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis_mm: an f32 bias with a %s out has no cuBLASLt algorithm (ignis' small-M "
                           "kernel takes it up to M 64); pass bias in %s, or out in f32 (the Python "
                           "wrappers round an f32 temporary)",
                           ignis_dtype_name(p->out_dtype), ignis_dtype_name(p->out_dtype));
  IGNIS_TRY(load_library());
  cublasLtHandle_t handle = NULL;
  void *workspace = NULL;
  IGNIS_TRY(handle_for(device, &handle));
  IGNIS_TRY(workspace_for(device, stream, &workspace));
  call_pointers ptr = {NULL, NULL, p->bias};
  IGNIS_TRY(scale_pointers(p, workspace, stream, &ptr));
  shape_key key = key_of(p, device);
  cache_entry *e;
  IGNIS_TRY(entry_for(&key, &ptr, handle, &e));
  IGNIS_TRY(set_pointers(e->desc, &ptr));
  const float alpha = 1.0f, beta = 0.0f;
  cublasStatus_t st = lt.cublasLtMatmul(handle, e->desc, &alpha, p->b, e->a_layout, p->a, e->b_layout, &beta,
                                        p->out, e->d_layout, p->out, e->d_layout, &e->algo, workspace,
                                        WORKSPACE_BYTES, (cudaStream_t)stream);
  if (st != CUBLAS_STATUS_SUCCESS)
    return lt_error("cublasLtMatmul", st);
  return IGNIS_OK;
}

/* The split-K room the small-M kernels share in the (device, stream) workspace: f32 partials in the
 * scales' room (a call only fills that for its own cuBLASLt launch), then the counters. Each kernel
 * leaves the counters zero, and the calls on one stream are ordered. Caller holds state_lock;
 * device is current. */
typedef struct split_room {
  float *partials;
  size_t partial_floats;
  unsigned *counters;
  int counters_count;
} split_room;

static ignis_status split_room_for(int32_t device, void *stream, split_room *room) {
  void *workspace = NULL;
  IGNIS_TRY(workspace_for(device, stream, &workspace));
  char *scales = (char *)workspace + WORKSPACE_BYTES;
  room->partials = (float *)scales;
  room->partial_floats = SCALE_BYTES / sizeof(float);
  room->counters = (unsigned *)(scales + SCALE_BYTES);
  room->counters_count = SKINNY_COUNTER_BYTES / sizeof(unsigned);
  return IGNIS_OK;
}

/* The small-M kernels with that room; caller holds state_lock, device is current. */
static ignis_status run_skinny_locked(const ignis_gemm_params *p, int32_t device, void *stream) {
  split_room r;
  IGNIS_TRY(split_room_for(device, stream, &r));
  return ignis_cuda_skinny_gemm(p, device, r.partials, r.partial_floats, r.counters, r.counters_count,
                                stream);
}

static ignis_status run_grouped_skinny_locked(const ignis_gemm_params *p, int32_t device, void *stream) {
  split_room r;
  IGNIS_TRY(split_room_for(device, stream, &r));
  return ignis_cuda_gemm_grouped_skinny(p, device, stream, r.partials, r.partial_floats, r.counters,
                                        r.counters_count);
}

static ignis_status run_small_m_sm90_locked(const ignis_gemm_params *p, int32_t device, void *stream) {
  split_room r;
  IGNIS_TRY(split_room_for(device, stream, &r));
  /* the library's splits and consumer warpgroups (0), one block per SM, one K block in flight */
  return ignis_cuda_gemm_small_m_sm90(p, device, stream, r.partials, r.partial_floats, r.counters,
                                      r.counters_count, 0, 1, 0, 1);
}

/* The whole call: the Hopper small-M kernel or the small-M grouped kernel (with the workspace, for
 * split-K), or the Hopper kernel (no cuBLASLt, no workspace and no lock) for the block-scaled fp8
 * shapes they take (routed), else the shape rules, the device, the lock, then the small-M
 * kernel where it applies (routed) or cuBLASLt. */
static ignis_status gemm_call(const ignis_gemm_params *p, int32_t device, void *stream, int routed) {
  /* the 16-bit small-M kernel keeps what it is asked for (IGNIS_GEMM_SKINNY=1) or the only kernel
   * for (a 16-bit out of the other 16-bit dtype) */
  const int skinny = routed && ignis_cuda_skinny_takes(p, device);
  const int small_sm90 = routed && !skinny && ignis_cuda_gemm_small_m_sm90_takes(p, device);
  const int small_block = !small_sm90 && routed && ignis_cuda_gemm_grouped_skinny_takes(p, device);
  if (!small_block && !small_sm90 && routed && ignis_cuda_gemm_sm90_takes(p, device))
    return ignis_cuda_gemm_sm90(p, device, stream);
  if (!small_block && !small_sm90)
    IGNIS_TRY(check_cuda_rules(p));
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess ||
      (previous != device && cudaSetDevice(device) != cudaSuccess)) {
    cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis GEMM: cannot make device %d current", device);
  }
  pthread_mutex_lock(&state_lock);
  ignis_status s = IGNIS_OK;
  if (p->batch > 1 && p->bias) {
    /* cuBLASLt's bias epilogue lacks algorithms for some batched layouts, and the small-M kernel
     * takes no batch: the batches run as single products (one cached descriptor serves them). */
    ignis_gemm_params one = *p;
    one.batch = 1;
    const int64_t a_elem = (int64_t)ignis_dtype_size(p->a_dtype),
                  b_elem = (int64_t)ignis_dtype_size(p->b_dtype),
                  out_elem = (int64_t)ignis_dtype_size(p->out_dtype);
    for (int64_t bt = 0; bt < p->batch && s == IGNIS_OK; ++bt) {
      one.a = (const char *)p->a + bt * p->a_batch_stride * a_elem;
      one.b = (const char *)p->b + bt * p->b_batch_stride * b_elem;
      one.out = (char *)p->out + bt * p->out_batch_stride * out_elem;
      s = routed && ignis_cuda_skinny_takes(&one, device) ? run_skinny_locked(&one, device, stream)
                                                          : run_locked(&one, device, stream);
    }
  } else if (small_block) {
    s = run_grouped_skinny_locked(p, device, stream);
  } else if (small_sm90) {
    s = run_small_m_sm90_locked(p, device, stream);
  } else {
    s = skinny ? run_skinny_locked(p, device, stream) : run_locked(p, device, stream);
  }
  pthread_mutex_unlock(&state_lock);
  if (previous != device)
    cudaSetDevice(previous);
  return s;
}

ignis_status ignis_cuda_gemm(const ignis_gemm_params *p, int32_t device, void *stream) {
  return gemm_call(p, device, stream, 1);
}

ignis_status ignis_cuda_gemm_cublaslt(const ignis_gemm_params *p, int32_t device, void *stream) {
  return gemm_call(p, device, stream, 0);
}
