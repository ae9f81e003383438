"""Fused MoE (ignis.fused_moe: cutlass_fused_moe, the trtllm_*_routed_moe forms, ignis' fused_moe)
against a float64 NumPy reference that loops over tokens and slots, rounding where the pipeline
stores (include/ignis/moe.h: h, a and y in the work dtype; fp8 a; the 1x128 quantization).

- NumPy (the CPU backend, always): float16 experts with every argument mapping FlashInfer defines
  (the [up; gate] fc1 order and the layout helpers, EP ranks and their offset, the fc2 bias on TP
  rank 0 only, swiglu_alpha / beta / limit, non-gated activations, token_final_scales None), fp8
  (ml_dtypes) per-tensor with FlashInfer's quant_scales and TRT-LLM's output scales, DeepSeek fp8
  block scales with a 16-bit input quantized inside and an fp8 input with TRT-LLM's [H/128, T]
  scales, packed routing, the workspace size query and a too-small workspace, the refusals (each
  names its argument), and FlashInfer's signatures.
- PyTorch on CUDA when present: bf16 and fp8 block-scaled MoE against the same reference, and a
  CUDA-graph capture replayed with another routing in which fewer tokens are live (the rest routed
  to -1), so the per-expert counts and the token count differ from the capture.
- The forms with routing inside run only when ignis' routing op (ignis.fused_moe_routing) is built.
"""

import importlib.util
import inspect

import numpy as np
import pytest

import ignis
from ignis import fused_moe as fm
from refs import ml_dtypes, torch

rng = np.random.default_rng(19)
CUDA = torch is not None and torch.cuda.is_available() and ignis.cuda_device_count() > 0
cuda_only = pytest.mark.skipif(not CUDA, reason="needs PyTorch with CUDA")
needs_ml_dtypes = pytest.mark.skipif(ml_dtypes is None, reason="needs ml_dtypes")
E4M3 = ml_dtypes.float8_e4m3fn if ml_dtypes is not None else None
A = fm.ActivationType


# ---- the reference ---------------------------------------------------------------------------------
def f16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float64)


def bf16(x):
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def fp8(x):
    return np.asarray(x, dtype=np.float32).astype(E4M3).astype(np.float64)


def quantize_groups(v):
    """The library's 1x128 rule on a vector: (q, scale per group) with scale absmax / 448 (1 for 0)."""
    v = np.asarray(v, dtype=np.float32)
    q, scales = np.empty(v.shape), []
    for g in range(0, v.shape[0], 128):
        absmax = np.float32(np.abs(v[g:g + 128]).max())
        s = np.float32(absmax / np.float32(448.0)) if absmax > 0 else np.float32(1.0)
        q[g:g + 128] = fp8(v[g:g + 128] * (np.float32(1.0) / s))
        scales.append(float(s))
    return q, np.array(scales)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def act(code, g, u=None, alpha=1.0, beta=0.0, limit=np.inf):
    from math import erf, sqrt
    gelu = np.vectorize(lambda v: 0.5 * v * (1.0 + erf(v / sqrt(2.0))))
    if code in (A.Swiglu, A.SwigluBias):
        gc, uc = np.minimum(g, limit), np.clip(u, -limit, limit)
        return gc * sigmoid(alpha * gc) * (uc + beta)
    if code == A.SwigluStep:
        return np.minimum(g * sigmoid(g), limit) * np.clip(u, -limit, limit)
    if code == A.Geglu:
        return gelu(g) * u
    if code == A.GegluTanh:
        return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3))) * u
    return {A.Gelu: lambda: gelu(g), A.Relu: lambda: np.maximum(g, 0.0), A.Silu: lambda: g * sigmoid(g),
            A.Relu2: lambda: np.maximum(g, 0.0) ** 2, A.Identity: lambda: g}[code]()


