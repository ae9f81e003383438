"""Prefill attention with FlashInfer's names and arguments (flashinfer.prefill).

``single_prefill_with_kv_cache``: ``q`` ``[qo_len, num_qo_heads, head_dim_qk]`` against contiguous
``k`` / ``v`` (``[kv_len, num_kv_heads, head_dim]`` "NHD" or ``[num_kv_heads, kv_len, head_dim]``
"HND"). ``BatchPrefillWithRaggedKVCacheWrapper``: ragged q / k / v described by ``qo_indptr`` and
``kv_indptr``. ``BatchPrefillWithPagedKVCacheWrapper``: ``qo_indptr`` and the paged cache of
decode. The batch wrappers split into ``plan`` (host metadata; the schedule goes into the
caller's workspace buffer) and ``run``, as FlashInfer's do.

The math is the header comment of include/ignis/prefill.h: query token i of a request with
qo_len q and kv_len k sits at position k - q + i; ``causal=True`` lets it see keys up to there;
``custom_mask`` (booleans ``[qo_len, kv_len]`` per request, flattened and concatenated, as
FlashInfer) or ``packed_custom_mask`` (the same, bit-packed per request with
``segment_packbits(..., bitorder="little")``) choose the keys instead; ``window_left``,
``logits_soft_cap``, ``sm_scale``, ``pos_encoding_mode`` ("NONE", "ROPE_LLAMA", "ALIBI"),
``rope_scale`` / ``rope_theta``, per-head ``sinks``, ``k_scale`` / ``v_scale`` (numbers; ``q_scale``
/ ``scale_q`` folds into the key scale) and the LSE base (``lse_base="2"``, FlashInfer's, or
``"ln"``) are as in decode. A token that sees no key gets out = 0 and lse = -inf. q f16 / bf16;
K/V q's dtype or fp8; head dims (64, 64), (128, 128), (256, 256) and (192, 128) (``head_dim_vo``;
ragged and single prefill).

Backends: host arrays run on the CPU backend, CUDA tensors on the tensor-core kernel (q, out, k and
v 16-byte aligned with strides of multiples of 16 bytes; UnsupportedError otherwise, nothing
written).

Plans: the C plan is made once per configuration and kept while later plans fit its maxima (batch
size, total query tokens, keys per request: each the largest seen rounded up to a power of two);
a batch past them re-makes it. With ``use_cuda_graph=True`` the first plan's maxima are kept and a
batch past them raises InvalidArgumentError (a captured run must not see a new plan object).
Index arrays are read on the host (CUDA ones are copied: a sync, as FlashInfer's plan).
Accepted and ignored: ``use_fp16_qk_reduction``, ``backend``, ``non_blocking``,
``enable_pdl``, ``o_dtype`` equal to q's dtype.
"""

import functools

from . import _ext
from ._alloc import _pick
from ._common import (attention_options, dtype_code, host_i32, kv_views, layout_code, new_f32, next_pow2,
                      on_cuda, paged_kv_views, scales, single_workspace)
from ._errors import InvalidArgumentError, UnsupportedError
from .quantization import packbits, segment_packbits

__all__ = ["single_prefill_with_kv_cache", "single_prefill_with_kv_cache_return_lse",
           "BatchPrefillWithRaggedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper"]



def _new_output(q, shape):
    allocate = _pick(q)
    if allocate is None:
        raise InvalidArgumentError("ignis cannot allocate an output like a %s: pass out=" % type(q).__qualname__)
    return allocate(q, shape)


def _mask_mode(causal, custom_mask, packed_custom_mask):
    if custom_mask is not None or packed_custom_mask is not None:
        return _ext.IGNIS_MASK_CUSTOM
    return _ext.IGNIS_MASK_CAUSAL if causal else _ext.IGNIS_MASK_NONE


