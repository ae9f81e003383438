"""Prefill attention with FlashInfer's names and arguments (flashinfer.prefill).

``single_prefill_with_kv_cache``: ``q`` ``[qo_len, num_qo_heads, head_dim_qk]`` against contiguous
``k`` / ``v`` (``[kv_len, num_kv_heads, head_dim]`` "NHD" or ``[num_kv_heads, kv_len, head_dim]``
"HND"). ``BatchPrefillWithRaggedKVCacheWrapper``: ragged q / k / v described by ``qo_indptr`` and
``kv_indptr``. ``BatchPrefillWithPagedKVCacheWrapper``: ``qo_indptr`` and the paged cache of
decode; ``BatchAttentionWithAttentionSinkWrapper`` is the paged wrapper whose ``run`` takes
per-head sinks and the softmax scale positionally (FlashInfer's JIT variant of it). The batch
wrappers split into ``plan`` (host metadata; the schedule goes into the plan's own device memory,
and the caller's workspace buffer holds only what a run splits) and ``run``, as FlashInfer's do, with FlashInfer 0.7.2's parameters, order and defaults.

The math is the header comment of include/ignis/prefill.h: query token i of a request with
qo_len q and kv_len k sits at position k - q + i; ``causal=True`` lets it see keys up to there;
``custom_mask`` (booleans ``[qo_len, kv_len]`` per request, flattened and concatenated, as
FlashInfer) or ``packed_custom_mask`` (the same, bit-packed per request with
``segment_packbits(..., bitorder="little")``) choose the keys instead; ``window_left``,
``logits_soft_cap``, ``sm_scale``, ``pos_encoding_mode`` ("NONE", "ROPE_LLAMA", "ALIBI"),
``rope_scale`` / ``rope_theta``, per-head ``sinks``, ``k_scale`` / ``v_scale`` (numbers; ``q_scale``
/ ``scale_q`` folds into the key scale) are as in decode. A token that sees no key gets out = 0 and
lse = -inf. q f16 / bf16; K/V q's dtype or fp8; out q's dtype (``o_data_type`` / ``o_dtype`` equal
to it accepted, another one UnsupportedError); head dims (64, 64), (128, 128), (256, 256), (512, 512)
and (192, 128) (``head_dim_vo``; ragged and single prefill).

LSE: ``run``'s ``lse_base`` is FlashInfer's, "log2" (default) or "ln"; ``lse_layout`` "NH"
(``[tokens, heads]``) or "HN" (its contiguous transpose, written to a separate array). The plans
also take ignis' keyword-only ``lse_base`` ("2", also spelled "log2", or "ln"): the base the kernel
writes; a run asking for the other base rescales the LSE in place (one multiply).

Plan-time options and what changes them later. The C plan fixes the mask mode, ``window_left``,
``logits_soft_cap``, the position encoding and ``sm_scale``. As FlashInfer, each wrapper keeps
the values ``plan`` was given in ``_causal, _pos_encoding_mode, _window_left, _logits_soft_cap``
(0.0 for None), ``_sm_scale`` (as given, None included), ``_rope_scale, _rope_theta``, and ``run``
attends with those; the deprecated ``forward`` / ``forward_return_lse`` set them from their
arguments (defaults included: FlashInfer's semantics) and run. ``run(window_left=)`` overrides the
window for one call. When the values a run needs differ from those the C plan was made with, the
wrapper re-plans from the host copies of the last plan's index arrays (no new arguments needed),
and remembers the change: the next ``plan`` with the same arguments plans the changed values at
once (SGLang plans with ``causal=False`` and no ``sm_scale``, then calls ``forward(causal=True,
sm_scale=...)`` for every layer: one re-plan on its first batch, none after, and none inside a
CUDA graph it captured after warm-up; a re-plan while a PyTorch CUDA graph is being captured
raises). ``sm_scale`` never re-plans: a run whose softmax scale differs from the planned one
folds the ratio into the key scale (the same logits). ``use_fp16_qk_reduction``, ``backend``,
``non_blocking`` and ``enable_pdl`` are accepted and ignored (ignis picks its kernel, reduces in
f32 and copies asynchronously); ``uniform_q_len`` is a scheduling hint ignis does not need (a
non-uniform batch drops it with a warning, as FlashInfer).

Index arrays: host or device, int32 or int64 (converted; values past int32 raise); they are read
on the host (CUDA ones are copied: a sync, as FlashInfer's plan). ``seq_lens`` / ``seq_lens_q``
(and the ragged ``v_indptr`` / ``o_indptr``) are checked against the lengths the index arrays
give, ``max_token_per_sequence`` / ``max_sequence_kv`` against the batch's maxima, and paged
``block_tables`` (``[batch, max_pages]``, FlashInfer's trtllm-gen form of the page indices)
against ``paged_kv_indices`` (a sync when either is on CUDA): InvalidArgumentError on a mismatch.
Refused (UnsupportedError naming them): multi-item scoring (``prefix_len_ptr``,
``token_pos_in_items_ptr``, ``token_pos_in_items_len``, ``max_item_len_ptr``), ``jit_args`` /
``jit_kwargs`` / ``variant_owns_mask``, ``kv_cache_sf`` (NVFP4), ``o_scale`` other than 1,
``skip_softmax_threshold_scale_factor``, ``use_fp16_softmax`` / ``uses_spcompress`` when true, and
extra positional ``run`` arguments.

CUDA graphs (``use_cuda_graph=True`` with FlashInfer's persistent buffers ``qo_indptr_buf``,
``paged_kv_indptr_buf`` / ``kv_indptr_buf``, ``paged_kv_indices_buf``,
``paged_kv_last_page_len_buf`` and, for custom masks, ``custom_mask_buf`` / ``mask_indptr_buf``):
each plan copies its index arrays (and packed mask) into them, and ``run`` reads the page indices
and the mask from them, so a captured run replays against fixed addresses; re-plan outside the
graph, then replay. As in FlashInfer the batch size is the buffers' (``len(qo_indptr_buf) - 1``)
and the query tokens at most the first plan's; ignis also bounds the keys of a request by what
``paged_kv_indices_buf`` can address (ragged with ``fixed_split_size``: the first plan's longest,
rounded up to a power of two). Without CUDA graphs the ``_..._buf`` attributes hold the last
plan's arrays on the workspace's device, as FlashInfer's do.

Plans: C plans are made per configuration and kept (a few) while later plans fit their maxima
(batch size, total query tokens, keys per request: each the largest seen rounded up to a power of
two); a batch past them re-makes one. ``workspace_size(...)`` (plan's arguments) returns
FlashInfer's ``(float_workspace_bytes, int_workspace_bytes)`` for that batch: ignis' device
workspace bytes (0 on the CPU) and 0 (ignis has no int workspace). Workspaces may be any
contiguous dtype (int8, uint8, ...): ignis reads their bytes.

Backends: host arrays run on the CPU backend, CUDA tensors on the tensor-core kernel (q, out, k and
v 16-byte aligned with strides of multiples of 16 bytes; UnsupportedError otherwise, nothing
written). Every call takes a keyword-only ``stream=``; plan and run must use the same stream.
"""