def moe_ref(x, ids, weights, fc1, fc2, *, offset=0, activation=A.Swiglu, gate_first=False, fc1_bias=None,
            fc2_bias=None, alpha=None, beta=None, limit=None, quant="none", work=f16, fc1_scale=None,
            fc2_scale=None, gate_scale=None, fc2_q=None, input_scale=None, out=None):
    """float64 MoE of moe.h: x [T, H] (values as stored), ids / weights [T, k], fc1 [E, N1, H],
    fc2 [E, H, I] (values as stored); scales per quant mode; ``work`` rounds the intermediates."""
    x, fc1, fc2 = (np.asarray(a, dtype=np.float64) for a in (x, fc1, fc2))
    tokens, hidden = x.shape
    experts, inter = fc1.shape[0], fc2.shape[2]
    gated = A(activation).is_gated
    result = np.zeros((tokens, hidden)) if out is None else np.array(out, dtype=np.float64)
    for t in range(tokens):
        for j in range(ids.shape[1]):
            e = int(ids[t, j]) - offset
            if not 0 <= e < experts:
                continue
            row, w1, w2 = x[t].copy(), fc1[e].copy(), fc2[e].copy()
            if quant == "fp8_block":
                if input_scale is None:
                    q, s = quantize_groups(row)
                else:
                    q, s = row, input_scale[t]
                row = q * np.repeat(s, 128)[:hidden]
                w1 = w1 * np.repeat(np.repeat(fc1_scale[e], 128, axis=0), 128, axis=1)[:w1.shape[0], :hidden]
                w2 = w2 * np.repeat(np.repeat(fc2_scale[e], 128, axis=0), 128, axis=1)[:hidden, :inter]
            h = work(w1 @ row)
            dq = fc1_scale[e] if quant == "fp8_per_tensor" else 1.0
            if gated:
                g, u = (h[:inter], h[inter:]) if gate_first else (h[inter:], h[:inter])
                gq = gate_scale[e] if gate_scale is not None else dq
                g, u = g * gq, u * dq
                if fc1_bias is not None:
                    b = np.asarray(fc1_bias[e], dtype=np.float64)
                    bg, bu = (b[:inter], b[inter:]) if gate_first else (b[inter:], b[:inter])
                    g, u = g + bg, u + bu
                kwargs = {}
                if alpha is not None:
                    kwargs.update(alpha=float(alpha[e]), beta=float(beta[e]))
                if limit is not None:
                    kwargs.update(limit=float(limit[e]))
                elif activation == A.SwigluStep:
                    kwargs.update(limit=7.0)
                a = act(activation, g, u, **kwargs)
            else:
                v = h * dq + (0.0 if fc1_bias is None else np.asarray(fc1_bias[e], dtype=np.float64))
                a = act(activation, v)
            if quant == "fp8_block":
                q, s = quantize_groups(a)
                a = q * np.repeat(s, 128)[:inter]
            elif quant == "fp8_per_tensor":
                qs = 1.0 if fc2_q is None else float(np.ravel(fc2_q)[e if np.size(fc2_q) > 1 else 0])
                a = fp8(np.float32(a) * np.float32(qs))
            else:
                a = work(a)
            y = work(w2 @ a) * (fc2_scale[e] if quant == "fp8_per_tensor" else 1.0)
            if fc2_bias is not None:
                y = y + np.asarray(fc2_bias[e], dtype=np.float64)
            result[t] += float(weights[t, j]) * y
    return result


def close(actual, expected, rtol):
    actual = np.asarray(actual, dtype=np.float64)
    scale = np.abs(expected).max() + 1e-30
    err = np.abs(actual - expected).max() / scale
    assert err <= rtol, f"max error {err:.3g} of the largest |ref| > {rtol}"


def routing(tokens, k, experts, offset=0, global_experts=None):
    global_experts = global_experts or experts
    ids = np.stack([rng.permutation(global_experts)[:k] for _ in range(tokens)]).astype(np.int32)
    weights = rng.uniform(0.1, 1.0, (tokens, k)).astype(np.float32)
    return ids, weights


def experts16(experts, hidden, inter, gated=True):
    fc1 = (rng.standard_normal((experts, (2 if gated else 1) * inter, hidden)) / np.sqrt(hidden)).astype(np.float16)
    fc2 = (rng.standard_normal((experts, hidden, inter)) / np.sqrt(inter)).astype(np.float16)
    return fc1, fc2


# ---- NumPy, the CPU backend ------------------------------------------------------------------------
@pytest.mark.parametrize("activation", [a for a in A if a <= A.Identity])
def test_activations(activation):
    tokens, k, experts, hidden, inter = 9, 2, 4, 32, 16
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    ids, w = routing(tokens, k, experts)
    fc1, fc2 = experts16(experts, hidden, inter, gated=activation.is_gated)
    out = fm.fused_moe(x, ids, w, fc1, fc2, activation=activation)
    close(out, moe_ref(x, ids, w, fc1, fc2, activation=activation), 4e-3)


