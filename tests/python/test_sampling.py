"""Sampling ops (ignis.sampling, FlashInfer's names) against float64 NumPy references: every sample
inside the allowed set, frequencies against the renormalized allowed distribution (cosine > 0.99 and
a chi-square bound) over many draws (>= 1M on the GPU), reproducibility (same seed and offset, same
samples; CPU and CUDA the same samples), seeds and offsets as tensors, per-row thresholds,
renorm/mask ops, softmax, top_k selection against sorting (and torch.topk on CUDA), speculative
sampling's output shape and padding, and the errors (each names its parameter)."""

import numpy as np
import pytest

import ignis

try:
    import torch
except ImportError:
    torch = None

HAVE_CUDA = torch is not None and torch.cuda.is_available() and ignis.cuda_device_count() > 0
rng = np.random.default_rng(7)


# ---- references ------------------------------------------------------------------------------------
def weights(x, logits):
    x = np.asarray(x, np.float64)
    if logits:
        x = np.where(np.isnan(x), -np.inf, np.minimum(x, np.finfo(np.float32).max))
        m = x.max(axis=-1, keepdims=True)
        d = x - m
        return np.where(np.isfinite(m) & (d >= -104), np.exp(np.where(np.isfinite(d), d, -1e9)), 0.0)
    return np.where(np.isfinite(x) & (x > 0), x, 0.0)


def allowed_set(w, k=0, p=1.0, min_p=0.0, order=None):
    """Allowed mask of one row of weights (the header's rules)."""
    pos = w > 0
    thr = 0.0
    s = np.sort(w[pos])[::-1]
    if k and 0 < k < s.size:
        thr = s[k - 1]
    if p < 1.0:
        base = w.sum() if order != "top_k_first" else w[w >= thr].sum()
        cand = np.sort(w[pos & (w >= (thr if order == "top_k_first" else 0))])[::-1]
        above, tp = 0.0, cand[-1] if cand.size else 0.0
        for v in np.unique(cand)[::-1]:
            group = cand[cand == v].sum()
            if above < p * base <= above + group:
                tp = v
                break
            above += group
        thr = max(thr, tp)
    if min_p:
        thr = max(thr, float(np.float32(min_p) * np.float32(w.max())))
    return pos & (w >= thr)


def check_frequencies(samples, prob, allowed):
    samples = np.asarray(samples).ravel()
    n = samples.size
    assert samples.min() >= 0 and samples.max() < prob.size
    assert allowed[samples].all(), "a sample outside the allowed set"
    counts = np.bincount(samples, minlength=prob.size).astype(np.float64)
    cos = counts @ prob / (np.linalg.norm(counts) * np.linalg.norm(prob))
    assert cos > 0.99, f"cosine {cos:.4f}"
    e = prob * n
    big = e >= 5
    chi = (((counts[big] - e[big]) ** 2) / e[big]).sum()
    df = int(big.sum()) - 1
    if (~big).any() and e[~big].sum() >= 5:
        chi += (counts[~big].sum() - e[~big].sum()) ** 2 / e[~big].sum()
        df += 1
    if df > 0:
        assert chi < df + 6 * np.sqrt(2 * df) + 10, f"chi-square {chi:.1f} df {df}"


def distribution(n, spread, logits):
    x = spread * rng.standard_normal(n)
    if logits:
        return x.astype(np.float32)
    p = np.exp(x - x.max())
    return (p / p.sum()).astype(np.float32)


# ---- the ops as one table --------------------------------------------------------------------------
OPS = {
    "probs": (False, lambda x, **kw: ignis.sampling_from_probs(x, **kw), {}),
    "logits": (True, lambda x, **kw: ignis.sampling_from_logits(x, **kw), {}),
    "top_k": (False, lambda x, **kw: ignis.top_k_sampling_from_probs(x, 20, **kw), {"k": 20}),
    "top_p": (False, lambda x, **kw: ignis.top_p_sampling_from_probs(x, 0.7, **kw), {"p": 0.7}),
    "min_p": (False, lambda x, **kw: ignis.min_p_sampling_from_probs(x, 0.1, **kw), {"min_p": 0.1}),
    "kp_joint": (False, lambda x, **kw: ignis.top_k_top_p_sampling_from_probs(x, 30, 0.6, filter_apply_order="joint", **kw),
                 {"k": 30, "p": 0.6, "order": "joint"}),
    "kp_first": (False, lambda x, **kw: ignis.top_k_top_p_sampling_from_probs(x, 30, 0.6, **kw),
                 {"k": 30, "p": 0.6, "order": "top_k_first"}),
    "logits_kp_joint": (True, lambda x, **kw: ignis.top_k_top_p_sampling_from_logits(
        x, 30, 0.6, filter_apply_order="joint", **kw), {"k": 30, "p": 0.6, "order": "joint"}),
    "logits_kp_first": (True, lambda x, **kw: ignis.top_k_top_p_sampling_from_logits(x, 30, 0.6, **kw),
                        {"k": 30, "p": 0.6, "order": "top_k_first"}),
}


