"""The prefill wrappers as vLLM 0.33 and SGLang 0.5.23 call them (FlashInfer 0.7.2's API), against the
float64 reference (refs.prefill_ref). The engines' call sequences run on every host of
engine_arrays.py: NumPy arrays and PyTorch CPU tensors on the CPU backend, and with a GPU the
engines' own split on the CUDA backend (q, caches, out, sinks, workspace, persistent buffers and
device index arrays CUDA tensors: all of SGLang's index arrays, vLLM's page indices and block
tables; vLLM's indptrs, last_page_len and seq_lens pinned CPU tensors).

- signatures: FlashInfer's parameters, order and defaults, ignis' extras keyword-only after them;
  unknown keywords raise TypeError, what ignis cannot honour raises UnsupportedError naming it;
- vLLM: the paged wrapper's plan keywords (fixed_split_size=-1, seq_lens, o_data_type), the four
  private attributes it asserts, run(q, kv, q_scale=, k_scale=, v_scale=, out=, kv_cache_sf=None);
  DCP (paged context with block_tables + ragged new tokens with return_lse); the attention-sink
  wrapper's run(q, kv, sinks, sm_scale, v_scale=, out=);
- SGLang: begin_forward positionally, forward / forward_return_lse with causal / sm_scale /
  window_left / logits_soft_cap / k_scale / v_scale overrides (re-planned once, then remembered),
  ragged + paged merged into one causal prefill, page size 1 with 3-D caches, the CUDA-graph form
  whose runs read the persistent buffers, and on CUDA that form captured in a CUDA graph and
  replayed after each begin_forward (target verify with a tree mask; full-graph extend);
- index arrays (int64, overflow, longer than needed), boolean masks, byte workspaces, LSE base and
  layout, run-time window_left, and the errors (NumPy arrays on the CPU backend).
GQA 32/8 with head dim 128 and page 16 (vLLM), 8/2 or 4/2 with head dim 64 and page 1 (SGLang).
"""

import inspect
import math
import warnings

import numpy as np
import pytest

import ignis
from engine_arrays import (HOSTS, as_f64, as_numpy, capture, model_dtype, needs_cuda, on_device, on_host, workspace,
                           write)
from refs import assert_close, prefill_ref, torch

rng = np.random.default_rng(17)


