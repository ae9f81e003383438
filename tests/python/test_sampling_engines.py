"""The sampling calls vLLM 0.33 and SGLang 0.5.23 make through FlashInfer's names, made exactly as
their sources make them (positional and keyword arguments, per-row threshold tensors of their
dtypes, no seed or generator), on every framework present (NumPy; PyTorch on the host and, with a
GPU, on CUDA: probs, logits and the per-row top_k / top_p / min_p tensors on the device), checked
against the float64 references of test_sampling.py: samples inside the allowed set and, for a
batch of equal rows, their frequencies against the renormalized allowed distribution; renorms,
softmax and top_k against their references. vLLM's sampler also as it runs (flashinfer_sample:
torch's f32 softmax, its persistent device threshold buffers sliced to the batch, ``.view(-1)``).
With a GPU, every engine call given the same seed and offset returns on CUDA exactly what it
returns on the CPU (ignis draws the same numbers on both backends). Then the FlashInfer 0.7.2
arguments those calls rely on: the signatures, return_valid (valid computed honestly, samples in
the dtype of indices), is_deterministic, and top_k's tie_break.

vLLM: v1/sample/ops/topk_topp_sampler.py (flashinfer_sample). SGLang: srt/layers/sampler.py,
kernels/ops/sampling/renorm.py, kernels/ops/speculative/dspark/dspark_accept.py (softmax),
kernels/ops/speculative/uno_tree.py and srt/models/dflash.py (top_k).
"""

import inspect

import numpy as np
import pytest

import ignis
from engine_arrays import needs_cuda
from refs import VIEW_FRAME_IDS, VIEW_FRAMES, torch
from test_sampling import allowed_set, check_frequencies, distribution, weights

sampling = ignis.sampling  # what flashinfer.sampling is under the switch (test_flashinfer_switch.py)
FRAMES = pytest.mark.parametrize("frame", VIEW_FRAMES, ids=VIEW_FRAME_IDS)
TORCH_FRAMES = pytest.mark.parametrize("frame", [f for f in VIEW_FRAMES if f.name.startswith("torch")],
                                       ids=[name for name in VIEW_FRAME_IDS if name.startswith("torch")])
VOCAB = 300
SGLANG_TOP_K_ALL = 1 << 30  # SGLang's "no top-k" value
rng = np.random.default_rng(11)


def to_numpy(x):
    return x.cpu().numpy() if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x)


def same_rows(frame, row, batch):
    return frame.array(np.repeat(row[None, :], batch, axis=0), "f32")


def per_row(frame, value, batch, kind):
    """A threshold tensor of `batch` equal values: int ("i32", "i64") or float32 ("f32")."""
    if kind in ("i32", "i64"):
        return frame.index(np.full(batch, value), kind)
    return frame.array(np.full(batch, value), "f32")


def draws(call, calls=6):
    return np.concatenate([to_numpy(call()) for _ in range(calls)])


def target(w, **rule):
    allowed = allowed_set(w, **rule)
    return np.where(allowed, w, 0) / w[allowed].sum(), allowed


# ---- vLLM: flashinfer_sample -----------------------------------------------------------------------
@FRAMES
@pytest.mark.parametrize("p", [0.7, 1.0])
def test_vllm_top_p_only(frame, p):
    row = distribution(VOCAB, 1.5, False)
    probs = same_rows(frame, row, 4096)
    ps = per_row(frame, p, 4096, "f32")
    out = sampling.top_p_sampling_from_probs(probs, ps, deterministic=True)
    assert to_numpy(out).dtype == np.int32 and tuple(out.shape) == (4096,)
    prob, allowed = target(weights(row, False), p=p)
    check_frequencies(draws(lambda: sampling.top_p_sampling_from_probs(probs, ps, deterministic=True)), prob, allowed)


@FRAMES
@pytest.mark.parametrize("k_dtype", ["i32", "i64"])
def test_vllm_top_k_only(frame, k_dtype):
    row = distribution(VOCAB, 1.5, False)
    probs = same_rows(frame, row, 4096)
    ks = per_row(frame, 20, 4096, k_dtype)
    prob, allowed = target(weights(row, False), k=20)
    check_frequencies(draws(lambda: sampling.top_k_sampling_from_probs(probs, ks, deterministic=True)), prob, allowed)


