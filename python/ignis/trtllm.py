"""FlashInfer's TensorRT-LLM-style attention entry points, by name: ``trtllm_batch_decode_with_kv_cache``
and ``xqa_batch_decode_with_kv_cache`` (flashinfer.decode) and ``trtllm_batch_context_with_kv_cache``
(flashinfer.prefill).

The two decode functions take the engine's own page table, a block table ``[batch, max_pages]`` int32
with ``seq_lens`` ``[batch]`` int32, and no plan: they run ignis' decode kernels through
``ignis_decode_run_block_table``, which needs no host work per step (nothing is read from the device,
no schedule is copied), so a captured CUDA graph serves every later step whose block table, seq_lens
and query are rewritten in place. How requests are split across the GPU follows from the batch size
and ``max_seq_len`` alone (the split a batch of requests all that long would get); a request longer
than ``max_seq_len`` is still computed in full. The C plans these runs need (their configuration:
heads, head dim, page size, dtypes, query tokens per request, window) are made at the first call of
each configuration and kept, per device, sized for the batch and the block table's width; make that
first call outside CUDA-graph capture (engines warm up eagerly before they capture).

Scales: ``bmm1_scale`` is the whole logit scale (FlashInfer's ``q_scale * k_scale * sm_scale``) and
``bmm2_scale`` the value scale; both are numbers or one-element host tensors (a CUDA tensor would need
a synchronization to read and is refused). The LSE (``lse=`` / ``return_lse=``) is base 2, as
TRT-LLM's. ``workspace_buffer`` holds the split partials (any byte-sized dtype);
``multi_ctas_kv_counter_buffer`` is not needed (ignis keeps its merge counters in its plans) and not
touched. Arguments for features ignis lacks (NVFP4 K/V or output, ragged or masked speculative
queries, skip-softmax, block-sparse, context parallelism, Cake request ordering, an fp8 output)
raise UnsupportedError naming them.

``trtllm_batch_context_with_kv_cache`` (prefill over a block table) runs ignis' prefill kernels through
``ignis_prefill_run_block_table``, plan-free in the same way: request b has the query rows
``cum_seq_lens_q[b] .. cum_seq_lens_q[b+1]`` and ``seq_lens[b]`` keys (cached and new tokens), its
queries aligned to the end of its keys, causal by default (chunked prefill) or unmasked with
``causal=False`` (vLLM's DCP context pass); the grid is the ``max_q_len`` tiles of every request, so a
captured graph serves every later step with the same batch size and ``max_q_len``. Its C plans
(configuration: heads, head dim, page size, dtypes, window, causal) are kept like decode's, sized by
the batch and the query rows. ``cum_seq_lens_kv`` (a prefix sum of the keys or, as vLLM fills it, of
the pages) and ``max_kv_len`` (a bound; every key is computed) are not needed: the keys come from
``seq_lens`` and the block table, so neither is read.
"""

from . import _ext
from ._common import (INT32_MAX, _scale, attention_dtypes, attention_output, byte_workspace, capturing, dtype_name,
                      layout_code, new_array, next_pow2, paged_kv_views, q_view)
from ._errors import InvalidArgumentError, UnsupportedError

__all__ = ["trtllm_batch_decode_with_kv_cache", "xqa_batch_decode_with_kv_cache",
           "trtllm_batch_context_with_kv_cache"]

_TRTLLM = "ignis.trtllm_batch_decode_with_kv_cache"
_XQA = "ignis.xqa_batch_decode_with_kv_cache"
_CONTEXT = "ignis.trtllm_batch_context_with_kv_cache"
_MIN_MAX_BATCH = 64
_MIN_MAX_ROWS = 1024
_BACKENDS = ("auto", "xqa", "trtllm-gen")

# C plans by (device type, device id, num_qo_heads, num_kv_heads, head_dim, page_size, q, kv and out
# dtypes, q_len_per_req, window_left): (plan, max_batch, max_kv_len).
_plans = {}
# Prefill plans by (device type, device id, num_qo_heads, num_kv_heads, head_dim, page_size, q, kv and
# out dtypes, window_left, mask mode): (plan, max_batch, max_rows).
_context_plans = {}


