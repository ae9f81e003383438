"""Rotary position embedding with FlashInfer's names and arguments (flashinfer.rope).

q ``[nnz, num_q_heads, head_dim]`` and k ``[nnz, num_k_heads, head_dim]`` (GQA: head counts may
differ); token and head strides may be anything, the last dimension must be contiguous; dtypes
f16, bf16 or f32, q and k the same; head_dim up to 512; arithmetic in f32. The first
``rotary_dim`` (default head_dim) dimensions of each head are rotated, the rest copied. Pairs are
``(i, i + rotary_dim/2)`` (NeoX/Llama, ``interleave=False``) or ``(2i, 2i+1)`` (GPT-J,
``interleave=True``); pair i at position p turns by ``p * rope_theta**(-2i/rotary_dim) / rope_scale``
(the llama31 forms blend the scaled and unscaled frequencies as Llama 3.1 does).

Positions come from ``indptr [B+1]`` and ``offsets [B]`` (token t of request b sits at
``offsets[b] + t - indptr[b]``), from ``pos_ids [nnz]``, or, in the cos/sin-cache form, from
``positions [nnz]`` indexing rows of ``cos_sin_cache``. Index tensors are i32 or i64.

The plain forms return new ``(q_rope, k_rope)`` allocated in q's and k's framework; the
``_inplace`` forms rotate q and k in place and return None. Every op takes a keyword-only
``stream=`` (see :mod:`ignis.norm`).

RoPE fused with fp8 quantization (``rope_quantize_fp8``, ``mla_rope_quantize_fp8``,
``rope_quantize_fp8_append_paged_kv_cache``; include/ignis/rope.h has the contract): q and k come
split into their rotary (``*_rope``, rope_dim) and other (``*_nope``) parts, f16 or bf16; k is
``[nnz, num_kv_heads, dim]`` (GQA/MHA) or ``[nnz, dim]`` (MLA). The rope parts are rotated by the
row ``pos_ids[t]`` of ``cos_sin_cache [max_pos, rope_dim]`` f32 (cos first half, sin second half;
NeoX or interleaved pairs), then every value is ``fp8(sat(v * scale))`` with ``quant_scale_q`` for
q and ``quant_scale_kv`` for k and v (the scale multiplies, as FlashInfer's), saturating at the
format's max, round to nearest even. ``quantize_dtype`` (``float8_e4m3fn`` or ``float8_e5m2``)
comes from the outputs given, else e4m3. A nope part given as None has width 0 (its output is
returned as an empty array). ``backend`` and ``enable_pdl`` are FlashInfer's implementation
choices, accepted: every value runs ignis' kernel. The append form writes k (and v) into a paged
fp8 cache: ``(ckv_cache, kpe_cache)`` for MLA (include/ignis/mla.h's latent cache), ``(k_cache,
v_cache)`` for GQA/MHA in ``kv_layout``; token t goes to request ``batch_indices[t]`` (negative:
padding, nothing written) at position ``positions[t]``, page
``kv_indices[kv_indptr[b] + positions[t] // page_size]``; ``page_size`` must be the caches'.
"""

from . import _ext
from ._alloc import new_output
from ._common import _fp8_numpy_view, layout_code
from ._errors import DtypeError, InvalidArgumentError
from .quantization import fp8_dtype_name, new_fp8

__all__ = [
    "apply_rope",
    "apply_rope_inplace",
    "apply_rope_pos_ids",
    "apply_rope_pos_ids_inplace",
    "apply_llama31_rope",
    "apply_llama31_rope_inplace",
    "apply_llama31_rope_pos_ids",
    "apply_llama31_rope_pos_ids_inplace",
    "apply_rope_with_cos_sin_cache",
    "apply_rope_with_cos_sin_cache_inplace",
    "rope_quantize_fp8",
    "mla_rope_quantize_fp8",
    "rope_quantize_fp8_append_paged_kv_cache",
]

