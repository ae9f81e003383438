"""flashinfer.rope under the switch: ignis.rope's names (the rotary embeddings, and RoPE fused with fp8
quantization: rope_quantize_fp8, mla_rope_quantize_fp8, rope_quantize_fp8_append_paged_kv_cache)."""

from ignis.rope import *
