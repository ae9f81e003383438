"""The MLA wrapper and append (ignis.mla) as SGLang 0.5.23's flashinfer_mla_backend.py drives them,
against a float64 reference over the same paged latent cache, on every host of engine_arrays.py
(NumPy and PyTorch CPU on the CPU backend; PyTorch CUDA tensors on the CUDA backend with a GPU).

- decode: ``plan(q_indptr, kv_indptr, kv_indices, kv_lens, num_heads, kv_lora_rank,
  qk_rope_head_dim, 1, False, sm_scale, q_dtype, kv_dtype)`` positionally, then
  ``run(q_nope, q_rope, k_buffer[:, :, :512], k_buffer[:, :, 512:], out=o)`` over the token pool
  ``[tokens, 1, 576]`` and q ``[bs, H, 576]`` split into strided views;
- extend / target verify: the same plan with ``causal=True`` and several query tokens per request,
  ``return_lse=True`` (base 2) and ``return_lse_base_on_e``;
- CUDA graphs: the wrapper made with ``use_cuda_graph=True`` and SGLang's persistent buffers, its
  run captured, then re-planned with new batches (more requests, other lengths) and replayed;
- packed ``run(query=, kv_cache=)``, page size 64 with permuted pages, an fp8 e4m3 cache with
  ``ckv_scale`` / ``kpe_scale``, ``append_paged_mla_kv_cache`` and the refusals (fp8 e5m2,
  ``o_scale``, the dense form, run before plan)."""

import math

import numpy as np
import pytest

import ignis
from engine_arrays import HOSTS, as_f64, capture, model_dtype, needs_cuda, on_device, on_host, workspace, write
from refs import ml_dtypes, torch

rng = np.random.default_rng(29)
CKV, KPE, DIM = 512, 64, 576
SM_SCALE = 1.0 / math.sqrt(192.0)


