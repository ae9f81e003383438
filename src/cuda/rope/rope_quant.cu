/* CUDA backend of RoPE fused with fp8 quantization (include/ignis/rope.h; the math is stated
 * plainly in src/cpu/rope.c, ignis_cpu_rope_quant): q/k rope parts rotated by the cos/sin-cache
 * row of their position, every value times its scale, saturated and rounded to fp8, written to
 * outputs or appended to the pages of a GQA or MLA cache. One pass: each input byte is read once
 * and each output byte written once.
 *
 * Work units. A token's work is cut into units, in this order: the q heads' rope units, the q
 * heads' nope units, the k heads' rope units, the k heads' nope units, the v heads' units (GQA
 * append). In the vector kernel a unit is 16 values: 16 NeoX pairs (the x values at 16c and their
 * partners at rope_dim/2 + 16c: four 16-byte loads, two 16-byte stores), 8 interleaved pairs (16
 * consecutive values) or 16 nope / v values (two 16-byte loads, one 16-byte store of 16 fp8 codes).
 * The scalar kernel (layouts the vector one cannot take: widths or strides that are not multiples
 * of 16 values, misaligned pointers) uses one pair or one value a unit, with the same math.
 *
 * Mapping. The (token, unit) pairs of the call are numbered token-major and cut into spans of
 * `span` consecutive units, one block each (256 threads, each taking units idx, idx + 256, ...),
 * so a block may cover many small tokens or part of one large token (MLA: 128 heads x 34 units).
 * A block first stages, for each token its span touches, in shared memory: where its k/v rows go
 * (t * stride, or the page and slot found from batch_indices, positions, kv_indptr, kv_indices),
 * whether it is padding, and its cos/sin row (cos 1, sin 0 for a position outside the cache).
 * Then every unit reads its cos/sin from shared memory. Products are rounded apart (__fmul_rn, no
 * FMA) and the conversion is ignis_fp8x2 (cvt.rn.satfinite), so codes match the CPU's bit for bit.
 *
 * Bounds on the GPU (the host cannot read device indices): a padding token (batch_indices < 0)
 * writes nothing; a token whose request, position or page is out of range writes its q outputs
 * and nothing into the cache. Launch: ignis_launch (PDL on sm_90+, ignis_pdl_wait before the
 * first global access). */
#include <string.h>

#include "cuda/common/cuda_common.cuh"
#include "cuda/common/fp8_convert.cuh"

#define RQ_THREADS 256
#define RQ_MAX_ITERS 8           /* units per thread per block, at most */
#define RQ_SMEM_LIMIT (24 << 10) /* staged per-token data of a block, bytes */

typedef struct rq_args {
  ignis_rope_quant_params p;
  int32_t half;                                                  /* rope_dim / 2 */
  int32_t rope_units, nope_units, v_units;                       /* units per head */
  int32_t q_rope_end, q_nope_end, k_rope_end, k_nope_end, units; /* segment ends within a token */
  int32_t span;                                                  /* units per block */
  int32_t max_tokens;                                            /* tokens a span can touch */
  int32_t e4m3;
} rq_args;

/* Per token of a block, in shared memory; 16-byte aligned so that the cos/sin table after the
 * tokens is (its rows are read as float4). */
typedef struct alignas(16) rq_token {
  int64_t k_rope_row, k_nope_row, v_row; /* element offsets of the k/v destination rows */
  int64_t pos;                           /* its cos/sin row; -1 for padding */
  int32_t skip;                          /* padding: nothing written */
  int32_t cache_ok;                      /* k/v destinations valid */
} rq_token;

__device__ __forceinline__ int64_t rq_index(const void *base, bool i64, int64_t i) {
  return i64 ? static_cast<const int64_t *>(base)[i] : (int64_t) static_cast<const int32_t *>(base)[i];
}

/* (x, y) -> (x cos - y sin, x sin + y cos) times scale, each operation rounded on its own. */
__device__ __forceinline__ void rq_rotate(float x, float y, float cos_v, float sin_v, float scale, float &ox,
                                          float &oy) {
  ox = __fmul_rn(__fsub_rn(__fmul_rn(x, cos_v), __fmul_rn(y, sin_v)), scale);
  oy = __fmul_rn(__fadd_rn(__fmul_rn(x, sin_v), __fmul_rn(y, cos_v)), scale);
}