import functools
import math
import warnings

from . import _ext
from ._alloc import new_array, new_output
from ._common import (INT32_MAX, attention_dtypes, attention_options, attention_output, byte_workspace, capturing,
                      copy_index_into, dtype_code, dtype_name, fixed_split, host_i32, host_numpy, is_cuda, kv_views,
                      layout_code, lse_base_name, nbytes_of, next_pow2, on_cuda, paged_kv_views, q_view, scales,
                      single_workspace, to_device_of)
from ._errors import InvalidArgumentError, UnsupportedError
from .quantization import packbits, segment_packbits

__all__ = ["single_prefill_with_kv_cache", "single_prefill_with_kv_cache_return_lse",
           "BatchPrefillWithRaggedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
           "BatchAttentionWithAttentionSinkWrapper"]

_LN2 = math.log(2.0)
_MAX_PLANS = 4  # C plans a wrapper keeps without CUDA graphs (configurations seen recently)
_MULTI_ITEM = "multi-item scoring (FlashInfer's item masks) is not supported"


def _mask_mode(causal, custom_mask, packed_custom_mask):
    if custom_mask is not None or packed_custom_mask is not None:
        return _ext.IGNIS_MASK_CUSTOM
    return _ext.IGNIS_MASK_CAUSAL if causal else _ext.IGNIS_MASK_NONE


def _refuse(fn, why, **named):
    """UnsupportedError naming those of `named` that were given (not None)."""
    given = [name for name, value in named.items() if value is not None]
    if given:
        raise UnsupportedError("%s: %s given, but %s" % (fn, ", ".join(given), why))


def _options_key(causal, pos_encoding_mode, window_left, logits_soft_cap, rope_scale, rope_theta):
    """The plan-time options (all but sm_scale) with FlashInfer's None defaults resolved, so that
    equal requests compare equal."""
    return (bool(causal), pos_encoding_mode, -1 if window_left is None else int(window_left),
            float(logits_soft_cap or 0.0), 1.0 if rope_scale is None else float(rope_scale),
            1e4 if rope_theta is None else float(rope_theta))


def _is_u8(x):
    return dtype_name(x) == "uint8"


def _is_device_index(x):
    """A CUDA int32 index array or uint8 mask (used in place on the device)."""
    return is_cuda(x) and dtype_name(x) in ("int32", "uint8")


def _scale_in_place(lse, factor):
    """lse * factor, in place for PyTorch, NumPy and CuPy arrays (the result otherwise)."""
    if hasattr(lse, "mul_"):
        return lse.mul_(factor)
    try:
        lse *= factor
    except TypeError:  # immutable arrays (JAX)
        return lse * factor
    return lse


def _arguments(local_names):
    """A method's arguments by name: its locals() taken before it binds any other name, less self
    (so that plan() and workspace_size() hand the same long list to one checker)."""
    arguments = dict(local_names)
    del arguments["self"]
    return arguments


def _transpose_into(dst, src):
    """Copy the transpose of 2-D src into dst."""
    if hasattr(dst, "copy_"):
        dst.copy_(src.t())
    else:
        dst[...] = src.T
    return dst


def single_prefill_with_kv_cache(q, k, v, scale_q=None, scale_k=None, scale_v=None, o_dtype=None, custom_mask=None,
                                 packed_custom_mask=None, causal=False, kv_layout="NHD", pos_encoding_mode="NONE",
                                 use_fp16_qk_reduction=False, sm_scale=None, window_left=-1, logits_soft_cap=None,
                                 rope_scale=None, rope_theta=None, backend="auto", return_lse=False, kv_cache_sf=None,
                                 k_scale=None, v_scale=None, *, sinks=None, lse_base="2", stream=None):
    """Prefill attention of one request. Returns ``out`` ``[qo_len, num_qo_heads, head_dim_vo]``
    (q's dtype), or ``(out, lse)`` with ``return_lse`` (``lse`` ``[qo_len, num_qo_heads]`` float32
    in base ``lse_base``). ``custom_mask``: booleans ``[qo_len, kv_len]``; ``packed_custom_mask``:
    their little-endian bit-packing (uint8). ``scale_q`` / ``scale_k`` / ``scale_v`` (FlashInfer's
    fp8 scales, here numbers or one-element host tensors) and ``k_scale`` / ``v_scale``
    (FlashInfer 0.7's calibration scales) multiply: the keys are ``scale_k * k_scale * K``."""
    fn = "ignis.single_prefill_with_kv_cache"
    _refuse(fn, "NVFP4 K/V is not supported", kv_cache_sf=kv_cache_sf)
    layout = layout_code(kv_layout)
    options = attention_options(fn, window_left, logits_soft_cap, sm_scale, lse_base, pos_encoding_mode, rope_scale,
                                rope_theta)
    if o_dtype is not None and str(o_dtype) != str(q.dtype):
        raise UnsupportedError("%s: o_dtype=%s but out has q's dtype (%s)" % (fn, o_dtype, q.dtype))
    k_value = v_value = None
    if scale_k is not None or scale_v is not None or scale_q is not None:
        k_value, v_value = scales(fn, scale_q, scale_k, scale_v)
    if k_scale is not None or v_scale is not None:
        k_more, v_more = scales(fn, None, k_scale, v_scale)
        k_value, v_value = (k_value or 1.0) * k_more, (v_value or 1.0) * v_more
    mode = _mask_mode(causal, custom_mask, packed_custom_mask)
    if packed_custom_mask is None and custom_mask is not None:
        packed_custom_mask = packbits(custom_mask, bitorder="little")
    k, v, kv_view = kv_views(fn, k, v, "k", "v")
    head_dim_vo = v.shape[-1]
    workspace = None
    if on_cuda(q):
        nhd = layout == _ext.IGNIS_KV_LAYOUT_NHD
        kv_len, kv_heads = (k.shape[0], k.shape[1]) if nhd else (k.shape[1], k.shape[0])
        workspace = single_workspace(q, _ext.single_prefill_workspace_size(
            q.shape[1], kv_heads, q.shape[-1], head_dim_vo, q.shape[0], kv_len))
    out, finish = new_output(q, shape=(q.shape[0], q.shape[1], head_dim_vo))
    lse = new_array(q, (q.shape[0], q.shape[1]), "float32") if return_lse else None
    _ext.single_prefill(q, k, v, out, lse=lse, workspace=workspace, custom_mask=packed_custom_mask, kv_layout=layout,
                        mask_mode=mode, options=options, k_scale=k_value, v_scale=v_value, sinks=sinks,
                        kv_view=kv_view, stream=stream)
    return (finish(out), lse) if return_lse else finish(out)


single_prefill_with_kv_cache_return_lse = functools.partial(single_prefill_with_kv_cache, return_lse=True)


