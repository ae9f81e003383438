"""flashinfer.mla under the switch: ignis' MLA wrapper (ignis.mla), and the TRT-LLM-gen MLA decode
vLLM and SGLang import on Blackwell, which ignis does not serve (it raises UnsupportedError)."""

from ignis import UnsupportedError
from ignis.mla import BatchMLAPagedAttentionWrapper, append_paged_mla_kv_cache


def trtllm_batch_decode_with_kv_cache_mla(*args, **kwargs):
    """FlashInfer's TRT-LLM-gen MLA decode; not implemented (raises)."""
    raise UnsupportedError("flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla: ignis has no TRT-LLM-gen MLA "
                           "decode; use BatchMLAPagedAttentionWrapper")
