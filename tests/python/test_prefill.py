"""Prefill attention (single_prefill_with_kv_cache, BatchPrefillWithRaggedKVCacheWrapper,
BatchPrefillWithPagedKVCacheWrapper), packbits / segment_packbits and the cascade wrappers against
a float64 NumPy reference (refs.prefill_ref): causal and custom masks (dense and bit-packed,
including rows that see nothing), windows, soft cap, RoPE, ALiBi, sinks, k/v scales, fp8 K/V, both
LSE bases, GQA groups, head dims 64..256 and 192/128, mixed batches with zero-length queries, page
sizes 1 / 16 / 64 (paged equals ragged), cascade equal to the flat computation, and the errors.
With a CUDA device, single prefill on CUDA tensors against the same reference."""

import numpy as np
import pytest

import ignis
from refs import assert_close, ml_dtypes, prefill_ref, torch

rng = np.random.default_rng(5)


def f16(shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def assert_lse(actual, expected, dtype="f16"):
    """LSEs: -inf exactly where the reference has it, the rest close."""
    actual = np.asarray(actual, dtype=np.float64)
    empty = np.isneginf(expected)
    np.testing.assert_array_equal(np.isneginf(actual), empty)
    assert_close(actual[~empty], expected[~empty], dtype)


def batch_data(q_lens, kv_lens, heads=4, kv_heads=2, dim=64, dim_vo=None):
    qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    kv = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
    q = f16((qo[-1], heads, dim))
    k = f16((kv[-1], kv_heads, dim))
    v = f16((kv[-1], kv_heads, dim_vo or dim))
    return qo, kv, q, k, v


def batch_ref(qo, kv, q, k, v, masks=None, **kw):
    outs, lses = [], []
    for b in range(len(qo) - 1):
        o, s = prefill_ref(q[qo[b]:qo[b + 1]], k[kv[b]:kv[b + 1]], v[kv[b]:kv[b + 1]],
                           mask=None if masks is None else masks[b], **kw)
        outs.append(o)
        lses.append(s)
    return np.concatenate(outs), np.concatenate(lses)


def to_paged(k, v, kv, page_size, layout="NHD"):
    """Copy ragged k / v into shuffled pages: (cache [pages, 2, ...], indptr, indices, last)."""
    lengths = np.diff(kv)
    pages = [(n + page_size - 1) // page_size for n in lengths]
    total = sum(pages) + 2
    order = rng.permutation(total).astype(np.int32)
    heads, dim = k.shape[1], k.shape[2]
    cache = np.zeros((total, 2, page_size, heads, dim), dtype=k.dtype)
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    last = np.array([n - (p - 1) * page_size if p else 0 for n, p in zip(lengths, pages)], dtype=np.int32)
    for b, n in enumerate(lengths):
        for j in range(n):
            page = order[indptr[b] + j // page_size]
            cache[page, 0, j % page_size] = k[kv[b] + j]
            cache[page, 1, j % page_size] = v[kv[b] + j]
    if layout == "HND":
        cache = np.ascontiguousarray(cache.transpose(0, 1, 3, 2, 4))
    return cache, indptr, order[:indptr[-1]].copy(), last


OPTIONS = [
    dict(),
    dict(causal=True),
    dict(causal=True, window_left=7),
    dict(logits_soft_cap=2.5, sm_scale=0.3),
    dict(causal=True, pos_encoding_mode="ROPE_LLAMA", rope_scale=2.0, rope_theta=5e4),
    dict(pos_encoding_mode="ALIBI", causal=True),
    dict(causal=True, lse_base="ln"),
]


@pytest.mark.parametrize("opts", OPTIONS, ids=[str(i) for i in range(len(OPTIONS))])
def test_single_options(opts):
    q, k, v = f16((19, 6, 64)), f16((33, 3, 64)), f16((33, 3, 64))
    out, lse = ignis.single_prefill_with_kv_cache(q, k, v, return_lse=True, **opts)
    ref_out, ref_lse = prefill_ref(q, k, v, **opts)
    assert_close(out, ref_out, "f16")
    assert_lse(lse, ref_lse)


def test_single_sinks_scales_fp8_and_hnd():
    if ml_dtypes is None:
        pytest.skip("ml_dtypes missing")
    q = f16((9, 4, 128))
    k = (rng.standard_normal((40, 1, 128))).astype(ml_dtypes.float8_e4m3fn)
    v = (rng.standard_normal((40, 1, 128))).astype(ml_dtypes.float8_e4m3fn)
    sinks = rng.standard_normal(4).astype(np.float32)
    out, lse = ignis.single_prefill_with_kv_cache(q, k, v, causal=True, scale_k=0.5, scale_v=2.0, sinks=sinks,
                                                  return_lse=True)
    ref_out, ref_lse = prefill_ref(q, k.astype(np.float64), v.astype(np.float64), causal=True, k_scale=0.5,
                                   v_scale=2.0, sinks=sinks)
    assert_close(out, ref_out, "f16")
    assert_lse(lse, ref_lse)
    kh, vh = np.ascontiguousarray(f16((40, 2, 64)).transpose(1, 0, 2)), np.ascontiguousarray(f16((40, 2, 64)).transpose(1, 0, 2))
    q2 = f16((5, 2, 64))
    out = ignis.single_prefill_with_kv_cache(q2, kh, vh, kv_layout="HND")
    assert_close(out, prefill_ref(q2, kh.transpose(1, 0, 2), vh.transpose(1, 0, 2))[0], "f16")


def test_single_192_128_and_custom_mask_empty_rows():
    q, k, v = f16((12, 4, 192)), f16((20, 4, 192)), f16((20, 4, 128))
    mask = rng.random((12, 20)) < 0.5
    mask[3] = False
    out, lse = ignis.single_prefill_with_kv_cache(q, k, v, custom_mask=mask, return_lse=True)
    ref_out, ref_lse = prefill_ref(q, k, v, mask=mask)
    assert out.shape == (12, 4, 128)
    assert_close(out, ref_out, "f16")
    assert np.all(out[3] == 0) and np.all(lse[3] == -np.inf) and not np.isnan(lse).any()
    packed = ignis.packbits(mask.reshape(-1), bitorder="little")
    out2 = ignis.single_prefill_with_kv_cache(q, k, v, packed_custom_mask=packed)
    np.testing.assert_array_equal(out2, out)


def test_long_single_splits():
    q, k, v = f16((3, 2, 64)), f16((16384, 1, 64)), f16((16384, 1, 64))
    out, lse = ignis.single_prefill_with_kv_cache(q, k, v, causal=True, return_lse=True)
    ref_out, ref_lse = prefill_ref(q, k, v, causal=True)
    assert_close(out, ref_out, "f16")
    assert_lse(lse, ref_lse)


@pytest.mark.parametrize("mode", ["none", "causal", "mask"])
@pytest.mark.parametrize("split", [dict(), dict(disable_split_kv=True), dict(fixed_split_size=5)])
def test_ragged_and_paged(mode, split):
    q_lens, kv_lens = [4, 0, 37, 1, 150], [9, 13, 37, 0, 700]
    qo, kv, q, k, v = batch_data(q_lens, kv_lens)
    masks = [rng.random((a, b)) < 0.6 for a, b in zip(q_lens, kv_lens)] if mode == "mask" else None
    causal = mode == "causal"
    ref_out, ref_lse = batch_ref(qo, kv, q, k, v, masks=masks, causal=causal)
    flat = np.concatenate([m.reshape(-1) for m in masks]) if masks else None
    ragged = ignis.BatchPrefillWithRaggedKVCacheWrapper(None)
    ragged.plan(qo, kv, 4, 2, 64, causal=causal, custom_mask=flat, **split)
    out, lse = ragged.run(q, k, v, return_lse=True)
    assert_close(out, ref_out, "f16")
    assert_lse(lse, ref_lse)
    for page_size, layout in [(1, "NHD"), (16, "HND"), (64, "NHD")]:
        cache, indptr, indices, last = to_paged(k, v, kv, page_size, layout)
        paged = ignis.BatchPrefillWithPagedKVCacheWrapper(None, kv_layout=layout)
        paged.plan(qo, indptr, indices, last, 4, 2, 64, page_size, causal=causal, custom_mask=flat, **split)
        out_p, lse_p = paged.run(q, cache, return_lse=True)
        if split.get("disable_split_kv"):  # the same items: the same bits
            np.testing.assert_array_equal(out_p, out)
            np.testing.assert_array_equal(lse_p, lse)
        else:  # chunks are counted in pages, so splits differ by page size
            assert_close(out_p, ref_out, "f16")
            assert_lse(lse_p, ref_lse)


def test_ragged_192_128_replan_and_options():
    qo, kv, q, k, v = batch_data([7, 20], [30, 20], heads=8, kv_heads=1, dim=192, dim_vo=128)
    wrapper = ignis.BatchPrefillWithRaggedKVCacheWrapper(None)
    sinks = rng.standard_normal(8).astype(np.float32)
    wrapper.plan(qo, kv, 8, 1, 192, head_dim_vo=128, causal=True, logits_soft_cap=3.0)
    out = wrapper.run(q, k, v, sinks=sinks)
    assert_close(out, batch_ref(qo, kv, q, k, v, causal=True, logits_soft_cap=3.0, sinks=sinks)[0], "f16")
    qo2, kv2, q2, k2, v2 = batch_data([3000], [5000], heads=2, kv_heads=1, dim=64)
    wrapper.plan(qo2, kv2, 2, 1, 64, causal=True, window_left=64)
    out2 = wrapper.run(q2, k2, v2)
    sample = slice(2900, 3000)
    ref = prefill_ref(q2[sample], k2, v2, causal=True, window_left=64)[0]  # the last 100 tokens
    assert_close(out2[sample], ref, "f16")


def test_cascade_equals_flat():
    page_size, heads, kv_heads, dim = 16, 4, 2, 64
    shared_len, unique = 40, [5, 23, 17]
    q_lens = [3, 6, 2]
    qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    k_all = f16((shared_len + sum(unique), kv_heads, dim))
    v_all = f16((shared_len + sum(unique), kv_heads, dim))
    q = f16((qo[-1], heads, dim))
    # flat: each request sees the shared prefix followed by its own keys
    starts = np.concatenate([[0], np.cumsum(unique)]) + shared_len
    k_flat = np.concatenate([np.concatenate([k_all[:shared_len], k_all[starts[b]:starts[b + 1]]]) for b in range(3)])
    v_flat = np.concatenate([np.concatenate([v_all[:shared_len], v_all[starts[b]:starts[b + 1]]]) for b in range(3)])
    kv_flat = np.concatenate([[0], np.cumsum([shared_len + u for u in unique])]).astype(np.int32)
    flat = ignis.BatchPrefillWithRaggedKVCacheWrapper(None)
    flat.plan(qo, kv_flat, heads, kv_heads, dim, causal=True)
    ref = flat.run(q, k_flat, v_flat)
    # level 0: the shared prefix as one request holding every query; level 1: the unique suffixes
    kv_shared = np.array([0, shared_len], dtype=np.int32)
    kv_unique = np.concatenate([[0], np.cumsum(unique)]).astype(np.int32)
    cache_s, ip_s, ind_s, last_s = to_paged(k_all[:shared_len], v_all[:shared_len], kv_shared, page_size)
    cache_u, ip_u, ind_u, last_u = to_paged(k_all[shared_len:], v_all[shared_len:], kv_unique, page_size)
    cache = np.concatenate([cache_s, cache_u])
    ind_u = ind_u + cache_s.shape[0]
    cascade = ignis.MultiLevelCascadeAttentionWrapper(2, None)
    cascade.plan([np.array([0, qo[-1]], np.int32), qo], [ip_s, ip_u], [ind_s, ind_u], [last_s, last_u], heads,
                 kv_heads, dim, page_size, causal=True)
    out = cascade.run(q, cache)
    assert_close(out, ref, "f16")
    shared = ignis.BatchPrefillWithSharedPrefixPagedKVCacheWrapper(None)
    shared.begin_forward(qo, ip_u, ind_u, last_u, heads, kv_heads, dim, page_size)
    out2 = shared.forward(q, k_all[:shared_len], v_all[:shared_len], cache, causal=True)
    assert_close(out2, ref, "f16")


def test_shared_prefix_decode():
    heads, kv_heads, dim, page_size = 4, 4, 64, 16
    shared_len, unique = 50, [7, 33]
    k_all, v_all = f16((shared_len + 40, kv_heads, dim)), f16((shared_len + 40, kv_heads, dim))
    q = f16((2, heads, dim))
    kv_unique = np.array([0, 7, 40], dtype=np.int32)
    cache, ip, ind, last = to_paged(k_all[shared_len:], v_all[shared_len:], kv_unique, page_size)
    wrapper = ignis.BatchDecodeWithSharedPrefixPagedKVCacheWrapper(np.empty(1 << 20, np.uint8))
    wrapper.begin_forward(ip, ind, last, heads, kv_heads, dim, page_size, data_type="float16")
    out = wrapper.forward(q, k_all[:shared_len], v_all[:shared_len], cache)
    for b in range(2):
        keys = np.concatenate([k_all[:shared_len], k_all[shared_len + kv_unique[b]:shared_len + kv_unique[b + 1]]])
        vals = np.concatenate([v_all[:shared_len], v_all[shared_len + kv_unique[b]:shared_len + kv_unique[b + 1]]])
        assert_close(out[b:b + 1], prefill_ref(q[b:b + 1], keys, vals)[0], "f16")


def test_packbits():
    x = rng.random(37) < 0.5
    for order in ("big", "little"):
        np.testing.assert_array_equal(ignis.packbits(x, order), np.packbits(x, bitorder=order))
    indptr = np.array([0, 5, 5, 37], dtype=np.int32)
    packed, new = ignis.segment_packbits(x, indptr, bitorder="little")
    np.testing.assert_array_equal(new, [0, 1, 1, 5])
    np.testing.assert_array_equal(packed[1:5], np.packbits(x[5:], bitorder="little"))
    if torch is not None:
        t = torch.from_numpy(x)
        np.testing.assert_array_equal(ignis.packbits(t, "little").numpy(), np.packbits(x, bitorder="little"))
        pt, nt = ignis.segment_packbits(t, torch.from_numpy(indptr), bitorder="little")
        np.testing.assert_array_equal(pt.numpy(), packed)
    with pytest.raises(ignis.InvalidArgumentError):
        ignis.packbits(x, "middle")


def test_errors():
    q, k, v = f16((4, 4, 64)), f16((6, 2, 64)), f16((6, 2, 64))
    with pytest.raises(ignis.InvalidArgumentError, match="kv_layout"):
        ignis.single_prefill_with_kv_cache(q, k, v, kv_layout="XYZ")
    with pytest.raises(ignis.InvalidArgumentError, match="custom_mask"):
        ignis.single_prefill_with_kv_cache(q, k, v, packed_custom_mask=np.zeros(1, np.uint8))
    with pytest.raises(ignis.UnsupportedError, match="head_dim"):
        ignis.single_prefill_with_kv_cache(f16((4, 4, 32)), f16((6, 2, 32)), f16((6, 2, 32)))
    with pytest.raises(ignis.InvalidArgumentError, match="num_qo_heads"):
        ignis.single_prefill_with_kv_cache(f16((4, 3, 64)), k, v)
    wrapper = ignis.BatchPrefillWithRaggedKVCacheWrapper(None)
    with pytest.raises(ignis.InvalidArgumentError, match="plan"):
        wrapper.run(q, k, v)
    with pytest.raises(ignis.InvalidArgumentError, match="kv_indptr"):
        wrapper.plan(np.array([0, 4], np.int32), np.array([3, 2], np.int32), 4, 2, 64)
    wrapper.plan(np.array([0, 4], np.int32), np.array([0, 6], np.int32), 4, 2, 64)
    out = np.full((4, 4, 64), 7, dtype=np.float16)
    with pytest.raises(ignis.InvalidArgumentError, match="k.shape"):
        wrapper.run(q, k[:5], v[:5], out=out)
    assert np.all(out == 7)


@pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_single_and_ragged():
    q = torch.randn(9, 4, 64, dtype=torch.float16, device="cuda")
    k = torch.randn(20, 2, 64, dtype=torch.float16, device="cuda")
    v = torch.randn(20, 2, 64, dtype=torch.float16, device="cuda")
    out = ignis.single_prefill_with_kv_cache(q, k, v, causal=True)
    ref = prefill_ref(q.cpu().numpy(), k.cpu().numpy(), v.cpu().numpy(), causal=True)[0]
    assert_close(out.cpu().numpy(), ref, "f16")


DEVICES_512 = ["numpy"] + (["cuda"] if torch is not None and torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES_512)
@pytest.mark.parametrize("opts", OPTIONS, ids=[str(i) for i in range(len(OPTIONS))])
def test_head_dim_512(device, opts):
    """Head dim 512 (FlashInfer compiles it; on CUDA the tile kernel's 16-row tiles): single, ragged
    and paged prefill with every option, GQA 3, odd lengths, a request with no query and one with no
    key, on the host and on CUDA."""
    on = (lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()) if device == "cuda" else (lambda a: a)
    back = (lambda t: t.cpu().numpy()) if device == "cuda" else np.asarray
    q, k, v = f16((19, 6, 512), 0.5), f16((45, 2, 512)), f16((45, 2, 512))
    out, lse = ignis.single_prefill_with_kv_cache(on(q), on(k), on(v), return_lse=True, **opts)
    ref_out, ref_lse = prefill_ref(q, k, v, **opts)
    assert_close(back(out), ref_out, "f16")
    assert_lse(back(lse), ref_lse)

    plan_opts = {key: value for key, value in opts.items() if key != "lse_base"}
    run_opts = {"lse_base": opts["lse_base"]} if "lse_base" in opts else {}
    q_lens, kv_lens = [3, 0, 21, 1], [7, 13, 300, 0]
    qo, kv, q, k, v = batch_data(q_lens, kv_lens, heads=6, kv_heads=2, dim=512)
    ref_out, ref_lse = batch_ref(qo, kv, q, k, v, **opts)
    workspace = torch.empty(1 << 24, dtype=torch.uint8, device="cuda") if device == "cuda" else None
    ragged = ignis.BatchPrefillWithRaggedKVCacheWrapper(workspace)
    ragged.plan(on(qo), on(kv), 6, 2, 512, **plan_opts)
    out, lse = ragged.run(on(q), on(k), on(v), return_lse=True, **run_opts)
    assert_close(back(out), ref_out, "f16")
    assert_lse(back(lse), ref_lse)
    for page_size, layout in [(1, "NHD"), (16, "HND")]:
        cache, indptr, indices, last = to_paged(k, v, kv, page_size, layout)
        paged = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace, kv_layout=layout)
        paged.plan(on(qo), on(indptr), on(indices), on(last), 6, 2, 512, page_size, **plan_opts)
        out, lse = paged.run(on(q), on(cache), return_lse=True, **run_opts)
        assert_close(back(out), ref_out, "f16")
        assert_lse(back(lse), ref_lse)
