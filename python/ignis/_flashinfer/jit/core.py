"""flashinfer.jit.core under the switch: ``check_cuda_arch``, FlashInfer's "can kernels run on this
GPU?" gate, answered for ignis: its CUDA backend must be built and the current CUDA device (PyTorch's
current device, else device 0) must run one of the build's targets (``ignis.build_info()``, compiled
as SASS only: ``sm_XYa`` runs on compute capability X.Y exactly, ``sm_XY`` on X.Y' with Y' >= Y).
Raises RuntimeError, as FlashInfer does, when it cannot."""

import re
import sys

import ignis


def check_cuda_arch():
    """Raise RuntimeError unless ignis' CUDA kernels can run on the current CUDA device."""
    targets = re.search(r"cuda \[([^\]]*)\]", ignis.build_info())
    if targets is None or ignis.cuda_device_count() == 0:
        raise RuntimeError("ignis cannot run CUDA kernels here: %s, %d CUDA devices"
                           % (ignis.build_info(), ignis.cuda_device_count()))
    torch = sys.modules.get("torch")
    index = torch.cuda.current_device() if torch is not None and torch.cuda.is_available() else 0
    major, minor = divmod(ignis.device_info("cuda", index)["compute_capability"], 10)
    for target in targets.group(1).split(","):
        arch = re.fullmatch(r"sm_(\d+)(\d)(a?)", target.strip())
        if arch and int(arch.group(1)) == major and (
                int(arch.group(2)) == minor if arch.group(3) else int(arch.group(2)) <= minor):
            return
    raise RuntimeError("ignis was built for %s, which cannot run on CUDA device %d (compute capability %d.%d)"
                       % (targets.group(1), index, major, minor))