def single_prefill_with_kv_cache(q, k, v, scale_q=None, scale_k=None, scale_v=None, o_dtype=None, custom_mask=None,
                                 packed_custom_mask=None, causal=False, kv_layout="NHD", pos_encoding_mode="NONE",
                                 use_fp16_qk_reduction=False, sm_scale=None, window_left=-1, logits_soft_cap=None,
                                 rope_scale=None, rope_theta=None, backend="auto", return_lse=False, *, sinks=None,
                                 lse_base="2", stream=None):
    """Prefill attention of one request. Returns ``out`` ``[qo_len, num_qo_heads, head_dim_vo]``
    (q's dtype), or ``(out, lse)`` with ``return_lse`` (``lse`` ``[qo_len, num_qo_heads]`` float32
    in base ``lse_base``). ``custom_mask``: booleans ``[qo_len, kv_len]``; ``packed_custom_mask``:
    their little-endian bit-packing (uint8)."""
    fn = "ignis.single_prefill_with_kv_cache"
    layout = layout_code(kv_layout)
    options = attention_options(fn, window_left, logits_soft_cap, sm_scale, lse_base, pos_encoding_mode, rope_scale,
                                rope_theta)
    if o_dtype is not None and str(o_dtype) != str(q.dtype):
        raise UnsupportedError("%s: o_dtype=%s but out has q's dtype (%s)" % (fn, o_dtype, q.dtype))
    k_value = v_value = None
    if scale_k is not None or scale_v is not None or scale_q is not None:
        k_value, v_value = scales(fn, scale_q, scale_k, scale_v)
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
    out, finish = _new_output(q, (q.shape[0], q.shape[1], head_dim_vo))
    lse = new_f32(q, (q.shape[0], q.shape[1])) if return_lse else None
    _ext.single_prefill(q, k, v, out, lse=lse, workspace=workspace, custom_mask=packed_custom_mask, kv_layout=layout,
                        mask_mode=mode, options=options, k_scale=k_value, v_scale=v_value, sinks=sinks,
                        kv_view=kv_view, stream=stream)
    return (finish(out), lse) if return_lse else finish(out)


single_prefill_with_kv_cache_return_lse = functools.partial(single_prefill_with_kv_cache, return_lse=True)


