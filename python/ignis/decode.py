"""Decode attention with FlashInfer's names and arguments (flashinfer.decode).

``single_decode_with_kv_cache``: one query token ``q`` ``[num_qo_heads, head_dim]`` against
contiguous ``k`` / ``v`` ``[kv_len, num_kv_heads, head_dim]`` ("NHD") or
``[num_kv_heads, kv_len, head_dim]`` ("HND").

``BatchDecodeWithPagedKVCacheWrapper``: a batch of decode requests over a paged KV cache, split,
as in FlashInfer, into ``plan`` (host metadata, once per batch; the schedule goes into the
caller's workspace buffer) and ``run`` (per layer; never allocates or synchronizes on CUDA, so it
can be captured in a CUDA graph and replayed after re-planning). ``fast_decode_plan(wrapper,
...)`` is FlashInfer's module-level re-plan that the engines use between CUDA-graph replays, and
``CUDAGraphBatchDecodeWithPagedKVCacheWrapper`` the wrapper with ``use_cuda_graph=True``.

What is supported (the math is the header comment of include/ignis/decode.h):

- q f16 or bf16; K/V q's dtype, or fp8 (``torch.float8_e4m3fn`` / ``float8_e5m2``; NumPy arrays of
  ml_dtypes' ``float8_e4m3fn`` / ``float8_e5m2``) with any q. Head dims 64, 128, 256 and 512; any
  GQA group. ``data_type`` (FlashInfer's old name) sets K/V's dtype where ``kv_data_type`` is None and
  q's where ``q_data_type`` is None, as in FlashInfer (plan's ``q_data_type`` defaults to
  "float16", so there it sets K/V only). ``o_data_type`` must be q's (the kernels write q's dtype),
  except for the wrapper's fp8 q: ``q_data_type=float8_e4m3fn`` on an fp8 cache with
  ``o_data_type`` float16 or bfloat16 (FlashInfer's fp8 decode, as vLLM plans it on an fp8 KV
  cache): out is of ``o_data_type``, and q is converted to it exactly before the kernels run.
- ``k_scale`` / ``v_scale`` scale the keys and values of any dtype (FlashInfer folds ``k_scale``
  into the softmax scale and multiplies the output by ``v_scale``: the same result);
  ``q_scale`` multiplies the logits, so ignis folds it into ``k_scale``. Each is a Python number
  or a one-element host tensor; a CUDA tensor is refused (UnsupportedError) because reading it
  would synchronize with the device.
- ``pos_encoding_mode`` "NONE", "ROPE_LLAMA" (q and k rotated inside the kernel at their
  positions, ``rope_scale`` default 1, ``rope_theta`` default 1e4) or "ALIBI".
- ``sinks``: per-head sink logits, float32 ``[num_qo_heads]`` on q's device.
- ``window_left``, ``logits_soft_cap``, ``sm_scale`` (default ``1/sqrt(head_dim)``), and the LSE's
  base: ``lse_base="2"`` (FlashInfer's, default; ``"log2"``, FlashInfer's run-time name, is the
  same) or ``"ln"``.
- ``q_len_per_req`` (batch decode; speculative decoding, causal among a request's new tokens) is
  fixed by ``plan``, as the C plan is: q then has ``batch * q_len_per_req`` rows. ``run`` takes
  ``q_len_per_req=None`` (the planned value) or the planned value; another one raises
  InvalidArgumentError (re-plan with it). ``is_causal`` may be None or ``q_len_per_req > 1``, as
  in FlashInfer (UnsupportedError otherwise). ``run``'s ``window_left`` must be None or the
  wrapper's current value, as in FlashInfer.
- Index arrays: host or device, int32 or any other integer dtype (converted to int32, each entry
  checked to fit: InvalidArgumentError otherwise). ``seq_lens``, when given, is checked against the
  lengths ``indptr`` and ``last_page_len`` describe (InvalidArgumentError on a mismatch: ignis reads
  the lengths from those). ``block_tables`` raises UnsupportedError (the C plan takes CSR pages).
- The options FlashInfer keeps on the wrapper and applies at run time (``_pos_encoding_mode``,
  ``_window_left``, ``_logits_soft_cap`` (0.0 for None), ``_sm_scale`` (None: 1/sqrt(head_dim)),
  ``_rope_scale``, ``_rope_theta``) are attributes here too: ``plan`` sets them, the deprecated
  ``forward`` / ``forward_return_lse`` set them from their arguments (defaults included, as in
  FlashInfer), an engine may write them, and ``run`` applies them. The C plan fixes those options,
  so a run whose options differ from the active C plan's makes (once per configuration) and
  schedules a C plan for them; a later ``plan`` schedules the batch on whichever C plan the last
  run used, so that the steady state (plan, then runs or forwards with the same overrides, as
  SGLang's plan-without-sm_scale then ``forward(sm_scale=...)``) costs one schedule per plan.
  Options equal after defaults are filled in (``sm_scale=None`` and ``head_dim ** -0.5``, the
  engines' scale) share a C plan. Making a C plan cannot be captured: on CUDA a run that needs
  one while the stream is capturing raises InvalidArgumentError (run once with the same options
  before the capture). A captured run replays the C plan it captured, and a plan schedules the
  one the last run used: keep the runs of a wrapper whose run is captured on the options of the
  capture (the engines give their CUDA graphs wrappers of their own).

``use_tensor_cores``, ``backend``, ``enable_pdl`` and ``non_blocking`` are accepted and ignored
(ignis picks its kernel; plan copies are always asynchronous). Every call takes a keyword-only
``stream=``; plan and run must use the same stream. ``run`` also takes a page-size-1 cache
without its page axis (``(k, v)`` of ``[num_pages, num_kv_heads, head_dim]``, as SGLang's token
pools), as FlashInfer does. The workspace may be of any byte-sized dtype (``uint8``, ``int8``, ...).

How ``plan`` stays cheap (the budget is 10 us of host time at batch 256; bench/decode_plan_time.py
measures it): the C plan object is made once per configuration (heads, head dim, page size,
dtypes, options, q_len_per_req) and kept while later ``plan`` calls pass the same arguments;
each call then only schedules the batch (ignis_decode_plan_update), reading ``indptr`` and
``last_page_len`` in place when they are contiguous int32 host arrays (CPU tensors, NumPy). Other
index arrays are first copied to the host, and CUDA tensors are copied with a synchronization,
as FlashInfer's plan does: keep them on the host. ``fast_decode_plan`` is the same path; it takes
``global_override_indptr_cpu`` as the host indptr, and with page size 1 builds ``last_page_len``
on the host (all ones) instead of copying a device one back. On CUDA, ``indptr`` and
``last_page_len`` then reach the device in the plan's one asynchronous copy of its schedule, and
the runs read them there; ``indices`` is used in place when it is already on the device. The
plan's maxima are chosen so that it rarely needs re-making: the batch bound is the CUDA-graph
buffers' size, else ``max_batch_size=``, else the largest batch seen rounded up to a power of two
(at least 64); the KV-length bound is ``max_kv_len=``, else unbounded (the split-KV partials and
the launch stay within one wave of the GPU whatever the bound) except with ``fixed_split_size``,
whose work list grows with it: there it is the longest request seen rounded up to a power of two
(at least 4096), or with CUDA-graph buffers the longest the workspace holds, so that the plan and
a captured run stay valid. A batch past an implicit bound re-makes the plan;
one past an explicit bound, or past the CUDA-graph buffers, raises InvalidArgumentError.
``fixed_split_size`` None, -1 (FlashInfer's "off", vLLM's default) or 0 means no fixed split.

With CUDA-graph buffers (``use_cuda_graph=True``) ``plan`` and ``fast_decode_plan`` copy the
batch's page indices into the indices buffer (unless ``indices`` is that buffer, or a view of its
start, as SGLang and vLLM pass it) and ``run`` reads them there, on every backend: what an engine
writes into ``_paged_kv_indices_buf`` after the plan is what a captured run (or, on the CPU
backend, the next run) reads. ``indptr`` and ``last_page_len`` the runs read from the C plan, in
memory of its own that stays put for its life, so a captured run reads each later schedule's and
never a buffer that disagrees with the schedule. ``plan`` also copies them into the indptr and
last_page_len buffers, as FlashInfer's plan does; ``fast_decode_plan``, like FlashInfer's, leaves
those buffers as the engine wrote them (both engines fill them themselves), which spares it two
device copies per step. Batches may be smaller than the buffers (FlashInfer wants them equal);
``q_len_per_req`` is frozen by the first plan, as in FlashInfer.
"""