@FRAMES
def test_vllm_top_k_top_p_from_logits(frame):
    row = distribution(VOCAB, 1.5, True)
    logits = same_rows(frame, row, 4096)
    ks, ps = per_row(frame, 30, 4096, "i32"), per_row(frame, 0.6, 4096, "f32")
    out = sampling.top_k_top_p_sampling_from_logits(logits, ks, ps, deterministic=True)
    assert to_numpy(out.reshape(-1)).dtype == np.int32  # vLLM reshapes with .view(-1)
    prob, allowed = target(weights(row, True), k=30, p=0.6, order="top_k_first")
    check_frequencies(draws(lambda: sampling.top_k_top_p_sampling_from_logits(logits, ks, ps, deterministic=True)),
                      prob, allowed)


@FRAMES
def test_vllm_mixed_per_row_thresholds(frame):
    rows = np.stack([distribution(VOCAB, 2.0, False) for _ in range(6)])
    logits = np.log(rows)
    ks = np.array([1, 5, 0, VOCAB, 40, 3], np.int32)  # 0 and vocab: no top-k for that row
    ps = np.array([0.9, 0.3, 0.5, 1.0, 0.05, 1.0], np.float32)
    for _ in range(20):
        s_p = to_numpy(sampling.top_p_sampling_from_probs(frame.array(rows, "f32"), frame.array(ps, "f32"),
                                                          deterministic=True))
        s_k = to_numpy(sampling.top_k_sampling_from_probs(frame.array(rows, "f32"), frame.index(ks, "i32"),
                                                          deterministic=True))
        s_kp = to_numpy(sampling.top_k_top_p_sampling_from_logits(frame.array(logits, "f32"), frame.index(ks, "i32"),
                                                                  frame.array(ps, "f32"), deterministic=True))
        for r in range(6):
            w, wl = weights(rows[r], False), weights(logits[r].astype(np.float32), True)
            assert allowed_set(w, p=float(ps[r]))[s_p[r]]
            assert allowed_set(w, k=int(ks[r]))[s_k[r]]
            assert allowed_set(wl, k=int(ks[r]), p=float(ps[r]), order="top_k_first")[s_kp[r]]
        assert s_k[0] == rows[0].argmax()


def flashinfer_sample(logits, k, p):
    """vLLM's flashinfer_sample, call for call: one filter samples torch's f32 softmax of the
    logits, both filters the logits; the samples come back viewed as 1-D."""
    if k is None:
        ids = sampling.top_p_sampling_from_probs(logits.softmax(dim=-1, dtype=torch.float32), p, deterministic=True)
    elif p is None:
        ids = sampling.top_k_sampling_from_probs(logits.softmax(dim=-1, dtype=torch.float32), k, deterministic=True)
    else:
        ids = sampling.top_k_top_p_sampling_from_logits(logits, k, p, deterministic=True)
    return ids.view(-1)


@TORCH_FRAMES
def test_vllm_flashinfer_sample_on_its_buffers(frame):
    """vLLM's sampler on the tensors it keeps: InputBatch's persistent top_k (int32, the vocabulary
    size for "no top-k") and top_p (float32) on the device, filled from their host copies and
    sliced to the batch; float32 logits."""
    num_reqs, max_num_reqs = 6, 16
    rows = np.stack([distribution(VOCAB, 2.0, True) for _ in range(num_reqs)])
    ks = np.array([1, 5, VOCAB, 40, 3, 20], np.int32)
    ps = np.array([0.9, 0.3, 0.5, 1.0, 0.05, 1.0], np.float32)
    top_k = torch.empty(max_num_reqs, dtype=torch.int32, device=frame.device)
    top_p = torch.empty(max_num_reqs, dtype=torch.float32, device=frame.device)
    top_k[:num_reqs].copy_(torch.from_numpy(ks))  # copy_slice(top_k_cpu_tensor, top_k, num_reqs)
    top_p[:num_reqs].copy_(torch.from_numpy(ps))
    k, p = top_k[:num_reqs], top_p[:num_reqs]
    logits = frame.array(rows, "f32")
    probs = to_numpy(logits.softmax(dim=-1, dtype=torch.float32))
    for _ in range(20):
        s_p, s_k, s_kp = (flashinfer_sample(logits, *kp) for kp in ((None, p), (k, None), (k, p)))
        for s in (s_p, s_k, s_kp):
            assert s.dtype == torch.int32 and tuple(s.shape) == (num_reqs,) and s.device == logits.device
        s_p, s_k, s_kp = to_numpy(s_p), to_numpy(s_k), to_numpy(s_kp)
        for r in range(num_reqs):
            w = weights(probs[r], False)
            assert allowed_set(w, p=float(ps[r]))[s_p[r]]
            assert allowed_set(w, k=int(ks[r]))[s_k[r]]
            assert allowed_set(weights(rows[r], True), k=int(ks[r]), p=float(ps[r]), order="top_k_first")[s_kp[r]]
        assert s_k[0] == s_kp[0] == rows[0].argmax()


