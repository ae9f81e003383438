"""FlashInfer's namespace over ignis: the package ``import flashinfer`` loads under the switch
(:mod:`ignis.switch`: ``IGNIS_AS_FLASHINFER=1`` and no FlashInfer installed).

It is loaded under the name ``flashinfer`` (import it that way only, never as
``ignis._flashinfer``): this directory is the package's ``__path__``, so ``flashinfer.decode`` and
the other submodules are the files beside this one. Each re-exports ignis' implementation of the
FlashInfer module of that name, plus the names the engines import from it at load time that ignis
lacks; those raise UnsupportedError (a NotImplementedError) naming the feature when called (MLA,
NVFP4 KV caches, TRT-LLM-gen prefill over a block table). ``flashinfer.gemm`` holds the GEMMs ignis
has (``mm_bf16``, ``bmm_bf16``, ``bmm_fp8`` also at the top level, as in FlashInfer);
``flashinfer.fused_moe`` the fused MoE (bf16, fp8 per-tensor, fp8 block-scaled);
``flashinfer.comm`` the tensor-parallel all-reduce fusion (ignis.comm). A FlashInfer module ignis
has nothing of (cute_dsl, ...) does not exist here, so an engine's
``importlib.util.find_spec`` probe for it answers None and the engine takes its own path.

Versions: ``__version__`` is the FlashInfer API level ignis implements (what engines compare
against), ``__ignis_version__`` the loaded ignis library's. No distribution metadata is made:
``importlib.metadata`` still knows no ``flashinfer-python``.
"""

from ignis import *
from ignis import __version__ as __ignis_version__

from . import (activation, cascade, comm, decode, fused_moe, gemm, grouped_mm, jit, mla, norm, page, prefill,
               quantization, rope, sampling, topk, utils)
from .fused_moe import reorder_rows_for_gated_act_gemm, trtllm_fp4_block_scale_moe, trtllm_fp4_block_scale_routed_moe
from .mla import BatchMLAPagedAttentionWrapper
from .page import nvfp4_quantize_append_paged_kv_cache, nvfp4_quantize_append_paged_kv_cache_with_slot_mapping
from .topk import TopKTieBreak, top_k_page_table_transform, top_k_ragged_transform

__version__ = "0.7.2"
