/* The NCCL algorithm of the CUDA all-reduce: ncclAllReduce (sum) on the ncclComm_t the caller gave
 * at creation. ignis loads NCCL itself (dlopen of libnccl.so.2 at the first NCCL call, once per
 * process, ncclAllReduce and ncclGetErrorString resolved with dlsym), so nothing else in the
 * library depends on it; the process that created the ncclComm_t has it loaded already, and
 * RTLD_NOLOAD finds that copy first. The few NCCL types used are declared here from NCCL's stable
 * C ABI (nccl.h: ncclResult_t, ncclDataType_t ncclFloat16 = 6, ncclFloat32 = 7, ncclBfloat16 = 9,
 * ncclRedOp_t ncclSum = 0), so no NCCL header is needed to build. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "core/error.h"
#include "cuda/comm/comm_state.h"

typedef int nccl_result;
enum { NCCL_FLOAT16 = 6, NCCL_FLOAT32 = 7, NCCL_BFLOAT16 = 9, NCCL_SUM = 0 };

typedef nccl_result (*nccl_allreduce_fn)(const void *send, void *recv, size_t count, int dtype, int op,
                                         void *comm, void *stream);
typedef const char *(*nccl_error_string_fn)(nccl_result result);

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static nccl_allreduce_fn nccl_allreduce;
static nccl_error_string_fn nccl_error_string;
static char load_error[256];

static void load_nccl(void) {
  void *lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (!lib)
    lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(load_error, sizeof load_error,
             "ignis_allreduce: the NCCL algorithm needs libnccl.so.2, which could not be loaded (%s)",
             dlerror());
    return;
  }
  *(void **)(&nccl_allreduce) = dlsym(lib, "ncclAllReduce");
  *(void **)(&nccl_error_string) = dlsym(lib, "ncclGetErrorString");
  if (!nccl_allreduce || !nccl_error_string) {
    nccl_allreduce = NULL;
    snprintf(load_error, sizeof load_error,
             "ignis_allreduce: the loaded NCCL lacks ncclAllReduce or ncclGetErrorString");
  }
}

ignis_status ignis_cuda_nccl_allreduce(void *nccl_comm, const void *in, void *out, size_t count,
                                       ignis_dtype dtype, void *stream) {
  pthread_once(&load_once, load_nccl);
  if (!nccl_allreduce)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "%s", load_error);
  const int nccl_dtype = dtype == IGNIS_F16    ? NCCL_FLOAT16
                         : dtype == IGNIS_BF16 ? NCCL_BFLOAT16
                                               : NCCL_FLOAT32;
  const nccl_result result = nccl_allreduce(in, out, count, nccl_dtype, NCCL_SUM, nccl_comm, stream);
  if (result != 0)
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis_allreduce: ncclAllReduce failed: %s (ncclResult_t %d)",
                           nccl_error_string(result), result);
  return IGNIS_OK;
}