def draw(op, row, batch, calls, to_frame):
    logits, fn, _ = OPS[op]
    x = to_frame(row[None, :])
    idx = to_frame(np.zeros(batch, np.int32))
    out = [np.asarray(to_numpy(fn(x, indices=idx, seed=11, offset=c))) for c in range(calls)]
    return np.concatenate(out)


def to_numpy(x):
    return x.cpu().numpy() if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x)


@pytest.mark.parametrize("op", list(OPS))
def test_statistics_cpu(op):
    logits, _, rule = OPS[op]
    row = distribution(300, 1.5, logits)
    w = weights(row, logits)
    allowed = allowed_set(w, **rule)
    prob = np.where(allowed, w, 0) / w[allowed].sum()
    check_frequencies(draw(op, row, 2048, 10, lambda a: a), prob, allowed)


@pytest.mark.skipif(not HAVE_CUDA, reason="needs torch with CUDA and ignis's CUDA backend")
@pytest.mark.parametrize("op", list(OPS))
def test_statistics_cuda(op):
    logits, _, rule = OPS[op]
    row = distribution(1000, 2.5, logits)
    w = weights(row, logits)
    allowed = allowed_set(w, **rule)
    prob = np.where(allowed, w, 0) / w[allowed].sum()
    samples = draw(op, row, 1 << 16, 16, lambda a: torch.from_numpy(a).cuda())  # 1M draws
    check_frequencies(samples, prob, allowed)


# Vocabulary 128256: 1M draws for the filters that keep few tokens; top-p 0.9 and unfiltered sampling
# read the whole row per draw (two passes): 256k and 64k draws of a peaked row.
@pytest.mark.skipif(not HAVE_CUDA, reason="needs torch with CUDA and ignis's CUDA backend")
@pytest.mark.parametrize("op,batch,calls,spread", [("top_k", 1 << 16, 16, 2.5), ("kp_joint", 1 << 16, 16, 2.5),
                                                   ("logits_kp_first", 1 << 16, 16, 2.5), ("min_p", 1 << 16, 16, 2.5),
                                                   ("top_p", 1 << 16, 4, 2.5), ("probs", 1 << 16, 1, 4.0),
                                                   ("logits", 1 << 16, 1, 4.0)])
def test_statistics_cuda_large_vocab(op, batch, calls, spread):
    logits, _, rule = OPS[op]
    row = distribution(128256, spread, logits)
    w = weights(row, logits)
    allowed = allowed_set(w, **rule)
    prob = np.where(allowed, w, 0) / w[allowed].sum()
    samples = draw(op, row, batch, calls, lambda a: torch.from_numpy(a).cuda())
    check_frequencies(samples, prob, allowed)


@pytest.mark.parametrize("op", list(OPS))
def test_reproducible_and_backends_agree(op):
    logits, fn, _ = OPS[op]
    x = np.stack([distribution(5000, 0.5 + r, logits) for r in range(8)])
    a = fn(x, seed=5, offset=9)
    assert a.dtype == np.int32 and a.shape == (8,)
    assert (fn(x, seed=5, offset=9) == a).all()
    assert any((fn(x, seed=5, offset=o) != a).any() for o in range(10, 14))
    # seed and offset as tensors: one element, or one per row
    assert (fn(x, seed=np.array([5], np.int64), offset=np.array([9], np.int64)) == a).all()
    per_row = fn(x, seed=np.full(8, 5, np.int64), offset=np.full(8, 9, np.int64))
    assert (per_row == a).all()
    if HAVE_CUDA:
        g = fn(torch.from_numpy(x).cuda(), seed=5, offset=9)
        assert (g.cpu().numpy() == a).all(), (g.cpu().numpy(), a)
        gt = fn(torch.from_numpy(x).cuda(), seed=torch.tensor([5], device="cuda"),
                offset=torch.tensor([9], device="cuda"))
        assert (gt.cpu().numpy() == a).all()


