"""Fused MoE with FlashInfer's names and arguments (flashinfer.fused_moe), on ignis' fused MoE op
(include/ignis/moe.h: ignis_fused_moe): the expert computation given a top-k routing.

The math, for token t and slot j routed to global expert g (local expert e = g - the rank's first
local expert; slots routed elsewhere contribute nothing):
``out[t] = sum_j w[t, j] * (act(input[t] @ fc1[e].T + fc1_bias[e]) @ fc2[e].T + fc2_bias[e])``, in a
fixed slot order, with no atomics: the same bits on every call. fc1 is ``[E, 2I, H]`` for the gated
activations, its rows ``[up; gate]`` (FlashInfer's "w3_w1" order: vLLM swaps its ``w13`` checkpoint
stacking into it); :func:`fc1_from_gate_up` and :func:`fc1_from_w13` build it, or pass
``gate_first=True`` to :func:`fused_moe` for ``[gate; up]``. fc2 is ``[E, H, I]``.

Entry points:

- :func:`cutlass_fused_moe` / :func:`cutlass_fused_moe_workspace_size`: FlashInfer's CUTLASS MoE, with
  bf16/f16 weights, fp8 e4m3 per-tensor (``quant_scales`` = [fc1 dequant [E], fc2 input quant scale
  (a multiplier, [] or [E]), fc2 dequant [E], fc1 input dequant []]; the last feeds only FlashInfer's
  LoRA path and is checked, not used) and DeepSeek fp8 block scales (``use_deepseek_fp8_block_scale``:
  ``quant_scales`` = [fc1 128x128 scales, fc2 128x128 scales], the 16-bit input quantized 1x128
  here); expert parallelism (``ep_size`` / ``ep_rank``: the local experts are ``ep_rank * E ..``) and
  tensor parallelism (the weights given are the rank's shard; the fc2 bias is added on ``tp_rank``
  0 only). It returns FlashInfer's list ``[output, num_active_experts_per_node,
  experts_to_token_score, active_expert_global_ids]``, the last three left empty as FlashInfer
  leaves them outside its min-latency mode.
- :func:`trtllm_bf16_routed_moe`, :func:`trtllm_fp8_per_tensor_scale_routed_moe`,
  :func:`trtllm_fp8_block_scale_routed_moe`: FlashInfer's TRT-LLM entry points with precomputed
  routing, ``topk_ids`` either FlashInfer's packed int32 (expert id in the high 16 bits, the bf16
  weight's bits in the low 16) or a ``(topk_ids, topk_weights)`` pair. FlashInfer serves them on
  Blackwell only; ignis on any GPU its grouped GEMM takes (and on the host). Their weights must be
  in the plain ``WeightLayout.MajorK`` layout, unshuffled (``use_shuffled_weight=False``): the
  shuffled and ``BlockMajorK`` layouts of FlashInfer's Blackwell kernels are refused, naming the
  argument. The routing arguments (``routing_bias``, ``n_group``, ``topk_group``,
  ``routed_scaling_factor``, ``routing_method_type``) configure routing from logits, which these
  forms do not do: FlashInfer does not read them here and neither does ignis. The per-tensor form
  maps ``output1_scales_scalar`` (up half), ``output1_scales_gate_scalar`` (gate half) and
  ``output2_scales_scalar`` onto ignis' dequant scales.
- :func:`trtllm_bf16_moe`, :func:`trtllm_fp8_per_tensor_scale_moe`, :func:`trtllm_fp8_block_scale_moe`:
  the same with the routing computed first by ignis' routing op (``ignis.fused_moe_routing``).
- :func:`fused_moe` (``ignis.fused_moe.fused_moe``: ``ignis.fused_moe`` is this module) and
  :func:`fused_moe_workspace_size`: ignis' own call, argument for argument the C API's.

Arguments ignis cannot honour raise :class:`ignis.UnsupportedError` naming them (NVFP4/MXFP8/W4 modes,
min-latency mode, all-to-all, clusters, the Situ and ClampedRelu2 activations, LoRA, routing replay,
``do_finalize=False``). Scheduling hints that do not change the result are accepted:
``tune_max_num_tokens``, ``enable_pdl`` (ignis uses PDL wherever the GPU has it),
``use_fused_finalize`` (ignis' finalize is always the deterministic one), ``swizzled_input_sf``
(read only with ``input_sf``, which ignis refuses).

Workspace: ``workspace_buffer`` (any contiguous buffer of at least
:func:`cutlass_fused_moe_workspace_size` bytes, sized for the largest token count) makes a call
allocate nothing, so it can be captured in a CUDA graph and replayed with any routing; without it a
workspace is allocated per call in the input's framework, as FlashInfer does. The host never reads
the routing: no synchronization.

Arrays: PyTorch (CUDA or host), NumPy (float16, and fp8 through ml_dtypes: passed as uint8 views), or
anything with DLPack. Every op takes a keyword-only ``stream=``.
"""

import enum
import sys

from . import _ext
from ._alloc import framework_of, new_array
from ._common import _fp8_numpy_view, as_dtype, byte_workspace, dtype_code, dtype_name, nbytes_of
from ._errors import InvalidArgumentError, UnsupportedError
from .fused_moe_routing import RoutingMethodType, moe_route

