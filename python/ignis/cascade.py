"""Merging attention states, with FlashInfer's names and arguments (flashinfer.cascade).

A state is ``(v, s)``: ``v`` ``[seq_len, num_heads, head_dim]`` (f16, bf16 or f32), the attention
output over a set of keys, and ``s`` ``[seq_len, num_heads]`` float32, the log-sum-exp of the
scores. ``lse_base`` says which logarithm ``s`` uses: ``"2"`` (default, also spelled ``"log2"``;
FlashInfer's kernels return log2 of the sum of exp2) or ``"ln"`` (FlashAttention, PyTorch). Empty states
(``s = -inf``) contribute nothing; merging only empty states gives ``v = 0, s = -inf``. Leading
dimensions may have any strides; ``v``'s last dimension must be contiguous. Every op takes a
keyword-only ``stream=``.

Cascade (shared-prefix) attention is composed from the prefill / decode wrappers and these merges,
as FlashInfer composes it: ``MultiLevelCascadeAttentionWrapper`` runs one paged prefill per level
(the causal mask and a custom mask only on the last level) and merges each level's ``(out, lse)``
into the first's; ``BatchDecodeWithSharedPrefixPagedKVCacheWrapper`` and
``BatchPrefillWithSharedPrefixPagedKVCacheWrapper`` attend the shared prefix once for every query
(single prefill, not causal) and merge it with each request's unique suffix (batch decode /
prefill). On CUDA each level runs in its own equal slice of the workspace buffer (its split
partials; the schedules live in the plans). All three take FlashInfer 0.7.2's arguments in its order (ignis'
extras by keyword only); with ``use_cuda_graph=True`` level i's prefill wrapper gets buffer i of
each ``*_buf_arr`` (its CUDA-graph buffers, see ignis.prefill), as in FlashInfer.

Options. The levels of a cascade, and the two parts of a shared-prefix wrapper, attend with the
same options, and each merge takes the LSEs in the base they were written in:

- ``MultiLevelCascadeAttentionWrapper``: ``plan``'s, on every level (``causal`` and the custom
  masks on the last). ``run`` takes only q and the cache, as FlashInfer's; each level writes its
  own ``(out, lse)``.
- ``BatchDecodeWithSharedPrefixPagedKVCacheWrapper``: ``begin_forward``'s (FlashInfer's takes only
  ``data_type``; ignis' also any keyword of BatchDecodeWithPagedKVCacheWrapper.plan). ``forward``
  takes only the operands, as FlashInfer's, and its shared part reads the decode wrapper's
  ``_sm_scale`` and rope values, as FlashInfer's does, and its ``_logits_soft_cap``.
- ``BatchPrefillWithSharedPrefixPagedKVCacheWrapper``: each ``forward``'s (``causal`` on the unique
  part only), which the paged wrapper's ``forward_return_lse`` applies to the unique part
  (re-planning when they change), with ``begin_forward``'s other keywords; ``begin_forward``
  refuses those ``forward`` sets on every call.

Refused (UnsupportedError), because a query's position is lost: ``pos_encoding_mode`` other than
"NONE" and a window (``window_left`` >= 0), on the shared-prefix wrappers (a query sits past the
prefix by its request's own length, which the shared part, one single prefill for the whole
batch, cannot place; FlashInfer's take neither) and on a cascade of more than one level (each
level places its queries by its own lengths, level 0 holding every query as one request;
FlashInfer's attends with those wrong positions).
"""

from . import _ext
from ._alloc import new_output
from ._common import bool_as_u8, byte_workspace, lse_base_code, on_cuda
from ._errors import InvalidArgumentError, UnsupportedError

__all__ = ["merge_state", "merge_state_in_place", "merge_states", "MultiLevelCascadeAttentionWrapper",
           "BatchDecodeWithSharedPrefixPagedKVCacheWrapper", "BatchPrefillWithSharedPrefixPagedKVCacheWrapper"]


def merge_state(v_a, s_a, v_b, s_b, *, lse_base="2", stream=None):
    """Merge two states: returns ``(v, s)`` with ``s = log(base**s_a + base**s_b)`` and
    ``v = base**(s_a - s) * v_a + base**(s_b - s) * v_b``, allocated like ``v_a`` / ``s_a``."""
    base = lse_base_code("ignis.merge_state", lse_base)
    v_out, finish_v = new_output(v_a)
    s_out, finish_s = new_output(s_a)
    _ext.merge_state(v_a, s_a, v_b, s_b, base, v_out, s_out, stream)
    return finish_v(v_out), finish_s(s_out)