# ---- SGLang: sampler.py, renorm.py, speculative decoding ------------------------------------------
@FRAMES
@pytest.mark.parametrize("top_k,top_p", [(30, 0.6), (SGLANG_TOP_K_ALL, 0.8), (5, 1.0)])
def test_sglang_joint_top_k_top_p(frame, top_k, top_p):
    row = distribution(VOCAB, 1.5, False)
    probs = same_rows(frame, row, 4096)
    top_ks, top_ps = per_row(frame, top_k, 4096, "i32"), per_row(frame, top_p, 4096, "f32")
    prob, allowed = target(weights(row, False), k=top_k if top_k < VOCAB else 0, p=top_p, order="joint")
    call = lambda: sampling.top_k_top_p_sampling_from_probs(probs, top_ks, top_ps, filter_apply_order="joint")
    assert to_numpy(call()).dtype == np.int32
    check_frequencies(draws(call), prob, allowed)


@FRAMES
def test_sglang_min_p_after_renorms(frame):
    row = distribution(VOCAB, 1.5, False)
    batch = 4096
    probs = same_rows(frame, row, batch)
    top_ks, top_ps = per_row(frame, 50, batch, "i32"), per_row(frame, 0.9, batch, "f32")
    min_ps = per_row(frame, 0.05, batch, "f32")
    after_k = sampling.top_k_renorm_probs(probs, top_ks)
    renormed = sampling.top_p_renorm_probs(after_k, top_ps)
    # each step against the reference applied to the f32 row it was given
    w = weights(row, False)
    a = allowed_set(w, k=50)
    np.testing.assert_allclose(to_numpy(after_k)[0], np.where(a, w, 0) / w[a].sum(), rtol=1e-5, atol=1e-8)
    w = weights(to_numpy(after_k)[0], False)
    a = allowed_set(w, p=0.9)
    np.testing.assert_allclose(to_numpy(renormed)[0], np.where(a, w, 0) / w[a].sum(), rtol=1e-5, atol=1e-8)
    assert (to_numpy(renormed) == to_numpy(renormed)[0]).all()
    prob, allowed = target(weights(to_numpy(renormed)[0], False), min_p=0.05)
    check_frequencies(draws(lambda: sampling.min_p_sampling_from_probs(renormed, min_ps)), prob, allowed)


@FRAMES
def test_sglang_renorms_per_row(frame):
    rows = np.stack([distribution(1000, 1.0 + r, False) for r in range(4)])
    ks = np.array([1, 10, SGLANG_TOP_K_ALL, 200], np.int32)
    ps = np.array([0.2, 0.6, 1.0, 0.95], np.float32)
    got_k = to_numpy(sampling.top_k_renorm_probs(frame.array(rows, "f32"), frame.index(ks, "i32")))
    got_p = to_numpy(sampling.top_p_renorm_probs(frame.array(rows, "f32"), frame.array(ps, "f32")))
    for r in range(4):
        a = allowed_set(weights(rows[r], False), k=int(ks[r]) if ks[r] < 1000 else 0)
        np.testing.assert_allclose(got_k[r], np.where(a, rows[r], 0) / rows[r][a].sum(), rtol=1e-5, atol=1e-8)
        a = allowed_set(weights(rows[r], False), p=float(ps[r]))
        np.testing.assert_allclose(got_p[r], np.where(a, rows[r], 0) / rows[r][a].sum(), rtol=1e-5, atol=1e-8)


