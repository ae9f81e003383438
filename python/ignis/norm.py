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
"""

from . import _ext
from ._alloc import new_output

__all__ = ["rmsnorm", "fused_add_rmsnorm", "gemma_rmsnorm", "gemma_fused_add_rmsnorm", "layernorm"]


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
