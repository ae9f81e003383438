/* Launchers of MLA attention and of the latent-cache append (include/ignis/mla.h; kernels in
 * mla_attention.cuh and mla_narrow.cuh (mma.sync: 64-row tiles, and 16- or 32-row ones), and on
 * sm_90a mla_wgmma.cuh (64-row tiles of a 16-bit cache) and mla_wgmma_narrow.cuh (16 and 32 rows),
 * chosen by wide_wgmma). The attention grid is the last update's work items, then the merge grid its
 * split tokens x heads; inside a CUDA-graph capture both take the plan's maxima instead, and their
 * blocks past the schedule's counts (read on the device) exit, so one captured graph serves every
 * later update. The kernels use 16-byte loads: every tensor they read or write must start 16-byte
 * aligned with strides of whole 16-byte units (IGNIS_ERROR_UNSUPPORTED otherwise, before any launch). */
#include "cuda/attention/mla_attention.cuh"
#include "cuda/attention/mla_narrow.cuh"
#include "cuda/attention/mla_wgmma.cuh"
#include "cuda/attention/mla_wgmma_narrow.cuh"

static bool aligned16(const void *ptr) {
  return ((uintptr_t)ptr & 15u) == 0;
}
/* A stride, in elements of `bytes` bytes, that keeps 16-byte alignment. */
static bool stride16(int64_t stride, int64_t bytes) {
  return (stride * bytes) % 16 == 0;
}

static ignis_status check_alignment(const ignis_mla_params &p) {
  const int64_t qs = 2, ks = p.kv_dtype == IGNIS_FP8_E4M3 ? 1 : 2;
  const bool ok = aligned16(p.q_nope) && aligned16(p.q_pe) && aligned16(p.ckv) && aligned16(p.kpe) &&
                  aligned16(p.out) && stride16(p.q_nope_stride_token, qs) &&
                  stride16(p.q_nope_stride_head, qs) && stride16(p.q_pe_stride_token, qs) &&
                  stride16(p.q_pe_stride_head, qs) && stride16(p.ckv_stride_page, ks) &&
                  stride16(p.ckv_stride_token, ks) && stride16(p.kpe_stride_page, ks) &&
                  stride16(p.kpe_stride_token, ks) && stride16(p.out_stride_token, qs) &&
                  stride16(p.out_stride_head, qs);
  if (!ok)
    return ignis_set_error(
        IGNIS_ERROR_UNSUPPORTED,
        "ignis_mla_run: on CUDA q_nope, q_pe, ckv_cache, kpe_cache and out must start 16-byte "
        "aligned with strides of multiples of 16 bytes");
  return IGNIS_OK;
}

/* The swapped-operand wgmma kernel for 16- or 32-row tiles. */
template <typename T, int ROWS, bool FP8>
static ignis_status launch_wgmma_narrow(const ignis_mla_params &p, int64_t items, cudaStream_t stream) {
  constexpr int smem = mla_wgn_layout<ROWS, FP8>::BYTES;
  IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<mla_wgmma_narrow_kernel<T, ROWS, FP8>>((size_t)smem)));
  mla_wgmma_narrow_kernel<T, ROWS, FP8><<<(unsigned)items, MLA_WG_THREADS, smem, stream>>>(p);
  return IGNIS_OK;
}

/* The cluster form of the one scorer (IGNIS_MLA_WGMMA=3, opt-in): the two work items of a pair (the
 * two 64-head halves of one query token: num_heads a multiple of 128, so pairs never straddle a
 * token and the plan's item count is even) run as a 2-CTA cluster whose producers each load part of
 * a key tile by TMA multicast into both CTAs, so the pair reads its keys from L2 once instead of
 * twice. Needs page_size a multiple of MLA_WG_BOX_KEYS (a box of keys lies in one page) and the
 * driver's tensor-map encoder; *taken false (nothing launched) where it does not apply or the
 * device cannot place the clusters. */