/* 16 values as one 16-byte vector of fp8 codes. */
__device__ __forceinline__ uint4 rq_pack16(const float (&v)[16], bool e4m3) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = ignis_fp8x2(v[4 * i], v[4 * i + 1], e4m3) | ignis_fp8x2(v[4 * i + 2], v[4 * i + 3], e4m3) << 16;
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/* N consecutive floats of the shared cos/sin table (16-byte aligned). */
template <int N> __device__ __forceinline__ void rq_load_table(const float *p, float (&v)[16]) {
#pragma unroll
  for (int j = 0; j < N; j += 4) {
    const float4 f = *reinterpret_cast<const float4 *>(p + j);
    v[j] = f.x, v[j + 1] = f.y, v[j + 2] = f.z, v[j + 3] = f.w;
  }
}

/* One unit of the vector kernel. kind 0: rope (c-th unit of the head), 1: plain values. */
template <typename T, bool INTERLEAVE>
__device__ __forceinline__ void rq_unit_vec(const rq_args &a, const T *src, uint8_t *dst, int kind, int c,
                                            const float *cos_row, const float *sin_row, float scale) {
  const bool e4m3 = a.e4m3;
  float x[16], out[16];
  if (kind == 1) {
    ignis_load_floats<IGNIS_CACHE_STREAM, T, 16>(src + 16 * c, x);
#pragma unroll
    for (int k = 0; k < 16; ++k)
      out[k] = __fmul_rn(x[k], scale);
    ignis_store_raw(dst + 16 * c, rq_pack16(out, e4m3));
    return;
  }
  float cs[16], sn[16];
  if (INTERLEAVE) { /* 8 pairs (2j, 2j + 1) of the 16 values at 16c */
    ignis_load_floats<IGNIS_CACHE_STREAM, T, 16>(src + 16 * c, x);
    rq_load_table<8>(cos_row + 8 * c, cs);
    rq_load_table<8>(sin_row + 8 * c, sn);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      rq_rotate(x[2 * j], x[2 * j + 1], cs[j], sn[j], scale, out[2 * j], out[2 * j + 1]);
    ignis_store_raw(dst + 16 * c, rq_pack16(out, e4m3));
  } else { /* 16 pairs (16c + j, half + 16c + j) */
    float y[16], out_y[16];
    ignis_load_floats<IGNIS_CACHE_STREAM, T, 16>(src + 16 * c, x);
    ignis_load_floats<IGNIS_CACHE_STREAM, T, 16>(src + a.half + 16 * c, y);
    rq_load_table<16>(cos_row + 16 * c, cs);
    rq_load_table<16>(sin_row + 16 * c, sn);
#pragma unroll
    for (int j = 0; j < 16; ++j)
      rq_rotate(x[j], y[j], cs[j], sn[j], scale, out[j], out_y[j]);
    ignis_store_raw(dst + 16 * c, rq_pack16(out, e4m3));
    ignis_store_raw(dst + a.half + 16 * c, rq_pack16(out_y, e4m3));
  }
}

/* One unit of the scalar kernel: pair c (rope) or value c (plain). */
template <typename T, bool INTERLEAVE>
__device__ __forceinline__ void rq_unit_scalar(const rq_args &a, const T *src, uint8_t *dst, int kind, int c,
                                               const float *cos_row, const float *sin_row, float scale) {
  const bool e4m3 = a.e4m3;
  if (kind == 1) {
    dst[c] = ignis_fp8x1(__fmul_rn(ignis_to_float(src[c]), scale), e4m3);
    return;
  }
  const int xi = INTERLEAVE ? 2 * c : c, yi = INTERLEAVE ? 2 * c + 1 : a.half + c;
  float ox, oy;
  rq_rotate(ignis_to_float(src[xi]), ignis_to_float(src[yi]), cos_row[c], sin_row[c], scale, ox, oy);
  dst[xi] = ignis_fp8x1(ox, e4m3);
  dst[yi] = ignis_fp8x1(oy, e4m3);
}