def f16(shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def indptr(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def batch(q_lens, kv_lens, heads, kv_heads, dim):
    qo, kv = indptr(q_lens), indptr(kv_lens)
    return qo, kv, f16((qo[-1], heads, dim)), f16((kv[-1], kv_heads, dim)), f16((kv[-1], kv_heads, dim))


def reference(qo, kv, q, k, v, masks=None, **options):
    outs, lses = [], []
    for b in range(len(qo) - 1):
        o, s = prefill_ref(q[qo[b]:qo[b + 1]], k[kv[b]:kv[b + 1]], v[kv[b]:kv[b + 1]],
                           mask=None if masks is None else masks[b], **options)
        outs.append(o)
        lses.append(s)
    return np.concatenate(outs), np.concatenate(lses)


def paged(k, v, kv, page_size, spare_pages=3, padding=0):
    """Ragged k / v in shuffled pages: ((k_cache, v_cache) NHD, indptr, indices (+ padding), last)."""
    lengths = np.diff(kv)
    pages = [(n + page_size - 1) // page_size for n in lengths]
    page_indptr = indptr(pages)
    order = rng.permutation(page_indptr[-1] + spare_pages).astype(np.int32)
    k_cache = np.zeros((order.size, page_size) + k.shape[1:], np.float16)
    v_cache = np.zeros_like(k_cache)
    for b, n in enumerate(lengths):
        for j in range(n):
            page = order[page_indptr[b] + j // page_size]
            k_cache[page, j % page_size] = k[kv[b] + j]
            v_cache[page, j % page_size] = v[kv[b] + j]
    last = np.array([n - (p - 1) * page_size if p else 0 for n, p in zip(lengths, pages)], np.int32)
    indices = np.concatenate([order[:page_indptr[-1]], np.zeros(padding, np.int32)])
    return (k_cache, v_cache), page_indptr, indices, last


def close(actual, expected):
    """An f16 result (any host) against its float64 reference."""
    assert_close(as_f64(actual), expected, "f16")


def pinned(values, host):
    """Host metadata as vLLM stages it for a plan: int32, pinned on CUDA."""
    return on_host(values, host, "i32", pinned=True)


def caches(cache, host):
    """A (k_cache, v_cache) pair of NumPy caches on the host's device."""
    return tuple(on_device(c, host) for c in cache)


def assert_lse(actual, expected):
    actual = as_f64(actual)
    empty = np.isneginf(expected)
    np.testing.assert_array_equal(np.isneginf(actual), empty)
    assert_close(actual[~empty], expected[~empty], "f16")


def count_updates(monkeypatch):
    """A list that grows by one for every C plan update (a plan or a re-plan)."""
    calls = []
    update = ignis._ext.prefill_plan_update

    def counting(*args):
        calls.append(args)
        return update(*args)

    monkeypatch.setattr(ignis._ext, "prefill_plan_update", counting)
    return calls


WORKSPACE = 1 << 20


# ---- signatures ---------------------------------------------------------------------------------
# FlashInfer 0.7.2.post1's parameters (name, default; REQ: none), from its sources.
REQ = inspect.Parameter.empty
PAGED_INIT = [("float_workspace_buffer", REQ), ("kv_layout", "NHD"), ("use_cuda_graph", False),
              ("qo_indptr_buf", None), ("paged_kv_indptr_buf", None), ("paged_kv_indices_buf", None),
              ("paged_kv_last_page_len_buf", None), ("custom_mask_buf", None), ("mask_indptr_buf", None),
              ("backend", "auto"), ("jit_args", None), ("jit_kwargs", None), ("variant_owns_mask", False)]
RAGGED_INIT = [("float_workspace_buffer", REQ), ("kv_layout", "NHD"), ("use_cuda_graph", False),
               ("qo_indptr_buf", None), ("kv_indptr_buf", None), ("custom_mask_buf", None),
               ("mask_indptr_buf", None), ("backend", "auto"), ("jit_args", None), ("jit_kwargs", None),
               ("variant_owns_mask", False)]
SINK_INIT = PAGED_INIT[:10] + [("pos_encoding_mode", "NONE"), ("use_fp16_qk_reduction", False),
                               ("q_data_type", "bfloat16"), ("kv_data_type", "bfloat16"), ("head_dim_qk", 128),
                               ("head_dim_vo", 128), ("window_left", -1)]
_PLAN_HEAD = [("head_dim_vo", None), ("custom_mask", None), ("packed_custom_mask", None), ("causal", False),
              ("pos_encoding_mode", "NONE"), ("use_fp16_qk_reduction", False)]
_MULTI = [("prefix_len_ptr", None), ("token_pos_in_items_ptr", None), ("token_pos_in_items_len", 0),
          ("max_item_len_ptr", None)]
PAGED_PLAN = ([(n, REQ) for n in ("qo_indptr", "paged_kv_indptr", "paged_kv_indices", "paged_kv_last_page_len",
                                  "num_qo_heads", "num_kv_heads", "head_dim_qk", "page_size")] + _PLAN_HEAD
              + [("sm_scale", None), ("window_left", -1), ("logits_soft_cap", None), ("rope_scale", None),
                 ("rope_theta", None), ("q_data_type", "float16"), ("kv_data_type", None), ("o_data_type", None),
                 ("non_blocking", True)] + _MULTI
              + [("seq_lens", None), ("seq_lens_q", None), ("block_tables", None), ("max_token_per_sequence", None),
                 ("max_sequence_kv", None), ("fixed_split_size", None), ("disable_split_kv", False),
                 ("uniform_q_len", None)])
PAGED_WORKSPACE_SIZE = [p for p in PAGED_PLAN if p[0] != "non_blocking"]
RAGGED_PLAN = ([(n, REQ) for n in ("qo_indptr", "kv_indptr", "num_qo_heads", "num_kv_heads", "head_dim_qk")]
               + _PLAN_HEAD
               + [("window_left", -1), ("logits_soft_cap", None), ("sm_scale", None), ("rope_scale", None),
                  ("rope_theta", None), ("q_data_type", "float16"), ("kv_data_type", None), ("o_data_type", None),
                  ("non_blocking", True)] + _MULTI
               + [("fixed_split_size", None), ("disable_split_kv", False), ("seq_lens", None), ("seq_lens_q", None),
                  ("max_token_per_sequence", None), ("max_sequence_kv", None), ("v_indptr", None),
                  ("o_indptr", None), ("uniform_q_len", None)])
PAGED_RUN = [("q", REQ), ("paged_kv_cache", REQ), ("*args", None), ("q_scale", None), ("k_scale", None),
             ("v_scale", None), ("out", None), ("lse", None), ("return_lse", False), ("lse_base", "log2"),
             ("lse_layout", "NH"), ("enable_pdl", None), ("window_left", None), ("sinks", None), ("kv_cache_sf", None),
             ("skip_softmax_threshold_scale_factor", None), ("use_fp16_softmax", None), ("uses_spcompress", None)]
RAGGED_RUN = [("q", REQ), ("k", REQ), ("v", REQ), ("*args", None), ("q_scale", None), ("k_scale", None),
              ("v_scale", None), ("o_scale", None), ("out", None), ("lse", None), ("return_lse", False),
              ("lse_base", "log2"), ("lse_layout", "NH"), ("enable_pdl", None), ("kv_cache_sf", None)]
_FORWARD_TAIL = [("window_left", -1), ("logits_soft_cap", None), ("sm_scale", None), ("rope_scale", None),
                 ("rope_theta", None)]
PAGED_FORWARD = ([("q", REQ), ("paged_kv_cache", REQ), ("causal", False), ("pos_encoding_mode", "NONE"),
                  ("use_fp16_qk_reduction", False), ("k_scale", None), ("v_scale", None)] + _FORWARD_TAIL)
RAGGED_FORWARD = ([("q", REQ), ("k", REQ), ("v", REQ), ("causal", False), ("pos_encoding_mode", "NONE"),
                   ("use_fp16_qk_reduction", False)] + _FORWARD_TAIL)
SINGLE = ([("q", REQ), ("k", REQ), ("v", REQ), ("scale_q", None), ("scale_k", None), ("scale_v", None),
           ("o_dtype", None), ("custom_mask", None), ("packed_custom_mask", None), ("causal", False),
           ("kv_layout", "NHD"), ("pos_encoding_mode", "NONE"), ("use_fp16_qk_reduction", False), ("sm_scale", None),
           ("window_left", -1), ("logits_soft_cap", None), ("rope_scale", None), ("rope_theta", None),
           ("backend", "auto"), ("return_lse", False), ("kv_cache_sf", None), ("k_scale", None), ("v_scale", None)])


def check_signature(fn, expected):
    """FlashInfer's parameters first, in order, same kinds and defaults; anything after is keyword-only."""
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
    got = []
    for p in params[:len(expected)]:
        if p.kind is p.VAR_POSITIONAL:
            got.append(("*" + p.name, None))
        else:
            got.append((p.name, p.default))
    assert got == expected
    var_at = [i for i, (name, _) in enumerate(expected) if name.startswith("*")]
    for i, p in enumerate(params[:len(expected)]):
        keyword_only = bool(var_at) and i > var_at[0]
        if not p.name.startswith("*") and p.kind is not p.VAR_POSITIONAL:
            assert (p.kind is p.KEYWORD_ONLY) == keyword_only, p.name
    assert all(p.kind is p.KEYWORD_ONLY for p in params[len(expected):]), [p.name for p in params[len(expected):]]


@pytest.mark.parametrize("fn, expected", [
    (ignis.BatchPrefillWithPagedKVCacheWrapper.__init__, PAGED_INIT),
    (ignis.BatchPrefillWithRaggedKVCacheWrapper.__init__, RAGGED_INIT),
    (ignis.prefill.BatchAttentionWithAttentionSinkWrapper.__init__, SINK_INIT),
    (ignis.BatchPrefillWithPagedKVCacheWrapper.plan, PAGED_PLAN),
    (ignis.BatchPrefillWithPagedKVCacheWrapper.begin_forward, PAGED_PLAN),
    (ignis.BatchPrefillWithPagedKVCacheWrapper.workspace_size, PAGED_WORKSPACE_SIZE),
    (ignis.BatchPrefillWithRaggedKVCacheWrapper.plan, RAGGED_PLAN),
    (ignis.BatchPrefillWithPagedKVCacheWrapper.run, PAGED_RUN),
    (ignis.prefill.BatchAttentionWithAttentionSinkWrapper.run, PAGED_RUN),
    (ignis.BatchPrefillWithRaggedKVCacheWrapper.run, RAGGED_RUN),
    (ignis.BatchPrefillWithPagedKVCacheWrapper.forward, PAGED_FORWARD),
    (ignis.BatchPrefillWithPagedKVCacheWrapper.forward_return_lse, PAGED_FORWARD),
    (ignis.BatchPrefillWithRaggedKVCacheWrapper.forward, RAGGED_FORWARD),
    (ignis.BatchPrefillWithRaggedKVCacheWrapper.forward_return_lse, RAGGED_FORWARD),
    (ignis.single_prefill_with_kv_cache, SINGLE),
], ids=lambda x: getattr(x, "__qualname__", "") if callable(x) else "")
def test_flashinfer_signatures(fn, expected):
    check_signature(fn, expected)


def test_unknown_and_unsupported_constructor_arguments():
    for cls in (ignis.BatchPrefillWithPagedKVCacheWrapper, ignis.BatchPrefillWithRaggedKVCacheWrapper):
        with pytest.raises(TypeError):
            cls(None, "NHD", no_such_argument=1)
        with pytest.raises(ignis.UnsupportedError, match="jit_args"):
            cls(None, jit_args=["uri"])
        with pytest.raises(ignis.UnsupportedError, match="jit_kwargs"):
            cls(None, jit_kwargs={})
        with pytest.raises(ignis.UnsupportedError, match="variant_owns_mask"):
            cls(None, variant_owns_mask=True)
        with pytest.raises(ignis.InvalidArgumentError, match="qo_indptr_buf"):
            cls(None, use_cuda_graph=True)
        cls(np.zeros(64, np.int8), "HND", backend="fa2")  # any backend name, any byte workspace
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(None)
    with pytest.raises(TypeError):
        wrapper.plan(indptr([1]), indptr([1]), np.zeros(1, np.int32), np.ones(1, np.int32), 2, 1, 64, 1, bogus=3)
    with pytest.raises(ignis.InvalidArgumentError, match="paged_kv_last_page_len_buf"):
        ignis.BatchPrefillWithPagedKVCacheWrapper(None, use_cuda_graph=True, qo_indptr_buf=np.zeros(3, np.int32),
                                                  paged_kv_indptr_buf=np.zeros(3, np.int32),
                                                  paged_kv_indices_buf=np.zeros(8, np.int32),
                                                  paged_kv_last_page_len_buf=np.zeros(3, np.int32))


# ---- vLLM --------------------------------------------------------------------------------------
def vllm_plan(wrapper, host, qo, page_indptr, indices, last, seq_lens, heads, kv_heads, dim, page_size, causal,
              scale, window_left=-1, logits_soft_cap=None, **extra):
    """vLLM 0.33's FlashInferMetadataBuilder plan call (flashinfer.py:1870), keyword for keyword:
    the host metadata pinned CPU tensors on CUDA, the page indices on the device."""
    dtype = model_dtype(host)
    wrapper.plan(qo_indptr=pinned(qo, host), paged_kv_indptr=pinned(page_indptr, host),
                 paged_kv_indices=on_device(indices, host, "i32"), paged_kv_last_page_len=pinned(last, host),
                 seq_lens=pinned(seq_lens, host), num_qo_heads=heads, num_kv_heads=kv_heads, head_dim_qk=dim,
                 page_size=page_size, causal=causal, sm_scale=scale, window_left=window_left,
                 logits_soft_cap=logits_soft_cap, q_data_type=dtype, kv_data_type=dtype, o_data_type=dtype,
                 fixed_split_size=-1, disable_split_kv=False, **extra)


@pytest.mark.parametrize("host", HOSTS)
def test_vllm_paged_prefill(host):
    heads, kv_heads, dim, page_size = 32, 8, 128, 16
    q_lens, kv_lens = [7, 1, 12], [7, 21, 40]  # a new prompt, a chunk continuing, a prefix hit
    qo, kv, q, k, v = batch(q_lens, kv_lens, heads, kv_heads, dim)
    cache, page_indptr, indices, last = paged(k, v, kv, page_size)
    scale = dim ** -0.5
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace(host, "vllm"), "NHD", backend="auto")
    vllm_plan(wrapper, host, qo, page_indptr, indices, last, kv_lens, heads, kv_heads, dim, page_size, True, scale)
    assert wrapper._window_left == -1
    assert wrapper._logits_soft_cap == (None or 0.0)
    assert wrapper._sm_scale == scale
    assert wrapper._causal is True
    out = on_device(np.full(q.shape, np.nan), host)
    got = wrapper.run(on_device(q, host), caches(cache, host), q_scale=1.0, k_scale=0.5, v_scale=2.0, out=out,
                      kv_cache_sf=None)
    assert got is out
    close(out, reference(qo, kv, q, k, v, causal=True, k_scale=0.5, v_scale=2.0)[0])


@pytest.mark.parametrize("host", HOSTS)
def test_vllm_paged_window_soft_cap_and_errors(host):
    heads, kv_heads, dim, page_size = 8, 2, 64, 16
    q_lens, kv_lens = [9, 30], [9, 45]
    qo, kv, q, k, v = batch(q_lens, kv_lens, heads, kv_heads, dim)
    cache, page_indptr, indices, last = paged(k, v, kv, page_size)
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace(host, "vllm"), "NHD", backend="auto")
    vllm_plan(wrapper, host, qo, page_indptr, indices, last, kv_lens, heads, kv_heads, dim, page_size, True, 0.2,
              window_left=11, logits_soft_cap=30.0)
    assert (wrapper._window_left, wrapper._logits_soft_cap, wrapper._sm_scale) == (11, 30.0, 0.2)
    q_on, cache_on = on_device(q, host), caches(cache, host)
    out = wrapper.run(q_on, cache_on, q_scale=1.0, k_scale=1.0, v_scale=1.0, kv_cache_sf=None)
    close(out, reference(qo, kv, q, k, v, causal=True, window_left=11, logits_soft_cap=30.0, sm_scale=0.2)[0])
    with pytest.raises(ignis.UnsupportedError, match="kv_cache_sf"):
        wrapper.run(q_on, cache_on, kv_cache_sf=cache_on)
    with pytest.raises(ignis.InvalidArgumentError, match="seq_lens"):
        vllm_plan(wrapper, host, qo, page_indptr, indices, last, [9, 44], heads, kv_heads, dim, page_size, True, 0.2)
    with pytest.raises(ignis.UnsupportedError, match="o_data_type"):
        wrapper.plan(qo, page_indptr, indices, last, heads, kv_heads, dim, page_size, q_data_type="float16",
                     o_data_type="bfloat16")
    with pytest.raises(ignis.UnsupportedError, match="q_data_type"):
        wrapper.plan(qo, page_indptr, indices, last, heads, kv_heads, dim, page_size, q_data_type="float8_e4m3fn")


@pytest.mark.parametrize("host", HOSTS)
def test_vllm_dcp_context_and_new_tokens(host):
    """BatchDCPPrefillWrapper: paged context (causal=False, block_tables: vLLM's device block
    table) + ragged new tokens (causal=True), both planned from the pinned host indptrs, each run
    with return_lse=True, merged: equals causal attention over both."""
    heads, kv_heads, dim, page_size = 4, 2, 64, 16
    ctx_lens, new_lens = [20, 33], [5, 8]
    qo, kv_ctx = indptr(new_lens), indptr(ctx_lens)
    q = f16((qo[-1], heads, dim))
    k_ctx, v_ctx = f16((kv_ctx[-1], kv_heads, dim)), f16((kv_ctx[-1], kv_heads, dim))
    k_new, v_new = f16((qo[-1], kv_heads, dim)), f16((qo[-1], kv_heads, dim))
    cache, page_indptr, indices, last = paged(k_ctx, v_ctx, kv_ctx, page_size)
    pages = np.diff(page_indptr)
    tables = np.full((2, pages.max() + 2), 9999, np.int32)
    for b in range(2):
        tables[b, :pages[b]] = indices[page_indptr[b]:page_indptr[b + 1]]
    buffer = workspace(host, "vllm")
    context = ignis.BatchPrefillWithPagedKVCacheWrapper(buffer, "NHD")
    new_tokens = ignis.BatchPrefillWithRaggedKVCacheWrapper(buffer)
    scale, dtype = 0.125, model_dtype(host)
    context.plan(qo_indptr=pinned(qo, host), paged_kv_indptr=pinned(page_indptr, host),
                 paged_kv_indices=on_device(indices, host, "i32"), paged_kv_last_page_len=pinned(last, host),
                 seq_lens=pinned(ctx_lens, host), num_qo_heads=heads, num_kv_heads=kv_heads, head_dim_qk=dim,
                 page_size=page_size, causal=False, sm_scale=scale, window_left=-1, logits_soft_cap=None,
                 q_data_type=dtype, kv_data_type=dtype, fixed_split_size=-1, disable_split_kv=False,
                 block_tables=on_device(tables, host, "i32"))
    new_tokens.plan(qo_indptr=pinned(qo, host), kv_indptr=pinned(qo, host), num_qo_heads=heads, num_kv_heads=kv_heads,
                    head_dim_qk=dim, head_dim_vo=dim, causal=True, sm_scale=scale, window_left=-1,
                    logits_soft_cap=None, q_data_type=dtype)
    for w, causal in ((context, False), (new_tokens, True)):
        assert (w._window_left, w._logits_soft_cap, w._sm_scale, w._causal) == (-1, 0.0, scale, causal)
    q_on = on_device(q, host)
    out_c, lse_c = context.run(q_on, caches(cache, host), k_scale=1.0, v_scale=1.0, return_lse=True)
    out_n, lse_n = new_tokens.run(q_on, on_device(k_new, host), on_device(v_new, host), return_lse=True)
    merged, _ = ignis.merge_state(out_c, lse_c, out_n, lse_n)
    full_k = np.concatenate([np.concatenate([k_ctx[kv_ctx[b]:kv_ctx[b + 1]], k_new[qo[b]:qo[b + 1]]])
                             for b in range(2)])
    full_v = np.concatenate([np.concatenate([v_ctx[kv_ctx[b]:kv_ctx[b + 1]], v_new[qo[b]:qo[b + 1]]])
                             for b in range(2)])
    kv_full = indptr(np.array(ctx_lens) + np.array(new_lens))
    close(merged, reference(qo, kv_full, q, full_k, full_v, causal=True, sm_scale=scale)[0])
    tables[1, 0] = tables[1, 1]
    with pytest.raises(ignis.InvalidArgumentError, match="block_tables"):
        context.plan(qo, page_indptr, indices, last, heads, kv_heads, dim, page_size,
                     block_tables=on_device(tables, host, "i32"))


@pytest.mark.parametrize("host", HOSTS)
def test_vllm_attention_sink_wrapper(host):
    heads, kv_heads, dim, page_size = 8, 2, 64, 16
    q_lens, kv_lens = [6, 11], [6, 30]
    qo, kv, q, k, v = batch(q_lens, kv_lens, heads, kv_heads, dim)
    cache, page_indptr, indices, last = paged(k, v, kv, page_size)
    sinks = rng.standard_normal(heads).astype(np.float32)
    sink_cls = ignis.prefill.BatchAttentionWithAttentionSinkWrapper
    wrapper = sink_cls(workspace(host, "vllm"), "NHD", backend="auto", q_data_type=model_dtype(host),
                       kv_data_type=model_dtype(host), head_dim_qk=dim, head_dim_vo=dim, window_left=7)
    vllm_plan(wrapper, host, qo, page_indptr, indices, last, kv_lens, heads, kv_heads, dim, page_size, True, 0.125,
              window_left=7)
    q_on, cache_on, sinks_on = on_device(q, host), caches(cache, host), on_device(sinks, host, "f32")
    out = on_device(np.zeros(q.shape), host)
    wrapper.run(q_on, cache_on, sinks_on, 0.125 * 1.0 * 0.5, v_scale=1.5, out=out)  # scale * q_scale * k_scale
    close(out, reference(qo, kv, q, k, v, causal=True, window_left=7, sm_scale=0.0625, v_scale=1.5, sinks=sinks)[0])
    out2 = wrapper.run(q_on, cache_on, sinks_on)  # the planned scale
    close(out2, reference(qo, kv, q, k, v, causal=True, window_left=7, sm_scale=0.125, sinks=sinks)[0])
    with pytest.raises(ignis.InvalidArgumentError, match="sinks"):
        wrapper.run(q_on, cache_on)
    with pytest.raises(ignis.UnsupportedError, match="k_scale"):
        wrapper.run(q_on, cache_on, sinks_on, 0.1, k_scale=2.0)
    with pytest.raises(ignis.InvalidArgumentError, match="kv_data_type"):
        wrapper.plan(qo, page_indptr, indices, last, heads, kv_heads, dim, page_size, q_data_type="float16",
                     kv_data_type="bfloat16")
    with pytest.raises(ignis.InvalidArgumentError, match="backend"):
        sink_cls(None, backend="trtllm-gen")


# ---- SGLang ------------------------------------------------------------------------------------
def sglang_begin_forward(wrapper, host, qo, kv_indptr, kv_indices, last, heads, kv_heads, dim, custom_mask=None,
                         **extra):
    """SGLang's FlashInferIndicesUpdaterPrefill.call_begin_forward, paged part (page size 1): every
    index array and the custom mask on the device (NumPy arrays are moved to the host's device;
    tensors are passed as given)."""
    def device(x, dtype="i32"):
        return on_device(x, host, dtype) if isinstance(x, np.ndarray) else x

    wrapper.begin_forward(device(qo), device(kv_indptr), device(kv_indices), device(last), heads, kv_heads, dim, 1,
                          q_data_type=model_dtype(host), kv_data_type=model_dtype(host),
                          custom_mask=None if custom_mask is None else device(custom_mask, "bool"), non_blocking=True,
                          fixed_split_size=None, prefix_len_ptr=None, token_pos_in_items_ptr=None,
                          token_pos_in_items_len=0, max_item_len_ptr=None, **extra)


def token_pools(cache, host):
    """SGLang's token-major K and V pools [tokens, heads, dim] (contiguous) of a page-size-1 cache."""
    k_cache, v_cache = cache
    return on_device(k_cache[:, 0], host), on_device(v_cache[:, 0], host)


@pytest.mark.parametrize("host", HOSTS)
def test_sglang_paged_forward_replans_once(host, monkeypatch):
    heads, kv_heads, dim = 8, 2, 64
    q_lens, kv_lens = [4, 9, 1], [4, 25, 17]
    qo, kv, q, k, v = batch(q_lens, kv_lens, heads, kv_heads, dim)
    cache, kv_indptr, kv_indices, last = paged(k, v, kv, 1, padding=256)
    kv_cache, q_on = token_pools(cache, host), on_device(q, host)
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace(host, "sglang"), "NHD", backend="fa2")
    updates = count_updates(monkeypatch)
    scaling = dim ** -0.5
    ref_causal = reference(qo, kv, q, k, v, causal=True)
    for step in range(2):
        sglang_begin_forward(wrapper, host, qo, kv_indptr, kv_indices, last, heads, kv_heads, dim)
        for layer in range(3):
            out = wrapper.forward(q_on, kv_cache, causal=True, sm_scale=scaling, window_left=-1, logits_soft_cap=None,
                                  k_scale=1.0, v_scale=1.0)
            close(out, ref_causal[0])
        assert len(updates) == (2 if step == 0 else 3)  # plan + one re-plan, then the plan alone
        assert wrapper._causal is True and wrapper._sm_scale == scaling
    out, lse = wrapper.forward_return_lse(q_on, kv_cache, causal=False, sm_scale=0.3, window_left=5,
                                          logits_soft_cap=4.0, k_scale=1.0, v_scale=0.5)
    ref_out, ref_lse = reference(qo, kv, q, k, v, sm_scale=0.3, window_left=5, logits_soft_cap=4.0, v_scale=0.5)
    close(out, ref_out)
    assert_lse(lse, ref_lse)
    assert wrapper._window_left == 5 and wrapper._logits_soft_cap == 4.0
    out = wrapper.run(q_on, kv_cache)  # run keeps what forward set, as FlashInfer's does
    close(out, reference(qo, kv, q, k, v, sm_scale=0.3, window_left=5, logits_soft_cap=4.0)[0])


@pytest.mark.parametrize("host", HOSTS)
def test_sglang_sm_scale_alone_does_not_replan(host, monkeypatch):
    heads, kv_heads, dim = 4, 2, 128
    qo, kv, q, k, v = batch([5, 3], [5, 12], heads, kv_heads, dim)
    cache, kv_indptr, kv_indices, last = paged(k, v, kv, 1)
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace(host, "sglang"))
    wrapper.begin_forward(*(on_device(x, host, "i32") for x in (qo, kv_indptr, kv_indices, last)), heads, kv_heads,
                          dim, 1, causal=True)
    updates = count_updates(monkeypatch)
    q_on, kv_cache = on_device(q, host), caches(cache, host)
    for scale in (dim ** -0.5, 0.05, 0.3):  # 128 ** -0.5 is one ulp off 1 / sqrt(128)
        out = wrapper.forward(q_on, kv_cache, causal=True, sm_scale=scale, k_scale=2.0)
        close(out, reference(qo, kv, q, k, v, causal=True, sm_scale=scale, k_scale=2.0)[0])
    assert updates == []


