"""One workspace shared by the wrappers of an engine, as vLLM 0.33 and SGLang 0.5.23 share FlashInfer's
float workspace: vLLM's FlashInfer backend gives the same buffer to its prefill and decode wrappers
and plans both before running either for a mixed batch (plan prefill, plan decode, then per layer
run prefill, run decode). ignis' device plans keep their schedules in memory of their own and use
the workspace only within a run, so every run must match its reference in any order.

On the CPU backend with NumPy always; on CUDA with PyTorch tensors when a GPU is present (the case
this guards: there the workspace is real device memory the runs share). Lengths are long enough
for the device planners to split (the runs then use the workspace)."""

import numpy as np
import pytest

import ignis
from refs import decode_ref, prefill_ref, torch

DEVICES = ["cpu"] + (["cuda"] if torch is not None and torch.cuda.is_available() else [])
rng = np.random.default_rng(23)
HEADS, KV_HEADS, DIM, PAGE = 32, 8, 128, 16


def to_device(x, device):
    if device == "cpu":
        return x
    return torch.from_numpy(np.ascontiguousarray(x)).to(device)


def to_numpy(x):
    return x.float().cpu().numpy().astype(np.float64) if hasattr(x, "detach") else np.asarray(x, np.float64)


def paged_batch(kv_lens):
    """K/V of each request as float16 [len, kv_heads, dim], in pages of one NHD cache (in order)."""
    ks = [rng.standard_normal((n, KV_HEADS, DIM)).astype(np.float16) for n in kv_lens]
    vs = [rng.standard_normal((n, KV_HEADS, DIM)).astype(np.float16) for n in kv_lens]
    pages = [(n + PAGE - 1) // PAGE for n in kv_lens]
    page_indptr = np.concatenate([[0], np.cumsum(pages)]).astype(np.int32)
    cache = np.zeros((page_indptr[-1], 2, PAGE, KV_HEADS, DIM), np.float16)
    for b, n in enumerate(kv_lens):
        for j in range(n):
            page = page_indptr[b] + j // PAGE
            cache[page, 0, j % PAGE] = ks[b][j]
            cache[page, 1, j % PAGE] = vs[b][j]
    last = np.array([n - (p - 1) * PAGE for n, p in zip(kv_lens, pages)], np.int32)
    return ks, vs, cache, page_indptr, np.arange(page_indptr[-1], dtype=np.int32), last


def assert_matches(actual, expected, what):
    got = to_numpy(actual)
    scale = max(1.0, float(np.abs(expected).max()))
    err = float(np.abs(got - expected).max()) / scale
    assert err < 2e-3, "%s: max error %.3g" % (what, err)


@pytest.mark.parametrize("device", DEVICES)
def test_vllm_mixed_batch_shares_one_workspace(device):
    workspace = (torch.zeros(256 << 20, dtype=torch.uint8, device=device) if device == "cuda"
                 else np.zeros(16, np.uint8))
    prefill = ignis.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend="auto")
    decode = ignis.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", backend="auto")

    # the prefill part of the batch: one chunk of 16 new tokens over 2048 cached ones
    p_ks, p_vs, p_cache, p_indptr, p_indices, p_last = paged_batch([2048 + 16])
    q_prefill = rng.standard_normal((16, HEADS, DIM)).astype(np.float16)
    qo_indptr = np.array([0, 16], np.int32)
    # the decode part: two long requests
    d_lens = [2000, 3000]
    d_ks, d_vs, d_cache, d_indptr, d_indices, d_last = paged_batch(d_lens)
    q_decode = rng.standard_normal((2, HEADS, DIM)).astype(np.float16)

    prefill.plan(qo_indptr, p_indptr, to_device(p_indices, device), p_last, HEADS, KV_HEADS, DIM, PAGE,
                 causal=True, q_data_type="float16", kv_data_type="float16")
    decode.plan(d_indptr, to_device(d_indices, device), d_last, HEADS, KV_HEADS, DIM, PAGE,
                q_data_type="float16", kv_data_type="float16")

    want_prefill = prefill_ref(q_prefill, p_ks[0], p_vs[0], causal=True)[0]
    want_decode = np.concatenate([decode_ref(q_decode[b:b + 1], d_ks[b], d_vs[b])[0] for b in range(2)])
    qp, qd = to_device(q_prefill, device), to_device(q_decode, device)
    pc, dc = to_device(p_cache, device), to_device(d_cache, device)
    for layer in range(2):  # each layer runs prefill, then decode, on the same plans
        assert_matches(prefill.run(qp, pc), want_prefill, "prefill run, layer %d" % layer)
        assert_matches(decode.run(qd, dc), want_decode, "decode run, layer %d" % layer)
