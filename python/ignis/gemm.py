"""Matrix products with FlashInfer's names and arguments (flashinfer.gemm, and ``mm_bf16`` /
``bmm_bf16`` / ``bmm_fp8`` at flashinfer's top level), on ignis' GEMM ops (include/ignis/gemm.h).

Layouts, as in FlashInfer: ``a`` is ``[m, k]`` (``[b, m, k]`` batched) with its last dimension
contiguous; the second operand of ``mm_bf16`` / ``bmm_bf16`` / ``bmm_fp8`` is the logical ``[k, n]``
(``[b, k, n]``), normally a weight stored ``[n, k]`` and passed transposed (``w.transpose(-2,
-1)``, FlashInfer's "column-major"); ``mm_bf16`` and ``bmm_bf16`` also take a row-major ``[k, n]``.
The fp8 groupwise forms take the weight ``[n, k]`` itself.

Grouped GEMMs (``grouped_mm_bf16``, ``group_gemm_fp8_nt_groupwise``, ``SegmentGEMMWrapper``): the
rows of ``a`` ``[cum_m, k]`` are cut into groups by ``m_indptr`` (``[groups + 1]``, int32 or int64,
on the device: the GPU reads it, no host sync, CUDA-graph safe) and group ``g`` is multiplied by
its weight ``b[g]`` ``[n, k]`` (or ``weights[weight_indices[g]]``). Rows of the output outside
``m_indptr[0] .. m_indptr[-1]`` are not written. On CUDA they run ignis' own grouped kernel
(src/cuda/gemm/grouped_gemm.cu), on the host the CPU GEMM per group. Accumulation is f32 everywhere.

Paths: the CPU backend for host arrays; on CUDA cuBLASLt (loaded at the first call that needs
it), ignis' own small-M kernel for the 16-bit products cuBLASLt lacks (bf16 in, f16 out; m <= 64)
and ignis' Hopper kernel for block-scaled fp8 with m >= 128 (the C header has the rule). FlashInfer's ``backend=`` chooses among FlashInfer's kernel libraries; ignis has one path
per shape, so each of FlashInfer's names (and "auto") is accepted and gives the same result, and
any other name raises. ``pdl`` and ``mma_sm`` are scheduling hints with no effect on the result
(cuBLASLt launches without PDL) and are accepted likewise.

Outputs: ``out=`` is written and returned; without it the output is allocated in the input's
framework (PyTorch; NumPy for float16/float32). NumPy fp8 arrays (ml_dtypes) are passed to the
library as uint8 views. Every op takes a keyword-only ``stream=``.

Block-scaled fp8 on CUDA needs m a multiple of 4: for PyTorch CUDA tensors the wrappers pad a and
its scales (a copy; FlashInfer's groupwise GEMM asks its callers to pad likewise). bf16 inputs of
``fp8_blockscale_gemm_sm90`` are quantized here as FlashInfer does (1x128 groups for the input,
128x128 blocks for a bf16 weight, scale = amax / 448 with amax at least 1e-4), with PyTorch ops;
this needs PyTorch tensors.
"""

import sys

from . import _ext
from ._alloc import framework_of
from ._common import _fp8_numpy_view
from ._errors import InvalidArgumentError, UnsupportedError

__all__ = ["mm_bf16", "bmm_bf16", "bmm_fp8", "grouped_mm_bf16", "SegmentGEMMWrapper"]

_FP8_MAX = 448.0
_BLOCK = 128
_MM_BACKENDS = ("cudnn", "cutlass", "tgv", "cublaslt", "tinygemm", "cutile", "cute-dsl", "auto")
_BMM_BACKENDS = ("cudnn", "cutlass", "cutile", "tgv", "cake", "auto")
_FP8_BACKENDS = ("cudnn", "cublas", "cutlass", "cute-dsl", "auto")
_GROUPWISE_BACKENDS = ("cutlass", "trtllm", "cutile")
_OUT_NAMES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "half": "float16",
              "f16": "float16", "float32": "float32", "float": "float32", "f32": "float32"}


