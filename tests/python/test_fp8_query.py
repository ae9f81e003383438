"""fp8 e4m3 queries on an fp8 KV cache, as vLLM 0.33 plans FlashInfer's wrappers with an fp8 KV cache on
sm_90 (``q_data_type=float8_e4m3fn``, ``kv_data_type`` fp8, ``o_data_type`` the model's dtype) and runs
them with ``q_scale`` / ``k_scale`` / ``v_scale``: out comes back in ``o_data_type`` and equals the
reference of the fp8 values (q is converted to out's dtype exactly before the kernels run).

On the CPU backend with NumPy arrays of ml_dtypes' fp8 types (out float16), and on CUDA with PyTorch
fp8 tensors (out bfloat16) when a GPU is present; plus the dtype rules' errors."""

import numpy as np
import pytest

import ignis
from refs import decode_ref, ml_dtypes, prefill_ref, torch

CUDA = torch is not None and torch.cuda.is_available()
DEVICES = (["cpu"] if ml_dtypes is not None else []) + (["cuda"] if CUDA else [])
HEADS, KV_HEADS, DIM, PAGE = 16, 4, 128, 16
rng = np.random.default_rng(31)


def fp8_values(shape, scale=1.0):
    """Random values already on the e4m3 grid (float64), so the reference sees what the kernels see."""
    x = rng.standard_normal(shape) * scale
    return x.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


def as_fp8(x, device):
    """float64 values on the e4m3 grid as the device's fp8 array."""
    if device == "cpu":
        return x.astype(ml_dtypes.float8_e4m3fn)
    return torch.from_numpy(x.astype(np.float32)).to("cuda").to(torch.float8_e4m3fn)


def out_dtype(device):
    return "float16" if device == "cpu" else torch.bfloat16


def to_numpy(x):
    return x.float().cpu().numpy().astype(np.float64) if hasattr(x, "detach") else np.asarray(x, np.float64)


def workspace(device):
    return torch.zeros(64 << 20, dtype=torch.uint8, device="cuda") if device == "cuda" else np.zeros(16, np.uint8)


def host_i32(values):
    return np.asarray(values, np.int32)


def device_i32(values, device):
    return torch.from_numpy(host_i32(values)).to("cuda") if device == "cuda" else host_i32(values)


def paged(lens):
    """Per-request K / V (float64 on the e4m3 grid) and an NHD cache of them, pages in order."""
    ks = [fp8_values((n, KV_HEADS, DIM)) for n in lens]
    vs = [fp8_values((n, KV_HEADS, DIM)) for n in lens]
    pages = [(n + PAGE - 1) // PAGE for n in lens]
    indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    cache = np.zeros((indptr[-1], 2, PAGE, KV_HEADS, DIM))
    for b, n in enumerate(lens):
        for j in range(n):
            cache[indptr[b] + j // PAGE, 0, j % PAGE] = ks[b][j]
            cache[indptr[b] + j // PAGE, 1, j % PAGE] = vs[b][j]
    last = np.array([n - (p - 1) * PAGE for n, p in zip(lens, pages)], np.int32)
    return ks, vs, cache, indptr, np.arange(indptr[-1], dtype=np.int32), last


def assert_close(actual, expected, what):
    got = to_numpy(actual)
    scale = max(1.0, float(np.abs(expected).max()))
    err = float(np.abs(got - expected).max()) / scale
    assert err < 2e-2, "%s: max error %.3g" % (what, err)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_fp8_decode(device):
    lens = [700, 33, 1500]
    ks, vs, cache, indptr, indices, last = paged(lens)
    q = fp8_values((len(lens), HEADS, DIM))
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace(device), "NHD")
    fp8 = "float8_e4m3fn" if device == "cpu" else torch.float8_e4m3fn
    wrapper.plan(indptr, device_i32(indices, device), last, HEADS, KV_HEADS, DIM, PAGE, q_data_type=fp8,
                 kv_data_type=fp8, o_data_type=out_dtype(device), fixed_split_size=-1)
    q_scale, k_scale, v_scale = 0.5, 1.25, 0.75
    out = wrapper.run(as_fp8(q, device), as_fp8(cache, device), q_scale=q_scale, k_scale=k_scale, v_scale=v_scale)
    assert str(out.dtype).replace("torch.", "") == ("float16" if device == "cpu" else "bfloat16")
    want = np.concatenate([decode_ref(q[b:b + 1] * q_scale, ks[b], vs[b], k_scale=k_scale, v_scale=v_scale)[0]
                           for b in range(len(lens))])
    assert_close(out, want, "fp8 decode")


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_fp8_prefill(device):
    q_lens, kv_lens = [9, 40, 1], [9, 1200, 300]
    ks, vs, cache, indptr, indices, last = paged(kv_lens)
    qo = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    q = fp8_values((qo[-1], HEADS, DIM))
    wrapper = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace(device), "NHD", backend="auto")
    fp8 = "float8_e4m3fn" if device == "cpu" else torch.float8_e4m3fn
    wrapper.plan(qo_indptr=qo, paged_kv_indptr=indptr, paged_kv_indices=device_i32(indices, device),
                 paged_kv_last_page_len=last, seq_lens=np.array(kv_lens, np.int32), num_qo_heads=HEADS,
                 num_kv_heads=KV_HEADS, head_dim_qk=DIM, page_size=PAGE, causal=True, sm_scale=DIM ** -0.5,
                 window_left=-1, logits_soft_cap=None, q_data_type=fp8, kv_data_type=fp8,
                 o_data_type=out_dtype(device), fixed_split_size=-1, disable_split_kv=False)
    out = wrapper.run(as_fp8(q, device), as_fp8(cache, device), q_scale=2.0, k_scale=0.5, v_scale=1.5,
                      kv_cache_sf=None)
    want = np.concatenate([prefill_ref(q[qo[b]:qo[b + 1]] * 2.0, ks[b], vs[b], causal=True, k_scale=0.5,
                                       v_scale=1.5)[0] for b in range(len(q_lens))])
    assert_close(out, want, "fp8 prefill")


def test_fp8_query_rules():
    wrapper = ignis.BatchDecodeWithPagedKVCacheWrapper(np.zeros(16, np.uint8), "NHD")
    indptr, last = np.array([0, 1], np.int32), np.array([3], np.int32)
    with pytest.raises(ignis.UnsupportedError, match="o_data_type"):
        wrapper.plan(indptr, indptr[:1], last, HEADS, KV_HEADS, DIM, PAGE, q_data_type="float8_e4m3fn",
                     kv_data_type="float8_e4m3fn")
    with pytest.raises(ignis.UnsupportedError, match="kv_data_type"):
        wrapper.plan(indptr, indptr[:1], last, HEADS, KV_HEADS, DIM, PAGE, q_data_type="float8_e4m3fn",
                     kv_data_type="float16", o_data_type="float16")
    with pytest.raises(ignis.UnsupportedError, match="o_data_type"):
        wrapper.plan(indptr, indptr[:1], last, HEADS, KV_HEADS, DIM, PAGE, q_data_type="float16",
                     o_data_type="bfloat16")
