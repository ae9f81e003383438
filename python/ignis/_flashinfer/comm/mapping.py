"""flashinfer.comm.mapping under the switch: ``Mapping``, FlashInfer's description of a rank's place
in a multi-node tensor / pipeline / expert-parallel layout, used by its MNNVL all-reduce and MoE
all-to-all. ignis has neither, so constructing one raises UnsupportedError (a
NotImplementedError); ignis's all-reduce takes world_size and rank directly."""

from ignis import UnsupportedError


class Mapping:
    """FlashInfer's rank mapping for MNNVL and MoE all-to-all; not implemented (raises)."""

    def __init__(self, *args, **kwargs):
        raise UnsupportedError("flashinfer.comm.Mapping: the MNNVL / MoE all-to-all rank mapping is not in ignis "
                               "(create_allreduce_fusion_workspace takes world_size and rank)")
