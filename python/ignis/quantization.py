"""Bit packing of boolean masks and fp8 quantization, with FlashInfer's names and arguments
(flashinfer.quantization).

fp8 quantization (include/ignis/quant.h has the full contract): ``q = fp8(sat(x * (1 / s)))``,
rounding to nearest even, saturating at the format's max (448 for e4m3, 57344 for e5m2), NaN kept
(and ignored by every absmax). ``per_token_group_quant_8bit`` (FlashInfer's name and arguments)
quantizes in groups of ``group_size`` along the last dimension with dynamic scales
``max(absmax, eps) / fp8_max``, f32, or UE8M0 powers of two (``scale_ue8m0``, as f32 values; ignis
also writes e8m0 bytes into a ``scale=`` array of uint8), row-major or column-major ("MN-major",
with ``scale_tma_aligned`` the rows padded to a multiple of 4 as DeepGEMM's
``get_col_major_tma_aligned_tensor``): the returned scale is the ``[M, K // group_size]`` view
either way. ``fp8_quantize`` (ignis' name: FlashInfer has no such op) is per-tensor quantization
with a static scale, or a dynamic one computed on the device (two passes), or per-token scales.
Outputs are allocated in the input's framework when not given (PyTorch fp8 tensors, NumPy arrays
of ml_dtypes' fp8 types), on its device.

``packbits(x, bitorder)`` packs the booleans of ``x`` (flattened; nonzero is True) into uint8,
eight to a byte, the last byte zero-padded, like ``numpy.packbits``: ``bitorder="big"`` (the
default, as FlashInfer) puts element 8n at the most significant bit of byte n, ``"little"`` at the
least significant. ``segment_packbits(x, indptr, bitorder)`` packs each segment
``x[indptr[i]:indptr[i+1]]`` on its own and returns ``(packed, indptr_new)`` with
``indptr_new[i+1] - indptr_new[i] = ceil(segment length / 8)``. Prefill custom masks use
``bitorder="little"`` (include/ignis/prefill.h). NumPy arrays are packed by NumPy, PyTorch tensors
(host or CUDA) by torch ops on their device; ``indptr`` is read on the host (a CUDA indptr is
copied: a sync, as FlashInfer's).
"""

import sys

from . import _ext
from ._alloc import framework_of, new_array
from ._common import _fp8_numpy_view, dtype_code
from ._errors import ArgumentTypeError, InvalidArgumentError, UnsupportedError

__all__ = ["packbits", "segment_packbits", "per_token_group_quant_8bit", "fp8_quantize"]

_FP8_NAMES = {_ext.IGNIS_FP8_E4M3: "float8_e4m3fn", _ext.IGNIS_FP8_E5M2: "float8_e5m2"}


def _check_order(bitorder):
    if bitorder not in ("big", "little"):
        raise InvalidArgumentError("bitorder=%r must be 'big' or 'little'" % (bitorder,))


def _is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _pack_torch(x, bitorder):
    import torch

    bits = (x.reshape(-1) != 0).to(torch.uint8)
    bits = torch.nn.functional.pad(bits, (0, (-bits.numel()) % 8)).view(-1, 8)
    weights = [1 << i for i in range(8)]
    if bitorder == "big":
        weights.reverse()
    weights = torch.tensor(weights, dtype=torch.uint8, device=bits.device)
    return (bits * weights).sum(dim=1).to(torch.uint8)


def _pack_numpy(x, bitorder):
    import numpy

    return numpy.packbits(numpy.asarray(x).reshape(-1) != 0, bitorder=bitorder)


