"""ignis: the kernel library of an LLM serving step, from Python.

The functions have FlashInfer's names and arguments, so an engine switches by changing an import
(``import ignis as flashinfer`` for the ops listed in ``__all__``). They take any array that
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

from . import _ext, activation, cascade, decode, norm, page, prefill, quantization, rope, sampling
from ._errors import (
    ArgumentTypeError,
    BackendUnavailableError,
    CudaError,
    DtypeError,
    Error,
    InsufficientWorkspaceError,
    InternalError,
    InvalidArgumentError,
    UnsupportedError,
)
from ._errors import STATUS_CLASSES as _STATUS_CLASSES
from .activation import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul
from .cascade import (
    BatchDecodeWithSharedPrefixPagedKVCacheWrapper,
    BatchPrefillWithSharedPrefixPagedKVCacheWrapper,
    MultiLevelCascadeAttentionWrapper,
    merge_state,
    merge_state_in_place,
    merge_states,
)
from .decode import BatchDecodeWithPagedKVCacheWrapper, single_decode_with_kv_cache
from .norm import fused_add_rmsnorm, gemma_fused_add_rmsnorm, gemma_rmsnorm, layernorm, rmsnorm
from .page import append_paged_kv_cache, get_batch_indices_positions, get_seq_lens
from .prefill import (
    BatchPrefillWithPagedKVCacheWrapper,
    BatchPrefillWithRaggedKVCacheWrapper,
    single_prefill_with_kv_cache,
    single_prefill_with_kv_cache_return_lse,
)
from .quantization import packbits, segment_packbits
from .sampling import (
    chain_speculative_sampling,
    min_p_sampling_from_probs,
    sampling_from_logits,
    sampling_from_probs,
    softmax,
    top_k,
    top_k_mask_logits,
    top_k_renorm_probs,
    top_k_sampling_from_probs,
    top_k_top_p_sampling_from_logits,
    top_k_top_p_sampling_from_probs,
    top_p_renorm_probs,
    top_p_sampling_from_probs,
)
from .rope import (
    apply_llama31_rope,
    apply_llama31_rope_inplace,
    apply_llama31_rope_pos_ids,
    apply_llama31_rope_pos_ids_inplace,
    apply_rope,
    apply_rope_inplace,
    apply_rope_pos_ids,
    apply_rope_pos_ids_inplace,
    apply_rope_with_cos_sin_cache,
    apply_rope_with_cos_sin_cache_inplace,
)

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


# The ops are listed once, in their modules; the package exports them all.
__all__ = (norm.__all__ + activation.__all__ + rope.__all__ + page.__all__ + cascade.__all__ + decode.__all__
           + sampling.__all__ + prefill.__all__ + quantization.__all__
           + ["version", "build_info", "cuda_device_count",
              "Error",
              "InvalidArgumentError",
              "DtypeError",
              "UnsupportedError",
              "InsufficientWorkspaceError",
              "CudaError",
              "InternalError",
              "BackendUnavailableError",
              "ArgumentTypeError",
              ])