class _BatchPrefillWrapper:
    """What the ragged and paged wrappers share: the workspace, the C plan and its maxima."""

    _kind = _ext.IGNIS_PREFILL_RAGGED
    _name = ""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, backend="auto", **unused):
        self._layout = layout_code(kv_layout)
        self._workspace = float_workspace_buffer
        self._use_cuda_graph = use_cuda_graph
        self._plan = None
        self._config = None  # ignis_prefill_plan_config by field name, but the maxima
        self._maxima = None
        self._planned = False

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer=None):
        self._workspace = float_workspace_buffer
        self._planned = False

    def _cuda_workspace(self):
        """The workspace when the plans run on CUDA (their schedule lives there), else None."""
        workspace = self._workspace
        return workspace if workspace is not None and on_cuda(workspace) else None

    def _device(self):
        workspace = self._cuda_workspace()
        if workspace is None:
            return _ext.IGNIS_DEVICE_CPU, 0
        return _ext.IGNIS_DEVICE_CUDA, workspace.__dlpack_device__()[1]

    def _configure(self, fn, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, page_size, q_data_type,
                   kv_data_type, mode, disable_split_kv, fixed_split_size, options, needs):
        q_code = dtype_code(fn, "q_data_type", q_data_type)
        kv_code = q_code if kv_data_type is None else dtype_code(fn, "kv_data_type", kv_data_type)
        device_type, device_id = self._device()
        config = dict(device_type=device_type, device_id=device_id, kv_kind=self._kind, kv_layout=self._layout,
                      num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads, head_dim_qk=head_dim_qk,
                      head_dim_vo=head_dim_vo or head_dim_qk, page_size=page_size, q_dtype=q_code, kv_dtype=kv_code,
                      mask_mode=mode, disable_split_kv=bool(disable_split_kv), fixed_split_size=fixed_split_size or 0,
                      options=options)
        if config == self._config and all(n <= m for n, m in zip(needs, self._maxima)):
            return
        if self._use_cuda_graph and self._config is not None:
            raise InvalidArgumentError("%s: with use_cuda_graph=True the plan is fixed by the first plan() call; "
                                       "this batch needs another one (make a new wrapper)" % fn)
        maxima = (next_pow2(needs[0], 64), next_pow2(needs[1], 4096), next_pow2(needs[2], 4096))
        self._plan = _ext.prefill_plan_create(max_batch_size=maxima[0], max_qo_tokens=maxima[1], max_kv_len=maxima[2],
                                              **config)
        self._config, self._maxima = config, maxima

    def _schedule(self, fn, qo_indptr, kv_indptr, kv_last_page_len, page_size, num_qo_heads, num_kv_heads,
                  head_dim_qk, head_dim_vo, custom_mask, packed_custom_mask, causal, pos_encoding_mode, window_left,
                  logits_soft_cap, sm_scale, rope_scale, rope_theta, q_data_type, kv_data_type, disable_split_kv,
                  fixed_split_size, lse_base, stream):
        qo = host_i32(qo_indptr, "qo_indptr")
        kv = host_i32(kv_indptr, "kv_indptr")
        last = None if kv_last_page_len is None else host_i32(kv_last_page_len, "kv_last_page_len")
        if qo.size < 1 or kv.size != qo.size:
            raise InvalidArgumentError("%s: qo_indptr has %d entries and kv_indptr %d: they must describe the same "
                                       "batch" % (fn, qo.size, kv.size))
        lengths = kv[1:] - kv[:-1]
        if last is not None and last.size == lengths.size:
            lengths = (lengths - 1) * page_size + last
            lengths[kv[1:] == kv[:-1]] = 0
        mode = _mask_mode(causal, custom_mask, packed_custom_mask)
        options = attention_options(fn, window_left, logits_soft_cap, sm_scale, lse_base, pos_encoding_mode, rope_scale,
                                    rope_theta)
        needs = (qo.size - 1, max(1, int(qo[-1] - qo[0])), int(lengths.max()) if lengths.size else 0)
        self._configure(fn, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, page_size, q_data_type,
                        kv_data_type, mode, disable_split_kv, fixed_split_size, options, needs)
        if packed_custom_mask is None and custom_mask is not None:
            qo_lens = qo[1:] - qo[:-1]
            bits = [0]
            for n in (qo_lens * lengths).tolist():
                bits.append(bits[-1] + n)
            import numpy

            packed_custom_mask, _ = segment_packbits(custom_mask, numpy.asarray(bits, dtype=numpy.int64),
                                                     bitorder="little")
        self._mask = packed_custom_mask
        workspace = self._cuda_workspace()
        _ext.prefill_plan_update(self._plan, qo, kv, last, workspace, stream)
        self._planned = True

    def _outputs(self, fn, q, out, lse, return_lse):
        if not self._planned:
            raise InvalidArgumentError("%s: call plan first" % fn)
        finish = None
        if out is None:
            out, finish = _new_output(q, (q.shape[0], q.shape[1], self._config["head_dim_vo"]))
        if return_lse and lse is None:
            lse = new_f32(q, (q.shape[0], q.shape[1]))
        return out, finish, lse

    def run_return_lse(self, *args, **kwargs):
        """``run`` with ``return_lse=True``."""
        kwargs["return_lse"] = True
        return self.run(*args, **kwargs)

    def forward(self, *args, **kwargs):
        return self.run(*args, **kwargs)


