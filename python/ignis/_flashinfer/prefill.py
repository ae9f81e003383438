"""flashinfer.prefill under the switch: ignis.prefill's names, plus the TRT-LLM-gen context
attention vLLM imports from here (not served yet; it raises)."""

from ignis.prefill import *
from ignis.trtllm import trtllm_batch_context_with_kv_cache