def reference(q, pool, qo, kv_ptr, kv_indices, lens, page_size, causal):
    """out [nnz, H, 512] and base-2 lse [nnz, H] in float64; q [nnz, H, 576], pool [pages, page, 576]."""
    nnz, heads = q.shape[0], q.shape[1]
    out = np.zeros((nnz, heads, CKV))
    lse = np.full((nnz, heads), -np.inf)
    for b in range(len(qo) - 1):
        q_len, kv_len = qo[b + 1] - qo[b], lens[b]
        keys = np.stack([pool[kv_indices[kv_ptr[b] + j // page_size], j % page_size] for j in range(kv_len)]) \
            if kv_len else np.zeros((0, DIM))
        for i in range(q_len):
            visible = kv_len - q_len + i + 1 if causal else kv_len
            if visible <= 0:
                continue
            k = keys[:visible]
            x = SM_SCALE * (q[qo[b] + i] @ k.T)  # [H, visible]
            top = x.max(axis=1, keepdims=True)
            e = np.exp(x - top)
            out[qo[b] + i] = (e @ k[:, :CKV]) / e.sum(axis=1, keepdims=True)
            lse[qo[b] + i] = (top[:, 0] + np.log(e.sum(axis=1))) / math.log(2.0)
    return out, lse


def check(out, lse, ref_out, ref_lse, rows):
    got = as_f64(out)[:rows]
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref_out[:rows], rtol=1e-2, atol=4e-3)
    if lse is not None:
        np.testing.assert_allclose(as_f64(lse)[:rows], ref_lse[:rows], rtol=1e-4, atol=2e-3)


def batch(q_lens, kv_lens, page_size, heads, spare_pages=3):
    """A batch over a shuffled page pool: (q [nnz, H, 576], pool, qo, kv_ptr, kv_indices)."""
    qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    pages = [(n + page_size - 1) // page_size for n in kv_lens]
    kv_ptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    pool_pages = int(kv_ptr[-1]) + spare_pages
    kv_indices = rng.permutation(pool_pages)[: kv_ptr[-1]].astype(np.int32)
    pool = rng.standard_normal((pool_pages, page_size, DIM)).astype(np.float16)
    q = rng.standard_normal((int(qo[-1]), heads, DIM)).astype(np.float16)
    return q, pool, qo, kv_ptr, kv_indices


@pytest.mark.parametrize("host", HOSTS)
@pytest.mark.parametrize("heads", [16, 128])
def test_sglang_decode(host, heads):
    kv_lens = np.array([1, 37, 300, 5], np.int32)
    q, pool, qo, kv_ptr, kv_indices = batch([1] * 4, kv_lens, 1, heads)
    wrapper = ignis.BatchMLAPagedAttentionWrapper(workspace(host, "sglang"), backend="auto")
    dtype = model_dtype(host)
    wrapper.plan(on_host(qo, host), on_host(kv_ptr, host), on_device(kv_indices, host, "i32"),
                 on_host(kv_lens, host), heads, CKV, KPE, 1, False, SM_SCALE, dtype, dtype)
    q_dev = on_device(q, host)
    k_buffer = on_device(pool, host)  # the token pool [tokens, 1, 576]
    o = on_device(np.zeros((4, heads, CKV)), host)
    result = wrapper.run(q_dev[:, :, :CKV], q_dev[:, :, CKV:], k_buffer[:, :, :CKV], k_buffer[:, :, CKV:], out=o)
    assert result is o
    ref_out, _ = reference(q.astype(np.float64), pool.astype(np.float64), qo, kv_ptr, kv_indices, kv_lens, 1, False)
    check(o, None, ref_out, None, 4)


@pytest.mark.parametrize("host", HOSTS)
def test_sglang_extend_causal_with_lse(host):
    q_lens, kv_lens = [3, 1, 4, 0], np.array([10, 1, 2000, 7], np.int32)
    q, pool, qo, kv_ptr, kv_indices = batch(q_lens, kv_lens, 1, 16)
    wrapper = ignis.BatchMLAPagedAttentionWrapper(workspace(host, "sglang"))
    dtype = model_dtype(host)
    wrapper.plan(on_host(qo, host), on_host(kv_ptr, host), on_device(kv_indices, host, "i32"),
                 on_host(kv_lens, host), 16, CKV, KPE, 1, True, SM_SCALE, dtype, dtype)
    q_dev, k_buffer = on_device(q, host), on_device(pool, host)
    out, lse = wrapper.run(q_dev[:, :, :CKV], q_dev[:, :, CKV:], k_buffer[:, :, :CKV], k_buffer[:, :, CKV:],
                           return_lse=True)
    ref_out, ref_lse = reference(q.astype(np.float64), pool.astype(np.float64), qo, kv_ptr, kv_indices, kv_lens, 1,
                                 True)
    check(out, lse, ref_out, ref_lse, q.shape[0])
    _, lse_e = wrapper.run(q_dev[:, :, :CKV], q_dev[:, :, CKV:], k_buffer[:, :, :CKV], k_buffer[:, :, CKV:],
                           return_lse=True, return_lse_base_on_e=True)
    np.testing.assert_allclose(as_f64(lse_e), ref_lse * math.log(2.0), rtol=1e-4, atol=2e-3)


@pytest.mark.parametrize("host", HOSTS)
def test_packed_page64_chunked_prefill(host):
    q_lens, kv_lens = [70, 2], np.array([200, 64], np.int32)
    q, pool, qo, kv_ptr, kv_indices = batch(q_lens, kv_lens, 64, 16)
    wrapper = ignis.BatchMLAPagedAttentionWrapper(workspace(host, "vllm"))
    dtype = model_dtype(host)
    wrapper.plan(qo_indptr=on_host(qo, host), kv_indptr=on_host(kv_ptr, host),
                 kv_indices=on_device(kv_indices, host, "i32"), kv_len_arr=on_host(kv_lens, host), num_heads=16,
                 head_dim_ckv=CKV, head_dim_kpe=KPE, page_size=64, causal=True, sm_scale=SM_SCALE, q_data_type=dtype,
                 kv_data_type=dtype, query_layout="packed", kv_cache_layout="packed")
    out = wrapper.run(query=on_device(q, host), kv_cache=on_device(pool, host))
    ref_out, _ = reference(q.astype(np.float64), pool.astype(np.float64), qo, kv_ptr, kv_indices, kv_lens, 64, True)
    check(out, None, ref_out, None, q.shape[0])


@needs_cuda
def test_sglang_cuda_graph_replay_after_replan():
    heads, max_bs = 16, 8
    host = "cuda"
    dtype = torch.float16
    pool_tokens = 4096
    pool = rng.standard_normal((pool_tokens, 1, DIM)).astype(np.float16)
    k_buffer = on_device(pool, host)
    qo_buf = torch.zeros(max_bs + 1, dtype=torch.int32, device="cuda")
    kv_indptr_buf = torch.zeros(max_bs + 1, dtype=torch.int32, device="cuda")
    kv_indices_buf = torch.zeros(pool_tokens, dtype=torch.int32, device="cuda")
    kv_lens_buf = torch.ones(max_bs, dtype=torch.int32, device="cuda")
    wrapper = ignis.BatchMLAPagedAttentionWrapper(workspace(host, "sglang"), use_cuda_graph=True, qo_indptr=qo_buf,
                                                  kv_indptr=kv_indptr_buf, kv_indices=kv_indices_buf,
                                                  kv_len_arr=kv_lens_buf, backend="auto")
    q_static = torch.zeros(max_bs, heads, DIM, dtype=dtype, device="cuda")
    out_static = torch.zeros(max_bs, heads, CKV, dtype=dtype, device="cuda")

    def plan(kv_lens):
        bs = len(kv_lens)
        qo = np.arange(bs + 1, dtype=np.int32)
        kv_ptr = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
        kv_indices = rng.permutation(pool_tokens)[: kv_ptr[-1]].astype(np.int32)
        write(kv_indices_buf, kv_indices)  # SGLang fills the graph's index buffer itself
        wrapper.plan(torch.from_numpy(qo), torch.from_numpy(kv_ptr), kv_indices_buf[: kv_ptr[-1]],
                     torch.from_numpy(np.asarray(kv_lens, np.int32)), heads, CKV, KPE, 1, False, SM_SCALE, dtype,
                     dtype)
        return qo, kv_ptr, kv_indices

    def run():
        return wrapper.run(q_static[:, :, :CKV], q_static[:, :, CKV:], k_buffer[:, :, :CKV], k_buffer[:, :, CKV:],
                           out=out_static)

    plan([5, 17, 300])
    graph, _ = capture(run)
    for kv_lens in ([40, 1, 3000, 2, 9, 64, 128, 700], [2500], [33, 34]):
        qo, kv_ptr, kv_indices = plan(kv_lens)
        q = rng.standard_normal((len(kv_lens), heads, DIM)).astype(np.float16)
        write(q_static, q)
        graph.replay()
        torch.cuda.synchronize()
        ref_out, _ = reference(q.astype(np.float64), pool.astype(np.float64), qo, kv_ptr, kv_indices,
                               np.asarray(kv_lens), 1, False)
        check(out_static, None, ref_out, None, len(kv_lens))


def fp8_cache(values, host):
    """An fp8 e4m3 copy of values where the engine keeps the cache (ml_dtypes for NumPy), and the
    values it holds as float64."""
    if host == "numpy":
        if ml_dtypes is None:
            pytest.skip("needs ml_dtypes for NumPy fp8")
        cache = np.asarray(values, np.float32).astype(ml_dtypes.float8_e4m3fn)
        return cache, cache.astype(np.float64)
    cache = torch.from_numpy(np.asarray(values, np.float32)).to(torch.float8_e4m3fn)
    held = cache.to(torch.float64).numpy()
    return (cache.cuda() if host == "cuda" else cache), held


@pytest.mark.parametrize("host", HOSTS)
def test_fp8_cache_with_scales(host):
    q_lens, kv_lens = [1, 2], np.array([700, 33], np.int32)
    q, pool, qo, kv_ptr, kv_indices = batch(q_lens, kv_lens, 16, 16)
    cache, held = fp8_cache(pool.astype(np.float32) * 4.0, host)
    ckv_scale, kpe_scale = 0.25, 0.5
    wrapper = ignis.BatchMLAPagedAttentionWrapper(workspace(host, "sglang"))
    dtype = model_dtype(host)
    wrapper.plan(on_host(qo, host), on_host(kv_ptr, host), on_device(kv_indices, host, "i32"),
                 on_host(kv_lens, host), 16, CKV, KPE, 16, True, SM_SCALE, dtype,
                 "float8_e4m3fn" if host == "numpy" else torch.float8_e4m3fn)
    q_dev = on_device(q, host)
    out = wrapper.run(q_dev[:, :, :CKV], q_dev[:, :, CKV:], cache[:, :, :CKV], cache[:, :, CKV:],
                      ckv_scale=ckv_scale, kpe_scale=kpe_scale)
    keys = held.copy()
    keys[..., :CKV] *= ckv_scale
    keys[..., CKV:] *= kpe_scale
    ref_out, _ = reference(q.astype(np.float64), keys, qo, kv_ptr, kv_indices, kv_lens, 16, True)
    check(out, None, ref_out, None, q.shape[0])


@pytest.mark.parametrize("host", HOSTS)
def test_append_paged_mla_kv_cache(host):
    page_size, pages = 16, 6
    kv_ptr = np.array([0, 2, 3], np.int32)
    kv_indices = np.array([4, 1, 5], np.int32)
    last = np.array([3, 16], np.int32)
    batch_indices = np.array([0, 1, 0, 1], np.int32)
    positions = np.array([18, 15, 0, 2], np.int32)
    ckv_rows = rng.standard_normal((4, CKV)).astype(np.float16)
    kpe_rows = rng.standard_normal((4, KPE)).astype(np.float16)
    cache = on_device(np.zeros((pages, page_size, DIM)), host)
    ignis.append_paged_mla_kv_cache(on_device(ckv_rows, host), on_device(kpe_rows, host),
                                    on_device(batch_indices, host, "i32"), on_device(positions, host, "i32"),
                                    cache[:, :, :CKV], cache[:, :, CKV:], on_device(kv_indices, host, "i32"),
                                    on_device(kv_ptr, host, "i32"), on_device(last, host, "i32"))
    want = np.zeros((pages, page_size, DIM))
    for t in range(4):
        page = kv_indices[kv_ptr[batch_indices[t]] + positions[t] // page_size]
        want[page, positions[t] % page_size] = np.concatenate([ckv_rows[t], kpe_rows[t]])
    np.testing.assert_array_equal(as_f64(cache), want)


@pytest.mark.parametrize("host", HOSTS)
def test_refusals(host):
    qo, kv_ptr, kv_lens, kv_indices = (np.array([0, 1], np.int32), np.array([0, 1], np.int32),
                                       np.array([1], np.int32), np.array([0], np.int32))
    wrapper = ignis.BatchMLAPagedAttentionWrapper(workspace(host, "sglang"))
    dtype = model_dtype(host)
    with pytest.raises(ignis.InvalidArgumentError, match="plan"):
        wrapper.run(None, None, None, None)
    with pytest.raises(ignis.UnsupportedError, match="kv_dtype"):
        wrapper.plan(qo, kv_ptr, kv_indices, kv_lens, 16, CKV, KPE, 1, False, SM_SCALE, dtype, "float8_e5m2")
    with pytest.raises(ignis.UnsupportedError, match="block_tables"):
        wrapper.plan(qo, kv_ptr, kv_indices, kv_lens, 16, CKV, KPE, 1, False, SM_SCALE, dtype, dtype,
                     block_tables=np.zeros((1, 1), np.int32))
    with pytest.raises(ignis.UnsupportedError, match="head_dim_ckv"):
        wrapper.plan(qo, kv_ptr, kv_indices, kv_lens, 16, 256, KPE, 1, False, SM_SCALE, dtype, dtype)
    wrapper.plan(qo, kv_ptr, kv_indices, kv_lens, 16, CKV, KPE, 1, False, SM_SCALE, dtype, dtype)
    q = on_device(np.zeros((1, 16, DIM)), host)
    pool = on_device(np.zeros((1, 1, DIM)), host)
    with pytest.raises(ignis.UnsupportedError, match="o_scale"):
        wrapper.run(q[:, :, :CKV], q[:, :, CKV:], pool[:, :, :CKV], pool[:, :, CKV:], o_scale=2.0)
    with pytest.raises(ignis.InvalidArgumentError, match="ckv_scale"):
        wrapper.run(q[:, :, :CKV], q[:, :, CKV:], pool[:, :, :CKV], pool[:, :, CKV:], ckv_scale=-1.0)
    with pytest.raises(ignis.InvalidArgumentError, match="q_pe"):
        wrapper.run(q[:, :, :CKV], q[:, :, CKV:CKV + 32], pool[:, :, :CKV], pool[:, :, CKV:])