import sys

from . import _ext
from ._alloc import new_array, new_output
from ._common import (INT32_MAX, attention_dtypes, attention_options, attention_output, byte_workspace, capturing,
                      copy_index_into, device_i32, fixed_split, host_i32, is_cuda, kv_views, layout_code,
                      lse_base_name, nbytes_of, next_pow2, on_cuda, paged_kv_views, pos_encoding_code, q_view,
                      scales, single_workspace, to_device_of)
from ._errors import InvalidArgumentError, UnsupportedError

__all__ = ["single_decode_with_kv_cache", "BatchDecodeWithPagedKVCacheWrapper",
           "CUDAGraphBatchDecodeWithPagedKVCacheWrapper", "fast_decode_plan"]

_MIN_MAX_BATCH = 64
_MIN_MAX_KV_LEN = 4096
_PLAN = "ignis.BatchDecodeWithPagedKVCacheWrapper.plan"
_RUN = "ignis.BatchDecodeWithPagedKVCacheWrapper.run"


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
    lse = new_array(q, (q.shape[0],), "float32") if return_lse else None
    _ext.single_decode(q, k, v, out, lse=lse, workspace=workspace, kv_layout=layout, options=options, k_scale=k_value,
                       v_scale=v_value, sinks=sinks, kv_view=kv_view, stream=stream)
    return (finish(out), lse) if return_lse else finish(out)


