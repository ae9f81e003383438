/* ignis core API: status codes and the thread-local error message, versions, dtypes and their
 * host-side conversions, the tensor descriptor every op takes, devices, and the context that
 * holds per-device facts.
 *
 * Conventions (see DESIGN.md): every function returns ignis_status; on failure
 * ignis_last_error() names the function and the parameter, and no output has been written.
 * Tensors are described, never guessed: shape and strides are in elements, strides may be any
 * value a kernel can honour (a call that cannot honour them says so with IGNIS_ERROR_UNSUPPORTED).
 * Calls that launch work take the stream last, as a void* (a cudaStream_t, or NULL for the
 * default stream; ignored on the CPU backend). Which backend runs is decided by where the tensors
 * live: all on the host -> CPU backend, all on one CUDA device -> CUDA backend, else an error. */
#ifndef IGNIS_CORE_H
#define IGNIS_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define IGNIS_API __declspec(dllexport)
#else
#define IGNIS_API __attribute__((visibility("default")))
#endif

/* ---- versions ---------------------------------------------------------------------------- */
#define IGNIS_VERSION_MAJOR 0
#define IGNIS_VERSION_MINOR 1
#define IGNIS_VERSION_PATCH 0
#define IGNIS_VERSION_NUMBER (IGNIS_VERSION_MAJOR * 10000 + IGNIS_VERSION_MINOR * 100 + IGNIS_VERSION_PATCH)
#define IGNIS_VERSION_STRING "0.1.0"

/* Runtime version as MAJOR*10000 + MINOR*100 + PATCH; compare with IGNIS_VERSION_NUMBER to detect
 * a header/library mismatch. */
IGNIS_API int ignis_version(void);
/* "0.1.0"; static storage. */
IGNIS_API const char *ignis_version_string(void);
/* One-line description of how this library was built (backends, CUDA targets, options). */
IGNIS_API const char *ignis_build_info(void);

/* ---- status ------------------------------------------------------------------------------ */
/* X(name, value, message). The enum, ignis_status_string and the messages all come from here. */
#define IGNIS_STATUS_MAP(X)                                                                        \
  X(IGNIS_OK, 0, "success")                                                                        \
  X(IGNIS_ERROR_INVALID_ARGUMENT, 1, "invalid argument")                                           \
  X(IGNIS_ERROR_UNSUPPORTED, 2, "valid request with no compiled variant")                          \
  X(IGNIS_ERROR_INSUFFICIENT_WORKSPACE, 3, "workspace too small")                                  \
  X(IGNIS_ERROR_CUDA, 4, "CUDA error")                                                             \
  X(IGNIS_ERROR_INTERNAL, 5, "internal error")                                                     \
  X(IGNIS_ERROR_BACKEND_UNAVAILABLE, 6, "backend not built or no device present")                  \
  X(IGNIS_ERROR_TIMEOUT, 7, "a peer did not arrive in time")

typedef enum ignis_status {
#define IGNIS_STATUS_ENUM_(name, value, msg) name = value,
  IGNIS_STATUS_MAP(IGNIS_STATUS_ENUM_)
#undef IGNIS_STATUS_ENUM_
} ignis_status;

/* Name of a status ("IGNIS_ERROR_INVALID_ARGUMENT"); "IGNIS_UNKNOWN_STATUS" for other values. */
IGNIS_API const char *ignis_status_string(ignis_status status);
/* Short human description of a status ("invalid argument"). */
IGNIS_API const char *ignis_status_message(ignis_status status);
/* The detail of the last failure on this thread ("ignis_rmsnorm: weight.shape[0]=4095 but
 * input.shape[-1]=4096"); "" if the last call on this thread succeeded. Valid until the next
 * ignis call on this thread. */
IGNIS_API const char *ignis_last_error(void);

/* ---- dtypes ------------------------------------------------------------------------------ */
#define IGNIS_DTYPE_MAP(X)                                                                         \
  X(IGNIS_F32, 0, "f32", 4)                                                                        \
  X(IGNIS_F16, 1, "f16", 2)                                                                        \
  X(IGNIS_BF16, 2, "bf16", 2)                                                                      \
  X(IGNIS_FP8_E4M3, 3, "fp8_e4m3", 1)                                                              \
  X(IGNIS_FP8_E5M2, 4, "fp8_e5m2", 1)                                                              \
  X(IGNIS_I32, 5, "i32", 4)                                                                        \
  X(IGNIS_I64, 6, "i64", 8)                                                                        \
  X(IGNIS_U8, 7, "u8", 1)

typedef enum ignis_dtype {
#define IGNIS_DTYPE_ENUM_(name, value, str, size) name = value,
  IGNIS_DTYPE_MAP(IGNIS_DTYPE_ENUM_)
#undef IGNIS_DTYPE_ENUM_
  IGNIS_DTYPE_COUNT
} ignis_dtype;