@pytest.mark.parametrize("host", HOSTS)
def test_sglang_ragged_and_paged_merge_to_causal_prefill(host):
    """Extend with a cached prefix: ragged new tokens (causal) + paged prefix (not causal), merged."""
    heads, kv_heads, dim = 4, 2, 64
    prefix_lens, new_lens = [0, 10, 6], [5, 3, 8]
    qo, kv_prefix = indptr(new_lens), indptr(prefix_lens)
    q, k_new, v_new = f16((qo[-1], heads, dim)), f16((qo[-1], kv_heads, dim)), f16((qo[-1], kv_heads, dim))
    k_pre, v_pre = f16((kv_prefix[-1], kv_heads, dim)), f16((kv_prefix[-1], kv_heads, dim))
    cache, kv_indptr, kv_indices, last = paged(k_pre, v_pre, kv_prefix, 1, padding=256)
    last[:] = 1  # SGLang's kv_last_page_len buffer is all ones, empty requests included
    buffer = workspace(host, "sglang")
    ragged = ignis.BatchPrefillWithRaggedKVCacheWrapper(buffer, "NHD", backend="fa2")
    paged_w = ignis.BatchPrefillWithPagedKVCacheWrapper(buffer, "NHD", backend="fa2")
    ragged.begin_forward(on_device(qo, host, "i32"), on_device(qo, host, "i32"), heads, kv_heads, dim,
                         q_data_type=model_dtype(host))
    sglang_begin_forward(paged_w, host, qo, kv_indptr, kv_indices, last, heads, kv_heads, dim)
    q_on, k_on, v_on = on_device(q, host), on_device(k_new, host), on_device(v_new, host)
    o1, s1 = ragged.forward_return_lse(q_on, k_on, v_on, causal=True, sm_scale=0.1, window_left=-1,
                                       logits_soft_cap=None)
    o2, s2 = paged_w.forward_return_lse(q_on, token_pools(cache, host), causal=False, sm_scale=0.1, window_left=-1,
                                        logits_soft_cap=None, k_scale=1.0, v_scale=1.0)
    merged, _ = ignis.merge_state(o1, s1, o2, s2)
    full_k = np.concatenate([np.concatenate([k_pre[kv_prefix[b]:kv_prefix[b + 1]], k_new[qo[b]:qo[b + 1]]])
                             for b in range(3)])
    full_v = np.concatenate([np.concatenate([v_pre[kv_prefix[b]:kv_prefix[b + 1]], v_new[qo[b]:qo[b + 1]]])
                             for b in range(3)])
    ref = reference(qo, indptr(np.add(prefix_lens, new_lens)), q, full_k, full_v, causal=True, sm_scale=0.1)[0]
    close(merged, ref)
    out = ragged.forward(q_on, k_on, v_on, causal=True, sm_scale=0.1, logits_soft_cap=2.0)  # extend, no prefix
    close(out, reference(qo, qo, q, k_new, v_new, causal=True, sm_scale=0.1, logits_soft_cap=2.0)[0])


