"""Decode attention with FlashInfer's names and arguments (flashinfer.decode).

``single_decode_with_kv_cache``: one query token ``q`` ``[num_qo_heads, head_dim]`` against
contiguous ``k`` / ``v`` ``[kv_len, num_kv_heads, head_dim]`` ("NHD") or
``[num_kv_heads, kv_len, head_dim]`` ("HND").

``BatchDecodeWithPagedKVCacheWrapper``: a batch of decode requests over a paged KV cache, split,
as in FlashInfer, into ``plan`` (host metadata, once per batch; the schedule goes into the
caller's workspace buffer) and ``run`` (per layer; never allocates or synchronizes on CUDA, so it
can be captured in a CUDA graph and replayed after re-planning).

What is supported (the math is the header comment of include/ignis/decode.h):

- q f16 or bf16; K/V q's dtype, or fp8 (``torch.float8_e4m3fn`` / ``float8_e5m2``; NumPy arrays of
  ml_dtypes' ``float8_e4m3fn`` / ``float8_e5m2``) with any q. Head dims 64, 128 and 256; any GQA
  group.
- ``k_scale`` / ``v_scale`` scale the keys and values of any dtype (FlashInfer folds ``k_scale``
  into the softmax scale and multiplies the output by ``v_scale``: the same result);
  ``q_scale`` multiplies the logits, so ignis folds it into ``k_scale``. Each is a Python number
  or a one-element host tensor; a CUDA tensor is refused (UnsupportedError) because reading it
  would synchronize with the device.
- ``pos_encoding_mode`` "NONE", "ROPE_LLAMA" (q and k rotated inside the kernel at their
  positions, ``rope_scale`` default 1, ``rope_theta`` default 1e4) or "ALIBI".
- ``sinks``: per-head sink logits, float32 ``[num_qo_heads]`` on q's device.
- ``window_left``, ``logits_soft_cap``, ``sm_scale`` (default ``1/sqrt(head_dim)``), and the LSE's
  base: ``lse_base="2"`` (FlashInfer's, default) or ``"ln"``.
- ``q_len_per_req`` (batch decode; speculative decoding, causal among a request's new tokens) is
  fixed by ``plan``, as the C plan is: q then has ``batch * q_len_per_req`` rows. ``run`` takes
  ``q_len_per_req=None`` (the planned value) or the planned value; another one raises
  InvalidArgumentError (re-plan with it). ``run``'s ``window_left`` likewise must be None or the
  planned value, as in FlashInfer.

``use_tensor_cores``, ``backend``, ``enable_pdl`` and ``non_blocking`` are accepted and ignored
(ignis picks its kernel; plan copies are always asynchronous); ``block_tables`` and ``seq_lens``
are accepted and ignored (the lengths come from ``indptr`` and ``last_page_len``). Every call
takes a keyword-only ``stream=``; plan and run must use the same stream.

How ``plan`` stays cheap (the budget is 10 us of host time at batch 256; bench/decode_plan_time.py
measures it): the C plan object is made once per configuration (heads, head dim, page size,
dtypes, options, q_len_per_req) and kept while later ``plan`` calls pass the same arguments;
each call then only schedules the batch (ignis_decode_plan_update), reading ``indptr`` and
``last_page_len`` in place when they are contiguous int32 host arrays (CPU tensors, NumPy). Other
index arrays are first copied to the host, and CUDA tensors are copied with a synchronization,
as FlashInfer's plan does: keep them on the host. On CUDA, ``indptr`` and ``last_page_len`` then
reach the device with one asynchronous copy into the wrapper's index buffer; ``indices`` is used
in place when it is already on the device. The plan's maxima are chosen so that it rarely needs
re-making: the batch bound is the CUDA-graph buffers' size, else ``max_batch_size=``, else the
largest batch seen rounded up to a power of two (at least 64); the KV-length bound is
``max_kv_len=``, else unbounded (the split-KV partials and the launch stay within one wave of the
GPU whatever the bound) except with
``fixed_split_size``, whose work list grows with it: there it is the longest request seen rounded
up to a power of two (at least 4096), or with CUDA-graph buffers the longest the workspace holds,
so that the plan and a captured run stay valid. A batch past an implicit bound re-makes the plan;
one past an explicit bound, or past the CUDA-graph buffers, raises InvalidArgumentError.
"""