@FRAMES
def test_sglang_softmax_per_row_temperature(frame):
    logits = (3 * rng.standard_normal((5, 700))).astype(np.float32)
    temp_per_row = np.array([1.0, 0.5, 2.0, 0.7, 1.3], np.float32)
    got = sampling.softmax(logits=frame.array(logits, "f32"), temperature=frame.array(temp_per_row, "f32"))
    ref = np.exp((logits - logits.max(1, keepdims=True)) / temp_per_row[:, None])
    ref /= ref.sum(1, keepdims=True)
    assert to_numpy(got).dtype == np.float32
    np.testing.assert_allclose(to_numpy(got), ref, rtol=2e-5, atol=1e-9)


@FRAMES
@pytest.mark.parametrize("deterministic", [False, True])  # uno_tree.py: False; dflash.py: True
def test_sglang_top_k(frame, deterministic):
    x = rng.standard_normal((7, 2000)).astype(np.float32)
    for k in (1, 8, 64):
        values, indices = ignis.top_k(frame.array(x, "f32"), k, sorted=True, deterministic=deterministic)
        v, i = to_numpy(values), to_numpy(indices)
        assert i.dtype == np.int64 and v.shape == (7, k)
        np.testing.assert_array_equal(v, np.sort(x, 1)[:, ::-1][:, :k])
        np.testing.assert_array_equal(np.take_along_axis(x, i, 1), v)
        if torch is not None:
            tv, ti = torch.topk(torch.from_numpy(x), k, dim=-1)
            np.testing.assert_array_equal(v, tv.numpy())
            np.testing.assert_array_equal(i, ti.numpy())  # no ties in a normal sample: the same indices


# ---- the same calls on both backends ---------------------------------------------------------------
# The engines' calls with a seed and an offset added (they pass neither); each gets the distribution
# rows (logits where it takes them) and the per-row thresholds, as int32 / float32 tensors.
SEEDED_CALLS = {
    "vllm_top_p": (False, lambda x, t, d: sampling.top_p_sampling_from_probs(x, t["p"], deterministic=True, **d)),
    "vllm_top_k": (False, lambda x, t, d: sampling.top_k_sampling_from_probs(x, t["k"], deterministic=True, **d)),
    "vllm_top_k_top_p": (True, lambda x, t, d: sampling.top_k_top_p_sampling_from_logits(x, t["k"], t["p"],
                                                                                        deterministic=True, **d)),
    "sglang_joint": (False, lambda x, t, d: sampling.top_k_top_p_sampling_from_probs(x, t["k"], t["p"],
                                                                                    filter_apply_order="joint", **d)),
    "sglang_min_p": (False, lambda x, t, d: sampling.min_p_sampling_from_probs(x, t["min_p"], **d)),
    "sglang_top_k_renorm": (False, lambda x, t, d: sampling.top_k_renorm_probs(x, t["k"])),
    "sglang_top_p_renorm": (False, lambda x, t, d: sampling.top_p_renorm_probs(x, t["p"])),
}


@needs_cuda
@pytest.mark.parametrize("name", list(SEEDED_CALLS))
def test_engine_calls_agree_across_backends(name):
    """On CUDA tensors each call returns exactly what it returns on the CPU: the same samples for the
    same seed and offset, the same renormalized rows (include/ignis/sampling.h)."""
    logits, call = SEEDED_CALLS[name]
    rows = np.stack([distribution(VOCAB, 1.0 + 0.25 * r, logits) for r in range(8)])
    thresholds = {"k": np.array([1, 5, 20, SGLANG_TOP_K_ALL, 40, 3, VOCAB, 10], np.int32),
                  "p": np.array([0.9, 0.3, 0.5, 1.0, 0.05, 1.0, 0.7, 0.95], np.float32),
                  "min_p": np.array([0.0, 0.05, 0.1, 0.2, 0.01, 0.5, 0.3, 0.0], np.float32)}
    results = {}
    for device in ("cpu", "cuda"):
        x = torch.from_numpy(rows).to(device)
        t = {key: torch.from_numpy(value).to(device) for key, value in thresholds.items()}
        results[device] = [to_numpy(call(x, t, {"seed": 7, "offset": offset})) for offset in range(3)]
    for on_cpu, on_cuda in zip(results["cpu"], results["cuda"]):
        np.testing.assert_array_equal(on_cuda, on_cpu)