def cuda_graph_buffers(batch_size, max_pages, host="numpy"):
    return dict(qo_indptr_buf=on_device(np.zeros(batch_size + 1), host, "i32"),
                paged_kv_indptr_buf=on_device(np.zeros(batch_size + 1), host, "i32"),
                paged_kv_indices_buf=on_device(np.zeros(max_pages), host, "i32"),
                paged_kv_last_page_len_buf=on_device(np.zeros(batch_size), host, "i32"))


@pytest.mark.parametrize("host", HOSTS)
def test_sglang_cuda_graph_form_reads_the_buffers(host):
    heads, kv_heads, dim = 4, 2, 64
    buffers = cuda_graph_buffers(2, 512, host)
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace(host, "sglang"), "NHD", use_cuda_graph=True,
                                                        **buffers)
    assert wrapper.is_cuda_graph_enabled
    for name, buffer in buffers.items():
        assert getattr(wrapper, "_" + name) is buffer
    for q_lens, kv_lens in (([3, 3], [10, 20]), ([2, 4], [30, 7])):  # re-plan, same batch size
        qo, kv, q, k, v = batch(q_lens, kv_lens, heads, kv_heads, dim)
        cache, kv_indptr, kv_indices, last = paged(k, v, kv, 1, padding=100)
        sglang_begin_forward(wrapper, host, qo, kv_indptr, kv_indices, last, heads, kv_heads, dim)
        np.testing.assert_array_equal(as_numpy(buffers["qo_indptr_buf"]), qo)
        np.testing.assert_array_equal(as_numpy(buffers["paged_kv_indptr_buf"]), kv_indptr)
        np.testing.assert_array_equal(as_numpy(buffers["paged_kv_indices_buf"])[:kv_indices.size], kv_indices)
        np.testing.assert_array_equal(as_numpy(buffers["paged_kv_last_page_len_buf"]), last)
        for name, buffer in buffers.items():
            assert getattr(wrapper, "_" + name) is buffer
        out = wrapper.forward(on_device(q, host), caches(cache, host), causal=True, sm_scale=0.125)
        close(out, reference(qo, kv, q, k, v, causal=True)[0])
    # the run reads the indices buffer: move every page, write the new indices only there
    k_cache, v_cache = cache
    moved = rng.permutation(k_cache.shape[0]).astype(np.int32)
    k_moved, v_moved = np.empty_like(k_cache), np.empty_like(v_cache)
    k_moved[moved], v_moved[moved] = k_cache, v_cache
    used = kv_indptr[-1]
    write(buffers["paged_kv_indices_buf"], moved[kv_indices[:used]])
    out = wrapper.run(on_device(q, host), caches((k_moved, v_moved), host))
    close(out, reference(qo, kv, q, k, v, causal=True)[0])
    qo3, kv3, q3, k3, v3 = batch([1, 1, 1], [2, 2, 2], heads, kv_heads, dim)
    cache3, kv_indptr3, kv_indices3, last3 = paged(k3, v3, kv3, 1)
    with pytest.raises(ignis.InvalidArgumentError, match="batch size"):
        sglang_begin_forward(wrapper, host, qo3, kv_indptr3, kv_indices3, last3, heads, kv_heads, dim)
    qo4, kv4, q4, k4, v4 = batch([40, 3], [40, 3], heads, kv_heads, dim)
    cache4, kv_indptr4, kv_indices4, last4 = paged(k4, v4, kv4, 1)
    with pytest.raises(ignis.InvalidArgumentError, match="query tokens"):
        sglang_begin_forward(wrapper, host, qo4, kv_indptr4, kv_indices4, last4, heads, kv_heads, dim)
    masks = [rng.random((3, 10)) < 0.5, rng.random((3, 20)) < 0.5]
    qo, kv, q, k, v = batch([3, 3], [10, 20], heads, kv_heads, dim)
    cache, kv_indptr, kv_indices, last = paged(k, v, kv, 1)
    flat = np.concatenate([m.reshape(-1) for m in masks])
    with pytest.raises(ignis.InvalidArgumentError, match="custom_mask_buf"):
        sglang_begin_forward(wrapper, host, qo, kv_indptr, kv_indices, last, heads, kv_heads, dim, custom_mask=flat)


