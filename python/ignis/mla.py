"""MLA attention with FlashInfer's names and arguments (flashinfer.mla): the paged compressed
latent cache of DeepSeek-V2/V3 and Kimi K2, attended with the weights absorbed into the query.

``BatchMLAPagedAttentionWrapper``: ``plan(qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads,
head_dim_ckv, head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type)`` (the flat
CSR form SGLang and vLLM pass, positionally or by keyword) then ``run(q_nope, q_pe, ckv_cache,
kpe_cache, out=None, lse=None, return_lse=False)`` per layer, or the packed forms
``run(query=, kv_cache=)`` (576-wide q and cache, split into their 512 and 64 columns as views).
``append_paged_mla_kv_cache``: FlashInfer's function of that name.

The math is the header comment of include/ignis/mla.h: q_nope ``[nnz, H, 512]``, q_pe
``[nnz, H, 64]``, ckv_cache ``[pages, page_size, 512]`` and kpe_cache ``[pages, page_size, 64]``
(separate, or views of one 576-wide buffer, as SGLang's token pool gives them), scores
``sm_scale * (q_nope . ckv + q_pe . kpe)``, out ``[nnz, H, 512]`` in q's dtype, causal within a
request's query tokens aligned to the end of its keys. ``return_lse`` returns ``(out, lse)``, lse
``[nnz, H]`` float32 in base 2 (FlashInfer's), or natural with ``return_lse_base_on_e=True``.

What is supported: q float16 or bfloat16; the cache q's dtype or float8_e4m3fn (``kv_data_type``;
``ckv_scale`` / ``kpe_scale``, Python floats or one-element host tensors, dequantize it: keys are
``ckv_scale * ckv`` and ``kpe_scale * kpe``; NumPy caches of ml_dtypes' float8_e4m3fn too); head
dims 512 / 64, any head count, page sizes 1 to 256. float8_e5m2 raises UnsupportedError, as do the
arguments of features ignis lacks (``metadata=``,
the dense ``block_tables`` / ``seq_lens`` / ``cum_seq_lens_q`` form, ``use_profiler``,
``output_scale``, ``scale_mode`` other than "default", ``skip_softmax``, ``use_sinks``, run's
``profiler_buffer``, ``kv_len``, ``page_table``, ``o_scale``, ``sinks``,
``bmm1_scale`` / ``bmm2_scale``, ``skip_softmax_threshold_scale_factor``). ``run`` has no
``ckv_scale_arr`` parameter on purpose: vLLM's ``has_flashinfer_sm90_nope_mla()`` looks for it and
then drives FlashInfer internals (``_plan_info``, ``_planned_backend``) that ignis does not have. ``backend``,
``enable_pdl``, ``max_q_len`` and ``lse_mode`` are accepted (ignis has one kernel, and every run
may ask for the LSE).

Plan: index arrays of any integer dtype on the host or the device (device ones are copied to the
host, a synchronization, as FlashInfer's plan does); ``kv_indices`` is used where it is (copied to
the device once when it is a host array). The C plan (include/ignis/mla.h) is made once per
configuration and kept while later plans fit its maxima; the schedule goes to the device in one
asynchronous copy, and ``run`` never allocates (but its default out / lse), synchronizes or plans.

CUDA graphs (``use_cuda_graph=True``): the C plan's maxima are fixed by the first ``plan``: the
batch by the ``kv_len_arr`` (or ``qo_indptr``) buffer given at construction, the query rows by
``max_q_tokens`` (a keyword of the constructor; default 4 per request, speculative decoding's
usual bound, or the first plan's rows if more). Each ``plan`` copies ``kv_indices``,
``qo_indptr``, ``kv_indptr`` and ``kv_len_arr`` into the given buffers (as FlashInfer does), and
the captured ``run`` reads the pages from the ``kv_indices`` buffer and the schedule from the C
plan's own memory: re-plan outside the graph with any batch up to the maxima, then replay. A
plan past the maxima raises InvalidArgumentError.

Every call takes a keyword-only ``stream=``; plan and run must use the same stream.
"""

import math

from . import _ext
from ._alloc import new_array, new_output
from ._common import (_scale, byte_workspace, copy_index_into, device_i32, dtype_code, host_i32, is_cuda, kv_views,
                      nbytes_of, next_pow2, to_device_of)
from ._errors import InvalidArgumentError, UnsupportedError

__all__ = ["BatchMLAPagedAttentionWrapper", "append_paged_mla_kv_cache"]