__all__ = ["cutlass_fused_moe", "cutlass_fused_moe_workspace_size", "trtllm_bf16_routed_moe",
           "trtllm_fp8_per_tensor_scale_routed_moe", "trtllm_fp8_block_scale_routed_moe", "trtllm_bf16_moe",
           "trtllm_fp8_per_tensor_scale_moe", "trtllm_fp8_block_scale_moe", "fused_moe_workspace_size",
           "fc1_from_gate_up", "fc1_from_w13"]
# ignis.fused_moe.fused_moe stays out of __all__: at the package's top level the name is this module.


class ActivationType(enum.IntEnum):
    """FlashInfer's ActivationType: the values are ignis_moe_activation's. Situ, InvalidType and
    ClampedRelu2 exist for compatibility; ignis refuses them."""

    Gelu = 0
    Relu = 1
    Silu = 2
    Swiglu = 3
    Geglu = 4
    SwigluBias = 5
    Relu2 = 6
    SwigluStep = 7
    GegluTanh = 8
    Identity = 9
    Situ = 10
    InvalidType = 11
    ClampedRelu2 = 12

    def __repr__(self):
        return "%s.%s" % (type(self).__name__, self.name)

    @property
    def is_gated(self):
        """True for the activations that split GEMM 1's output into gate and up halves."""
        return self in (ActivationType.Swiglu, ActivationType.Geglu, ActivationType.SwigluBias,
                        ActivationType.SwigluStep, ActivationType.GegluTanh, ActivationType.Situ)


class WeightLayout(enum.IntEnum):
    """FlashInfer's WeightLayout: ignis takes MajorK (each expert's weight [N, K] row-major)."""

    MajorK = 0
    MajorMn = 1
    BlockMajorK = 2


class Fp8QuantizationType(enum.IntEnum):
    """FlashInfer's Fp8QuantizationType: ignis' block-scaled form is DeepSeekFp8."""

    NoneFp8 = 0
    DeepSeekFp8 = 1
    MxFp8 = 2
    PerTensorFp8 = 3
    PerChannelFp8 = 4


_QUANTS = {"none": _ext.IGNIS_MOE_QUANT_NONE, "fp8_per_tensor": _ext.IGNIS_MOE_QUANT_FP8_PER_TENSOR,
           "fp8_block": _ext.IGNIS_MOE_QUANT_FP8_BLOCK}
_SUPPORTED_ACTIVATIONS = tuple(range(10))
_OUT_NAMES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "half": "float16",
              "f16": "float16", "float32": "float32", "float": "float32", "f32": "float32"}


def _activation_code(fn, activation):
    try:
        code = int(activation)
    except (TypeError, ValueError):
        raise InvalidArgumentError("%s: activation_type=%r is not an ActivationType" % (fn, activation)) from None
    if code in (ActivationType.Situ, ActivationType.ClampedRelu2):
        raise UnsupportedError("%s: activation_type=%s is not supported by ignis" % (fn, ActivationType(code).name))
    if code not in _SUPPORTED_ACTIVATIONS:
        raise InvalidArgumentError("%s: activation_type=%r is not an ActivationType ignis takes (0..9)"
                                   % (fn, activation))
    return code


def _out_name(fn, dtype):
    if dtype is None:
        return None
    text = dtype if isinstance(dtype, str) else getattr(dtype, "__name__", None) or str(dtype)
    name = _OUT_NAMES.get(text.replace("torch.", "").replace("numpy.", ""))
    if name is None:
        raise UnsupportedError("%s: output dtype %s is not supported: bfloat16, float16 or float32" % (fn, dtype))
    return name


def _new_out(fn, like, shape, name):
    """An uninitialized output of dtype `name` in like's framework (NumPy bfloat16 through ml_dtypes)."""
    if framework_of(like) == "numpy" and name == "bfloat16":
        raise UnsupportedError("%s: NumPy bfloat16 arrays cannot travel through DLPack: pass output= or use float16"
                               % fn)
    return new_array(like, shape, name)


def _gated(code):
    return code in (ActivationType.Swiglu, ActivationType.Geglu, ActivationType.SwigluBias,
                    ActivationType.SwigluStep, ActivationType.GegluTanh)


def fused_moe_workspace_size(max_tokens, top_k, num_local_experts, hidden_size, intermediate_size, input_dtype,
                             out_dtype, activation=ActivationType.Swiglu, quant="none"):
    """Bytes of workspace :func:`fused_moe` needs for up to ``max_tokens`` tokens of these sizes and
    dtypes (names or framework dtypes), activation and quant mode ("none", "fp8_per_tensor",
    "fp8_block"). The same carving as the call (a counting mode): the bound is guaranteed."""
    fn = "ignis.fused_moe_workspace_size"
    if quant not in _QUANTS:
        raise InvalidArgumentError("%s: quant=%r must be one of %s" % (fn, quant, tuple(_QUANTS)))
    in_code = dtype_code(fn, "input_dtype", input_dtype)
    out_code = _ext.IGNIS_F32 if _out_name(fn, out_dtype) == "float32" else dtype_code(fn, "out_dtype", out_dtype)
    return _ext.fused_moe_workspace_size(max_tokens=int(max_tokens), top_k=int(top_k),
                                         num_local_experts=int(num_local_experts), hidden_size=int(hidden_size),
                                         intermediate_size=int(intermediate_size), input_dtype=in_code,
                                         out_dtype=out_code, activation=_activation_code(fn, activation),
                                         quant=_QUANTS[quant])