def _refuse(fn, what):
    raise UnsupportedError("%s: %s is not supported by ignis" % (fn, what))


def _plan_for(fn, query, key, batch, kv_len):
    """The kept C plan of configuration key for at least batch requests of kv_len keys (made or
    grown here, never while a CUDA graph is being captured)."""
    entry = _plans.get(key)
    if entry is not None and entry[1] >= batch and entry[2] >= kv_len:
        return entry[0]
    if capturing(query):
        raise InvalidArgumentError(
            "%s: a batch of %d requests over %d keys needs a new plan, which cannot be made while a CUDA graph is "
            "being captured: run the largest batch once outside capture first" % (fn, batch, kv_len))
    max_batch = next_pow2(max(batch, entry[1] if entry else 0), _MIN_MAX_BATCH)
    max_kv_len = min(max(kv_len, entry[2] if entry else 0), INT32_MAX)
    (device_type, device_id, num_qo_heads, num_kv_heads, head_dim, page_size, q_code, kv_code, o_code, q_len,
     window_left) = key
    plan = _ext.decode_plan_create(device_type=device_type, device_id=device_id, num_qo_heads=num_qo_heads,
                                   num_kv_heads=num_kv_heads, head_dim=head_dim, page_size=page_size, q_dtype=q_code,
                                   kv_dtype=kv_code, o_dtype=o_code, q_len_per_req=q_len, max_batch_size=max_batch,
                                   max_kv_len=max_kv_len, options={"window_left": window_left})
    _plans[key] = (plan, max_batch, max_kv_len)
    return plan


def _paged_cache(fn, kv_cache, kv_layout):
    """The engine's cache for the extension: (layout code, k_cache, v_cache, kv_view, KV dtype name,
    page_size, num_kv_heads, head_dim), of a (k_cache, v_cache) pair or one [num_pages, 2, ...] tensor."""
    layout = layout_code(kv_layout)
    if kv_cache.__class__ is not tuple and kv_cache.__class__ is not list:
        if kv_cache.ndim != 5 or kv_cache.shape[1] not in (1, 2):
            raise InvalidArgumentError("%s: kv_cache must be a (k_cache, v_cache) pair or one [num_pages, 2, ...] "
                                       "tensor, not of shape %s" % (fn, tuple(kv_cache.shape)))
        if kv_cache.shape[1] == 1:
            _refuse(fn, "a kv_cache of shape [num_pages, 1, ...] (keys and values in one tensor)")
    kv_name = dtype_name(kv_cache[0] if kv_cache.__class__ in (tuple, list) else kv_cache)
    k_cache, v_cache, kv_view = paged_kv_views(fn, kv_cache, layout)
    nhd = layout == _ext.IGNIS_KV_LAYOUT_NHD
    k_shape = k_cache.shape if v_cache is not None else (k_cache.shape[0],) + tuple(k_cache.shape[2:])
    page_size, num_kv_heads, head_dim = (k_shape[1], k_shape[2], k_shape[3]) if nhd else (k_shape[2], k_shape[1],
                                                                                          k_shape[3])
    return layout, k_cache, v_cache, kv_view, kv_name, page_size, num_kv_heads, head_dim


def _device_key(query):
    """(ignis device type, device id) of the query."""
    device_type, device_id = query.__dlpack_device__()
    if device_type == _ext.DLPACK_CUDA:
        return _ext.IGNIS_DEVICE_CUDA, device_id
    return _ext.IGNIS_DEVICE_CPU, 0


def _dtypes(fn, query, kv_name, out, out_dtype):
    """The ignis codes of the query, cache and output dtypes; the output's is out's when out is
    given, and an fp8 query needs one or the other."""
    if out is not None and out_dtype is None:
        out_dtype = dtype_name(out)
    if out_dtype is None and dtype_name(query) == "float8_e4m3fn":
        raise InvalidArgumentError("%s: an fp8 query needs out or out_dtype (float16 or bfloat16)" % fn)
    return attention_dtypes(fn, dtype_name(query), kv_name, out_dtype)