def _outputs(q, k):
    q_out, finish_q = new_output(q)
    k_out, finish_k = new_output(k)
    return q_out, k_out, finish_q, finish_k


def apply_rope(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4,
               *, stream=None):
    """RoPE with positions from ``indptr [B+1]`` and ``offsets [B]``. q ``[nnz, Hq, D]``,
    k ``[nnz, Hk, D]``. Not in place: returns new ``(q_rope, k_rope)``."""
    q_out, k_out, finish_q, finish_k = _outputs(q, k)
    _ext.apply_rope(q, k, indptr, offsets, q_out, k_out, rotary_dim=rotary_dim, interleave=interleave,
                    rope_scale=rope_scale, rope_theta=rope_theta, stream=stream)
    return finish_q(q_out), finish_k(k_out)


def apply_rope_inplace(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=1,
                       rope_theta=1e4, *, stream=None):
    """RoPE with positions from ``indptr [B+1]`` and ``offsets [B]``, rotating q ``[nnz, Hq, D]``
    and k ``[nnz, Hk, D]`` in place. Returns None."""
    _ext.apply_rope(q, k, indptr, offsets, q, k, rotary_dim=rotary_dim, interleave=interleave,
                    rope_scale=rope_scale, rope_theta=rope_theta, stream=stream)


def apply_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1, rope_theta=1e4,
                       *, stream=None):
    """RoPE with positions from ``pos_ids [nnz]``. q ``[nnz, Hq, D]``, k ``[nnz, Hk, D]``.
    Not in place: returns new ``(q_rope, k_rope)``."""
    q_out, k_out, finish_q, finish_k = _outputs(q, k)
    _ext.apply_rope_pos_ids(q, k, pos_ids, q_out, k_out, rotary_dim=rotary_dim, interleave=interleave,
                            rope_scale=rope_scale, rope_theta=rope_theta, stream=stream)
    return finish_q(q_out), finish_k(k_out)


def apply_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=1,
                               rope_theta=1e4, *, stream=None):
    """RoPE with positions from ``pos_ids [nnz]``, rotating q and k in place. Returns None."""
    _ext.apply_rope_pos_ids(q, k, pos_ids, q, k, rotary_dim=rotary_dim, interleave=interleave,
                            rope_scale=rope_scale, rope_theta=rope_theta, stream=stream)


def apply_llama31_rope(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=8,
                       rope_theta=5e5, low_freq_factor=1, high_freq_factor=4, old_context_len=8192,
                       *, stream=None):
    """Llama 3.1 RoPE (frequencies scaled by ``rope_scale`` below ``low_freq_factor`` wavelengths,
    kept above ``high_freq_factor``, blended between) with positions from ``indptr`` and
    ``offsets``. Not in place: returns new ``(q_rope, k_rope)``."""
    q_out, k_out, finish_q, finish_k = _outputs(q, k)
    _ext.apply_rope(q, k, indptr, offsets, q_out, k_out, rotary_dim=rotary_dim, interleave=interleave,
                    rope_scale=rope_scale, rope_theta=rope_theta, llama31=True, low_freq_factor=low_freq_factor,
                    high_freq_factor=high_freq_factor, old_context_len=old_context_len, stream=stream)
    return finish_q(q_out), finish_k(k_out)


def apply_llama31_rope_inplace(q, k, indptr, offsets, rotary_dim=None, interleave=False, rope_scale=8,
                               rope_theta=5e5, low_freq_factor=1, high_freq_factor=4,
                               old_context_len=8192, *, stream=None):
    """Llama 3.1 RoPE with positions from ``indptr`` and ``offsets``, rotating q and k in place.
    Returns None."""
    _ext.apply_rope(q, k, indptr, offsets, q, k, rotary_dim=rotary_dim, interleave=interleave,
                    rope_scale=rope_scale, rope_theta=rope_theta, llama31=True, low_freq_factor=low_freq_factor,
                    high_freq_factor=high_freq_factor, old_context_len=old_context_len, stream=stream)