class BatchPrefillWithRaggedKVCacheWrapper(_BatchPrefillWrapper):
    """Batch prefill over ragged q / k / v: request b owns rows ``qo_indptr[b]:qo_indptr[b+1]`` of
    ``q`` / ``out`` and ``kv_indptr[b]:kv_indptr[b+1]`` of ``k`` / ``v``."""

    _kind = _ext.IGNIS_PREFILL_RAGGED

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None,
             custom_mask=None, packed_custom_mask=None, causal=False, pos_encoding_mode="NONE",
             use_fp16_qk_reduction=False, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
             rope_theta=None, q_data_type="float16", kv_data_type=None, non_blocking=True, *,
             disable_split_kv=False, fixed_split_size=None, lse_base="2", stream=None, **unused):
        """Plan a batch from its host metadata (see the module docstring)."""
        self._schedule("ignis.BatchPrefillWithRaggedKVCacheWrapper.plan", qo_indptr, kv_indptr, None, 1,
                       num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo, custom_mask, packed_custom_mask, causal,
                       pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta,
                       q_data_type, kv_data_type, disable_split_kv, fixed_split_size, lse_base, stream)

    begin_forward = plan

    def run(self, q, k, v, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None, return_lse=False,
            sinks=None, enable_pdl=None, stream=None):
        """Attention of the planned batch; returns ``out`` or ``(out, lse)``."""
        fn = "ignis.BatchPrefillWithRaggedKVCacheWrapper.run"
        if args:
            raise UnsupportedError("%s: extra positional arguments are not supported" % fn)
        out, finish, lse = self._outputs(fn, q, out, lse, return_lse)
        k, v, kv_view = kv_views(fn, k, v, "k", "v")
        k_value = v_value = None
        if k_scale is not None or v_scale is not None or q_scale is not None:
            k_value, v_value = scales(fn, q_scale, k_scale, v_scale)
        workspace = self._cuda_workspace()
        _ext.prefill_ragged_run(self._plan, q, k, v, out, custom_mask=self._mask, lse=lse, workspace=workspace,
                                k_scale=k_value, v_scale=v_value, sinks=sinks, kv_view=kv_view, stream=stream)
        if finish is not None:
            out = finish(out)
        return (out, lse) if return_lse else out


class BatchPrefillWithPagedKVCacheWrapper(_BatchPrefillWrapper):
    """Batch prefill over a paged KV cache (one ``[num_pages, 2, ...]`` tensor or a
    ``(k_cache, v_cache)`` tuple in the wrapper's layout); ``qo_indptr`` describes ragged q."""

    _kind = _ext.IGNIS_PREFILL_PAGED

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
             num_kv_heads, head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None,
             causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
             logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type="float16", kv_data_type=None,
             non_blocking=True, *, disable_split_kv=False, fixed_split_size=None, lse_base="2", stream=None,
             **unused):
        """Plan a batch from its host metadata (see the module docstring)."""
        self._schedule("ignis.BatchPrefillWithPagedKVCacheWrapper.plan", qo_indptr, paged_kv_indptr,
                       paged_kv_last_page_len, page_size, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo,
                       custom_mask, packed_custom_mask, causal, pos_encoding_mode, window_left, logits_soft_cap,
                       sm_scale, rope_scale, rope_theta, q_data_type, kv_data_type, disable_split_kv,
                       fixed_split_size, lse_base, stream)
        self._indexes = tuple(self._on_workspace_device(x, name) for x, name in (
            (paged_kv_indptr, "paged_kv_indptr"), (paged_kv_indices, "paged_kv_indices"),
            (paged_kv_last_page_len, "paged_kv_last_page_len")))

    begin_forward = plan

    def _on_workspace_device(self, x, name):
        if self._cuda_workspace() is None:
            return host_i32(x, name)
        if on_cuda(x):
            return x
        import torch

        return torch.from_numpy(host_i32(x, name)).to(self._workspace.device)

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, sinks=None, enable_pdl=None, stream=None):
        """Attention of the planned batch; returns ``out`` or ``(out, lse)``."""
        fn = "ignis.BatchPrefillWithPagedKVCacheWrapper.run"
        if args:
            raise UnsupportedError("%s: extra positional arguments are not supported" % fn)
        out, finish, lse = self._outputs(fn, q, out, lse, return_lse)
        k_cache, v_cache, kv_view = paged_kv_views(fn, paged_kv_cache)
        k_value = v_value = None
        if k_scale is not None or v_scale is not None or q_scale is not None:
            k_value, v_value = scales(fn, q_scale, k_scale, v_scale)
        workspace = self._cuda_workspace()
        indptr, indices, last = self._indexes
        _ext.prefill_paged_run(self._plan, q, k_cache, v_cache, out, kv_indptr=indptr, kv_indices=indices,
                               kv_last_page_len=last, kv_layout=self._layout, custom_mask=self._mask, lse=lse,
                               workspace=workspace, k_scale=k_value, v_scale=v_value, sinks=sinks, kv_view=kv_view,
                               stream=stream)
        if finish is not None:
            out = finish(out)
        return (out, lse) if return_lse else out
