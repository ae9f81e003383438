"""Decode attention (single_decode_with_kv_cache, BatchDecodeWithPagedKVCacheWrapper) against a
float64 NumPy reference on every framework and half dtype present: NHD / HND, GQA groups, kv
lengths 0 .. ~1500 ending mid-page, every option (sm_scale, logits_soft_cap, window_left, both LSE
bases), split-KV auto / fixed / disabled, re-planning, CUDA-graph buffers, and the errors
(unsupported RoPE / fp8 scales / head dims, bad layouts, run before plan)."""

import math

import numpy as np
import pytest

import ignis
from refs import FRAMES, torch

rng = np.random.default_rng(11)

HALF_FRAMES = [(f, d) for f in FRAMES if f.name != "jax-cpu" for d in f.dtypes if d in ("f16", "bf16")]
HALF_IDS = [f"{f.name}-{d}" for f, d in HALF_FRAMES]
TOL = {"f16": 2e-3, "bf16": 1e-2}


def attention_ref(q, k, v, sm_scale=None, soft_cap=None, window_left=-1, lse_base="2"):
    """q [H, D], k / v [L, Hkv, D] -> out [H, D], lse [H]."""
    heads, dim = q.shape
    kv_len, kv_heads = k.shape[0], k.shape[1]
    scale = sm_scale if sm_scale else 1.0 / math.sqrt(dim)
    out, lse = np.zeros((heads, dim)), np.full(heads, -np.inf)
    start = max(0, kv_len - 1 - window_left) if window_left >= 0 else 0
    for h in range(heads):
        kvh = h // (heads // kv_heads)
        x = scale * (k[start:, kvh] @ q[h])
        if soft_cap:
            x = soft_cap * np.tanh(x / soft_cap)
        if x.size == 0:
            continue
        m = x.max()
        w = np.exp(x - m)
        out[h] = (w @ v[start:, kvh]) / w.sum()
        lse[h] = (m + math.log(w.sum())) / (math.log(2.0) if lse_base == "2" else 1.0)
    return out, lse


def check(got_out, got_lse, ref_out, ref_lse, dtype):
    tol = TOL[dtype]
    scale = max(float(np.abs(ref_out).max()) if ref_out.size else 0.0, 1e-3)
    assert np.all(np.isfinite(got_out))
    err = float(np.abs(got_out - ref_out).max()) if ref_out.size else 0.0
    assert err <= tol * scale, f"out error {err:.3g} > {tol * scale:.3g}"
    if got_lse is not None:
        assert np.array_equal(np.isneginf(got_lse), np.isneginf(ref_lse))
        finite = ~np.isneginf(ref_lse)
        lerr = np.abs(got_lse[finite] - ref_lse[finite]) / (1 + np.abs(ref_lse[finite]))
        assert lerr.size == 0 or float(lerr.max()) <= tol


def rounded(frame, a, dtype):
    x = frame.array(a, dtype)
    return x, frame.numpy(x)


OPTIONS = [
    {},
    {"sm_scale": 0.3, "lse_base": "ln"},
    {"logits_soft_cap": 3.0},
    {"window_left": 20},
]


