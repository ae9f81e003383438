"""flashinfer.page under the switch: ignis.page's names and the MLA cache append (ignis.mla), plus
FlashInfer's NVFP4 appends (ignis has no NVFP4 KV cache: they raise UnsupportedError)."""

from ignis import UnsupportedError
from ignis.mla import append_paged_mla_kv_cache
from ignis.page import *


def _no_nvfp4(name):
    raise UnsupportedError("flashinfer.%s: ignis has no NVFP4 KV cache; use a bf16, fp16 or fp8 KV cache "
                           "(append with append_paged_kv_cache)" % name)


def nvfp4_quantize_append_paged_kv_cache(*args, **kwargs):
    """FlashInfer's NVFP4-quantizing append; not implemented (raises)."""
    _no_nvfp4("nvfp4_quantize_append_paged_kv_cache")


def nvfp4_quantize_append_paged_kv_cache_with_slot_mapping(*args, **kwargs):
    """FlashInfer's NVFP4-quantizing append by slot mapping (vLLM's NVFP4 KV path); not implemented
    (raises)."""
    _no_nvfp4("nvfp4_quantize_append_paged_kv_cache_with_slot_mapping")