@pytest.mark.skipif(not HAVE_CUDA, reason="needs a CUDA device")
@pytest.mark.parametrize("op", list(OPS))
def test_multi_block_path_agrees(op):
    """Few rows on CUDA take the multi-block path (the package's workspace); an explicit stream runs
    one block per row. Both give the CPU backend's samples, and a CUDA graph replays the first."""
    logits, fn, _ = OPS[op]
    for rows, n in ((1, 128256), (4, 32000), (8, 4096)):
        x = np.stack([distribution(n, 0.5 + r, logits) for r in range(rows)])
        cpu = fn(x, seed=3, offset=1)
        g = torch.from_numpy(x).cuda()
        split = fn(g, seed=3, offset=1)
        one = fn(g, seed=3, offset=1, stream=torch.cuda.current_stream())
        assert (split.cpu().numpy() == cpu).all(), (split.cpu().numpy(), cpu)
        assert (one.cpu().numpy() == cpu).all(), (one.cpu().numpy(), cpu)
    offset = torch.tensor([1], dtype=torch.int64, device="cuda")
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn(g, seed=3, offset=offset)  # the workspace of this stream, made outside the capture
        with torch.cuda.graph(graph, stream=stream):
            out = fn(g, seed=3, offset=offset)
    torch.cuda.current_stream().wait_stream(stream)
    for o in (1, 2, 3):
        offset.fill_(o)
        graph.replay()
        torch.cuda.synchronize()
        assert (out.cpu().numpy() == fn(x, seed=3, offset=o)).all()


def test_per_row_thresholds():
    x = np.stack([distribution(2000, 2.0, False) for _ in range(6)])
    ks = np.array([1, 2, 5, 0, 3000, 10], np.int32)
    ps = np.array([0.01, 0.3, 0.5, 0.9, 1.0, 0.2], np.float32)
    for call in range(5):
        s = ignis.top_k_top_p_sampling_from_probs(x, ks, ps, filter_apply_order="joint", seed=call)
        for r in range(6):
            assert allowed_set(weights(x[r], False), k=int(ks[r]), p=float(ps[r]))[s[r]]
        s = ignis.top_k_sampling_from_probs(x, ks, seed=call)
        assert s[0] == x[0].argmax()


def test_edge_rows():
    x = np.zeros((4, 8), np.float32)
    x[1] = [np.nan, np.inf, 0, 0.25, -1, np.nan, 0, -np.inf]
    x[2, 7] = 0.125
    x[3] = 1.0
    for fn in (lambda a: ignis.sampling_from_probs(a), lambda a: ignis.top_p_sampling_from_probs(a, 1e-9),
               lambda a: ignis.top_k_sampling_from_probs(a, 100)):
        s = fn(x)
        assert s[0] == 0 and s[1] == 3 and s[2] == 7 and 0 <= s[3] < 8
    one = np.ones((3, 1), np.float32)
    assert (ignis.top_k_top_p_sampling_from_logits(one, 5, 0.5) == 0).all()


def test_renorm_and_mask():
    x = np.stack([distribution(1000, 1.0 + r, False) for r in range(4)])
    for r, out in enumerate(ignis.top_p_renorm_probs(x, 0.6)):
        a = allowed_set(weights(x[r], False), p=0.6)
        np.testing.assert_allclose(out, np.where(a, x[r], 0) / x[r][a].sum(), rtol=1e-5, atol=1e-8)
    ks = np.array([1, 10, 0, 2000], np.int64)
    for r, out in enumerate(ignis.top_k_renorm_probs(x, ks)):
        a = allowed_set(weights(x[r], False), k=int(ks[r]))
        np.testing.assert_allclose(out, np.where(a, x[r], 0) / x[r][a].sum(), rtol=1e-5, atol=1e-8)
    logits = np.log(x)
    masked = ignis.top_k_mask_logits(logits, 7)
    for r in range(4):
        kth = np.sort(logits[r])[::-1][6]
        np.testing.assert_array_equal(masked[r], np.where(logits[r] >= kth, logits[r], -np.inf))