def fused_moe(input, topk_ids, topk_weights, fc1, fc2, *, out=None, out_dtype=None, input_scale=None, fc1_bias=None,
              fc2_bias=None, fc1_scale=None, fc2_scale=None, fc1_gate_scale=None, fc2_input_scale=None,
              act_alpha=None, act_beta=None, act_limit=None, activation=ActivationType.Swiglu, quant="none",
              gate_first=False, accumulate=False, local_expert_offset=0, tp_rank=0, workspace=None, stream=None):
    """ignis_fused_moe: ``out [T, H] (+)= sum_j topk_weights[t, j] * expert(topk_ids[t, j])(input[t])``.

    input ``[T, H]`` (f16/bf16; fp8 e4m3 for ``quant="fp8_per_tensor"``, or with its ``input_scale``
    ``[T, H/128]`` for ``quant="fp8_block"``); topk_ids ``[T, k]`` int32/int64 GLOBAL expert ids (ids
    outside ``local_expert_offset .. + E`` contribute nothing); topk_weights ``[T, k]`` float32 or
    bfloat16, or None for packed int32 ids; fc1 ``[E, 2I or I, H]``, fc2 ``[E, H, I]``. The optional
    tensors are those of ``ignis_fused_moe_weights`` (include/ignis/moe.h says what each means).
    ``out`` is written and returned (allocated of ``out_dtype``, default input's, when None);
    ``workspace`` is allocated per call when None. Returns out."""
    fn = "ignis.fused_moe"
    if quant not in _QUANTS:
        raise InvalidArgumentError("%s: quant=%r must be one of %s" % (fn, quant, tuple(_QUANTS)))
    code = _activation_code(fn, activation)
    tokens, hidden = input.shape[0], input.shape[1]
    if out is None:
        name = _out_name(fn, out_dtype) or _out_name(fn, dtype_name(input))
        out = _new_out(fn, input, (tokens, hidden), name)
    elif out_dtype is not None and _out_name(fn, out_dtype) != _out_name(fn, dtype_name(out)):
        raise InvalidArgumentError("%s: out.dtype=%s but out_dtype=%s" % (fn, out.dtype, out_dtype))
    if workspace is None:
        inter = fc2.shape[2]
        in_code = dtype_code(fn, "input.dtype", dtype_name(input))
        out_code = _ext.IGNIS_F32 if dtype_name(out) == "float32" else dtype_code(fn, "out.dtype", dtype_name(out))
        size = _ext.fused_moe_workspace_size(max_tokens=tokens, top_k=topk_ids.shape[1],
                                             num_local_experts=fc1.shape[0], hidden_size=hidden,
                                             intermediate_size=inter, input_dtype=in_code, out_dtype=out_code,
                                             activation=code, quant=_QUANTS[quant])
        workspace = new_array(input, (size,), "uint8")
    input, input_view = _fp8_numpy_view(input)
    fc1, weight_view = _fp8_numpy_view(fc1)
    fc2, fc2_view = _fp8_numpy_view(fc2)
    if fc2_view != weight_view:
        raise InvalidArgumentError("%s: fc1.dtype and fc2.dtype must be equal" % fn)
    _ext.fused_moe(input=input, input_scale=input_scale, topk_ids=topk_ids, topk_weights=topk_weights, fc1=fc1,
                   fc2=fc2, out=out, workspace=byte_workspace(workspace), fc1_bias=fc1_bias, fc2_bias=fc2_bias,
                   fc1_scale=fc1_scale, fc2_scale=fc2_scale, fc1_gate_scale=fc1_gate_scale,
                   fc2_input_scale=fc2_input_scale, act_alpha=act_alpha, act_beta=act_beta, act_limit=act_limit,
                   input_view=-1 if input_view is None else input_view,
                   weight_view=-1 if weight_view is None else weight_view, activation=code, quant=_QUANTS[quant],
                   gate_first=gate_first, accumulate=accumulate, local_expert_offset=int(local_expert_offset),
                   tp_rank=int(tp_rank), stream=stream)
    return out


# ---- weight layouts --------------------------------------------------------------------------------
def _concat(first, second):
    if framework_of(first) == "torch":
        return sys.modules["torch"].cat([first, second], dim=1)
    namespace = sys.modules["numpy"] if framework_of(first) == "numpy" else first.__array_namespace__()
    concat = getattr(namespace, "concatenate", None) or getattr(namespace, "concat")
    return concat([first, second], axis=1)


def fc1_from_gate_up(gate, up):
    """fc1 ``[E, 2I, H]`` in FlashInfer's order (up rows, then gate rows) from a checkpoint's separate
    gate (``w1``, ``gate_proj``) and up (``w3``, ``up_proj``) weights, each ``[E, I, H]``. A copy."""
    return _concat(up, gate)


def fc1_from_w13(w13):
    """fc1 in FlashInfer's order from the ``w13`` stacking (gate rows, then up rows) of ``[E, 2I, H]``:
    the two halves swapped (a copy; vLLM's w13 -> w31). Without the copy, pass ``gate_first=True``
    to :func:`fused_moe`."""
    half = w13.shape[1] // 2
    return _concat(w13[:, half:], w13[:, :half])