def _dtype_name(dtype):
    text = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", None) or str(dtype)
    return _OUT_NAMES.get(text.replace("torch.", "").replace("numpy.", ""))


def _out_name(fn, out_dtype, allowed):
    name = _dtype_name(out_dtype)
    if name not in allowed:
        raise UnsupportedError("%s: out_dtype=%s is not supported: %s" % (fn, out_dtype, " or ".join(allowed)))
    return name


def _check_backend(fn, backend, allowed):
    if backend not in allowed:
        raise InvalidArgumentError("%s: backend=%r is not one of FlashInfer's %s" % (fn, backend, allowed))


def _empty(fn, like, shape, dtype_name):
    framework = framework_of(like)
    if framework == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=getattr(torch, dtype_name), device=like.device)
    if framework == "numpy" and dtype_name != "bfloat16":
        return sys.modules["numpy"].empty(shape, dtype=dtype_name)
    raise UnsupportedError("%s: ignis allocates a %s output only for PyTorch (and NumPy float16/float32): pass out="
                           % (fn, dtype_name))


def _output(fn, like, shape, out, out_dtype, allowed):
    if out is None:
        return _empty(fn, like, shape, _out_name(fn, out_dtype, allowed))
    if out_dtype is not None and _dtype_name(out_dtype) != _dtype_name(out.dtype):
        raise InvalidArgumentError("%s: out.dtype=%s but out_dtype=%s" % (fn, out.dtype, out_dtype))
    return out


def _transposed(x):
    """x with its last two dimensions swapped (a view)."""
    return x.transpose(-2, -1) if framework_of(x) == "torch" else x.swapaxes(-2, -1)


def _mm(fn, a, b, bias, out, stream):
    """ignis_mm, with one detour: cuBLASLt has no 16-bit product whose output is the other 16-bit
    dtype (bf16 x bf16 -> f16) and no f32 bias with a 16-bit output, so on CUDA such a call that
    ignis' small-M kernel does not take (m > 64) computes into a float32 temporary (PyTorch) and
    rounds it into out."""
    out_name = _dtype_name(out.dtype)
    lt_lacks = out_name != "float32" and (_dtype_name(a.dtype) != out_name or
                                          (bias is not None and _dtype_name(bias.dtype) == "float32"))
    if lt_lacks and framework_of(out) == "torch" and out.device.type == "cuda":
        try:
            _ext.mm(a, b, bias, out, stream)
        except UnsupportedError:
            tmp = _empty(fn, out, tuple(out.shape), "float32")
            _ext.mm(a, b, bias, tmp, stream)
            out.copy_(tmp)
        return
    _ext.mm(a, b, bias, out, stream)


def mm_bf16(a, b, bias=None, pdl=False, out=None, out_dtype="bfloat16", backend="cudnn", *, stream=None):
    """``out = a @ b (+ bias)``: a ``[m, k]``, b ``[k, n]`` (a weight ``[n, k]`` transposed, or row-major),
    both bfloat16 (or both float16); bias ``[n]`` (out's dtype or float32); out ``[m, n]`` bfloat16,
    float16 or float32 (``out_dtype``). Returns out."""
    fn = "ignis.mm_bf16"
    _check_backend(fn, backend, _MM_BACKENDS)
    out = _output(fn, a, (a.shape[0], b.shape[-1]), out, out_dtype, ("bfloat16", "float16", "float32"))
    _mm(fn, a, b, bias, out, stream)
    return out