class _IndexUploader:
    """The device side of plan's index arrays on CUDA. Page indices: used in place when on the
    device, else copied there (into the indices buffer in CUDA-graph mode). indptr /
    last_page_len: the runs read the copies the C plan uploads with its schedule, in the plan's own
    device memory (stable for the C plan's life, so a captured run reads each later schedule's);
    with CUDA-graph buffers, ``plan`` also fills the indptr and last_page_len buffers as
    FlashInfer's plan does (``graph_arrays``, decode_plan_update's argument:
    ignis_decode_plan_copy_index_arrays, device to device), ``fast_decode_plan`` does not (as
    FlashInfer's, which leaves them to the engine)."""

    def __init__(self, workspace, max_batch, graph_buffers):
        self.workspace = workspace
        self.max_batch = max_batch
        self.buffer = None if graph_buffers is None else graph_buffers[1]
        self.torch = hasattr(workspace, "new_empty")  # PyTorch
        # decode_plan_update's graph_buffers argument
        self.graph_arrays = None if graph_buffers is None else (graph_buffers[0], graph_buffers[2])

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

    def source(self, indices):
        """plan's page indices validated and as int32, before the schedule changes (a refused array
        changes nothing): the indices buffer itself, a device array used in place, or a host array
        that ``stage`` copies. Nothing is copied to the device here."""
        buffer = self.buffer
        if getattr(indices, "ndim", 1) != 1:
            raise InvalidArgumentError("%s: indices must be 1-D, not of shape %s" % (_PLAN, tuple(indices.shape)))
        dtype = getattr(indices, "dtype", None)
        int32 = _int32_dtypes.get(dtype)
        if int32 is None:
            int32 = _is_int32(dtype)
        if int32 and is_cuda(indices):  # the fast path: int32 on the device
            source = indices
            if buffer is None or indices is buffer:
                return source
        elif buffer is not None and indices is buffer:
            return buffer
        elif is_cuda(indices):
            source = device_i32(_PLAN, "indices", indices)
        else:
            source = host_i32(_PLAN, "indices", indices)
        if buffer is not None:
            if self.torch and is_cuda(source) and source.data_ptr() == buffer.data_ptr():
                return buffer
            _check_fits("indices", buffer, source)
        return source

    def stage(self, source, stream):
        """The run's (indptr, indices, last_page_len) once the batch is scheduled: indptr and
        last_page_len None (the run reads the plan's own copies), and the page indices: `source`
        (``source``'s answer) when it is the indices buffer or, without CUDA-graph buffers, on
        the device; else copied there (into the indices buffer in CUDA-graph mode) asynchronously
        on `stream`."""
        buffer = self.buffer
        if source is buffer or (buffer is None and is_cuda(source)):
            return None, source, None
        if stream is None:
            return None, self._copy(source), None
        with self.on_stream(stream):
            return None, self._copy(source), None

    def _copy(self, source):
        if self.buffer is None:
            return to_device_of(self.workspace, source)
        copy_index_into(_PLAN, "indices", self.buffer, source)
        return self.buffer


def _planned_option(index, name):
    """One of the options FlashInfer keeps on the wrapper for run() (``_sm_scale``, ...): reads the
    wrapper's current options; a write replaces that option and marks them changed, so that the
    next run applies it."""

    def get(self):
        return self._options[index]

    def set(self, value):
        options = list(self._options)
        options[index] = value
        self._options = tuple(options)
        self._options_changed = True

    return property(get, set, doc="FlashInfer's _%s: the value the next run applies" % name)


def _address(x):
    """Where a host array's data starts (PyTorch, NumPy; None for other arrays)."""
    if hasattr(x, "data_ptr"):
        return x.data_ptr()
    interface = getattr(x, "__array_interface__", None)
    return None if interface is None else interface["data"][0]


# dtype object -> whether it is int32, for plan's per-call checks of its arrays (str() of a NumPy
# dtype takes microseconds; a dict lookup, nanoseconds)
_int32_dtypes = {}


def _is_int32(dtype):
    """Whether a dtype object (any framework's, or None) is int32; remembered in _int32_dtypes."""
    int32 = _int32_dtypes[dtype] = str(dtype) in ("int32", "torch.int32")
    return int32


def _host_indices(indices, buffers):
    """Page indices for a CPU run: a 1-D int32 host array unchanged, anything else converted;
    checked against the CUDA-graph buffers' indices buffer (when there are buffers), so that
    plan refuses them before it schedules."""
    dtype = getattr(indices, "dtype", None)
    int32 = _int32_dtypes.get(dtype)
    if int32 is None:
        int32 = _is_int32(dtype)
    if not int32 or indices.ndim != 1:
        indices = host_i32(_PLAN, "indices", indices)
    if buffers is not None:
        _check_fits("indices", buffers[1], indices)
    return indices


def _check_fits(name, buffer, source):
    """copy_index_into's refusal of a source longer than its buffer, made before plan schedules."""
    if source.shape[0] > buffer.shape[0]:  # (len() of a PyTorch tensor costs a microsecond)
        raise InvalidArgumentError("%s: %s has %d entries but its buffer holds only %d"
                                   % (_PLAN, name, source.shape[0], buffer.shape[0]))