def test_gate_first_and_layout_helpers():
    tokens, k, experts, hidden, inter = 11, 3, 6, 48, 24
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    ids, w = routing(tokens, k, experts)
    gate, up = experts16(experts, hidden, inter, gated=False)[0], experts16(experts, hidden, inter, gated=False)[0]
    fc2 = experts16(experts, hidden, inter)[1]
    w13 = np.concatenate([gate, up], axis=1)
    expected = moe_ref(x, ids, w, w13, fc2, gate_first=True)
    close(fm.fused_moe(x, ids, w, w13, fc2, gate_first=True), expected, 4e-3)
    close(fm.fused_moe(x, ids, w, fm.fc1_from_w13(w13), fc2), expected, 4e-3)
    close(fm.fused_moe(x, ids, w, fm.fc1_from_gate_up(gate, up), fc2), expected, 4e-3)


def test_accumulate():
    tokens, k, experts, hidden, inter = 7, 2, 4, 32, 16
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    ids, w = routing(tokens, k, experts)
    fc1, fc2 = experts16(experts, hidden, inter)
    old = rng.standard_normal((tokens, hidden)).astype(np.float32)
    out = old.copy()
    fm.fused_moe(x, ids, w, fc1, fc2, out=out, accumulate=True)
    close(out, moe_ref(x, ids, w, fc1, fc2, out=old), 4e-3)


@pytest.mark.parametrize("ep_rank,tp_rank", [(0, 0), (1, 1), (3, 0)])
def test_cutlass_ep_tp_biases_and_swiglu_args(ep_rank, tp_rank):
    tokens, k, local, ep_size, hidden, inter = 13, 4, 4, 4, 64, 32
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    ids, w = routing(tokens, k, local, global_experts=local * ep_size)
    fc1, fc2 = experts16(local, hidden, inter)
    b1 = (0.3 * rng.standard_normal((local, 2 * inter))).astype(np.float16)
    b2 = (0.3 * rng.standard_normal((local, hidden))).astype(np.float32)
    alpha = np.linspace(1.5, 1.8, local).astype(np.float32)
    beta = np.linspace(0.5, 1.0, local).astype(np.float32)
    limit = np.linspace(0.7, 1.2, local).astype(np.float32)
    out = fm.cutlass_fused_moe(x, ids, w, fc1, fc2, np.float16, None, fc1_expert_biases=b1, fc2_expert_biases=b2,
                               swiglu_alpha=alpha, swiglu_beta=beta, swiglu_limit=limit, tp_size=2, tp_rank=tp_rank,
                               ep_size=ep_size, ep_rank=ep_rank)[0]
    expected = moe_ref(x, ids, w, fc1, fc2, offset=ep_rank * local, fc1_bias=b1,
                       fc2_bias=b2 if tp_rank == 0 else None, alpha=alpha, beta=beta, limit=limit)
    close(out, expected, 4e-3)


def test_cutlass_without_scales_and_a_workspace():
    tokens, k, experts, hidden, inter = 5, 2, 8, 32, 16
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    ids, _ = routing(tokens, k, experts)
    fc1, fc2 = experts16(experts, hidden, inter)
    size = fm.cutlass_fused_moe_workspace_size(64, hidden, inter, experts, k, x_dtype="float16",
                                               weight_dtype="float16", output_dtype="float16")
    assert size > 0
    workspace = np.empty(size, dtype=np.uint8)
    output = np.empty((tokens, hidden), dtype=np.float16)
    result = fm.cutlass_fused_moe(x, ids, None, fc1, fc2, np.float16, [], output=output, workspace_buffer=workspace)
    assert result[0] is output and len(result) == 4
    close(output, moe_ref(x, ids, np.ones(ids.shape), fc1, fc2), 4e-3)
    small = fm.cutlass_fused_moe_workspace_size(2, hidden, inter, experts, k, x_dtype="float16",
                                                weight_dtype="float16", output_dtype="float16")
    with pytest.raises(ignis.InsufficientWorkspaceError, match="workspace"):
        fm.cutlass_fused_moe(x, ids, None, fc1, fc2, np.float16, [], output=output,
                             workspace_buffer=np.empty(small, dtype=np.uint8))


def fp8_experts(experts, hidden, inter):
    fc1 = (2.0 * rng.standard_normal((experts, 2 * inter, hidden))).astype(E4M3)
    fc2 = (2.0 * rng.standard_normal((experts, hidden, inter))).astype(E4M3)
    return fc1, fc2