@pytest.mark.parametrize("frame,dtype", HALF_FRAMES, ids=HALF_IDS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("kv_len", [0, 1, 7, 300, 1000])
@pytest.mark.parametrize("opt", range(len(OPTIONS)))
def test_single_decode(frame, dtype, layout, kv_len, opt):
    options = OPTIONS[opt]
    kv_heads, group, dim = 2, 3, 64
    q, qd = rounded(frame, rng.standard_normal((kv_heads * group, dim)), dtype)
    kn, vn = rng.standard_normal((kv_len, kv_heads, dim)), rng.standard_normal((kv_len, kv_heads, dim))
    if layout == "HND":
        k, kd = rounded(frame, kn.transpose(1, 0, 2), dtype)
        v, vd = rounded(frame, vn.transpose(1, 0, 2), dtype)
        kd, vd = kd.transpose(1, 0, 2), vd.transpose(1, 0, 2)
    else:
        k, kd = rounded(frame, kn, dtype)
        v, vd = rounded(frame, vn, dtype)
    out, lse = ignis.single_decode_with_kv_cache(q, k, v, kv_layout=layout, return_lse=True, **options)
    assert type(out) is type(q) and tuple(out.shape) == tuple(q.shape)
    ref_out, ref_lse = attention_ref(qd, kd, vd, options.get("sm_scale"), options.get("logits_soft_cap"),
                                     options.get("window_left", -1), options.get("lse_base", "2"))
    check(frame.numpy(out), np.asarray(frame.numpy(lse)), ref_out, ref_lse, dtype)
    only_out = ignis.single_decode_with_kv_cache(q, k, v, kv_layout=layout, **options)
    check(frame.numpy(only_out), None, ref_out, ref_lse, dtype)


def workspace_for(frame):
    if frame.name == "torch-cuda":
        return torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    return np.zeros(16, np.uint8)


def make_batch(page_size, lengths, kv_heads, dim, layout, frame, dtype):
    pages = [(n + page_size - 1) // page_size for n in lengths]
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    num_pages = int(indptr[-1]) + 2
    indices = rng.permutation(num_pages)[: indptr[-1]].astype(np.int32)
    last = np.array([n - (p - 1) * page_size if p else 0 for n, p in zip(lengths, pages)], np.int32)
    inner = (page_size, kv_heads, dim) if layout == "NHD" else (kv_heads, page_size, dim)
    cache, cache_d = rounded(frame, rng.standard_normal((num_pages, 2) + inner), dtype)
    ks, vs = [], []
    for b, n in enumerate(lengths):
        rows_k, rows_v = [], []
        for j in range(n):
            page, slot = indices[indptr[b] + j // page_size], j % page_size
            if layout == "NHD":
                rows_k.append(cache_d[page, 0, slot])
                rows_v.append(cache_d[page, 1, slot])
            else:
                rows_k.append(cache_d[page, 0, :, slot])
                rows_v.append(cache_d[page, 1, :, slot])
        shape = (0, kv_heads, dim)
        ks.append(np.stack(rows_k) if rows_k else np.zeros(shape))
        vs.append(np.stack(rows_v) if rows_v else np.zeros(shape))
    return indptr, indices, last, cache, ks, vs


@pytest.mark.parametrize("frame,dtype", HALF_FRAMES, ids=HALF_IDS)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("split", ["auto", "fixed", "disabled"])
def test_batch_decode(frame, dtype, layout, page_size, split):
    kv_heads, group, dim = 2, 4, 128
    lengths = [0, 1, 1500, 37, 600]
    indptr, indices, last, cache, ks, vs = make_batch(page_size, lengths, kv_heads, dim, layout, frame, dtype)
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace_for(frame), layout)
    options = {"logits_soft_cap": 4.0, "window_left": 700} if split == "fixed" else {}
    wrapper.plan(indptr, frame.index(indices, "i32"), frame.index(last, "i32"), kv_heads * group, kv_heads, dim,
                 page_size, q_data_type="bfloat16" if dtype == "bf16" else "float16",
                 fixed_split_size=(64 // page_size) if split == "fixed" else None,
                 disable_split_kv=split == "disabled", **options)
    q, qd = rounded(frame, rng.standard_normal((len(lengths), kv_heads * group, dim)), dtype)
    for paged in (cache, (cache[:, 0], cache[:, 1])):
        out, lse = wrapper.run(q, paged, return_lse=True)
        got_out, got_lse = frame.numpy(out), np.asarray(frame.numpy(lse))
        for b in range(len(lengths)):
            ref_out, ref_lse = attention_ref(qd[b], ks[b], vs[b], None, options.get("logits_soft_cap"),
                                             options.get("window_left", -1))
            check(got_out[b], got_lse[b], ref_out, ref_lse, dtype)

    # Re-plan the same wrapper with a smaller batch of other lengths.
    lengths2 = [900, 3]
    indptr2, indices2, last2, cache2, ks2, vs2 = make_batch(page_size, lengths2, kv_heads, dim, layout, frame, dtype)
    wrapper.plan(frame.index(indptr2, "i32"), frame.index(indices2, "i32"), last2, kv_heads * group, kv_heads, dim,
                 page_size, q_data_type="bfloat16" if dtype == "bf16" else "float16",
                 fixed_split_size=(64 // page_size) if split == "fixed" else None,
                 disable_split_kv=split == "disabled", **options)
    q2, qd2 = rounded(frame, rng.standard_normal((2, kv_heads * group, dim)), dtype)
    out2 = frame.numpy(wrapper.run(q2, cache2))
    for b in range(2):
        ref_out, _ = attention_ref(qd2[b], ks2[b], vs2[b], None, options.get("logits_soft_cap"),
                                   options.get("window_left", -1))
        check(out2[b], None, ref_out, None, dtype)


@pytest.mark.skipif(not any(f.name == "torch-cuda" for f in FRAMES), reason="needs PyTorch on CUDA")
def test_batch_decode_cuda_graph_buffers():
    frame = next(f for f in FRAMES if f.name == "torch-cuda")
    kv_heads, group, dim, page_size = 1, 8, 128, 16
    lengths = [100, 2000, 5]
    indptr, indices, last, cache, ks, vs = make_batch(page_size, lengths, kv_heads, dim, "NHD", frame, "bf16")
    buffers = (torch.empty(9, dtype=torch.int32, device="cuda"), torch.empty(512, dtype=torch.int32, device="cuda"),
               torch.empty(8, dtype=torch.int32, device="cuda"))
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace_for(frame), "NHD", use_cuda_graph=True,
                                                       paged_kv_indptr_buffer=buffers[0],
                                                       paged_kv_indices_buffer=buffers[1],
                                                       paged_kv_last_page_len_buffer=buffers[2])
    wrapper.plan(indptr, indices, last, kv_heads * group, kv_heads, dim, page_size, q_data_type=torch.bfloat16,
                 max_kv_len=4096)
    q, qd = rounded(frame, rng.standard_normal((3, kv_heads * group, dim)), "bf16")
    out = frame.numpy(wrapper.run(q, cache))
    for b in range(3):
        ref_out, _ = attention_ref(qd[b], ks[b], vs[b])
        check(out[b], None, ref_out, None, "bf16")


def test_errors():
    q = np.zeros((4, 64), np.float16)
    k = np.zeros((5, 2, 64), np.float16)
    with pytest.raises(ignis.UnsupportedError, match="pos_encoding_mode"):
        ignis.single_decode_with_kv_cache(q, k, k, pos_encoding_mode="ROPE_LLAMA")
    with pytest.raises(ignis.UnsupportedError, match="k_scale"):
        ignis.single_decode_with_kv_cache(q, k, k, k_scale=1.0)
    with pytest.raises(ignis.UnsupportedError, match="head_dim"):
        ignis.single_decode_with_kv_cache(np.zeros((4, 96), np.float16), np.zeros((5, 2, 96), np.float16),
                                          np.zeros((5, 2, 96), np.float16))
    with pytest.raises(ignis.InvalidArgumentError, match="kv_layout"):
        ignis.single_decode_with_kv_cache(q, k, k, kv_layout="NDH")
    with pytest.raises(ignis.InvalidArgumentError, match="num_qo_heads"):
        ignis.single_decode_with_kv_cache(np.zeros((3, 64), np.float16), k, k)
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(np.zeros(16, np.uint8))
    with pytest.raises(ignis.InvalidArgumentError, match="plan"):
        wrapper.run(np.zeros((1, 4, 64), np.float16), np.zeros((2, 2, 4, 2, 64), np.float16))
    indptr, last = np.array([0, 2], np.int32), np.array([3], np.int32)
    with pytest.raises(ignis.UnsupportedError, match="pos_encoding_mode"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, pos_encoding_mode="ALIBI")
    with pytest.raises(ignis.UnsupportedError, match="float8"):
        wrapper.plan(indptr, indptr, last, 4, 2, 64, 4, kv_data_type="float8_e4m3fn")
    with pytest.raises(ignis.InvalidArgumentError, match="kv_last_page_len_host"):
        wrapper.plan(indptr, indptr, np.array([5], np.int32), 4, 2, 64, 4)
    with pytest.raises(ignis.InvalidArgumentError, match="num_qo_heads"):
        wrapper.plan(indptr, indptr, last, 5, 2, 64, 4)
