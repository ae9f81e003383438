"""flashinfer.prefill under the switch: ignis.prefill's names, plus the TRT-LLM-gen context
attention vLLM imports from here (ignis.trtllm: prefill over a block table, plan-free)."""

from ignis.prefill import *
from ignis.trtllm import trtllm_batch_context_with_kv_cache