def apply_llama31_rope_pos_ids(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=8,
                               rope_theta=5e5, low_freq_factor=1, high_freq_factor=4,
                               old_context_len=8192, *, stream=None):
    """Llama 3.1 RoPE with positions from ``pos_ids [nnz]``. Not in place: returns new
    ``(q_rope, k_rope)``."""
    q_out, k_out, finish_q, finish_k = _outputs(q, k)
    _ext.apply_rope_pos_ids(q, k, pos_ids, q_out, k_out, rotary_dim=rotary_dim,
                            interleave=interleave, rope_scale=rope_scale, rope_theta=rope_theta, llama31=True,
                            low_freq_factor=low_freq_factor, high_freq_factor=high_freq_factor,
                            old_context_len=old_context_len, stream=stream)
    return finish_q(q_out), finish_k(k_out)


def apply_llama31_rope_pos_ids_inplace(q, k, pos_ids, rotary_dim=None, interleave=False, rope_scale=8,
                                       rope_theta=5e5, low_freq_factor=1, high_freq_factor=4,
                                       old_context_len=8192, *, stream=None):
    """Llama 3.1 RoPE with positions from ``pos_ids [nnz]``, rotating q and k in place.
    Returns None."""
    _ext.apply_rope_pos_ids(q, k, pos_ids, q, k, rotary_dim=rotary_dim,
                            interleave=interleave, rope_scale=rope_scale, rope_theta=rope_theta, llama31=True,
                            low_freq_factor=low_freq_factor, high_freq_factor=high_freq_factor,
                            old_context_len=old_context_len, stream=stream)


def apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache, is_neox=True,
                                  *, stream=None):
    """RoPE from a precomputed cache (vLLM/SGLang form). query ``[nnz, Hq * head_size]`` or
    ``[nnz, Hq, head_size]``, key likewise; positions ``[nnz]`` (i32/i64) index rows of
    ``cos_sin_cache [max_position, rotary_dim]`` f32 (first half cos, second half sin).
    ``is_neox``: NeoX pairs (True) or GPT-J interleaved pairs (False). Not in place: returns new
    ``(query_out, key_out)``."""
    query_out, key_out, finish_q, finish_k = _outputs(query, key)
    _ext.apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache, is_neox,
                                       query_out, key_out, stream)
    return finish_q(query_out), finish_k(key_out)


def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache, is_neox=True,
                                          *, stream=None):
    """RoPE from a precomputed cache, rotating query and key in place (shapes as in
    :func:`apply_rope_with_cos_sin_cache`). Returns None."""
    _ext.apply_rope_with_cos_sin_cache(positions, query, key, head_size, cos_sin_cache, is_neox,
                                       query, key, stream)


# ---- RoPE + fp8 quantization ----------------------------------------------------------------------
_FP8_NAME = {_ext.IGNIS_FP8_E4M3: "fp8_e4m3", _ext.IGNIS_FP8_E5M2: "fp8_e5m2"}


def _quantize_name(fn, quantize_dtype, outputs):
    """FlashInfer's rule: quantize_dtype, else the dtype of the first output given, else e4m3."""
    if quantize_dtype is None:
        for out in outputs:
            if out is not None:
                quantize_dtype = out.dtype
                break
    return fp8_dtype_name(fn, "quantize_dtype", quantize_dtype)


def _fp8_views(fn, named):
    """The arrays of ``named`` ((name, array) pairs) for the extension (NumPy fp8 arrays as uint8
    views, None kept) and out_view: the one fp8 dtype those views stand for, or -1."""
    view, first = -1, None
    converted = []
    for name, a in named:
        if a is not None:
            a, code = _fp8_numpy_view(a)
            if code is not None:
                if view == -1:
                    view, first = code, name
                elif code != view:
                    raise DtypeError("%s: %s.dtype=%s but %s.dtype=%s" % (fn, name, _FP8_NAME[code], first,
                                                                          _FP8_NAME[view]))
        converted.append(a)
    return converted, view