def _kv_scales(fn, bmm1_scale, bmm2_scale, head_dim):
    """(k_scale, v_scale) of a run. bmm1_scale = sm_scale * k_scale (* q_scale): the plan keeps the
    default 1 / sqrt(head_dim), the rest rides on the key scale, so every layer of a model shares
    one plan."""
    return _scale(fn, "bmm1_scale", bmm1_scale) * head_dim ** 0.5, _scale(fn, "bmm2_scale", bmm2_scale)


def _outputs(query, o_code, out, lse, return_lse):
    """(out, lse, finish): out made when None (finish turns what the run wrote into it, or None),
    lse [rows, num_qo_heads] float32 made when asked for and None."""
    finish = None
    if out is None:
        out, finish = attention_output(query, o_code)
    if return_lse and lse is None:
        lse = new_array(query, (query.shape[0], query.shape[1]), "float32")
    return out, lse, finish


def _decode(fn, query, kv_cache, workspace_buffer, block_tables, seq_lens, max_seq_len, bmm1_scale, bmm2_scale,
            window_left, out, out_dtype, sinks, kv_layout, q_len_per_req, lse, return_lse):
    """The block-table decode both entry points share, their unsupported arguments refused."""
    if q_len_per_req is None:
        _refuse(fn, "q_len_per_req=None (ragged queries through cum_seq_lens_q / max_q_len)")
    if isinstance(sinks, (list, tuple)):
        _refuse(fn, "sinks as a list (give one float32 [num_qo_heads] tensor)")
    if not isinstance(max_seq_len, int) or max_seq_len < 0:
        raise InvalidArgumentError("%s: max_seq_len=%r must be an int >= 0" % (fn, max_seq_len))
    layout, k_cache, v_cache, kv_view, kv_name, page_size, num_kv_heads, head_dim = _paged_cache(fn, kv_cache,
                                                                                                 kv_layout)
    num_qo_heads = query.shape[1]
    if query.shape[0] % q_len_per_req:
        raise InvalidArgumentError("%s: query has %d rows, not a multiple of q_len_per_req=%d"
                                   % (fn, query.shape[0], q_len_per_req))
    batch = query.shape[0] // q_len_per_req
    if block_tables.shape[0] != batch:  # FlashInfer takes the batch from the query
        if block_tables.shape[0] < batch or seq_lens.shape[0] < batch:
            raise InvalidArgumentError("%s: block_tables has %d rows and seq_lens %d but the query holds %d requests"
                                       % (fn, block_tables.shape[0], seq_lens.shape[0], batch))
        block_tables, seq_lens = block_tables[:batch], seq_lens[:batch]
    q_code, kv_code, o_code = _dtypes(fn, query, kv_name, out, out_dtype)
    key = _device_key(query) + (num_qo_heads, num_kv_heads, head_dim, page_size, q_code, kv_code, o_code,
                                q_len_per_req, window_left)
    capacity = block_tables.shape[1] * page_size
    plan = _plan_for(fn, query, key, batch, capacity)
    k_scale, v_scale = _kv_scales(fn, bmm1_scale, bmm2_scale, head_dim)
    out, lse, finish = _outputs(query, o_code, out, lse, return_lse)
    query, view = q_view(query)
    _ext.decode_run_block_table(plan, query, k_cache, v_cache, out, block_tables, seq_lens,
                                min(max_seq_len, capacity), lse=lse, workspace=byte_workspace(workspace_buffer),
                                kv_layout=layout, k_scale=k_scale, v_scale=v_scale, sinks=sinks, kv_view=kv_view,
                                q_view=view)
    if finish is not None:
        out = finish(out)
    return (out, lse) if return_lse else out


