"""FlashInfer's TensorRT-LLM-style attention entry points, by name: ``trtllm_batch_decode_with_kv_cache``
and ``xqa_batch_decode_with_kv_cache`` (flashinfer.decode) and ``trtllm_batch_context_with_kv_cache``
(flashinfer.prefill).

These take a block table and per-request lengths instead of a plan, and vLLM's FlashInfer backend
imports them when it loads. ignis does not serve them yet: each raises UnsupportedError (a
NotImplementedError) naming itself, so a caller learns at the first call which path to turn off.
vLLM reaches them only when it believes FlashInfer's TRT-LLM kernels are available (see the README's
"Using ignis from vLLM / SGLang": ``--attention-config.use_trtllm_attention=false`` keeps it on the
wrapper path, which ignis runs).
"""

from ._errors import UnsupportedError

__all__ = ["trtllm_batch_decode_with_kv_cache", "xqa_batch_decode_with_kv_cache",
           "trtllm_batch_context_with_kv_cache"]


def _absent(name, what, instead):
    raise UnsupportedError("%s: ignis has no TRT-LLM-style %s over a block table yet; use %s (vLLM: "
                           "--attention-config.use_trtllm_attention=false)" % (name, what, instead))


def trtllm_batch_decode_with_kv_cache(*args, **kwargs):
    """FlashInfer's TRT-LLM-gen batch decode over a block table; not implemented (raises)."""
    _absent("trtllm_batch_decode_with_kv_cache", "decode", "BatchDecodeWithPagedKVCacheWrapper")


def xqa_batch_decode_with_kv_cache(*args, **kwargs):
    """FlashInfer's XQA batch decode over a block table; not implemented (raises)."""
    _absent("xqa_batch_decode_with_kv_cache", "decode", "BatchDecodeWithPagedKVCacheWrapper")


def trtllm_batch_context_with_kv_cache(*args, **kwargs):
    """FlashInfer's TRT-LLM-gen batch prefill over a block table; not implemented (raises)."""
    _absent("trtllm_batch_context_with_kv_cache", "context (prefill) attention", "BatchPrefillWithPagedKVCacheWrapper")
