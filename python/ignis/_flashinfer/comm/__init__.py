"""flashinfer.comm under the switch: ignis.comm's all-reduce fusion (``allreduce_fusion``,
``create_allreduce_fusion_workspace``, ``AllReduceFusionPattern``, ``QuantizationSFLayout``,
``AllReduceFusionWorkspace``) on ignis's communicator of one host, and the load-time names engines
import that ignis lacks: ``Mapping`` (.mapping), ``MoeAlltoAll`` and the ``moe_a2a_*`` functions
(MoE all-to-all over MNNVL), and .mnnvl's multicast memory, which raise UnsupportedError (a
NotImplementedError) naming the feature when used. Where an engine asks first whether a feature
exists, the answer is no: ``is_mnnvl_cutedsl_supported`` returns False, and FlashInfer's PCIe IPC
all-reduce (``PcieIpcAllReduceWorkspace``, which vLLM probes with hasattr) and its TRT-LLM / vLLM
custom all-reduce internals (``trtllm_*``, ``vllm_*``) are not defined. ``mnnvl.TorchDistBackend``
and ``mnnvl.CommBackend`` are real: vLLM and SGLang build the workspace's handle exchange on them."""

from ignis import UnsupportedError
from ignis.comm import (AllReduceFusionPattern, AllReduceFusionWorkspace, QuantizationSFLayout, allreduce_fusion,
                        create_allreduce_fusion_workspace)

from . import mapping, mnnvl
from .mapping import Mapping

_A2A = "MoE all-to-all over MNNVL (flashinfer.comm.MoeAlltoAll) is not in ignis"


def is_mnnvl_cutedsl_supported(*args, **kwargs):
    """Whether FlashInfer's MNNVL CuTe DSL all-reduce serves a shape: never under ignis."""
    return False


class MoeAlltoAll:
    """FlashInfer's MNNVL MoE all-to-all; not implemented (constructing one raises)."""

    def __init__(self, *args, **kwargs):
        raise UnsupportedError(_A2A)


def _a2a(name):
    def absent(*args, **kwargs):
        raise UnsupportedError("flashinfer.comm.%s: %s" % (name, _A2A))

    absent.__name__ = name
    absent.__doc__ = "FlashInfer's %s; not implemented (raises)." % name
    return absent


moe_a2a_get_workspace_size_per_rank = _a2a("moe_a2a_get_workspace_size_per_rank")
moe_a2a_dispatch = _a2a("moe_a2a_dispatch")
moe_a2a_combine = _a2a("moe_a2a_combine")
moe_a2a_initialize = _a2a("moe_a2a_initialize")
moe_a2a_sanitize_expert_ids = _a2a("moe_a2a_sanitize_expert_ids")
moe_a2a_wrap_payload_tensor_in_workspace = _a2a("moe_a2a_wrap_payload_tensor_in_workspace")