import functools
import sys

from . import _ext
from ._alloc import new_output
from ._common import (INT32_MAX, Q_DTYPES, attention_options, dtype_code, host_i32, is_cuda, kv_views,
                      layout_code, new_f32, next_pow2, on_cuda, paged_kv_views, scales, single_workspace)
from ._errors import InvalidArgumentError, UnsupportedError

__all__ = ["single_decode_with_kv_cache", "BatchDecodeWithPagedKVCacheWrapper"]

_MIN_MAX_BATCH = 64
_MIN_MAX_KV_LEN = 4096


def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", pos_encoding_mode="NONE", use_tensor_cores=False,
                                q_scale=None, k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None,
                                sm_scale=None, rope_scale=None, rope_theta=None, return_lse=False, *, sinks=None,
                                lse_base="2", stream=None):
    """Decode attention of one request: ``q`` ``[num_qo_heads, head_dim]`` against ``k`` / ``v``
    (``[kv_len, num_kv_heads, head_dim]`` for "NHD", ``[num_kv_heads, kv_len, head_dim]`` for
    "HND"; any leading strides; q's dtype or fp8). Returns ``out`` ``[num_qo_heads, head_dim]``
    (q's dtype), or ``(out, lse)`` with ``return_lse`` (``lse`` ``[num_qo_heads]`` float32 in base
    ``lse_base``). The query sits at position ``kv_len - 1`` (RoPE, ALiBi). With no keys, ``out``
    is 0 and ``lse`` is -inf (the sink with ``sinks``). On CUDA, long sequences are split across
    the GPU; the scratch for that is allocated once per device and kept."""
    fn = "ignis.single_decode_with_kv_cache"
    layout = layout_code(kv_layout)
    options = attention_options(fn, window_left, logits_soft_cap, sm_scale, lse_base, pos_encoding_mode, rope_scale,
                                rope_theta)
    k_value = v_value = None
    if k_scale is not None or v_scale is not None or q_scale is not None:
        k_value, v_value = scales(fn, q_scale, k_scale, v_scale)
    k, v, kv_view = kv_views(fn, k, v, "k", "v")
    workspace = None
    if on_cuda(q):
        kv_len = k.shape[0] if layout == _ext.IGNIS_KV_LAYOUT_NHD else k.shape[1]
        workspace = single_workspace(q, _ext.single_decode_workspace_size(q.shape[0], q.shape[-1], kv_len))
    out, finish = new_output(q)
    lse = new_f32(q, (q.shape[0],)) if return_lse else None
    _ext.single_decode(q, k, v, out, lse=lse, workspace=workspace, kv_layout=layout, options=options, k_scale=k_value,
                       v_scale=v_value, sinks=sinks, kv_view=kv_view, stream=stream)
    return (finish(out), lse) if return_lse else finish(out)