def trtllm_batch_decode_with_kv_cache(query, kv_cache, workspace_buffer, block_tables, seq_lens, max_seq_len,
                                      bmm1_scale=1.0, bmm2_scale=1.0, window_left=-1, out=None, out_dtype=None,
                                      o_sf_scale=None, o_sf_vec_size=None, sinks=None, kv_layout="HND",
                                      enable_pdl=None, backend="auto", q_len_per_req=1, o_scale=1.0, mask=None,
                                      max_q_len=None, cum_seq_lens_q=None, skip_softmax_threshold_scale_factor=None,
                                      kv_cache_sf=None, uses_shared_paged_kv_idx=True, lse=None, return_lse=False,
                                      bmm1_scale_log2=None, multi_ctas_kv_counter_buffer=None,
                                      enable_block_sparse_attention=False, cp_world=1, cp_rank=0,
                                      causal_seqlens_kv_global=None, bf16q_fp8kv_transform_mode=None,
                                      request_order=None, request_order_plan=None):
    """FlashInfer's TRT-LLM-gen / XQA batch decode over a block table, on ignis' decode kernels (see
    the module's notes). ``query`` ``[batch * q_len_per_req, num_qo_heads, head_dim]`` (f16, bf16, or
    fp8 e4m3 with an fp8 cache and ``out_dtype``), ``kv_cache`` a ``(k_cache, v_cache)`` pair or one
    ``[num_pages, 2, ...]`` tensor in ``kv_layout``, ``block_tables`` ``[batch, max_pages]`` int32,
    ``seq_lens`` ``[batch]`` int32. Returns ``out``, or ``(out, lse)`` with ``return_lse``."""
    fn = _TRTLLM
    refused = (("out_dtype='nvfp4' (NVFP4 output)", out_dtype == "nvfp4"),
               ("o_sf_scale / o_sf_vec_size (NVFP4 output)", o_sf_scale is not None or o_sf_vec_size is not None),
               ("backend=%r" % (backend,), backend not in _BACKENDS),
               ("o_scale=%r (an fp8 output's scale)" % (o_scale,), o_scale not in (None, 1.0)),
               ("mask (a speculative-decoding mask)", mask is not None),
               ("max_q_len / cum_seq_lens_q (ragged queries)", max_q_len is not None or cum_seq_lens_q is not None),
               ("skip_softmax_threshold_scale_factor", skip_softmax_threshold_scale_factor is not None),
               ("kv_cache_sf (NVFP4 K/V)", kv_cache_sf is not None),
               ("uses_shared_paged_kv_idx=False (separate K and V page tables)", not uses_shared_paged_kv_idx),
               ("bmm1_scale_log2", bmm1_scale_log2 is not None),
               ("enable_block_sparse_attention", enable_block_sparse_attention),
               ("cp_world / cp_rank / causal_seqlens_kv_global (decode context parallelism)",
                cp_world != 1 or cp_rank != 0 or causal_seqlens_kv_global is not None),
               ("bf16q_fp8kv_transform_mode", bf16q_fp8kv_transform_mode is not None),
               ("request_order / request_order_plan", request_order is not None or request_order_plan is not None))
    for what, bad in refused:
        if bad:
            _refuse(fn, what)
    if out is not None and not hasattr(out, "__dlpack__"):
        _refuse(fn, "an out of type %s (FP4Tensor: NVFP4 output)" % type(out).__qualname__)
    return _decode(fn, query, kv_cache, workspace_buffer, block_tables, seq_lens, max_seq_len, bmm1_scale,
                   bmm2_scale, window_left, out, out_dtype, sinks, kv_layout, q_len_per_req, lse, return_lse)


