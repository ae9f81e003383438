"""MoE routing (ignis.moe_route, ignis.fused_topk_deepseek, ignis.topk_softmax, RoutingMethodType) against a
float64 NumPy reference of include/ignis/moe_routing.h: keys (the logit, or sigmoid + bias), groups scored by
their two largest keys, the kept groups' top_k keys (the lower index first among equals), each method's
weights times routed_scaling_factor. In every framework present (NumPy, PyTorch on the host and on CUDA,
JAX), with FlashInfer's and vLLM's calling conventions, strided logits, caller outputs, the CUDA backend
against the CPU backend bit for bit, a CUDA-graph replay, and the errors.

The biased methods round their keys in f32: a token whose reference keys at a decision come within KEY_GAP
of each other is a close call, whose ids are checked for range and distinctness only."""

import numpy as np
import pytest

import ignis
from engine_arrays import as_numpy, capture
from refs import FRAME_DTYPE_IDS, FRAME_DTYPES, FRAMES, torch

rng = np.random.default_rng(19)
KEY_GAP = 1e-5
RM = ignis.RoutingMethodType
TOL = {"f32": 1e-5, "bf16": 1e-2, "f16": 1e-3}


# ---- reference ------------------------------------------------------------------------------------
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def biased(method):
    return method in (RM.DeepSeekV3, RM.MiniMax2)


def order(keys, candidates):
    """candidates sorted by key, largest first, the lower index first among equals."""
    candidates = np.asarray(candidates)
    return candidates[np.lexsort((candidates, -keys[candidates]))]


def close_call(keys, ranked, n):
    gaps = np.abs(np.diff(keys[ranked[:n]]))
    return bool(np.any((gaps > 0) & (gaps < KEY_GAP)))


def ref_ids(x, method, k, bias=None, n_group=0, topk_group=0):
    """(ids, close) of one token."""
    e_count = x.shape[0]
    b = np.zeros(e_count) if bias is None else bias
    keys = sigmoid(x) + b if biased(method) else x
    candidates = np.arange(e_count)
    close = False
    if method == RM.DeepSeekV3 and n_group > 1 and topk_group < n_group:
        per = e_count // n_group
        scores = np.array([np.sort(keys[g * per:(g + 1) * per])[::-1][:2].sum() for g in range(n_group)])
        groups = order(scores, np.arange(n_group))
        close = close_call(scores, groups, topk_group + 1)
        candidates = np.concatenate([np.arange(g * per, (g + 1) * per) for g in sorted(groups[:topk_group])])
    ranked = order(keys, candidates)
    close = biased(method) and (close or close_call(keys, ranked, k + 1))
    return ranked[:k], close


def ref_weights(x, method, ids, scale=1.0):
    v = sigmoid(x) if biased(method) else x
    top = v[ids[0]]
    if method in (RM.Default, RM.Renormalize, RM.RenormalizeNaive):
        term = np.exp(v[ids] - top)
    elif method in (RM.Llama4, RM.TopKSigmoid, RM.Sigmoid, RM.SigmoidRenorm):
        term = sigmoid(v[ids])
    else:
        term = v[ids]
    if method == RM.Default:
        w = term / np.exp(v - top).sum()
    elif method in (RM.Renormalize, RM.RenormalizeNaive):
        w = term / term.sum()
    elif method == RM.SigmoidRenorm:
        w = term / max(term.sum(), 1e-20)
    elif biased(method):
        w = term / (term.sum() + 1e-20)
    else:
        w = term
    return w * scale