def _int32(x):
    """An index array as int32 (FlashInfer casts batch_indices, positions and the page table)."""
    dtype = str(x.dtype)
    if dtype.endswith("int32"):
        return x
    return x.int() if hasattr(x, "int") and "torch" in dtype else x.astype("int32")


def _check_backend(fn, backend):
    if backend not in ("cuda", "cutile"):
        raise ValueError("Unsupported backend for %s: %r; expected 'cuda' or 'cutile'." % (fn, backend))


def rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox=True, quantize_dtype=None,
                      quant_scale_q=1.0, quant_scale_kv=1.0, q_rope_out=None, k_rope_out=None, q_nope_out=None,
                      k_nope_out=None, enable_pdl=False, backend="cuda", *, stream=None):
    """RoPE on ``q_rope [nnz, Hq, rope_dim]`` / ``k_rope`` (``[nnz, Hk, rope_dim]``, or ``[nnz, rope_dim]``
    for MLA) by the ``cos_sin_cache`` rows of ``pos_ids``, then fp8 quantization of the rotated parts and of
    ``q_nope`` / ``k_nope`` (None: width 0). Returns ``(q_rope_out, k_rope_out, q_nope_out, k_nope_out)``,
    fp8 arrays shaped as the inputs (allocated in q_rope's framework when not given)."""
    fn = "rope_quantize_fp8"
    _check_backend(fn, backend)
    name = _quantize_name(fn, quantize_dtype, (q_rope_out, k_rope_out, q_nope_out, k_nope_out))
    nnz, num_q_heads = q_rope.shape[0], q_rope.shape[1]
    k_lead = tuple(k_rope.shape[:-1])
    # A nope part given as None has width 0: it travels as None (the C API's "no nope part"), its output
    # too unless the caller gave one, and an empty output is returned, as FlashInfer's.
    q_nope_out_arg = q_nope_out if q_nope is not None or q_nope_out is not None else None
    k_nope_out_arg = k_nope_out if k_nope is not None or k_nope_out is not None else None
    if q_rope_out is None:
        q_rope_out = new_fp8(q_rope, tuple(q_rope.shape), name)
    if k_rope_out is None:
        k_rope_out = new_fp8(q_rope, tuple(k_rope.shape), name)
    if q_nope_out is None:
        q_nope_out = new_fp8(q_rope, (nnz, num_q_heads, 0) if q_nope is None else tuple(q_nope.shape), name)
        q_nope_out_arg = q_nope_out if q_nope is not None else None
    if k_nope_out is None:
        k_nope_out = new_fp8(q_rope, k_lead + (0,) if k_nope is None else tuple(k_nope.shape), name)
        k_nope_out_arg = k_nope_out if k_nope is not None else None
    (qro, kro, qno, kno), view = _fp8_views(fn, (("q_rope_out", q_rope_out), ("k_rope_out", k_rope_out),
                                                 ("q_nope_out", q_nope_out_arg), ("k_nope_out", k_nope_out_arg)))
    _ext.rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, bool(is_neox),
                           float(quant_scale_q), float(quant_scale_kv), qro, kro, qno, kno, view, stream)
    return q_rope_out, k_rope_out, q_nope_out, k_nope_out


def mla_rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox=True,
                          quantize_dtype=None, quant_scale_q=1.0, quant_scale_kv=1.0, q_rope_out=None,
                          k_rope_out=None, q_nope_out=None, k_nope_out=None, enable_pdl=False, *, stream=None):
    """:func:`rope_quantize_fp8` with MLA's layout (``k_rope [nnz, rope_dim]``, ``k_nope [nnz, no_rope_dim]``:
    one latent head shared by every query head). Returns ``(q_rope_out, k_rope_out, q_nope_out, k_nope_out)``."""
    return rope_quantize_fp8(q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, is_neox, quantize_dtype,
                             quant_scale_q, quant_scale_kv, q_rope_out, k_rope_out, q_nope_out, k_nope_out,
                             enable_pdl, stream=stream)