class _IndexUploader:
    """The device side of plan's index arrays on CUDA. Page indices: used in place when on the
    device, else copied there. indptr / last_page_len: without CUDA-graph buffers the run reads the
    copies the C plan uploads with its schedule (nothing to do here); with them (FlashInfer's
    use_cuda_graph), a host staging array that decode_plan_update fills with
    ``[indptr | last_page_len]`` (2 * max_batch + 1 int32) and, per batch size, the copies into the
    graph buffers."""

    def __init__(self, workspace, max_batch, graph_buffers):
        n = 2 * max_batch + 1
        self.workspace = workspace
        self.graph_buffers = graph_buffers
        if hasattr(workspace, "new_empty"):  # PyTorch
            import torch

            self.torch = True
            self.staging = torch.empty((n,), dtype=torch.int32)
        else:
            import numpy

            self.torch = False
            self.staging = numpy.empty((n,), dtype=numpy.int32)
        self.views = {}

    def _copier(self, dst, src):
        """A call that copies host src into device dst asynchronously (no Python frame of its own)."""
        return functools.partial(dst.copy_, src, True) if self.torch else functools.partial(dst.set, src)

    def _make(self, batch):
        staging = self.staging
        indptr, last = self.graph_buffers[0][: batch + 1], self.graph_buffers[2][:batch]
        copies = (self._copier(indptr, staging[: batch + 1]),
                  self._copier(last, staging[batch + 1 : 2 * batch + 1]))
        views = self.views[batch] = (copies, indptr, last)
        return views

    def on_stream(self, stream):
        """A context in which the framework's copies go to `stream` (plan's stream=: an int
        cudaStream_t, or an object with .cuda_stream or .ptr), where plan_update's copy goes."""
        if self.torch:
            import torch

            if isinstance(stream, torch.cuda.Stream):
                return torch.cuda.stream(stream)
            handle = stream if isinstance(stream, int) else getattr(stream, "cuda_stream", None)
            handle = getattr(stream, "ptr", None) if handle is None else handle
            device = self.workspace.device
            external = torch.cuda.ExternalStream(handle, device=device) if handle else torch.cuda.default_stream(device)
            return torch.cuda.stream(external)
        cupy = sys.modules["cupy"]
        handle = stream if isinstance(stream, int) else getattr(stream, "ptr", getattr(stream, "cuda_stream", 0))
        return cupy.cuda.ExternalStream(handle)

    def upload(self, batch):
        """Copy the staged arrays of a batch to the device; returns (indptr, last_page_len) there."""
        views = self.views.get(batch)
        if views is None:
            views = self._make(batch)
        for copy in views[0]:
            copy()
        return views[1], views[2]

    def indices(self, indices):
        """The page indices on the device: in place when they are already there (without CUDA-graph
        buffers), else copied into the indices buffer or a new device array."""
        buffer = None if self.graph_buffers is None else self.graph_buffers[1]
        if buffer is None:
            if is_cuda(indices):
                return indices
            host = host_i32(indices, "indices")
            if self.torch:
                import torch

                return torch.from_numpy(host).to(self.workspace.device, non_blocking=True)
            cupy = sys.modules["cupy"]
            with self.workspace.device:
                return cupy.asarray(host)
        if indices is buffer or (self.torch and is_cuda(indices) and indices.data_ptr() == buffer.data_ptr()):
            return buffer
        n = indices.shape[0]
        if buffer.shape[0] < n:
            raise InvalidArgumentError("ignis.BatchDecodeWithPagedKVCacheWrapper.plan: paged_kv_indices_buffer holds "
                                       "%d entries but indices has %d" % (buffer.shape[0], n))
        if self.torch:
            import torch

            source = indices if isinstance(indices, torch.Tensor) else torch.from_numpy(host_i32(indices, "indices"))
            buffer[:n].copy_(source, non_blocking=True)
        else:
            buffer[:n].set(host_i32(indices, "indices"))
        return buffer


