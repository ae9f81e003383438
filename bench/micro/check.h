/* Error checks of the micro benchmarks under bench/micro: a failed CUDA runtime call (CK) or ignis
 * call (IK) prints where it failed, the call and the error, and ends the program (a micro benchmark
 * has no caller to hand the error to). */
#pragma once

#include <cstdio>
#include <cstdlib>

#include "ignis/ignis.h"

#define CK(call)                                                                                             \
  do {                                                                                                       \
    cudaError_t ck_ = (call);                                                                                \
    if (ck_ != cudaSuccess) {                                                                                \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(ck_));                \
      exit(1);                                                                                               \
    }                                                                                                        \
  } while (0)
#define IK(call)                                                                                             \
  do {                                                                                                       \
    ignis_status ik_ = (call);                                                                               \
    if (ik_ != IGNIS_OK) {                                                                                   \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, ignis_last_error());                     \
      exit(1);                                                                                               \
    }                                                                                                        \
  } while (0)