/* Stage the block's tokens [first, first + ntok): rows, flags, cos/sin. */
__device__ void rq_stage(const rq_args &a, int64_t first, int ntok, rq_token *tokens, float *s_cos,
                         float *s_sin) {
  const ignis_rope_quant_params &p = a.p;
  const bool i64 = p.pos_dtype == IGNIS_I64;
  for (int tl = threadIdx.x; tl < ntok; tl += blockDim.x) {
    const int64_t t = first + tl;
    rq_token tok;
    tok.skip = 0;
    tok.cache_ok = 1;
    tok.k_rope_row = t * p.k_rope_out.stride_token;
    tok.k_nope_row = t * p.k_nope_out.stride_token;
    tok.v_row = 0;
    if (p.paged) {
      const int64_t b = p.batch_indices[t], s = p.positions[t];
      tok.skip = b < 0;
      tok.cache_ok = 0;
      if (b >= 0 && b < p.batch_size && s >= 0) {
        const int64_t start = p.kv_indptr[b], end = p.kv_indptr[b + 1], entry = start + s / p.page_size;
        if (entry < end && entry >= 0 && entry < p.num_page_entries) {
          const int64_t page = p.kv_indices[entry], slot = s % p.page_size;
          if (page >= 0 && page < p.num_pages) {
            tok.cache_ok = 1;
            tok.k_rope_row = page * p.k_rope_out.stride_page + slot * p.k_rope_out.stride_token;
            tok.k_nope_row = page * p.k_nope_out.stride_page + slot * p.k_nope_out.stride_token;
            tok.v_row = page * p.v_out.stride_page + slot * p.v_out.stride_token;
          }
        }
      }
    }
    tok.pos = tok.skip ? -1 : rq_index(p.pos_ids, i64, t);
    tokens[tl] = tok;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < ntok * a.half; idx += blockDim.x) {
    const int tl = idx / a.half, i = idx - tl * a.half;
    const int64_t pos = tokens[tl].pos;
    float c = 1.0f, s = 0.0f;
    if (pos >= 0 && pos < p.max_position) {
      const float *row = p.cos_sin_cache + pos * p.cos_sin_cache_stride;
      c = __ldg(row + i);
      s = __ldg(row + a.half + i);
    }
    s_cos[idx] = c;
    s_sin[idx] = s;
  }
  __syncthreads();
}

template <typename T, bool INTERLEAVE, bool VEC>
__global__ void __launch_bounds__(RQ_THREADS) rope_quant_kernel(const __grid_constant__ rq_args a) {
  extern __shared__ __align__(16) unsigned char rq_smem[];
  const ignis_rope_quant_params &p = a.p;
  rq_token *tokens = reinterpret_cast<rq_token *>(rq_smem);
  float *s_cos = reinterpret_cast<float *>(rq_smem + sizeof(rq_token) * a.max_tokens);
  float *s_sin = s_cos + a.max_tokens * a.half;

  const int64_t start = (int64_t)blockIdx.x * a.span, total = p.nnz * a.units;
  const int count = (int)min((int64_t)a.span, total - start);
  const int64_t first = start / a.units;
  const int base = (int)(start - first * a.units); /* unit of `first` the span starts at */
  const int ntok = (base + count - 1) / a.units + 1;

  ignis_pdl_wait();
  rq_stage(a, first, ntok, tokens, s_cos, s_sin);

  for (int idx = threadIdx.x; idx < count; idx += blockDim.x) {
    const int v = base + idx;
    const int tl = v / a.units, u = v - tl * a.units;
    const rq_token tok = tokens[tl];
    if (tok.skip)
      continue;
    const int64_t t = first + tl;
    const void *src;
    void *dst;
    int64_t src_stride_token, src_stride_head, dst_stride_head, row;
    int kind = 1, w, per_head;
    float scale = p.quant_scale_kv;
    if (u < a.q_nope_end) {
      kind = u < a.q_rope_end ? 0 : 1;
      const ignis_rope_quant_src &s = kind ? p.q_nope : p.q_rope;
      const ignis_rope_quant_dest &d = kind ? p.q_nope_out : p.q_rope_out;
      w = kind ? u - a.q_rope_end : u;
      per_head = kind ? a.nope_units : a.rope_units;
      src = s.data, src_stride_token = s.stride_token, src_stride_head = s.stride_head;
      dst = d.data, dst_stride_head = d.stride_head, row = t * d.stride_token;
      scale = p.quant_scale_q;
    } else {
      if (!tok.cache_ok)
        continue;
      if (u < a.k_rope_end) {
        kind = 0;
        w = u - a.q_nope_end, per_head = a.rope_units;
        src = p.k_rope.data, src_stride_token = p.k_rope.stride_token, src_stride_head = p.k_rope.stride_head;
        dst = p.k_rope_out.data, dst_stride_head = p.k_rope_out.stride_head, row = tok.k_rope_row;
      } else if (u < a.k_nope_end) {
        w = u - a.k_rope_end, per_head = a.nope_units;
        src = p.k_nope.data, src_stride_token = p.k_nope.stride_token, src_stride_head = p.k_nope.stride_head;
        dst = p.k_nope_out.data, dst_stride_head = p.k_nope_out.stride_head, row = tok.k_nope_row;
      } else {
        w = u - a.k_nope_end, per_head = a.v_units;
        src = p.v.data, src_stride_token = p.v.stride_token, src_stride_head = p.v.stride_head;
        dst = p.v_out.data, dst_stride_head = p.v_out.stride_head, row = tok.v_row;
      }
    }
    const int head = w / per_head, c = w - head * per_head;
    const T *s_ptr = static_cast<const T *>(src) + t * src_stride_token + head * src_stride_head;
    uint8_t *d_ptr = static_cast<uint8_t *>(dst) + row + head * dst_stride_head;
    const float *cos_row = s_cos + tl * a.half, *sin_row = s_sin + tl * a.half;
    if (VEC)
      rq_unit_vec<T, INTERLEAVE>(a, s_ptr, d_ptr, kind, c, cos_row, sin_row, scale);
    else
      rq_unit_scalar<T, INTERLEAVE>(a, s_ptr, d_ptr, kind, c, cos_row, sin_row, scale);
  }
  ignis_pdl_launch_dependents();
}

