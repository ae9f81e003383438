"""flashinfer.mla under the switch: the MLA (multi-head latent attention) names the engines import,
none of which ignis serves (it has no MLA attention): each raises UnsupportedError.

``BatchMLAPagedAttentionWrapper`` refuses to be constructed; its ``plan`` and ``run`` exist only
so that an engine inspecting their signatures (vLLM's SM90 NoPE-MLA probe reads ``run``'s
keywords) learns the feature is absent instead of failing on a missing attribute.
"""

from ignis import UnsupportedError

_NO_MLA = "ignis has no MLA attention: use another MLA backend than FlashInfer's"


class BatchMLAPagedAttentionWrapper:
    """FlashInfer's paged MLA wrapper; not implemented (construction raises)."""

    def __init__(self, *args, **kwargs):
        raise UnsupportedError("flashinfer.BatchMLAPagedAttentionWrapper: " + _NO_MLA)

    def plan(self, *args, **kwargs):
        raise UnsupportedError("flashinfer.BatchMLAPagedAttentionWrapper.plan: " + _NO_MLA)

    def run(self, *args, **kwargs):
        raise UnsupportedError("flashinfer.BatchMLAPagedAttentionWrapper.run: " + _NO_MLA)


def trtllm_batch_decode_with_kv_cache_mla(*args, **kwargs):
    """FlashInfer's TRT-LLM-gen MLA decode; not implemented (raises)."""
    raise UnsupportedError("flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla: " + _NO_MLA)