class _Batch:
    """One plan() call, resolved: the host index arrays (copies) and packed mask the C plan is
    scheduled from, the configuration fields other than the options, and what re-plans need."""

    __slots__ = ("qo", "kv", "last", "indices", "page_size", "mask", "mask_indptr", "needs", "num_qo_heads",
                 "num_kv_heads", "head_dim_qk", "head_dim_vo", "q_code", "kv_code", "o_dtype",
                 "disable_split_kv", "fixed_split", "sm_scale", "sm_resolved", "lse_base", "plan_options",
                 "stream")


class _BatchPrefillWrapper:
    """What the ragged and paged wrappers share: the workspace, the persistent index buffers, the
    C plans and their maxima, the FlashInfer-visible plan options and the re-plans."""

    _kind = _ext.IGNIS_PREFILL_RAGGED
    _name = ""
    _indptr_name = "kv_indptr"  # what messages call the key indptr

    def _setup(self, float_workspace_buffer, kv_layout, use_cuda_graph, backend, jit_args, jit_kwargs,
               variant_owns_mask, buffers, required):
        fn = "ignis." + self._name
        self._layout = layout_code(kv_layout)
        self._kv_layout = kv_layout
        _refuse(fn, "FlashInfer's JIT attention variants are not supported", jit_args=jit_args,
                jit_kwargs=jit_kwargs)
        if variant_owns_mask:
            raise UnsupportedError("%s: variant_owns_mask=True needs a JIT attention variant (jit_args), which ignis "
                                   "does not support" % fn)
        self._backend = backend
        self._use_cuda_graph = bool(use_cuda_graph)
        for name, buffer in buffers.items():
            setattr(self, "_" + name, buffer)
        self._fixed_batch_size = 0
        if self._use_cuda_graph:
            missing = [name for name in required if buffers[name] is None]
            if missing:
                raise InvalidArgumentError("%s: use_cuda_graph=True needs %s" % (fn, ", ".join(missing)))
            self._fixed_batch_size = buffers["qo_indptr_buf"].shape[0] - 1
            for name in required[1:]:
                want = self._fixed_batch_size + (0 if name == "paged_kv_last_page_len_buf" else 1)
                if name != "paged_kv_indices_buf" and buffers[name].shape[0] != want:
                    raise InvalidArgumentError("%s: %s has %d entries but the batch size len(qo_indptr_buf) - 1 = %d "
                                               "needs %d" % (fn, name, buffers[name].shape[0],
                                                              self._fixed_batch_size, want))
        self._memo = {}
        self._set_workspace(float_workspace_buffer)

    def _set_workspace(self, buffer):
        self._workspace = byte_workspace(buffer)
        self._float_workspace_buffer = buffer
        self._workspace_size = nbytes_of(buffer)
        self._cuda = buffer is not None and on_cuda(buffer)
        self._plan_workspace = self._workspace if self._cuda else None  # CPU plans keep the schedule on the host
        self._plans = {}  # configuration key -> (C plan, maxima)
        self._plan = None
        self._graph_maxima = None
        self._batch = None
        self._active = None  # the options (_options_key) the current schedule was made with

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer=None):
        """Use another workspace buffer (plan again before the next run)."""
        self._set_workspace(float_workspace_buffer)

    def _device(self):
        if not self._cuda:
            return _ext.IGNIS_DEVICE_CPU, 0
        return _ext.IGNIS_DEVICE_CUDA, self._workspace.__dlpack_device__()[1]

    # ---- plan ----------------------------------------------------------------------------------
    def _resolve(self, fn, qo_indptr, kv_indptr, kv_last_page_len, page_size, num_qo_heads, num_kv_heads,
                 head_dim_qk, head_dim_vo, custom_mask, packed_custom_mask, causal, pos_encoding_mode,
                 window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta, q_data_type, kv_data_type,
                 o_data_type, prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len, max_item_len_ptr,
                 seq_lens, seq_lens_q, max_token_per_sequence, max_sequence_kv, fixed_split_size, disable_split_kv,
                 uniform_q_len, lse_base, stream):
        """Check plan()'s arguments and resolve them into a _Batch (the wrapper is not changed)."""
        _refuse(fn, _MULTI_ITEM, prefix_len_ptr=prefix_len_ptr, token_pos_in_items_ptr=token_pos_in_items_ptr,
                token_pos_in_items_len=token_pos_in_items_len or None, max_item_len_ptr=max_item_len_ptr)
        q_code, kv_code, o_dtype = attention_dtypes(fn, q_data_type, kv_data_type, o_data_type)
        head_dim_vo = head_dim_vo or head_dim_qk
        self._check_spec(fn, q_code, kv_code, head_dim_qk, head_dim_vo, pos_encoding_mode)
        b = _Batch()
        b.qo = host_i32(fn, "qo_indptr", qo_indptr).copy()
        b.kv = host_i32(fn, self._indptr_name, kv_indptr).copy()
        b.last = None if kv_last_page_len is None else host_i32(fn, "paged_kv_last_page_len", kv_last_page_len).copy()
        if b.qo.size < 1 or b.kv.size != b.qo.size or (b.last is not None and b.last.size != b.qo.size - 1):
            raise InvalidArgumentError("%s: qo_indptr has %d entries, %s %d%s: they must describe the same batch"
                                       % (fn, b.qo.size, self._indptr_name, b.kv.size,
                                          "" if b.last is None else " and paged_kv_last_page_len %d" % b.last.size))
        q_lens = b.qo[1:] - b.qo[:-1]
        lengths = b.kv[1:] - b.kv[:-1]
        if b.last is not None:
            lengths = (lengths - 1) * page_size + b.last
            lengths[b.kv[1:] == b.kv[:-1]] = 0
        for given, actual, name in ((seq_lens, lengths, "seq_lens"), (seq_lens_q, q_lens, "seq_lens_q")):
            if given is not None:
                given = host_i32(fn, name, given.reshape(-1) if hasattr(given, "reshape") else given)
                if given.shape != actual.shape or (given != actual).any():
                    raise InvalidArgumentError("%s: %s=%s disagrees with the lengths the index arrays give (%s)"
                                               % (fn, name, given.tolist(), actual.tolist()))
        longest_q = int(q_lens.max()) if q_lens.size else 0
        longest_kv = int(lengths.max()) if lengths.size else 0
        for bound, actual, name in ((max_token_per_sequence, longest_q, "max_token_per_sequence"),
                                    (max_sequence_kv, longest_kv, "max_sequence_kv")):
            if bound is not None and bound < actual:
                raise InvalidArgumentError("%s: %s=%d but a request has %d" % (fn, name, bound, actual))
        if uniform_q_len is not None and (q_lens != uniform_q_len).any():
            warnings.warn("%s: uniform_q_len=%r but the batch's query lengths differ; the hint is dropped"
                          % (fn, uniform_q_len), stacklevel=3)
        b.page_size = page_size
        b.mask = packed_custom_mask
        b.mask_indptr = None
        if custom_mask is not None or packed_custom_mask is not None:
            import numpy

            bits = numpy.concatenate([[0], numpy.cumsum(q_lens.astype(numpy.int64) * lengths)])
            if packed_custom_mask is None:
                b.mask, b.mask_indptr = segment_packbits(custom_mask, bits, bitorder="little")
            else:
                b.mask_indptr = numpy.concatenate([[0], numpy.cumsum((numpy.diff(bits) + 7) // 8)]).astype(numpy.int32)
        b.needs = (b.qo.size - 1, max(1, int(b.qo[-1] - b.qo[0])), longest_kv)
        b.num_qo_heads, b.num_kv_heads = num_qo_heads, num_kv_heads
        b.head_dim_qk, b.head_dim_vo = head_dim_qk, head_dim_vo
        b.q_code, b.kv_code, b.o_dtype = q_code, kv_code, o_dtype
        if o_dtype != _ext.IGNIS_DTYPE_OF_Q and b.qo[0] != 0:
            raise UnsupportedError("%s: qo_indptr[0]=%d but with an fp8 q_data_type the batch's query rows must "
                                   "start at 0" % (fn, b.qo[0]))
        b.disable_split_kv, b.fixed_split = bool(disable_split_kv), fixed_split(fixed_split_size)
        b.sm_scale = sm_scale
        b.sm_resolved = float(sm_scale) if sm_scale is not None else 1.0 / math.sqrt(head_dim_qk)
        b.lse_base = lse_base_name(fn, lse_base)
        b.plan_options = _options_key(causal and b.mask is None, pos_encoding_mode, window_left, logits_soft_cap,
                                      rope_scale, rope_theta)
        b.stream = stream
        if self._use_cuda_graph:
            self._check_graph_batch(fn, b)
        return b

    def _check_spec(self, fn, q_code, kv_code, head_dim_qk, head_dim_vo, pos_encoding_mode):
        """Subclasses fixed at construction (the attention-sink wrapper) check plan() against it."""

    def _check_graph_batch(self, fn, b):
        """FlashInfer's CUDA-graph rules: the buffers' batch size, at most the first plan's query
        tokens; and ignis' key bound."""
        batch, tokens, longest = b.needs
        if batch != self._fixed_batch_size:
            raise InvalidArgumentError("%s: with use_cuda_graph=True the batch size is fixed by the buffers (%d), but "
                                       "this batch has %d requests" % (fn, self._fixed_batch_size, batch))
        if self._graph_maxima is not None:
            if tokens > self._graph_maxima[1]:
                raise InvalidArgumentError("%s: with use_cuda_graph=True the query tokens are bounded by the first "
                                           "plan's (%d), but this batch has %d" % (fn, self._graph_maxima[1], tokens))
            if longest > self._graph_maxima[2]:
                raise InvalidArgumentError("%s: with use_cuda_graph=True a request has %d keys but the plan holds at "
                                           "most %d" % (fn, longest, self._graph_maxima[2]))
        if b.mask is not None:
            if self._custom_mask_buf is None or self._mask_indptr_buf is None:
                raise InvalidArgumentError("%s: a custom mask with use_cuda_graph=True needs custom_mask_buf and "
                                           "mask_indptr_buf" % fn)
            if b.mask.shape[0] > self._custom_mask_buf.shape[0] or self._mask_indptr_buf.shape[0] != batch + 1:
                raise InvalidArgumentError("%s: the packed mask has %d bytes and %d offsets but custom_mask_buf "
                                           "holds %d and mask_indptr_buf %d"
                                           % (fn, b.mask.shape[0], batch + 1, self._custom_mask_buf.shape[0],
                                              self._mask_indptr_buf.shape[0]))

    def _graph_maxima_for(self, b):
        """The maxima of every C plan of a CUDA-graph wrapper, from its first batch."""
        if self._graph_maxima is not None:
            return self._graph_maxima
        if b.last is not None:  # paged: a request addresses at most the indices buffer's pages
            bound = min(INT32_MAX, max(1, self._paged_kv_indices_buf.shape[0]) * b.page_size)
        else:
            bound = next_pow2(b.needs[2], 4096) if b.fixed_split else INT32_MAX
        return (self._fixed_batch_size, b.needs[1], bound)

    def _config(self, b, mode, options):
        """ignis_prefill_plan_config by field name, but the maxima."""
        device_type, device_id = self._device()
        return dict(device_type=device_type, device_id=device_id, kv_kind=self._kind, kv_layout=self._layout,
                    num_qo_heads=b.num_qo_heads, num_kv_heads=b.num_kv_heads, head_dim_qk=b.head_dim_qk,
                    head_dim_vo=b.head_dim_vo, page_size=b.page_size, q_dtype=b.q_code, kv_dtype=b.kv_code,
                    o_dtype=b.o_dtype,
                    mask_mode=mode, disable_split_kv=b.disable_split_kv, fixed_split_size=b.fixed_split,
                    options=options)

    def _config_for(self, fn, b, opts):
        causal, pos_encoding_mode, window_left, logits_soft_cap, rope_scale, rope_theta = opts
        mode = _ext.IGNIS_MASK_CUSTOM if b.mask is not None else (
            _ext.IGNIS_MASK_CAUSAL if causal else _ext.IGNIS_MASK_NONE)
        options = attention_options(fn, window_left, logits_soft_cap or None, b.sm_scale, b.lse_base,
                                    pos_encoding_mode, rope_scale, rope_theta)
        config = self._config(b, mode, options)
        key = tuple(sorted((k, v) for k, v in config.items() if k != "options")) + tuple(sorted(options.items()))
        return config, key

    def _maxima_for(self, b, entry):
        if self._use_cuda_graph:
            return self._graph_maxima_for(b)
        old = entry[1] if entry is not None else (0, 0, 0)
        needs = b.needs
        return (max(old[0], next_pow2(needs[0], 64)), max(old[1], next_pow2(needs[1], 4096)),
                max(old[2], next_pow2(needs[2], 4096)))

    def _schedule(self, fn, b, opts, stream):
        """Make (or reuse) the C plan for batch b with options opts, and schedule b into it."""
        config, key = self._config_for(fn, b, opts)
        entry = self._plans.get(key)
        if entry is None or any(n > m for n, m in zip(b.needs, entry[1])):
            maxima = self._maxima_for(b, entry)
            plan = _ext.prefill_plan_create(max_batch_size=maxima[0], max_qo_tokens=maxima[1],
                                            max_kv_len=maxima[2], **config)
            if entry is None and not self._use_cuda_graph and len(self._plans) >= _MAX_PLANS:
                del self._plans[next(iter(self._plans))]
            entry = self._plans[key] = (plan, maxima)
        self._active = None
        _ext.prefill_plan_update(entry[0], b.qo, b.kv, b.last, self._plan_workspace, stream)
        self._plan = entry[0]
        if self._use_cuda_graph and self._graph_maxima is None:
            self._graph_maxima = entry[1]
        self._active = opts

    def _commit(self, fn, b, causal, pos_encoding_mode, use_fp16_qk_reduction, window_left, logits_soft_cap,
                sm_scale, rope_scale, rope_theta):
        """Schedule a resolved plan() (with the options a later run changed them to last time, if
        any) and keep what runs and re-plans need."""
        self._schedule(fn, b, self._memo.get(b.plan_options, b.plan_options), b.stream)
        self._batch = b
        self._causal = causal
        self._pos_encoding_mode = pos_encoding_mode
        self._use_fp16_qk_reduction = use_fp16_qk_reduction
        self._window_left = window_left
        self._logits_soft_cap = 0.0 if logits_soft_cap is None else logits_soft_cap
        self._sm_scale = sm_scale
        self._rope_scale = rope_scale
        self._rope_theta = rope_theta

    def _on_device(self, fn, name, x):
        """x (a host array, or a tensor) where the run reads it: the host on the CPU backend (int32
        index arrays converted), else the workspace's CUDA device (in place when already there)."""
        if not self._cuda:
            return x if _is_u8(x) else host_i32(fn, name, x)
        if _is_device_index(x):
            return x
        return to_device_of(self._workspace, x if _is_u8(x) else host_i32(fn, name, x))

    def _store(self, fn, arrays):
        """Publish the plan's arrays under FlashInfer's ``_..._buf`` names: copied into the
        persistent buffers with CUDA graphs, else the arrays themselves on the run's device.
        arrays: (name, array, whole) with whole=False for those a buffer may hold a prefix of."""
        for name, array, whole in arrays:
            if array is None:
                if not self._use_cuda_graph:
                    setattr(self, "_" + name, None)
                continue
            if not self._use_cuda_graph:
                setattr(self, "_" + name, self._on_device(fn, name, array))
                continue
            if not (self._cuda and _is_device_index(array)) and not _is_u8(array):
                array = host_i32(fn, name, array)
            copy_index_into(fn, name, getattr(self, "_" + name), array, whole)

    # ---- run -----------------------------------------------------------------------------------
    def _wanted(self, window_left):
        """The options a run now attends with (FlashInfer reads them from the wrapper)."""
        mask = self._batch.mask is not None
        return _options_key(self._causal and not mask, self._pos_encoding_mode,
                            self._window_left if window_left is None else window_left, self._logits_soft_cap,
                            self._rope_scale, self._rope_theta)

    def _replan(self, fn, opts, stream):
        """Re-schedule the last plan's batch with other options, and remember the change."""
        b = self._batch
        if capturing(self._workspace):
            raise InvalidArgumentError("%s: this run needs options other than the plan's (%r, planned %r) while a CUDA "
                                       "graph is being captured: plan() with them, or run once before capturing"
                                       % (fn, opts, self._active))
        self._schedule(fn, b, opts, b.stream if stream is None else stream)
        if len(self._memo) >= 16 and b.plan_options not in self._memo:
            self._memo.clear()
        self._memo[b.plan_options] = opts

    def _prepare(self, fn, q, args, q_scale, k_scale, v_scale, out, lse, return_lse, lse_base, lse_layout,
                 window_left, sm_scale, kv_cache_sf, stream):
        """Checks, re-plan and outputs of a run: (out, finish, lse for the kernel, lse plan, k, v
        scales) where the lse plan is (factor or None, destination for "HN" or None)."""
        if self._batch is None:
            raise InvalidArgumentError("%s: call plan first" % fn)
        if args:
            raise UnsupportedError("%s: extra positional arguments (FlashInfer's JIT variants and fp8-q scale "
                                   "tensors) are not supported" % fn)
        _refuse(fn, "NVFP4 K/V is not supported", kv_cache_sf=kv_cache_sf)
        base = lse_base_name(fn, lse_base)
        if lse_layout not in ("NH", "HN"):
            raise InvalidArgumentError("%s: lse_layout=%r must be 'NH' or 'HN'" % (fn, lse_layout))
        opts = self._wanted(window_left)
        if opts != self._active:
            self._replan(fn, opts, stream)
        b = self._batch
        k_value = v_value = None
        if k_scale is not None or v_scale is not None or q_scale is not None:
            k_value, v_value = scales(fn, q_scale, k_scale, v_scale)
        wanted_sm = self._sm_scale if sm_scale is None else sm_scale
        if wanted_sm is not b.sm_scale:  # the softmax scale differs from the plan's: fold the ratio into k_scale
            wanted_sm = 1.0 / math.sqrt(b.head_dim_qk) if wanted_sm is None else float(wanted_sm)
            if not 0.0 < wanted_sm < math.inf:
                raise InvalidArgumentError("%s: sm_scale=%r but it must be finite and > 0" % (fn, wanted_sm))
            ratio = wanted_sm / b.sm_resolved
            if ratio != 1.0:
                k_value, v_value = (1.0 if k_value is None else k_value) * ratio, 1.0 if v_value is None else v_value
        finish = None
        if out is None:
            out, finish = attention_output(q, b.o_dtype, shape=(q.shape[0], q.shape[1], b.head_dim_vo))
        lse_plan = (None, None)
        if return_lse:
            factor = None if base == b.lse_base else (_LN2 if base == "ln" else 1.0 / _LN2)
            destination = None
            if lse_layout == "HN":
                destination = lse if lse is not None else new_array(q, (q.shape[1], q.shape[0]), "float32")
                if tuple(destination.shape) != (q.shape[1], q.shape[0]):
                    raise InvalidArgumentError("%s: with lse_layout='HN' lse must be [num_qo_heads, tokens] = %r, "
                                               "not %r" % (fn, (q.shape[1], q.shape[0]), tuple(destination.shape)))
                lse = None
            if lse is None:
                lse = new_array(q, (q.shape[0], q.shape[1]), "float32")
            lse_plan = (factor, destination)
        return out, finish, lse, lse_plan, k_value, v_value

    @staticmethod
    def _finish(out, finish, lse, lse_plan, return_lse):
        if finish is not None:
            out = finish(out)
        if not return_lse:
            return out
        factor, destination = lse_plan
        if factor is not None:
            lse = _scale_in_place(lse, factor)
        if destination is not None:
            lse = _transpose_into(destination, lse)
        return out, lse

    def run_return_lse(self, *args, **kwargs):
        """``run`` with ``return_lse=True``."""
        return self.run(*args, return_lse=True, **kwargs)

    def _set_forward_options(self, causal, pos_encoding_mode, use_fp16_qk_reduction, window_left, logits_soft_cap,
                             sm_scale, rope_scale, rope_theta):
        """The deprecated forward's overrides: stored on the wrapper, as FlashInfer does."""
        self._causal = causal
        self._pos_encoding_mode = pos_encoding_mode
        self._use_fp16_qk_reduction = use_fp16_qk_reduction
        self._window_left = window_left
        self._logits_soft_cap = logits_soft_cap
        self._sm_scale = sm_scale
        self._rope_scale = rope_scale
        self._rope_theta = rope_theta


class BatchPrefillWithRaggedKVCacheWrapper(_BatchPrefillWrapper):
    """Batch prefill over ragged q / k / v: request b owns rows ``qo_indptr[b]:qo_indptr[b+1]`` of
    ``q`` / ``out`` and ``kv_indptr[b]:kv_indptr[b+1]`` of ``k`` / ``v``."""

    _kind = _ext.IGNIS_PREFILL_RAGGED
    _name = "BatchPrefillWithRaggedKVCacheWrapper"

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 kv_indptr_buf=None, custom_mask_buf=None, mask_indptr_buf=None, backend="auto", jit_args=None,
                 jit_kwargs=None, variant_owns_mask=False):
        self._setup(float_workspace_buffer, kv_layout, use_cuda_graph, backend, jit_args, jit_kwargs,
                    variant_owns_mask,
                    dict(qo_indptr_buf=qo_indptr_buf, kv_indptr_buf=kv_indptr_buf, custom_mask_buf=custom_mask_buf,
                         mask_indptr_buf=mask_indptr_buf),
                    ("qo_indptr_buf", "kv_indptr_buf"))

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None,
             custom_mask=None, packed_custom_mask=None, causal=False, pos_encoding_mode="NONE",
             use_fp16_qk_reduction=False, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
             rope_theta=None, q_data_type="float16", kv_data_type=None, o_data_type=None, non_blocking=True,
             prefix_len_ptr=None, token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None,
             fixed_split_size=None, disable_split_kv=False, seq_lens=None, seq_lens_q=None,
             max_token_per_sequence=None, max_sequence_kv=None, v_indptr=None, o_indptr=None, uniform_q_len=None, *,
             lse_base="2", stream=None):
        """Plan a batch from its metadata (see the module docstring). ``v_indptr`` / ``o_indptr``
        (FlashInfer's separate row offsets of v and out) must equal ``kv_indptr`` / ``qo_indptr``."""
        fn = "ignis.BatchPrefillWithRaggedKVCacheWrapper.plan"
        b = self._resolve(fn, qo_indptr, kv_indptr, None, 1, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo,
                          custom_mask, packed_custom_mask, causal, pos_encoding_mode, window_left, logits_soft_cap,
                          sm_scale, rope_scale, rope_theta, q_data_type, kv_data_type, o_data_type,
                          prefix_len_ptr, token_pos_in_items_ptr, token_pos_in_items_len, max_item_len_ptr,
                          seq_lens, seq_lens_q, max_token_per_sequence, max_sequence_kv, fixed_split_size,
                          disable_split_kv, uniform_q_len, lse_base, stream)
        for given, same, name, other in ((v_indptr, b.kv, "v_indptr", "kv_indptr"),
                                         (o_indptr, b.qo, "o_indptr", "qo_indptr")):
            if given is not None:
                given = host_i32(fn, name, given)
                if given.shape != same.shape or (given != same).any():
                    raise UnsupportedError("%s: %s differs from %s: separate row offsets are not supported"
                                           % (fn, name, other))
        self._commit(fn, b, causal, pos_encoding_mode, use_fp16_qk_reduction, window_left, logits_soft_cap, sm_scale,
                     rope_scale, rope_theta)
        self._store(fn, (("qo_indptr_buf", b.qo, True), ("kv_indptr_buf", b.kv, True),
                         ("custom_mask_buf", b.mask, False), ("mask_indptr_buf", b.mask_indptr, True)))

    begin_forward = plan

    def run(self, q, k, v, *args, q_scale=None, k_scale=None, v_scale=None, o_scale=None, out=None, lse=None,
            return_lse=False, lse_base="log2", lse_layout="NH", enable_pdl=None, kv_cache_sf=None, sinks=None,
            stream=None):
        """Attention of the planned batch; returns ``out`` or ``(out, lse)``. ``o_scale`` (FlashInfer's
        fp8-output scale) must be None or 1; ``sinks`` (an ignis extension): float32
        ``[num_qo_heads]`` on q's device."""
        fn = "ignis.BatchPrefillWithRaggedKVCacheWrapper.run"
        if o_scale is not None and o_scale != 1.0:
            raise UnsupportedError("%s: o_scale=%r given, but the output is q's dtype (no fp8 output to scale)"
                                   % (fn, o_scale))
        out, finish, lse, lse_plan, k_value, v_value = self._prepare(
            fn, q, args, q_scale, k_scale, v_scale, out, lse, return_lse, lse_base, lse_layout, None, None,
            kv_cache_sf, stream)
        k, v, kv_view = kv_views(fn, k, v, "k", "v")
        q, view = q_view(q)
        mask = self._custom_mask_buf if self._batch.mask is not None else None
        _ext.prefill_ragged_run(self._plan, q, k, v, out, custom_mask=mask, lse=lse,
                                workspace=self._plan_workspace, k_scale=k_value, v_scale=v_value, sinks=sinks,
                                kv_view=kv_view, q_view=view, stream=stream)
        return self._finish(out, finish, lse, lse_plan, return_lse)

    def forward(self, q, k, v, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, window_left=-1,
                logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None, *, stream=None):
        """Deprecated in FlashInfer: set these options on the wrapper (re-planning if they change
        what the plan fixed) and run."""
        self._set_forward_options(causal, pos_encoding_mode, use_fp16_qk_reduction, window_left, logits_soft_cap,
                                  sm_scale, rope_scale, rope_theta)
        return self.run(q, k, v, stream=stream)

    def forward_return_lse(self, q, k, v, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                           window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None, *,
                           stream=None):
        """``forward`` returning ``(out, lse)``."""
        self._set_forward_options(causal, pos_encoding_mode, use_fp16_qk_reduction, window_left, logits_soft_cap,
                                  sm_scale, rope_scale, rope_theta)
        return self.run(q, k, v, return_lse=True, stream=stream)


class BatchPrefillWithPagedKVCacheWrapper(_BatchPrefillWrapper):
    """Batch prefill over a paged KV cache (one ``[num_pages, 2, ...]`` tensor or a
    ``(k_cache, v_cache)`` tuple in the wrapper's layout); ``qo_indptr`` describes ragged q."""

    _kind = _ext.IGNIS_PREFILL_PAGED
    _name = "BatchPrefillWithPagedKVCacheWrapper"
    _indptr_name = "paged_kv_indptr"

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None,
                 custom_mask_buf=None, mask_indptr_buf=None, backend="auto", jit_args=None, jit_kwargs=None,
                 variant_owns_mask=False):
        self._setup(float_workspace_buffer, kv_layout, use_cuda_graph, backend, jit_args, jit_kwargs,
                    variant_owns_mask,
                    dict(qo_indptr_buf=qo_indptr_buf, paged_kv_indptr_buf=paged_kv_indptr_buf,
                         paged_kv_indices_buf=paged_kv_indices_buf,
                         paged_kv_last_page_len_buf=paged_kv_last_page_len_buf, custom_mask_buf=custom_mask_buf,
                         mask_indptr_buf=mask_indptr_buf),
                    ("qo_indptr_buf", "paged_kv_indptr_buf", "paged_kv_indices_buf", "paged_kv_last_page_len_buf"))

    def _resolve_paged(self, fn, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
                       num_kv_heads, head_dim_qk, page_size, head_dim_vo, custom_mask, packed_custom_mask, causal,
                       pos_encoding_mode, use_fp16_qk_reduction, sm_scale, window_left, logits_soft_cap, rope_scale,
                       rope_theta, q_data_type, kv_data_type, o_data_type, prefix_len_ptr, token_pos_in_items_ptr,
                       token_pos_in_items_len, max_item_len_ptr, seq_lens, seq_lens_q, block_tables,
                       max_token_per_sequence, max_sequence_kv, fixed_split_size, disable_split_kv, uniform_q_len,
                       lse_base, stream=None, non_blocking=True):
        """_resolve for plan() and workspace_size(), which pass their arguments by name (see
        _arguments); use_fp16_qk_reduction and non_blocking change nothing here."""
        b = self._resolve(fn, qo_indptr, paged_kv_indptr, paged_kv_last_page_len, page_size, num_qo_heads,
                          num_kv_heads, head_dim_qk, head_dim_vo, custom_mask, packed_custom_mask, causal,
                          pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta,
                          q_data_type, kv_data_type, o_data_type, prefix_len_ptr, token_pos_in_items_ptr,
                          token_pos_in_items_len, max_item_len_ptr, seq_lens, seq_lens_q, max_token_per_sequence,
                          max_sequence_kv, fixed_split_size, disable_split_kv, uniform_q_len, lse_base, stream)
        if self._use_cuda_graph and paged_kv_indices.shape[0] > self._paged_kv_indices_buf.shape[0]:
            raise InvalidArgumentError("%s: paged_kv_indices has %d entries but paged_kv_indices_buf holds %d"
                                       % (fn, paged_kv_indices.shape[0], self._paged_kv_indices_buf.shape[0]))
        if block_tables is not None:
            self._check_block_tables(fn, b, block_tables, paged_kv_indices)
        b.indices = paged_kv_indices
        return b

    @staticmethod
    def _check_block_tables(fn, b, block_tables, paged_kv_indices):
        """block_tables[r, :pages of r] must be request r's page indices."""
        import numpy

        table = host_numpy(block_tables)
        counts = (b.kv[1:] - b.kv[:-1]).astype(numpy.int64)
        if table.ndim != 2 or table.shape[0] < counts.size or (counts.size and counts.max() > table.shape[1]):
            raise InvalidArgumentError("%s: block_tables has shape %r but the batch needs [%d, >= %d]"
                                       % (fn, tuple(table.shape), counts.size, int(counts.max()) if counts.size else 0))
        indices = host_i32(fn, "paged_kv_indices", paged_kv_indices)[b.kv[0]:b.kv[-1]]
        rows = numpy.repeat(numpy.arange(counts.size), counts)
        cols = numpy.arange(rows.size) - numpy.repeat(b.kv[:-1].astype(numpy.int64) - b.kv[0], counts)
        if (table[rows, cols] != indices).any():
            raise InvalidArgumentError("%s: block_tables disagrees with paged_kv_indices" % fn)

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
             num_kv_heads, head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None,
             causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
             logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type="float16", kv_data_type=None,
             o_data_type=None, non_blocking=True, prefix_len_ptr=None, token_pos_in_items_ptr=None,
             token_pos_in_items_len=0, max_item_len_ptr=None, seq_lens=None, seq_lens_q=None, block_tables=None,
             max_token_per_sequence=None, max_sequence_kv=None, fixed_split_size=None, disable_split_kv=False,
             uniform_q_len=None, *, lse_base="2", stream=None):
        """Plan a batch from its metadata (see the module docstring)."""
        arguments = _arguments(locals())
        fn = "ignis.%s.plan" % self._name
        b = self._resolve_paged(fn, **arguments)
        self._commit(fn, b, causal, pos_encoding_mode, use_fp16_qk_reduction, window_left, logits_soft_cap, sm_scale,
                     rope_scale, rope_theta)
        self._store(fn, (("qo_indptr_buf", b.qo, True), ("paged_kv_indptr_buf", b.kv, True),
                         ("paged_kv_indices_buf", b.indices, False), ("paged_kv_last_page_len_buf", b.last, True),
                         ("custom_mask_buf", b.mask, False), ("mask_indptr_buf", b.mask_indptr, True)))
        b.indices = None

    begin_forward = plan

    def workspace_size(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
                       num_kv_heads, head_dim_qk, page_size, head_dim_vo=None, custom_mask=None,
                       packed_custom_mask=None, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                       sm_scale=None, window_left=-1, logits_soft_cap=None, rope_scale=None, rope_theta=None,
                       q_data_type="float16", kv_data_type=None, o_data_type=None, prefix_len_ptr=None,
                       token_pos_in_items_ptr=None, token_pos_in_items_len=0, max_item_len_ptr=None, seq_lens=None,
                       seq_lens_q=None, block_tables=None, max_token_per_sequence=None, max_sequence_kv=None,
                       fixed_split_size=None, disable_split_kv=False, uniform_q_len=None, *, lse_base="2"):
        """``(float_workspace_bytes, int_workspace_bytes)`` a plan with these arguments needs, as
        FlashInfer's: the device workspace of the C plan this wrapper would use (0 on the CPU),
        and 0 (ignis has no int workspace). Nothing is planned or changed."""
        arguments = _arguments(locals())
        fn = "ignis.%s.workspace_size" % self._name
        b = self._resolve_paged(fn, **arguments)
        config, key = self._config_for(fn, b, self._memo.get(b.plan_options, b.plan_options))
        maxima = self._maxima_for(b, self._plans.get(key))
        plan = _ext.prefill_plan_create(max_batch_size=maxima[0], max_qo_tokens=maxima[1], max_kv_len=maxima[2],
                                        **config)
        return int(_ext.prefill_workspace_size(plan)), 0

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, lse_base="log2", lse_layout="NH", enable_pdl=None, window_left=None, sinks=None,
            kv_cache_sf=None, skip_softmax_threshold_scale_factor=None, use_fp16_softmax=None, uses_spcompress=None,
            stream=None):
        """Attention of the planned batch; returns ``out`` or ``(out, lse)``. ``window_left`` other
        than the planned one re-plans (see the module docstring); ``sinks``: float32
        ``[num_qo_heads]`` on q's device."""
        return self._run_paged("ignis.%s.run" % self._name, q, paged_kv_cache, args, q_scale, k_scale, v_scale,
                               out, lse, return_lse, lse_base, lse_layout, window_left, sinks, None, kv_cache_sf,
                               skip_softmax_threshold_scale_factor, use_fp16_softmax, uses_spcompress, stream)

    def _run_paged(self, fn, q, paged_kv_cache, args, q_scale, k_scale, v_scale, out, lse, return_lse, lse_base,
                   lse_layout, window_left, sinks, sm_scale, kv_cache_sf, skip_softmax_threshold_scale_factor,
                   use_fp16_softmax, uses_spcompress, stream):
        _refuse(fn, "ignis has no approximate softmax skipping",
                skip_softmax_threshold_scale_factor=skip_softmax_threshold_scale_factor)
        _refuse(fn, "those are trtllm-gen kernel variants (SM107) ignis does not have",
                use_fp16_softmax=use_fp16_softmax or None, uses_spcompress=uses_spcompress or None)
        out, finish, lse, lse_plan, k_value, v_value = self._prepare(
            fn, q, args, q_scale, k_scale, v_scale, out, lse, return_lse, lse_base, lse_layout, window_left,
            sm_scale, kv_cache_sf, stream)
        k_cache, v_cache, kv_view = paged_kv_views(fn, paged_kv_cache, self._layout)
        q, view = q_view(q)
        mask = self._custom_mask_buf if self._batch.mask is not None else None
        _ext.prefill_paged_run(self._plan, q, k_cache, v_cache, out, kv_indptr=self._paged_kv_indptr_buf,
                               kv_indices=self._paged_kv_indices_buf, kv_last_page_len=self._paged_kv_last_page_len_buf,
                               kv_layout=self._layout, custom_mask=mask, lse=lse, workspace=self._plan_workspace,
                               k_scale=k_value, v_scale=v_value, sinks=sinks, kv_view=kv_view, q_view=view,
                               stream=stream)
        return self._finish(out, finish, lse, lse_plan, return_lse)

    def forward(self, q, paged_kv_cache, causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
                rope_theta=None, *, stream=None):
        """Deprecated in FlashInfer: set these options on the wrapper (re-planning if they change
        what the plan fixed) and run."""
        self._set_forward_options(causal, pos_encoding_mode, use_fp16_qk_reduction, window_left, logits_soft_cap,
                                  sm_scale, rope_scale, rope_theta)
        return self.run(q, paged_kv_cache, k_scale=k_scale, v_scale=v_scale, stream=stream)

    def forward_return_lse(self, q, paged_kv_cache, causal=False, pos_encoding_mode="NONE",
                           use_fp16_qk_reduction=False, k_scale=None, v_scale=None, window_left=-1,
                           logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None, *, stream=None):
        """``forward`` returning ``(out, lse)``."""
        self._set_forward_options(causal, pos_encoding_mode, use_fp16_qk_reduction, window_left, logits_soft_cap,
                                  sm_scale, rope_scale, rope_theta)
        return self.run(q, paged_kv_cache, k_scale=k_scale, v_scale=v_scale, return_lse=True, stream=stream)