/* ---- host side ----------------------------------------------------------------------------- */

static bool rq_src_aligned(const ignis_rope_quant_src &s, int64_t elem, bool multi_head) {
  return !s.data || ((uintptr_t)s.data % 16 == 0 && (s.stride_token * elem) % 16 == 0 &&
                     (!multi_head || (s.stride_head * elem) % 16 == 0));
}

static bool rq_dest_aligned(const ignis_rope_quant_dest &d, bool paged, bool multi_head) {
  return !d.data || ((uintptr_t)d.data % 16 == 0 && d.stride_token % 16 == 0 &&
                     (!paged || d.stride_page % 16 == 0) && (!multi_head || d.stride_head % 16 == 0));
}

/* Whether the 16-value units serve this call: widths multiples of 16 values (NeoX: of the half
 * too), every pointer and stride stepped over 16-byte aligned. */
static bool rq_vectorizable(const ignis_rope_quant_params *p) {
  const int64_t elem = (int64_t)ignis_dtype_size(p->dtype);
  const bool widths =
      (p->interleave ? p->rope_dim % 16 == 0 : (p->rope_dim / 2) % 16 == 0) && p->nope_dim % 16 == 0;
  const bool hq = p->num_q_heads > 1, hk = p->num_k_heads > 1;
  return widths && rq_src_aligned(p->q_rope, elem, hq) && rq_src_aligned(p->q_nope, elem, hq) &&
         rq_src_aligned(p->k_rope, elem, hk) && rq_src_aligned(p->k_nope, elem, hk) &&
         rq_src_aligned(p->v, elem, hk) && rq_dest_aligned(p->q_rope_out, false, hq) &&
         rq_dest_aligned(p->q_nope_out, false, hq) && rq_dest_aligned(p->k_rope_out, p->paged, hk) &&
         rq_dest_aligned(p->k_nope_out, p->paged, hk) && rq_dest_aligned(p->v_out, p->paged, hk);
}