@needs_ml_dtypes
@pytest.mark.parametrize("per_expert_q", [False, True])
def test_cutlass_fp8_per_tensor(per_expert_q):
    tokens, k, experts, hidden, inter = 12, 2, 4, 64, 32
    x = (2.0 * rng.standard_normal((tokens, hidden))).astype(E4M3)
    ids, w = routing(tokens, k, experts)
    fc1, fc2 = fp8_experts(experts, hidden, inter)
    dq1 = (rng.uniform(0.5, 1.5, experts) / (4 * np.sqrt(hidden))).astype(np.float32)
    dq2 = (rng.uniform(0.5, 1.5, experts) / (32 * np.sqrt(inter))).astype(np.float32)
    q2 = rng.uniform(8, 24, experts if per_expert_q else ()).astype(np.float32)
    q2 = np.asarray(q2, dtype=np.float32)
    out = fm.cutlass_fused_moe(x, ids, w, fc1, fc2, np.float16, [dq1, q2, dq2, np.array(1.0, np.float32)])[0]
    expected = moe_ref(x, ids, w, fc1, fc2, quant="fp8_per_tensor", fc1_scale=dq1, fc2_scale=dq2, fc2_q=q2)
    close(out, expected, 1e-2)


@needs_ml_dtypes
def test_trtllm_fp8_per_tensor_routed():
    tokens, k, experts, hidden, inter = 10, 2, 4, 64, 32
    x = (2.0 * rng.standard_normal((tokens, hidden))).astype(E4M3)
    ids, w = routing(tokens, k, experts)
    fc1, fc2 = fp8_experts(experts, hidden, inter)
    up = (rng.uniform(0.5, 1.5, experts) / (np.sqrt(hidden))).astype(np.float32)
    gate = (rng.uniform(0.5, 1.5, experts) / (4 * np.sqrt(hidden))).astype(np.float32)
    dq2 = (rng.uniform(0.5, 1.5, experts) / (32 * np.sqrt(inter))).astype(np.float32)
    out = np.empty((tokens, hidden), dtype=np.float16)
    fm.trtllm_fp8_per_tensor_scale_routed_moe((ids, w), None, x, fc1, up, gate, fc2, dq2, experts, k, None, None,
                                              inter, 0, experts, None, False, output=out)
    expected = moe_ref(x, ids, w, fc1, fc2, quant="fp8_per_tensor", fc1_scale=up, gate_scale=gate, fc2_scale=dq2)
    close(out, expected, 1e-2)


