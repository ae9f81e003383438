"""FlashInfer's block-table decode entry points (ignis.trtllm) as vLLM 0.33.0 calls them on the H200
(``xqa_batch_decode_with_kv_cache`` from ``vllm/v1/attention/backends/flashinfer.py``, every argument
by keyword in its order) and as its SM100 path calls ``trtllm_batch_decode_with_kv_cache``, against
the float64 reference of refs.py, on every host of engine_arrays.py (NumPy and PyTorch CPU tensors on
the CPU backend; CUDA tensors on the CUDA backend, with vLLM's block table and seq_lens on the device).

- Shapes: GQA 32/8 and 64/8, head dims 128 and 64, pages of 16 and 1, NHD and HND (HND as vLLM 0.33
  keeps it: K and V the halves of each token row, Cache.vllm_pair), mixed lengths
  (empty requests, a page boundary, mid-page ends), q_len_per_req 1 and 2, sinks, a sliding window,
  bmm1 / bmm2 scales, the (k_cache, v_cache) pair and the one [pages, 2, ...] tensor, block tables
  wider than needed and padded rows, max_seq_len below the longest request (still computed in full).
- The block table's batch comes from the query (extra rows ignored); out, lse, return_lse.
- CUDA: the call captured in a CUDA graph, replayed after writing new block tables, seq_lens and q
  into the captured tensors, as vLLM's graph runner does.
- Refusals naming the argument: NVFP4, masks, ragged queries, device scales, other backends.

``trtllm_batch_context_with_kv_cache`` (prefill over a block table) as vLLM 0.33.0 calls it: its
TRT-LLM prefill path (every argument by keyword in its order, HND cache pair, causal chunked prefill)
and its DCP context pass (``causal=False``, ``return_lse=True`` with its own lse and out), against
refs.prefill_ref per request: mixed query lengths (1 token, whole prompts, chunks on top of cached
keys), keys ending mid-page, GQA 32/8 and 64/8, head dims 128 and 64, pages of 16 and 1, sinks, a
window, longer block tables / seq_lens / cum_seq_lens_q than batch_size; on CUDA, the call captured
in a graph and replayed with new block tables, seq_lens, cum_seq_lens_q and q written in place."""

import math

import numpy as np
import pytest

import ignis
import ignis._flashinfer.decode as fi_decode
from engine_arrays import HOSTS, as_f64, capture, needs_cuda, on_device, write
import ignis._flashinfer.prefill as fi_prefill
from ignis.trtllm import trtllm_batch_decode_with_kv_cache, xqa_batch_decode_with_kv_cache
from refs import decode_ref, prefill_ref, torch

rng = np.random.default_rng(29)
TOL = 2e-3  # f16 inputs, fp32 accumulation: relative to the largest |out|


class Cache:
    """num_pages pages of f16 K/V in `layout`, as vLLM allocates its per-layer cache
    ([num_pages, 2, ...]), kept as float64 for the reference."""

    def __init__(self, num_pages, page_size, kv_heads, dim, layout, host):
        self.page_size, self.layout = page_size, layout
        shape = (num_pages, 2, page_size, kv_heads, dim) if layout == "NHD" else (num_pages, 2, kv_heads, page_size,
                                                                                   dim)
        values = np.asarray(rng.standard_normal(shape), np.float16)
        self.values = values.astype(np.float64)
        self.cache = on_device(values, host)

    def pair(self):
        return self.cache[:, 0], self.cache[:, 1]

    def vllm_pair(self, host):
        """vLLM 0.33's kv_cache_tuple of the same values: one [num_pages, kv_heads, page_size, 2 * dim]
        (HND) tensor, K and V side by side in the last dimension, split into two views (token stride
        2 * dim, V at element offset dim)."""
        joined = np.concatenate([self.values[:, 0], self.values[:, 1]], axis=-1).astype(np.float16)
        tensor = on_device(joined, host)
        dim = self.values.shape[-1]
        return tensor[..., :dim], tensor[..., dim:]

    def tokens(self, pages, length, which):
        """[length, kv_heads, dim] keys (which=0) or values (1) of a request's pages."""
        part = self.values[np.asarray(pages, dtype=np.int64), which]
        if self.layout == "HND":
            part = part.transpose(0, 2, 1, 3)
        return part.reshape(-1, part.shape[2], part.shape[3])[:length]