def rope_quantize_fp8_append_paged_kv_cache(q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids,
                                            paged_kv_cache, kv_indices, kv_indptr, batch_indices, positions,
                                            is_neox=True, quantize_dtype=None, quant_scale_q=1.0,
                                            quant_scale_kv=1.0, page_size=16, kv_layout="NHD", q_rope_out=None,
                                            q_nope_out=None, enable_pdl=False, *, stream=None):
    """RoPE + fp8 of q and k as :func:`rope_quantize_fp8`, with k (and v, GQA/MHA) written into the paged
    fp8 cache instead of returned: ``paged_kv_cache`` is ``(ckv_cache [pages, page_size, no_rope_dim],
    kpe_cache [pages, page_size, rope_dim])`` for MLA (2-D k, ``v=None``) or ``(k_cache, v_cache)``
    (``[pages, page_size, Hk, head_dim]`` NHD or ``[pages, Hk, page_size, head_dim]`` HND, head_dim =
    rope_dim + no_rope_dim) for GQA/MHA. Returns ``(q_rope_out, q_nope_out)``."""
    fn = "rope_quantize_fp8_append_paged_kv_cache"
    is_mla = k_rope.ndim == 2
    layout = layout_code(kv_layout)
    if len(paged_kv_cache) != 2:
        raise ValueError("paged_kv_cache must be a tuple of 2 tensors")
    cache_0, cache_1 = paged_kv_cache
    if is_mla and v is not None:
        raise ValueError("MLA should not have V input (pass None)")
    if not is_mla and v is None:
        raise ValueError("GQA/MHA expects a V tensor, but got None. Only MLA uses None for V (compressed KV "
                         "representation).")
    cache_page = cache_0.shape[1] if is_mla or layout == _ext.IGNIS_KV_LAYOUT_NHD else cache_0.shape[2]
    if page_size != cache_page:
        raise InvalidArgumentError("%s: page_size=%r but the cache holds pages of %d tokens (kv_layout %s)"
                                   % (fn, page_size, cache_page, "MLA" if is_mla else kv_layout))
    name = _quantize_name(fn, quantize_dtype, (q_rope_out, q_nope_out))
    nnz, num_q_heads = q_rope.shape[0], q_rope.shape[1]
    q_nope_out_arg = q_nope_out if q_nope is not None or q_nope_out is not None else None
    if q_rope_out is None:
        q_rope_out = new_fp8(q_rope, tuple(q_rope.shape), name)
    if q_nope_out is None:
        q_nope_out = new_fp8(q_rope, (nnz, num_q_heads, 0) if q_nope is None else tuple(q_nope.shape), name)
        q_nope_out_arg = q_nope_out if q_nope is not None else None
    (qro, qno, c0, c1), view = _fp8_views(fn, (("q_rope_out", q_rope_out), ("q_nope_out", q_nope_out_arg),
                                               ("ckv_cache" if is_mla else "k_cache", cache_0),
                                               ("kpe_cache" if is_mla else "v_cache", cache_1)))
    indices, indptr = _int32(kv_indices), _int32(kv_indptr)
    batch, pos = _int32(batch_indices), _int32(positions)
    if is_mla:
        _ext.rope_quantize_fp8_append_paged_mla_kv_cache(
            q_rope, k_rope, q_nope, k_nope, cos_sin_cache, pos_ids, batch, pos, c0, c1, indices, indptr,
            bool(is_neox), float(quant_scale_q), float(quant_scale_kv), qro, qno, view, stream)
    else:
        _ext.rope_quantize_fp8_append_paged_kv_cache(
            q_rope, k_rope, q_nope, k_nope, v, cos_sin_cache, pos_ids, batch, pos, c0, c1, indices, indptr,
            layout, bool(is_neox), float(quant_scale_q), float(quant_scale_kv), qro, qno, view, stream)
    return q_rope_out, q_nope_out