class BatchDecodeWithPagedKVCacheWrapper:
    """Batch decode over a paged KV cache, FlashInfer's wrapper: ``plan`` once per batch (host
    metadata), then ``run`` per layer.

    ``float_workspace_buffer`` is the caller's buffer of a byte-sized dtype (e.g. 128 MB of
    ``torch.uint8`` on the GPU); it holds the schedule and the split-KV partials, and its device
    decides where the plan runs (a host buffer: the CPU backend). With ``use_cuda_graph=True`` the
    fixed ``paged_kv_*_buffer`` tensors (FlashInfer's ``_paged_kv_indptr_buf``,
    ``_paged_kv_indices_buf``, ``_paged_kv_last_page_len_buf``) take each plan's index arrays
    (``fast_decode_plan``: the page indices only, as in FlashInfer; see the module's notes), run
    reads the page indices from theirs, and the plan keeps its shape (at most
    ``len(paged_kv_last_page_len_buffer)`` requests, FlashInfer's ``_fixed_batch_size``), so a
    captured ``run`` serves every later plan: re-plan outside the graph, then replay it."""

    _pos_encoding_mode = _planned_option(0, "pos_encoding_mode")
    _window_left = _planned_option(1, "window_left")
    _logits_soft_cap = _planned_option(2, "logits_soft_cap")
    _sm_scale = _planned_option(3, "sm_scale")
    _rope_scale = _planned_option(4, "rope_scale")
    _rope_theta = _planned_option(5, "rope_theta")

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None):
        fn = "ignis.BatchDecodeWithPagedKVCacheWrapper"
        self._layout = layout_code(kv_layout)
        if jit_args is not None:
            raise UnsupportedError("%s: jit_args (FlashInfer's JIT attention variants) are not supported" % fn)
        self._use_cuda_graph = bool(use_cuda_graph)
        self._use_tensor_cores = use_tensor_cores
        self._paged_kv_indptr_buf = paged_kv_indptr_buffer
        self._paged_kv_indices_buf = paged_kv_indices_buffer
        self._paged_kv_last_page_len_buf = paged_kv_last_page_len_buffer
        self._graph_buffers = None
        self._fixed_batch_size = 0
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
            self._indices_address = _address(buffers[1])  # the CPU backend's test for SGLang's in-place indices
            self._fixed_batch_size = buffers[2].shape[0]
        # the options run() applies (the FlashInfer attributes above), as plan() leaves them without arguments
        self._options = ("NONE", -1, 0.0, None, None, None)
        self._options_changed = False
        self._frozen_q_len = None  # q_len_per_req of the first plan with CUDA-graph buffers
        self._ones = None  # fast_decode_plan's host last_page_len for page size 1
        self._lengths = {}  # _check_seq_lens's host int32 lengths, by batch size
        self._set_workspace(float_workspace_buffer)

    def _set_workspace(self, workspace):
        workspace = byte_workspace(workspace)
        device_type, device_id = workspace.__dlpack_device__()
        self._workspace = workspace
        self._workspace_size = nbytes_of(workspace)
        self._cuda = device_type == _ext.DLPACK_CUDA
        self._device_id = device_id if self._cuda else 0
        self._plan_workspace = workspace if self._cuda else None  # CPU plans keep their schedule on the host
        self._key = None  # the plan() arguments the current C plans were made for
        self._plan = None  # the active C plan: the one the last schedule or run used
        self._base_plan = None  # the C plan of the planned options
        self._uploader = None
        self._indexes = None
        self._batch_arrays = None  # the scheduled batch's host indptr and last_page_len
        self._active_options = None  # options known to give the active C plan's (set by _build)
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
             q_len_per_req=1, *, window_right=0, is_causal=None, max_batch_size=None, max_kv_len=None, lse_base="2",
             stream=None):
        """Schedule the batch described by ``indptr`` ``[B+1]``, ``indices`` and
        ``last_page_len`` ``[B]`` (integer arrays, int32 for the fast path) for the following runs.

        Pass ``indptr`` and ``last_page_len`` as contiguous int32 host arrays (CPU tensors, NumPy)
        for the fast path (read in place, no synchronization); anything else is converted on the
        host first (a CUDA tensor synchronizes, as in FlashInfer). ``data_type`` (FlashInfer's old
        name) sets K/V's dtype where ``kv_data_type`` is None and q's where ``q_data_type`` is
        None; ``o_data_type`` must be q's, or float16 / bfloat16 with an fp8 q (module notes).
        ``q_len_per_req`` (1..16) query tokens per request:
        ``run`` then takes ``q`` ``[B * q_len_per_req, num_qo_heads, head_dim]``.
        ``fixed_split_size`` (pages; None, 0 or -1: off) splits every request the same way
        whatever the batch, ``disable_split_kv`` not at all: both make results batch-invariant.
        ``seq_lens`` is checked against the lengths ``indptr`` and ``last_page_len`` give;
        ``block_tables`` is refused. ``max_batch_size`` / ``max_kv_len`` bound the batches the
        plan serves (see the module's notes for the defaults)."""
        if block_tables is not None or is_causal is not None:
            _check_plan_extras(_PLAN, block_tables, is_causal, q_len_per_req)
        key = (num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left, logits_soft_cap,
               q_data_type, kv_data_type, o_data_type, data_type, sm_scale, rope_scale, rope_theta, fixed_split_size,
               disable_split_kv, q_len_per_req, max_batch_size, max_kv_len, lse_base)
        self._plan_batch(key, window_right, indptr, indices, last_page_len, stream, True)
        if seq_lens is not None:
            self._check_seq_lens(seq_lens, page_size)

    begin_forward = plan

    def _plan_batch(self, key, window_right, indptr, indices, last_page_len, stream, fill):
        """plan() once its configuration is a key (fast_decode_plan's too, with `fill` False): make
        the C plan when the configuration changed, schedule the batch on the active C plan, stage
        the index arrays the runs read, set the planned options; with CUDA-graph buffers and
        `fill`, also copy the planned indptr / last_page_len into their buffers. ``indices`` is
        validated before the schedule: a refused array changes nothing. The steady state (same
        key, int32 host indptr / last_page_len) is one C call and a few attribute reads;
        everything else is out of line."""
        if key != self._key or window_right:
            self._configure(key, window_right)
        uploader = self._uploader
        if uploader is None:  # the CPU backend
            indices = _host_indices(indices, self._graph_buffers)
            batch = _ext.decode_plan_update(self._plan, indptr, last_page_len, None, None, stream)
        else:
            indices = uploader.source(indices)
            batch = _ext.decode_plan_update(self._plan, indptr, last_page_len, self._plan_workspace,
                                            uploader.graph_arrays if fill else None, stream)
        if batch.__class__ is not int:
            indptr, last_page_len, batch = self._update_slow(indptr, last_page_len, batch, stream, fill)
            uploader = self._uploader
        self._batch_arrays = (indptr, last_page_len)
        if uploader is not None:
            self._indexes = uploader.stage(indices, stream)
        elif self._graph_buffers is None:
            self._indexes = (indptr, indices, last_page_len)
        else:
            self._indexes = self._host_indexes(indptr, indices, last_page_len, fill)
        self._options = self._planned_options
        self._options_changed = self._plan is not self._base_plan

    def _check_seq_lens(self, seq_lens, page_size):
        """FlashInfer's seq_lens must be the lengths the scheduled batch describes: ignis reads them
        from indptr and last_page_len. A mismatch un-plans the wrapper and raises."""
        import numpy

        indptr, last_page_len = self._batch_arrays
        batch = last_page_len.shape[0]
        lengths = self._lengths.get(batch)
        if lengths is None:
            lengths = self._lengths[batch] = numpy.empty(batch, numpy.int32)
        _ext.get_seq_lens(indptr, last_page_len, page_size, lengths, None)
        given = seq_lens
        int32 = given.__class__ is numpy.ndarray and _int32_dtypes.get(given.dtype)
        if int32 is None:
            int32 = _is_int32(given.dtype)
        if not int32 or given.ndim != 1:
            given = host_i32(_PLAN, "seq_lens", seq_lens)  # (a 1-D int32 NumPy array is one as it is)
        if given.tobytes() == lengths.tobytes():  # both int32: equal bytes, equal arrays (and faster)
            return
        self._indexes = None
        fn = _PLAN
        if given.shape != lengths.shape:
            raise InvalidArgumentError("%s: seq_lens has %d entries but the batch has %d requests"
                                       % (fn, given.shape[0], lengths.shape[0]))
        b = int(numpy.flatnonzero(given != lengths)[0])
        raise InvalidArgumentError("%s: seq_lens[%d]=%d but indptr and last_page_len give that request %d keys "
                                   "(ignis reads the lengths from them)" % (fn, b, int(given[b]), int(lengths[b])))

    def _host_indexes(self, indptr, indices, last_page_len, fill):
        """The CPU backend's index arrays for run with CUDA-graph buffers (indices already int32 on
        the host and known to fit), as on CUDA: the indices in their buffer, which run then reads
        as a replayed graph would (not copied when they are the indices buffer, which SGLang fills
        before planning); indptr / last_page_len None, the run reading the C plan's copies; with
        `fill` (plan, not fast_decode_plan) those are copied into their buffers too."""
        indptr_buffer, indices_buffer, last_buffer = self._graph_buffers
        if fill:
            copy_index_into(_PLAN, "indptr", indptr_buffer, indptr)
            copy_index_into(_PLAN, "last_page_len", last_buffer, last_page_len)
        if indices is not indices_buffer and _address(indices) != self._indices_address:
            copy_index_into(_PLAN, "indices", indices_buffer, indices)
        return None, indices_buffer, None

    def _plan_config(self, fn, key, window_right=0):
        """The ignis_decode_plan_config fields by name (but the maxima) of plan()'s configuration
        key, validated; and the options as FlashInfer stores them on the wrapper."""
        if window_right:
            raise UnsupportedError("%s: window_right=%r is not supported (0: no key right of a query token)"
                                   % (fn, window_right))
        (num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left, logits_soft_cap,
         q_data_type, kv_data_type, o_data_type, data_type, sm_scale, rope_scale, rope_theta, fixed_split_size,
         disable_split_kv, q_len_per_req, max_batch_size, max_kv_len, lse_base) = key
        if data_type is not None:
            if q_data_type is None:
                q_data_type = data_type
            if kv_data_type is None:
                kv_data_type = data_type
        if q_data_type is None:
            q_data_type = "float16"
        q_code, kv_code, o_dtype = attention_dtypes(fn, q_data_type, kv_data_type, o_data_type)
        if not isinstance(q_len_per_req, int) or not 1 <= q_len_per_req:
            raise InvalidArgumentError("%s: q_len_per_req=%r must be a positive int" % (fn, q_len_per_req))
        config = dict(
            device_type=_ext.IGNIS_DEVICE_CUDA if self._cuda else _ext.IGNIS_DEVICE_CPU, device_id=self._device_id,
            num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads, head_dim=head_dim, page_size=page_size,
            q_dtype=q_code, kv_dtype=kv_code, o_dtype=o_dtype, q_len_per_req=q_len_per_req,
            disable_split_kv=bool(disable_split_kv),
            fixed_split_size=fixed_split(fixed_split_size),
            options=attention_options(fn, window_left, logits_soft_cap, sm_scale, lse_base, pos_encoding_mode,
                                      rope_scale, rope_theta))
        stored = (pos_encoding_mode, window_left, 0.0 if logits_soft_cap is None else logits_soft_cap, sm_scale,
                  rope_scale, rope_theta)
        return config, stored

    def _configure(self, key, window_right=0):
        """Resolve plan()'s configuration arguments and make the C plan (the slow path)."""
        fn = _PLAN
        config, stored = self._plan_config(fn, key, window_right)
        q_len_per_req = key[16]
        if self._graph_buffers is not None and self._frozen_q_len not in (None, q_len_per_req):
            raise InvalidArgumentError("%s: q_len_per_req=%d but this CUDA-graph wrapper was planned with %d (it is "
                                       "part of the captured shape: use another wrapper)"
                                       % (fn, q_len_per_req, self._frozen_q_len))
        self._key = None
        self._indexes = None
        self._config = config
        self._lse_base = lse_base_name(fn, key[19])
        self._planned_options = stored
        self._canonical_options = {}
        self._base_options = self._canonical(stored)
        self._explicit = (key[17], key[18])
        self._build(self._max_batch_seen, self._longest_seen)
        self._key = key
        self._q_len_per_req = q_len_per_req
        if self._graph_buffers is not None:
            self._frozen_q_len = q_len_per_req

    def _canonical(self, options):
        """The values a C plan is made for from the wrapper's options (FlashInfer's attributes; None
        for a default): options that differ only in how a default is given share a C plan. The
        default sm_scale is written head_dim ** -0.5, as vLLM and SGLang compute the scale they
        pass (for head dim 128 it differs from 1 / sqrt(128) in the last bit)."""
        pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta = options
        return (pos_encoding_code(_RUN, pos_encoding_mode), window_left,
                0.0 if logits_soft_cap is None else logits_soft_cap,
                self._config["head_dim"] ** -0.5 if sm_scale is None else sm_scale,
                1.0 if rope_scale is None else rope_scale, 1e4 if rope_theta is None else rope_theta)

    def _maxima(self, config, explicit, batch, longest):
        """(max_batch_size, max_kv_len) of a C plan for batches of up to `batch` requests and
        `longest` keys (at least)."""
        explicit_batch, explicit_kv_len = explicit
        if self._graph_buffers is not None:
            max_batch = self._graph_buffers[2].shape[0]
        elif explicit_batch is not None:
            max_batch = explicit_batch
        else:
            max_batch = next_pow2(batch, _MIN_MAX_BATCH)
        if explicit_kv_len is not None:
            max_kv_len = explicit_kv_len
        elif not config["fixed_split_size"] or config["disable_split_kv"]:
            max_kv_len = INT32_MAX  # the workspace does not grow with it
        elif self._cuda and self._graph_buffers is not None:
            # the longest KV length whose fixed splits fit the CUDA-graph workspace, or the longest request
            bound = _ext.decode_max_kv_len_for_workspace(self._workspace_size, max_batch_size=max_batch, **config)
            max_kv_len = max(longest, bound)
        else:  # the grid grows with the bound: keep it within twice the longest request seen
            max_kv_len = next_pow2(longest, _MIN_MAX_KV_LEN)
        return max_batch, max_kv_len

    def _build(self, batch, longest):
        """Make the C plan of the planned options for batches of up to `batch` requests and
        `longest` keys (at least); it becomes the active one and the only one kept."""
        max_batch, max_kv_len = self._maxima(self._config, self._explicit, batch, longest)
        plan = _ext.decode_plan_create(max_batch_size=max_batch, max_kv_len=max_kv_len, **self._config)
        self._max_batch, self._max_kv_len = max_batch, max_kv_len
        if self._cuda and (self._uploader is None or self._uploader.max_batch < max_batch):
            self._uploader = _IndexUploader(self._workspace, max_batch, self._graph_buffers)
        self._plan = self._base_plan = plan
        self._plans = {self._base_options: plan}  # C plan by canonical options, all of these maxima
        self._active = self._base_options  # the canonical options of the active C plan
        self._active_options = self._planned_options  # options known to give them

    def _update_slow(self, indptr, last_page_len, declined, stream, fill):
        """plan_update when the fast path declined (an _ext.PlanUpdateDeclined): index arrays not on
        the host as int32 (copied there), or a batch past the plan's maxima (a larger plan); `fill`
        as _plan_batch's."""
        fn = _PLAN
        if declined.host_copy_needed:
            indptr = host_i32(fn, "indptr", indptr)
            last_page_len = host_i32(fn, "last_page_len", last_page_len)
            declined = self._update(indptr, last_page_len, stream, fill)
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
        result = self._update(indptr, last_page_len, stream, fill)
        if result.__class__ is not int:
            raise InvalidArgumentError("%s: the workspace (%d bytes) cannot hold the split partials of a request of "
                                       "%d keys with fixed_split_size=%d"
                                       % (fn, self._workspace_size, longest, self._config["fixed_split_size"]))
        return indptr, last_page_len, result

    def _update(self, indptr, last_page_len, stream, fill):
        uploader = self._uploader
        arrays = None if uploader is None or not fill else uploader.graph_arrays
        return _ext.decode_plan_update(self._plan, indptr, last_page_len, self._plan_workspace, arrays, stream)

    def _apply_options(self, stream):
        """Make the active C plan the one of the wrapper's current options (forward's overrides, or
        option attributes an engine wrote): each distinct set gets its own C plan, made once per
        configuration and scheduled with the planned batch when it becomes active."""
        fn = _RUN
        options = self._options
        try:
            canonical = self._canonical_options.get(options)
        except TypeError:  # an unhashable option: _canonical and the C plan judge it
            canonical = None
        if canonical is None:
            canonical = self._canonical(options)
            try:
                self._canonical_options[options] = canonical
            except TypeError:
                pass
        if canonical != self._active:
            if capturing(self._workspace):
                raise InvalidArgumentError(
                    "%s: the options (forward's overrides or the wrapper's option attributes) differ from the "
                    "active plan's and the stream is capturing a CUDA graph, where ignis cannot re-plan: run once "
                    "with the same options before the capture" % fn)
            plan = self._plans.get(canonical)
            if plan is None:
                pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta = options
                config = dict(self._config, options=attention_options(
                    fn, window_left, logits_soft_cap, sm_scale, self._lse_base, pos_encoding_mode, rope_scale,
                    rope_theta))
                plan = _ext.decode_plan_create(max_batch_size=self._max_batch, max_kv_len=self._max_kv_len, **config)
                self._plans[canonical] = plan
            indptr, last_page_len = self._batch_arrays
            scheduled = _ext.decode_plan_update(plan, indptr, last_page_len, self._plan_workspace, None, stream)
            if scheduled.__class__ is not int:
                raise InvalidArgumentError("%s: the planned indptr / last_page_len arrays changed since plan(): "
                                           "plan again" % fn)
            self._plan, self._active = plan, canonical
        self._active_options = options
        self._options_changed = False

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None, q_len_per_req=None,
            skip_softmax_threshold_scale_factor=None, kv_cache_sf=None, stream=None):
        """Decode attention of the planned batch: ``q`` ``[B * q_len_per_req, num_qo_heads,
        head_dim]``, ``paged_kv_cache`` one ``[num_pages, 2, ...]`` tensor or a
        ``(k_cache, v_cache)`` tuple in the wrapper's layout and the planned K/V dtype (page size
        1 also without the page axis). Returns ``out`` (like ``q``), or ``(out, lse)`` with
        ``return_lse`` (``lse`` ``[B * q_len_per_req, num_qo_heads]`` float32 in the plan's
        ``lse_base``; a given ``lse`` is written either way). ``k_scale`` / ``v_scale`` /
        ``q_scale``: numbers (or one-element host tensors); ``sinks``: float32 ``[num_qo_heads]``
        on q's device. The wrapper's options (see the module's notes) apply."""
        fn = _RUN
        if self._indexes is None:
            raise InvalidArgumentError("%s: call plan first" % fn)
        if args:
            raise UnsupportedError("%s: extra positional arguments (FlashInfer's JIT variants) are not supported" % fn)
        if skip_softmax_threshold_scale_factor is not None or kv_cache_sf is not None:
            raise UnsupportedError("%s: skip_softmax_threshold_scale_factor and kv_cache_sf (NVFP4 K/V) are not "
                                   "supported" % fn)
        if window_left is not None and window_left != self._options[1]:
            raise InvalidArgumentError("%s: window_left=%r but the wrapper's is %r (plan's, or forward's): re-plan "
                                       "to change it" % (fn, window_left, self._options[1]))
        if q_len_per_req is not None and q_len_per_req != self._q_len_per_req:
            raise InvalidArgumentError("%s: q_len_per_req=%r but plan() was given %r: pass q_len_per_req to plan()"
                                       % (fn, q_len_per_req, self._q_len_per_req))
        if self._options_changed:
            self._apply_options(stream)
        k_cache, v_cache, kv_view = paged_kv_views(fn, paged_kv_cache, self._layout)
        k_value = v_value = None
        if k_scale is not None or v_scale is not None or q_scale is not None:
            k_value, v_value = scales(fn, q_scale, k_scale, v_scale)
        finish = None
        if out is None:
            out, finish = attention_output(q, self._config["o_dtype"])
        if return_lse and lse is None:
            lse = new_array(q, (q.shape[0], q.shape[1]), "float32")
        indptr, indices, last = self._indexes
        q, view = q_view(q)
        _ext.decode_run(self._plan, q, k_cache, v_cache, out, kv_indices=indices, kv_indptr=indptr,
                        kv_last_page_len=last, lse=lse, workspace=self._workspace, kv_layout=self._layout,
                        k_scale=k_value, v_scale=v_value, sinks=sinks, kv_view=kv_view, q_view=view, stream=stream)
        if finish is not None:
            out = finish(out)
        return (out, lse) if return_lse else out

    def forward(self, q, paged_kv_cache, pos_encoding_mode="NONE", q_scale=None, k_scale=None, v_scale=None,
                window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None, rope_theta=None, *,
                stream=None):
        """FlashInfer's deprecated form of ``run``: its options (defaults included, as in
        FlashInfer) replace the wrapper's for this call and later runs, until the next plan.
        SGLang's ``forward(q, kv, sm_scale=, logits_soft_cap=, k_scale=, v_scale=)`` after a plan
        without them is the common case: its first call per configuration makes a C plan for them,
        later ones reuse it."""
        self._set_forward_options(pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta)
        return self.run(q, paged_kv_cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, stream=stream)

    def forward_return_lse(self, q, paged_kv_cache, pos_encoding_mode="NONE", q_scale=None, k_scale=None,
                           v_scale=None, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
                           rope_theta=None, *, stream=None):
        """``forward`` returning ``(out, lse)``."""
        self._set_forward_options(pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta)
        return self.run(q, paged_kv_cache, q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, return_lse=True,
                        stream=stream)

    def _set_forward_options(self, pos_encoding_mode, window_left, logits_soft_cap, sm_scale, rope_scale, rope_theta):
        options = (pos_encoding_mode, window_left, 0.0 if logits_soft_cap is None else logits_soft_cap, sm_scale,
                   rope_scale, rope_theta)
        self._options = options
        self._options_changed = options != self._active_options

    def run_return_lse(self, q, paged_kv_cache, *args, **kwargs):
        """``run`` with ``return_lse=True``."""
        return self.run(q, paged_kv_cache, *args, return_lse=True, **kwargs)

    def workspace_size(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                       pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
                       kv_data_type=None, o_data_type=None, data_type=None, sm_scale=None, rope_scale=None,
                       rope_theta=None, block_tables=None, seq_lens=None, fixed_split_size=None,
                       disable_split_kv=False, q_len_per_req=1):
        """FlashInfer's query of the workspace ``plan`` with these arguments needs:
        ``(float_workspace_bytes, int_workspace_bytes)``. ignis' runs keep their split partials in
        the one workspace and its plans their schedule in memory of their own, so the second is 0,
        and CPU plans need no workspace, so there both are 0. The arguments are validated as plan() validates them; the wrapper's plan is
        not changed."""
        import numpy

        fn = "ignis.BatchDecodeWithPagedKVCacheWrapper.workspace_size"
        _check_plan_extras(fn, block_tables, None, q_len_per_req)
        key = (num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left, logits_soft_cap,
               q_data_type, kv_data_type, o_data_type, data_type, sm_scale, rope_scale, rope_theta, fixed_split_size,
               disable_split_kv, q_len_per_req, None, None, "2")
        config, _ = self._plan_config(fn, key)
        indptr = host_i32(fn, "indptr", indptr)
        last_page_len = host_i32(fn, "last_page_len", last_page_len)
        if last_page_len.shape[0] != indptr.shape[0] - 1:
            raise InvalidArgumentError("%s: last_page_len has %d entries but indptr (%d entries) describes %d "
                                       "requests" % (fn, last_page_len.shape[0], indptr.shape[0],
                                                     max(indptr.shape[0] - 1, 0)))
        lengths = numpy.empty(last_page_len.shape[0], numpy.int32)
        _ext.get_seq_lens(indptr, last_page_len, page_size, lengths, None)
        if seq_lens is not None and not numpy.array_equal(host_i32(fn, "seq_lens", seq_lens), lengths):
            raise InvalidArgumentError("%s: seq_lens differs from the lengths indptr and last_page_len give (ignis "
                                       "reads the lengths from them)" % fn)
        longest = int(lengths.max()) if lengths.shape[0] else 0
        max_batch, max_kv_len = self._maxima(config, (None, None), lengths.shape[0], longest)
        return _workspace_bytes(fn, config, max_batch, max_kv_len), 0

    def end_forward(self):
        """Kept for FlashInfer compatibility; nothing to release."""


