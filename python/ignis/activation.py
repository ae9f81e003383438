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

fp8 forms of silu_and_mul (ignis' names: FlashInfer has none; vLLM and SGLang fuse the same way):
``silu_and_mul_quant`` with a per-tensor scale, ``out = fp8(sat(silu(a) * b / scale))``, and
``silu_and_mul_quant_per_token_group`` with 1 x group_size dynamic scales, whose arguments and
scale layouts are those of :func:`ignis.per_token_group_quant_8bit`. The product is quantized in
f32 (include/ignis/quant.h); input is 2-D for the group form.
"""

from . import _ext
from ._alloc import new_output
from .quantization import fp8_dtype_name, fp8_out, group_scale_array, new_fp8, scale_array

__all__ = ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul", "silu_and_mul_quant",
           "silu_and_mul_quant_per_token_group"]


def _half_shape(input):
    shape = tuple(input.shape)
    return shape[:-1] + (shape[-1] // 2,)


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


def silu_and_mul_quant(input, scale, out=None, dst_dtype=None, *, stream=None):
    """``out = fp8(sat(silu(a) * b / scale))``: input ``[..., 2H]``, scale a float or 1-element f32
    array, out fp8 ``[..., H]`` (``dst_dtype``, e4m3 by default, allocated when None). Returns out."""
    if out is None:
        out = new_fp8(input, _half_shape(input), fp8_dtype_name("silu_and_mul_quant", "dst_dtype", dst_dtype))
    out_ext, view = fp8_out(out)
    _ext.silu_and_mul_quant(input, scale_array(scale, input), out_ext, view, stream)
    return out


def silu_and_mul_quant_per_token_group(input, group_size=128, eps=1e-10, dst_dtype=None, column_major_scales=False,
                                       scale_tma_aligned=False, scale_ue8m0=False, *, out=None, scale=None,
                                       stream=None):
    """silu(a) * b quantized in 1 x ``group_size`` groups of out's rows: input ``[M, 2H]``; returns
    ``(out, scale)``, out fp8 ``[M, H]``, scale ``[M, H // group_size]`` f32 (layouts and ``scale=``
    as in :func:`ignis.per_token_group_quant_8bit`)."""
    fn = "silu_and_mul_quant_per_token_group"
    name = fp8_dtype_name(fn, "dst_dtype", dst_dtype)
    rows, hidden = _half_shape(input)
    if out is None:
        out = new_fp8(input, (rows, hidden), name)
    if scale is None:
        scale = group_scale_array(fn, input, rows, hidden // group_size if group_size else 0, column_major_scales,
                                  scale_tma_aligned)
    out_ext, view = fp8_out(out)
    _ext.silu_and_mul_quant_per_token_group(input, group_size, eps, bool(scale_ue8m0), out_ext, scale, view, stream)
    return out, scale
