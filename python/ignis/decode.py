"""Decode attention with FlashInfer's names and arguments (flashinfer.decode).

``single_decode_with_kv_cache``: one query token ``q`` ``[num_qo_heads, head_dim]`` against
contiguous ``k`` / ``v`` ``[kv_len, num_kv_heads, head_dim]`` ("NHD") or
``[num_kv_heads, kv_len, head_dim]`` ("HND").

``BatchDecodeWithPagedKVCacheWrapper``: a batch of decode requests over a paged KV cache, split,
as in FlashInfer, into ``plan`` (host metadata, once per batch shape; the schedule goes into the
caller's workspace buffer) and ``run`` (per layer; never allocates or synchronizes on CUDA, so it
can be captured in a CUDA graph and replayed after re-planning).

q / K / V are f16 or bf16 (one dtype); head dims 64, 128 and 256; any GQA group. Options:
``sm_scale`` (default ``1/sqrt(head_dim)``), ``logits_soft_cap``, ``window_left`` (sliding window),
and the LSE's base: ``lse_base="2"`` (FlashInfer's, default) or ``"ln"``. RoPE / ALiBi inside the
kernel (``pos_encoding_mode`` other than ``"NONE"``) and fp8 K/V scales are not supported yet:
they raise :class:`ignis.UnsupportedError`. ``use_tensor_cores`` is accepted and ignored (ignis
picks its kernel). Every call takes a keyword-only ``stream=``.
"""

import sys

from . import _ext
from ._alloc import new_output
from ._errors import ArgumentTypeError, InvalidArgumentError, UnsupportedError

__all__ = ["single_decode_with_kv_cache", "BatchDecodeWithPagedKVCacheWrapper"]

_LAYOUTS = {"NHD": 0, "HND": 1}
_BASES = {"2": 0, "ln": 1}
_IGNIS_F16, _IGNIS_BF16 = 1, 2
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3


def _layout(kv_layout):
    try:
        return _LAYOUTS[kv_layout]
    except (KeyError, TypeError):
        raise InvalidArgumentError("kv_layout=%r must be 'NHD' or 'HND'" % (kv_layout,)) from None


def _base(lse_base):
    try:
        return _BASES[lse_base]
    except (KeyError, TypeError):
        raise InvalidArgumentError("lse_base=%r must be '2' or 'ln'" % (lse_base,)) from None


def _check_supported(fn, pos_encoding_mode, scales=()):
    if pos_encoding_mode != "NONE":
        raise UnsupportedError(
            "%s: pos_encoding_mode=%r is not supported yet: apply RoPE to q and k first "
            "(ignis.apply_rope*) and pass pos_encoding_mode='NONE'" % (fn, pos_encoding_mode)
        )
    for name, value in scales:
        if value is not None:
            raise UnsupportedError("%s: %s is for fp8 K/V, which is not supported yet" % (fn, name))


def _dtype_code(fn, dtype):
    """f16 / bf16 from a torch, NumPy or ml_dtypes dtype, or a name."""
    name = str(dtype).replace("torch.", "")
    if name in ("bfloat16", "bf16"):
        return _IGNIS_BF16
    if name in ("float16", "half", "f16"):
        return _IGNIS_F16
    raise UnsupportedError("%s: data type %s is not supported: q and K/V must be float16 or bfloat16" % (fn, dtype))


def _new_f32(like, shape):
    """An uninitialized float32 array on like's device, in like's framework."""
    if hasattr(like, "new_empty"):  # PyTorch
        import torch  # already imported: like is a torch tensor

        return like.new_empty(shape, dtype=torch.float32)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(like, numpy.ndarray):
        return numpy.empty(shape, dtype=numpy.float32)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(like, cupy.ndarray):
        with like.device:
            return cupy.empty(shape, dtype=cupy.float32)
    if hasattr(like, "__array_namespace__"):
        namespace = like.__array_namespace__()
        return namespace.empty(shape, dtype=namespace.float32, device=like.device)
    raise ArgumentTypeError("ignis cannot allocate an array like a %s: pass lse=" % type(like).__qualname__)