/* A box of keys lies in one page only while chunks start at multiples of the box (pages are). */
static_assert(IGNIS_MLA_KEY_TILE % MLA_WG_BOX_KEYS == 0, "MLA chunks must start at whole TMA boxes");
template <typename T>
static ignis_status launch_wgmma_cluster(const ignis_mla_params &p, int64_t items, cudaStream_t stream,
                                         bool *taken) {
  *taken = false;
  if (p.num_heads % 128 != 0 || p.page_size % MLA_WG_BOX_KEYS != 0)
    return IGNIS_OK;
  mla_key_maps maps;
  const cuuint64_t ckv_dims[3] = {MLA_CKV, (cuuint64_t)p.page_size, (cuuint64_t)p.num_pages};
  const cuuint64_t kpe_dims[3] = {MLA_KPE, (cuuint64_t)p.page_size, (cuuint64_t)p.num_pages};
  const cuuint64_t ckv_strides[2] = {(cuuint64_t)p.ckv_stride_token * 2, (cuuint64_t)p.ckv_stride_page * 2};
  const cuuint64_t kpe_strides[2] = {(cuuint64_t)p.kpe_stride_token * 2, (cuuint64_t)p.kpe_stride_page * 2};
  const cuuint32_t box[3] = {64, MLA_WG_BOX_KEYS, 1};
  if (!ignis_tensor_map_try_u16(&maps.ckv, 3, p.ckv, ckv_dims, ckv_strides, box) ||
      !ignis_tensor_map_try_u16(&maps.kpe, 3, p.kpe, kpe_dims, kpe_strides, box))
    return IGNIS_OK; /* a layout TMA cannot describe: the cp.async form serves it */
  IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<mla_wgmma_kernel<T, true, true>>((size_t)MLA_WG_SMEM_BYTES)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3((unsigned)((items + 1) & ~(int64_t)1)); /* whole pairs */
  config.blockDim = dim3(MLA_WG_THREADS);
  config.dynamicSmemBytes = MLA_WG_SMEM_BYTES;
  config.stream = stream;
  cudaLaunchAttribute cluster = {};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 2;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  const cudaError_t launched = cudaLaunchKernelEx(&config, mla_wgmma_kernel<T, true, true>, p, maps);
  if (launched == cudaErrorInvalidClusterSize || launched == cudaErrorLaunchOutOfResources) {
    (void)cudaGetLastError(); /* no pair of SMs to run it (a shared device): the cp.async form serves */
    return IGNIS_OK;
  }
  IGNIS_CUDA_CHECK(launched);
  *taken = true;
  return IGNIS_OK;
}

/* The narrow kernels for 16- or 32-row tiles: the wgmma one (`wgmma` set) or the mma.sync one. */
template <typename T, bool FP8>
static ignis_status launch_narrow(const ignis_mla_params &p, int64_t items, cudaStream_t stream, int wgmma) {
  if (wgmma != 0)
    return p.tile_rows == 16 ? launch_wgmma_narrow<T, 16, FP8>(p, items, stream)
                             : launch_wgmma_narrow<T, 32, FP8>(p, items, stream);
  if (p.tile_rows == 16) {
    constexpr int smem = mla_narrow_layout<1, FP8>::BYTES;
    IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<mla_narrow_kernel<T, FP8, 1>>((size_t)smem)));
    mla_narrow_kernel<T, FP8, 1><<<(unsigned)items, MLA_THREADS, smem, stream>>>(p);
  } else {
    constexpr int smem = mla_narrow_layout<2, FP8>::BYTES;
    IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<mla_narrow_kernel<T, FP8, 2>>((size_t)smem)));
    mla_narrow_kernel<T, FP8, 2><<<(unsigned)items, MLA_THREADS, smem, stream>>>(p);
  }
  return IGNIS_OK;
}

/* Which kernels MLA's tiles take on this device: 0 the mma.sync ones (mla_attention_kernel for 64-row
 * tiles, mla_narrow_kernel for 16 and 32); else, where the build compiled sm_90a and the device is
 * compute capability 9.0, the wgmma ones (notes/PERF.md, "MLA on wgmma by default"):
 * mla_wgmma_narrow_kernel for 16 and 32 rows, and for 64-row tiles of a 16-bit cache
 * mla_wgmma_kernel, 1 (the default) its one-scorer form where the two cache scales are equal (else
 * the split form), 2 its split-score form, 3 the one scorer's cluster form where it applies
 * (launch_wgmma_cluster; opt-in). IGNIS_MLA_WGMMA (read once) picks 0, 1, 2 or 3. */
static int wide_wgmma(int32_t device) {
  static const int mode = [] {
    if (strstr(IGNIS_CUDA_TARGETS, "sm_90a") == nullptr)
      return 0;
    const char *value = ignis_env(IGNIS_ENV_MLA_WGMMA);
    return value == nullptr || strcmp(value, "1") == 0 ? 1
           : strcmp(value, "2") == 0                   ? 2
           : strcmp(value, "3") == 0                   ? 3
                                                       : 0;
  }();
  return ignis_compute_capability(device) == 90 ? mode : 0;
}

/* Thread groups of the split merge (mla_merge_kernel): 4 (1.04-1.08x one group on the H100,
 * notes/PERF.md), 1 under IGNIS_MLA_MERGE_GROUPS=1; read once. */
static int merge_groups() {
  static const int groups = [] {
    const char *value = ignis_env(IGNIS_ENV_MLA_MERGE_GROUPS);
    return value != nullptr && strcmp(value, "1") == 0 ? 1 : 4;
  }();
  return groups;
}

