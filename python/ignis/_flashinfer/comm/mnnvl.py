"""flashinfer.comm.mnnvl under the switch. The handle-exchange adapters are real, because vLLM and
SGLang pass them to create_allreduce_fusion_workspace (``comm_backend=``) and subclass them:
``CommBackend`` (the interface: Get_rank, Get_size, allgather, bcast, barrier, Split) and
``TorchDistBackend`` (it over a torch.distributed group; ``Split`` raises, as ignis never splits).
The multi-node NVLink (MNNVL) memory is not in ignis: ``MnnvlMemory`` and ``MnnvlConfig`` raise
UnsupportedError when constructed, and ``is_mnnvl_fabric_supported`` / ``is_multicast_supported``
answer False (ignis never uses NVLink multicast)."""

from ignis import UnsupportedError

_MNNVL = "multi-node NVLink (MNNVL) memory is not in ignis"


class CommBackend:
    """FlashInfer's interface of a host-side communicator (MPI-like names)."""

    def Get_rank(self):
        raise NotImplementedError("CommBackend.Get_rank")

    def Get_size(self):
        raise NotImplementedError("CommBackend.Get_size")

    def allgather(self, data):
        raise NotImplementedError("CommBackend.allgather")

    def bcast(self, data, root):
        raise NotImplementedError("CommBackend.bcast")

    def barrier(self):
        raise NotImplementedError("CommBackend.barrier")

    def Split(self, color, key):
        raise NotImplementedError("CommBackend.Split")


class TorchDistBackend(CommBackend):
    """CommBackend over a torch.distributed group (None: the default group), which must be
    initialized."""

    def __init__(self, group=None):
        import torch.distributed as dist

        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized: call torch.distributed.init_process_group() "
                               "first")
        self._group = group
        self._dist = dist

    def Get_rank(self):
        return self._dist.get_rank(self._group)

    def Get_size(self):
        return self._dist.get_world_size(self._group)

    def allgather(self, data):
        gathered = [None] * self.Get_size()
        self._dist.all_gather_object(gathered, data, group=self._group)
        return tuple(gathered)

    def bcast(self, data, root):
        """Broadcast from the group's rank ``root``."""
        objects = [data]
        source = self._dist.get_global_rank(self._group, root) if self._group is not None else root
        self._dist.broadcast_object_list(objects, src=source, group=self._group)
        return objects[0]

    def barrier(self):
        self._dist.barrier(group=self._group)

    def Split(self, color, key):
        raise UnsupportedError("flashinfer.comm.mnnvl.TorchDistBackend.Split: ignis's communicator never splits "
                               "its group")


class MnnvlConfig:
    """FlashInfer's MNNVL configuration; not implemented (raises)."""

    def __init__(self, *args, **kwargs):
        raise UnsupportedError("flashinfer.comm.mnnvl.MnnvlConfig: " + _MNNVL)


class MnnvlMemory:
    """FlashInfer's MNNVL memory; not implemented (raises)."""

    def __init__(self, *args, **kwargs):
        raise UnsupportedError("flashinfer.comm.mnnvl.MnnvlMemory: " + _MNNVL)


def is_mnnvl_fabric_supported(device_idx):
    """Whether MNNVL fabric handles work on the device: never under ignis."""
    return False


def is_multicast_supported(device_idx):
    """Whether NVLink multicast is usable: ignis never uses it, so False."""
    return False