def _on_cuda(x):
    return x.__dlpack_device__()[0] == _DL_CUDA


# Scratch for single decode's split-KV partials on CUDA, per (framework type, device), grown on demand.
_single_workspaces = {}


def _single_workspace(q, nbytes):
    if nbytes == 0 or not _on_cuda(q):
        return None
    key = (type(q), q.__dlpack_device__()[1])
    buffer = _single_workspaces.get(key)
    if buffer is None or buffer.shape[0] < nbytes:
        if hasattr(q, "new_empty"):
            import torch

            buffer = q.new_empty((nbytes,), dtype=torch.uint8)
        elif sys.modules.get("cupy") is not None and isinstance(q, sys.modules["cupy"].ndarray):
            with q.device:
                buffer = sys.modules["cupy"].empty((nbytes,), dtype=sys.modules["cupy"].uint8)
        else:
            raise ArgumentTypeError(
                "ignis cannot allocate a CUDA workspace like a %s (PyTorch and CuPy are supported)"
                % type(q).__qualname__
            )
        _single_workspaces[key] = buffer
    return buffer


def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", pos_encoding_mode="NONE", use_tensor_cores=False,
                                q_scale=None, k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None,
                                sm_scale=None, rope_scale=None, rope_theta=None, return_lse=False, *, lse_base="2",
                                stream=None):
    """Decode attention of one request: ``q`` ``[num_qo_heads, head_dim]`` against ``k`` / ``v``
    (``[kv_len, num_kv_heads, head_dim]`` for "NHD", ``[num_kv_heads, kv_len, head_dim]`` for
    "HND"; any leading strides). Returns ``out`` ``[num_qo_heads, head_dim]`` (q's dtype), or
    ``(out, lse)`` with ``return_lse`` (``lse`` ``[num_qo_heads]`` float32 in base ``lse_base``).
    With no keys, ``out`` is 0 and ``lse`` is -inf. On CUDA, long sequences are split across the
    GPU; the scratch for that is allocated once per device and kept."""
    fn = "ignis.single_decode_with_kv_cache"
    _check_supported(fn, pos_encoding_mode, (("q_scale", q_scale), ("k_scale", k_scale), ("v_scale", v_scale)))
    layout = _layout(kv_layout)
    kv_len = k.shape[0] if layout == 0 else k.shape[1]
    workspace = None
    if _on_cuda(q):
        nbytes = _ext.single_decode_workspace_size(q.shape[0], q.shape[-1], kv_len)
        workspace = _single_workspace(q, nbytes)
    out, finish = new_output(q)
    lse = _new_f32(q, (q.shape[0],)) if return_lse else None
    _ext.single_decode(q, k, v, layout, sm_scale or 0.0, logits_soft_cap or 0.0, window_left, _base(lse_base), out,
                       lse, workspace, stream)
    return (finish(out), lse) if return_lse else finish(out)


def _host_i32(x, name):
    """x as a contiguous int32 NumPy array on the host (a CUDA tensor is copied: a sync)."""
    import numpy

    if hasattr(x, "detach"):  # PyTorch: .cpu() is a no-op on the host
        x = x.detach().cpu().numpy()
    elif hasattr(x, "get"):  # CuPy
        x = x.get()
    array = numpy.ascontiguousarray(numpy.asarray(x), dtype=numpy.int32)
    if array.ndim != 1:
        raise InvalidArgumentError("%s must be 1-D, not %d-D" % (name, array.ndim))
    return array