def tinygemm_bf16(input, weight, out, bias=None, use_pdl=False, *, stream=None):
    """FlashInfer's small GEMM ``out = input @ weight.T + bias`` (``F.linear``): input ``[m, k]``,
    weight ``[n, k]`` (row-major, not transposed), both bfloat16 (float16 is taken too); out
    ``[m, n]`` written in place; bias ``[n]`` (out's dtype or float32) or None. FlashInfer tunes it
    for 1 to 8 rows; here any m runs, on the same call as ``mm_bf16`` (cuBLASLt on CUDA: it beat
    ignis' small-M kernel there). ``use_pdl`` is a scheduling hint: ignis launches with PDL wherever the GPU
    has it. Returns None, as FlashInfer does."""
    fn = "ignis.tinygemm_bf16"
    if use_pdl not in (True, False):
        raise InvalidArgumentError("%s: use_pdl=%r must be a bool" % (fn, use_pdl))
    if getattr(weight, "ndim", None) != 2:
        raise InvalidArgumentError("%s: weight must be 2-D [n, k], got shape %s"
                                   % (fn, tuple(getattr(weight, "shape", ()))))
    _ext.mm(input, _transposed(weight), bias, out, stream)


def bmm_bf16(A, B, out=None, out_dtype="bfloat16", backend="cudnn", *, stream=None):
    """Batched ``out[i] = A[i] @ B[i]``: A ``[b, m, k]``, B ``[b, k, n]`` (weights ``[b, n, k]``
    transposed, or row-major), both bfloat16 (or float16); out ``[b, m, n]`` bfloat16, float16 or
    float32. Returns out."""
    fn = "ignis.bmm_bf16"
    _check_backend(fn, backend, _BMM_BACKENDS)
    out = _output(fn, A, (A.shape[0], A.shape[1], B.shape[-1]), out, out_dtype, ("bfloat16", "float16", "float32"))
    _mm(fn, A, B, None, out, stream)
    return out


def bmm_fp8(A, B, A_scale, B_scale, dtype, out=None, backend="cublas", *, stream=None):
    """Batched fp8 ``out[i] = (A_scale * B_scale) * (A[i] @ B[i])``: A ``[b, m, k]`` and B ``[b, k, n]``
    fp8 e4m3 or e5m2 (not both e5m2; on CUDA B must be a weight ``[b, n, k]`` transposed), A_scale and
    B_scale one float32 each (shape ``[]`` or ``[1]``, on the device: read there, no sync); out
    ``[b, m, n]`` of ``dtype`` (bfloat16 or float16). Returns out."""
    fn = "ignis.bmm_fp8"
    _check_backend(fn, backend, _FP8_BACKENDS)
    out = _output(fn, A, (A.shape[0], A.shape[1], B.shape[-1]), out, dtype, ("bfloat16", "float16"))
    A, a_view = _fp8_numpy_view(A)
    B, b_view = _fp8_numpy_view(B)
    _ext.mm_fp8(A, B, A_scale, B_scale, out, a_view, b_view, stream)
    return out


# ---- block-scaled fp8 (flashinfer.gemm) -----------------------------------------------------------
def _scales_as(fn, name, scale, rows, cols, mode):
    """A scale tensor as the logical [rows, cols] the C API takes: given so, or transposed
    ([cols, rows], FlashInfer's "MN" major mode). ``mode`` decides when both shapes match."""
    shape = tuple(scale.shape)
    if shape == (rows, cols) and (mode != "MN" or rows != cols):
        return scale
    if shape == (cols, rows):
        return _transposed(scale)
    raise InvalidArgumentError("%s: %s.shape=%s but it must be (%d, %d) (or (%d, %d) in the MN major mode)"
                               % (fn, name, shape, rows, cols, cols, rows))


def _run_blockscale(fn, a, b, a_scale, b_scale, out, stream):
    """ignis_mm_fp8_blockscale, padding m to a multiple of 4 for PyTorch CUDA tensors."""
    m = a.shape[0]
    torch = sys.modules.get("torch")
    if m % 4 and torch is not None and isinstance(a, torch.Tensor) and a.is_cuda:
        pad = 4 - m % 4
        a_padded = a.new_zeros((m + pad, a.shape[1]))
        a_padded[:m].copy_(a)
        s_padded = a_scale.new_ones((m + pad, a_scale.shape[1]))
        s_padded[:m].copy_(a_scale)
        out_padded = out.new_empty((m + pad, out.shape[1]))
        _ext.mm_fp8_blockscale(a_padded, b, s_padded, b_scale, out_padded, None, None, stream)
        out.copy_(out_padded[:m])
        return out
    a, a_view = _fp8_numpy_view(a)
    b, b_view = _fp8_numpy_view(b)
    _ext.mm_fp8_blockscale(a, b, a_scale, b_scale, out, a_view, b_view, stream)
    return out