def check(x, ids, weights, method, k, bias=None, n_group=0, topk_group=0, scale=1.0, weights_dtype="f32"):
    """Compare one call's outputs (NumPy) with the reference, token by token."""
    ids = np.asarray(ids, np.int64)
    weights = np.asarray(weights, np.float64)
    assert ids.shape == weights.shape == (x.shape[0], k)
    close = 0
    for t in range(x.shape[0]):
        want, is_close = ref_ids(x[t], method, k, bias, n_group, topk_group)
        close += is_close
        got = ids[t]
        assert len(set(got.tolist())) == k and got.min() >= 0 and got.max() < x.shape[1], (t, got)
        if not is_close:
            np.testing.assert_array_equal(got, want, err_msg=f"token {t}")
        expected = ref_weights(x[t], method, got, scale)
        np.testing.assert_allclose(weights[t], expected, rtol=TOL[weights_dtype], atol=TOL[weights_dtype] * 1e-3,
                                   err_msg=f"token {t}")
    assert close <= x.shape[0] // 20 + 1


def logits(tokens, experts, ties=False):
    x = rng.standard_normal((tokens, experts)) * 2
    if ties:
        x[:, ::2] = rng.integers(-2, 3, x[:, ::2].shape) * 0.5
    return x


def frame_logits(frame, dtype, tokens, experts, ties=False):
    x = frame.array(logits(tokens, experts, ties), dtype)
    return x, frame.numpy(x)


# ---- the methods ----------------------------------------------------------------------------------
METHODS = [m for m in RM if m != RM.Unspecified]


@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
@pytest.mark.parametrize("method", METHODS, ids=[m.name for m in METHODS])
def test_every_method(frame, dtype, method):
    for experts, k, ties in ((64, 6, False), (256, 8, True), (20, 1, False)):
        k = 1 if method == RM.Llama4 else k
        x, xr = frame_logits(frame, dtype, 33, experts, ties)
        bias = rng.standard_normal(experts) * 0.1 if biased(method) else None
        scale = 2.5 if biased(method) else 1.0
        ids, weights = ignis.moe_route(x, k, method, None if bias is None else frame.array(bias, "f32"),
                                       routed_scaling_factor=scale)
        bias_r = None if bias is None else bias.astype(np.float32).astype(np.float64)
        check(xr, as_numpy(ids), as_numpy(weights), method, k, bias_r, scale=scale)
        assert as_numpy(ids).dtype == np.int32 and as_numpy(weights).dtype == np.float32


@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
@pytest.mark.parametrize("groups", [(8, 4), (1, 1), (8, 8)], ids=["8-4", "1-1", "8-8"])
def test_deepseek_groups(frame, dtype, groups):
    """moe_route with DeepSeekV3 on the model's shape (E256, top-8, 8 groups / top-4), no groups, all kept."""
    n_group, topk_group = groups
    x, xr = frame_logits(frame, dtype, 64, 256)
    bias = (rng.standard_normal(256) * 0.05).astype(np.float32)
    ids, weights = ignis.moe_route(x, 8, RM.DeepSeekV3, frame.array(bias, "f32"), n_group, topk_group, 2.5)
    check(xr, as_numpy(ids), as_numpy(weights), RM.DeepSeekV3, 8, bias.astype(np.float64), n_group, topk_group, 2.5)


# ---- FlashInfer's and vLLM's calls --------------------------------------------------------------------
INPLACE_FRAMES = [f for f in FRAMES if not f.name.startswith("jax")]


@pytest.mark.parametrize("frame", INPLACE_FRAMES, ids=[f.name for f in INPLACE_FRAMES])
def test_fused_topk_deepseek(frame):
    """SGLang's call: scores and topk_values of one dtype (f32, or bf16 where the frame has it), int32
    topk_indices, written in place; returns None."""
    dtype = "bf16" if "bf16" in frame.dtypes else "f32"
    x, xr = frame_logits(frame, dtype, 47, 256)
    bias = (rng.standard_normal(256) * 0.05).astype(np.float32)
    values = frame.empty((47, 8), dtype)
    indices = frame.index(np.zeros((47, 8)), "i32")
    bias_t = frame.array(bias, dtype)
    result = ignis.fused_topk_deepseek(x, bias_t, 8, 4, 8, 2.5, values, indices, launch_with_pdl=True)
    assert result is None
    check(xr, as_numpy(indices), frame.numpy(values), RM.DeepSeekV3, 8, frame.numpy(bias_t), 8, 4, 2.5,
          weights_dtype=dtype)
    ignis.fused_topk_deepseek(x, bias_t, 8, 4, 8, 2.5, values, indices, False, None, backend="cake")