# ---- FlashInfer's CUTLASS MoE ---------------------------------------------------------------------
def _refuse(fn, **flags):
    """UnsupportedError for the first argument (name=(value, neutral)) that is not its neutral value."""
    for name, (value, neutral) in flags.items():
        differs = value is not None if neutral is None else value != neutral
        if differs:
            shown = "a tensor" if hasattr(value, "shape") else repr(value)
            raise UnsupportedError("%s: %s=%s is not supported by ignis" % (fn, name, shown))


def _weight_quant(fn, fc1, use_deepseek_fp8_block_scale):
    fp8 = dtype_name(fc1) == "float8_e4m3fn"
    if use_deepseek_fp8_block_scale:
        if not fp8:
            raise InvalidArgumentError("%s: use_deepseek_fp8_block_scale needs fp8 e4m3 weights, got %s"
                                       % (fn, fc1.dtype))
        return "fp8_block"
    return "fp8_per_tensor" if fp8 else "none"


def _unit_weights(topk_ids):
    return new_array(topk_ids, tuple(topk_ids.shape), "float32", fill=1.0)


def cutlass_fused_moe(input, token_selected_experts, token_final_scales, fc1_expert_weights, fc2_expert_weights,
                      output_dtype, quant_scales, fc1_expert_biases=None, fc2_expert_biases=None, input_sf=None,
                      swiglu_alpha=None, swiglu_beta=None, swiglu_limit=None, tp_size=1, tp_rank=0, ep_size=1,
                      ep_rank=0, cluster_size=1, cluster_rank=0, output=None, enable_alltoall=False,
                      use_deepseek_fp8_block_scale=False, use_w4_group_scaling=False, use_mxfp8_act_scaling=False,
                      min_latency_mode=False, use_packed_weights=False, use_wfp4afp8_humming=False,
                      tune_max_num_tokens=8192, enable_pdl=None, activation_type=ActivationType.Swiglu,
                      swizzled_input_sf=True, use_fused_finalize=True, profile_ids=None, workspace_buffer=None, *,
                      clamped_relu2_limit=None, situ_beta=None, situ_linear_beta=None, backend="cutlass",
                      stream=None):
    """FlashInfer's ``cutlass_fused_moe`` (see the module's text for what ignis takes). Returns
    ``[output, num_active_experts_per_node, experts_to_token_score, active_expert_global_ids]``."""
    fn = "ignis.cutlass_fused_moe"
    if backend == "cake":
        raise UnsupportedError("%s: backend='cake' is not supported by ignis" % fn)
    if backend != "cutlass":
        raise InvalidArgumentError("%s: backend=%r is not one of FlashInfer's ('cutlass', 'cake')" % (fn, backend))
    _refuse(fn, input_sf=(input_sf, None), cluster_size=(cluster_size, 1), cluster_rank=(cluster_rank, 0),
            enable_alltoall=(enable_alltoall, False), use_w4_group_scaling=(use_w4_group_scaling, False),
            use_mxfp8_act_scaling=(use_mxfp8_act_scaling, False), min_latency_mode=(min_latency_mode, False),
            use_packed_weights=(use_packed_weights, False), use_wfp4afp8_humming=(use_wfp4afp8_humming, False),
            profile_ids=(profile_ids, None), clamped_relu2_limit=(clamped_relu2_limit, None),
            situ_beta=(situ_beta, None), situ_linear_beta=(situ_linear_beta, None))
    if not 0 <= tp_rank < tp_size or not 0 <= ep_rank < ep_size:
        raise InvalidArgumentError("%s: tp_rank=%r of tp_size=%r, ep_rank=%r of ep_size=%r: ranks must be in "
                                   "[0, size)" % (fn, tp_rank, tp_size, ep_rank, ep_size))
    quant = _weight_quant(fn, fc1_expert_weights, use_deepseek_fp8_block_scale)
    scales = {}
    if quant == "fp8_per_tensor":
        if quant_scales is None or len(quant_scales) != 4:
            raise InvalidArgumentError("%s: fp8 per-tensor quant_scales must be [fc1_dequant, fc2_quant, "
                                       "fc2_dequant, fc1_input_dequant]" % fn)
        if getattr(quant_scales[3], "ndim", 0) != 0 and tuple(quant_scales[3].shape) not in ((), (1,)):
            raise InvalidArgumentError("%s: quant_scales[3] (fc1_input_dequant) must be one value, got shape %s"
                                       % (fn, tuple(quant_scales[3].shape)))
        scales = {"fc1_scale": quant_scales[0], "fc2_input_scale": quant_scales[1], "fc2_scale": quant_scales[2]}
    elif quant == "fp8_block":
        if quant_scales is None or len(quant_scales) != 2:
            raise InvalidArgumentError("%s: DeepSeek fp8 quant_scales must be [fc1_scales, fc2_scales]" % fn)
        scales = {"fc1_scale": quant_scales[0], "fc2_scale": quant_scales[1]}
    elif quant_scales:
        raise InvalidArgumentError("%s: quant_scales given but the weights are %s (no quantization)"
                                   % (fn, fc1_expert_weights.dtype))
    out_name = _out_name(fn, output_dtype)
    if output is None:
        output = _new_out(fn, input, (input.shape[0], fc2_expert_weights.shape[1]), out_name)
    elif _out_name(fn, dtype_name(output)) != out_name:
        raise InvalidArgumentError("%s: output.dtype=%s but output_dtype=%s" % (fn, output.dtype, output_dtype))
    if token_final_scales is None:
        token_final_scales = _unit_weights(token_selected_experts)
    local = fc1_expert_weights.shape[0]
    fused_moe(input, token_selected_experts, token_final_scales, fc1_expert_weights, fc2_expert_weights, out=output,
              fc1_bias=fc1_expert_biases, fc2_bias=fc2_expert_biases, act_alpha=swiglu_alpha, act_beta=swiglu_beta,
              act_limit=swiglu_limit, activation=activation_type, quant=quant, local_expert_offset=ep_rank * local,
              tp_rank=tp_rank, workspace=workspace_buffer, stream=stream, **scales)
    extras = (new_array(token_selected_experts, (1,), "int32"),
              new_array(token_selected_experts, (local, input.shape[0]), "float32"),
              new_array(token_selected_experts, (local,), "int32"))
    return [output, *extras]