class BatchDecodeWithPagedKVCacheWrapper:
    """Batch decode over a paged KV cache, FlashInfer's wrapper: ``plan`` once per batch (host
    metadata), then ``run`` per layer.

    ``float_workspace_buffer`` is the caller's byte buffer (e.g. 128 MB of ``torch.uint8`` on the
    GPU); it holds the schedule and the split-KV partials, and its device decides where the plan
    runs (a host buffer: the CPU backend). With ``use_cuda_graph=True`` each plan's index arrays
    are copied into the fixed ``paged_kv_*_buffer`` tensors and the plan keeps its shape (at most
    ``len(paged_kv_last_page_len_buffer)`` requests), so a captured ``run`` serves every later
    plan: re-plan outside the graph, then replay it."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None):
        fn = "ignis.BatchDecodeWithPagedKVCacheWrapper"
        self._layout = layout_code(kv_layout)
        if jit_args is not None:
            raise UnsupportedError("%s: jit_args (FlashInfer's JIT attention variants) are not supported" % fn)
        self._use_cuda_graph = bool(use_cuda_graph)
        self._use_tensor_cores = use_tensor_cores
        self._graph_buffers = None
        if use_cuda_graph:
            buffers = (paged_kv_indptr_buffer, paged_kv_indices_buffer, paged_kv_last_page_len_buffer)
            if any(b is None for b in buffers):
                raise InvalidArgumentError("%s: use_cuda_graph=True needs paged_kv_indptr_buffer, "
                                           "paged_kv_indices_buffer and paged_kv_last_page_len_buffer" % fn)
            if buffers[0].shape[0] != buffers[2].shape[0] + 1:
                raise InvalidArgumentError("%s: paged_kv_indptr_buffer has %d entries but it must have "
                                           "len(paged_kv_last_page_len_buffer) + 1 = %d"
                                           % (fn, buffers[0].shape[0], buffers[2].shape[0] + 1))
            self._graph_buffers = buffers
        self._set_workspace(float_workspace_buffer)

    def _set_workspace(self, workspace):
        device_type, device_id = workspace.__dlpack_device__()
        self._workspace = workspace
        self._cuda = device_type == _ext.DLPACK_CUDA
        self._device_id = device_id if self._cuda else 0
        self._plan_workspace = workspace if self._cuda else None  # CPU plans keep their schedule on the host
        self._key = None  # the plan() arguments the current C plan was made for
        self._plan = None
        self._uploader = None
        self._indexes = None
        self._max_batch_seen = 0
        self._longest_seen = 0

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    @property
    def use_tensor_cores(self):
        return self._use_tensor_cores

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer=None):
        """Use another workspace buffer (plan again before the next run)."""
        self._set_workspace(float_workspace_buffer)

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
             kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
             non_blocking=True, block_tables=None, seq_lens=None, fixed_split_size=None, disable_split_kv=False,
             q_len_per_req=1, *, window_right=0, max_batch_size=None, max_kv_len=None, lse_base="2", stream=None):
        """Schedule the batch described by ``indptr`` ``[B+1]``, ``indices`` and
        ``last_page_len`` ``[B]`` (int32) for the following runs.

        Pass ``indptr`` and ``last_page_len`` as contiguous int32 host arrays (CPU tensors, NumPy)
        for the fast path (read in place, no synchronization); anything else is converted on the
        host first (a CUDA tensor synchronizes, as in FlashInfer). ``data_type`` (FlashInfer's old
        name) sets q's and K/V's dtypes where ``q_data_type`` / ``kv_data_type`` are not given;
        ``o_data_type`` must be q's. ``q_len_per_req`` (1..16) query tokens per request: ``run``
        then takes ``q`` ``[B * q_len_per_req, num_qo_heads, head_dim]``. ``fixed_split_size``
        (pages) splits every request the same way whatever the batch, ``disable_split_kv`` not at
        all: both make results batch-invariant. ``max_batch_size`` / ``max_kv_len`` bound the
        batches the plan serves (see the module's notes for the defaults)."""
        key = (num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left, logits_soft_cap,
               q_data_type, kv_data_type, o_data_type, data_type, sm_scale, rope_scale, rope_theta, fixed_split_size,
               disable_split_kv, q_len_per_req, max_batch_size, max_kv_len, lse_base)
        if key != self._key or window_right:
            self._configure(key, window_right)
        uploader = self._uploader
        staging = None if uploader is None or uploader.graph_buffers is None else uploader.staging
        batch = _ext.decode_plan_update(self._plan, indptr, last_page_len, self._plan_workspace, staging, stream)
        if batch.__class__ is not int:
            indptr, last_page_len, batch = self._update_slow(indptr, last_page_len, batch, stream)
            uploader = self._uploader
        if uploader is None:
            self._indexes = (indptr, indices, last_page_len)
        elif uploader.graph_buffers is None:
            # indptr / last_page_len: the copies the plan's one asynchronous copy put in the
            # workspace with the schedule (run passes None and the binding takes them from there)
            if stream is None:
                self._indexes = (None, uploader.indices(indices), None)
            else:
                with uploader.on_stream(stream):
                    self._indexes = (None, uploader.indices(indices), None)
        elif stream is None:
            device_indptr, device_last = uploader.upload(batch)
            self._indexes = (device_indptr, uploader.indices(indices), device_last)
        else:
            with uploader.on_stream(stream):
                device_indptr, device_last = uploader.upload(batch)
                self._indexes = (device_indptr, uploader.indices(indices), device_last)

    begin_forward = plan

    def _configure(self, key, window_right=0):
        """Resolve plan()'s configuration arguments and make the C plan (the slow path)."""
        fn = "ignis.BatchDecodeWithPagedKVCacheWrapper.plan"
        if window_right:
            raise UnsupportedError("%s: window_right=%r is not supported (0: no key right of a query token)"
                                   % (fn, window_right))
        (num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left, logits_soft_cap,
         q_data_type, kv_data_type, o_data_type, data_type, sm_scale, rope_scale, rope_theta, fixed_split_size,
         disable_split_kv, q_len_per_req, max_batch_size, max_kv_len, lse_base) = key
        if data_type is not None:
            if q_data_type is None or q_data_type == "float16":
                q_data_type = data_type
            if kv_data_type is None:
                kv_data_type = data_type
        q_code = dtype_code(fn, "q_data_type", q_data_type)
        if q_code not in Q_DTYPES:
            raise UnsupportedError("%s: q_data_type=%s is not supported: float16 or bfloat16" % (fn, q_data_type))
        kv_code = q_code if kv_data_type is None else dtype_code(fn, "kv_data_type", kv_data_type)
        if o_data_type is not None and dtype_code(fn, "o_data_type", o_data_type) != q_code:
            raise UnsupportedError("%s: o_data_type=%s but the output has q's dtype (%s)"
                                   % (fn, o_data_type, q_data_type))
        if not isinstance(q_len_per_req, int) or not 1 <= q_len_per_req:
            raise InvalidArgumentError("%s: q_len_per_req=%r must be a positive int" % (fn, q_len_per_req))
        self._key = None
        self._indexes = None
        # ignis_decode_plan_config by field name, but the maxima (_build sets them)
        self._config = dict(
            device_type=_ext.IGNIS_DEVICE_CUDA if self._cuda else _ext.IGNIS_DEVICE_CPU, device_id=self._device_id,
            num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, page_size=page_size,
            q_dtype=q_code, kv_dtype=kv_code, q_len_per_req=q_len_per_req, disable_split_kv=bool(disable_split_kv),
            fixed_split_size=fixed_split_size or 0,
            options=attention_options(fn, window_left, logits_soft_cap, sm_scale, lse_base, pos_encoding_mode,
                                      rope_scale, rope_theta))
        self._explicit = (max_batch_size, max_kv_len)
        self._build(self._max_batch_seen, self._longest_seen)
        self._key = key
        self._window_left = window_left
        self._q_len_per_req = q_len_per_req

    def _build(self, batch, longest):
        """Make the C plan for batches of up to `batch` requests and `longest` keys (at least)."""
        explicit_batch, explicit_kv_len = self._explicit
        if self._graph_buffers is not None:
            max_batch = self._graph_buffers[2].shape[0]
        elif explicit_batch is not None:
            max_batch = explicit_batch
        else:
            max_batch = next_pow2(batch, _MIN_MAX_BATCH)
        config = self._config
        if explicit_kv_len is not None:
            max_kv_len = explicit_kv_len
        elif not config["fixed_split_size"] or config["disable_split_kv"]:
            max_kv_len = INT32_MAX  # the workspace does not grow with it
        elif self._cuda and self._graph_buffers is not None:
            # the longest KV length whose fixed splits fit the CUDA-graph workspace, or the longest request
            bound = _ext.decode_max_kv_len_for_workspace(self._workspace.nbytes, max_batch_size=max_batch, **config)
            max_kv_len = max(longest, bound)
        else:  # the grid grows with the bound: keep it within twice the longest request seen
            max_kv_len = next_pow2(longest, _MIN_MAX_KV_LEN)
        plan = _ext.decode_plan_create(max_batch_size=max_batch, max_kv_len=max_kv_len, **config)
        self._max_batch, self._max_kv_len = max_batch, max_kv_len
        if self._cuda and (self._uploader is None or self._uploader.staging.shape[0] < 2 * max_batch + 1):
            self._uploader = _IndexUploader(self._workspace, max_batch, self._graph_buffers)
        self._plan = plan

    def _update_slow(self, indptr, last_page_len, declined, stream):
        """plan_update when the fast path declined (an _ext.PlanUpdateDeclined): index arrays not on
        the host as int32 (copied there), or a batch past the plan's maxima (a larger plan)."""
        fn = "ignis.BatchDecodeWithPagedKVCacheWrapper.plan"
        if declined.host_copy_needed:
            indptr, last_page_len = host_i32(indptr, "indptr"), host_i32(last_page_len, "last_page_len")
            declined = self._update(indptr, last_page_len, stream)
            if declined.__class__ is int:
                return indptr, last_page_len, declined
        batch, longest = declined.batch_size, declined.longest_kv_len
        explicit_batch, explicit_kv_len = self._explicit
        if batch > self._max_batch:
            if self._graph_buffers is not None:
                raise InvalidArgumentError("%s: the batch has %d requests but the CUDA-graph buffers hold %d"
                                           % (fn, batch, self._max_batch))
            if explicit_batch is not None:
                raise InvalidArgumentError("%s: the batch has %d requests but max_batch_size=%d"
                                           % (fn, batch, explicit_batch))
        if longest > self._max_kv_len and explicit_kv_len is not None:
            raise InvalidArgumentError("%s: a request has %d keys but max_kv_len=%d" % (fn, longest, explicit_kv_len))
        self._max_batch_seen = max(self._max_batch_seen, batch)
        self._longest_seen = max(self._longest_seen, longest)
        self._build(self._max_batch_seen, self._longest_seen)
        result = self._update(indptr, last_page_len, stream)
        if result.__class__ is not int:
            raise InvalidArgumentError("%s: the workspace (%d bytes) cannot hold the schedule of a request of %d keys "
                                       "with fixed_split_size=%d"
                                       % (fn, self._workspace.nbytes, longest, self._config["fixed_split_size"]))
        return indptr, last_page_len, result

    def _update(self, indptr, last_page_len, stream):
        uploader = self._uploader
        staging = None if uploader is None or uploader.graph_buffers is None else uploader.staging
        return _ext.decode_plan_update(self._plan, indptr, last_page_len, self._plan_workspace, staging, stream)

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None, q_len_per_req=None,
            skip_softmax_threshold_scale_factor=None, kv_cache_sf=None, stream=None):
        """Decode attention of the planned batch: ``q`` ``[B * q_len_per_req, num_qo_heads,
        head_dim]``, ``paged_kv_cache`` one ``[num_pages, 2, ...]`` tensor or a
        ``(k_cache, v_cache)`` tuple in the wrapper's layout and the planned K/V dtype. Returns
        ``out`` (like ``q``), or ``(out, lse)`` with ``return_lse`` (``lse`` ``[B * q_len_per_req,
        num_qo_heads]`` float32 in the plan's ``lse_base``). ``k_scale`` / ``v_scale`` /
        ``q_scale``: numbers (or one-element host tensors); ``sinks``: float32 ``[num_qo_heads]``
        on q's device."""
        fn = "ignis.BatchDecodeWithPagedKVCacheWrapper.run"
        if self._indexes is None:
            raise InvalidArgumentError("%s: call plan first" % fn)
        if args:
            raise UnsupportedError("%s: extra positional arguments (FlashInfer's JIT variants) are not supported" % fn)
        if skip_softmax_threshold_scale_factor is not None or kv_cache_sf is not None:
            raise UnsupportedError("%s: skip_softmax_threshold_scale_factor and kv_cache_sf (NVFP4 K/V) are not "
                                   "supported" % fn)
        if window_left is not None and window_left != self._window_left:
            raise InvalidArgumentError("%s: window_left=%r but plan() was given %r: re-plan to change it"
                                       % (fn, window_left, self._window_left))
        if q_len_per_req is not None and q_len_per_req != self._q_len_per_req:
            raise InvalidArgumentError("%s: q_len_per_req=%r but plan() was given %r: pass q_len_per_req to plan()"
                                       % (fn, q_len_per_req, self._q_len_per_req))
        k_cache, v_cache, kv_view = paged_kv_views(fn, paged_kv_cache)
        k_value = v_value = None
        if k_scale is not None or v_scale is not None or q_scale is not None:
            k_value, v_value = scales(fn, q_scale, k_scale, v_scale)
        finish = None
        if out is None:
            out, finish = new_output(q)
        if return_lse and lse is None:
            lse = new_f32(q, (q.shape[0], q.shape[1]))
        indptr, indices, last = self._indexes
        _ext.decode_run(self._plan, q, k_cache, v_cache, out, kv_indices=indices, kv_indptr=indptr,
                        kv_last_page_len=last, lse=lse, workspace=self._workspace, kv_layout=self._layout,
                        k_scale=k_value, v_scale=v_value, sinks=sinks, kv_view=kv_view, stream=stream)
        if finish is not None:
            out = finish(out)
        return (out, lse) if return_lse else out

    forward = run

    def run_return_lse(self, q, paged_kv_cache, *args, **kwargs):
        """``run`` with ``return_lse=True``."""
        return self.run(q, paged_kv_cache, *args, return_lse=True, **kwargs)

    def end_forward(self):
        """Kept for FlashInfer compatibility; nothing to release."""