class BatchAttentionWithAttentionSinkWrapper(BatchPrefillWithPagedKVCacheWrapper):
    """The paged prefill wrapper with per-head attention sinks (gpt-oss), FlashInfer's subclass:
    the constructor fixes q / K/V dtypes, head dims and the position encoding (FlashInfer compiles
    a variant for them; ``plan`` must then agree, else InvalidArgumentError), and ``run(q,
    paged_kv_cache, sinks, sm_scale, ...)`` takes the sinks (float32 ``[num_qo_heads]``, natural-log
    logits) and optionally the softmax scale positionally. A positional ``sm_scale`` is the whole
    logits scale, as in FlashInfer's variant, so ``q_scale`` / ``k_scale`` with it are refused
    (fold them into it). The constructor's ``window_left`` is FlashInfer's compile-time hint; the
    window is ``plan``'s."""

    _name = "BatchAttentionWithAttentionSinkWrapper"

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, qo_indptr_buf=None,
                 paged_kv_indptr_buf=None, paged_kv_indices_buf=None, paged_kv_last_page_len_buf=None,
                 custom_mask_buf=None, mask_indptr_buf=None, backend="auto", pos_encoding_mode="NONE",
                 use_fp16_qk_reduction=False, q_data_type="bfloat16", kv_data_type="bfloat16", head_dim_qk=128,
                 head_dim_vo=128, window_left=-1):
        fn = "ignis.BatchAttentionWithAttentionSinkWrapper"
        if backend not in ("fa2", "fa3", "auto"):
            raise InvalidArgumentError("%s: backend=%r must be 'fa2', 'fa3' or 'auto'" % (fn, backend))
        attention_options(fn, window_left, None, None, "2", pos_encoding_mode, None, None)  # validates them
        self._spec = (dtype_code(fn, "q_data_type", q_data_type), dtype_code(fn, "kv_data_type", kv_data_type),
                      head_dim_qk, head_dim_vo, pos_encoding_mode)
        self._spec_given = (q_data_type, kv_data_type, head_dim_qk, head_dim_vo, pos_encoding_mode)
        self._init_window_left = window_left
        super().__init__(float_workspace_buffer, kv_layout, use_cuda_graph, qo_indptr_buf, paged_kv_indptr_buf,
                         paged_kv_indices_buf, paged_kv_last_page_len_buf, custom_mask_buf, mask_indptr_buf, backend)

    def _check_spec(self, fn, q_code, kv_code, head_dim_qk, head_dim_vo, pos_encoding_mode):
        got = (q_code, kv_code, head_dim_qk, head_dim_vo, pos_encoding_mode)
        names = ("q_data_type", "kv_data_type", "head_dim_qk", "head_dim_vo", "pos_encoding_mode")
        for name, want, have, given in zip(names, self._spec, got, self._spec_given):
            if want != have:
                raise InvalidArgumentError("%s: %s differs from the one the wrapper was constructed with (%s)"
                                           % (fn, name, given))

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, lse_base="log2", lse_layout="NH", enable_pdl=None, window_left=None, sinks=None,
            kv_cache_sf=None, skip_softmax_threshold_scale_factor=None, use_fp16_softmax=None, uses_spcompress=None,
            stream=None):
        """Attention with sinks: ``run(q, paged_kv_cache, sinks, sm_scale=None, **run's keywords)``."""
        fn = "ignis.BatchAttentionWithAttentionSinkWrapper.run"
        if len(args) > 2:
            raise UnsupportedError("%s: %d positional arguments after paged_kv_cache; it takes sinks and sm_scale"
                                   % (fn, len(args)))
        if args and sinks is not None:
            raise TypeError("%s() got multiple values for argument 'sinks'" % fn)
        sinks = args[0] if args else sinks
        sm_scale = args[1] if len(args) > 1 else None
        if sinks is None:
            raise InvalidArgumentError("%s: the attention-sink wrapper needs sinks (float32 [num_qo_heads])" % fn)
        if sm_scale is not None and (q_scale is not None or k_scale is not None):
            raise UnsupportedError("%s: q_scale / k_scale with a positional sm_scale (FlashInfer's sink variant then "
                                   "ignores them): fold them into sm_scale" % fn)
        return self._run_paged(fn, q, paged_kv_cache, (), q_scale, k_scale, v_scale, out, lse, return_lse, lse_base,
                               lse_layout, window_left, sinks, sm_scale, kv_cache_sf,
                               skip_softmax_threshold_scale_factor, use_fp16_softmax, uses_spcompress, stream)