def cutlass_fused_moe_workspace_size(max_num_tokens, hidden_size, intermediate_size, num_experts_total, top_k, *,
                                     x_dtype, weight_dtype, output_dtype="bfloat16",
                                     activation_type=ActivationType.Swiglu, tp_size=1, tp_rank=0, ep_size=1, ep_rank=0,
                                     min_latency_mode=False, use_deepseek_fp8_block_scale=False,
                                     use_w4_group_scaling=False, use_mxfp8_act_scaling=False, use_fused_finalize=True,
                                     use_packed_weights=False, use_wfp4afp8_humming=False, device=None,
                                     backend="cutlass"):
    """FlashInfer's ``cutlass_fused_moe_workspace_size``: bytes of ``workspace_buffer`` for every
    :func:`cutlass_fused_moe` call with at most ``max_num_tokens`` tokens and these sizes
    (``intermediate_size``: the rank's shard of I; ``num_experts_total / ep_size`` local experts).
    ``device`` is accepted and does not change the answer (ignis carves the same pieces on every
    device)."""
    fn = "ignis.cutlass_fused_moe_workspace_size"
    if backend != "cutlass":
        raise UnsupportedError("%s: backend=%r is not supported by ignis" % (fn, backend))
    _refuse(fn, min_latency_mode=(min_latency_mode, False), use_w4_group_scaling=(use_w4_group_scaling, False),
            use_mxfp8_act_scaling=(use_mxfp8_act_scaling, False), use_packed_weights=(use_packed_weights, False),
            use_wfp4afp8_humming=(use_wfp4afp8_humming, False))
    if max_num_tokens <= 0 or ep_size <= 0 or num_experts_total % ep_size or not 0 <= ep_rank < ep_size \
            or not 0 <= tp_rank < tp_size:
        raise InvalidArgumentError("%s: max_num_tokens=%r, num_experts_total=%r, ep_size=%r, ep_rank=%r, tp_size=%r, "
                                   "tp_rank=%r are not consistent" % (fn, max_num_tokens, num_experts_total, ep_size,
                                                                      ep_rank, tp_size, tp_rank))
    weight = str(weight_dtype).replace("torch.", "")
    quant = "fp8_block" if use_deepseek_fp8_block_scale else "fp8_per_tensor" if "float8" in weight else "none"
    return fused_moe_workspace_size(max_num_tokens, top_k, num_experts_total // ep_size, hidden_size,
                                    intermediate_size, str(x_dtype).replace("torch.", ""),
                                    str(output_dtype).replace("torch.", ""), activation_type, quant)


# ---- FlashInfer's TRT-LLM entry points --------------------------------------------------------------
def _routing(fn, topk_ids):
    """(ids int32 [T, k], weights or None for packed) of a routed form's topk_ids argument."""
    if isinstance(topk_ids, (tuple, list)):
        if len(topk_ids) != 2:
            raise InvalidArgumentError("%s: topk_ids must be a packed int32 tensor or a (topk_ids, topk_weights) pair"
                                       % fn)
        ids, weights = topk_ids
        if dtype_name(ids) == "int16":
            ids = as_dtype(ids, "int32")
        return ids, weights
    if dtype_name(topk_ids) != "int32":
        raise InvalidArgumentError("%s: packed topk_ids must be int32, got %s" % (fn, topk_ids.dtype))
    return topk_ids, None


def _trtllm_checks(fn, ids, top_k, num_experts, local_expert_offset, local_num_experts, gemm1_weights,
                   intermediate_size, activation_type, **refused):
    _refuse(fn, **refused)
    if ids.shape[1] != top_k:
        raise InvalidArgumentError("%s: topk_ids.shape[1]=%d but top_k=%d" % (fn, ids.shape[1], top_k))
    if local_expert_offset < 0 or local_num_experts <= 0 or local_expert_offset + local_num_experts > num_experts:
        raise InvalidArgumentError("%s: local experts %d..%d are not within num_experts=%d"
                                   % (fn, local_expert_offset, local_expert_offset + local_num_experts, num_experts))
    if gemm1_weights.ndim != 3 or gemm1_weights.shape[0] != local_num_experts:
        raise InvalidArgumentError("%s: gemm1_weights.shape=%s but it must be [local_num_experts=%d, M, hidden_size] "
                                   "(WeightLayout.MajorK)" % (fn, tuple(gemm1_weights.shape), local_num_experts))
    rows = (2 if _gated(_activation_code(fn, activation_type)) else 1) * intermediate_size
    if gemm1_weights.shape[1] != rows:
        raise InvalidArgumentError("%s: gemm1_weights.shape[1]=%d but intermediate_size=%d gives %d rows"
                                   % (fn, gemm1_weights.shape[1], intermediate_size, rows))


