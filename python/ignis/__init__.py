"""ignis: the kernel library of an LLM serving step, from Python.

The functions have FlashInfer's names and arguments, so an engine switches by changing an import
(``import ignis as flashinfer`` for the ops listed in ``__all__``), or without any edit through the
switch (:mod:`ignis.switch`: with ``IGNIS_AS_FLASHINFER=1`` and no FlashInfer installed, ``import
flashinfer`` and its submodules load ignis' FlashInfer namespace). They take any array that
supports DLPack (``__dlpack__`` / ``__dlpack_device__``: PyTorch, NumPy, CuPy, JAX, ...), on the
host (CPU backend) or on a CUDA device (CUDA backend), and depend on no framework. Outputs that
are not given are allocated by the input's framework (see :mod:`ignis._alloc`).

Every op takes a keyword-only ``stream=``: an int ``cudaStream_t``, or an object with
``.cuda_stream`` (PyTorch) or ``.ptr`` (CuPy). Without it, CUDA work goes to the current stream of
the input's framework (PyTorch's ``torch.cuda.current_stream(device)``, CuPy's current stream),
else to the default stream. FlashInfer's ``enable_pdl`` is accepted; on Hopper ignis always uses
programmatic dependent launch (``IGNIS_DISABLE_PDL=1`` turns it off).

Errors raise subclasses of :class:`ignis.Error` that also derive from the matching built-in
exception (ValueError, TypeError, NotImplementedError, RuntimeError); see :mod:`ignis._errors`.
"""

from . import (_ext, activation, cascade, decode, fused_moe, gemm, mla, norm, page, prefill, quantization, rope,
               sampling, switch)
from . import comm, fused_moe_routing
from ._errors import (
    ArgumentTypeError,
    BackendUnavailableError,
    CudaError,
    DtypeError,
    Error,
    InsufficientWorkspaceError,
    InternalError,
    InvalidArgumentError,
    PeerTimeoutError,
    UnsupportedError,
)
from ._errors import STATUS_CLASSES as _STATUS_CLASSES

# Each op module lists its names once, in __all__; the package exports them all.
from .activation import *
from .cascade import *
from .decode import *
from .fused_moe import *
from .gemm import *
from .mla import *
from .norm import *
from .page import *
from .prefill import *
from .quantization import *
from .rope import *
from .sampling import *
from .fused_moe_routing import *

_ext._set_error_classes(_STATUS_CLASSES, ArgumentTypeError, DtypeError)

__version__ = _ext.version()


def version():
    """The version of the loaded ignis library, e.g. ``"0.1.0"``."""
    return _ext.version()


def build_info():
    """One line describing how the loaded library was built (backends, CUDA targets)."""
    return _ext.build_info()


def cuda_device_count():
    """Number of CUDA devices this build can use (0 without the CUDA backend or without a GPU)."""
    return _ext.cuda_device_count()


def device_info(device_type="cuda", device_id=0):
    """The facts ignis knows of a device (``device_type`` "cuda" or "cpu"): a dict of ``name``,
    ``compute_capability`` (major * 10 + minor; 0 for the CPU), ``multiprocessor_count`` (SMs;
    logical cores for the CPU), ``l2_cache_bytes``, ``shared_memory_per_block_optin`` and
    ``global_memory_bytes``. BackendUnavailableError without the CUDA backend or such a GPU."""
    types = {"cuda": _ext.IGNIS_DEVICE_CUDA, "cpu": _ext.IGNIS_DEVICE_CPU}
    if device_type not in types:
        raise InvalidArgumentError("device_type=%r but it must be 'cuda' or 'cpu'" % (device_type,))
    return _ext.device_info(types[device_type], device_id)


__all__ = (norm.__all__ + activation.__all__ + rope.__all__ + page.__all__ + cascade.__all__ + decode.__all__
           + sampling.__all__ + prefill.__all__ + quantization.__all__ + gemm.__all__ + mla.__all__ + fused_moe.__all__
           + fused_moe_routing.__all__
           + ["version", "build_info", "cuda_device_count", "device_info",
              "Error",
              "InvalidArgumentError",
              "DtypeError",
              "UnsupportedError",
              "InsufficientWorkspaceError",
              "CudaError",
              "InternalError",
              "BackendUnavailableError",
              "PeerTimeoutError",
              "ArgumentTypeError",
              ])