template <typename T, bool FP8>
static ignis_status launch(const ignis_mla_params &p, cudaStream_t stream, int wgmma) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    capture = cudaStreamCaptureStatusActive;
  }
  const bool captured = capture != cudaStreamCaptureStatusNone;
  const int64_t items = captured ? p.max_work : p.launch_work;
  const int64_t merges = captured ? p.max_merge : p.launch_merge;
  if (items > 0) {
    if (p.tile_rows == 16 || p.tile_rows == 32) {
      const ignis_status status = launch_narrow<T, FP8>(p, items, stream, wgmma);
      if (status != IGNIS_OK)
        return status;
    } else if (!FP8 && (wgmma == 1 || wgmma == 3) && p.kpe_scale == p.ckv_scale) { /* one accumulator for S */
      bool taken = false;
      if (wgmma == 3) {
        const ignis_status status = launch_wgmma_cluster<T>(p, items, stream, &taken);
        if (status != IGNIS_OK)
          return status;
      }
      if (!taken) {
        IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<mla_wgmma_kernel<T, true>>((size_t)MLA_WG_SMEM_BYTES)));
        mla_wgmma_kernel<T, true><<<(unsigned)items, MLA_WG_THREADS, MLA_WG_SMEM_BYTES, stream>>>(p, mla_key_maps{});
      }
    } else if (!FP8 && wgmma != 0) {
      IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<mla_wgmma_kernel<T, false>>((size_t)MLA_WG_SMEM_BYTES)));
      mla_wgmma_kernel<T, false><<<(unsigned)items, MLA_WG_THREADS, MLA_WG_SMEM_BYTES, stream>>>(p, mla_key_maps{});
    } else {
      const int smem = FP8 ? MLA_SMEM_BYTES_FP8 : MLA_SMEM_BYTES;
      IGNIS_CUDA_CHECK((ignis_allow_dynamic_smem<mla_attention_kernel<T, FP8>>((size_t)smem)));
      mla_attention_kernel<T, FP8><<<(unsigned)items, MLA_THREADS, smem, stream>>>(p);
    }
    const ignis_status status = ignis_check_launch("mla attention");
    if (status != IGNIS_OK)
      return status;
  }
  if (merges > 0) {
    const dim3 grid((unsigned)merges, (unsigned)p.num_heads);
    if (merge_groups() == 4)
      mla_merge_kernel<T, 4, 4><<<grid, 4 * 128, 0, stream>>>(p);
    else
      mla_merge_kernel<T, 1, 8><<<grid, 128, 0, stream>>>(p);
    return ignis_check_launch("mla merge");
  }
  return IGNIS_OK;
}

extern "C" ignis_status ignis_cuda_mla(const ignis_mla_params *params, int32_t device, void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  const ignis_status aligned = check_alignment(*params);
  if (aligned != IGNIS_OK)
    return aligned;
  const bool fp8 = params->kv_dtype == IGNIS_FP8_E4M3;
  const int wgmma = wide_wgmma(device);
  const cudaStream_t s = (cudaStream_t)stream;
  if (params->dtype == IGNIS_BF16)
    return fp8 ? launch<__nv_bfloat16, true>(*params, s, wgmma) : launch<__nv_bfloat16, false>(*params, s, wgmma);
  return fp8 ? launch<__half, true>(*params, s, wgmma) : launch<__half, false>(*params, s, wgmma);
}

extern "C" ignis_status ignis_cuda_append_paged_mla_kv(const ignis_append_mla_params *p, int32_t device,
                                                       void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  const int64_t es = p->dtype == IGNIS_FP8_E4M3 ? 1 : 2;
  if (!aligned16(p->append_ckv) || !aligned16(p->append_kpe) || !aligned16(p->ckv) || !aligned16(p->kpe) ||
      !stride16(p->append_ckv_stride, es) || !stride16(p->append_kpe_stride, es) ||
      !stride16(p->ckv_stride_page, es) || !stride16(p->ckv_stride_token, es) ||
      !stride16(p->kpe_stride_page, es) || !stride16(p->kpe_stride_token, es))
    return ignis_set_error(
        IGNIS_ERROR_UNSUPPORTED,
        "ignis_append_paged_mla_kv_cache: on CUDA the rows and caches must start 16-byte aligned "
        "with strides of multiples of 16 bytes");
  if (p->nnz > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis_append_paged_mla_kv_cache: %lld rows exceed one grid", (long long)p->nnz);
  const cudaStream_t s = (cudaStream_t)stream;
  if (p->dtype == IGNIS_FP8_E4M3)
    mla_append_kernel<uint8_t><<<(unsigned)p->nnz, MLA_RAW_CHUNKS, 0, s>>>(*p);
  else
    mla_append_kernel<uint16_t><<<(unsigned)p->nnz, MLA_CHUNKS, 0, s>>>(*p);
  return ignis_check_launch("mla append");
}