def merge_state_in_place(v, s, v_other, s_other, mask=None, *, lse_base="2", stream=None):
    """Merge ``(v_other, s_other)`` into ``(v, s)`` in place, for the rows where ``mask``
    (``[seq_len]`` bool, as FlashInfer takes it, or uint8; optional) is nonzero. Returns None."""
    base = lse_base_code("ignis.merge_state_in_place", lse_base)
    _ext.merge_state_in_place(v, s, v_other, s_other, bool_as_u8(mask), base, stream)


def merge_states(v, s, *, lse_base="2", stream=None):
    """Merge ``num_states`` states per row: ``v`` ``[seq_len, num_states, num_heads, head_dim]``,
    ``s`` ``[seq_len, num_states, num_heads]``; returns ``(v, s)`` of shapes
    ``[seq_len, num_heads, head_dim]`` and ``[seq_len, num_heads]``."""
    base = lse_base_code("ignis.merge_states", lse_base)
    v_out, finish_v = new_output(v[:, 0])
    s_out, finish_s = new_output(s[:, 0])
    _ext.merge_states(v, s, base, v_out, s_out, stream)
    return finish_v(v_out), finish_s(s_out)


_SHARED_POSITIONS = ("a query sits past the shared prefix by its request's own length, which the shared part (one "
                     "single prefill for the batch) cannot place")
_LEVEL_POSITIONS = ("each level places its queries by its own lengths (level 0 holds every query as one request), "
                    "so all but the last level would attend with wrong positions")


def _refuse_positions(fn, pos_encoding_mode, window_left, why):
    """UnsupportedError naming pos_encoding_mode (other than "NONE") and window_left (a window,
    >= 0) when given: `why` says why the positions are lost."""
    given = []
    if pos_encoding_mode != "NONE":
        given.append("pos_encoding_mode=%r" % (pos_encoding_mode,))
    if window_left is not None and window_left >= 0:
        given.append("window_left=%r" % (window_left,))
    if given:
        raise UnsupportedError("%s: %s given, but %s" % (fn, " and ".join(given), why))


def _level_workspaces(buffer, levels):
    """Equal 256-byte slices of a CUDA workspace, one a level (the whole host buffer, unused, on
    the CPU)."""
    if buffer is None or not hasattr(buffer, "__dlpack_device__") or not on_cuda(buffer):
        return [buffer] * levels
    flat = byte_workspace(buffer).reshape(-1)
    size = flat.shape[0] // levels // 256 * 256
    return [flat[i * size:(i + 1) * size] for i in range(levels)]


def _per_level(fn, levels, arrays):
    """The entries of `arrays` (name -> a list of one per level, or None) level by level: a tuple
    per level, None for the lists not given; a list of another length raises."""
    for name, array in arrays.items():
        if array is not None and len(array) != levels:
            raise InvalidArgumentError("%s: %s has %d entries but there are %d levels" % (fn, name, len(array), levels))
    return [tuple(None if array is None else array[i] for array in arrays.values()) for i in range(levels)]


