"""MoE routing, the first stage of fused MoE, with FlashInfer's names: ``RoutingMethodType`` (its
values), ``fused_topk_deepseek`` (flashinfer.fused_moe's signature, writing its outputs in place),
``moe_route`` for every routing method, and ``topk_softmax``, the softmax top-k routing of vLLM and
SGLang (``renormalize``).

Router logits are ``[tokens, experts]`` (f32, bf16 or f16; the last dimension contiguous, any row
stride; at most 512 experts, top_k at most 32) on the host or a CUDA device. The methods, their
weights, the order of the chosen experts (highest ranked first, the lower expert index first among
equals) and every error are those of ``include/ignis/moe_routing.h``; ids are int32 global expert
ids, weights the final factors of the expert outputs (``routed_scaling_factor`` applied, in every
method). The CPU and CUDA backends return the same ids and weights bit for bit. Calls never
synchronize and are safe inside CUDA-graph capture.

Where ignis differs from FlashInfer: strided logits and outputs are accepted (FlashInfer requires
contiguous tensors); ``fused_topk_deepseek`` takes topk_values in f32, bf16 or f16 whatever the
scores' dtype, and any expert and group counts within ignis' limits (FlashInfer caps them at 8 experts
per token, 32 experts per group and 128 in the groups kept); ``routed_scaling_factor`` multiplies the
weights of every method (FlashInfer applies it in DeepSeekV3 and MiniMax2 only); the methods that rank
the logits themselves keep the logits' order where sigmoid or softmax round scores to equal values.
"""

import enum
import operator

from . import _ext
from ._alloc import new_index_output, new_typed_output
from ._errors import ArgumentTypeError, InvalidArgumentError, UnsupportedError

__all__ = ["RoutingMethodType", "moe_route", "fused_topk_deepseek", "topk_softmax"]


class RoutingMethodType(enum.IntEnum):
    """FlashInfer's RoutingMethodType, value for value (``include/ignis/moe_routing.h`` says what each
    computes). ``Unspecified`` is FlashInfer's placeholder; a routing call refuses it."""

    Default = _ext.IGNIS_MOE_ROUTING_DEFAULT
    Renormalize = _ext.IGNIS_MOE_ROUTING_RENORMALIZE
    DeepSeekV3 = _ext.IGNIS_MOE_ROUTING_DEEPSEEK_V3
    Llama4 = _ext.IGNIS_MOE_ROUTING_LLAMA4
    RenormalizeNaive = _ext.IGNIS_MOE_ROUTING_RENORMALIZE_NAIVE
    TopK = _ext.IGNIS_MOE_ROUTING_TOPK
    SigmoidRenorm = _ext.IGNIS_MOE_ROUTING_SIGMOID_RENORM
    MiniMax2 = _ext.IGNIS_MOE_ROUTING_MINIMAX2
    Sigmoid = _ext.IGNIS_MOE_ROUTING_SIGMOID
    TopKSigmoid = _ext.IGNIS_MOE_ROUTING_TOPK_SIGMOID
    Unspecified = 10

    def __repr__(self):
        return "%s.%s" % (type(self).__name__, self.name)


def _method_value(fn, method):
    try:
        if isinstance(method, bool):
            raise TypeError
        return operator.index(method)
    except TypeError:
        raise ArgumentTypeError("ignis.%s: routing_method_type must be a RoutingMethodType or an int, not %s"
                                % (fn, type(method).__name__)) from None


def _route(fn, logits, bias, method, top_k, n_group, topk_group, scale, ids, weights, stream):
    """Run the routing into ids / weights (allocated when None); returns them finished."""
    shape = (logits.shape[0], max(int(top_k), 0))
    finish_ids = finish_weights = None
    if ids is None:
        ids, finish_ids = new_index_output(logits, shape)
    if weights is None:
        weights, finish_weights = new_typed_output(logits, shape, "float32")
    _ext.moe_route(logits, bias, ids, weights, _method_value(fn, method), int(top_k),
                   0 if n_group is None else int(n_group), 0 if topk_group is None else int(topk_group),
                   1.0 if scale is None else float(scale), stream)
    return (ids if finish_ids is None else finish_ids(ids),
            weights if finish_weights is None else finish_weights(weights))