def _device_i32_like(workspace, array, buffer):
    """The int32 host array on the workspace's device, in its framework: written into `buffer` (a
    preallocated CUDA-graph buffer) when given, else a new array."""
    if buffer is not None:
        n = array.shape[0]
        if buffer.shape[0] < n:
            raise InvalidArgumentError("a paged_kv_*_buffer holds %d entries but plan needs %d" % (buffer.shape[0], n))
        view = buffer[:n]
        if hasattr(view, "copy_"):
            import torch

            view.copy_(torch.from_numpy(array), non_blocking=True)
        else:
            view[...] = array
        return view
    if hasattr(workspace, "new_empty"):
        import torch

        return torch.from_numpy(array).to(workspace.device, non_blocking=True)
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(workspace, cupy.ndarray):
        with workspace.device:
            return cupy.asarray(array)
    raise ArgumentTypeError("ignis cannot place index arrays like a %s" % type(workspace).__qualname__)


def _next_pow2(n, floor):
    p = floor
    while p < n:
        p *= 2
    return p


class BatchDecodeWithPagedKVCacheWrapper:
    """Batch decode over a paged KV cache, FlashInfer's wrapper: ``plan`` once per batch (host
    metadata), then ``run`` per layer.

    ``float_workspace_buffer`` is the caller's byte buffer (e.g. 128 MB of ``torch.uint8`` on the
    GPU); it holds the schedule and the split-KV partials, and its device decides where the plan
    runs (a host buffer: the CPU backend). With ``use_cuda_graph=True`` the index arrays of each
    plan are copied into the fixed ``paged_kv_*_buffer`` tensors, so a captured ``run`` sees every
    later plan, and ``max_batch_size`` defaults to ``len(paged_kv_indptr_buffer) - 1``."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, use_tensor_cores=False,
                 paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None, paged_kv_last_page_len_buffer=None,
                 backend="auto", jit_args=None):
        self._layout = _layout(kv_layout)
        self._workspace = float_workspace_buffer
        device_type, device_id = float_workspace_buffer.__dlpack_device__()
        self._cuda = device_type == _DL_CUDA
        self._device_id = device_id if self._cuda else 0
        self._use_cuda_graph = use_cuda_graph
        if use_cuda_graph and (paged_kv_indptr_buffer is None or paged_kv_indices_buffer is None
                               or paged_kv_last_page_len_buffer is None):
            raise InvalidArgumentError("use_cuda_graph=True needs paged_kv_indptr_buffer, paged_kv_indices_buffer "
                                       "and paged_kv_last_page_len_buffer")
        self._buffers = (paged_kv_indptr_buffer, paged_kv_indices_buffer, paged_kv_last_page_len_buffer)
        self._plan = None
        self._plan_key = None
        self._indexes = None

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer=None):
        """Use another workspace buffer (plan again before the next run)."""
        self._workspace = float_workspace_buffer
        self._indexes = None

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
             kv_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None, non_blocking=True,
             fixed_split_size=None, disable_split_kv=False, *, max_batch_size=None, max_kv_len=None, lse_base="2",
             stream=None):
        """Schedule the batch described by ``indptr`` ``[B+1]``, ``indices`` and
        ``last_page_len`` ``[B]`` (int32) for the following runs.

        The schedule is computed on the host from ``indptr`` and ``last_page_len``: pass them as
        host arrays (NumPy, CPU tensors) to keep ``plan`` free of synchronization; CUDA tensors are
        copied to the host first, which synchronizes (as FlashInfer's plan does). The index arrays
        the kernels read are the given ones when they already live on the workspace's device,
        else copies. ``max_batch_size`` / ``max_kv_len`` bound the batches this plan's shape
        serves (defaults: this batch, rounded up to powers of two; a later plan past them builds a
        new one). ``fixed_split_size`` (pages) splits every request the same way whatever the
        batch, ``disable_split_kv`` not at all: both make results batch-invariant."""
        fn = "ignis.BatchDecodeWithPagedKVCacheWrapper.plan"
        _check_supported(fn, pos_encoding_mode)
        q_code = _dtype_code(fn, q_data_type)
        kv_type = kv_data_type if kv_data_type is not None else data_type
        if kv_type is not None and _dtype_code(fn, kv_type) != q_code:
            raise UnsupportedError("%s: kv_data_type must equal q_data_type (fp8 K/V is not supported yet)" % fn)
        host_indptr = _host_i32(indptr, "indptr")
        host_last = _host_i32(last_page_len, "last_page_len")
        batch = host_indptr.shape[0] - 1
        pages = host_indptr[1:].astype("int64") - host_indptr[:-1]
        lengths = (pages - 1) * page_size + host_last
        longest = int(max(0, lengths[pages > 0].max())) if batch > 0 and (pages > 0).any() else 0
        if max_batch_size is None:
            if self._use_cuda_graph:
                max_batch_size = self._buffers[0].shape[0] - 1
            else:
                max_batch_size = _next_pow2(max(batch, 1), 1)
        if max_kv_len is None:
            max_kv_len = _next_pow2(longest, 1024)
        key = (q_code, num_qo_heads, num_kv_heads, head_dim, page_size, window_left, logits_soft_cap, sm_scale,
               fixed_split_size, bool(disable_split_kv), lse_base)
        old = self._plan_key
        if (self._plan is None or old[0] != key or old[1] < max_batch_size or old[2] < max_kv_len
                or (self._use_cuda_graph and old[1] != max_batch_size)):
            self._plan = _ext.decode_plan_create(
                1 if self._cuda else 0, self._device_id, num_qo_heads, num_kv_heads, head_dim, page_size, q_code,
                max_batch_size, max_kv_len, bool(disable_split_kv), fixed_split_size or 0, sm_scale or 0.0,
                logits_soft_cap or 0.0, window_left, _base(lse_base))
            self._plan_key = (key, max_batch_size, max_kv_len)
        _ext.decode_plan_update(self._plan, host_indptr, host_last, self._workspace, stream)
        if self._cuda:
            given = (indptr, indices, last_page_len)
            hosts = (host_indptr, None, host_last)
            device = []
            for i in range(3):
                x, buffer = given[i], self._buffers[i] if self._use_cuda_graph else None
                if buffer is None and _on_cuda(x):
                    device.append(x)
                else:
                    host = hosts[i] if hosts[i] is not None else _host_i32(x, "indices")
                    device.append(_device_i32_like(self._workspace, host, buffer))
            self._indexes = tuple(device)
        else:
            self._indexes = (host_indptr, _host_i32(indices, "indices"), host_last)
        self._batch = batch
        self._num_qo_heads = num_qo_heads

    begin_forward = plan

    def run(self, q, paged_kv_cache, *, out=None, lse=None, return_lse=False, stream=None):
        """Decode attention of the planned batch: ``q`` ``[B, num_qo_heads, head_dim]``,
        ``paged_kv_cache`` one ``[num_pages, 2, ...]`` tensor or a ``(k_cache, v_cache)`` tuple in
        the wrapper's layout. Returns ``out`` (like ``q``), or ``(out, lse)`` with ``return_lse``
        (``lse`` ``[B, num_qo_heads]`` float32 in the plan's ``lse_base``)."""
        if self._indexes is None:
            raise InvalidArgumentError("ignis.BatchDecodeWithPagedKVCacheWrapper.run: call plan first")
        if isinstance(paged_kv_cache, tuple):
            k_cache, v_cache = paged_kv_cache
        else:
            k_cache, v_cache = paged_kv_cache, None
        finish = None
        if out is None:
            out, finish = new_output(q)
        if return_lse and lse is None:
            lse = _new_f32(q, (q.shape[0], q.shape[1]))
        indptr, indices, last = self._indexes
        _ext.decode_run(self._plan, q, k_cache, v_cache, indptr, indices, last, self._layout, out, lse,
                        self._workspace, stream)
        if finish is not None:
            out = finish(out)
        return (out, lse) if return_lse else out

    forward = run

    def end_forward(self):
        """Kept for FlashInfer compatibility; nothing to release."""