class MultiLevelCascadeAttentionWrapper:
    """Attention over ``num_levels`` paged KV levels (level 0 the most shared), merged by LSE.
    With ``use_cuda_graph=True`` the four ``*_buf_arr`` lists (one buffer per level each) are
    required; level i's prefill wrapper copies its plans into buffer i of each."""

    def __init__(self, num_levels, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
                 qo_indptr_buf_arr=None, paged_kv_indptr_buf_arr=None, paged_kv_indices_buf_arr=None,
                 paged_kv_last_page_len_buf_arr=None):
        from .prefill import BatchPrefillWithPagedKVCacheWrapper

        fn = "ignis.MultiLevelCascadeAttentionWrapper"
        arrays = {"qo_indptr_buf_arr": qo_indptr_buf_arr, "paged_kv_indptr_buf_arr": paged_kv_indptr_buf_arr,
                  "paged_kv_indices_buf_arr": paged_kv_indices_buf_arr,
                  "paged_kv_last_page_len_buf_arr": paged_kv_last_page_len_buf_arr}
        missing = [name for name, array in arrays.items() if array is None]
        if use_cuda_graph and missing:
            raise InvalidArgumentError("%s: use_cuda_graph=True needs %s" % (fn, ", ".join(missing)))
        self._use_cuda_graph = bool(use_cuda_graph)
        self._wrappers = [
            BatchPrefillWithPagedKVCacheWrapper(buffer, kv_layout, use_cuda_graph, qo_indptr_buf=qo_indptr_buf,
                                                paged_kv_indptr_buf=paged_kv_indptr_buf,
                                                paged_kv_indices_buf=paged_kv_indices_buf,
                                                paged_kv_last_page_len_buf=paged_kv_last_page_len_buf)
            for buffer, (qo_indptr_buf, paged_kv_indptr_buf, paged_kv_indices_buf, paged_kv_last_page_len_buf)
            in zip(_level_workspaces(float_workspace_buffer, num_levels), _per_level(fn, num_levels, arrays))]

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffers=None):
        for wrapper, buffer in zip(self._wrappers, _level_workspaces(float_workspace_buffer, len(self._wrappers))):
            wrapper.reset_workspace_buffer(buffer)

    def plan(self, qo_indptr_arr, paged_kv_indptr_arr, paged_kv_indices_arr, paged_kv_last_page_len, num_qo_heads,
             num_kv_heads, head_dim, page_size, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
             sm_scale=None, window_left=-1, logits_soft_cap=None, rope_scale=None, rope_theta=None,
             q_data_type="float16", kv_data_type=None, *, custom_mask=None, packed_custom_mask=None, **kwargs):
        """One plan per level: ``qo_indptr_arr[i]`` groups the queries sharing level i's entries of
        the paged cache (``paged_kv_*_arr[i]``, ``paged_kv_last_page_len[i]``). ``causal`` applies
        to the last level, as do the ignis extensions ``custom_mask`` / ``packed_custom_mask``
        (keyword-only); the other arguments, and any further keyword of
        BatchPrefillWithPagedKVCacheWrapper.plan, to every level. With more than one level a
        position encoding or a window is refused (see the module docstring)."""
        fn = "ignis.MultiLevelCascadeAttentionWrapper.plan"
        if len(self._wrappers) > 1:
            _refuse_positions(fn, pos_encoding_mode, window_left, _LEVEL_POSITIONS)
        levels = _per_level(fn, len(self._wrappers), {
            "qo_indptr_arr": qo_indptr_arr, "paged_kv_indptr_arr": paged_kv_indptr_arr,
            "paged_kv_indices_arr": paged_kv_indices_arr, "paged_kv_last_page_len": paged_kv_last_page_len})
        last = len(self._wrappers) - 1
        for i, (wrapper, level) in enumerate(zip(self._wrappers, levels)):
            wrapper.plan(*level, num_qo_heads, num_kv_heads, head_dim, page_size,
                         custom_mask=custom_mask if i == last else None,
                         packed_custom_mask=packed_custom_mask if i == last else None,
                         causal=causal if i == last else False, pos_encoding_mode=pos_encoding_mode,
                         use_fp16_qk_reduction=use_fp16_qk_reduction, sm_scale=sm_scale, window_left=window_left,
                         logits_soft_cap=logits_soft_cap, rope_scale=rope_scale, rope_theta=rope_theta,
                         q_data_type=q_data_type, kv_data_type=kv_data_type, **kwargs)

    begin_forward = plan

    def run(self, q, paged_kv_cache, *, stream=None):
        """``out`` of the cascade (like q). FlashInfer's run takes only q and the cache: each level
        writes its own ``(out, lse)`` (LSE base 2 whatever the plans' ``lse_base``), merged into
        level 0's."""
        out, lse = self._wrappers[0].run(q, paged_kv_cache, return_lse=True, stream=stream)
        for wrapper in self._wrappers[1:]:
            out_i, lse_i = wrapper.run(q, paged_kv_cache, return_lse=True, stream=stream)
            merge_state_in_place(out, lse, out_i, lse_i, stream=stream)
        return out

    forward = run