def _layout_refusals(use_shuffled_weight, weight_layout):
    return {"use_shuffled_weight": (bool(use_shuffled_weight), False),
            "weight_layout": (int(weight_layout), int(WeightLayout.MajorK))}


def trtllm_bf16_routed_moe(topk_ids, hidden_states, gemm1_weights, gemm2_weights, num_experts, top_k, n_group,
                           topk_group, intermediate_size, local_expert_offset, local_num_experts,
                           routed_scaling_factor=None, routing_method_type=0, use_shuffled_weight=True,
                           weight_layout=WeightLayout.BlockMajorK, do_finalize=True, enable_pdl=True,
                           gemm1_lora_delta=None, tune_max_num_tokens=8192, activation_type=ActivationType.Swiglu,
                           routing_replay_out=None, gemm1_alpha=None, gemm1_beta=None, gemm1_clamp_limit=None,
                           output=None, *, stream=None):
    """FlashInfer's ``trtllm_bf16_routed_moe`` on ignis: 16-bit experts in the MajorK layout
    (``use_shuffled_weight=False``, ``weight_layout=WeightLayout.MajorK``). Returns output."""
    fn = "ignis.trtllm_bf16_routed_moe"
    ids, weights = _routing(fn, topk_ids)
    _trtllm_checks(fn, ids, top_k, num_experts, local_expert_offset, local_num_experts, gemm1_weights,
                   intermediate_size, activation_type, do_finalize=(bool(do_finalize), True),
                   gemm1_lora_delta=(gemm1_lora_delta, None), routing_replay_out=(routing_replay_out, None),
                   **_layout_refusals(use_shuffled_weight, weight_layout))
    return fused_moe(hidden_states, ids, weights, gemm1_weights, gemm2_weights, out=output, act_alpha=gemm1_alpha,
                     act_beta=gemm1_beta, act_limit=gemm1_clamp_limit, activation=activation_type,
                     local_expert_offset=local_expert_offset, stream=stream)


def trtllm_fp8_per_tensor_scale_routed_moe(topk_ids, routing_bias, hidden_states, gemm1_weights, output1_scales_scalar,
                                           output1_scales_gate_scalar, gemm2_weights, output2_scales_scalar,
                                           num_experts, top_k, n_group, topk_group, intermediate_size,
                                           local_expert_offset, local_num_experts, routed_scaling_factor,
                                           use_routing_scales_on_input, routing_method_type=0, do_finalize=True,
                                           enable_pdl=None, tune_max_num_tokens=8192,
                                           activation_type=ActivationType.Swiglu, routing_replay_out=None,
                                           output=None, gemm1_clamp_limit=None, *, stream=None):
    """FlashInfer's ``trtllm_fp8_per_tensor_scale_routed_moe`` on ignis: fp8 e4m3 hidden_states and
    experts; the up half of GEMM 1 dequantized by ``output1_scales_scalar``, the gate half by
    ``output1_scales_gate_scalar`` (which fold the fc2 input scale in, as FlashInfer's callers make
    them; the gate scale is read for the gated activations only), GEMM 2 by ``output2_scales_scalar``.
    Returns output (bfloat16 when not given)."""
    fn = "ignis.trtllm_fp8_per_tensor_scale_routed_moe"
    ids, weights = _routing(fn, topk_ids)
    _trtllm_checks(fn, ids, top_k, num_experts, local_expert_offset, local_num_experts, gemm1_weights,
                   intermediate_size, activation_type, do_finalize=(bool(do_finalize), True),
                   use_routing_scales_on_input=(bool(use_routing_scales_on_input), False),
                   routing_replay_out=(routing_replay_out, None), gemm1_clamp_limit=(gemm1_clamp_limit, None))
    if int(activation_type) == ActivationType.SwigluStep:
        raise UnsupportedError("%s: activation_type=SwigluStep is not supported by ignis in the per-tensor fp8 form "
                               "(its limit's units there are the raw accumulator's)" % fn)
    gated = _gated(_activation_code(fn, activation_type))
    return fused_moe(hidden_states, ids, weights, gemm1_weights, gemm2_weights, out=output,
                     out_dtype=None if output is not None else "bfloat16", fc1_scale=output1_scales_scalar,
                     fc1_gate_scale=output1_scales_gate_scalar if gated else None, fc2_scale=output2_scales_scalar,
                     activation=activation_type, quant="fp8_per_tensor", local_expert_offset=local_expert_offset,
                     stream=stream)


def _transposed(x):
    return x.transpose(0, 1) if framework_of(x) == "torch" else x.swapaxes(0, 1)