# ---- FlashInfer 0.7.2's arguments ------------------------------------------------------------------
E = inspect.Parameter.empty
DRAW = [("deterministic", True), ("generator", None), ("check_nan", False), ("seed", None), ("offset", None)]
SIGNATURES = {  # FlashInfer 0.7.2.post1's parameters, in order, with their defaults
    "sampling_from_probs": [("probs", E), ("indices", None)] + DRAW + [("return_valid", False)],
    "top_p_sampling_from_probs": [("probs", E), ("top_p", E), ("indices", None)] + DRAW + [("return_valid", False)],
    "top_k_sampling_from_probs": [("probs", E), ("top_k", E), ("indices", None)] + DRAW + [("return_valid", False)],
    "min_p_sampling_from_probs": [("probs", E), ("min_p", E), ("indices", None)] + DRAW + [("return_valid", False)],
    "top_k_top_p_sampling_from_probs": [("probs", E), ("top_k", E), ("top_p", E), ("indices", None),
                                        ("filter_apply_order", "top_k_first")] + DRAW + [("return_valid", False)],
    "top_k_top_p_sampling_from_logits": [("logits", E), ("top_k", E), ("top_p", E), ("indices", None),
                                         ("filter_apply_order", "top_k_first")] + DRAW,
    "top_p_renorm_probs": [("probs", E), ("top_p", E), ("is_deterministic", False)],
    "top_k_renorm_probs": [("probs", E), ("top_k", E), ("is_deterministic", False)],
    "softmax": [("logits", E), ("temperature", None), ("enable_pdl", None)],
    "top_k": [("input", E), ("k", E), ("sorted", False), ("deterministic", False),
              ("tie_break", ignis.TopKTieBreak.NONE), ("dsa_graph_safe", False)],
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_flashinfer_signature(name):
    *positional, stream = inspect.signature(getattr(sampling, name)).parameters.values()
    assert [(p.name, p.default) for p in positional] == SIGNATURES[name]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in positional)
    assert (stream.name, stream.kind) == ("stream", inspect.Parameter.KEYWORD_ONLY)


VALID_SAMPLERS = {
    "sampling_from_probs": lambda x, **kw: sampling.sampling_from_probs(x, **kw),
    "top_p": lambda x, **kw: sampling.top_p_sampling_from_probs(x, 0.5, **kw),
    "top_k": lambda x, **kw: sampling.top_k_sampling_from_probs(x, 2, **kw),
    "min_p": lambda x, **kw: sampling.min_p_sampling_from_probs(x, 0.3, **kw),
    "top_k_top_p": lambda x, **kw: sampling.top_k_top_p_sampling_from_probs(x, 2, 0.5, **kw),
    "top_k_top_p_joint": lambda x, **kw: sampling.top_k_top_p_sampling_from_probs(
        x, 2, 0.5, filter_apply_order="joint", **kw),
}


def edge_rows():
    """Rows a sampler can draw from (1, 3, 5) and rows it cannot (0: zeros, 2: NaN, -inf and
    negatives, 4: +inf only, which ignis never samples)."""
    x = np.zeros((6, 8), np.float32)
    x[1] = [0.1, 0.4, 0, 0, 0.2, 0, 0, 0.3]
    x[2] = [np.nan, -1, -np.inf, 0, np.nan, 0, -0.5, 0]
    x[3, 6] = 1e-30
    x[4, 2] = np.inf
    x[5] = 1
    return x, np.array([False, True, False, True, False, True])