def gemm_fp8_nt_groupwise(a, b, a_scale, b_scale, scale_major_mode=None, mma_sm=1, scale_granularity_mnk=(1, 128, 128),
                          out=None, out_dtype=None, backend="cutlass", *, stream=None):
    """Block-scaled fp8 ``out = a @ b.T``: a ``[m, k]`` and the weight b ``[n, k]`` fp8 e4m3; a_scale one
    scale per row and 128-wide k block, ``(m, k/128)`` ("K" major) or ``(k/128, m)`` ("MN"); b_scale one
    per 128x128 block, ``(n/128, k/128)`` or ``(k/128, n/128)``; float32, or uint8 UE8M0 exponents
    (2^(e-127)). ``scale_granularity_mnk`` must be (1, 128, 128). out ``[m, n]`` bfloat16 (default) or
    float16. Returns out."""
    fn = "ignis.gemm_fp8_nt_groupwise"
    _check_backend(fn, backend, _GROUPWISE_BACKENDS)
    if tuple(scale_granularity_mnk) != (1, _BLOCK, _BLOCK):
        raise UnsupportedError("%s: scale_granularity_mnk=%s is not supported: only (1, 128, 128)"
                               % (fn, tuple(scale_granularity_mnk)))
    if scale_major_mode not in (None, "K", "MN"):
        raise InvalidArgumentError("%s: scale_major_mode=%r must be None, 'K' or 'MN'" % (fn, scale_major_mode))
    if mma_sm not in (1, 2):
        raise InvalidArgumentError("%s: mma_sm=%r must be 1 or 2" % (fn, mma_sm))
    m, k, n = a.shape[0], a.shape[1], b.shape[0]
    kb, nb = -(-k // _BLOCK), -(-n // _BLOCK)
    a_scale = _scales_as(fn, "a_scale", a_scale, m, kb, scale_major_mode)
    b_scale = _scales_as(fn, "b_scale", b_scale, nb, kb, scale_major_mode)
    out = _output(fn, a, (m, n), out, out_dtype or (None if out is not None else "bfloat16"), ("bfloat16", "float16"))
    return _run_blockscale(fn, a, b, a_scale, b_scale, out, stream)


def _quantize_groups(fn, x, rows_per_block):
    """PyTorch bf16 x [r, k] as fp8 e4m3 with one f32 scale per rows_per_block x 128 block (the last
    blocks may be partial: they are padded with zeros for their amax): scale = max(amax, 1e-4) / 448,
    q = x / scale (saturating). Returns (q [r, k], scales [ceil(r / rows_per_block), ceil(k / 128)])."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(x, torch.Tensor):
        raise UnsupportedError("%s: bf16 operands are quantized with PyTorch ops: pass PyTorch tensors" % fn)
    r, k = x.shape
    rb, kb = -(-r // rows_per_block), -(-k // _BLOCK)
    padded = x.float()
    if rb * rows_per_block != r or kb * _BLOCK != k:
        padded = torch.zeros((rb * rows_per_block, kb * _BLOCK), dtype=torch.float32, device=x.device)
        padded[:r, :k] = x
    blocks = padded.reshape(rb, rows_per_block, kb, _BLOCK)
    scale = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-4) / _FP8_MAX
    q = (blocks / scale[:, None, :, None]).clamp(-_FP8_MAX, _FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(rb * rows_per_block, kb * _BLOCK)[:r, :k].contiguous(), scale


def fp8_blockscale_gemm_sm90(input, weight, input_scale=None, weight_scale=None, out=None, out_dtype=None, *,
                             stream=None):
    """FlashInfer's SM90 block-scaled GEMM ``out = input @ weight.T``: input ``[m, k]`` fp8 e4m3 with
    input_scale ``(m, k/128)`` float32, or bfloat16 (quantized here in 1x128 groups; input_scale
    None); weight ``[n, k]`` fp8 e4m3 with weight_scale ``(ceil(n/128), k/128)`` float32 (128x128
    blocks) or ``(n, k/128)`` (per-token: one 1x128 scale per weight row), or bfloat16 (quantized
    here in 128x128 blocks). out ``[m, n]`` bfloat16 (default) or float16. Returns out."""
    fn = "ignis.fp8_blockscale_gemm_sm90"
    if input.ndim != 2 or weight.ndim != 2:
        raise InvalidArgumentError("%s: input and weight must be 2-D, got %s and %s"
                                   % (fn, tuple(input.shape), tuple(weight.shape)))
    m, k = input.shape
    n = weight.shape[0]
    in_name, w_name = str(input.dtype).replace("torch.", ""), str(weight.dtype).replace("torch.", "")
    if in_name == "bfloat16":
        if input_scale is not None:
            raise InvalidArgumentError("%s: input_scale must be None for a bfloat16 input" % fn)
        input, input_scale = _quantize_groups(fn, input, 1)
    elif input_scale is None:
        raise InvalidArgumentError("%s: input_scale is required for an fp8 input" % fn)
    if w_name == "bfloat16":
        if weight_scale is not None:
            raise InvalidArgumentError("%s: weight_scale must be None for a bfloat16 weight" % fn)
        if in_name != "bfloat16":
            raise UnsupportedError("%s: an fp8 input with a bfloat16 weight is not supported (as in FlashInfer)" % fn)
        weight, weight_scale = _quantize_groups(fn, weight, _BLOCK)
    elif weight_scale is None:
        raise InvalidArgumentError("%s: weight_scale is required for an fp8 weight" % fn)
    out = _output(fn, input, (m, n), out, out_dtype or (None if out is not None else "bfloat16"),
                  ("bfloat16", "float16"))
    return _run_blockscale(fn, input, weight, input_scale, weight_scale, out, stream)


# ---- grouped GEMM (flashinfer.grouped_mm, flashinfer.gemm) ------------------------------------------
_GROUPED_BACKENDS = ("cudnn", "cake")
_GROUP_FP8_BACKENDS = ("trtllm", "cutile", "cutlass")
_SEGMENT_BACKENDS = ("auto", "sm80", "sm90")


def grouped_mm_bf16(a, b, m_indptr, out=None, out_dtype="bfloat16", *, backend="cudnn", tactic=-1, stream=None):
    """Grouped ``out[m_indptr[g]:m_indptr[g+1]] = a[m_indptr[g]:m_indptr[g+1]] @ b[g].T`` (FlashInfer's
    ``grouped_mm_bf16``): a ``[cum_m, k]`` bfloat16 (or float16), b ``[groups, n, k]`` of a's dtype,
    m_indptr ``[groups + 1]`` int32 or int64 (on the device; never read by the host); out ``[cum_m, n]``
    bfloat16, float16 or float32. ``backend`` names one of FlashInfer's backends (ignis has one path);
    ``tactic`` picks a cuDNN plan and only -1 (the default plan) is accepted. Returns out."""
    fn = "ignis.grouped_mm_bf16"
    _check_backend(fn, backend, _GROUPED_BACKENDS)
    if tactic != -1:
        raise UnsupportedError("%s: tactic=%r is not supported: ignis has one plan (-1)" % (fn, tactic))
    if out is not None:
        out_dtype = None
    out = _output(fn, a, (a.shape[0], b.shape[1]), out, out_dtype, ("bfloat16", "float16", "float32"))
    _ext.grouped_mm(a, b, m_indptr, None, out, stream)
    return out


def _group_scales(fn, name, scale, shape_k, shape_mn, mode):
    """A grouped scale tensor as the C API's K-major logical shape ``shape_k``: given so, or in the
    MN-major shape ``shape_mn`` (its last two dimensions swapped; handed in transposed)."""
    shape = tuple(scale.shape)
    if shape == shape_k and (mode != "MN" or shape_k != shape_mn):
        return scale
    if shape == shape_mn:
        return _transposed(scale)
    raise InvalidArgumentError("%s: %s.shape=%s but it must be %s (K major) or %s (MN major)"
                               % (fn, name, shape, shape_k, shape_mn))


def group_gemm_fp8_nt_groupwise(a, b, a_scale, b_scale, m_indptr, scale_granularity_mnk=(1, 128, 128),
                                scale_major_mode="MN", mma_sm=1, out=None, out_dtype=None, backend="trtllm",
                                segment_alignment=1, *, stream=None):
    """Grouped block-scaled fp8 GEMM (FlashInfer's ``group_gemm_fp8_nt_groupwise``): a ``[cum_m, k]`` and
    b ``[groups, n, k]`` fp8 e4m3; a_scale one scale per row and 128-wide k block, ``(k/128, cum_m)``
    ("MN", the default) or ``(cum_m, k/128)`` ("K"); b_scale one per 128x128 block of each group,
    ``(groups, k/128, n/128)`` ("MN") or ``(groups, n/128, k/128)`` ("K"); float32, or uint8 UE8M0
    exponents. m_indptr ``[groups + 1]`` int32/int64 on the device (any row counts: ignis needs no
    padding to 4). ``scale_granularity_mnk`` must be (1, 128, 128). ``mma_sm`` (1 or 2) and
    ``segment_alignment`` (a caller promise about the offsets) are scheduling hints with no effect on
    the result. out ``[cum_m, n]`` bfloat16 (default) or float16. Returns out."""
    fn = "ignis.group_gemm_fp8_nt_groupwise"
    _check_backend(fn, backend, _GROUP_FP8_BACKENDS)
    if tuple(scale_granularity_mnk) != (1, _BLOCK, _BLOCK):
        raise UnsupportedError("%s: scale_granularity_mnk=%s is not supported: only (1, 128, 128)"
                               % (fn, tuple(scale_granularity_mnk)))
    if scale_major_mode not in (None, "K", "MN"):
        raise InvalidArgumentError("%s: scale_major_mode=%r must be 'K' or 'MN'" % (fn, scale_major_mode))
    if mma_sm not in (1, 2):
        raise InvalidArgumentError("%s: mma_sm=%r must be 1 or 2" % (fn, mma_sm))
    if not isinstance(segment_alignment, int) or segment_alignment < 1:
        raise InvalidArgumentError("%s: segment_alignment=%r must be a positive int" % (fn, segment_alignment))
    if b.ndim != 3:
        raise InvalidArgumentError("%s: b must be 3-D (groups, n, k), got shape %s" % (fn, tuple(b.shape)))
    m, groups, n, k = a.shape[0], b.shape[0], b.shape[1], b.shape[2]
    kb, nb = -(-k // _BLOCK), -(-n // _BLOCK)
    a_scale = _group_scales(fn, "a_scale", a_scale, (m, kb), (kb, m), scale_major_mode)
    b_scale = _group_scales(fn, "b_scale", b_scale, (groups, nb, kb), (groups, kb, nb), scale_major_mode)
    out = _output(fn, a, (m, n), out, out_dtype or (None if out is not None else "bfloat16"), ("bfloat16", "float16"))
    a, a_view = _fp8_numpy_view(a)
    b, b_view = _fp8_numpy_view(b)
    _ext.grouped_mm_fp8_blockscale(a, b, a_scale, b_scale, m_indptr, out, a_view, b_view, stream)
    return out


def _indptr_from_lens(seg_lens):
    """[0, cumsum(seg_lens)] as int64, computed where seg_lens lives (on the device: no sync)."""
    if framework_of(seg_lens) == "torch":
        torch = sys.modules["torch"]
        indptr = torch.zeros(seg_lens.shape[0] + 1, dtype=torch.int64, device=seg_lens.device)
        torch.cumsum(seg_lens.to(torch.int64), 0, out=indptr[1:])
        return indptr
    np = sys.modules["numpy"]
    return np.concatenate([np.zeros(1, np.int64), np.cumsum(np.asarray(seg_lens, dtype=np.int64))])


class SegmentGEMMWrapper:
    """FlashInfer's segment GEMM (LoRA): ``y[seg i] = x[seg i] @ W[i]`` (or ``W[weight_indices[i]]``) on
    ignis' grouped GEMM. ``float_workspace_buffer`` is kept (FlashInfer's kernels use it; ignis' needs
    none) and ``backend`` names one of FlashInfer's ("auto", "sm80", "sm90"): one path either way."""

    def __init__(self, float_workspace_buffer, backend="auto"):
        _check_backend("ignis.SegmentGEMMWrapper", backend, _SEGMENT_BACKENDS)
        self._float_workspace_buffer = float_workspace_buffer
        self._int_workspace_buffer = None
        self.backend = backend

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer):
        self._float_workspace_buffer = float_workspace_buffer
        self._int_workspace_buffer = int_workspace_buffer

    def run(self, x, weights, batch_size, weight_column_major, out=None, seg_lens=None, seg_indptr=None,
            weight_indices=None, *, stream=None):
        """x ``[sum(seg_lens), d_in]`` float16/bfloat16; weights ``[num_weights, d_out, d_in]``
        (``weight_column_major``) or ``[num_weights, d_in, d_out]``, x's dtype; ``batch_size`` segments
        given by ``seg_indptr`` ``[batch_size + 1]`` or ``seg_lens`` ``[batch_size]`` (int32/int64;
        seg_indptr wins when both are given, as in FlashInfer); ``weight_indices`` ``[batch_size]``
        or None (segment i uses weights[i]). out ``[sum(seg_lens), d_out]`` of x's dtype (allocated
        zeroed when None). Returns out."""
        fn = "ignis.SegmentGEMMWrapper.run"
        if seg_lens is None and seg_indptr is None:
            raise InvalidArgumentError("%s: either seg_lens or seg_indptr must be given" % fn)
        if str(x.dtype).replace("torch.", "").startswith("float8"):
            raise UnsupportedError("%s: x.dtype=%s is not supported: float16 or bfloat16" % (fn, x.dtype))
        if weights.ndim != 3:
            raise InvalidArgumentError("%s: weights must be 3-D, got shape %s" % (fn, tuple(weights.shape)))
        if seg_indptr is None:
            if seg_lens.shape[0] != batch_size:
                raise InvalidArgumentError("%s: seg_lens.shape=%s but batch_size=%d"
                                           % (fn, tuple(seg_lens.shape), batch_size))
            seg_indptr = _indptr_from_lens(seg_lens)
        if seg_indptr.shape[0] != batch_size + 1:
            raise InvalidArgumentError("%s: seg_indptr.shape=%s but it must be (batch_size + 1,) = (%d,)"
                                       % (fn, tuple(seg_indptr.shape), batch_size + 1))
        b = weights if weight_column_major else _transposed(weights)
        if weight_indices is None:
            if b.shape[0] < batch_size:
                raise InvalidArgumentError("%s: weights.shape[0]=%d but without weight_indices it must be at "
                                           "least batch_size=%d" % (fn, b.shape[0], batch_size))
            b = b[:batch_size]
        d_out = b.shape[1]
        if out is None:
            out = _empty(fn, x, (x.shape[0], d_out), _dtype_name(x.dtype))
            out[...] = 0
        elif tuple(out.shape) != (x.shape[0], d_out):
            raise InvalidArgumentError("%s: out.shape=%s but it must be %s"
                                       % (fn, tuple(out.shape), (x.shape[0], d_out)))
        _ext.grouped_mm(x, b, seg_indptr, weight_indices, out, stream)
        return out