_PLAN = "ignis.BatchMLAPagedAttentionWrapper.plan"
_RUN = "ignis.BatchMLAPagedAttentionWrapper.run"
_CKV, _KPE = 512, 64
_GRAPH_Q_PER_REQUEST = 4
_LN2 = math.log(2.0)


def _starts_at(x, buffer):
    """Whether x is buffer or a view at its start (SGLang fills the graph's index buffer itself and
    passes a slice of it): nothing to copy then."""
    if x is buffer:
        return True
    pointer, start = getattr(x, "data_ptr", None), getattr(buffer, "data_ptr", None)
    return pointer is not None and start is not None and pointer() == start()


def _refuse(fn, name, value, default=None):
    if value is not default and value != default:
        raise UnsupportedError("%s: %s=%r is not supported by ignis" % (fn, name, value))


class BatchMLAPagedAttentionWrapper:
    """FlashInfer's paged MLA wrapper (see the module's documentation)."""

    def __init__(self, float_workspace_buffer, use_cuda_graph=False, qo_indptr=None, kv_indptr=None, kv_indices=None,
                 kv_len_arr=None, backend="auto", *, max_q_tokens=None):
        self._float_workspace_buffer = float_workspace_buffer
        self.device = getattr(float_workspace_buffer, "device", None)
        workspace = byte_workspace(float_workspace_buffer)
        device_type, device_id = workspace.__dlpack_device__()
        self._cuda = device_type == _ext.DLPACK_CUDA
        self._device_id = device_id if self._cuda else 0
        self._workspace = workspace if self._cuda else None  # CPU plans keep their partials in the backend
        self._workspace_size = nbytes_of(workspace)
        self._use_cuda_graph = bool(use_cuda_graph)
        self._qo_indptr_buf = qo_indptr
        self._kv_indptr_buf = kv_indptr
        self._kv_indices_buf = kv_indices
        self._kv_len_arr_buf = kv_len_arr
        self._backend = backend
        self._graph_max_q_tokens = max_q_tokens
        self._plan = None
        self._key = None
        self._maxima = None  # (max_batch, max_q_tokens) of the C plan
        self._retired = []  # graph mode: earlier C plans a captured graph may still read
        self._kv_indices = None
        self._nnz = 0
        self._q_data_type = None

    @property
    def is_cuda_graph_enabled(self):
        return self._use_cuda_graph

    def plan(self, qo_indptr=None, kv_indptr=None, kv_indices=None, kv_len_arr=None, num_heads=None,
             head_dim_ckv=None, head_dim_kpe=None, page_size=None, causal=None, sm_scale=None, q_data_type=None,
             kv_data_type=None, use_profiler=False, *, metadata=None, cum_seq_lens_q=None, block_tables=None,
             seq_lens=None, max_q_len=None, query_layout=None, kv_cache_layout=None, lse_mode="none",
             output_dtype=None, output_scale="none", scale_mode="default", skip_softmax=False, enable_pdl=None,
             use_sinks=False, stream=None):
        fn = _PLAN
        for name, value, default in (("metadata", metadata, None), ("cum_seq_lens_q", cum_seq_lens_q, None),
                                     ("block_tables", block_tables, None), ("seq_lens", seq_lens, None),
                                     ("use_profiler", bool(use_profiler), False),
                                     ("output_scale", output_scale, "none"), ("scale_mode", scale_mode, "default"),
                                     ("skip_softmax", bool(skip_softmax), False), ("use_sinks", bool(use_sinks), False)):
            _refuse(fn, name, value, default)
        if query_layout not in (None, "split", "packed") or kv_cache_layout not in (None, "split", "packed"):
            raise InvalidArgumentError("%s: query_layout and kv_cache_layout must be None, 'split' or 'packed'" % fn)
        if lse_mode not in ("none", "base2", "basee"):
            raise InvalidArgumentError("%s: lse_mode=%r must be 'none', 'base2' or 'basee'" % (fn, lse_mode))
        for name, value in (("qo_indptr", qo_indptr), ("kv_indptr", kv_indptr), ("kv_indices", kv_indices),
                            ("kv_len_arr", kv_len_arr), ("num_heads", num_heads), ("head_dim_ckv", head_dim_ckv),
                            ("head_dim_kpe", head_dim_kpe), ("page_size", page_size), ("causal", causal),
                            ("sm_scale", sm_scale), ("q_data_type", q_data_type)):
            if value is None:
                raise InvalidArgumentError("%s: %s is required" % (fn, name))
        q_code = dtype_code(fn, "q_data_type", q_data_type)
        kv_code = q_code if kv_data_type is None else dtype_code(fn, "kv_data_type", kv_data_type)
        if output_dtype is not None and dtype_code(fn, "output_dtype", output_dtype) != q_code:
            raise UnsupportedError("%s: output_dtype=%s but the output has q's dtype (%s)"
                                   % (fn, output_dtype, q_data_type))
        qo = host_i32(fn, "qo_indptr", qo_indptr)
        kv_ptr = host_i32(fn, "kv_indptr", kv_indptr)
        lens = host_i32(fn, "kv_len_arr", kv_len_arr)
        batch = len(qo) - 1
        if batch < 0 or len(kv_ptr) != batch + 1 or len(lens) < batch:
            raise InvalidArgumentError("%s: qo_indptr (%d entries), kv_indptr (%d) and kv_len_arr (%d) must describe "
                                       "one batch" % (fn, len(qo), len(kv_ptr), len(lens)))
        lens = lens[:batch]
        nnz = int(qo[-1]) if batch >= 0 and len(qo) else 0
        key = (int(num_heads), int(head_dim_ckv), int(head_dim_kpe), int(page_size), q_code, kv_code, bool(causal),
               float(sm_scale))
        self._configure(fn, key, batch, nnz)
        _ext.mla_plan_update(self._plan, qo, kv_ptr, lens, self._workspace, stream)
        self._nnz = nnz
        self._num_heads = key[0]
        self._q_data_type = q_data_type
        self._kv_indices = self._indices(fn, kv_indices, int(kv_ptr[-1]) if len(kv_ptr) else 0)
        if self._use_cuda_graph:
            for name, buffer, source in (("qo_indptr", self._qo_indptr_buf, qo),
                                         ("kv_indptr", self._kv_indptr_buf, kv_ptr),
                                         ("kv_len_arr", self._kv_len_arr_buf, lens)):
                if buffer is not None:
                    copy_index_into(fn, name, buffer, source)

    def _configure(self, fn, key, batch, nnz):
        """Make the C plan for key (and maxima that hold this batch) unless the current one serves."""
        if self._use_cuda_graph:
            if self._maxima is None:
                buffer = self._kv_len_arr_buf if self._kv_len_arr_buf is not None else self._qo_indptr_buf
                max_batch = max(batch, 1) if buffer is None else buffer.shape[0] - (buffer is self._qo_indptr_buf)
                max_q = self._graph_max_q_tokens or _GRAPH_Q_PER_REQUEST * max_batch
                self._maxima = (max(max_batch, batch, 1), max(max_q, nnz, 1))
            if batch > self._maxima[0] or nnz > self._maxima[1]:
                raise InvalidArgumentError(
                    "%s: a batch of %d requests and %d query rows but this CUDA-graph wrapper serves at most %d and "
                    "%d (its buffers; max_q_tokens= of the constructor)" % (fn, batch, nnz, *self._maxima))
            if key == self._key:
                return
            if self._plan is not None:
                self._retired.append(self._plan)
        else:
            fits = self._maxima is not None and batch <= self._maxima[0] and nnz <= self._maxima[1]
            if key == self._key and fits:
                return
            grown = (0, 0) if self._maxima is None else self._maxima
            self._maxima = (max(next_pow2(max(batch, 1), 64), grown[0]), max(next_pow2(max(nnz, 1), 64), grown[1]))
        num_heads, head_dim_ckv, head_dim_kpe, page_size, q_code, kv_code, causal, sm_scale = key
        device_type = _ext.IGNIS_DEVICE_CUDA if self._cuda else _ext.IGNIS_DEVICE_CPU
        self._plan = _ext.mla_plan_create(device_type, self._device_id, num_heads, head_dim_ckv, head_dim_kpe,
                                          page_size, q_code, kv_code, int(causal), sm_scale, _ext.IGNIS_LSE_BASE2,
                                          self._maxima[0], self._maxima[1], 2**31 - 1)
        self._key = key
        needed = _ext.mla_workspace_size(self._plan)
        if needed > self._workspace_size:
            self._plan, self._key = None, None
            raise InvalidArgumentError("%s: float_workspace_buffer has %d bytes but %d heads need %d"
                                       % (fn, self._workspace_size, num_heads, needed))

    def _indices(self, fn, kv_indices, used):
        """The page indices the runs read: on the workspace's device, int32; with CUDA graphs the
        constructor's buffer, filled here."""
        if self._use_cuda_graph and self._kv_indices_buf is not None:
            if not _starts_at(kv_indices, self._kv_indices_buf):
                source = device_i32(fn, "kv_indices", kv_indices) if is_cuda(kv_indices) else host_i32(
                    fn, "kv_indices", kv_indices)
                copy_index_into(fn, "kv_indices", self._kv_indices_buf, source[:used])
            return self._kv_indices_buf
        if self._cuda:
            if is_cuda(kv_indices):
                return device_i32(fn, "kv_indices", kv_indices)
            return to_device_of(self._float_workspace_buffer, host_i32(fn, "kv_indices", kv_indices))
        return host_i32(fn, "kv_indices", kv_indices)

    def run(self, q_nope=None, q_pe=None, ckv_cache=None, kpe_cache=None, out=None, lse=None, return_lse=False,
            profiler_buffer=None, kv_len=None, page_table=None, return_lse_base_on_e=False, o_scale=None, *,
            query=None, kv_cache=None, ckv_scale=None, kpe_scale=None, sinks=None,
            skip_softmax_threshold_scale_factor=None, bmm1_scale=None, bmm2_scale=None, stream=None):
        fn = _RUN
        for name, value in (("profiler_buffer", profiler_buffer), ("kv_len", kv_len), ("page_table", page_table),
                            ("sinks", sinks),
                            ("skip_softmax_threshold_scale_factor", skip_softmax_threshold_scale_factor),
                            ("bmm1_scale", bmm1_scale), ("bmm2_scale", bmm2_scale)):
            _refuse(fn, name, value)
        if o_scale is not None and float(o_scale) != 1.0:
            raise UnsupportedError("%s: o_scale=%r is not supported by ignis (the output is not rescaled)"
                                   % (fn, o_scale))
        ckv_value = 1.0 if ckv_scale is None else _scale(fn, "ckv_scale", ckv_scale)
        kpe_value = 1.0 if kpe_scale is None else _scale(fn, "kpe_scale", kpe_scale)
        if self._plan is None:
            raise InvalidArgumentError("%s: call plan() first" % fn)
        if query is not None:
            if q_nope is not None or q_pe is not None:
                raise InvalidArgumentError("%s: pass query= or q_nope and q_pe, not both" % fn)
            q_nope, q_pe = query[..., :_CKV], query[..., _CKV:]
        if kv_cache is not None:
            if ckv_cache is not None or kpe_cache is not None:
                raise InvalidArgumentError("%s: pass kv_cache= or ckv_cache and kpe_cache, not both" % fn)
            ckv_cache, kpe_cache = kv_cache[..., :_CKV], kv_cache[..., _CKV:]
        for name, value in (("q_nope", q_nope), ("q_pe", q_pe), ("ckv_cache", ckv_cache), ("kpe_cache", kpe_cache)):
            if value is None:
                raise InvalidArgumentError("%s: %s is required" % (fn, name))
        finish = None
        if out is None:
            out, finish = new_output(q_nope, shape=tuple(q_nope.shape[:-1]) + (_CKV,))
        if lse is None and return_lse:
            lse = new_array(q_nope, tuple(q_nope.shape[:2]), "float32")
        ckv_cache, kpe_cache, view = kv_views(fn, ckv_cache, kpe_cache, "ckv_cache", "kpe_cache")
        _ext.mla_run(self._plan, q_nope, q_pe, ckv_cache, kpe_cache, self._kv_indices, ckv_value, kpe_value,
                     -1 if view is None else view, out, lse, self._workspace, stream)
        if lse is not None and return_lse_base_on_e:
            lse *= _LN2
        if finish is not None:
            out = finish(out)
        return (out, lse) if return_lse else out