def _check_plan_extras(fn, block_tables, is_causal, q_len_per_req):
    """plan()'s arguments that ignis takes only in their FlashInfer-default form."""
    if block_tables is not None:
        raise UnsupportedError("%s: block_tables is not supported: ignis reads each request's pages from indptr "
                               "and indices (pass block_tables=None)" % fn)
    if is_causal is not None and bool(is_causal) != (q_len_per_req > 1):
        raise UnsupportedError("%s: is_causal=%r with q_len_per_req=%r is not supported: decode is causal among a "
                               "request's query tokens exactly when q_len_per_req > 1 (as in FlashInfer)"
                               % (fn, is_causal, q_len_per_req))


def _workspace_bytes(fn, config, max_batch, max_kv_len):
    """The workspace bytes a C plan of config and these maxima needs: 0 on the CPU; on CUDA the
    least size for which ignis_decode_max_kv_len_for_workspace reaches max_kv_len (that bound
    grows with the size, so a bisection finds it exactly)."""
    if config["device_type"] != _ext.IGNIS_DEVICE_CUDA:
        _ext.decode_max_kv_len_for_workspace(0, max_batch_size=max_batch, **config)  # validates the configuration
        return 0

    def serves(nbytes):
        return _ext.decode_max_kv_len_for_workspace(nbytes, max_batch_size=max_batch, **config) >= max_kv_len

    high = 1 << 20
    while not serves(high):
        if high >= 1 << 50:
            raise InvalidArgumentError("%s: no workspace size serves this configuration" % fn)
        high *= 2
    low = 0
    while low < high:
        middle = (low + high) // 2
        if serves(middle):
            high = middle
        else:
            low = middle + 1
    return high