def block_scales(experts, rows, cols):
    scales = rng.uniform(0.5, 1.5, (experts, -(-rows // 128), -(-cols // 128))) / (2 * np.sqrt(cols))
    return scales.astype(np.float32)


@needs_ml_dtypes
def test_cutlass_deepseek_block_scales():
    tokens, k, experts, hidden, inter = 6, 4, 8, 256, 160
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    ids, w = routing(tokens, k, experts)
    fc1, fc2 = fp8_experts(experts, hidden, inter)
    s1, s2 = block_scales(experts, 2 * inter, hidden), block_scales(experts, hidden, inter)
    out = fm.cutlass_fused_moe(x, ids, w, fc1, fc2, np.float16, [s1, s2], use_deepseek_fp8_block_scale=True)[0]
    close(out, moe_ref(x, ids, w, fc1, fc2, quant="fp8_block", fc1_scale=s1, fc2_scale=s2), 1e-2)


@needs_ml_dtypes
def test_trtllm_fp8_block_routed_fp8_input_packed():
    tokens, k, experts, hidden, inter = 5, 2, 4, 256, 128
    x = (2.0 * rng.standard_normal((tokens, hidden))).astype(E4M3)
    x_scale = rng.uniform(0.05, 0.2, (hidden // 128, tokens)).astype(np.float32)  # TRT-LLM's [H/128, T]
    ids, w = routing(tokens, k, experts)
    w_bf16 = w.astype(ml_dtypes.bfloat16)
    packed = (ids.astype(np.int64) << 16 | w_bf16.view(np.uint16).astype(np.int64)).astype(np.int32)
    fc1, fc2 = fp8_experts(experts, hidden, inter)
    s1, s2 = block_scales(experts, 2 * inter, hidden), block_scales(experts, hidden, inter)
    out = np.empty((tokens, hidden), dtype=np.float16)
    fm.trtllm_fp8_block_scale_routed_moe(packed, None, x, x_scale, fc1, s1, fc2, s2, experts, k, None, None, inter, 0,
                                         experts, None, output=out)
    expected = moe_ref(x, ids, w_bf16.astype(np.float64), fc1, fc2, quant="fp8_block", fc1_scale=s1, fc2_scale=s2,
                       input_scale=x_scale.T)
    close(out, expected, 1e-2)


def test_trtllm_bf16_routed_layouts():
    tokens, k, experts, hidden, inter = 6, 2, 8, 32, 16
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    ids, w = routing(tokens, 2, 4, global_experts=8)
    fc1, fc2 = experts16(4, hidden, inter)
    args = ((ids, w), x, fc1, fc2, experts, k, None, None, inter, 4, 4)
    with pytest.raises(ignis.UnsupportedError, match="use_shuffled_weight"):
        fm.trtllm_bf16_routed_moe(*args)
    with pytest.raises(ignis.UnsupportedError, match="weight_layout"):
        fm.trtllm_bf16_routed_moe(*args, use_shuffled_weight=False)
    out = fm.trtllm_bf16_routed_moe(*args, use_shuffled_weight=False, weight_layout=fm.WeightLayout.MajorK)
    close(out, moe_ref(x, ids, w, fc1, fc2, offset=4), 4e-3)
    with pytest.raises(ignis.UnsupportedError, match="do_finalize"):
        fm.trtllm_bf16_routed_moe(*args, use_shuffled_weight=False, weight_layout=0, do_finalize=False)
    with pytest.raises(ignis.InvalidArgumentError, match="top_k"):
        fm.trtllm_bf16_routed_moe(((ids, w)), x, fc1, fc2, experts, 3, None, None, inter, 4, 4,
                                  use_shuffled_weight=False, weight_layout=0)


@pytest.mark.parametrize("kwargs,name", [
    ({"min_latency_mode": True}, "min_latency_mode"),
    ({"enable_alltoall": True}, "enable_alltoall"),
    ({"cluster_size": 2}, "cluster_size"),
    ({"use_w4_group_scaling": True}, "use_w4_group_scaling"),
    ({"activation_type": A.Situ}, "Situ"),
    ({"activation_type": A.ClampedRelu2}, "ClampedRelu2"),
    ({"profile_ids": [0, 0]}, "profile_ids"),
    ({"backend": "cake"}, "cake"),
])
def test_cutlass_refusals(kwargs, name):
    x = rng.standard_normal((3, 32)).astype(np.float16)
    ids, w = routing(3, 2, 4)
    fc1, fc2 = experts16(4, 32, 16)
    with pytest.raises(ignis.UnsupportedError, match=name):
        fm.cutlass_fused_moe(x, ids, w, fc1, fc2, np.float16, None, **kwargs)


def test_cutlass_refuses_input_sf_and_bad_ranks():
    x = rng.standard_normal((3, 32)).astype(np.float16)
    ids, w = routing(3, 2, 4)
    fc1, fc2 = experts16(4, 32, 16)
    with pytest.raises(ignis.UnsupportedError, match="input_sf"):
        fm.cutlass_fused_moe(x, ids, w, fc1, fc2, np.float16, None, input_sf=np.ones((3, 1), np.float32))
    with pytest.raises(ignis.InvalidArgumentError, match="ep_rank"):
        fm.cutlass_fused_moe(x, ids, w, fc1, fc2, np.float16, None, ep_size=2, ep_rank=2)
    with pytest.raises(ignis.InvalidArgumentError, match="topk_weights"):
        fm.cutlass_fused_moe(x, ids, w[:, :1], fc1, fc2, np.float16, None)


# FlashInfer 0.7.2.post1's parameters, in order (flashinfer/fused_moe/core.py).
FLASHINFER_PARAMETERS = {
    "cutlass_fused_moe": [
        "input", "token_selected_experts", "token_final_scales", "fc1_expert_weights", "fc2_expert_weights",
        "output_dtype", "quant_scales", "fc1_expert_biases", "fc2_expert_biases", "input_sf", "swiglu_alpha",
        "swiglu_beta", "swiglu_limit", "tp_size", "tp_rank", "ep_size", "ep_rank", "cluster_size", "cluster_rank",
        "output", "enable_alltoall", "use_deepseek_fp8_block_scale", "use_w4_group_scaling", "use_mxfp8_act_scaling",
        "min_latency_mode", "use_packed_weights", "use_wfp4afp8_humming", "tune_max_num_tokens", "enable_pdl",
        "activation_type", "swizzled_input_sf", "use_fused_finalize", "profile_ids", "workspace_buffer",
        "clamped_relu2_limit", "situ_beta", "situ_linear_beta", "backend"],
    "trtllm_bf16_routed_moe": [
        "topk_ids", "hidden_states", "gemm1_weights", "gemm2_weights", "num_experts", "top_k", "n_group",
        "topk_group", "intermediate_size", "local_expert_offset", "local_num_experts", "routed_scaling_factor",
        "routing_method_type", "use_shuffled_weight", "weight_layout", "do_finalize", "enable_pdl",
        "gemm1_lora_delta", "tune_max_num_tokens", "activation_type", "routing_replay_out", "gemm1_alpha",
        "gemm1_beta", "gemm1_clamp_limit", "output"],
    "trtllm_fp8_per_tensor_scale_routed_moe": [
        "topk_ids", "routing_bias", "hidden_states", "gemm1_weights", "output1_scales_scalar",
        "output1_scales_gate_scalar", "gemm2_weights", "output2_scales_scalar", "num_experts", "top_k", "n_group",
        "topk_group", "intermediate_size", "local_expert_offset", "local_num_experts", "routed_scaling_factor",
        "use_routing_scales_on_input", "routing_method_type", "do_finalize", "enable_pdl", "tune_max_num_tokens",
        "activation_type", "routing_replay_out", "output", "gemm1_clamp_limit"],
    "trtllm_fp8_block_scale_routed_moe": [
        "topk_ids", "routing_bias", "hidden_states", "hidden_states_scale", "gemm1_weights", "gemm1_weights_scale",
        "gemm2_weights", "gemm2_weights_scale", "num_experts", "top_k", "n_group", "topk_group",
        "intermediate_size", "local_expert_offset", "local_num_experts", "routed_scaling_factor",
        "routing_method_type", "use_shuffled_weight", "weight_layout", "do_finalize", "enable_pdl",
        "gemm1_lora_delta", "output", "tune_max_num_tokens", "fp8_quantization_type", "activation_type",
        "gemm1_alpha", "gemm1_beta", "gemm1_clamp_limit", "valid_hidden_size", "valid_intermediate_size"],
    "cutlass_fused_moe_workspace_size": [
        "max_num_tokens", "hidden_size", "intermediate_size", "num_experts_total", "top_k", "x_dtype",
        "weight_dtype", "output_dtype", "activation_type", "tp_size", "tp_rank", "ep_size", "ep_rank",
        "min_latency_mode", "use_deepseek_fp8_block_scale", "use_w4_group_scaling", "use_mxfp8_act_scaling",
        "use_fused_finalize", "use_packed_weights", "use_wfp4afp8_humming", "device", "backend"],
}


@pytest.mark.parametrize("name", sorted(FLASHINFER_PARAMETERS))
def test_flashinfer_signatures(name):
    names = [p for p in inspect.signature(getattr(fm, name)).parameters if p != "stream"]
    assert names == FLASHINFER_PARAMETERS[name]


def test_activation_type_values():
    assert [(a.name, int(a)) for a in A] == [
        ("Gelu", 0), ("Relu", 1), ("Silu", 2), ("Swiglu", 3), ("Geglu", 4), ("SwigluBias", 5), ("Relu2", 6),
        ("SwigluStep", 7), ("GegluTanh", 8), ("Identity", 9), ("Situ", 10), ("InvalidType", 11),
        ("ClampedRelu2", 12)]


@pytest.mark.skipif(importlib.util.find_spec("ignis.fused_moe_routing") is None,
                    reason="ignis' routing op (ignis.fused_moe_routing) is not built in this tree")
def test_routing_inside_matches_routed_form():
    from ignis.fused_moe_routing import moe_route

    tokens, k, experts, hidden, inter = 9, 2, 8, 32, 16
    logits = rng.standard_normal((tokens, experts)).astype(np.float32)
    x = rng.standard_normal((tokens, hidden)).astype(np.float16)
    fc1, fc2 = experts16(experts, hidden, inter)
    ids, w = moe_route(logits, k, int(fm.RoutingMethodType.Renormalize))
    out = fm.trtllm_bf16_moe(logits, None, x, fc1, fc2, experts, k, None, None, inter, 0, experts,
                             routing_method_type=int(fm.RoutingMethodType.Renormalize), use_shuffled_weight=False,
                             weight_layout=0)
    close(out, moe_ref(x, np.asarray(ids), np.asarray(w), fc1, fc2), 4e-3)


# ---- PyTorch on CUDA --------------------------------------------------------------------------------
def host(t):
    return t.detach().float().cpu().numpy().astype(np.float64)


@cuda_only
@pytest.mark.parametrize("tokens", [1, 64, 700])
def test_cuda_bf16(tokens):
    k, experts, hidden, inter = 8, 32, 256, 128
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    ids = torch.stack([torch.randperm(experts, device="cuda")[:k] for _ in range(tokens)]).int()
    w = torch.rand(tokens, k, device="cuda") + 0.1
    fc1 = (torch.randn(experts, 2 * inter, hidden, device="cuda") / hidden ** 0.5).bfloat16()
    fc2 = (torch.randn(experts, hidden, inter, device="cuda") / inter ** 0.5).bfloat16()
    out = fm.cutlass_fused_moe(x, ids, w, fc1, fc2, torch.bfloat16, None)[0]
    expected = moe_ref(host(x), host(ids), host(w), host(fc1), host(fc2), work=bf16)
    close(host(out), expected, 2e-2)


@cuda_only
def test_cuda_fp8_block():
    tokens, k, experts, hidden, inter = 33, 4, 16, 512, 256
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    ids = torch.stack([torch.randperm(experts, device="cuda")[:k] for _ in range(tokens)]).int()
    w = torch.rand(tokens, k, device="cuda") + 0.1
    fc1 = (2 * torch.randn(experts, 2 * inter, hidden, device="cuda")).to(torch.float8_e4m3fn)
    fc2 = (2 * torch.randn(experts, hidden, inter, device="cuda")).to(torch.float8_e4m3fn)
    s1 = torch.from_numpy(block_scales(experts, 2 * inter, hidden)).cuda()
    s2 = torch.from_numpy(block_scales(experts, hidden, inter)).cuda()
    out = fm.cutlass_fused_moe(x, ids, w, fc1, fc2, torch.bfloat16, [s1, s2], use_deepseek_fp8_block_scale=True)[0]
    expected = moe_ref(host(x), host(ids), host(w), host(fc1), host(fc2), quant="fp8_block", fc1_scale=host(s1),
                       fc2_scale=host(s2), work=bf16)
    close(host(out), expected, 3e-2)


@cuda_only
def test_cuda_graph_replay_with_other_routing():
    """Capture at 16 tokens, replay with 5 live tokens (the rest routed to -1) and new experts."""
    tokens, k, experts, hidden, inter = 16, 4, 8, 128, 64
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    fc1 = (torch.randn(experts, 2 * inter, hidden, device="cuda") / hidden ** 0.5).bfloat16()
    fc2 = (torch.randn(experts, hidden, inter, device="cuda") / inter ** 0.5).bfloat16()
    ids = torch.zeros(tokens, k, device="cuda", dtype=torch.int32)
    ids[:] = torch.arange(k, device="cuda", dtype=torch.int32)  # capture: every token on experts 0..k-1
    w = torch.rand(tokens, k, device="cuda") + 0.1
    out = torch.empty(tokens, hidden, device="cuda", dtype=torch.bfloat16)
    size = fm.cutlass_fused_moe_workspace_size(tokens, hidden, inter, experts, k, x_dtype=torch.bfloat16,
                                               weight_dtype=torch.bfloat16)
    workspace = torch.empty(size, device="cuda", dtype=torch.uint8)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fm.cutlass_fused_moe(x, ids, w, fc1, fc2, torch.bfloat16, None, output=out, workspace_buffer=workspace)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fm.cutlass_fused_moe(x, ids, w, fc1, fc2, torch.bfloat16, None, output=out, workspace_buffer=workspace)
    live = 5
    new_ids = torch.full((tokens, k), -1, device="cuda", dtype=torch.int32)
    new_ids[:live] = torch.stack([torch.randperm(experts, device="cuda")[:k] for _ in range(live)]).int()
    ids.copy_(new_ids)
    x.copy_(torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    expected = moe_ref(host(x), host(ids), host(w), host(fc1), host(fc2), work=bf16)
    close(host(out), expected, 2e-2)
    assert torch.count_nonzero(out[live:]) == 0