template <typename T, bool INTERLEAVE, bool VEC>
static ignis_status rq_launch(rq_args &a, int32_t device, cudaStream_t stream) {
  const ignis_rope_quant_params &p = a.p;
  a.rope_units = VEC ? (int32_t)((INTERLEAVE ? p.rope_dim : p.rope_dim / 2) / 16) : a.half;
  a.nope_units = (int32_t)(VEC ? p.nope_dim / 16 : p.nope_dim);
  a.v_units = p.has_v ? (int32_t)(VEC ? (p.rope_dim + p.nope_dim) / 16 : p.rope_dim + p.nope_dim) : 0;
  const int64_t hq = p.num_q_heads, hk = p.num_k_heads;
  const int64_t units = hq * (a.rope_units + a.nope_units) + hk * (a.rope_units + a.nope_units + a.v_units);
  if (units == 0) /* no heads at all */
    return IGNIS_OK;
  if (units > INT32_MAX / 4)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED,
                           "ignis_cuda_rope_quant: %lld work units per token, at most 2^29",
                           (long long)units);
  a.q_rope_end = (int32_t)(hq * a.rope_units);
  a.q_nope_end = a.q_rope_end + (int32_t)(hq * a.nope_units);
  a.k_rope_end = a.q_nope_end + (int32_t)(hk * a.rope_units);
  a.k_nope_end = a.k_rope_end + (int32_t)(hk * a.nope_units);
  a.units = (int32_t)units;

  /* Units per thread: enough blocks for 8 per SM when the call has them, at most RQ_MAX_ITERS,
   * and a staging table within RQ_SMEM_LIMIT. */
  const int64_t total = p.nnz * units, sm = ignis_cuda_sm_count(device);
  int64_t iters = total / ((int64_t)RQ_THREADS * sm * 8);
  iters = iters < 1 ? 1 : iters > RQ_MAX_ITERS ? RQ_MAX_ITERS : iters;
  size_t smem = 0;
  for (;; --iters) {
    a.span = (int32_t)(iters * RQ_THREADS);
    int64_t max_tokens = (a.span + units - 2) / units + 1;
    if (max_tokens > p.nnz)
      max_tokens = p.nnz;
    a.max_tokens = (int32_t)max_tokens;
    smem = (size_t)max_tokens * (sizeof(rq_token) + 2 * sizeof(float) * (size_t)a.half);
    if (smem <= RQ_SMEM_LIMIT || iters == 1)
      break;
  }
  if (smem > RQ_SMEM_LIMIT)
    return ignis_set_error(IGNIS_ERROR_INTERNAL, "ignis_cuda_rope_quant: staging needs %zu bytes", smem);
  const int64_t blocks = (total + a.span - 1) / a.span;
  if (blocks > INT32_MAX)
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "ignis_cuda_rope_quant: %lld blocks, at most 2^31",
                           (long long)blocks);
  cudaError_t err = ignis_launch(rope_quant_kernel<T, INTERLEAVE, VEC>, dim3((unsigned)blocks),
                                 dim3(RQ_THREADS), smem, stream, a);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return ignis_set_error(IGNIS_ERROR_CUDA, "ignis_cuda_rope_quant: kernel launch failed: %s",
                           cudaGetErrorString(err));
  }
  return ignis_check_launch("ignis_cuda_rope_quant");
}

template <typename T> static ignis_status rq_dispatch(rq_args &a, int32_t device, cudaStream_t stream) {
  const bool vec = rq_vectorizable(&a.p);
  if (a.p.interleave)
    return vec ? rq_launch<T, true, true>(a, device, stream) : rq_launch<T, true, false>(a, device, stream);
  return vec ? rq_launch<T, false, true>(a, device, stream) : rq_launch<T, false, false>(a, device, stream);
}

extern "C" ignis_status ignis_cuda_rope_quant(const ignis_rope_quant_params *p, int32_t device,
                                              void *stream) {
  IGNIS_CUDA_ON_DEVICE(device);
  if (p->nnz == 0)
    return IGNIS_OK;
  rq_args a;
  memset(&a, 0, sizeof a);
  a.p = *p;
  a.half = (int32_t)(p->rope_dim / 2);
  a.e4m3 = p->out_dtype == IGNIS_FP8_E4M3;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (p->dtype) {
  case IGNIS_F16:
    return rq_dispatch<__half>(a, device, s);
  case IGNIS_BF16:
    return rq_dispatch<__nv_bfloat16>(a, device, s);
  default:
    return ignis_set_error(IGNIS_ERROR_UNSUPPORTED, "ignis_cuda_rope_quant: dtype %s",
                           ignis_dtype_name(p->dtype));
  }
}