def trtllm_fp8_block_scale_routed_moe(topk_ids, routing_bias, hidden_states, hidden_states_scale, gemm1_weights,
                                      gemm1_weights_scale, gemm2_weights, gemm2_weights_scale, num_experts, top_k,
                                      n_group, topk_group, intermediate_size, local_expert_offset, local_num_experts,
                                      routed_scaling_factor, routing_method_type=0, use_shuffled_weight=False,
                                      weight_layout=0, do_finalize=True, enable_pdl=None, gemm1_lora_delta=None,
                                      output=None, tune_max_num_tokens=8192,
                                      fp8_quantization_type=Fp8QuantizationType.DeepSeekFp8,
                                      activation_type=ActivationType.Swiglu, gemm1_alpha=None, gemm1_beta=None,
                                      gemm1_clamp_limit=None, valid_hidden_size=None, valid_intermediate_size=None, *,
                                      stream=None):
    """FlashInfer's ``trtllm_fp8_block_scale_routed_moe`` on ignis (DeepSeekFp8): fp8 e4m3 experts with
    128x128 block scales; hidden_states fp8 with ``hidden_states_scale`` ``[H/128, T]``, or 16-bit
    (quantized 1x128 here; hidden_states_scale None). Returns output (bfloat16 when not given)."""
    fn = "ignis.trtllm_fp8_block_scale_routed_moe"
    ids, weights = _routing(fn, topk_ids)
    hidden, inter = hidden_states.shape[1], gemm2_weights.shape[-1]
    _trtllm_checks(fn, ids, top_k, num_experts, local_expert_offset, local_num_experts, gemm1_weights,
                   intermediate_size, activation_type, do_finalize=(bool(do_finalize), True),
                   gemm1_lora_delta=(gemm1_lora_delta, None),
                   fp8_quantization_type=(int(fp8_quantization_type), int(Fp8QuantizationType.DeepSeekFp8)),
                   valid_hidden_size=(valid_hidden_size if valid_hidden_size != hidden else None, None),
                   valid_intermediate_size=(valid_intermediate_size if valid_intermediate_size != inter else None,
                                            None),
                   **_layout_refusals(use_shuffled_weight, weight_layout))
    fp8_input = "float8" in dtype_name(hidden_states)
    if fp8_input != (hidden_states_scale is not None):
        raise InvalidArgumentError("%s: hidden_states_scale is required with an fp8 hidden_states and must be None "
                                   "with a 16-bit one" % fn)
    return fused_moe(hidden_states, ids, weights, gemm1_weights, gemm2_weights, out=output,
                     out_dtype=None if output is not None else "bfloat16",
                     input_scale=_transposed(hidden_states_scale) if fp8_input else None,
                     fc1_scale=gemm1_weights_scale, fc2_scale=gemm2_weights_scale, act_alpha=gemm1_alpha,
                     act_beta=gemm1_beta, act_limit=gemm1_clamp_limit, activation=activation_type, quant="fp8_block",
                     local_expert_offset=local_expert_offset, stream=stream)


# ---- the forms with routing inside ------------------------------------------------------------------
def _route(logits, top_k, routing_method_type, bias=None, n_group=None, topk_group=None, routed_scaling_factor=None):
    """ignis' routing op (ignis.fused_moe_routing.moe_route): (ids int32 [T, k], weights f32 [T, k]).
    FlashInfer's trtllm_*_moe apply routed_scaling_factor in DeepSeekV3 and MiniMax2 routing only;
    ignis' op applies it in every method, so the other methods get 1 here."""
    method = RoutingMethodType(int(routing_method_type))
    if method not in (RoutingMethodType.DeepSeekV3, RoutingMethodType.MiniMax2):
        routed_scaling_factor = None
    return moe_route(logits, top_k, method, routing_bias=bias, n_group=n_group, topk_group=topk_group,
                     routed_scaling_factor=routed_scaling_factor)


def trtllm_bf16_moe(routing_logits, routing_bias, hidden_states, gemm1_weights, gemm2_weights, num_experts, top_k,
                    n_group, topk_group, intermediate_size, local_expert_offset, local_num_experts,
                    routed_scaling_factor=None, routing_method_type=0, use_shuffled_weight=True,
                    weight_layout=WeightLayout.BlockMajorK, do_finalize=True, enable_pdl=True,
                    tune_max_num_tokens=8192, activation_type=ActivationType.Swiglu, norm_topk_prob=True,
                    routing_replay_out=None, gemm1_alpha=None, gemm1_beta=None, gemm1_clamp_limit=None, output=None, *,
                    stream=None):
    """FlashInfer's ``trtllm_bf16_moe``: ignis' routing op, then :func:`trtllm_bf16_routed_moe`."""
    _refuse("ignis.trtllm_bf16_moe", norm_topk_prob=(bool(norm_topk_prob), True))
    routing = _route(routing_logits, top_k, routing_method_type, routing_bias, n_group, topk_group,
                     routed_scaling_factor)
    return trtllm_bf16_routed_moe(routing, hidden_states, gemm1_weights, gemm2_weights, num_experts, top_k, n_group,
                                  topk_group, intermediate_size, local_expert_offset, local_num_experts,
                                  routed_scaling_factor, routing_method_type, use_shuffled_weight, weight_layout,
                                  do_finalize, enable_pdl, None, tune_max_num_tokens, activation_type,
                                  routing_replay_out, gemm1_alpha, gemm1_beta, gemm1_clamp_limit, output, stream=stream)


