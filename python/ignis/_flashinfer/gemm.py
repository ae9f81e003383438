"""flashinfer.gemm under the switch: ignis.gemm's products (``mm_bf16``, ``bmm_bf16``, ``bmm_fp8``,
``gemm_fp8_nt_groupwise``, ``fp8_blockscale_gemm_sm90``, ``tinygemm_bf16``). FlashInfer's other
GEMMs (fp4, mxfp8, grouped and segment GEMM) are absent: an engine's import of one raises
ImportError, which the engines that probe for them catch."""

from ignis.gemm import bmm_bf16, bmm_fp8, fp8_blockscale_gemm_sm90, gemm_fp8_nt_groupwise, mm_bf16, tinygemm_bf16

__all__ = ["mm_bf16", "bmm_bf16", "bmm_fp8", "gemm_fp8_nt_groupwise", "fp8_blockscale_gemm_sm90", "tinygemm_bf16"]
