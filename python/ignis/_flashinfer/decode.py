"""flashinfer.decode under the switch: ignis.decode's names, plus the decode entry points vLLM
imports from here that ignis does not serve yet (TRT-LLM-gen, XQA and MLA decode; they raise)."""

from ignis.decode import *
from ignis.trtllm import trtllm_batch_decode_with_kv_cache, xqa_batch_decode_with_kv_cache

from .mla import trtllm_batch_decode_with_kv_cache_mla