def trtllm_fp8_per_tensor_scale_moe(routing_logits, routing_bias, hidden_states, gemm1_weights, output1_scales_scalar,
                                    output1_scales_gate_scalar, gemm2_weights, output2_scales_scalar, num_experts,
                                    top_k, n_group, topk_group, intermediate_size, local_expert_offset,
                                    local_num_experts, routed_scaling_factor, use_routing_scales_on_input,
                                    routing_method_type=0, do_finalize=True, enable_pdl=None,
                                    tune_max_num_tokens=8192, activation_type=ActivationType.Swiglu,
                                    norm_topk_prob=True, routing_replay_out=None, output=None, gemm1_clamp_limit=None,
                                    *, stream=None):
    """FlashInfer's ``trtllm_fp8_per_tensor_scale_moe``: ignis' routing op, then
    :func:`trtllm_fp8_per_tensor_scale_routed_moe`."""
    _refuse("ignis.trtllm_fp8_per_tensor_scale_moe", norm_topk_prob=(bool(norm_topk_prob), True))
    routing = _route(routing_logits, top_k, routing_method_type, routing_bias, n_group, topk_group,
                     routed_scaling_factor)
    return trtllm_fp8_per_tensor_scale_routed_moe(
        routing, routing_bias, hidden_states, gemm1_weights, output1_scales_scalar, output1_scales_gate_scalar,
        gemm2_weights, output2_scales_scalar, num_experts, top_k, n_group, topk_group, intermediate_size,
        local_expert_offset, local_num_experts, routed_scaling_factor, use_routing_scales_on_input,
        routing_method_type, do_finalize, enable_pdl, tune_max_num_tokens, activation_type, routing_replay_out, output,
        gemm1_clamp_limit, stream=stream)


def trtllm_fp8_block_scale_moe(routing_logits, routing_bias, hidden_states, hidden_states_scale, gemm1_weights,
                               gemm1_weights_scale, gemm2_weights, gemm2_weights_scale, num_experts, top_k, n_group,
                               topk_group, intermediate_size, local_expert_offset, local_num_experts,
                               routed_scaling_factor, routing_method_type=0, use_shuffled_weight=False,
                               weight_layout=0, do_finalize=True, enable_pdl=None, tune_max_num_tokens=8192,
                               fp8_quantization_type=Fp8QuantizationType.DeepSeekFp8, num_fused_shared_experts=None,
                               activation_type=ActivationType.Swiglu, norm_topk_prob=True, routing_replay_out=None,
                               gemm1_alpha=None, gemm1_beta=None, gemm1_clamp_limit=None, output=None,
                               valid_hidden_size=None, valid_intermediate_size=None, *, gemm1_bias=None,
                               gemm2_bias=None, stream=None):
    """FlashInfer's ``trtllm_fp8_block_scale_moe``: ignis' routing op, then
    :func:`trtllm_fp8_block_scale_routed_moe` (and its biases, ``gemm1_bias`` / ``gemm2_bias``)."""
    fn = "ignis.trtllm_fp8_block_scale_moe"
    _refuse(fn, norm_topk_prob=(bool(norm_topk_prob), True),
            num_fused_shared_experts=(num_fused_shared_experts or None, None),
            routing_replay_out=(routing_replay_out, None))
    routing = _route(routing_logits, top_k, routing_method_type, routing_bias, n_group, topk_group,
                     routed_scaling_factor)
    if gemm1_bias is None and gemm2_bias is None:
        return trtllm_fp8_block_scale_routed_moe(
            routing, routing_bias, hidden_states, hidden_states_scale, gemm1_weights, gemm1_weights_scale,
            gemm2_weights, gemm2_weights_scale, num_experts, top_k, n_group, topk_group, intermediate_size,
            local_expert_offset, local_num_experts, routed_scaling_factor, routing_method_type, use_shuffled_weight,
            weight_layout, do_finalize, enable_pdl, None, output, tune_max_num_tokens, fp8_quantization_type,
            activation_type, gemm1_alpha, gemm1_beta, gemm1_clamp_limit, valid_hidden_size, valid_intermediate_size,
            stream=stream)
    ids, weights = routing
    _trtllm_checks(fn, ids, top_k, num_experts, local_expert_offset, local_num_experts, gemm1_weights,
                   intermediate_size, activation_type, do_finalize=(bool(do_finalize), True),
                   fp8_quantization_type=(int(fp8_quantization_type), int(Fp8QuantizationType.DeepSeekFp8)),
                   **_layout_refusals(use_shuffled_weight, weight_layout))
    fp8_input = "float8" in dtype_name(hidden_states)
    return fused_moe(hidden_states, ids, weights, gemm1_weights, gemm2_weights, out=output,
                     out_dtype=None if output is not None else "bfloat16",
                     input_scale=_transposed(hidden_states_scale) if fp8_input else None, fc1_bias=gemm1_bias,
                     fc2_bias=gemm2_bias, fc1_scale=gemm1_weights_scale, fc2_scale=gemm2_weights_scale,
                     act_alpha=gemm1_alpha, act_beta=gemm1_beta, act_limit=gemm1_clamp_limit,
                     activation=activation_type, quant="fp8_block", local_expert_offset=local_expert_offset,
                     stream=stream)