def _as_packable(x):
    if _is_torch(x):
        return x
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(x, numpy.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        import numpy

        return numpy.from_dlpack(x)
    raise ArgumentTypeError("packbits: x must be a PyTorch tensor or an array supporting DLPack, not %s"
                            % type(x).__qualname__)


def packbits(x, bitorder="big"):
    """Pack the booleans of ``x`` into a uint8 array of ``ceil(x.size / 8)`` bytes."""
    _check_order(bitorder)
    x = _as_packable(x)
    return _pack_torch(x, bitorder) if _is_torch(x) else _pack_numpy(x, bitorder)


def segment_packbits(x, indptr, bitorder="big"):
    """Pack each segment ``x[indptr[i]:indptr[i+1]]`` separately; returns ``(packed, indptr_new)``
    (``indptr_new`` in indptr's framework, on its device)."""
    _check_order(bitorder)
    import numpy

    x = _as_packable(x)
    bounds = numpy.asarray(indptr.detach().cpu() if _is_torch(indptr) else indptr).astype(numpy.int64)
    if bounds.ndim != 1 or bounds.size < 1 or (numpy.diff(bounds) < 0).any():
        raise InvalidArgumentError("segment_packbits: indptr must be a non-empty, non-decreasing 1-D array")
    flat = x.reshape(-1)
    lengths = (numpy.diff(bounds) + 7) // 8
    new_bounds = numpy.concatenate([[0], numpy.cumsum(lengths)]).astype(numpy.int32)
    pack = _pack_torch if _is_torch(x) else _pack_numpy
    pieces = [pack(flat[int(bounds[i]):int(bounds[i + 1])], bitorder) for i in range(bounds.size - 1)]
    if _is_torch(x):
        import torch

        packed = torch.cat(pieces) if pieces else torch.empty((0,), dtype=torch.uint8, device=x.device)
        new_indptr = torch.from_numpy(new_bounds)
        if _is_torch(indptr):
            new_indptr = new_indptr.to(device=indptr.device, dtype=indptr.dtype)
        return packed, new_indptr
    packed = numpy.concatenate(pieces) if pieces else numpy.empty((0,), dtype=numpy.uint8)
    return packed, new_bounds


# ---- fp8 quantization ---------------------------------------------------------------------------
def fp8_dtype_name(fn, name, dtype):
    """"float8_e4m3fn" (None, the default) or "float8_e5m2" for a torch / ml_dtypes dtype or name."""
    if dtype is None:
        return "float8_e4m3fn"
    code = dtype_code(fn, name, dtype)
    if code not in _FP8_NAMES:
        raise UnsupportedError("%s: %s=%s is not supported: float8_e4m3fn or float8_e5m2" % (fn, name, dtype))
    return _FP8_NAMES[code]


def new_fp8(like, shape, name):
    """An uninitialized fp8 array (name: "float8_e4m3fn" / "float8_e5m2") in like's framework."""
    if framework_of(like) == "numpy":
        import ml_dtypes  # registers the fp8 dtypes with NumPy
        del ml_dtypes
    return new_array(like, shape, name)


def fp8_out(out):
    """out for the extension and its out_view: a NumPy array of ml_dtypes' fp8 goes as its uint8
    view (DLPack cannot carry it), anything else as it is (-1)."""
    out, view = _fp8_numpy_view(out)
    return out, -1 if view is None else view


def scale_array(scale, like):
    """A per-tensor scale as an array: FlashInfer passes a float or a 1-element f32 tensor."""
    if isinstance(scale, (int, float)):
        return new_array(like, (1,), "float32", fill=float(scale))
    return scale


def group_scale_array(fn, like, rows, groups, column_major, tma_aligned):
    """A [rows, groups] f32 scale view: row-major, or the transpose of [groups, rows (padded to a
    multiple of 4 when tma_aligned)] storage."""
    if tma_aligned and not column_major:
        raise InvalidArgumentError("%s: scale_tma_aligned needs column_major_scales=True" % fn)
    if not column_major:
        return new_array(like, (rows, groups), "float32")
    padded = (rows + 3) // 4 * 4 if tma_aligned else rows
    return new_array(like, (groups, padded), "float32")[:, :rows].T


def per_token_group_quant_8bit(x, group_size, eps=1e-10, dst_dtype=None, column_major_scales=False,
                               scale_tma_aligned=False, scale_ue8m0=False, backend="cutile", *, out=None,
                               scale=None, stream=None):
    """Per-token-group fp8 quantization of ``x [..., K]`` in groups of ``group_size`` (dividing K).
    Returns ``(x_q, x_s)``: x_q like x in fp8 (``dst_dtype``, e4m3 by default; int8 is not
    supported), x_s ``[..., K // group_size]`` f32 (column-major and TMA-aligned on request, 2-D
    only). ``backend`` is FlashInfer's choice of implementation; every value runs ignis' kernel.
    ``out=`` / ``scale=`` give the outputs (scale any [M, K // group_size] view: f32, or uint8 for
    e8m0 bytes with ``scale_ue8m0``)."""
    fn = "per_token_group_quant_8bit"
    name = fp8_dtype_name(fn, "dst_dtype", dst_dtype)
    shape = tuple(x.shape)
    if len(shape) == 0:
        raise InvalidArgumentError("%s: x must have at least one dimension" % fn)
    if column_major_scales and len(shape) != 2:
        raise InvalidArgumentError("%s: column_major_scales needs a 2-D x, not %d-D" % (fn, len(shape)))
    if not isinstance(group_size, int) or group_size < 1 or shape[-1] % group_size:
        raise InvalidArgumentError("%s: group_size=%r must be a positive int dividing x.shape[-1]=%d"
                                   % (fn, group_size, shape[-1]))
    rows = 1
    for d in shape[:-1]:
        rows *= d
    groups = shape[-1] // group_size
    x2 = x.reshape(rows, shape[-1])
    if out is None:
        out = new_fp8(x, shape, name)
    if scale is None:
        scale = group_scale_array(fn, x, rows, groups, column_major_scales, scale_tma_aligned)
        result_scale = scale if len(shape) == 2 else scale.reshape(shape[:-1] + (groups,))
    else:
        result_scale = scale
    out_ext, view = fp8_out(out)
    scale2 = scale if len(shape) == 2 else scale.reshape(rows, groups)
    _ext.fp8_quantize_per_token_group(x2, group_size, eps, bool(scale_ue8m0), out_ext.reshape(rows, shape[-1]),
                                      scale2, view, stream)
    return out, result_scale


def fp8_quantize(input, scale=None, *, per_token=False, dtype=None, eps=1e-10, out=None, stream=None):
    """Per-tensor or per-token fp8 quantization of ``input`` (1-D to 3-D; per token: 2-D).

    - ``scale`` given (a float or a 1-element f32 array): static, ``out = fp8(sat(input / scale))``;
    - ``scale`` None: dynamic, ``scale = max(absmax(input), eps) / fp8_max`` computed on the device
      (two passes over input), or one such scale per row with ``per_token``.
    Returns ``(out, scale)``; out fp8 (``dtype``, e4m3 by default) shaped like input, scale f32 of
    shape (1,) or (rows, 1) per token."""
    fn = "fp8_quantize"
    name = fp8_dtype_name(fn, "dtype", dtype)
    if out is None:
        out = new_fp8(input, tuple(input.shape), name)
    out_ext, view = fp8_out(out)
    if scale is not None:
        if per_token:
            raise InvalidArgumentError("%s: per_token quantization computes its scales: pass scale=None" % fn)
        scale = scale_array(scale, input)
        _ext.fp8_quantize(input, scale, out_ext, view, stream)
        return out, scale
    if per_token:
        scale = new_array(input, (input.shape[0], 1), "float32")
        _ext.fp8_quantize_per_token(input, eps, out_ext, scale, view, stream)
        return out, scale
    scale = new_array(input, (1,), "float32")
    _ext.fp8_quantize_dynamic(input, eps, out_ext, scale, view, stream)
    return out, scale