@pytest.mark.parametrize("host", HOSTS)
def test_sglang_cuda_graph_custom_mask(host):
    """Speculative verify: a custom mask copied into custom_mask_buf / mask_indptr_buf; the run
    reads the mask buffer."""
    heads, kv_heads, dim = 4, 2, 64
    mask_buf, mask_indptr_buf = on_device(np.zeros(4096), host, "u8"), on_device(np.zeros(3), host, "i32")
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace(host, "sglang"), "NHD", use_cuda_graph=True,
                                                        custom_mask_buf=mask_buf, mask_indptr_buf=mask_indptr_buf,
                                                        **cuda_graph_buffers(2, 256, host))
    q_lens, kv_lens = [4, 4], [12, 19]
    qo, kv, q, k, v = batch(q_lens, kv_lens, heads, kv_heads, dim)
    cache, kv_indptr, kv_indices, last = paged(k, v, kv, 1)
    masks = [rng.random((a, b)) < 0.6 for a, b in zip(q_lens, kv_lens)]
    masks[1][2] = False  # a row that sees nothing
    flat = np.concatenate([m.reshape(-1) for m in masks])
    sglang_begin_forward(wrapper, host, qo, kv_indptr, kv_indices, last, heads, kv_heads, dim, custom_mask=flat)
    assert wrapper._custom_mask_buf is mask_buf and wrapper._mask_indptr_buf is mask_indptr_buf
    np.testing.assert_array_equal(as_numpy(mask_indptr_buf), [0, 6, 16])
    q_on, cache_on = on_device(q, host), caches(cache, host)
    out, lse = wrapper.forward_return_lse(q_on, cache_on, causal=True, sm_scale=0.125)
    ref_out, ref_lse = reference(qo, kv, q, k, v, masks=masks)
    close(out, ref_out)
    assert_lse(lse, ref_lse)
    mask_buf[:16] = 0  # the run reads the buffer: a cleared mask hides every key
    out, lse = wrapper.run(q_on, cache_on, return_lse=True)
    assert np.all(as_f64(out) == 0) and np.all(np.isneginf(as_f64(lse)))