def xqa_batch_decode_with_kv_cache(query, kv_cache, workspace_buffer, block_tables, seq_lens, max_seq_len,
                                   bmm1_scale=1.0, bmm2_scale=1.0, window_left=-1, out=None, sinks=None,
                                   kv_layout="NHD", enable_pdl=None, q_len_per_req=1, o_scale=1.0, mask=None,
                                   kv_cache_sf=None, q_cu_seq_lens=None):
    """FlashInfer's XQA batch decode over a block table (what vLLM calls on the H200), on ignis' decode
    kernels: the arguments of ``trtllm_batch_decode_with_kv_cache`` that XQA takes. Returns ``out``."""
    fn = _XQA
    refused = (("o_scale=%r (an fp8 output's scale)" % (o_scale,), o_scale not in (None, 1.0)),
               ("mask (a speculative-decoding mask)", mask is not None),
               ("kv_cache_sf (NVFP4 K/V)", kv_cache_sf is not None),
               ("q_cu_seq_lens (ragged queries)", q_cu_seq_lens is not None))
    for what, bad in refused:
        if bad:
            _refuse(fn, what)
    return _decode(fn, query, kv_cache, workspace_buffer, block_tables, seq_lens, max_seq_len, bmm1_scale,
                   bmm2_scale, window_left, out, None, sinks, kv_layout, q_len_per_req, None, False)


def _context_plan_for(fn, query, key, batch, rows):
    """The kept prefill plan of configuration key for at least batch requests and rows query rows
    (made or grown here, never while a CUDA graph is being captured). An fp8 query's plan is sized to
    its rows exactly: its workspace holds their converted copy."""
    entry = _context_plans.get(key)
    if entry is not None and entry[1] >= batch and entry[2] >= rows:
        return entry[0]
    if capturing(query):
        raise InvalidArgumentError(
            "%s: a batch of %d requests over %d query rows needs a new plan, which cannot be made while a CUDA graph "
            "is being captured: run the largest batch once outside capture first" % (fn, batch, rows))
    (device_type, device_id, num_qo_heads, num_kv_heads, head_dim, page_size, q_code, kv_code, o_code, window_left,
     mask_mode) = key
    max_batch = next_pow2(max(batch, entry[1] if entry else 0), _MIN_MAX_BATCH)
    max_rows = max(rows, entry[2] if entry else 0, 1)
    if o_code == _ext.IGNIS_DTYPE_OF_Q:
        max_rows = next_pow2(max_rows, _MIN_MAX_ROWS)
    plan = _ext.prefill_plan_create(device_type=device_type, device_id=device_id, kv_kind=_ext.IGNIS_PREFILL_PAGED,
                                    num_qo_heads=num_qo_heads, num_kv_heads=num_kv_heads, head_dim_qk=head_dim,
                                    head_dim_vo=head_dim, page_size=page_size, q_dtype=q_code, kv_dtype=kv_code,
                                    o_dtype=o_code, mask_mode=mask_mode, max_batch_size=max_batch,
                                    max_qo_tokens=max_rows, max_kv_len=0, disable_split_kv=True,
                                    options={"window_left": window_left})
    _context_plans[key] = (plan, max_batch, max_rows)
    return plan


def _prefix(fn, name, x, n):
    """The first n rows of x (FlashInfer takes the batch from batch_size; longer arrays are fine)."""
    if x.shape[0] < n:
        raise InvalidArgumentError("%s: %s has %d rows but batch_size needs %d" % (fn, name, x.shape[0], n))
    return x if x.shape[0] == n else x[:n]


