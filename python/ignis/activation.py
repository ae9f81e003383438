"""Gated activations with FlashInfer's names and arguments (flashinfer.activation).

``input [..., 2H] -> out [..., H]``: the first half of the last dimension goes through the
activation and is multiplied by the second half, ``out = act(input[..., :H]) * input[..., H:]``.
input and out are 1-D to 3-D with the same leading shape (any strides there), the last dimension
contiguous; dtypes f16, bf16 or f32, the same for both; arithmetic in f32. Not in place: out must
not overlap input. When ``out`` is None it is allocated in input's framework.

Every op takes a keyword-only ``stream=`` (see :mod:`ignis.norm`); ``enable_pdl`` is accepted for
compatibility with FlashInfer: on Hopper ignis kernels always use programmatic dependent
launch (each waits for the kernel before it prior to touching memory, so it is always safe);
the environment variable ``IGNIS_DISABLE_PDL=1`` turns it off.
"""

from . import _ext
from ._alloc import new_output

__all__ = ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"]


def silu_and_mul(input, out=None, enable_pdl=None, *, stream=None):
    """SwiGLU gate: ``out = silu(a) * b`` with ``silu(a) = a / (1 + exp(-a))``, where
    ``a, b = input[..., :H], input[..., H:]``. input ``[..., 2H]``, out ``[..., H]``; returns out."""
    if out is not None:
        _ext.silu_and_mul(input, out, stream)
        return out
    out, finish = new_output(input, halve_last=True)
    _ext.silu_and_mul(input, out, stream)
    return finish(out)


def gelu_and_mul(input, out=None, enable_pdl=None, *, stream=None):
    """GeGLU gate with exact GELU: ``out = gelu(a) * b``, ``gelu(a) = a/2 * (1 + erf(a/sqrt(2)))``.
    input ``[..., 2H]``, out ``[..., H]``; returns out."""
    if out is not None:
        _ext.gelu_and_mul(input, out, stream)
        return out
    out, finish = new_output(input, halve_last=True)
    _ext.gelu_and_mul(input, out, stream)
    return finish(out)


def gelu_tanh_and_mul(input, out=None, enable_pdl=None, *, stream=None):
    """GeGLU gate with tanh-approximated GELU: ``out = gelu_tanh(a) * b``,
    ``gelu_tanh(a) = a/2 * (1 + tanh(sqrt(2/pi) * (a + 0.044715 a**3)))``.
    input ``[..., 2H]``, out ``[..., H]``; returns out."""
    if out is not None:
        _ext.gelu_tanh_and_mul(input, out, stream)
        return out
    out, finish = new_output(input, halve_last=True)
    _ext.gelu_tanh_and_mul(input, out, stream)
    return finish(out)