def moe_route(routing_logits, top_k, routing_method_type=RoutingMethodType.Default, routing_bias=None, n_group=None,
              topk_group=None, routed_scaling_factor=None, topk_ids=None, topk_weights=None, *, stream=None):
    """Route each token of ``routing_logits [tokens, experts]`` to ``top_k`` experts by
    ``routing_method_type`` (the argument names of FlashInfer's ``trtllm_*_moe``): returns
    ``(topk_ids, topk_weights)``, int32 and f32 ``[tokens, top_k]`` (written into the given arrays when
    passed; topk_weights may then be bf16 or f16). ``routing_bias [experts]`` (f32/bf16/f16) is taken by
    DeepSeekV3 and MiniMax2 only; ``n_group`` / ``topk_group`` by DeepSeekV3 only (None or 0: no group
    stage); ``routed_scaling_factor`` (None: 1) multiplies every weight."""
    return _route("moe_route", routing_logits, routing_bias, routing_method_type, top_k, n_group, topk_group,
                  routed_scaling_factor, topk_ids, topk_weights, stream)


def fused_topk_deepseek(scores, bias, n_group, topk_group, topk, routed_scaling_factor, topk_values, topk_indices,
                        launch_with_pdl=True, routing_replay_out=None, *, backend="default", stream=None):
    """FlashInfer's ``fused_moe.fused_topk_deepseek`` (DeepSeek-V3 routing, NoAuxTc): sigmoid of
    ``scores [tokens, experts]``, plus ``bias [experts]`` for the choice only, the ``topk_group`` best of
    ``n_group`` groups (each scored by its two largest biased scores), the ``topk`` best experts in them,
    weights ``sigmoid / (sum + 1e-20) * routed_scaling_factor``. Writes ``topk_values`` (f32, bf16 or f16)
    and ``topk_indices`` (int32), both ``[tokens, topk]``, in place and returns None. ``launch_with_pdl``
    is a scheduling hint (ignis launches with PDL wherever the GPU has it); ``backend`` "default" or
    "cake" choose among FlashInfer's implementations, ignis has one; ``routing_replay_out`` (an int16
    copy of the ids) raises UnsupportedError."""
    if routing_replay_out is not None:
        raise UnsupportedError("ignis.fused_topk_deepseek: routing_replay_out is not supported (ignis does not "
                               "write an int16 copy of the expert ids): read topk_indices instead")
    if backend not in ("default", "cake"):
        raise InvalidArgumentError("ignis.fused_topk_deepseek: backend=%r but it must be 'default' or 'cake'"
                                   % (backend,))
    _route("fused_topk_deepseek", scores, bias, RoutingMethodType.DeepSeekV3, topk, n_group, topk_group,
           routed_scaling_factor, topk_indices, topk_values, stream)


def topk_softmax(gating_output, topk, renormalize=False, topk_weights=None, topk_ids=None, *, stream=None):
    """The softmax top-k routing of vLLM's ``fused_topk`` and SGLang's ``topk_softmax``: the ``topk`` largest
    entries of ``softmax(gating_output)`` per token, renormalized to sum to 1 when ``renormalize``
    (RoutingMethodType.RenormalizeNaive; else Default). Returns ``(topk_weights, topk_ids)`` (vLLM's
    order), f32 and int32 ``[tokens, topk]``, written into the given arrays when passed."""
    method = RoutingMethodType.RenormalizeNaive if renormalize else RoutingMethodType.Default
    ids, weights = _route("topk_softmax", gating_output, None, method, topk, None, None, None, topk_ids,
                          topk_weights, stream)
    return weights, ids