def append_paged_mla_kv_cache(append_ckv, append_kpe, batch_indices, positions, ckv_cache, kpe_cache, kv_indices,
                              kv_indptr, kv_last_page_len, *, stream=None):
    """FlashInfer's append_paged_mla_kv_cache: row t of append_ckv [nnz, 512] / append_kpe [nnz, 64]
    goes to request batch_indices[t] at position positions[t] of the paged caches (in place)."""
    fn = "ignis.append_paged_mla_kv_cache"
    if ckv_cache is None or kpe_cache is None:
        raise UnsupportedError("%s: ckv_cache and kpe_cache are both required by ignis" % fn)
    ckv_cache, kpe_cache, view = kv_views(fn, ckv_cache, kpe_cache, "ckv_cache", "kpe_cache")
    append_ckv, append_kpe, row_view = kv_views(fn, append_ckv, append_kpe, "append_ckv", "append_kpe")
    if row_view != view:
        raise InvalidArgumentError("%s: append_ckv.dtype and ckv_cache.dtype must be equal" % fn)
    _ext.append_paged_mla_kv_cache(append_ckv, append_kpe, batch_indices, positions, ckv_cache, kpe_cache, kv_indices,
                                   kv_indptr, kv_last_page_len, -1 if view is None else view, stream)
