"""Paged KV cache ops with FlashInfer's names and arguments (flashinfer.page).

A cache is ``[num_pages, 2, page_size, num_kv_heads, head_dim]`` ("NHD") or
``[num_pages, 2, num_kv_heads, page_size, head_dim]`` ("HND") as one tensor, or a ``(k_cache,
v_cache)`` tuple of two 4-D tensors (any page/token/head strides, last dimension contiguous).
Request ``b`` owns pages ``kv_indices[kv_indptr[b]:kv_indptr[b+1]]``; its last page holds
``kv_last_page_len[b]`` tokens. Index tensors are int32 or int64 (the C ops read int32: int64 ones
are converted to an int32 copy on their device, and must hold int32 values); outputs are int32,
except ``get_seq_lens``, whose result has the promoted dtype of its inputs as in FlashInfer. On the
host every index is validated; on a CUDA device the kernels skip tokens whose indices fall outside
the cache (see include/ignis/paged_kv.h). Every op takes a keyword-only ``stream=``.
"""

from . import _ext
from ._alloc import new_array, new_output
from ._common import as_dtype, dtype_name, i64_as_i32, layout_code

__all__ = ["append_paged_kv_cache", "get_batch_indices_positions", "get_seq_lens"]


def append_paged_kv_cache(append_key, append_value, batch_indices, positions, paged_kv_cache, kv_indices,
                          kv_indptr, kv_last_page_len, kv_layout="NHD", *, stream=None):
    """Write ``append_key`` / ``append_value`` ``[nnz, num_kv_heads, head_dim]`` (the cache's
    dtype: f16, bf16, f32 or fp8; copied unchanged) into the cache: token ``t`` goes to request
    ``batch_indices[t]`` at position ``positions[t]`` (see :func:`get_batch_indices_positions`).
    The cache (one tensor or a (k, v) tuple) is written in place; returns None."""
    fn = "ignis.append_paged_kv_cache"
    if isinstance(paged_kv_cache, tuple):
        k_cache, v_cache = paged_kv_cache
    else:
        k_cache, v_cache = paged_kv_cache, None
    _ext.append_paged_kv_cache(append_key, append_value, i64_as_i32(fn, "batch_indices", batch_indices),
                               i64_as_i32(fn, "positions", positions), k_cache, v_cache,
                               i64_as_i32(fn, "kv_indices", kv_indices), i64_as_i32(fn, "kv_indptr", kv_indptr),
                               i64_as_i32(fn, "kv_last_page_len", kv_last_page_len), layout_code(kv_layout), stream)


def get_batch_indices_positions(append_indptr, seq_lens, nnz, batch_indices=None, positions=None, *, stream=None):
    """For the append batch ``append_indptr`` ``[B+1]`` and the lengths after the append
    ``seq_lens`` ``[B]``: returns ``(batch_indices, positions)``, int32 ``[nnz]``, where appended
    token ``j`` of request ``b`` gets ``b`` and ``seq_lens[b] - n_b + j``. Entries past the batch's
    tokens are -1 and 0, as FlashInfer leaves them. ``batch_indices`` / ``positions``: int32
    ``[nnz]`` arrays to write instead of new ones (``batch_indices`` is first filled with -1)."""
    fn = "ignis.get_batch_indices_positions"
    append_indptr = i64_as_i32(fn, "append_indptr", append_indptr)
    if batch_indices is None:
        batch_indices = new_array(append_indptr, (nnz,), "int32", fill=-1)
    else:
        batch_indices[...] = -1
    if positions is None:
        positions = new_array(append_indptr, (nnz,), "int32", fill=0)
    _ext.get_batch_indices_positions(append_indptr, i64_as_i32(fn, "seq_lens", seq_lens), batch_indices, positions,
                                     stream)
    return batch_indices, positions


def get_seq_lens(kv_indptr, kv_last_page_len, page_size, *, stream=None):
    """Sequence lengths ``(kv_indptr[b+1] - kv_indptr[b] - 1) * page_size + kv_last_page_len[b]``
    (0 for requests without pages), ``[B]``: int64 when either input is int64, else int32."""
    fn = "ignis.get_seq_lens"
    wide = dtype_name(kv_indptr) == "int64" or dtype_name(kv_last_page_len) == "int64"
    kv_last_page_len = i64_as_i32(fn, "kv_last_page_len", kv_last_page_len)
    seq_lens, finish = new_output(kv_last_page_len)
    _ext.get_seq_lens(i64_as_i32(fn, "kv_indptr", kv_indptr), kv_last_page_len, page_size, seq_lens, stream)
    seq_lens = finish(seq_lens)
    return as_dtype(seq_lens, "int64") if wide else seq_lens