/* "bf16", ...; "invalid" for values outside the enum. */
IGNIS_API const char *ignis_dtype_name(ignis_dtype dtype);
/* Bytes per element; 0 for values outside the enum. */
IGNIS_API size_t ignis_dtype_size(ignis_dtype dtype);

/* Host conversions. Float -> narrow rounds to nearest even; NaN stays NaN. fp8 e4m3 saturates to
 * +-448 (it has no infinity; NaN maps to its NaN code), e5m2 overflows to infinity. */
IGNIS_API uint16_t ignis_f32_to_f16(float value);
IGNIS_API float ignis_f16_to_f32(uint16_t bits);
IGNIS_API uint16_t ignis_f32_to_bf16(float value);
IGNIS_API float ignis_bf16_to_f32(uint16_t bits);
IGNIS_API uint8_t ignis_f32_to_fp8_e4m3(float value);
IGNIS_API float ignis_fp8_e4m3_to_f32(uint8_t bits);
IGNIS_API uint8_t ignis_f32_to_fp8_e5m2(float value);
IGNIS_API float ignis_fp8_e5m2_to_f32(uint8_t bits);

/* ---- devices and tensors ----------------------------------------------------------------- */
typedef enum ignis_device_type { IGNIS_DEVICE_CPU = 0, IGNIS_DEVICE_CUDA = 1 } ignis_device_type;

typedef struct ignis_device {
  ignis_device_type type;
  int32_t id; /* CUDA ordinal; 0 for the CPU */
} ignis_device;

#define IGNIS_MAX_DIMS 8

/* A view of memory the caller owns. shape and strides are in elements; strides may be zero
 * (broadcast) only where an op says so. For CUDA tensors the library checks the pointer with the
 * CUDA runtime and rejects a pointer that does not live on the stated device. */
typedef struct ignis_tensor {
  void *data;
  ignis_dtype dtype;
  int32_t ndim;
  int64_t shape[IGNIS_MAX_DIMS];
  int64_t strides[IGNIS_MAX_DIMS];
  ignis_device device;
} ignis_tensor;

/* Fill a contiguous (row-major) descriptor. ndim must be 0..IGNIS_MAX_DIMS. */
IGNIS_API ignis_status ignis_tensor_init(ignis_tensor *tensor, void *data, ignis_dtype dtype,
                                         int32_t ndim, const int64_t *shape, ignis_device device);
/* Number of elements (product of the shape). */
IGNIS_API int64_t ignis_tensor_numel(const ignis_tensor *tensor);
/* 1 if the strides are the row-major strides of the shape (size-1 dims ignored), else 0. */
IGNIS_API int ignis_tensor_is_contiguous(const ignis_tensor *tensor);

/* Number of CUDA devices usable by this build (0 when the CUDA backend is not built or no GPU). */
IGNIS_API int ignis_cuda_device_count(void);

/* ---- environment ---------------------------------------------------------------------------- */
/* The environment variables the library reads (each once, at its first use), for comparisons and
 * debugging; none is needed in normal use. One table, from which `ignis info` and the README's
 * list come: name, the values it takes, what applies when it is unset, and what it does. */
typedef struct ignis_env_var {
  const char *name;
  const char *values;
  const char *unset;
  const char *meaning;
} ignis_env_var;
/* Entries of the table, and entry `index` (NULL outside 0..count-1); static storage. */
IGNIS_API int ignis_env_var_count(void);
IGNIS_API const ignis_env_var *ignis_env_var_at(int index);

/* ---- device facts --------------------------------------------------------------------------- */
typedef struct ignis_device_info {
  size_t size; /* set to sizeof(ignis_device_info) by the caller (IGNIS_DEVICE_INFO_INIT) */
  ignis_device device;
  char name[256];
  int32_t compute_capability; /* major*10 + minor; 0 for the CPU */
  int32_t multiprocessor_count; /* SMs; logical CPU cores for the CPU */
  int64_t l2_cache_bytes;
  int64_t shared_memory_per_block_optin;
  int64_t global_memory_bytes;
} ignis_device_info;
#define IGNIS_DEVICE_INFO_INIT {sizeof(ignis_device_info), {IGNIS_DEVICE_CPU, 0}, {0}, 0, 0, 0, 0, 0}

/* Facts of one device. info->size must be set (IGNIS_DEVICE_INFO_INIT); a caller built against an
 * older, shorter struct gets only the fields it has written. */
IGNIS_API ignis_status ignis_get_device_info(ignis_device device, ignis_device_info *info);

#ifdef __cplusplus
}
#endif
#endif