class CUDAGraphBatchDecodeWithPagedKVCacheWrapper(BatchDecodeWithPagedKVCacheWrapper):
    """FlashInfer's CUDA-graph decode wrapper: ``BatchDecodeWithPagedKVCacheWrapper`` with
    ``use_cuda_graph=True`` and the three index buffers (``indptr_buffer`` ``[max_batch + 1]``,
    ``indices_buffer`` ``[max_pages]``, ``last_page_len_buffer`` ``[max_batch]``) the plans fill
    and the captured runs read."""

    def __init__(self, workspace_buffer, indptr_buffer, indices_buffer, last_page_len_buffer, kv_layout="NHD",
                 use_tensor_cores=False):
        super().__init__(workspace_buffer, kv_layout, use_cuda_graph=True, use_tensor_cores=use_tensor_cores,
                         paged_kv_indptr_buffer=indptr_buffer, paged_kv_indices_buffer=indices_buffer,
                         paged_kv_last_page_len_buffer=last_page_len_buffer)


def fast_decode_plan(wrapper, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                     pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type=None,
                     kv_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
                     non_blocking=True, fixed_split_size=None, disable_split_kv=False, q_len_per_req=1,
                     global_override_indptr_cpu=None, *, stream=None):
    """FlashInfer's re-plan of a decode wrapper between CUDA-graph replays (vLLM calls it after a
    first ``wrapper.plan``; SGLang binds it as ``begin_forward`` with ``functools.partial``).
    ignis' ``plan`` is already the host-only path, so this is ``plan`` with FlashInfer's
    differences: ``q_data_type`` None means ``data_type``, else "float16"; ``o_data_type``,
    ``max_batch_size``, ``max_kv_len`` and ``lse_base`` are the wrapper's last plan's (so that the
    C plan is kept); ``global_override_indptr_cpu``, when given, is the host indptr (SGLang's
    ``indptr`` is then on the device); with page size 1, a device ``last_page_len`` is not copied
    back (every request's last page holds its one key, as FlashInfer assumes); on a CUDA-graph
    wrapper the indptr and last_page_len buffers are left as they are, as FlashInfer leaves them
    (the runs read the plan's own copies)."""
    if q_data_type is None:
        q_data_type = "float16" if data_type is None else data_type
    if global_override_indptr_cpu is not None:
        indptr = global_override_indptr_cpu
    if page_size == 1 and getattr(last_page_len, "is_cuda", False):
        last_page_len = _host_ones(wrapper, last_page_len.shape[0])
    last = wrapper._key
    if last is None:
        last = (None,) * 17 + (None, None, "2")
    key = (num_qo_heads, num_kv_heads, head_dim, page_size, pos_encoding_mode, window_left, logits_soft_cap,
           q_data_type, kv_data_type, last[9], data_type, sm_scale, rope_scale, rope_theta, fixed_split_size,
           disable_split_kv, q_len_per_req, last[17], last[18], last[19])
    wrapper._plan_batch(key, 0, indptr, indices, last_page_len, stream, False)


def _host_ones(wrapper, batch):
    """A host int32 array of `batch` ones, kept on the wrapper (fast_decode_plan's page-size-1 last_page_len)."""
    ones = wrapper._ones
    if ones is None or ones.shape[0] < batch:
        import numpy

        ones = wrapper._ones = numpy.ones(max(batch, _MIN_MAX_BATCH), numpy.int32)
    return ones[:batch]