@pytest.mark.parametrize("frame,dtype", FRAME_DTYPES, ids=FRAME_DTYPE_IDS)
@pytest.mark.parametrize("renormalize", [False, True])
def test_topk_softmax(frame, dtype, renormalize):
    """vLLM's fused_topk / SGLang's topk_softmax: softmax, top-k, optionally renormalized (Qwen3: E128 top-8)."""
    x, xr = frame_logits(frame, dtype, 40, 128)
    weights, ids = ignis.topk_softmax(x, 8, renormalize)
    p = np.exp(xr - xr.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    want = np.argsort(-xr, axis=1, kind="stable")[:, :8]
    np.testing.assert_array_equal(as_numpy(ids), want)
    expected = np.take_along_axis(p, want, 1)
    if renormalize:
        expected /= expected.sum(1, keepdims=True)
    np.testing.assert_allclose(as_numpy(weights), expected, rtol=1e-5, atol=1e-8)


def test_routing_method_type_is_flashinfers():
    assert [(m.name, int(m)) for m in RM] == [
        ("Default", 0), ("Renormalize", 1), ("DeepSeekV3", 2), ("Llama4", 3), ("RenormalizeNaive", 4), ("TopK", 5),
        ("SigmoidRenorm", 6), ("MiniMax2", 7), ("Sigmoid", 8), ("TopKSigmoid", 9), ("Unspecified", 10)]
    assert repr(RM.DeepSeekV3) == "RoutingMethodType.DeepSeekV3"
    assert ignis.fused_moe_routing.RoutingMethodType is RM


def test_caller_outputs_and_strided_logits():
    """Rows of a wider buffer, outputs with a row stride, bf16 weights: all written where the views say."""
    x = logits(9, 64).astype(np.float32)
    base = np.zeros((9, 70), np.float32)
    base[:, 3:67] = x
    ids_base = np.full((9, 10), -7, np.int32)
    w_base = np.full((9, 10), -7, np.float32)
    got_ids, got_w = ignis.moe_route(base[:, 3:67], 6, RM.SigmoidRenorm, topk_ids=ids_base[:, 2:8],
                                     topk_weights=w_base[:, 2:8])
    assert got_ids is not None and np.all(ids_base[:, :2] == -7) and np.all(w_base[:, 8:] == -7)
    check(x.astype(np.float64), ids_base[:, 2:8], w_base[:, 2:8], RM.SigmoidRenorm, 6)
    ids0, w0 = ignis.moe_route(x, 6, RM.SigmoidRenorm)
    np.testing.assert_array_equal(ids_base[:, 2:8], ids0)
    np.testing.assert_array_equal(w_base[:, 2:8], w0)


def test_ties_take_the_lower_index():
    x = np.full((3, 16), 0.5, np.float32)
    ids, weights = ignis.moe_route(x, 4, RM.Renormalize)
    np.testing.assert_array_equal(ids, np.tile(np.arange(4), (3, 1)))
    np.testing.assert_allclose(weights, 0.25)
    ids, _ = ignis.moe_route(x, 4, RM.DeepSeekV3, None, 4, 2)
    np.testing.assert_array_equal(ids, np.tile(np.arange(4), (3, 1)))


def test_zero_tokens():
    ids, weights = ignis.moe_route(np.zeros((0, 256), np.float32), 8, RM.DeepSeekV3, None, 8, 4)
    assert ids.shape == weights.shape == (0, 8)


# ---- CUDA ---------------------------------------------------------------------------------------------
needs_cuda = pytest.mark.skipif(not any(f.name == "torch-cuda" for f in FRAMES),
                                reason="needs PyTorch on a GPU and ignis' CUDA backend")


@needs_cuda
@pytest.mark.parametrize("method", METHODS, ids=[m.name for m in METHODS])
def test_cuda_equals_cpu_bit_for_bit(method):
    x = torch.from_numpy(logits(300, 256, ties=True).astype(np.float32)).to(torch.bfloat16)
    k = 1 if method == RM.Llama4 else 8
    bias = torch.randn(256) * 0.1 if biased(method) else None
    groups = (8, 4) if method == RM.DeepSeekV3 else (0, 0)
    cpu = ignis.moe_route(x, k, method, bias, *groups, 2.5)
    gpu = ignis.moe_route(x.cuda(), k, method, None if bias is None else bias.cuda(), *groups, 2.5)
    assert torch.equal(cpu[0], gpu[0].cpu())
    assert torch.equal(cpu[1], gpu[1].cpu())


@needs_cuda
def test_cuda_graph_replay():
    """DeepSeek-V3 routing captured in a CUDA graph, replayed on new logits written into the same buffer."""
    x = torch.randn(4096, 256, device="cuda")
    bias = torch.randn(256, device="cuda") * 0.05
    values = torch.empty(4096, 8, device="cuda")
    indices = torch.empty(4096, 8, dtype=torch.int32, device="cuda")
    graph, _ = capture(lambda: ignis.fused_topk_deepseek(x, bias, 8, 4, 8, 2.5, values, indices))
    x.copy_(torch.randn(4096, 256, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    want_ids, want_w = ignis.moe_route(x.cpu(), 8, RM.DeepSeekV3, bias.cpu(), 8, 4, 2.5)
    assert torch.equal(indices.cpu(), want_ids)
    assert torch.equal(values.cpu(), want_w)


# ---- errors -------------------------------------------------------------------------------------------
def test_errors_name_the_parameter():
    x = np.zeros((3, 16), np.float32)
    with pytest.raises(ignis.InvalidArgumentError, match="top_k=17"):
        ignis.moe_route(x, 17)
    with pytest.raises(ignis.InvalidArgumentError, match="config.method=10"):
        ignis.moe_route(x, 2, RM.Unspecified)
    with pytest.raises(ignis.InvalidArgumentError, match="bias is given"):
        ignis.moe_route(x, 2, RM.Default, np.zeros(16, np.float32))
    with pytest.raises(ignis.InvalidArgumentError, match="n_group=3 does not divide"):
        ignis.moe_route(x, 2, RM.DeepSeekV3, None, 3, 1)
    with pytest.raises(ignis.InvalidArgumentError, match="topk_group=5"):
        ignis.moe_route(x, 2, RM.DeepSeekV3, None, 4, 5)
    with pytest.raises(ignis.InvalidArgumentError, match="top_k=2 but IGNIS_MOE_ROUTING_LLAMA4"):
        ignis.moe_route(x, 2, RM.Llama4)
    with pytest.raises(ignis.UnsupportedError, match="logits.shape.1.=1024"):
        ignis.moe_route(np.zeros((1, 1024), np.float32), 8)
    with pytest.raises(ignis.DtypeError, match="topk_ids.dtype"):
        ignis.moe_route(x, 2, topk_ids=np.zeros((3, 2), np.int64))
    with pytest.raises(ignis.ArgumentTypeError, match="routing_method_type"):
        ignis.moe_route(x, 2, "DeepSeekV3")
    out = np.zeros((3, 2), np.float32), np.zeros((3, 2), np.int32)
    with pytest.raises(ignis.UnsupportedError, match="routing_replay_out"):
        ignis.fused_topk_deepseek(x, None, 4, 2, 2, 1.0, *out, routing_replay_out=np.zeros((3, 2), np.int16))
    with pytest.raises(ignis.InvalidArgumentError, match="backend"):
        ignis.fused_topk_deepseek(x, None, 4, 2, 2, 1.0, *out, backend="triton")