@FRAMES
@pytest.mark.parametrize("op", list(VALID_SAMPLERS))
def test_return_valid(frame, op):
    x, drawable = edge_rows()
    fn = VALID_SAMPLERS[op]
    probs = frame.array(x, "f32")
    plain = fn(probs, seed=3, offset=1)
    samples, valid = fn(probs, seed=3, offset=1, return_valid=True)
    np.testing.assert_array_equal(to_numpy(samples), to_numpy(plain))
    assert to_numpy(valid).dtype == np.bool_ and tuple(valid.shape) == (6,)
    np.testing.assert_array_equal(to_numpy(valid), drawable)
    np.testing.assert_array_equal(to_numpy(samples)[~drawable], 0)  # nothing drawn: token 0
    assert to_numpy(samples)[3] == 6
    assert (x[drawable, :][np.arange(3), to_numpy(samples)[drawable]] > 0).all()
    # through indices: output row b draws from row indices[b]; an index out of range is not valid
    for dtype in ("i32", "i64"):
        indices = frame.index([5, 0, 3, 3, 9, -1, 1], dtype)
        samples, valid = fn(probs, indices=indices, seed=3, return_valid=True)
        assert to_numpy(samples).dtype == (np.int32 if dtype == "i32" else np.int64)  # the dtype of indices
        np.testing.assert_array_equal(to_numpy(valid), [True, False, True, True, False, False, True])
        assert to_numpy(samples)[2] == to_numpy(samples)[3] == 6


@FRAMES
def test_samples_take_the_dtype_of_indices(frame):
    logits = frame.array(rng.standard_normal((3, 50)), "f32")
    probs = sampling.softmax(logits)
    for dtype, np_dtype in (("i32", np.int32), ("i64", np.int64)):
        indices = frame.index([2, 2, 0, 1], dtype)
        for out in (sampling.sampling_from_logits(logits, indices), sampling.sampling_from_probs(probs, indices),
                    sampling.top_k_top_p_sampling_from_logits(logits, 5, 0.9, indices),
                    sampling.top_p_sampling_from_probs(probs, 0.9, indices, return_valid=True)[0]):
            assert to_numpy(out).dtype == np_dtype and tuple(out.shape) == (4,)
    assert to_numpy(sampling.sampling_from_probs(probs)).dtype == np.int32


@FRAMES
def test_is_deterministic_accepted(frame):
    x = frame.array(np.stack([distribution(500, 1.5, False) for _ in range(3)]), "f32")
    for fn, threshold in ((sampling.top_p_renorm_probs, 0.7), (sampling.top_k_renorm_probs, 9)):
        np.testing.assert_array_equal(to_numpy(fn(x, threshold, is_deterministic=True)), to_numpy(fn(x, threshold)))
        np.testing.assert_array_equal(to_numpy(fn(x, threshold, True)), to_numpy(fn(x, threshold, False)))


def test_top_k_tie_break():
    x = np.array([[1, 5, 3, 5, 5, 0, 5], [2, 2, 2, 2, 2, 2, 2]], np.float32)
    for tie_break in (ignis.TopKTieBreak.NONE, ignis.TopKTieBreak.SMALL, 0, 1):
        values, indices = ignis.top_k(x, 3, sorted=True, tie_break=tie_break, dsa_graph_safe=True)
        np.testing.assert_array_equal(indices, [[1, 3, 4], [0, 1, 2]])  # the lowest indices among equals
        np.testing.assert_array_equal(values, [[5, 5, 5], [2, 2, 2]])
        _, unsorted = ignis.top_k(x, 3, tie_break=tie_break)
        np.testing.assert_array_equal(np.sort(unsorted, 1), [[1, 3, 4], [0, 1, 2]])
    _, indices = ignis.top_k(x, 2, sorted=True)
    np.testing.assert_array_equal(indices, [[1, 3], [0, 1]])
    for tie_break in (ignis.TopKTieBreak.LARGE, 2):
        with pytest.raises(ignis.UnsupportedError, match="LARGE"):
            ignis.top_k(x, 3, tie_break=tie_break)
    for tie_break in (3, -1, "small"):
        with pytest.raises(ignis.InvalidArgumentError, match="tie_break"):
            ignis.top_k(x, 3, tie_break=tie_break)
    assert [int(t) for t in ignis.TopKTieBreak] == [0, 1, 2]  # FlashInfer's values, for int callers
