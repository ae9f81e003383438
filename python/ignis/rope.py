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
"""

from . import _ext
from ._alloc import new_output

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