def trtllm_batch_context_with_kv_cache(query, kv_cache, workspace_buffer, block_tables, seq_lens, max_q_len,
                                       max_kv_len, bmm1_scale, bmm2_scale, batch_size, cum_seq_lens_q,
                                       cum_seq_lens_kv, window_left=-1, out=None, out_dtype=None, o_sf_scale=None,
                                       o_sf_vec_size=None, kv_layout="HND", enable_pdl=None, sinks=None,
                                       kv_cache_sf=None, skip_softmax_threshold_scale_factor=None,
                                       uses_shared_paged_kv_idx=True, causal=True, lse=None, return_lse=False,
                                       multi_ctas_kv_counter_buffer=None, use_fp16_softmax=None,
                                       uses_spcompress=None, backend="trtllm-gen"):
    """FlashInfer's TRT-LLM-gen batch prefill (context) over a block table, on ignis' prefill kernels
    (see the module's notes). ``query`` ``[num_tokens, num_qo_heads, head_dim]`` (f16, bf16, or fp8
    e4m3 with an fp8 cache and ``out_dtype``), ``kv_cache`` a ``(k_cache, v_cache)`` pair or one
    ``[num_pages, 2, ...]`` tensor in ``kv_layout``, ``block_tables`` ``[batch, max_pages]`` int32,
    ``seq_lens`` ``[batch]`` int32 (keys per request), ``cum_seq_lens_q`` ``[batch + 1]`` int32, all
    on the query's device. Returns ``out``, or ``(out, lse)`` with ``return_lse`` (base-2 LSE)."""
    fn = _CONTEXT
    refused = (("out_dtype='nvfp4' (NVFP4 output)", out_dtype == "nvfp4"),
               ("o_sf_scale / o_sf_vec_size (NVFP4 output)", o_sf_scale is not None or o_sf_vec_size is not None),
               ("backend=%r" % (backend,), backend != "trtllm-gen"),
               ("kv_cache_sf (NVFP4 K/V)", kv_cache_sf is not None),
               ("skip_softmax_threshold_scale_factor", skip_softmax_threshold_scale_factor is not None),
               ("uses_shared_paged_kv_idx=False (separate K and V page tables)", not uses_shared_paged_kv_idx),
               ("use_fp16_softmax (an SM107 kernel variant)", use_fp16_softmax not in (None, False)),
               ("uses_spcompress (an SM107 kernel variant)", uses_spcompress not in (None, False)),
               ("sinks as a list (give one float32 [num_qo_heads] tensor)", isinstance(sinks, (list, tuple))))
    for what, bad in refused:
        if bad:
            _refuse(fn, what)
    if out is not None and not hasattr(out, "__dlpack__"):
        _refuse(fn, "an out of type %s (FP4Tensor: NVFP4 output)" % type(out).__qualname__)
    for name, value in (("max_q_len", max_q_len), ("max_kv_len", max_kv_len), ("batch_size", batch_size)):
        if value.__class__ is bool or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError("%s: %s=%r must be an int >= 0" % (fn, name, value))
    layout, k_cache, v_cache, kv_view, kv_name, page_size, num_kv_heads, head_dim = _paged_cache(fn, kv_cache,
                                                                                                 kv_layout)
    rows, num_qo_heads = query.shape[0], query.shape[1]
    block_tables = _prefix(fn, "block_tables", block_tables, batch_size)
    seq_lens = _prefix(fn, "seq_lens", seq_lens, batch_size)
    cum_seq_lens_q = _prefix(fn, "cum_seq_lens_q", cum_seq_lens_q, batch_size + 1)
    q_code, kv_code, o_code = _dtypes(fn, query, kv_name, out, out_dtype)
    mask_mode = _ext.IGNIS_MASK_CAUSAL if causal else _ext.IGNIS_MASK_NONE
    key = _device_key(query) + (num_qo_heads, num_kv_heads, head_dim, page_size, q_code, kv_code, o_code,
                                window_left, mask_mode)
    plan = _context_plan_for(fn, query, key, batch_size, rows)
    k_scale, v_scale = _kv_scales(fn, bmm1_scale, bmm2_scale, head_dim)
    out, lse, finish = _outputs(query, o_code, out, lse, return_lse)
    query, view = q_view(query)
    _ext.prefill_run_block_table(plan, query, k_cache, v_cache, out, block_tables, seq_lens, cum_seq_lens_q,
                                 min(max_q_len, rows), lse=lse, workspace=byte_workspace(workspace_buffer),
                                 kv_layout=layout, k_scale=k_scale, v_scale=v_scale, sinks=sinks, kv_view=kv_view,
                                 q_view=view)
    if finish is not None:
        out = finish(out)
    return (out, lse) if return_lse else out