class BatchDecodeWithSharedPrefixPagedKVCacheWrapper:
    """Decode with a prefix shared by the whole batch (contiguous ``k_shared`` / ``v_shared``) and a
    paged unique suffix per request; ``begin_forward``'s options apply to both."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD"):
        from .decode import BatchDecodeWithPagedKVCacheWrapper

        self._kv_layout = kv_layout
        self._decode = BatchDecodeWithPagedKVCacheWrapper(float_workspace_buffer, kv_layout)

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer=None):
        self._decode.reset_workspace_buffer(float_workspace_buffer)

    def begin_forward(self, unique_kv_indptr, unique_kv_indices, unique_kv_last_page_len, num_qo_heads, num_kv_heads,
                      head_dim, page_size, data_type="float16", **kwargs):
        """Plan the unique part: FlashInfer's arguments, and by keyword any other of
        BatchDecodeWithPagedKVCacheWrapper.plan's (``sm_scale``, ``logits_soft_cap``,
        ``q_len_per_req``, ``lse_base``, ...; a position encoding or a window is refused)."""
        _refuse_positions("ignis.BatchDecodeWithSharedPrefixPagedKVCacheWrapper.begin_forward",
                          kwargs.get("pos_encoding_mode", "NONE"), kwargs.get("window_left", -1), _SHARED_POSITIONS)
        self._decode.plan(unique_kv_indptr, unique_kv_indices, unique_kv_last_page_len, num_qo_heads, num_kv_heads,
                          head_dim, page_size, data_type=data_type, **kwargs)

    plan = begin_forward

    def forward(self, q, k_shared, v_shared, unique_kv_cache, *, stream=None):
        """``q`` ``[batch * q_len_per_req, num_qo_heads, head_dim]``: every token sees all of the
        shared prefix and its own unique keys, with the decode wrapper's options (plan's, or the
        FlashInfer attributes written since) on both."""
        decode = self._decode
        _refuse_positions("ignis.BatchDecodeWithSharedPrefixPagedKVCacheWrapper.forward", decode._pos_encoding_mode,
                          decode._window_left, _SHARED_POSITIONS)
        unique = decode.run(q, unique_kv_cache, return_lse=True, stream=stream)
        return _with_shared_prefix(q, k_shared, v_shared, self._kv_layout, unique, decode._lse_base, stream,
                                   sm_scale=decode._sm_scale, logits_soft_cap=decode._logits_soft_cap or None,
                                   rope_scale=decode._rope_scale, rope_theta=decode._rope_theta)

    run = forward


_FORWARD_OPTIONS = ("causal", "use_fp16_qk_reduction", "sm_scale", "rope_scale", "rope_theta")


class BatchPrefillWithSharedPrefixPagedKVCacheWrapper:
    """Prefill with a prefix shared by the whole batch and a paged unique suffix per request; each
    ``forward``'s options apply to both."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD"):
        from .prefill import BatchPrefillWithPagedKVCacheWrapper

        self._kv_layout = kv_layout
        self._prefill = BatchPrefillWithPagedKVCacheWrapper(float_workspace_buffer, kv_layout)
        self._logits_soft_cap = None

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer=None):
        self._prefill.reset_workspace_buffer(float_workspace_buffer)

    def begin_forward(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
                      num_kv_heads, head_dim, page_size, **kwargs):
        """Plan the unique part: FlashInfer's arguments, and by keyword any other of
        BatchPrefillWithPagedKVCacheWrapper.plan's (``logits_soft_cap``, ``q_data_type``, ...) but
        those ``forward`` sets on every call (``causal``, ``use_fp16_qk_reduction``, ``sm_scale``,
        ``rope_scale``, ``rope_theta``) and a position encoding or a window (refused)."""
        fn = "ignis.BatchPrefillWithSharedPrefixPagedKVCacheWrapper.begin_forward"
        given = [name for name in _FORWARD_OPTIONS if name in kwargs]
        if given:
            raise UnsupportedError("%s: %s given, but forward's arguments set them on every call, as in FlashInfer: "
                                   "pass them to forward" % (fn, ", ".join(given)))
        _refuse_positions(fn, kwargs.get("pos_encoding_mode", "NONE"), kwargs.get("window_left", -1),
                          _SHARED_POSITIONS)
        self._prefill.plan(qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
                           num_kv_heads, head_dim, page_size, **kwargs)
        self._logits_soft_cap = kwargs.get("logits_soft_cap")

    plan = begin_forward

    def forward(self, q, k_shared, v_shared, unique_kv_cache, causal=False, use_fp16_qk_reduction=False,
                sm_scale=None, rope_scale=None, rope_theta=None, *, stream=None):
        """Every query sees the whole shared prefix (no mask) and its request's unique keys (causal
        when asked), both with these options and begin_forward's ``logits_soft_cap``; the unique
        part goes through the paged wrapper's ``forward_return_lse``, which re-plans when they
        differ from the plan's."""
        options = dict(use_fp16_qk_reduction=use_fp16_qk_reduction, sm_scale=sm_scale,
                       logits_soft_cap=self._logits_soft_cap, rope_scale=rope_scale, rope_theta=rope_theta)
        unique = self._prefill.forward_return_lse(q, unique_kv_cache, causal=causal, stream=stream, **options)
        return _with_shared_prefix(q, k_shared, v_shared, self._kv_layout, unique, "2", stream, **options)

    run = forward


def _with_shared_prefix(q, k_shared, v_shared, kv_layout, unique, lse_base, stream, **options):
    """Attention of q over a prefix every query sees (contiguous k_shared / v_shared, no mask; single
    prefill with `options`, those the unique part attended with) merged with `unique`, q's
    ``(out, lse)`` over its request's own keys (LSE base `lse_base`)."""
    from .prefill import single_prefill_with_kv_cache

    out, lse = single_prefill_with_kv_cache(q, k_shared, v_shared, kv_layout=kv_layout, return_lse=True,
                                            lse_base=lse_base, stream=stream, **options)
    merge_state_in_place(out, lse, *unique, lse_base=lse_base, stream=stream)
    return out