def sglang_full_graph_workspace_bytes(num_slots, max_num_tokens, heads, kv_heads, dim):
    """The size SGLang gives the full-graph extend wrappers' own workspace
    (FlashInferAttnBackend._full_cg_prefill_workspace_bytes): FlashInfer's split-KV partials for
    the largest bucket (query tiles of 16 / 64 / 128 rows, at least two per SM and KV head, f32
    out and lse), with a quarter more."""
    group = heads // kv_heads
    longest_rows = (max_num_tokens - num_slots + 1) * group
    tile = 128 if longest_rows > 64 and dim < 256 else 64 if longest_rows > 16 else 16
    tiles = -(-max_num_tokens * group // tile) + num_slots - 1
    rows = max(2 * torch.cuda.get_device_properties(0).multi_processor_count // kv_heads, tiles) * tile * heads
    return int(rows * 4 * (dim + 1) * 1.25)


@needs_cuda
@pytest.mark.parametrize("form", ["target_verify", "full_graph_extend"])
def test_sglang_prefill_cuda_graph_replay(form):
    """SGLang's prefill CUDA graphs on the GPU. The wrappers: use_cuda_graph=True on persistent
    device buffers, either _create_prefill_wrappers' for EAGLE target verify (its tree mask in
    custom_mask_buf / mask_indptr_buf, the backend's shared workspace) or
    _create_full_cg_prefill_wrappers' for plain extend (causal, a workspace of their own of
    SGLang's size, zero-length sentinel requests padding the slots). begin_forward positionally
    (outside the graph; device index arrays), forward_extend's paged forward captured on the static
    q after a warm-up (a re-plan for forward's causal, which a capture could not make), then per
    batch begin_forward, the new queries into the static q, replay. The query tokens stay the
    capture's (verify: the draft tokens of each request; extend: the bucket's)."""
    host, heads, kv_heads, dim, bs, slots, max_context = "cuda", 8, 2, 64, 3, 4096, 512
    verify = form == "target_verify"
    tokens = 12 if verify else 16
    k_values, v_values = f16((slots, kv_heads, dim)), f16((slots, kv_heads, dim))
    k_pool, v_pool = on_device(k_values, host), on_device(v_values, host)  # get_kv_buffer(layer_id)
    kv_last_page_len = on_device(np.ones(bs), host, "i32")
    buffers = dict(qo_indptr_buf=on_device(np.zeros(bs + 1), host, "i32"),
                   paged_kv_indptr_buf=on_device(np.zeros(bs + 1), host, "i32"),
                   paged_kv_indices_buf=on_device(np.zeros(bs * max_context + 256), host, "i32"),
                   paged_kv_last_page_len_buf=kv_last_page_len[:bs])
    if verify:
        buffers.update(custom_mask_buf=on_device(np.zeros(tokens * max_context), host, "u8"),
                       mask_indptr_buf=on_device(np.zeros(bs + 1), host, "i32"))
        buffer = workspace(host, "sglang")
    else:
        nbytes = sglang_full_graph_workspace_bytes(bs, tokens, heads, kv_heads, dim)
        buffer = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(buffer, "NHD", use_cuda_graph=True, backend="fa2", **buffers)
    q = on_device(np.zeros((tokens, heads, dim)), host)
    scaling = dim ** -0.5

    def begin_forward(q_lens, prefix_lens):
        """init_forward_metadata_*_cuda_graph: a batch's keys on random pool slots, its masks
        (verify: each draft token sees the prefix, itself and some of the tokens before it), the
        plan. Returns what the reference needs."""
        kv_lens = np.add(q_lens, prefix_lens)
        qo, kv = indptr(q_lens), indptr(kv_lens)
        kv_indices = rng.permutation(slots)[:kv[-1]].astype(np.int32)
        masks = None
        if verify:
            masks = []
            for n, prefix in zip(q_lens, prefix_lens):
                tree = np.tril(rng.random((n, n)) < 0.5)
                np.fill_diagonal(tree, True)
                masks.append(np.concatenate([np.ones((n, prefix), bool), tree], axis=1))
        sglang_begin_forward(wrapper, host, qo, kv, np.concatenate([kv_indices, np.zeros(256, np.int32)]),
                             kv_last_page_len[:bs], heads, kv_heads, dim,
                             custom_mask=None if masks is None else np.concatenate([m.reshape(-1) for m in masks]))
        return qo, kv, k_values[kv_indices], v_values[kv_indices], masks

    def forward():
        return wrapper.forward(q, (k_pool, v_pool), causal=True, sm_scale=scaling, window_left=-1,
                               logits_soft_cap=0.0, k_scale=1.0, v_scale=1.0)

    def new_queries():
        values = f16(q.shape)
        q.copy_(torch.from_numpy(values))
        return values

    if verify:  # 4 draft tokens per request
        batches = [([4, 4, 4], [30, 7, 100]), ([4, 4, 4], [1, 250, 60]), ([4, 4, 4], [400, 0, 9])]
    else:  # 16 tokens over the slots, sentinels (no tokens, no keys) among them
        batches = [([5, 3, 8], [10, 0, 20]), ([2, 14, 0], [300, 5, 0]), ([16, 0, 0], [0, 0, 0])]
    qo, kv, k, v, masks = begin_forward(*batches[0])
    values = new_queries()
    graph, out = capture(forward)
    for step, (q_lens, prefix_lens) in enumerate(batches):
        if step:
            qo, kv, k, v, masks = begin_forward(q_lens, prefix_lens)
            values = new_queries()
        graph.replay()
        torch.cuda.synchronize()
        close(out, reference(qo, kv, values, k, v, masks=masks, causal=not verify)[0])


# ---- arguments ---------------------------------------------------------------------------------
def small_paged(page_size=16, q_lens=(3, 5), kv_lens=(3, 20)):
    qo, kv, q, k, v = batch(list(q_lens), list(kv_lens), 4, 2, 64)
    cache, page_indptr, indices, last = paged(k, v, kv, page_size)
    return qo, kv, q, k, v, cache, page_indptr, indices, last


def test_fixed_split_index_dtypes_and_workspaces():
    qo, kv, q, k, v, cache, page_indptr, indices, last = small_paged(q_lens=(3, 5, 40), kv_lens=(3, 20, 700))
    ref = reference(qo, kv, q, k, v, causal=True)[0]
    outs = []
    for split, buffer in ((None, None), (-1, np.zeros(WORKSPACE, np.int8)), (0, np.zeros(WORKSPACE, np.uint8))):
        wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(buffer)
        wrapper.plan(qo.astype(np.int64), page_indptr.astype(np.int64), indices.astype(np.int64),
                     last.astype(np.int64), 4, 2, 64, 16, causal=True, fixed_split_size=split)
        outs.append(wrapper.run(q, cache))
        assert wrapper._workspace_size == (0 if buffer is None else WORKSPACE)
    for out in outs:
        np.testing.assert_array_equal(out, outs[0])  # -1, None and 0 all mean "no fixed split"
    assert_close(outs[0], ref, "f16")
    wrapper.plan(qo, page_indptr, indices, last, 4, 2, 64, 16, causal=True, fixed_split_size=2)
    assert_close(wrapper.run(q, cache), ref, "f16")
    assert wrapper.workspace_size(qo, page_indptr, indices, last, 4, 2, 64, 16, causal=True) == (0, 0)
    assert_close(wrapper.run(q, cache), ref, "f16")  # workspace_size changed nothing
    huge = page_indptr.astype(np.int64)
    huge[-1] = 2**31
    with pytest.raises(ignis.InvalidArgumentError, match="int32"):
        wrapper.plan(qo, huge, indices, last, 4, 2, 64, 16)
    with pytest.raises(ignis.InvalidArgumentError, match="integers"):
        wrapper.plan(qo.astype(np.float32), page_indptr, indices, last, 4, 2, 64, 16)


def test_boolean_custom_mask_and_checked_lengths():
    qo, kv, q, k, v, cache, page_indptr, indices, last = small_paged(page_size=1)
    masks = [rng.random((3, 3)) < 0.5, rng.random((5, 20)) < 0.5]
    flat = np.concatenate([m.reshape(-1) for m in masks]).astype(bool)
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(None)
    wrapper.plan(qo, page_indptr, indices, last, 4, 2, 64, 1, custom_mask=flat, seq_lens=np.array([3, 20]),
                 seq_lens_q=np.array([3, 5]), max_token_per_sequence=5, max_sequence_kv=20)
    assert_close(wrapper.run(q, cache), reference(qo, kv, q, k, v, masks=masks)[0], "f16")
    with pytest.raises(ignis.InvalidArgumentError, match="seq_lens_q"):
        wrapper.plan(qo, page_indptr, indices, last, 4, 2, 64, 1, seq_lens_q=np.array([3, 4]))
    with pytest.raises(ignis.InvalidArgumentError, match="max_sequence_kv"):
        wrapper.plan(qo, page_indptr, indices, last, 4, 2, 64, 1, max_sequence_kv=19)
    with pytest.warns(UserWarning, match="uniform_q_len"):
        wrapper.plan(qo, page_indptr, indices, last, 4, 2, 64, 1, uniform_q_len=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wrapper.plan(np.array([0, 3, 6], np.int32), page_indptr, indices, last, 4, 2, 64, 1, uniform_q_len=3)


@pytest.mark.parametrize("name, value", [("prefix_len_ptr", np.zeros(2, np.uint32)),
                                         ("token_pos_in_items_ptr", np.zeros(8, np.uint16)),
                                         ("token_pos_in_items_len", 4),
                                         ("max_item_len_ptr", np.zeros(2, np.uint16))])
def test_multi_item_scoring_refused(name, value):
    qo, kv, q, k, v, cache, page_indptr, indices, last = small_paged()
    paged_w = ignis.BatchPrefillWithPagedKVCacheWrapper(None)
    with pytest.raises(ignis.UnsupportedError, match=name):
        paged_w.plan(qo, page_indptr, indices, last, 4, 2, 64, 16, **{name: value})
    ragged = ignis.BatchPrefillWithRaggedKVCacheWrapper(None)
    with pytest.raises(ignis.UnsupportedError, match=name):
        ragged.plan(qo, kv, 4, 2, 64, **{name: value})


def test_ragged_plan_extras():
    qo, kv, q, k, v = batch([4, 6], [9, 6], 4, 2, 64)
    wrapper = ignis.BatchPrefillWithRaggedKVCacheWrapper(np.zeros(WORKSPACE, np.uint8), "NHD", backend="cutlass")
    wrapper.plan(qo, kv, 4, 2, 64, causal=True, seq_lens=np.array([9, 6]), v_indptr=kv, o_indptr=qo,
                 fixed_split_size=-1, o_data_type="float16")
    assert_close(wrapper.run(q, k, v), reference(qo, kv, q, k, v, causal=True)[0], "f16")
    with pytest.raises(ignis.UnsupportedError, match="v_indptr"):
        wrapper.plan(qo, kv, 4, 2, 64, v_indptr=kv + 1)
    with pytest.raises(ignis.UnsupportedError, match="o_scale"):
        wrapper.run(q, k, v, o_scale=0.5)
    wrapper.run(q, k, v, o_scale=1.0, q_scale=None, enable_pdl=True, kv_cache_sf=None)


def test_run_lse_base_layout_and_refusals():
    qo, kv, q, k, v, cache, page_indptr, indices, last = small_paged()
    ref_out, ref_lse = reference(qo, kv, q, k, v, causal=True)
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(None)
    wrapper.plan(qo, page_indptr, indices, last, 4, 2, 64, 16, causal=True)
    _, lse2 = wrapper.run(q, cache, return_lse=True, lse_base="log2")
    assert_lse(lse2, ref_lse)
    _, lse_e = wrapper.run(q, cache, return_lse=True, lse_base="ln")
    assert_lse(lse_e, ref_lse * math.log(2.0))
    out, lse_hn = wrapper.run_return_lse(q, cache, lse_layout="HN", lse_base="ln")
    assert lse_hn.shape == (4, qo[-1])
    assert_lse(lse_hn, (ref_lse * math.log(2.0)).T)
    given = np.empty((4, qo[-1]), np.float32)
    _, got = wrapper.run(q, cache, return_lse=True, lse_layout="HN", lse=given)
    assert got is given
    assert_lse(given, ref_lse.T)
    wrapper.plan(qo, page_indptr, indices, last, 4, 2, 64, 16, causal=True, lse_base="ln")  # ignis' plan option
    _, lse_default = wrapper.run(q, cache, return_lse=True)  # FlashInfer's run default: log2
    assert_lse(lse_default, ref_lse)
    for kwargs, name in ((dict(lse_base="e"), "lse_base"), (dict(lse_layout="NHD"), "lse_layout")):
        with pytest.raises(ignis.InvalidArgumentError, match=name):
            wrapper.run(q, cache, return_lse=True, **kwargs)
    for kwargs, name in ((dict(skip_softmax_threshold_scale_factor=0.1), "skip_softmax"),
                         (dict(use_fp16_softmax=True), "use_fp16_softmax"),
                         (dict(uses_spcompress=True), "uses_spcompress"),
                         (dict(kv_cache_sf=np.zeros(1)), "kv_cache_sf")):
        with pytest.raises(ignis.UnsupportedError, match=name):
            wrapper.run(q, cache, **kwargs)
    with pytest.raises(ignis.UnsupportedError, match="positional"):
        wrapper.run(q, cache, np.ones(4, np.float32))
    with pytest.raises(TypeError):
        wrapper.run(q, cache, no_such_keyword=1)
    assert_close(wrapper.run(q, cache, use_fp16_softmax=False, uses_spcompress=False, enable_pdl=False), ref_out,
                 "f16")


def test_run_window_left_override_replans(monkeypatch):
    qo, kv, q, k, v, cache, page_indptr, indices, last = small_paged(q_lens=(6, 9), kv_lens=(6, 33))
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(None)
    wrapper.plan(qo, page_indptr, indices, last, 4, 2, 64, 16, causal=True)
    updates = count_updates(monkeypatch)
    out = wrapper.run(q, cache, window_left=4)
    assert_close(out, reference(qo, kv, q, k, v, causal=True, window_left=4)[0], "f16")
    assert len(updates) == 1 and wrapper._window_left == -1  # a one-call override
    out = wrapper.run(q, cache)
    assert_close(out, reference(qo, kv, q, k, v, causal=True)[0], "f16")
    assert len(updates) == 2


def test_forward_overrides_rope_and_alibi():
    qo, kv, q, k, v = batch([5, 2], [8, 11], 4, 2, 64)
    wrapper = ignis.BatchPrefillWithRaggedKVCacheWrapper(None)
    wrapper.begin_forward(qo, kv, 4, 2, 64, q_data_type="float16")
    out = wrapper.forward(q, k, v, causal=True, pos_encoding_mode="ROPE_LLAMA", rope_scale=2.0, rope_theta=5e4)
    assert_close(out, reference(qo, kv, q, k, v, causal=True, pos_encoding_mode="ROPE_LLAMA", rope_scale=2.0,
                                rope_theta=5e4)[0], "f16")
    out, lse = wrapper.forward_return_lse(q, k, v, pos_encoding_mode="ALIBI", window_left=3)
    ref_out, ref_lse = reference(qo, kv, q, k, v, pos_encoding_mode="ALIBI", window_left=3)
    assert_close(out, ref_out, "f16")
    assert_lse(lse, ref_lse)


def test_single_prefill_k_scale_v_scale():
    q, k, v = f16((6, 4, 64)), f16((10, 2, 64)), f16((10, 2, 64))
    out = ignis.single_prefill_with_kv_cache(q, k, v, causal=True, k_scale=0.5, v_scale=3.0)
    assert_close(out, prefill_ref(q, k, v, causal=True, k_scale=0.5, v_scale=3.0)[0], "f16")
    out = ignis.single_prefill_with_kv_cache(q, k, v, scale_k=2.0, k_scale=0.5, scale_v=2.0, v_scale=0.25)
    assert_close(out, prefill_ref(q, k, v, v_scale=0.5)[0], "f16")
    out, lse = ignis.single_prefill_with_kv_cache_return_lse(q, k, v, kv_cache_sf=None, lse_base="log2")
    assert_lse(lse, prefill_ref(q, k, v)[1])
    with pytest.raises(ignis.UnsupportedError, match="kv_cache_sf"):
        ignis.single_prefill_with_kv_cache(q, k, v, kv_cache_sf=(k, v))


@pytest.mark.skipif(torch is None, reason="needs PyTorch")
def test_torch_host_tensors_and_buffers():
    """PyTorch host tensors: int64 index tensors, a bool mask tensor, torch CUDA-graph buffers."""
    heads, kv_heads, dim = 4, 2, 64
    qo, kv, q, k, v = batch([3, 4], [9, 14], heads, kv_heads, dim)
    (k_cache, v_cache), kv_indptr, kv_indices, last = paged(k, v, kv, 1, padding=10)
    masks = [rng.random((3, 9)) < 0.5, rng.random((4, 14)) < 0.5]
    flat = torch.from_numpy(np.concatenate([m.reshape(-1) for m in masks]))
    buffers = {name: torch.from_numpy(b) for name, b in cuda_graph_buffers(2, 64).items()}
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(
        torch.zeros(WORKSPACE, dtype=torch.int8), "NHD", use_cuda_graph=True,
        custom_mask_buf=torch.zeros(64, dtype=torch.uint8), mask_indptr_buf=torch.zeros(3, dtype=torch.int32),
        **buffers)
    index = [torch.from_numpy(x.astype(np.int64)) for x in (qo, kv_indptr, kv_indices, last)]
    sglang_begin_forward(wrapper, "torch", *index, heads, kv_heads, dim, custom_mask=flat)
    assert torch.equal(buffers["paged_kv_indices_buf"][:kv_indices.size], index[2].to(torch.int32))
    tq = torch.from_numpy(q)
    out = wrapper.forward(tq, (torch.from_numpy(k_cache[:, 0]), torch.from_numpy(v_cache[:, 0])), causal=True)
    assert isinstance(out, torch.Tensor)
    assert_close(out.numpy(), reference(qo, kv, q, k, v, masks=masks)[0], "f16")