def test_softmax():
    x = (3 * rng.standard_normal((3, 500))).astype(np.float32)
    for t in (None, 0.5, np.array([1.0, 2.0, 0.7], np.float32)):
        tt = 1.0 if t is None else (t if np.isscalar(t) else t[:, None])
        ref = np.exp((x - x.max(1, keepdims=True)) / tt)
        ref /= ref.sum(1, keepdims=True)
        got = ignis.softmax(x, t)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-9)
    hot = ignis.softmax(x, np.array([0.0, -1.0, 1.0], np.float32))
    assert hot[0, x[0].argmax()] == 1.0 and hot[0].sum() == 1.0 and hot[1, x[1].argmax()] == 1.0


@pytest.mark.parametrize("sorted_", [False, True])
def test_top_k_selection(sorted_):
    x = rng.standard_normal((5, 3000)).astype(np.float32)
    for k in (1, 50, 3000):
        v, i = ignis.top_k(x, k, sorted=sorted_)
        assert v.shape == (5, k) and i.dtype == np.int64
        np.testing.assert_array_equal(np.take_along_axis(x, i, 1), v)
        ref = np.sort(x, 1)[:, ::-1][:, :k]
        np.testing.assert_array_equal(np.sort(v, 1)[:, ::-1], ref)
        if sorted_:
            np.testing.assert_array_equal(v, ref)
    if HAVE_CUDA:
        xt = torch.from_numpy(x).cuda()
        v, i = ignis.top_k(xt, 50, sorted=True)
        tv, _ = torch.topk(xt, 50)
        assert torch.equal(v, tv)


def test_chain_speculative_sampling():
    b, n, v = 4, 3, 100
    draft = np.stack([np.stack([distribution(v, 1.0, False) for _ in range(n)]) for _ in range(b)])
    target = np.stack([np.stack([distribution(v, 1.0, False) for _ in range(n + 1)]) for _ in range(b)])
    ids = rng.integers(0, v, (b, n)).astype(np.int32)
    out, acc, emi = ignis.chain_speculative_sampling(draft, ids, target, seed=3)
    assert out.shape == (b, n + 1) and out.dtype == np.int32
    for r in range(b):
        m = emi[r]
        assert 0 <= m <= n and acc[r] >= m
        assert (out[r, :m] == ids[r, :m]).all() and 0 <= out[r, m] < v and (out[r, m + 1:] == -1).all()
    acc2 = np.full(b, 5, np.int32)
    _, acc3, _ = ignis.chain_speculative_sampling(draft, ids, target, acc2, seed=3)
    assert acc3 is acc2 and (acc2 == acc + 5).all()
    # target == draft: every draft token is accepted
    out, acc, emi = ignis.chain_speculative_sampling(draft, ids, np.concatenate([draft, target[:, :1]], 1), seed=4)
    assert (emi == n).all() and (out[:, :n] == ids).all()


def test_check_nan_and_errors():
    x = np.full((2, 4), 0.25, np.float32)
    x[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ignis.sampling_from_probs(x, check_nan=True)
    good = np.full((2, 4), 0.25, np.float32)
    with pytest.raises(ignis.InvalidArgumentError, match="top_p=0"):
        ignis.top_p_sampling_from_probs(good, 0.0)
    with pytest.raises(ignis.InvalidArgumentError, match="top_k=-1"):
        ignis.top_k_sampling_from_probs(good, -1)
    with pytest.raises(ignis.InvalidArgumentError, match="min_p"):
        ignis.min_p_sampling_from_probs(good, 2.0)
    with pytest.raises(ignis.DtypeError, match="probs.dtype"):
        ignis.sampling_from_probs(good.astype(np.int32))
    with pytest.raises(ignis.InvalidArgumentError, match="top_k_arr.shape"):
        ignis.top_k_sampling_from_probs(good, np.array([1, 2, 3], np.int32))
    with pytest.raises(ignis.InvalidArgumentError, match="k=5"):
        ignis.top_k(good, 5)
    with pytest.raises(ValueError, match="filter_apply_order"):
        ignis.top_k_top_p_sampling_from_probs(good, 1, 0.5, filter_apply_order="bogus")
    with pytest.raises(ignis.InvalidArgumentError, match="temperature"):
        ignis.softmax(good, 0.0)
