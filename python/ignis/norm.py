"""Normalization ops with FlashInfer's names and arguments (flashinfer.norm).

Layout for all of them: ``input`` is 2-D ``[tokens, hidden]`` or 3-D ``[batch, tokens, hidden]``;
the last dimension must be contiguous, the leading ones may have any strides (row strides are
honoured, nothing is copied). dtypes: input, out and residual f16, bf16 or f32 and all the same;
weight (and LayerNorm's gemma and beta) ``[hidden]``, the input's dtype or f32. Arithmetic is f32.

Every op takes a keyword-only ``stream=`` (an int ``cudaStream_t`` or an object with
``.cuda_stream`` / ``.ptr``); by default CUDA work is launched on the current stream of the
input's framework (PyTorch, CuPy), else on the default stream. ``enable_pdl`` is accepted for
compatibility with FlashInfer: on Hopper ignis kernels always use programmatic dependent
launch (each waits for the kernel before it prior to touching memory, so it is always safe);
the environment variable ``IGNIS_DISABLE_PDL=1`` turns it off.

The fp8 forms (``rmsnorm_quant``, ``fused_add_rmsnorm_quant``, ``layernorm_quant``,
``fused_add_rmsnorm_fp8_block_quant``; FlashInfer's signatures, out first) write an fp8 ``out``
(its dtype, float8_e4m3fn or float8_e5m2, chooses the format) quantized as
``fp8(sat(value / scale))``, round to nearest even, saturating at the format's max, NaN kept; see
include/ignis/quant.h. ``scale`` is a float or a 1-element f32 array on input's device.
"""

from . import _ext
from ._alloc import new_output
from .quantization import fp8_out, scale_array

__all__ = ["rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm", "layernorm",
           "rmsnorm_quant", "fused_add_rmsnorm_quant", "layernorm_quant", "fused_add_rmsnorm_fp8_block_quant"]


def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None, *, stream=None):
    """RMSNorm: ``out = input / sqrt(mean(input**2, -1) + eps) * weight``.

    input ``[tokens, hidden]`` or ``[batch, tokens, hidden]`` (f16, bf16, f32); weight ``[hidden]``
    (input's dtype or f32). Not in place: writes ``out`` (same shape and dtype as input; allocated
    in input's framework when None; may be ``input`` itself) and returns it."""
    if out is not None:
        _ext.rmsnorm(input, weight, eps, out, stream)
        return out
    out, finish = new_output(input)
    _ext.rmsnorm(input, weight, eps, out, stream)
    return finish(out)


def gemma_rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None, *, stream=None):
    """Gemma-style RMSNorm: ``out = input / sqrt(mean(input**2, -1) + eps) * (1 + weight)``.

    Shapes, dtypes and ``out`` as in :func:`rmsnorm`. Not in place; returns ``out``."""
    if out is not None:
        _ext.gemma_rmsnorm(input, weight, eps, out, stream)
        return out
    out, finish = new_output(input)
    _ext.gemma_rmsnorm(input, weight, eps, out, stream)
    return finish(out)


def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None, *, stream=None):
    """Fused residual add and RMSNorm, in place: ``residual += input`` (summed in f32, stored in
    residual's dtype), then ``input = rmsnorm(residual)`` (normalizing the f32 sum).

    input and residual: same shape ``[tokens, hidden]`` or ``[batch, tokens, hidden]`` and dtype
    (f16, bf16, f32), not overlapping; weight ``[hidden]``. Both are written; returns None."""
    _ext.fused_add_rmsnorm(input, residual, weight, eps, stream)


def gemma_fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None, *, stream=None):
    """Gemma-style fused residual add and RMSNorm, in place: ``residual += input``, then
    ``input = residual / sqrt(mean(residual**2, -1) + eps) * (1 + weight)``.

    Shapes and dtypes as in :func:`fused_add_rmsnorm`. Returns None."""
    _ext.gemma_fused_add_rmsnorm(input, residual, weight, eps, stream)


def layernorm(input, gemma, beta, eps=1e-6, *, stream=None):
    """LayerNorm: ``(input - mean) / sqrt(var + eps) * gemma + beta`` over the last dimension
    (``gemma`` is FlashInfer's name for gamma).

    input ``[tokens, hidden]`` or ``[batch, tokens, hidden]`` (f16, bf16, f32); gemma and beta
    ``[hidden]``, both the input's dtype or both f32. Not in place: returns a new array shaped like
    input, allocated in input's framework."""
    out, finish = new_output(input)
    _ext.layernorm(input, gemma, beta, eps, out, stream)
    return finish(out)


def rmsnorm_quant(out, input, weight, scale, eps=1e-6, enable_pdl=None, *, stream=None):
    """RMSNorm then fp8: ``out = fp8(sat(rmsnorm(input) * weight / scale))`` (the norm in f32, not
    rounded to input's dtype first). out: fp8, input's shape. Returns None."""
    out, view = fp8_out(out)
    _ext.rmsnorm_quant(input, weight, scale_array(scale, input), eps, out, view, stream)


def fused_add_rmsnorm_quant(out, input, residual, weight, scale, eps=1e-6, enable_pdl=None, *, stream=None):
    """``residual += input`` (in place, f32 sum stored in residual's dtype), then
    ``out = fp8(sat(rmsnorm(residual) * weight / scale))`` of the f32 sum. input is only read.
    Returns None."""
    out, view = fp8_out(out)
    _ext.fused_add_rmsnorm_quant(input, residual, weight, scale_array(scale, input), eps, out, view, stream)


def layernorm_quant(out, input, gemma, beta, scale, eps=1e-6, *, stream=None):
    """LayerNorm then fp8: ``out = fp8(sat((layernorm(input) * gemma + beta) / scale))`` (``gemma``
    is FlashInfer's name for gamma). Returns None."""
    out, view = fp8_out(out)
    _ext.layernorm_quant(input, gemma, beta, scale_array(scale, input), eps, out, view, stream)


def fused_add_rmsnorm_fp8_block_quant(out, block_scale, normed_out, input, residual, weight, eps=1e-6,
                                      enable_pdl=None, *, group_size=128, quant_eps=1e-4, scale_ue8m0=False,
                                      stream=None):
    """``residual += input``; ``normed = rmsnorm(residual) * weight`` rounded to input's dtype and
    written to ``normed_out`` (may be None); then 1 x ``group_size`` fp8 quantization of normed into
    ``out`` with dynamic scales ``max(absmax, quant_eps) / 448`` (UE8M0 powers of two with
    ``scale_ue8m0``) in ``block_scale``. block_scale is FlashInfer's column-major TMA-aligned buffer
    ``[hidden // group_size, P]`` (P >= batch_size, FlashInfer's ``round_up(batch_size, 4)``): the
    scale of row m, group g is ``block_scale[g, m]``. input, residual, out, normed_out:
    ``[batch_size, hidden]``. Returns None."""
    rows = input.shape[0]
    out, view = fp8_out(out)
    _ext.fused_add_rmsnorm_fp8_block_quant(input, residual, weight, eps, group_size, quant_eps, bool(scale_ue8m0),
                                           out, block_scale[:, :rows].T, normed_out, view, stream)