def block_table(lengths, page_size, num_pages, width):
    """A [batch, width] table of distinct random pages per request (-1 past a request's pages, which
    must not be read)."""
    perm = rng.permutation(num_pages)
    table = np.full((len(lengths), width), -1, np.int32)
    used = 0
    for b, length in enumerate(lengths):
        n = -(-length // page_size)
        table[b, :n] = perm[used:used + n]
        used += n
    return table


def reference(q, cache, table, lengths, q_len, sm_scale, v_scale, window_left=-1, sinks=None):
    q = as_f64(q)
    out, lse = np.zeros(q.shape), np.zeros(q.shape[:2])
    for b, length in enumerate(lengths):
        pages = table[b, :-(-length // cache.page_size)]
        k, v = cache.tokens(pages, length, 0), cache.tokens(pages, length, 1)
        rows = slice(b * q_len, (b + 1) * q_len)
        out[rows], lse[rows] = decode_ref(q[rows], k, v, sm_scale=sm_scale, window_left=window_left,
                                          v_scale=v_scale, sinks=None if sinks is None else as_f64(sinks))
    return out, lse


def check(out, ref):
    out = as_f64(out)
    scale = max(1.0, float(np.abs(ref).max()))
    assert np.all(np.isfinite(out))
    err = float(np.abs(out - ref).max())
    assert err <= TOL * scale, "max error %g (scale %g)" % (err, scale)


def device_i32(values, host):
    return on_device(values, host, "i32")


CASES = [
    # heads, kv_heads, dim, page_size, layout, q_len, lengths
    (32, 8, 128, 16, "NHD", 1, [37, 0, 16, 300, 5]),
    (64, 8, 128, 16, "HND", 1, [129, 1, 64, 250]),
    (32, 8, 64, 1, "NHD", 2, [40, 3, 17]),
    (32, 8, 128, 1, "HND", 1, [90, 33]),
]


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_xqa_as_vllm_calls_it(host, case):
    heads, kv_heads, dim, page_size, layout, q_len, lengths = CASES[case]
    num_pages = sum(-(-n // page_size) for n in lengths) + 7
    cache = Cache(num_pages, page_size, kv_heads, dim, layout, host)
    width = -(-max(lengths) // page_size) + 3
    table = block_table(lengths, page_size, num_pages, width)
    q = on_device(rng.standard_normal((len(lengths) * q_len, heads, dim)), host)
    sinks = on_device(rng.standard_normal(heads) + 1.0, host, "f32") if case % 2 else None
    window_left = 20 if case == 2 else -1
    sm_scale, v_scale = 0.7 / math.sqrt(dim), 1.25
    out = on_device(np.zeros((len(lengths) * q_len, heads, dim)), host)
    workspace = on_device(np.zeros(64 << 20 if host == "cuda" else 16), host, "u8")
    for bound in (max(lengths), max(lengths) // 3):
        result = fi_decode.xqa_batch_decode_with_kv_cache(
            query=q, kv_cache=cache.vllm_pair(host) if layout == "HND" else cache.pair(), kv_cache_sf=None, workspace_buffer=workspace,
            block_tables=device_i32(table, host), seq_lens=device_i32(lengths, host), max_seq_len=bound,
            bmm1_scale=sm_scale, bmm2_scale=v_scale, window_left=window_left, out=out, sinks=sinks,
            kv_layout=layout, q_len_per_req=q_len, mask=None, q_cu_seq_lens=None)
        assert result is out
        ref_out, _ = reference(q, cache, table, lengths, q_len, sm_scale, v_scale, window_left,
                               None if sinks is None else sinks)
        check(out, ref_out)


@pytest.mark.parametrize("host", HOSTS)
def test_trtllm_decode_lse_and_combined_cache(host):
    heads, kv_heads, dim, page_size, layout = 32, 8, 128, 16, "HND"
    lengths = [70, 0, 33, 160]
    num_pages = 40
    cache = Cache(num_pages, page_size, kv_heads, dim, layout, host)
    table = block_table(lengths, page_size, num_pages, 12)
    # the table has two extra rows (FlashInfer takes the batch from the query)
    padded = np.concatenate([table, np.full((2, 12), -1, np.int32)])
    q = on_device(rng.standard_normal((len(lengths), heads, dim)), host)
    sm_scale = 1.0 / math.sqrt(dim)
    workspace = on_device(np.zeros(64 << 20 if host == "cuda" else 16), host, "u8")
    out, lse = trtllm_batch_decode_with_kv_cache(
        query=q, kv_cache=cache.cache, workspace_buffer=workspace, block_tables=device_i32(padded, host),
        seq_lens=device_i32(lengths + [5, 5], host), max_seq_len=max(lengths), bmm1_scale=sm_scale, bmm2_scale=1.0,
        window_left=-1, sinks=None, o_sf_scale=None, out=None, kv_layout=layout, backend="auto", q_len_per_req=1,
        max_q_len=None, cum_seq_lens_q=None, kv_cache_sf=None, lse=None, return_lse=True,
        multi_ctas_kv_counter_buffer=None)
    ref_out, ref_lse = reference(q, cache, table, lengths, 1, sm_scale, 1.0)
    check(out, ref_out)
    got = as_f64(lse)
    assert np.all(got[1] == -np.inf)  # the empty request
    finite = np.isfinite(ref_lse)
    assert np.allclose(got[finite], ref_lse[finite], atol=1e-2)


@pytest.mark.parametrize("host", HOSTS)
def test_refusals(host):
    cache = Cache(4, 16, 8, 128, "NHD", host)
    q = on_device(np.zeros((1, 32, 128)), host)
    args = dict(query=q, kv_cache=cache.pair(), workspace_buffer=on_device(np.zeros(16), host, "u8"),
                block_tables=device_i32([[0]], host), seq_lens=device_i32([3], host), max_seq_len=3,
                kv_layout="NHD")
    for extra, needle in ((dict(mask=q), "mask"), (dict(q_cu_seq_lens=q), "q_cu_seq_lens"),
                          (dict(kv_cache_sf=(q, q)), "kv_cache_sf"), (dict(o_scale=0.5), "o_scale")):
        with pytest.raises(ignis.UnsupportedError, match=needle):
            xqa_batch_decode_with_kv_cache(**args, **extra)
    for extra, needle in ((dict(out_dtype="nvfp4"), "nvfp4"), (dict(backend="cake"), "backend"),
                          (dict(cum_seq_lens_q=q, max_q_len=2), "cum_seq_lens_q"),
                          (dict(uses_shared_paged_kv_idx=False), "uses_shared_paged_kv_idx"),
                          (dict(enable_block_sparse_attention=True), "block_sparse"),
                          (dict(q_len_per_req=None), "q_len_per_req")):
        with pytest.raises(ignis.UnsupportedError, match=needle):
            trtllm_batch_decode_with_kv_cache(**args, **extra)
    if host == "cuda":
        with pytest.raises(ignis.UnsupportedError, match="bmm1_scale"):
            trtllm_batch_decode_with_kv_cache(**args, bmm1_scale=torch.ones(1, device="cuda"))


@needs_cuda
def test_xqa_cuda_graph_replay():
    """vLLM's decode CUDA graph: the call captured once for a batch of 8, then each step's block
    table, seq_lens and q written into the captured tensors and the graph replayed (padding rows of
    length 0, requests longer than the captured max_seq_len)."""
    heads, kv_heads, dim, page_size, batch, width = 32, 8, 128, 16, 8, 64
    num_pages = batch * width + 5
    cache = Cache(num_pages, page_size, kv_heads, dim, "NHD", "cuda")
    table = torch.zeros((batch, width), dtype=torch.int32, device="cuda")
    seq_lens = torch.ones(batch, dtype=torch.int32, device="cuda")
    q = torch.zeros((batch, heads, dim), dtype=torch.float16, device="cuda")
    out = torch.zeros_like(q)
    workspace = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")
    sm_scale, bound = 1.0 / math.sqrt(dim), 512

    def step():
        return xqa_batch_decode_with_kv_cache(
            query=q, kv_cache=cache.pair(), kv_cache_sf=None, workspace_buffer=workspace, block_tables=table,
            seq_lens=seq_lens, max_seq_len=bound, bmm1_scale=sm_scale, bmm2_scale=1.0, window_left=-1,
            out=out, sinks=None, kv_layout="NHD", q_len_per_req=1, mask=None, q_cu_seq_lens=None)

    graph, _ = capture(step)
    for rep in range(4):
        lengths = [int(x) for x in rng.integers(1, bound * (2 if rep % 2 else 1), batch)]
        lengths[-1] = 0 if rep else lengths[-1]
        lengths[0] = width * page_size if rep == 3 else lengths[0]
        host_table = block_table(lengths, page_size, num_pages, width)
        write(table, host_table)
        write(seq_lens, np.asarray(lengths, np.int32))
        values = rng.standard_normal((batch, heads, dim))
        write(q, values.astype(np.float16))
        graph.replay()
        torch.cuda.synchronize()
        ref_out, _ = reference(q, cache, host_table, lengths, 1, sm_scale, 1.0)
        check(out, ref_out)


# ---- prefill over a block table (trtllm_batch_context_with_kv_cache) -----------------------------
def context_reference(q, cache, table, q_lens, kv_lens, sm_scale, v_scale, causal=True, window_left=-1,
                      sinks=None):
    """out, lse (base 2) of every request: rows cum(q_lens)[b] .. of q against its kv_lens[b] keys."""
    q = as_f64(q)
    out, lse = np.zeros(q.shape), np.zeros(q.shape[:2])
    start = 0
    for b, (q_len, length) in enumerate(zip(q_lens, kv_lens)):
        pages = table[b, :-(-length // cache.page_size)]
        k, v = cache.tokens(pages, length, 0), cache.tokens(pages, length, 1)
        rows = slice(start, start + q_len)
        out[rows], lse[rows] = prefill_ref(q[rows], k, v, causal=causal, sm_scale=sm_scale, window_left=window_left,
                                           v_scale=v_scale, sinks=None if sinks is None else as_f64(sinks))
        start += q_len
    return out, lse


def cumulative(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


CONTEXT_CASES = [
    # heads, kv_heads, dim, page_size, layout, q_lens, kv_lens (cached + new)
    (32, 8, 128, 16, "HND", [37, 1, 16, 20, 5], [37, 50, 16, 300, 21]),
    (64, 8, 128, 16, "HND", [9, 64], [129, 64]),
    (32, 8, 64, 1, "NHD", [3, 17, 1], [40, 17, 9]),
    (32, 8, 128, 16, "NHD", [33, 2], [90, 33]),
]


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("case", range(len(CONTEXT_CASES)))
def test_context_as_vllm_calls_it(host, case):
    """vllm/v1/attention/backends/flashinfer.py:2543 (TRT-LLM prefill): vLLM's HND cache split into K
    and V along the last dimension, batch_size below the arrays' rows (vLLM's tensors are the prefill
    slice; here they carry two padding rows), cum_seq_lens_kv as vLLM fills it (its page indptr)."""
    heads, kv_heads, dim, page_size, layout, q_lens, kv_lens = CONTEXT_CASES[case]
    batch = len(q_lens)
    num_pages = sum(-(-n // page_size) for n in kv_lens) + 5
    cache = Cache(num_pages, page_size, kv_heads, dim, layout, host)
    width = -(-max(kv_lens) // page_size) + 2
    table = block_table(kv_lens, page_size, num_pages, width)
    padded = np.concatenate([table, np.full((2, width), -1, np.int32)])
    cum_q, kv_pages = cumulative(q_lens), cumulative([-(-n // page_size) for n in kv_lens])
    rows = int(cum_q[-1])
    q = on_device(rng.standard_normal((rows, heads, dim)), host)
    sinks = on_device(rng.standard_normal(heads) + 1.0, host, "f32") if case % 2 else None
    window_left = 7 if case == 2 else -1
    sm_scale, v_scale = 0.8 / math.sqrt(dim), 1.25
    out = on_device(np.zeros((rows, heads, dim)), host)
    workspace = on_device(np.zeros(64 << 20 if host == "cuda" else 16), host, "u8")
    kwargs = {} if layout == "HND" else {"kv_layout": "NHD"}  # vLLM's cache is HND: the default
    kv_cache = cache.vllm_pair(host) if layout == "HND" else cache.pair()
    result = fi_prefill.trtllm_batch_context_with_kv_cache(
        query=q, kv_cache=kv_cache, workspace_buffer=workspace, block_tables=device_i32(padded, host),
        seq_lens=device_i32(kv_lens + [3, 3], host), max_q_len=max(q_lens), max_kv_len=max(kv_lens),
        bmm1_scale=sm_scale, bmm2_scale=v_scale, batch_size=batch,
        cum_seq_lens_q=device_i32(np.concatenate([cum_q, [rows, rows]]), host), cum_seq_lens_kv=device_i32(kv_pages, host),
        window_left=window_left, sinks=sinks, o_sf_scale=None, out=out, kv_cache_sf=None,
        multi_ctas_kv_counter_buffer=None, **kwargs)
    assert result is out
    ref_out, _ = context_reference(q, cache, table, q_lens, kv_lens, sm_scale, v_scale, True, window_left,
                                   None if sinks is None else sinks)
    check(out, ref_out)


@pytest.mark.parametrize("host", HOSTS)
def test_context_dcp_pass(host):
    """vllm/v1/attention/backends/flashinfer.py:403 (TrtllmDCPContextWrapper): causal=False over the
    local context, return_lse=True into its own lse, out preallocated; a request with no local keys
    gets out 0 and lse -inf; the combined [pages, 2, ...] cache."""
    heads, kv_heads, dim, page_size = 32, 8, 128, 16
    q_lens, kv_lens = [5, 12, 3], [40, 0, 17]
    num_pages = 12
    cache = Cache(num_pages, page_size, kv_heads, dim, "HND", host)
    table = block_table(kv_lens, page_size, num_pages, 4)
    cum_q = cumulative(q_lens)
    q = on_device(rng.standard_normal((int(cum_q[-1]), heads, dim)), host)
    out = on_device(np.zeros((int(cum_q[-1]), heads, dim)), host)
    lse = on_device(np.zeros((int(cum_q[-1]), heads)), host, "f32")
    sm_scale, k_scale, v_scale = 1.0 / math.sqrt(dim), 0.5, 2.0
    workspace = on_device(np.zeros(64 << 20 if host == "cuda" else 16), host, "u8")
    result = fi_prefill.trtllm_batch_context_with_kv_cache(
        query=q, kv_cache=cache.cache, workspace_buffer=workspace, block_tables=device_i32(table, host),
        seq_lens=device_i32(kv_lens, host), max_q_len=max(q_lens), max_kv_len=max(kv_lens),
        bmm1_scale=sm_scale * k_scale, bmm2_scale=v_scale, batch_size=len(q_lens),
        cum_seq_lens_q=device_i32(cum_q, host), cum_seq_lens_kv=device_i32(cumulative(kv_lens), host), causal=False,
        return_lse=True, lse=lse, out=out)
    assert result[0] is out and result[1] is lse
    # bmm1_scale carries k_scale: the reference scales the logits, not the keys
    ref_out, ref_lse = context_reference(q, cache, table, q_lens, kv_lens, sm_scale * k_scale, v_scale, False)
    check(out, ref_out)
    got = as_f64(lse)
    empty = slice(int(cum_q[1]), int(cum_q[2]))
    assert np.all(got[empty] == -np.inf) and np.all(as_f64(out)[empty] == 0.0)
    finite = np.isfinite(ref_lse)
    assert np.allclose(got[finite], ref_lse[finite], atol=1e-2)


@pytest.mark.parametrize("host", HOSTS)
def test_context_refusals(host):
    cache = Cache(4, 16, 8, 128, "HND", host)
    q = on_device(np.zeros((2, 32, 128)), host)
    args = dict(query=q, kv_cache=cache.pair(), workspace_buffer=on_device(np.zeros(16), host, "u8"),
                block_tables=device_i32([[0]], host), seq_lens=device_i32([3], host), max_q_len=2, max_kv_len=3,
                bmm1_scale=0.1, bmm2_scale=1.0, batch_size=1, cum_seq_lens_q=device_i32([0, 2], host),
                cum_seq_lens_kv=device_i32([0, 3], host))
    for extra, needle in ((dict(out_dtype="nvfp4"), "nvfp4"), (dict(o_sf_scale=1.0), "o_sf_scale"),
                          (dict(backend="cake"), "backend"), (dict(kv_cache_sf=(q, q)), "kv_cache_sf"),
                          (dict(skip_softmax_threshold_scale_factor=1e-3), "skip_softmax"),
                          (dict(uses_shared_paged_kv_idx=False), "uses_shared_paged_kv_idx"),
                          (dict(use_fp16_softmax=True), "use_fp16_softmax"),
                          (dict(uses_spcompress=True), "uses_spcompress"), (dict(sinks=[q]), "sinks")):
        with pytest.raises(ignis.UnsupportedError, match=needle):
            fi_prefill.trtllm_batch_context_with_kv_cache(**args, **extra)
    with pytest.raises(ignis.InvalidArgumentError, match="batch_size"):
        fi_prefill.trtllm_batch_context_with_kv_cache(**dict(args, batch_size=2))
    with pytest.raises(ignis.InvalidArgumentError, match="max_q_len"):
        fi_prefill.trtllm_batch_context_with_kv_cache(**dict(args, max_q_len=-1))
    if host == "cuda":
        with pytest.raises(ignis.UnsupportedError, match="bmm1_scale"):
            fi_prefill.trtllm_batch_context_with_kv_cache(**dict(args, bmm1_scale=torch.ones(1, device="cuda")))
    else:  # host index arrays are checked: a request over max_q_len
        with pytest.raises(ignis.InvalidArgumentError, match="max_q_len"):
            fi_prefill.trtllm_batch_context_with_kv_cache(**dict(args, max_q_len=1))


@needs_cuda
def test_context_cuda_graph_replay():
    """The call captured once for a batch of 4 and max_q_len 64, then each step's block table,
    seq_lens, cum_seq_lens_q and q written into the captured tensors and the graph replayed (a
    request of one token, one of the whole max_q_len, chunks over cached keys)."""
    heads, kv_heads, dim, page_size, batch, width, max_q = 32, 8, 128, 16, 4, 32, 64
    num_pages = batch * width + 5
    cache = Cache(num_pages, page_size, kv_heads, dim, "HND", "cuda")
    table = torch.zeros((batch, width), dtype=torch.int32, device="cuda")
    seq_lens = torch.ones(batch, dtype=torch.int32, device="cuda")
    cum_q = torch.zeros(batch + 1, dtype=torch.int32, device="cuda")
    cum_kv = torch.zeros(batch + 1, dtype=torch.int32, device="cuda")
    rows = batch * max_q
    q = torch.zeros((rows, heads, dim), dtype=torch.float16, device="cuda")
    out = torch.zeros_like(q)
    workspace = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")
    sm_scale = 1.0 / math.sqrt(dim)

    def step():
        return fi_prefill.trtllm_batch_context_with_kv_cache(
            query=q, kv_cache=cache.pair(), workspace_buffer=workspace, block_tables=table, seq_lens=seq_lens,
            max_q_len=max_q, max_kv_len=width * page_size, bmm1_scale=sm_scale, bmm2_scale=1.0, batch_size=batch,
            cum_seq_lens_q=cum_q, cum_seq_lens_kv=cum_kv, window_left=-1, sinks=None, o_sf_scale=None, out=out,
            kv_cache_sf=None, multi_ctas_kv_counter_buffer=None)

    write(cum_q, cumulative([1] * batch))
    graph, _ = capture(step)
    for rep in range(3):
        q_lens = [int(x) for x in rng.integers(1, max_q + 1, batch)]
        q_lens[0], q_lens[-1] = 1, max_q
        kv_lens = [n + int(rng.integers(0, 300)) for n in q_lens]
        host_table = block_table(kv_lens, page_size, num_pages, width)
        write(table, host_table)
        write(seq_lens, np.asarray(kv_lens, np.int32))
        write(cum_q, cumulative(q_lens))
        write(cum_kv, cumulative(kv_lens))
        n = sum(q_lens)
        write(q, rng.standard_normal((n, heads, dim)).astype(np.float16))
        graph.replay()
        torch.cuda.synchronize()
        ref_out, _ = context_reference(q[:n], cache, host_table, q_lens, kv_lens, sm_scale, 1.0)
        check(out[:n], ref_out)
