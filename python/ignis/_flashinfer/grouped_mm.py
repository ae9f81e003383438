"""flashinfer.grouped_mm under the switch: ``grouped_mm_bf16`` on ignis' grouped GEMM
(ignis.gemm). FlashInfer's fp8, mxfp8 and fp4 grouped forms of this module are absent: an engine's
import of one raises ImportError."""

from ignis.gemm import grouped_mm_bf16

__all__ = ["grouped_mm_bf16"]
